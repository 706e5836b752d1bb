"""An organization's demand and capacity history from the database, and its forecasts (``forecast.py`` has the
definitions and the arithmetic), cached per organization, horizon and day for five minutes.

The database does the sums: usage and capacity records GROUP BY flavor and day (on the ``(organization, day)``
indexes); waits GROUP BY flavor, size (workers, accelerators, share) and first and last UTC day, with the
parts of the first and last day and the count summed, so Python only spreads each group over its days.
"""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from typing import Any

from django.core.cache import cache
from django.db.models import (
    Case,
    Count,
    DurationField,
    ExpressionWrapper,
    F,
    OuterRef,
    Q,
    QuerySet,
    Subquery,
    Sum,
    TextField,
    Value,
    When,
)
from django.db.models.expressions import Combinable
from django.db.models.fields.json import KeyTextTransform
from django.db.models.functions import Coalesce, Greatest, NullIf, TruncDate, TruncDay
from django.utils import timezone

from billing.actions.capacity_plan import plan_of
from billing.attribution import product_sum
from billing.forecast import (
    HORIZONS,
    FlavorForecast,
    FlavorHistory,
    cache_key,
    carried,
    days_between,
    filled,
    forecast_flavor,
)
from billing.models import CapacityRecord, UsageRecord
from clusters.models import AcceleratorType, Node
from scheduler.models import Attempt, Job
from tenancy import policy
from tenancy.models import Organization, Team

#: How far back history is read.
HISTORY_DAYS = 3 * 365
CACHE_SECONDS = 300
DAY = timedelta(days=1)
#: Job states that are waiting now.
WAITING = (Job.State.PENDING, Job.State.REQUEUED)
#: Job states that may have ended while waiting (cancelled, or failed, in the queue).
ENDED = (Job.State.CANCELLED, Job.State.FAILED)


def _job_flavor(prefix: str, ran_on: Any) -> Any:
    """The flavor of the job at ``prefix`` (see the module's notes): its first asked-for type, else ``ran_on``,
    else its queue's first preferred flavor; NULL when none."""

    def text(expression: Any) -> Any:
        return NullIf(expression, Value(""), output_field=TextField())

    return Coalesce(
        text(KeyTextTransform("0", f"{prefix}accelerator_types")),  # (KT() misreads a path through a relation)
        text(ran_on),
        text(KeyTextTransform("0", f"{prefix}queue__flavor_order")),
        output_field=TextField(),
    )


def _seconds(value: timedelta | None) -> float:
    return value.total_seconds() if value is not None else 0.0


def _waits(
    queryset: QuerySet[Any], start: Any, end: Any, flavor: Any, prefix: str, since: datetime
) -> Iterable[dict[str, Any]]:
    """Waits of ``queryset``'s rows from ``start`` to ``end`` (cut at ``since``), summed by the database per
    flavor, size and first and last UTC day: the whole wait, the part on the first day and on the last."""
    size = (f"{prefix}workers", f"{prefix}accelerators", f"{prefix}accelerator_milli", f"{prefix}team_id")
    one_day = Value(DAY, output_field=DurationField())

    def duration(expression: Combinable) -> Any:
        return Sum(ExpressionWrapper(expression, output_field=DurationField()))

    rows: Iterable[dict[str, Any]] = (
        queryset.annotate(raw_start=start)
        .filter(raw_start__isnull=False)  # (PostgreSQL's GREATEST skips NULLs)
        .annotate(w_start=Greatest("raw_start", Value(since)), w_end=end, w_flavor=flavor)
        .filter(w_end__gt=F("w_start"))
        .annotate(first_day=TruncDate("w_start", tzinfo=UTC), last_day=TruncDate("w_end", tzinfo=UTC))
        .values("w_flavor", "first_day", "last_day", *size)
        .annotate(
            whole=duration(F("w_end") - F("w_start")),
            head=duration(TruncDay("w_start", tzinfo=UTC) + one_day - F("w_start")),
            tail=duration(F("w_end") - TruncDay("w_end", tzinfo=UTC)),
            waits=Count("pk"),
        )
        .order_by()
    )
    return rows


