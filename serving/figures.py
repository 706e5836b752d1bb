"""What the service pages and the API show of a service beyond its own fields, read in one place: its replicas
with where they run, what it costs per hour and per 1000 requests, and its load over time.

Read-only; the queries are per service (a list of services reads them for the page's services at once).
Cost comes from the replicas' jobs' attempts (``Attempt.cost_per_hour``, priced at admission, as
``scheduler/costs.py`` counts a job's cost): per hour, the live attempts' prices summed; per 1000 requests,
what the attempts cost over the last hour divided by the requests the endpoint counted in that hour.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from decimal import Decimal
from typing import Any

from django.conf import settings
from django.db.models import Count, Q, Sum
from django.utils import timezone

from scheduler.models import Assignment, Attempt
from serving.models import Replica, Service, ServiceSample

HOUR = timedelta(hours=1)
SECONDS_PER_HOUR = Decimal(3600)
CENT = Decimal("0.01")
#: Replicas in these states are counted as present (``gone`` ones are history).
PRESENT = (Replica.State.STARTING, Replica.State.READY, Replica.State.UNHEALTHY, Replica.State.DRAINING)


def endpoint_path(service: Service) -> str:
    """The stable endpoint's path for ``service``: ``/serve/<organization>/<team>/<service>/`` (team slugs are
    unique within an organization only)."""
    return f"/serve/{service.team.organization.slug}/{service.team.slug}/{service.name}/"


def endpoint(service: Service) -> str:
    """Where callers reach ``service``: its path at the data plane (``SERVE_PUBLIC_URL``)."""
    return settings.SERVE_PUBLIC_URL + endpoint_path(service)


@dataclass
class ReplicaRow:
    replica: Replica
    cluster: str = ""
    nodes: list[str] = field(default_factory=list)
    cost_per_hour: Decimal = Decimal(0)

    @property
    def since(self) -> datetime:
        return self.replica.ready_at or self.replica.created_at


def replica_rows(service: Service, *, include_gone: bool = False) -> list[ReplicaRow]:
    """The service's replicas (present ones, newest first; ``include_gone``: all), each with the cluster and
    nodes its job's live attempt holds."""
    replicas = Replica.objects.filter(service=service).select_related("revision", "job").order_by("-pk")
    if not include_gone:
        replicas = replicas.filter(state__in=PRESENT)
    rows = {r.job_id: ReplicaRow(r) for r in replicas}
    live = Attempt.objects.filter(job_id__in=rows, ended_at__isnull=True).select_related("cluster")
    for attempt in live:
        row = rows[attempt.job_id]
        row.cluster = attempt.cluster.name
        row.cost_per_hour = attempt.cost_per_hour
    held = Assignment.objects.filter(attempt__job_id__in=rows, attempt__ended_at__isnull=True).select_related("node")
    for assignment in held.order_by("node__name"):
        rows[assignment.attempt.job_id].nodes.append(assignment.node.name)
    return list(rows.values())


def cost_per_hour(services: Iterable[Service]) -> dict[int, Decimal]:
    """Per service: the price per hour of its replicas' live attempts."""
    ids = [s.pk for s in services]
    totals: dict[int, Decimal] = dict.fromkeys(ids, Decimal(0))
    rows = (
        Attempt.objects.filter(job__replica__service_id__in=ids, ended_at__isnull=True)
        .values("job__replica__service_id")
        .annotate(total=Sum("cost_per_hour"))
    )
    for row in rows:
        totals[row["job__replica__service_id"]] = Decimal(row["total"] or 0).quantize(CENT)
    return totals


def cost_last_hour(service: Service, now: datetime | None = None) -> Decimal:
    """What the service's replicas cost over the hour up to ``now``."""
    now = now or timezone.now()
    start = now - HOUR
    attempts = Attempt.objects.filter(job__replica__service=service, admitted_at__lt=now).filter(
        Q(ended_at__isnull=True) | Q(ended_at__gt=start)
    )
    total = Decimal(0)
    for attempt in attempts.only("admitted_at", "ended_at", "cost_per_hour"):
        begin = max(attempt.admitted_at, start)
        end = min(attempt.ended_at or now, now)
        seconds = Decimal(str(max((end - begin).total_seconds(), 0.0)))
        total += attempt.cost_per_hour * seconds / SECONDS_PER_HOUR
    return total


@dataclass(frozen=True)
class LastHour:
    requests: int
    errors: int
    cost: Decimal
    #: Per 1000 requests; None without a request in the hour.
    cost_per_1000: Decimal | None


def last_hour(service: Service, now: datetime | None = None) -> LastHour:
    now = now or timezone.now()
    counted = ServiceSample.objects.filter(service=service, at__gt=now - HOUR, at__lte=now).aggregate(
        requests=Sum("requests"), errors=Sum("errors")
    )
    requests = counted["requests"] or 0
    cost = cost_last_hour(service, now)
    per_1000 = (cost * 1000 / requests).quantize(Decimal("0.0001")) if requests else None
    return LastHour(requests=requests, errors=counted["errors"] or 0, cost=cost.quantize(CENT), cost_per_1000=per_1000)


def latest_samples(services: Iterable[Service]) -> dict[int, ServiceSample]:
    """Per service, its latest sample of the last five minutes (services without one are left out): a few
    dozen rows per service at one sample per control tick."""
    ids = [s.pk for s in services]
    found: dict[int, ServiceSample] = {}
    recent = ServiceSample.objects.filter(service_id__in=ids, at__gte=timezone.now() - timedelta(minutes=5))
    for sample in recent.order_by("-at"):
        found.setdefault(sample.service_id, sample)
    return found


def ready_counts(services: Iterable[Service]) -> dict[int, int]:
    """Per service, how many replicas are ready."""
    counts: dict[int, int] = defaultdict(int)
    rows = (
        Replica.objects.filter(service__in=list(services), state=Replica.State.READY)
        .values("service_id")
        .annotate(n=Count("pk"))
    )
    for row in rows:
        counts[row["service_id"]] = row["n"]
    return counts


def samples_since(service: Service, since: datetime, limit: int = 2000) -> list[ServiceSample]:
    """The service's samples from ``since`` on, oldest first (at most ``limit``, the newest kept)."""
    newest = list(ServiceSample.objects.filter(service=service, at__gte=since).order_by("-at")[:limit])
    newest.reverse()
    return newest


def sample_dict(sample: ServiceSample) -> dict[str, Any]:
    return {
        "at": sample.at,
        "requests": sample.requests,
        "rps": sample.rps,
        "inflight": sample.inflight,
        "p50_ms": sample.p50_ms,
        "p95_ms": sample.p95_ms,
        "errors": sample.errors,
        "replicas_ready": sample.replicas_ready,
        "replicas_desired": sample.replicas_desired,
    }


@dataclass(frozen=True)
class Summary:
    """What a list of services shows of each: replicas ready, the latest load and the price per hour."""

    ready: int
    rps: float | None
    p95_ms: float | None
    cost_per_hour: Decimal


def summaries(services: Iterable[Service]) -> dict[int, Summary]:
    """Per service, its summary: three queries, whatever the number of services."""
    services = list(services)
    ready = ready_counts(services)
    latest = latest_samples(services)
    costs = cost_per_hour(services)
    found = {}
    for service in services:
        sample = latest.get(service.pk)
        found[service.pk] = Summary(
            ready=ready.get(service.pk, 0),
            rps=sample.rps if sample else None,
            p95_ms=sample.p95_ms if sample else None,
            cost_per_hour=costs.get(service.pk, Decimal(0)),
        )
    return found
