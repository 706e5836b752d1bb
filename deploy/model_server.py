#!/usr/bin/env python3
"""A small HTTP model server that a service replica runs (docs/service-tools.md §The model server).

Standard library only, so any image with Python 3.9+ runs it:

    python3 deploy/model_server.py --port $PORT [--model PATH] [--version V]

``--version`` defaults to ``$QM_MODEL_VERSION`` (the control loop sets ``QM_MODEL_*`` when the service's
revision names a registry model version). The model is, in this order: ``--model`` (or ``$QM_MODEL_PATH``);
the bytes the portal stores, when it does (``$QM_MODEL_URL``), fetched with the replica's job token
(``Authorization: Bearer $QM_JOB_TOKEN``) into ``model.bin`` in its working directory (written to
``model.bin.part``, renamed once whole and verified); else ``$QM_MODEL_URI`` when that is a local path or a
``file://`` URI. With ``$QM_MODEL_SHA256`` set, bytes whose SHA-256 differs are never served: the server stays
up with its health check failing, so the replica never becomes ready. The model file is read once at start:
JSON is kept as the model's parameters (``{"healthy": false}`` marks it bad), anything else is counted in bytes.

- ``GET /health``: 200 ``{"status": "ok"}`` when the model loaded; 500 when the model file says it is bad,
  when it could not be read, or when ``MODEL_SERVER_FAIL_HEALTH=1`` (a bad revision, on purpose).
- ``POST /v1/predict``: a JSON body in; after ``MODEL_LATENCY_MS`` of "compute" (a sleep; default 20) answers
  ``{"model", "version", "replica": "host:port", "output"}``. At most ``--concurrency`` (``MODEL_CONCURRENCY``,
  default 8) predictions run at once; the others wait their turn, as on one accelerator. Bad JSON is a 400.
- ``GET /metrics``: Prometheus text: requests by outcome, in flight, a latency histogram.

The output is deterministic, so tests and the load generator can tell replicas and versions apart by the
answer alone: the input echoed, with the model's ``scale`` (a number in the model's JSON, default 1) times
the sum of the numbers in ``input``.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import socket
import sys
import threading
import time
import urllib.error
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

#: Upper bounds of the latency histogram's buckets, in seconds (Prometheus's defaults, cut at 10 s).
BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
MAX_BODY = 1 << 20


class Model:
    """What the server serves: the file's name, version and parameters, and whether it is fit to serve."""

    def __init__(
        self, path: str | None, version: str | None, *, name: str = "", sha256: str = "", problem: str = ""
    ) -> None:
        self.path = path or ""
        self.name = name or (os.path.basename(path) if path else "echo")
        self.version = version or "0"
        self.params: dict[str, Any] = {}
        self.size = 0
        self.problem = problem
        if not path or problem:
            return
        try:
            with open(path, "rb") as f:
                raw = f.read()
        except OSError as exc:
            self.problem = f"the model file could not be read: {exc.strerror}"
            return
        self.size = len(raw)
        if sha256 and hashlib.sha256(raw).hexdigest() != sha256.lower():
            self.problem = "the model file's SHA-256 is not QM_MODEL_SHA256's"
            return
        try:
            parsed = json.loads(raw)
        except (ValueError, UnicodeDecodeError):
            return  # a binary model: served as it is
        if isinstance(parsed, dict):
            self.params = parsed
            if parsed.get("healthy") is False:
                self.problem = str(parsed.get("reason") or "the model file marks itself unhealthy")

    def predict(self, payload: Any) -> Any:
        values = payload.get("input") if isinstance(payload, dict) else payload
        numbers = _numbers(values)
        scale = self.params.get("scale", 1)
        if not isinstance(scale, (int, float)) or isinstance(scale, bool):
            scale = 1
        return {"input": values, "score": scale * sum(numbers)}


def _numbers(value: Any) -> list[float]:
    if isinstance(value, bool):
        return []
    if isinstance(value, (int, float)):
        return [float(value)]
    if isinstance(value, list):
        return [n for item in value for n in _numbers(item)]
    if isinstance(value, dict):
        return [n for item in value.values() for n in _numbers(item)]
    return []


