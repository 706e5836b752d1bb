"""The load a service carries, as the data plane counts it and the control loop reads it (docs/services.md).

**Counters** live in the Django cache (Redis in production, files in the demo): per service the requests (as
they arrive; a request the data plane retried on another replica counts once), errors (answered with a server
error, 5xx: by a replica, or by the data plane for want of one; a 429 past the service's own rate is not one)
and in-flight requests, and a latency histogram (``BUCKETS_MS``, as they end: p50 and p95
are read from it, to the bucket's upper bound); per replica its in-flight requests (a draining replica is
stopped once it has none). The data plane (``serving/dataplane/``) counts in its own memory (a ``Tally``) and
adds what it counted here once a second (``add``); the control loop reads and subtracts what it read each tick
(``take_load``), so increments made meanwhile are never lost. A ``Tally`` holds no Django: the data plane's
event loop counts without touching the cache.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from django.core.cache import cache

from common import enqueue

#: Upper bounds of the latency histogram's buckets, in milliseconds (the last is open).
BUCKETS_MS = (5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000, 10000, 30000, 60000, 10**9)
#: Counters older than this are forgotten by the cache (the control loop reads them every few seconds).
TTL = 3600


def service_key(service_id: int, what: str) -> str:
    return f"serving:{service_id}:{what}"


def replica_key(replica_id: int) -> str:
    """A replica's requests in flight (the control loop stops a draining replica once it has none)."""
    return f"serving:replica:{replica_id}:inflight"


class Tally:
    """What a process counted since it last handed its counts over (``take``), as increments per counter."""

    def __init__(self) -> None:
        self.counts: Counter[str] = Counter()

    def begin(self, service_id: int, replica_id: int, *, retry: bool = False) -> None:
        """A request sent to a replica: counted as it arrives, so a service slower than its load counts the
        load it is asked to carry (its rps), not the answers it manages. A ``retry`` (the same request, sent on
        to another replica after the first could not be reached) is not counted again."""
        if not retry:
            self.counts[service_key(service_id, "requests")] += 1
        self.counts[service_key(service_id, "inflight")] += 1
        self.counts[replica_key(replica_id)] += 1

    def end(self, service_id: int, replica_id: int, elapsed_ms: float, *, error: bool) -> None:
        self.counts[service_key(service_id, "inflight")] -= 1
        self.counts[replica_key(replica_id)] -= 1
        if error:
            self.counts[service_key(service_id, "errors")] += 1
        bucket = next(i for i, bound in enumerate(BUCKETS_MS) if elapsed_ms <= bound)
        self.counts[service_key(service_id, f"ms{bucket}")] += 1

    def refused(self, service_id: int, *, error: bool = True) -> None:
        """A request the data plane answered itself: with a server error (no replica in time, too many waiting,
        a stopped service), or not (``error=False``: a 429 past the service's own rate, which keeps its
        promise to its callers)."""
        self.counts[service_key(service_id, "requests")] += 1
        if error:
            self.counts[service_key(service_id, "errors")] += 1

    def take(self) -> dict[str, int]:
        """The increments counted so far (none of zero), forgotten here."""
        taken = {key: by for key, by in self.counts.items() if by}
        self.counts.clear()
        return taken


def add(counts: Mapping[str, int]) -> None:
    """Add each increment to its counter in the cache (a counter not there yet is made)."""
    for key, by in counts.items():
        _incr(key, by)


def _incr(key: str, by: int) -> int:
    try:
        return int(cache.incr(key, by))
    except ValueError:  # not there yet (or expired)
        if cache.add(key, by, timeout=TTL):
            return by
        return int(cache.incr(key, by))


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
    keys = [service_key(service_id, n) for n in names]
    found = cache.get_many(keys)
    values = {n: int(found.get(k) or 0) for n, k in zip(names, keys, strict=True)}
    for name in ("requests", "errors", *(f"ms{i}" for i in range(len(BUCKETS_MS)))):
        if values[name]:
            _incr(service_key(service_id, name), -values[name])
    if values["demand"]:
        cache.delete(service_key(service_id, "demand"))
    histogram = [values[f"ms{i}"] for i in range(len(BUCKETS_MS))]
    return Load(
        requests=values["requests"],
        errors=values["errors"],
        inflight=max(values["inflight"], 0),
        p50_ms=_percentile(histogram, 0.5),
        p95_ms=_percentile(histogram, 0.95),
        demand=bool(values["demand"]),
    )


def replicas_busy(replica_ids: Sequence[int]) -> set[int]:
    """The replicas among ``replica_ids`` with a request in flight."""
    found = cache.get_many([replica_key(r) for r in replica_ids])
    return {r for r in replica_ids if int(found.get(replica_key(r)) or 0) > 0}


def record_demand(service_id: int) -> None:
    """A request waits for a replica (the service is at zero): the control loop starts one at its next tick,
    which is asked for now (at most once a second)."""
    cache.set(service_key(service_id, "demand"), 1, timeout=TTL)
    if cache.add(service_key(service_id, "woken"), 1, timeout=1):
        enqueue.send("serving.tasks.control_service", service_id)
