"""An open-loop HTTP load generator: requests sent at a target rate over time, whatever the answers' pace.

Open loop (as wrk2 and Vegeta do, unlike a fixed pool of clients that waits for each answer): the n-th
request of a phase leaves at its scheduled instant, so a slow server sees the queue grow instead of the
load shrinking, and the latencies measured include the waiting a real client would see. Each request runs
on a thread of a bounded pool (``max_inflight``); one that finds the pool full is counted as an error
("client saturated") rather than delayed, which would close the loop again.

A profile is a list of phases (``Step(rps, seconds)``, ``Ramp(from_rps, to_rps, seconds)``); per second of
the run it records the requests sent, answered, failed (status >= 500 or no answer), the latency p50/p95 of
the answered ones, and which replica answered (the ``X-QM-Replica`` header the stable endpoint sets).

Standard library only (urllib), so it runs anywhere; ``bench_serving`` drives it against the stable endpoint.
"""

from __future__ import annotations

import threading
import time
import urllib.error
import urllib.request
from collections import Counter
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

REPLICA_HEADER = "X-QM-Replica"


@dataclass(frozen=True)
class Step:
    """``rps`` requests per second for ``seconds``."""

    rps: float
    seconds: float

    def rate(self, t: float) -> float:
        return self.rps


@dataclass(frozen=True)
class Ramp:
    """From ``from_rps`` to ``to_rps``, linearly, over ``seconds``."""

    from_rps: float
    to_rps: float
    seconds: float

    def rate(self, t: float) -> float:
        return self.from_rps + (self.to_rps - self.from_rps) * min(max(t / self.seconds, 0.0), 1.0)


Phase = Step | Ramp


def schedule(profile: Sequence[Phase]) -> Iterator[float]:
    """The instants (seconds from the start) at which requests leave: the first at once, then each time the
    integral of the rate owes one more, so 2.5 rps sends five requests in two seconds, evenly (0, 0.4, ...)."""
    offset = 0.0
    owed = 1.0  # requests accrued and not yet sent, carried across phases
    tick = 0.001
    for phase in profile:
        for i in range(round(phase.seconds / tick)):
            t = i * tick
            while owed >= 1.0 - 1e-9:
                owed -= 1.0
                yield offset + t
            owed += phase.rate(t) * tick
        offset += phase.seconds


def percentile(values: Sequence[float], q: float) -> float | None:
    """The ``q``-quantile (0..1) by nearest rank; None for no values."""
    if not values:
        return None
    ordered = sorted(values)
    rank = max(int(-(-q * len(ordered) // 1)) - 1, 0)  # ceil(q * n) - 1
    return ordered[min(rank, len(ordered) - 1)]


@dataclass
class Second:
    """What happened to the requests sent during one second of the run."""

    second: int
    sent: int = 0
    ok: int = 0
    errors: int = 0
    latencies_ms: list[float] = field(default_factory=list)
    replicas: Counter[str] = field(default_factory=Counter)
    statuses: Counter[int] = field(default_factory=Counter)

    def summary(self) -> dict[str, Any]:
        return {
            "second": self.second,
            "sent": self.sent,
            "ok": self.ok,
            "errors": self.errors,
            "p50_ms": _round(percentile(self.latencies_ms, 0.5)),
            "p95_ms": _round(percentile(self.latencies_ms, 0.95)),
            "replicas": dict(sorted(self.replicas.items())),
        }


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 1)


@dataclass
class Result:
    seconds: list[Second]

    def window(self, start: float, end: float) -> dict[str, Any]:
        """Totals and latency quantiles of the requests sent in ``[start, end)`` seconds of the run."""
        chosen = [s for s in self.seconds if start <= s.second < end]
        latencies = [ms for s in chosen for ms in s.latencies_ms]
        sent = sum(s.sent for s in chosen)
        statuses: Counter[int] = Counter()
        for s in chosen:
            statuses.update(s.statuses)
        return {
            "sent": sent,
            "ok": sum(s.ok for s in chosen),
            "errors": sum(s.errors for s in chosen),
            "rps": round(sum(s.ok for s in chosen) / max(end - start, 1e-9), 1),
            "p50_ms": _round(percentile(latencies, 0.5)),
            "p95_ms": _round(percentile(latencies, 0.95)),
            #: Answers by HTTP status; 0: no answer (refused, reset, timed out), -1: not sent (client saturated).
            "statuses": {str(code): n for code, n in sorted(statuses.items())},
        }

    def timeline(self) -> list[dict[str, Any]]:
        return [s.summary() for s in self.seconds]


Send = Callable[[], tuple[int, str]]


def http_sender(
    url: str,
    *,
    method: str = "POST",
    body: bytes = b"{}",
    headers: Mapping[str, str] | None = None,
    timeout: float = 30.0,
) -> Send:
    """A ``Send`` that makes one HTTP request and returns (status, the replica that answered); status 0 when
    no answer came (refused, reset, timed out)."""
    all_headers = {"Content-Type": "application/json", **(headers or {})}

    def send() -> tuple[int, str]:
        request = urllib.request.Request(url, data=body if method != "GET" else None, method=method)  # noqa: S310
        for name, value in all_headers.items():
            request.add_header(name, value)
        try:
            with urllib.request.urlopen(request, timeout=timeout) as answer:  # noqa: S310 - http(s) of the bench
                answer.read()
                return answer.status, answer.headers.get(REPLICA_HEADER, "")
        except urllib.error.HTTPError as exc:
            exc.read()
            return exc.code, exc.headers.get(REPLICA_HEADER, "") if exc.headers else ""
        except (OSError, ValueError):
            return 0, ""

    return send


def run(
    send: Send,
    profile: Sequence[Phase],
    *,
    max_inflight: int = 256,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
    on_second: Callable[[int], None] | None = None,
) -> Result:
    """Drive ``send`` along ``profile``; returns what happened per second. ``on_second(n)`` is called as the
    run enters its n-th second (the caller samples the service's replica count there, say)."""
    total = sum(phase.seconds for phase in profile)
    seconds = [Second(i) for i in range(int(-(-total // 1)))]
    lock = threading.Lock()
    slots = threading.BoundedSemaphore(max_inflight)
    start = clock()
    announced = -1

    def one(at: float) -> None:
        bucket = seconds[min(int(at), len(seconds) - 1)]
        began = clock()
        try:
            status, replica = send()
        finally:
            slots.release()
        took = (clock() - began) * 1000
        with lock:
            if 0 < status < 500:
                bucket.ok += 1
                bucket.latencies_ms.append(took)
            else:
                bucket.errors += 1
            bucket.statuses[status] += 1
            if replica:
                bucket.replicas[replica] += 1

    with ThreadPoolExecutor(max_workers=max_inflight, thread_name_prefix="loadgen") as pool:
        for at in schedule(profile):
            wait = start + at - clock()
            if wait > 0:
                sleep(wait)
            now_second = int(at)
            while on_second is not None and announced < now_second:
                announced += 1
                on_second(announced)
            bucket = seconds[min(now_second, len(seconds) - 1)]
            with lock:
                bucket.sent += 1
            if not slots.acquire(blocking=False):
                with lock:
                    bucket.errors += 1
                    bucket.statuses[-1] += 1  # client saturated
                continue
            pool.submit(one, at)
        while on_second is not None and announced < len(seconds) - 1:
            wait = start + announced + 1 - clock()
            if wait > 0:
                sleep(wait)
            announced += 1
            on_second(announced)
    return Result(seconds)
