"""The endpoint's router: which replica answers a request, the proxying, and the load it counts.

**Counters** live in the Django cache (Redis in production, files in the demo), a few increments per request:
per service the requests (as they arrive), errors and in-flight requests, and a latency histogram
(``BUCKETS_MS``, as they end: p50 and p95 are read from it, to the bucket's upper bound); per replica its
in-flight requests. The control loop reads and subtracts what it read each tick (``take_load``), so
increments made meanwhile are never lost.

**Choice.** The ready replicas (draining ones get nothing new), least in-flight first; ties go round robin.
A connection failure is retried once on another replica for idempotent methods.

**Proxying** goes through the outbound policy for replicas (``common.outbound.for_replicas``); the answer is
streamed back with hop-by-hop headers dropped and ``X-QM-Replica`` naming the replica.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import requests
from django.conf import settings
from django.core.cache import cache

from common import enqueue, outbound
from serving.models import Replica

log = logging.getLogger(__name__)

#: Upper bounds of the latency histogram's buckets, in milliseconds (the last is open).
BUCKETS_MS = (5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000, 10000, 30000, 60000, 10**9)
#: Headers that belong to one connection, not to the message (RFC 9110 §7.6.1), and ones we set ourselves.
HOP_BY_HOP = frozenset(
    {
        "connection",
        "keep-alive",
        "proxy-authenticate",
        "proxy-authorization",
        "te",
        "trailer",
        "transfer-encoding",
        "upgrade",
        "proxy-connection",
        "content-length",
        "host",
    }
)
IDEMPOTENT = frozenset({"GET", "HEAD", "OPTIONS", "PUT", "DELETE"})
CHUNK = 64 * 1024
#: Counters older than this are forgotten by the cache (the control loop reads them every few seconds).
TTL = 3600


def _key(service_id: int, what: str) -> str:
    return f"serving:{service_id}:{what}"


def _incr(key: str, by: int = 1) -> int:
    try:
        return int(cache.incr(key, by))
    except ValueError:  # not there yet (or expired)
        if cache.add(key, by, timeout=TTL):
            return by
        return int(cache.incr(key, by))


# --- counting -----------------------------------------------------------------------------------------------


def begin(service_id: int, replica_id: int) -> None:
    """A request sent to a replica: counted as it arrives, so a service slower than its load counts the
    load it is asked to carry (its rps), not the answers it manages."""
    _incr(_key(service_id, "requests"))
    _incr(_key(service_id, "inflight"))
    _incr(f"serving:replica:{replica_id}:inflight")


def end(service_id: int, replica_id: int, elapsed_ms: float, *, error: bool) -> None:
    _incr(_key(service_id, "inflight"), -1)
    _incr(f"serving:replica:{replica_id}:inflight", -1)
    if error:
        _incr(_key(service_id, "errors"))
    bucket = next(i for i, bound in enumerate(BUCKETS_MS) if elapsed_ms <= bound)
    _incr(_key(service_id, f"ms{bucket}"))


def refused(service_id: int) -> None:
    """A request answered by the endpoint itself with an error (no replica, or none answered)."""
    _incr(_key(service_id, "requests"))
    _incr(_key(service_id, "errors"))


@dataclass(frozen=True)
class Load:
    """What a service carried since the last ``take_load``."""

    requests: int
    errors: int
    inflight: int
    p50_ms: float | None
    p95_ms: float | None
    demand: bool


def _percentile(counts: Sequence[int], q: float) -> float | None:
    total = sum(counts)
    if not total:
        return None
    rank = q * total
    seen = 0
    for bound, count in zip(BUCKETS_MS, counts, strict=True):
        seen += count
        if seen >= rank:
            return float(bound)
    return float(BUCKETS_MS[-1])


def take_load(service_id: int) -> Load:
    """Read the service's counters and subtract what was read (in-flight is a level, left as it is)."""
    names = ["requests", "errors", "inflight", "demand", *(f"ms{i}" for i in range(len(BUCKETS_MS)))]
    keys = [_key(service_id, n) for n in names]
    found = cache.get_many(keys)
    values = {n: int(found.get(k) or 0) for n, k in zip(names, keys, strict=True)}
    for name in ("requests", "errors", *(f"ms{i}" for i in range(len(BUCKETS_MS)))):
        if values[name]:
            _incr(_key(service_id, name), -values[name])
    if values["demand"]:
        cache.delete(_key(service_id, "demand"))
    histogram = [values[f"ms{i}"] for i in range(len(BUCKETS_MS))]
    return Load(
        requests=values["requests"],
        errors=values["errors"],
        inflight=max(values["inflight"], 0),
        p50_ms=_percentile(histogram, 0.5),
        p95_ms=_percentile(histogram, 0.95),
        demand=bool(values["demand"]),
    )