def queued_hours(
    organization: Organization, since: datetime, now: datetime
) -> dict[tuple[str | None, int, date], float]:
    """Accelerator-hours waited per (flavor name, team id, UTC day) from ``since`` to ``now``; flavor None where
    the job names none (the caller's default)."""
    attempts = Attempt.objects.filter(
        job__team__organization=organization, job__accelerators__gt=0, admitted_at__gt=since
    )
    previous_end = Attempt.objects.filter(job=OuterRef("job"), number=OuterRef("number") - 1).values("ended_at")[:1]
    before_attempts = _waits(
        attempts,
        start=Case(When(number=1, then=F("job__submitted_at")), default=Subquery(previous_end)),
        end=F("admitted_at"),
        flavor=_job_flavor("job__", F("flavor")),
        prefix="job__",
        since=since,
    )
    jobs = Job.objects.filter(team__organization=organization, accelerators__gt=0).filter(
        Q(state__in=WAITING) | Q(state__in=ENDED, state_changed_at__gt=since)
    )
    current = Attempt.objects.filter(job=OuterRef("pk"), number=OuterRef("attempt"))
    trailing = _waits(
        jobs,
        start=Case(When(attempt=0, then=F("submitted_at")), default=Subquery(current.values("ended_at")[:1])),
        end=Case(When(state__in=WAITING, then=Value(now)), default=Coalesce("finished_at", "state_changed_at")),
        flavor=_job_flavor("", Subquery(current.values("flavor")[:1])),
        prefix="",
        since=since,
    )
    hours: dict[tuple[str | None, int, date], float] = defaultdict(float)
    for prefix, rows in (("job__", before_attempts), ("", trailing)):
        for row in rows:
            size = row[f"{prefix}workers"] * row[f"{prefix}accelerators"] * row[f"{prefix}accelerator_milli"] / 1000
            flavor, team, first, last = row["w_flavor"], row[f"{prefix}team_id"], row["first_day"], row["last_day"]
            if first == last:
                hours[(flavor, team, first)] += size * _seconds(row["whole"]) / 3600
                continue
            hours[(flavor, team, first)] += size * _seconds(row["head"]) / 3600
            hours[(flavor, team, last)] += size * _seconds(row["tail"]) / 3600
            for day in days_between(first + DAY, last - DAY):
                hours[(flavor, team, day)] += size * row["waits"] * 24
    return dict(hours)


def used_hours(organization: Organization, first: date, last: date) -> dict[tuple[int, int, date], float]:
    """Accelerator-hours used per (flavor id, team id, day), from the usage records."""
    rows = (
        UsageRecord.objects.filter(organization=organization, day__gte=first, day__lte=last)
        .values("flavor_id", "team_id", "day")
        .annotate(milli_seconds=product_sum("seconds", "milli"))
        .order_by()
    )
    return {(r["flavor_id"], r["team_id"], r["day"]): float(r["milli_seconds"]) / 1000 / 3600 for r in rows}


def capacity_hours(organization: Organization, first: date, last: date) -> dict[tuple[int, date], float]:
    """Accelerator-hours present per (flavor id, day), from the capacity records."""
    rows = (
        CapacityRecord.objects.filter(organization=organization, day__gte=first, day__lte=last)
        .values("flavor_id", "day")
        .annotate(accelerator_seconds=product_sum("accelerators", "seconds"))
        .order_by()
    )
    return {(r["flavor_id"], r["day"]): float(r["accelerator_seconds"]) / 3600 for r in rows}


def backlog_hours(organization: Organization) -> dict[tuple[str | None, int], float]:
    """What the jobs waiting now ask for, in accelerator-hours, per (flavor name (None: not named), team id)."""
    current = Attempt.objects.filter(job=OuterRef("pk"), number=OuterRef("attempt")).values("flavor")[:1]
    rows = (
        Job.objects.filter(team__organization=organization, state__in=WAITING, accelerators__gt=0)
        .annotate(w_flavor=_job_flavor("", Subquery(current)))
        .values("w_flavor", "team_id")
        .annotate(asked=product_sum("workers", "accelerators", "accelerator_milli", "time_limit"))
        .order_by()
    )
    return {(r["w_flavor"], r["team_id"]): float(r["asked"]) / 1000 / 3600 for r in rows}


def fleet(organization: Organization) -> dict[str, int]:
    """Accelerators of the present nodes now, per flavor name."""
    rows = (
        Node.objects.filter(cluster__organization=organization, present=True, accelerators__gt=0)
        .exclude(accelerator=None)
        .values("accelerator__name")
        .annotate(total=Sum("accelerators"))
        .order_by()
    )
    return {r["accelerator__name"]: int(r["total"]) for r in rows}


