"""The service's SLOs, defined once: each one's objective, its SLI as good/total events in PromQL (for the
Prometheus recording and alerting rules, ``observability/rules.py``) and as a count the portal makes from its
own rows (for the SLO page, which works without Prometheus). docs/operations.md#slos explains them.

Two kinds of SLI:
- **events**: jobs admitted, attempts started, inference requests answered. The portal counts them from jobs,
  attempts and their timeline (a job still waiting past the threshold counts as bad already) and from the
  services' samples; Prometheus from the histograms' buckets at the threshold, and the data plane's requests
  by status class.
- **time**: the loop was not silent, each cluster was freshly synced, minute by minute. Prometheus
  evaluates the collectors' gauges each minute (subqueries); the portal keeps one ``SloSample`` per
  organization, SLO and minute (``observability/actions/sampling.py``, on the beat), and counts a minute without
  a sample as bad for the loop (no sample means no beat, and no beat means no loop).

The error budget is ``1 - objective`` of the events over ``BUDGET_WINDOW``; a burn rate is the error ratio
over a window divided by the budget (1: the budget lasts exactly the 30 days).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.db.models import Count, DurationField, ExpressionWrapper, F, Q, Sum

from observability.models import SloSample
from scheduler.models import Attempt, Job, JobEvent
from scheduler.placement.measure import OVER_QUOTA
from serving.models import ServiceSample
from tenancy.models import Organization

BUDGET_WINDOW = timedelta(days=30)
#: The burn-rate windows of the SLO page (the alerts' long windows).
PAGE_WINDOWS = (("1h", timedelta(hours=1)), ("6h", timedelta(hours=6)), ("3d", timedelta(days=3)))

ADMISSION_SECONDS = 60
START_SECONDS = 300
SYNC_SECONDS = 120
SILENCE_SECONDS = 60

#: (good, total) of an SLO for one organization between two instants.
Counter = Callable[[Organization, datetime, datetime], tuple[int, int]]


@dataclass(frozen=True)
class Slo:
    name: str
    title: str
    description: str
    objective: float
    #: PromQL for good and total events over ``$window`` (a range such as ``5m``), summed over the fleet.
    good: str
    total: str
    count: Counter

    @property
    def alert(self) -> str:
        """Its burn-rate alert's name (and docs/runbook.md's section of it)."""
        return "Slo" + "".join(part.title() for part in self.name.split("_")) + "BudgetBurn"

    @property
    def budget(self) -> float:
        return 1 - self.objective

    def error_ratio(self, window: str) -> str:
        """PromQL for the share of bad events over ``window``."""
        good, total = (q.replace("$window", window) for q in (self.good, self.total))
        return f"1 - ({good}) / ({total})"


# --- the portal's own counts -------------------------------------------------------------------------------


def _seconds(n: int) -> timedelta:
    return timedelta(seconds=n)


def count_admissions(organization: Organization, since: datetime, until: datetime) -> tuple[int, int]:
    """Jobs submitted that fit their quota: admitted the first time within ``ADMISSION_SECONDS`` of submission
    (good), or later, or still waiting longer than that for a reason other than their quota (bad)."""
    limit = _seconds(ADMISSION_SECONDS)
    wait = ExpressionWrapper(F("created_at") - F("job__submitted_at"), output_field=DurationField())
    admitted = (
        JobEvent.objects.filter(
            job__team__organization=organization,
            reason="admitted",
            attempt=1,
            created_at__gte=since,
            created_at__lt=until,
        )
        .exclude(detail__waited_for__in=sorted(OVER_QUOTA))
        .annotate(wait=wait)
        .aggregate(total=Count("pk"), good=Count("pk", filter=Q(wait__lte=limit)))
    )
    late = (
        Job.objects.filter(
            team__organization=organization,
            state=Job.State.PENDING,
            attempt=0,
            submitted_at__gte=since,
            submitted_at__lt=until - limit,
        )
        .exclude(pending_reason__in=sorted(OVER_QUOTA))
        .count()
    )
    return admitted["good"], admitted["total"] + late


def count_starts(organization: Organization, since: datetime, until: datetime) -> tuple[int, int]:
    """Attempts admitted: running within ``START_SECONDS`` (good), or later, or not at all though that time
    has passed (refused, lost, still not running: bad). Attempts cancelled or preempted before they ran, and
    those admitted too recently to tell, are left out."""
    limit = _seconds(START_SECONDS)
    took = ExpressionWrapper(F("started_at") - F("admitted_at"), output_field=DurationField())
    counts = (
        Attempt.objects.filter(job__team__organization=organization, admitted_at__gte=since, admitted_at__lt=until)
        .annotate(took=took)
        .aggregate(
            good=Count("pk", filter=Q(started_at__isnull=False, took__lte=limit)),
            late=Count("pk", filter=Q(started_at__isnull=False, took__gt=limit)),
            never=Count(
                "pk",
                filter=Q(started_at__isnull=True, admitted_at__lt=until - limit)
                & ~Q(outcome__in=[Attempt.Outcome.CANCELLED, Attempt.Outcome.PREEMPTED]),
            ),
        )
    )
    return counts["good"], counts["good"] + counts["late"] + counts["never"]


def count_serving(organization: Organization, since: datetime, until: datetime) -> tuple[int, int]:
    """Requests to the organization's services, as the control loop sampled what the data plane counted: those
    answered without a server error (good) of all (``serving.load``: a 429 past a service's own rate is good,
    a 5xx from a replica or from the data plane for want of one is bad)."""
    sums = ServiceSample.objects.filter(
        service__team__organization=organization, at__gte=since, at__lt=until
    ).aggregate(requests=Sum("requests"), errors=Sum("errors"))
    total = sums["requests"] or 0
    return total - min(sums["errors"] or 0, total), total


def _sampled(name: str, *, missing_is_bad: bool) -> Counter:
    def count(organization: Organization, since: datetime, until: datetime) -> tuple[int, int]:
        rows = SloSample.objects.filter(organization=organization, slo=name, minute__gte=since, minute__lt=until)
        sums = rows.aggregate(good=Sum("good"), total=Sum("total"), minutes=Count("pk"))
        good, total = sums["good"] or 0, sums["total"] or 0
        if missing_is_bad:
            first = SloSample.objects.filter(organization=organization, slo=name).order_by("minute").first()
            if first is not None:
                expected = int((until - max(since, first.minute)).total_seconds() // 60)
                total += max(0, expected - sums["minutes"])
        return good, total

    return count


# --- the SLOs ---------------------------------------------------------------------------------------------

ADMISSION_BUCKET = 'qm_job_admission_wait_seconds_bucket{within_quota="true",le="60.0"}'
START_BUCKET = 'qm_job_start_wait_seconds_bucket{le="300.0"}'

SLOS: tuple[Slo, ...] = (
    Slo(
        name="admission",
        title="Jobs admitted within 60 s",
        description="99% of jobs that fit their quota are admitted within 60 s of their submission.",
        objective=0.99,
        good=f"sum(rate({ADMISSION_BUCKET}[$window]))",
        total='sum(rate(qm_job_admission_wait_seconds_count{within_quota="true"}[$window]))',
        count=count_admissions,
    ),
    Slo(
        name="start",
        title="Admitted jobs running within 5 min",
        description="99% of admitted jobs are running on their cluster within 5 minutes of their admission.",
        objective=0.99,
        good=f"sum(rate({START_BUCKET}[$window]))",
        total="sum(rate(qm_job_start_wait_seconds_count[$window]))",
        count=count_starts,
    ),
    Slo(
        name="cluster_sync",
        title="Clusters synced within 2 min",
        description="Every cluster's inventory is at most 2 minutes old, 99% of the cluster-minutes.",
        objective=0.99,
        good=f"sum_over_time((count(qm_cluster_sync_age_seconds <= {SYNC_SECONDS}) or vector(0))[$window:1m])",
        total="sum_over_time(count(qm_cluster_sync_age_seconds)[$window:1m])",
        count=_sampled("cluster_sync", missing_is_bad=False),
    ),
    Slo(
        name="loop",
        title="Placement loop never silent over 1 min",
        description="The placement loop is silent for at most 1 minute while jobs wait, 99.9% of the minutes.",
        objective=0.999,
        good=f"sum_over_time((count(qm_placement_loop_silence_seconds <= {SILENCE_SECONDS}) or vector(0))[$window:1m])",
        total="sum_over_time(count(qm_placement_loop_silence_seconds)[$window:1m])",
        count=_sampled("loop", missing_is_bad=True),
    ),
    Slo(
        name="serving",
        title="Inference requests answered",
        description="99.5% of the requests to services' endpoints are answered without a server error (a 5xx from "
        "a replica, or from the data plane for want of one); a 429 past a service's own rate keeps its promise.",
        objective=0.995,
        good='sum(rate(qm_dataplane_request_duration_seconds_count{status!="5xx"}[$window]))',
        total="sum(rate(qm_dataplane_request_duration_seconds_count[$window]))",
        count=count_serving,
    ),
)

BY_NAME = {slo.name: slo for slo in SLOS}


# --- error budgets --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Burn:
    window: str
    good: int
    total: int
    rate: float | None  # None: no events in the window


@dataclass(frozen=True)
class Standing:
    """Where one SLO stands for one organization: over the budget window and its burn rates."""

    slo: Slo
    good: int
    total: int
    #: The share of the 30 days' error budget left (negative: overspent); None without events.
    budget_left: float | None
    burns: tuple[Burn, ...]

    @property
    def attained_percent(self) -> float | None:
        return 100 * self.good / self.total if self.total else None

    @property
    def budget_left_percent(self) -> float | None:
        return None if self.budget_left is None else 100 * self.budget_left

    @property
    def objective_percent(self) -> float:
        return 100 * self.slo.objective


def _rate(slo: Slo, good: int, total: int) -> float | None:
    return (total - good) / total / slo.budget if total else None


def standing(slo: Slo, organization: Organization, now: datetime) -> Standing:
    good, total = slo.count(organization, now - BUDGET_WINDOW, now)
    burns = []
    for name, span in PAGE_WINDOWS:
        g, t = slo.count(organization, now - span, now)
        burns.append(Burn(name, g, t, _rate(slo, g, t)))
    spent = _rate(slo, good, total)
    return Standing(slo, good, total, None if spent is None else 1 - spent, tuple(burns))


def standings(organization: Organization, now: datetime) -> list[Standing]:
    return [standing(slo, organization, now) for slo in SLOS]