def record_demand(service_id: int) -> None:
    """A request waits for a replica (the service is at zero): the control loop starts one at its next tick,
    which is asked for now (at most once a second)."""
    cache.set(_key(service_id, "demand"), 1, timeout=TTL)
    if cache.add(_key(service_id, "woken"), 1, timeout=1):
        enqueue.send("serving.tasks.control_service", service_id)


# --- choosing and proxying ----------------------------------------------------------------------------------


def ready_replicas(service_id: int) -> list[Replica]:
    ready = Replica.objects.filter(service_id=service_id, state=Replica.State.READY).exclude(url="")
    return list(ready.select_related("revision").order_by("pk"))


def order(service_id: int, replicas: Sequence[Replica]) -> list[Replica]:
    """The replicas in the order to try them: least in-flight first, ties taken in turn (round robin)."""
    if len(replicas) <= 1:
        return list(replicas)
    found = cache.get_many([f"serving:replica:{r.pk}:inflight" for r in replicas])
    inflight = {r.pk: int(found.get(f"serving:replica:{r.pk}:inflight") or 0) for r in replicas}
    turn = _incr(_key(service_id, "turn"))
    rotated = [replicas[(turn + i) % len(replicas)] for i in range(len(replicas))]
    return sorted(rotated, key=lambda r: inflight[r.pk])  # a stable sort keeps the rotation among ties


def wait_for_ready(service_id: int, seconds: float) -> list[Replica]:
    """Ready replicas, waiting up to ``seconds`` for the first (a cold start)."""
    deadline = time.monotonic() + seconds
    while True:
        replicas = ready_replicas(service_id)
        if replicas or time.monotonic() >= deadline:
            return replicas
        time.sleep(min(0.25, max(0.0, deadline - time.monotonic())))


@dataclass
class Answer:
    """A replica's answer, to stream back (``body`` ends the counting when it is exhausted or closed)."""

    status: int
    headers: list[tuple[str, str]]
    body: _Stream
    replica: Replica


def forward_headers(meta: dict[str, Any]) -> dict[str, str]:
    """The request's end-to-end headers from a WSGI environ, without the caller's credentials."""
    headers: dict[str, str] = {}
    for key, value in meta.items():
        if key.startswith("HTTP_"):
            name = key[5:].replace("_", "-").lower()
        elif key in ("CONTENT_TYPE", "CONTENT_LENGTH"):
            name = key.replace("_", "-").lower()
        else:
            continue
        if name in HOP_BY_HOP or name in ("authorization", "cookie") or not value:
            continue
        headers[name] = str(value)
    return headers


def proxy(
    service_id: int,
    replicas: Sequence[Replica],
    method: str,
    path: str,
    query: str,
    headers: dict[str, str],
    body: bytes,
) -> Answer | None:
    """Send the request to the first replica that takes the connection (the second try only for idempotent
    methods); None when none did."""
    tries = order(service_id, replicas)[: 2 if method in IDEMPOTENT else 1]
    session = outbound.for_replicas().session()
    timeout = (5, float(getattr(settings, "SERVE_TIMEOUT_SECONDS", 300)))
    for replica in tries:
        url = replica.url.rstrip("/") + "/" + path.lstrip("/") + (f"?{query}" if query else "")
        begin(service_id, replica.pk)
        started = time.monotonic()
        try:
            response = session.request(
                method, url, headers=headers, data=body or None, stream=True, timeout=timeout, allow_redirects=False
            )
        except (requests.ConnectionError, requests.Timeout, outbound.PolicyRefusal) as error:
            end(service_id, replica.pk, (time.monotonic() - started) * 1000, error=True)
            log.info("service %s: replica %s did not answer: %s", service_id, replica.pk, error)
            if isinstance(error, requests.Timeout) and not isinstance(error, requests.ConnectTimeout):
                return None  # it took the request: another try could run it twice
            continue
        kept = [(k, v) for k, v in response.headers.items() if k.lower() not in HOP_BY_HOP]
        stream = _Stream(service_id, replica, response, started, session)
        return Answer(response.status_code, kept, stream, replica)
    session.close()
    return None


class _Stream:
    """The replica's answer as an iterator of chunks; closing it (or reaching its end) ends the counting once,
    whether or not it was read at all."""

    def __init__(
        self,
        service_id: int,
        replica: Replica,
        response: requests.Response,
        started: float,
        session: requests.Session,
    ) -> None:
        self.service_id, self.replica, self.response, self.started = service_id, replica, response, started
        self.session = session
        self.error = response.status_code >= 500
        self.chunks = response.raw.stream(CHUNK, decode_content=False)
        self.ended = False

    def __iter__(self) -> Iterator[bytes]:
        return self

    def __next__(self) -> bytes:
        try:
            return next(self.chunks)
        except StopIteration:
            self.close()
            raise
        except Exception:  # the replica went away mid-answer
            self.error = True
            self.close()
            raise

    def close(self) -> None:
        if self.ended:
            return
        self.ended = True
        self.response.close()
        self.session.close()
        end(self.service_id, self.replica.pk, (time.monotonic() - self.started) * 1000, error=self.error)
