"""The live test server (pytest-django's ``live_server``: Django's threaded development server), made to behave as
the production web server (gunicorn) does in two ways the suite meets; ``tests/conftest.py`` installs it.

- **An answer leaves without waiting.** The server writes an answer in pieces (status line and headers, then
  the body). With Nagle's algorithm on, the second piece waited for the first to be acknowledged, and a client
  that keeps its connection (Schemathesis, Chromium, a ``requests`` session) acknowledges late (a delayed ACK,
  about 40 ms): 58 ms for a session's GET of ``/api/v1/me/`` where 13 ms was due, and most of the API fuzzing's
  time. ``TCP_NODELAY`` sends each piece at once.
- **A chunked request body is read.** Django's server reads a body by its ``Content-Length`` only; one sent
  ``Transfer-Encoding: chunked`` (Schemathesis sends form bodies so) reached the view empty, and its chunks,
  left on the kept connection, were read as the next request ("Bad request syntax ('0')", answered the
  HTTP/0.9 way, with no status line): a network error for the client. Here the chunks are read and decoded,
  and the view gets the body with its length, as behind gunicorn.
"""

from __future__ import annotations

from typing import Any, BinaryIO

from django.core.servers.basehttp import ThreadedWSGIServer
from django.test.testcases import LiveServerThread, QuietWSGIRequestHandler

#: The longest chunked body read (the portal refuses larger bodies anyway).
MAX_BODY = 64 << 20


class _Input:
    """The connection's input, with a decoded chunked body served ahead of what follows it."""

    def __init__(self, stream: BinaryIO) -> None:
        self.stream, self.pending = stream, b""

    def __getattr__(self, name: str) -> Any:  # close, closed, fileno: the stream's own
        return getattr(self.stream, name)

    def read(self, size: int = -1) -> bytes:
        if self.pending:
            taken = self.pending if size < 0 else self.pending[:size]
            self.pending = self.pending[len(taken) :]
            return taken
        return self.stream.read(size)

    def readline(self, size: int = -1) -> bytes:
        if self.pending:
            end = self.pending.find(b"\n") + 1 or len(self.pending)
            taken = self.pending[: end if size < 0 else min(end, size)]
            self.pending = self.pending[len(taken) :]
            return taken
        return self.stream.readline(size)

    def dechunk(self) -> int:
        """Read a chunked body off the stream (RFC 9112 §7.1); keep it to be read; its length."""
        body = bytearray()
        while True:
            size = int(self.stream.readline(1024).split(b";", 1)[0].strip() or b"0", 16)
            if size == 0:
                while self.stream.readline(8192).strip():  # trailer fields, then the empty line
                    pass
                break
            body += self.stream.read(size)
            self.stream.readline(8)  # the chunk's CRLF
            if len(body) > MAX_BODY:
                raise ValueError("chunked body too large")
        self.pending = bytes(body)
        return len(body)


class _Handler(QuietWSGIRequestHandler):
    disable_nagle_algorithm = True

    def setup(self) -> None:
        super().setup()
        self.rfile = _Input(self.rfile)  # type: ignore[assignment]

    def get_environ(self) -> dict[str, Any]:
        environ: dict[str, Any] = super().get_environ()
        if "chunked" in self.headers.get("Transfer-Encoding", "").lower():
            environ["CONTENT_LENGTH"] = str(self.rfile.dechunk())  # type: ignore[attr-defined]
            environ.pop("HTTP_TRANSFER_ENCODING", None)
        return environ


class _Server(ThreadedWSGIServer):
    def __init__(self, address: Any, handler: Any, *args: Any, **kwargs: Any) -> None:
        super().__init__(address, _Handler, *args, **kwargs)


def install() -> None:
    """Every live server of the run (pytest-django's and Django's) serves through ``_Handler``."""
    LiveServerThread.server_class = _Server  # type: ignore[attr-defined]  # a class attribute stubs leave out