class Metrics:
    """Counters for ``/metrics``, under one lock (a few increments per request)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.requests: dict[tuple[str, int], int] = {}
        self.inflight = 0
        self.buckets = [0] * len(BUCKETS)
        self.count = 0
        self.total = 0.0

    def started(self) -> None:
        with self.lock:
            self.inflight += 1

    def finished(self, path: str, status: int, seconds: float) -> None:
        with self.lock:
            self.inflight -= 1
            key = (path, status)
            self.requests[key] = self.requests.get(key, 0) + 1
            if path == "/v1/predict" and status == 200:
                self.count += 1
                self.total += seconds
                for i, bound in enumerate(BUCKETS):
                    if seconds <= bound:
                        self.buckets[i] += 1

    def text(self) -> str:
        with self.lock:
            lines = [
                "# HELP model_server_requests_total Requests answered, by path and status.",
                "# TYPE model_server_requests_total counter",
            ]
            for (path, status), n in sorted(self.requests.items()):
                lines.append(f'model_server_requests_total{{path="{path}",status="{status}"}} {n}')
            lines += [
                "# HELP model_server_inflight Requests being answered now.",
                "# TYPE model_server_inflight gauge",
                f"model_server_inflight {self.inflight}",
                "# HELP model_server_predict_seconds Time to answer a prediction.",
                "# TYPE model_server_predict_seconds histogram",
            ]
            for bound, n in zip(BUCKETS, self.buckets, strict=True):
                lines.append(f'model_server_predict_seconds_bucket{{le="{bound}"}} {n}')
            lines.append(f'model_server_predict_seconds_bucket{{le="+Inf"}} {self.count}')
            lines.append(f"model_server_predict_seconds_sum {self.total:.6f}")
            lines.append(f"model_server_predict_seconds_count {self.count}")
        return "\n".join(lines) + "\n"


class Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(
        self, address: tuple[str, int], model: Model, latency_ms: float, concurrency: int, fail_health: bool
    ) -> None:
        super().__init__(address, Handler)
        self.model = model
        self.latency = max(latency_ms, 0.0) / 1000
        self.slots = threading.BoundedSemaphore(max(concurrency, 1))
        self.fail_health = fail_health
        self.metrics = Metrics()
        host = socket.gethostname()
        self.replica = f"{host}:{self.server_address[1]}"


class Handler(BaseHTTPRequestHandler):
    server: Server
    protocol_version = "HTTP/1.1"
    # An answer is written in pieces (status line and headers, then the body): with Nagle's algorithm the body
    # waited for the client's delayed ACK of the headers, 40 ms on every answer of a kept connection.
    disable_nagle_algorithm = True

    def log_message(self, format: str, *args: Any) -> None:
        if os.environ.get("MODEL_SERVER_LOG") == "1":
            super().log_message(format, *args)

    def do_GET(self) -> None:
        self.answer(self.get)

    def do_POST(self) -> None:
        self.answer(lambda path: self.predict() if path == "/v1/predict" else self.missing(path))

    def answer(self, handle: Any) -> None:
        """Count the request in ``/metrics`` before its answer's body is written (``send``): a client that has its
        answer finds it counted. A request that ends without an answer counts as a 500."""
        self.counted_path = self.path.split("?", 1)[0]
        self.counted_at = time.monotonic()
        self.counted = False
        self.server.metrics.started()
        try:
            handle(self.counted_path)
        finally:
            if not self.counted:
                self.count(500)

    def count(self, status: int) -> None:
        self.counted = True
        self.server.metrics.finished(self.counted_path, status, time.monotonic() - self.counted_at)

    def get(self, path: str) -> int:
        if path == "/health":
            return self.health()
        if path == "/metrics":
            return self.send(200, self.server.metrics.text().encode(), "text/plain; version=0.0.4")
        if path == "/":
            return self.json(200, self.describe())
        return self.missing(path)

    def missing(self, path: str) -> int:
        return self.json(404, {"detail": f"no such path: {path}"})

    def describe(self) -> dict[str, Any]:
        model = self.server.model
        return {"model": model.name, "version": model.version, "replica": self.server.replica, "bytes": model.size}

    def health(self) -> int:
        model = self.server.model
        if self.server.fail_health:
            return self.json(500, {"status": "failing", "detail": "MODEL_SERVER_FAIL_HEALTH is set"})
        if model.problem:
            return self.json(500, {"status": "failing", "detail": model.problem})
        return self.json(200, {"status": "ok", **self.describe()})

    def predict(self) -> int:
        length = self.headers.get("Content-Length")
        try:
            size = int(length or "0")
        except ValueError:
            return self.json(400, {"detail": "Content-Length is not a number"})
        if size > MAX_BODY:
            return self.json(413, {"detail": f"the body is over {MAX_BODY} bytes"})
        raw = self.rfile.read(size) if size else b""
        try:
            payload = json.loads(raw) if raw else {}
        except (ValueError, UnicodeDecodeError):
            return self.json(400, {"detail": "the body is not JSON"})
        model = self.server.model
        if model.problem:
            return self.json(503, {"detail": model.problem})
        with self.server.slots:
            if self.server.latency:
                time.sleep(self.server.latency)
            output = model.predict(payload)
        return self.json(200, {**self.describe(), "output": output})

    def json(self, status: int, body: Any) -> int:
        return self.send(status, json.dumps(body).encode(), "application/json")

    def send(self, status: int, body: bytes, content_type: str) -> int:
        self.count(status)
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
        return status


def fetch(url: str, token: str, sha256: str, into: str, tries: int = 3) -> tuple[str | None, str]:
    """The model's bytes from the portal, in the file ``into`` once whole and verified: (its path, "") or
    (None, what went wrong). A failed transfer is tried again (``tries`` in all, a second apart)."""
    if not url.startswith(("http://", "https://")):
        return None, "QM_MODEL_URL is not an http(s) address"
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    request = urllib.request.Request(url, headers=headers)  # noqa: S310 - http(s) only, checked above
    problem = ""
    for attempt in range(tries):
        if attempt:
            time.sleep(1.0)
        digest = hashlib.sha256()
        try:
            with urllib.request.urlopen(request, timeout=60) as answer, open(into + ".part", "wb") as out:  # noqa: S310
                while chunk := answer.read(1 << 20):
                    digest.update(chunk)
                    out.write(chunk)
        except (OSError, urllib.error.URLError) as exc:
            problem = f"the model could not be fetched from QM_MODEL_URL: {exc}"
            continue
        if sha256 and digest.hexdigest() != sha256.lower():
            os.unlink(into + ".part")
            return None, "the fetched model's SHA-256 is not QM_MODEL_SHA256's: not served"
        os.replace(into + ".part", into)
        return into, ""
    return None, problem


def load_model(path: str | None, version: str | None) -> Model:
    """The model to serve (the module's order), checked against ``QM_MODEL_SHA256`` when that is set."""
    sha256 = os.environ.get("QM_MODEL_SHA256", "")
    name = os.environ.get("QM_MODEL_NAME", "")
    url = os.environ.get("QM_MODEL_URL", "")
    if path or not url:
        return Model(path or _local_uri(), version, name=name, sha256=sha256)
    fetched, problem = fetch(url, os.environ.get("QM_JOB_TOKEN", ""), sha256, os.path.abspath("model.bin"))
    return Model(fetched, version, name=name, sha256=sha256, problem=problem)


def _env_number(name: str, default: float) -> float:
    raw = os.environ.get(name, "")
    if not raw:
        return default
    try:
        return float(raw)
    except ValueError:
        raise SystemExit(f"{name} must be a number, not {raw!r}") from None


def _local_uri() -> str | None:
    """``$QM_MODEL_URI`` if it names a file on this machine."""
    uri = os.environ.get("QM_MODEL_URI", "")
    if uri.startswith("file://"):
        return uri[len("file://") :]
    return uri if uri.startswith("/") else None


def build(argv: list[str] | None = None) -> Server:
    parser = argparse.ArgumentParser(description="Serve a model over HTTP: /health, /v1/predict, /metrics.")
    parser.add_argument("--port", type=int, default=int(os.environ.get("PORT") or 0), help="0: any free port")
    parser.add_argument("--host", default=os.environ.get("MODEL_SERVER_HOST", "0.0.0.0"))  # noqa: S104 - a replica
    parser.add_argument("--model", default=os.environ.get("QM_MODEL_PATH"), help="the model file")
    parser.add_argument("--version", default=os.environ.get("QM_MODEL_VERSION"), help="the model's version")
    parser.add_argument("--latency-ms", type=float, default=_env_number("MODEL_LATENCY_MS", 20))
    parser.add_argument("--concurrency", type=int, default=int(_env_number("MODEL_CONCURRENCY", 8)))
    args = parser.parse_args(argv)
    fail = os.environ.get("MODEL_SERVER_FAIL_HEALTH", "") == "1"
    return Server((args.host, args.port), load_model(args.model, args.version), args.latency_ms, args.concurrency, fail)


def main(argv: list[str] | None = None) -> int:
    server = build(argv)
    where = f"{server.server_address[0]!s}:{server.server_address[1]}"
    print(f"model server: {server.model.name} v{server.model.version} on {where}", file=sys.stderr, flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
