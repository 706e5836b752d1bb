"""What the data plane knows and decides, without Django or I/O: the routing table it is handed, each service's
gate (requests in flight, those waiting their turn, a token bucket), and the order in which it tries replicas.

The table is rebuilt from the database about once a second (``source.table``) and replaced whole; gates live as
long as the process and are keyed by service id, so a rebuilt table never resets what is in flight.
"""

from __future__ import annotations

import itertools
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field, replace

#: Methods a request may be sent with to a second replica when the first refused the connection.
IDEMPOTENT = frozenset({"GET", "HEAD", "OPTIONS", "PUT", "DELETE"})
#: Headers that belong to one connection, not to the message (RFC 9110 §7.6.1), and ones set anew on each hop.
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
#: The caller's credentials: checked here, never passed on to the team's program.
CREDENTIALS = frozenset({"authorization", "cookie"})


@dataclass(frozen=True)
class Upstream:
    """A ready replica: where it listens and what it runs."""

    replica: int
    url: str
    revision: int


@dataclass(frozen=True)
class Route:
    """A service as the data plane serves it."""

    service: int
    name: str
    public: bool
    stopped: bool
    upstreams: tuple[Upstream, ...] = ()
    #: Its own limits (``Service.max_inflight``, ``max_rps``; None: the data plane's).
    max_inflight: int | None = None
    max_rps: int | None = None


Key = tuple[str, str, str]  # organization slug, team slug, service name


@dataclass(frozen=True)
class Limits:
    """What each service may have of the data plane, and the data plane in all.

    ``max_inflight`` requests of a service at its replicas at once; beyond, up to ``queue_per_service`` wait their
    turn, at most ``queue_seconds``, and never more than ``queue_total`` over all services; a request beyond any
    of these is answered 503 at once. ``max_rps`` (0: none) with a burst of ``burst`` is each service's rate;
    beyond, 429. A service with no ready replica holds its requests (waiting like the others) up to
    ``cold_start_seconds`` while one starts."""

    max_inflight: int = 256
    queue_per_service: int = 100
    queue_total: int = 1000
    queue_seconds: float = 30.0
    max_rps: float = 0.0
    burst: int = 0
    cold_start_seconds: float = 120.0
    timeout_seconds: float = 300.0
    connect_seconds: float = 5.0
    max_body: int = 32 << 20


def own(limits: Limits, max_inflight: int | None, max_rps: int | None) -> Limits:
    """A service's limits: its own where it set them (``Service.max_inflight``, ``max_rps``), never beyond the
    data plane's."""
    inflight = min(max_inflight, limits.max_inflight) if max_inflight else limits.max_inflight
    if not max_rps:
        return replace(limits, max_inflight=inflight)
    rps = min(float(max_rps), limits.max_rps) if limits.max_rps > 0 else float(max_rps)
    return replace(limits, max_inflight=inflight, max_rps=rps, burst=int(rps))  # a second's worth at once


@dataclass
class Bucket:
    """A token bucket: ``rate`` tokens a second, at most ``burst`` kept; no rate, no limit."""

    rate: float
    burst: float
    tokens: float = 0.0
    at: float | None = None

    def take(self, now: float) -> bool:
        if self.rate <= 0:
            return True
        capacity = max(self.burst, self.rate)
        if self.at is None:
            self.tokens, self.at = capacity, now
        self.tokens = min(capacity, self.tokens + (now - self.at) * self.rate)
        self.at = now
        if self.tokens >= 1:
            self.tokens -= 1
            return True
        return False

    def wait(self) -> float:
        """Seconds until the next token (for Retry-After)."""
        return 0.0 if self.rate <= 0 else max(0.0, (1 - self.tokens) / self.rate)


@dataclass
class Gate:
    """One service's requests: how many are at its replicas, and who waits for a turn (oldest first)."""

    limits: Limits
    inflight: int = 0
    waiting: deque[object] = field(default_factory=deque)
    #: Requests holding on while the service has no ready replica (a cold start).
    cold: int = 0
    bucket: Bucket = field(init=False)

    def __post_init__(self) -> None:
        self.bucket = Bucket(self.limits.max_rps, float(self.limits.burst))

    def free(self) -> bool:
        return self.inflight < self.limits.max_inflight

    def adopt(self, limits: Limits) -> None:
        """Take ``limits`` (the service's were changed): what is in flight and waiting stays."""
        if limits != self.limits:
            self.limits = limits
            self.bucket.rate, self.bucket.burst = limits.max_rps, float(limits.burst)


class Chooser:
    """The order to try a service's replicas in: fewest requests in flight from this process first, ties in
    turn (round robin), so one replica never takes every request of a quiet service."""

    def __init__(self) -> None:
        self.inflight: dict[int, int] = {}
        self._turns = itertools.count()

    def order(self, upstreams: Sequence[Upstream]) -> list[Upstream]:
        if len(upstreams) <= 1:
            return list(upstreams)
        turn = next(self._turns)
        rotated = [upstreams[(turn + i) % len(upstreams)] for i in range(len(upstreams))]
        return sorted(rotated, key=lambda u: self.inflight.get(u.replica, 0))  # stable: rotation among ties

    def sent(self, replica: int) -> None:
        self.inflight[replica] = self.inflight.get(replica, 0) + 1

    def done(self, replica: int) -> None:
        left = self.inflight.get(replica, 0) - 1
        if left > 0:
            self.inflight[replica] = left
        else:
            self.inflight.pop(replica, None)


def bearer(header: str) -> str | None:
    """The token of an ``Authorization: Bearer <token>`` header; None without one; "" when it is malformed."""
    if not header:
        return None
    parts = header.split()
    if parts[0].lower() != "bearer":
        return None
    if len(parts) != 2 or not parts[1].isascii() or not parts[1].isprintable():
        return ""
    return parts[1]