def read_history(organization: Organization, now: datetime, days: int = HISTORY_DAYS) -> list[FlavorHistory]:
    """Each flavor's daily history up to yesterday (at most ``days`` days), by name, with each team's part (by
    the team's name) and the capacity plan's accelerators on each day ahead (``capacity_plan.plan_of``); flavors
    with neither history, a fleet, a backlog nor a plan are left out. Waits and backlog of jobs that name no
    flavor go to the flavor with the most accelerators in the fleet (else the first by name)."""
    today = now.astimezone(UTC).date()
    first, last = today - timedelta(days=days), today - DAY
    since = datetime.combine(first, datetime.min.time(), tzinfo=UTC)
    names = dict(AcceleratorType.objects.filter(organization=organization).values_list("pk", "name"))
    teams = dict(Team.objects.filter(organization=organization).values_list("pk", "name"))
    accelerators = fleet(organization)
    largest = max(sorted(accelerators), key=lambda name: accelerators[name], default=None)
    default = largest or min(names.values(), default="unknown")
    # flavor -> team -> day -> hours
    used: dict[str, dict[str, dict[date, float]]] = defaultdict(lambda: defaultdict(lambda: defaultdict(float)))
    for (flavor_id, team_id, day), hours in used_hours(organization, first, last).items():
        used[names[flavor_id]][teams[team_id]][day] += hours
    capacity: dict[str, dict[date, float]] = defaultdict(dict)
    for (flavor_id, day), hours in capacity_hours(organization, first, last).items():
        capacity[names[flavor_id]][day] = hours
    queued: dict[str, dict[str, dict[date, float]]] = defaultdict(lambda: defaultdict(lambda: defaultdict(float)))
    for (name, team_id, day), hours in queued_hours(organization, since, now).items():
        if first <= day <= last:
            queued[name or default][teams[team_id]][day] += hours
    backlog: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
    for (name, team_id), hours in backlog_hours(organization).items():
        backlog[name or default][teams[team_id]] += hours
    plans = plan_of(organization, today, accelerators)
    histories = []
    for flavor in sorted(set(used) | set(capacity) | set(queued) | set(accelerators) | set(backlog) | set(plans)):
        # A flavor's history starts at its first capacity record or its first day with demand.
        seen = [
            d
            for parts in (used[flavor], queued[flavor])
            for series in parts.values()
            for d, v in series.items()
            if v > 0
        ]
        seen += list(capacity[flavor])
        span = days_between(min(seen), last) if seen else []
        by_team = {
            team: [
                u + q for u, q in zip(filled(span, used[flavor][team]), filled(span, queued[flavor][team]), strict=True)
            ]
            for team in sorted(set(used[flavor]) | set(queued[flavor]))
        }
        histories.append(
            FlavorHistory(
                flavor=flavor,
                days=span,
                used=[sum(v) for v in zip(*(filled(span, s) for s in used[flavor].values()), strict=True)]
                if used[flavor]
                else [0.0] * len(span),
                queued=[sum(v) for v in zip(*(filled(span, s) for s in queued[flavor].values()), strict=True)]
                if queued[flavor]
                else [0.0] * len(span),
                capacity=carried(span, capacity[flavor]),
                accelerators=accelerators.get(flavor, 0),
                backlog=sum(backlog[flavor].values()),
                teams={team: values for team, values in by_team.items() if any(values)},
                team_backlog=dict(backlog[flavor]),
                plan=plans.get(flavor, []),
            )
        )
    return histories


# --- an organization's forecast, cached ---------------------------------------------------------------------


@dataclass(frozen=True)
class OrganizationForecast:
    organization_id: int
    horizon: str
    today: date
    generated_at: datetime
    flavors: list[FlavorForecast]
    #: Seconds the fits took.
    fit_seconds: float


def forecast_organization(
    organization: Organization, horizon: str, now: datetime | None = None, use_cache: bool = True
) -> OrganizationForecast:
    """Every flavor's forecast for ``horizon`` ("12w" or "6m"), cached for ``CACHE_SECONDS`` per organization,
    horizon and day."""

    chosen = HORIZONS[horizon]
    now = now or timezone.now()
    today = now.astimezone(UTC).date()
    key = cache_key(organization.pk, chosen.key, today)
    if use_cache:
        found = cache.get(key)
        if isinstance(found, OrganizationForecast):
            return found
    histories = read_history(organization, now)
    started = time.perf_counter()
    flavors = [forecast_flavor(h, chosen, today) for h in histories]
    result = OrganizationForecast(organization.pk, chosen.key, today, now, flavors, time.perf_counter() - started)
    if use_cache:
        cache.set(key, result, CACHE_SECONDS)
    return result


def planning_organizations(user: Any) -> list[Organization]:
    """The organizations whose forecasts and capacity plan ``user`` may read: those where they hold finance,
    procurement or admin (the policy's ``forecast.read``); a superuser, all."""
    return list(policy.permitted(user, "forecast.read", Organization.objects.order_by("name")))
