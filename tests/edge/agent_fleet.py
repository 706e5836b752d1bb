"""A faulty network link for the device agents' tests: a TCP relay in front of the live portal that can drop
every connection (the robot out of radio range) or cut each response after N bytes (a download that breaks
off). The portal and the agent on either side are the real ones."""

from __future__ import annotations

import contextlib
import socket
import threading


class FaultyLink:
    def __init__(self, upstream_port: int) -> None:
        self.upstream_port = upstream_port
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.down = False
        self.cut_after: int | None = None  # bytes of a response before the link breaks
        self.cuts = 0
        self.open: set[socket.socket] = set()
        self.lock = threading.Lock()
        threading.Thread(target=self._accept, daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def go_down(self) -> None:
        """Drop every connection, held long polls included, and every new one until ``come_back``."""
        self.down = True
        with self.lock:
            for sock in self.open:
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)

    def come_back(self) -> None:
        self.down = False

    def close(self) -> None:
        self.go_down()
        self.listener.close()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            if self.down:
                client.close()
                continue
            try:
                upstream = socket.create_connection(("127.0.0.1", self.upstream_port))
            except OSError:
                client.close()
                continue
            with self.lock:
                self.open |= {client, upstream}
            threading.Thread(target=self._pipe, args=(client, upstream, None), daemon=True).start()
            threading.Thread(target=self._pipe, args=(upstream, client, self.cut_after), daemon=True).start()

    def _pipe(self, source: socket.socket, target: socket.socket, limit: int | None) -> None:
        sent = 0
        try:
            while data := source.recv(65536):
                if limit is not None and sent + len(data) > limit:
                    target.sendall(data[: limit - sent])
                    self.cuts += 1
                    break
                target.sendall(data)
                sent += len(data)
        except OSError:
            pass
        finally:
            for sock in (source, target):
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)
                sock.close()
                with self.lock:
                    self.open.discard(sock)
