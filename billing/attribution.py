"""Cost attribution: a month of the meter's records priced with the price book, idle capacity and shared
overhead allocated, to the cent.

**What things cost.** A usage record costs its accelerator-hours (seconds x thousandths / 3,600,000) at
the rate in effect on its day for its cluster, flavor and capacity type. A pool (cluster, flavor, capacity
type) costs, each day, its capacity's accelerator-hours at that day's rate, or what was used when the
meter saw more used than present. A pool-day's idle cost is what it cost beyond what was used. Records
with no price in the book cost nothing and are counted as unpriced hours, so finance sees the gap.

**The allocation rule.**
0. Capacity a team reserved ahead (an approved reservation, ``governance.CapacityRequest``) is the team's whether
   it uses it or not: each day, the booked accelerator-hours its own usage of that pool did not fill are charged
   to it at the pool's rate, out of the pool's idle cost (never more than the pool was idle that day), on a line
   of the team's with no usage, in the name of who asked for it (``booked``).
Rules 1 to 4 share each **day** once it is over (``_share_days``), so a day's shares never change afterwards
and a team's month-to-date charge only grows, whoever else uses more (on a month-level split, another team's
growth re-split the fixed overhead and a team's total fell while it ran jobs):

1. A pool's idle cost of a day goes to the usage of that pool that day, in proportion to accelerator-hours:
   whoever uses a pool pays for its idle share.
2. A pool nobody used that day: its idle cost goes to all of that day's usage, in proportion to usage cost.
3. Shared overhead (``Overhead``) is a month's: each day carries an equal part of it (1/30 in a month of 30
   days), which goes to that day's usage in proportion to usage cost. Overhead is charged only for days that
   are over: no overhead for time that has not happened (a future month carries none).
4. A day over with no usage at all hands its idle cost and overhead on to the next day with usage; once the
   month is over, what no later day took goes to all of the month's usage by cost; with no usage in the month
   it stays unallocated (the fleet summary says so). A day is over ten minutes after its UTC midnight
   (``DAY_METERED_AFTER``, once the meter has metered it to its end); until then its usage counts and its idle
   shows as unallocated.

Allocation is done at the finest grain there is (day x team x project x user x cluster x flavor x capacity
type). Each team's usage, idle and overhead are then rounded **down** to the cent (a team's figure never falls
as its exact amount grows: rounding down is monotone, while largest remainders move cents between teams), its
lines apportioned to them by the largest-remainder method; what rounding leaves (under a cent a team and part)
stays unallocated. Any roll-up is a sum of whole cents and the teams' totals plus whatever stayed unallocated add
up to the fleet's total exactly:

    fleet total = capacity cost + overhead of the days over = usage + idle + overhead (allocated or not)

Jobs are priced by usage only (``job_costs``): idle and overhead are allocated to teams, projects and users.

**Allocated but idle.** Usage is what was allocated; the node probes say how much of it was used
(``scheduler/utilization.py`` attributes their samples to the attempts, hour by hour). Each line's usage
cost is split, proportionally, into three parts that add up to it:

    allocated idle = usage cost x (measured - busy) / held
    unmeasured     = usage cost x (held - measured) / held
    (busy          = the rest)

where *held* is the line's thousandth-accelerator-seconds, *measured* the part of them during which its
nodes' probes reported, and *busy* the measured part times the utilization there (a GPU at 40 % for an
hour is 0.4 busy GPU-hours and 0.6 idle). Time without samples is unmeasured, never idle. Both are
parts of usage, not charges on top: totals do not change.

Allocation needs the whole organization's month; what a person is shown is then cut to what they may
see (``visible_to``): their teams' lines for researchers and leads, everything for finance and admins.

Size: one attribution, end to end: lines, pools, the split of idle capacity and overhead, apportioning to the cent,
and the per-job costs that must tie to it; kept together so that the arithmetic that makes totals tie is read in one
place.
"""

from __future__ import annotations

import datetime as dt
import json
import zlib
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, fields, replace
from decimal import ROUND_FLOOR, ROUND_HALF_UP, Decimal, localcontext
from typing import Any

from django.contrib.auth import get_user_model
from django.core.cache import cache
from django.db import connection
from django.db.models import BigIntegerField, F, Q, Sum
from django.db.models.functions import Cast
from django.utils import timezone

from billing.actions.metering import midnight, split_days
from billing.actions.prices import IntensityBook, Key, RateBook, version
from billing.models import Adjustment, CapacityRecord, Overhead, Period, Price, UsageRecord
from clusters.capacity import CapacityType, capacity_type
from clusters.models import AcceleratorType, Cluster
from common.types import AnyUser
from governance.models import CapacityRequest
from scheduler import utilization
from tenancy import policy
from tenancy.models import Organization, Project, Team
from tenancy.scoping import Action

CENT = Decimal("0.01")
MILLI_SECONDS_PER_HOUR = Decimal(3_600_000)
MICRO = Decimal(1_000_000)
TRILLIONTH = Decimal("1e-12")
#: Utilization is read against usage hour by hour (seconds).
HOUR = 3600
#: Capacity types in words ("On-demand", not "on_demand"), as the pages and exports show them.
CAPACITY_WORDS = dict(CapacityType.choices)
DIMENSIONS = ("day", "team", "project", "user", "cluster", "flavor", "capacity_type", "corrects")
#: Dimensions whose values are not ids (so they have no names).
PLAIN = ("day", "capacity_type", "corrects")


def month_bounds(month: dt.date) -> tuple[dt.date, dt.date]:
    """The first day of ``month``'s month and the first day of the next."""
    first = month.replace(day=1)
    return first, (first + dt.timedelta(days=32)).replace(day=1)


@dataclass(frozen=True, slots=True)
class Line:
    """The finest grain of the month's costs, in cents."""

    day: dt.date
    team: int
    project: int | None
    user: int
    cluster: int
    flavor: int
    capacity_type: str
    milli_seconds: int
    usage: int
    idle: int
    overhead: int
    priced: bool
    #: Of ``milli_seconds``: the part the probes measured, and the busy part of that (utilization-weighted).
    measured_milli_seconds: int = 0
    busy_milli_seconds: int = 0
    #: Parts of ``usage`` (cents): allocated while measured idle, and allocated without any measurement.
    allocated_idle: int = 0
    unmeasured: int = 0
    #: An adjustment: the first day of the closed month it corrects (``billing.models.Adjustment``).
    corrects: dt.date | None = None
    #: The energy its accelerators drew (watt-hours), and the part of it estimated for time without power readings.
    energy_wh: int = 0
    estimated_wh: int = 0
    #: Its energy's emissions, grams of CO2e, at its cluster's region's grid intensity on its day.
    emissions_g: int = 0

    @property
    def total(self) -> int:
        return self.usage + self.idle + self.overhead


@dataclass(frozen=True, slots=True)
class Pool:
    """One (cluster, flavor, capacity type) over the month, in cents and thousandth-accelerator-seconds."""

    cluster: int
    flavor: int
    capacity_type: str
    capacity_milli_seconds: int
    used_milli_seconds: int
    cost: int
    used: int
    priced: bool

    @property
    def idle(self) -> int:
        return self.cost - self.used

    @property
    def utilisation(self) -> float | None:
        return self.used_milli_seconds / self.capacity_milli_seconds if self.capacity_milli_seconds else None


@dataclass
class Names:
    team: dict[int, str] = field(default_factory=dict)
    project: dict[int, str] = field(default_factory=dict)
    user: dict[int, str] = field(default_factory=dict)
    cluster: dict[int, str] = field(default_factory=dict)
    flavor: dict[int, str] = field(default_factory=dict)
    #: Each cluster's region (what its grid intensity is looked up by).
    cluster_region: dict[int, str] = field(default_factory=dict)
    #: Finance's cost-centre codes of teams and projects (those set).
    team_code: dict[int, str] = field(default_factory=dict)
    project_code: dict[int, str] = field(default_factory=dict)

    def cost_centre(self, team: int, project: int | None) -> str:
        """The code a line's costs go to: its project's, else its team's ("" when neither has one)."""
        return (self.project_code.get(project, "") if project is not None else "") or self.team_code.get(team, "")

    def of(self, dimension: str, value: Any) -> str:
        if value is None:
            return "(no project)" if dimension == "project" else ""
        if dimension == "corrects":
            return f"correction of {value:%Y-%m}"
        if dimension == "capacity_type":
            return str(CAPACITY_WORDS.get(value, value))
        if dimension in PLAIN:
            return str(value)
        known: dict[int, str] = getattr(self, dimension)
        return known.get(value, f"#{value}")


@dataclass
class Attribution:
    """One organization's month. Amounts in cents. ``fleet_visible``: whether pools, unallocated amounts and
    the fleet's total are part of it (finance and admins), or only some teams' lines."""

    organization_id: int
    month: dt.date
    lines: list[Line]
    pools: list[Pool]
    overhead: int
    unallocated_idle: int
    unallocated_overhead: int
    idle_by_day: dict[dt.date, int]
    names: Names
    fleet_visible: bool = True
    #: Per job: (held, measured, busy) thousandth-accelerator-seconds in the month (``allocated but idle``).
    job_measures: dict[int, tuple[int, int, int]] = field(default_factory=dict)
    #: Per job: the energy its accelerators drew in the month (Wh), the part of it estimated, and its emissions (g).
    job_energy: dict[int, tuple[int, int, int]] = field(default_factory=dict)
    #: The month's whole shared overhead; ``overhead`` is the part of the days that are over.
    overhead_of_month: int = 0
    #: The ISO 4217 code of every amount (the organization's currency).
    currency: str = ""
    #: Corrections of closed months booked in this one (cents): they are lines too (``Line.corrects``), and
    #: the part that stayed unallocated is in ``unallocated_idle`` and ``unallocated_overhead``.
    adjustments: int = 0

    @property
    def capacity_cost(self) -> int:
        return sum(p.cost for p in self.pools)

    @property
    def fleet_total(self) -> int:
        return self.capacity_cost + self.overhead + self.adjustments

    @property
    def unpriced_milli_seconds(self) -> int:
        return sum(line.milli_seconds for line in self.lines if not line.priced)

    def totals(self) -> dict[str, int]:
        return {
            "milli_seconds": sum(line.milli_seconds for line in self.lines),
            "usage": sum(line.usage for line in self.lines),
            "idle": sum(line.idle for line in self.lines),
            "overhead": sum(line.overhead for line in self.lines),
            "total": sum(line.total for line in self.lines),
            "allocated_idle": sum(line.allocated_idle for line in self.lines),
            "unmeasured": sum(line.unmeasured for line in self.lines),
            "energy_wh": sum(line.energy_wh for line in self.lines),
            "estimated_wh": sum(line.estimated_wh for line in self.lines),
            "emissions_g": sum(line.emissions_g for line in self.lines),
        }

    @property
    def unallocated(self) -> int:
        return self.unallocated_idle + self.unallocated_overhead

    def fleet_totals(self) -> dict[str, int]:
        """``totals`` with what stayed unallocated: the whole fleet's idle and overhead, its ``total`` the
        fleet's total (the identity the allocation keeps)."""
        totals = self.totals()
        totals["idle"] += self.unallocated_idle
        totals["overhead"] += self.unallocated_overhead
        totals["total"] += self.unallocated
        return totals

    def rollup(self, by: Sequence[str]) -> list[dict[str, Any]]:
        """The lines summed per value of the ``by`` dimensions, largest total first."""
        sums: dict[tuple[Any, ...], list[int]] = defaultdict(lambda: [0] * 11)
        for line in self.lines:
            acc = sums[tuple(getattr(line, d) for d in by)]
            acc[0] += line.milli_seconds
            acc[1] += line.usage
            acc[2] += line.idle
            acc[3] += line.overhead
            acc[4] += line.measured_milli_seconds
            acc[5] += line.busy_milli_seconds
            acc[6] += line.allocated_idle
            acc[7] += line.unmeasured
            acc[8] += line.energy_wh
            acc[9] += line.estimated_wh
            acc[10] += line.emissions_g
        rows = []
        for key, (
            ms,
            usage,
            idle,
            overhead,
            measured,
            busy,
            allocated_idle,
            unmeasured,
            wh,
            guessed,
            g,
        ) in sums.items():
            row: dict[str, Any] = {}
            for dimension, value in zip(by, key, strict=True):
                row[dimension] = value
                if dimension not in PLAIN:
                    row[f"{dimension}_name"] = self.names.of(dimension, value)
            row.update(milli_seconds=ms, usage=usage, idle=idle, overhead=overhead, total=usage + idle + overhead)
            row.update(
                measured_milli_seconds=measured,
                busy_milli_seconds=busy,
                allocated_idle=allocated_idle,
                unmeasured=unmeasured,
                utilization=busy / measured if measured else None,
                energy_wh=wh,
                estimated_wh=guessed,
                emissions_g=g,
            )
            rows.append(row)
        rows.sort(key=lambda r: (-r["total"], *(str(r[d]) for d in by)))
        return rows

    def for_teams(self, teams: Iterable[int], fleet_visible: bool) -> Attribution:
        keep = set(teams)
        return replace(self, lines=[line for line in self.lines if line.team in keep], fleet_visible=fleet_visible)

    def job_split(self, job: int, usage: int) -> tuple[int, int]:
        """A job's usage cost (cents) split as the lines are: (allocated idle, unmeasured)."""
        held, measured, busy = self.job_measures.get(job, (0, 0, 0))
        return split(usage, held, measured, busy)


def split(usage: int, held: int, measured: int, busy: int) -> tuple[int, int]:
    """``usage`` cents in proportion: (allocated idle, unmeasured), rounded half up; (0, 0) with nothing held."""
    if held <= 0:
        return 0, 0
    idle = to_cents(Decimal(usage) * Decimal(max(0, measured - busy)) / Decimal(held) / 100)
    unmeasured = to_cents(Decimal(usage) * Decimal(held - measured) / Decimal(held) / 100)
    return idle, unmeasured


def money(cents: int) -> Decimal:
    return (Decimal(cents) * CENT).quantize(CENT)


def hours(milli_seconds: int) -> Decimal:
    return (Decimal(milli_seconds) / MILLI_SECONDS_PER_HOUR).quantize(Decimal("0.001"), rounding=ROUND_HALF_UP)


def apportion(amounts: Sequence[Decimal], total: int) -> list[int]:
    """Whole cents for ``amounts`` (exact, in currency units) that add up to ``total`` cents: each gets its
    floor, and the cents left over (or missing) go to the largest (or smallest) remainders, ties to the
    earlier one."""
    cents = [a * 100 for a in amounts]
    floors = [int(c.to_integral_value(rounding=ROUND_FLOOR)) for c in cents]
    left = total - sum(floors)
    if not amounts:
        return []
    order = sorted(range(len(amounts)), key=lambda i: (-(cents[i] - floors[i]), i))
    if left < 0:
        order = order[::-1]
    step = 1 if left > 0 else -1
    i = 0
    while left:
        floors[order[i % len(order)]] += step
        left -= step
        i += 1
    return floors


def team_cents(amounts: Sequence[Decimal], teams: Sequence[int]) -> list[int]:
    """Whole cents for ``amounts`` (exact, in currency units, one per line of ``teams``): each team's lines add up to
    its exact sum rounded down, apportioned among them by the largest remainder. Rounding down is what keeps a
    team's figure from ever falling while its exact amount grows (largest remainders move cents between teams)."""
    by_team: dict[int, list[int]] = defaultdict(list)
    for i, team in enumerate(teams):
        by_team[team].append(i)
    cents = [0] * len(amounts)
    for rows in by_team.values():
        # Division leaves a last digit off (thirty days of 100/30 are 99.99...): exact to a trillionth of a cent.
        exact = (sum((amounts[i] for i in rows), Decimal(0)) * 100).quantize(TRILLIONTH)
        total = int(exact.to_integral_value(rounding=ROUND_FLOOR))
        for i, value in zip(rows, apportion([amounts[i] for i in rows], total), strict=True):
            cents[i] = value
    return cents


def to_cents(amount: Decimal) -> int:
    return int((amount * 100).to_integral_value(rounding=ROUND_HALF_UP))


def product_sum(*fields: str) -> Any:
    """The sum over the rows of the product of these integer fields, multiplied in 64 bits (in 32 they overflow)."""
    product: Any = Cast(fields[0], BigIntegerField())
    for name in fields[1:]:
        product = product * F(name)
    return Sum(product)


def _usage(organization_id: int, start: dt.date, end: dt.date) -> list[dict[str, Any]]:
    return list(
        UsageRecord.objects.filter(organization_id=organization_id, day__gte=start, day__lt=end)
        .values("day", "team_id", "project_id", "user_id", "cluster_id", "flavor_id", "capacity_type")
        .annotate(ms=product_sum("seconds", "milli"))
        .order_by()
    )


def _capacity(organization_id: int, start: dt.date, end: dt.date) -> list[dict[str, Any]]:
    return list(
        CapacityRecord.objects.filter(organization_id=organization_id, day__gte=start, day__lt=end)
        .values("day", "cluster_id", "flavor_id", "capacity_type")
        .annotate(ms=product_sum("seconds", "accelerators"))
        .order_by()
    )


def booked(organization_id: int, start: dt.date, end: dt.date) -> dict[tuple[int, Key, dt.date], tuple[int, int]]:
    """Per (team, pool, day) of the month: the thousandth-accelerator-seconds reservations booked for the team,
    and who asked for them (approved windows, and those that ended; ``_allocate``'s rule 0)."""
    since, until = midnight(start), midnight(end)
    requests = list(
        CapacityRequest.objects.filter(
            team__organization_id=organization_id,
            kind=CapacityRequest.Kind.RESERVATION,
            state__in=(CapacityRequest.State.APPROVED, CapacityRequest.State.ENDED),
            starts_at__lt=until,
            ends_at__gt=since,
        ).prefetch_related("nodes__cluster")
    )
    found: dict[tuple[int, Key, dt.date], tuple[int, int]] = {}
    for request in requests:
        asker = request.requested_by_id or request.decided_by_id
        if asker is None or request.ends_at is None:
            continue  # nobody's name to charge it in: its idle stays the pool's
        window = (max(request.starts_at, since), min(request.ends_at, until))
        for node in request.nodes.all():
            pool = (
                node.cluster_id,
                request.flavor_id,
                capacity_type(node.labels or {}, node.cluster.kind, node.cluster.options or {}),
            )
            for day, begin, finish in split_days(*window):
                key = (request.team_id, pool, day)
                held = int((finish - begin).total_seconds()) * node.accelerators * 1000
                found[key] = (found.get(key, (0, asker))[0] + held, asker)
    return found


def overhead_of(organization_id: int, month: dt.date) -> Decimal:
    first, _ = month_bounds(month)
    rows = Overhead.objects.filter(organization_id=organization_id, starts__lte=first).filter(
        Q(ends=None) | Q(ends__gte=first)
    )
    return sum((row.amount for row in rows), Decimal(0))


def _names(organization_id: int) -> Names:
    teams = list(Team.objects.filter(organization_id=organization_id).values_list("pk", "name", "cost_centre"))
    clusters = list(Cluster.objects.filter(organization_id=organization_id).values_list("pk", "name", "region"))
    projects = list(
        Project.objects.filter(team__organization_id=organization_id).values_list("pk", "name", "cost_centre")
    )
    return Names(
        team={pk: name for pk, name, _ in teams},
        project={pk: name for pk, name, _ in projects},
        user=dict(
            get_user_model()
            .objects.filter(memberships__organization_id=organization_id)
            .values_list("pk", "username")
            .distinct()
        ),
        cluster={pk: name for pk, name, _ in clusters},
        cluster_region={pk: region for pk, _, region in clusters},
        flavor=dict(AcceleratorType.objects.filter(organization_id=organization_id).values_list("pk", "name")),
        team_code={pk: code for pk, _, code in teams if code},
        project_code={pk: code for pk, _, code in projects if code},
    )


def _shares(amounts: Sequence[Decimal] | Sequence[int]) -> list[Decimal] | None:
    """Each amount's share of their sum; None when they are all zero (or there are none)."""
    total = sum(amounts)
    return [Decimal(a) / total for a in amounts] if total > 0 else None


#: How long after midnight (UTC) a day counts as over: the meter runs every minute, so by then it has metered the
#: day to its end, and the day's idle and overhead are shared on figures that no longer move.
DAY_METERED_AFTER = dt.timedelta(minutes=10)


def attribute(organization: Organization | int, month: dt.date, now: dt.datetime | None = None) -> Attribution:
    """The month of ``month`` for the whole organization (see the module's rule), as of ``now``: the days over by
    then share their idle and overhead."""
    org_id = organization if isinstance(organization, int) else organization.pk
    start, end = month_bounds(month)
    done = ((now or timezone.now()) - DAY_METERED_AFTER).astimezone(dt.UTC).date()
    book = RateBook.of(org_id)
    usage_rows = _usage(org_id, start, end)
    capacity_rows = _capacity(org_id, start, end)
    names = _names(org_id)
    by_line, by_job, energy = _measures(org_id, start, end, names.cluster_region)
    reserved = booked(org_id, start, end)
    with localcontext() as ctx:
        ctx.prec = 50
        overhead = overhead_of(org_id, start)
        result = _allocate(org_id, start, book, usage_rows, capacity_rows, overhead, names, by_line, reserved, done)
    result.job_measures = by_job
    result.job_energy = energy
    result.currency = Organization.objects.filter(pk=org_id).values_list("currency", flat=True).first() or ""
    return with_adjustments(result)


def with_adjustments(result: Attribution) -> Attribution:
    """The month with the corrections of closed months booked in it: a line each (``Line.corrects``), and what
    stayed unallocated of them added to the month's unallocated amounts; the fleet's total grows by them all."""
    start, _ = month_bounds(result.month)
    rows = Adjustment.objects.filter(organization_id=result.organization_id, month=start).order_by("pk")
    lines = list(result.lines)
    unallocated_idle, unallocated_overhead, total = result.unallocated_idle, result.unallocated_overhead, 0
    for row in rows:
        total += row.usage + row.idle + row.overhead
        if row.team_id is None:
            unallocated_idle += row.idle
            unallocated_overhead += row.overhead
            continue
        assert row.user_id is not None
        assert row.cluster_id is not None
        assert row.flavor_id is not None
        lines.append(
            Line(
                day=row.day,
                team=row.team_id,
                project=row.project_id,
                user=row.user_id,
                cluster=row.cluster_id,
                flavor=row.flavor_id,
                capacity_type=row.capacity_type,
                milli_seconds=row.milli_seconds,
                usage=row.usage,
                idle=row.idle,
                overhead=row.overhead,
                priced=True,
                corrects=row.corrects,
            )
        )
    return replace(
        result,
        lines=lines,
        unallocated_idle=unallocated_idle,
        unallocated_overhead=unallocated_overhead,
        adjustments=total,
    )


Grain = tuple[dt.date, int, int | None, int, int, int, str]
#: A usage row's fields of a line's grain, in ``Grain``'s order.
GRAIN_FIELDS = ("day", "team_id", "project_id", "user_id", "cluster_id", "flavor_id", "capacity_type")


def _grain(row: dict[str, Any]) -> Grain:
    """A usage row's line key (``DIMENSIONS``' values)."""
    return tuple(row[f] for f in GRAIN_FIELDS)


#: (measured, busy) thousandth-accelerator-seconds of a line, its energy in watt-hours (all of it, and the part
#: estimated for time without power readings) and its emissions in grams of CO2e.
Measure = tuple[int, int, int, int, int]


def _measures(
    org_id: int, start: dt.date, end: dt.date, regions: Mapping[int, str]
) -> tuple[dict[Grain, Measure], dict[int, tuple[int, int, int]], dict[int, tuple[int, int, int]]]:
    """The month's measured and busy thousandth-accelerator-seconds, energy and emissions per line grain, (held,
    measured, busy) per job and each job's energy (Wh, of which estimated) and emissions (g): the usage records are
    the holds (every attempt on the organization's nodes), read against the probes' samples hour by hour
    (``scheduler.utilization``; two queries, and the price book's power for flavors never read)."""
    records = list(
        UsageRecord.objects.filter(organization_id=org_id, day__gte=start, day__lt=end).values_list(
            "attempt_id",
            "job_id",
            "node_id",
            "milli",
            "start",
            "end",
            "day",
            "team_id",
            "project_id",
            "user_id",
            "cluster_id",
            "flavor_id",
            "capacity_type",
            "seconds",
        )
    )
    if not records:
        return {}, {}, {}
    holds = [utilization.Hold(r[0], r[1], r[2], r[3], r[4], r[5]) for r in records]
    since, until = midnight(start), midnight(end)
    buckets = utilization.node_buckets({h.node for h in holds}, since, until, HOUR, per_gpu=False)
    measured = utilization.shares(holds, holds, buckets, HOUR) if buckets else {}
    per_piece: dict[tuple[int, int, dt.date], list[float]] = defaultdict(lambda: [0.0, 0.0, 0.0])
    for (attempt, node, bucket), (share, _) in measured.items():
        acc = per_piece[(attempt, node, bucket.date())]
        acc[0] += share.measured
        acc[1] += share.busy
        acc[2] += share.watt_seconds
    watts = _estimated_watts(org_id, records, per_piece)
    grid = IntensityBook.of(org_id)
    by_line: dict[Grain, list[float]] = defaultdict(lambda: [0, 0, 0.0, 0.0, 0.0])
    by_job: dict[int, list[float]] = defaultdict(lambda: [0, 0, 0, 0.0, 0.0, 0.0])
    for r in records:
        piece = per_piece.get((r[0], r[2], r[6]), [0.0, 0.0, 0.0])
        piece_measured, piece_busy = round(piece[0]), round(piece[1])
        held = r[13] * r[3]
        # Energy: what the probes read, and the time they did not read at the flavor's estimate.
        estimated = max(0, held - piece_measured) / 1000 * watts.get(r[11], 0.0) / 3600
        energy = piece[2] / 3600 + estimated
        # Emissions: the energy at its region's grid intensity that day (none where no intensity is set).
        grams = grid.grams(regions.get(r[10], ""), r[6])
        emitted = energy / 1000 * float(grams) if grams is not None else 0.0
        line = by_line[(r[6], r[7], r[8], r[9], r[10], r[11], r[12])]
        job = by_job[r[1]]
        for acc, offset in ((line, 0), (job, 1)):
            acc[offset] += piece_measured
            acc[offset + 1] += piece_busy
            acc[offset + 2] += energy
            acc[offset + 3] += estimated
            acc[offset + 4] += emitted
        job[0] += held
    return (
        {grain: (int(m), int(b), round(e), round(x), round(g)) for grain, (m, b, e, x, g) in by_line.items()},
        {job: (int(h), int(m), int(b)) for job, (h, m, b, _, _, _) in by_job.items()},
        {job: (round(e), round(x), round(g)) for job, (_, _, _, e, x, g) in by_job.items()},
    )


def _estimated_watts(
    org_id: int, records: list[tuple[Any, ...]], per_piece: Mapping[tuple[int, int, dt.date], list[float]]
) -> dict[int, float]:
    """What an accelerator of each flavor is taken to draw where the probes read no power: the month's measured
    mean for the flavor; for a flavor never read, the price book's power per accelerator of an owned node (its
    ``power_kw`` over its accelerators, the latest such row); else nothing (no estimate)."""
    read: dict[int, list[float]] = defaultdict(lambda: [0.0, 0.0])
    for r in records:
        piece = per_piece.get((r[0], r[2], r[6]))
        if piece and piece[2]:
            read[r[11]][0] += piece[2]
            read[r[11]][1] += piece[0] / 1000
    watts = {flavor: ws / seconds for flavor, (ws, seconds) in read.items() if seconds}
    book = (
        Price.objects.filter(organization_id=org_id, power_kw__isnull=False, accelerators_per_node__gt=0)
        .order_by("effective_from")
        .values_list("flavor_id", "power_kw", "accelerators_per_node")
    )
    for flavor, kw, per_node in book:
        if flavor not in read:
            watts[flavor] = float(kw) * 1000 / per_node
    return watts


def _allocate(
    org_id: int,
    month: dt.date,
    book: RateBook,
    usage_rows: list[dict[str, Any]],
    capacity_rows: list[dict[str, Any]],
    overhead: Decimal,
    names: Names,
    measures: dict[Grain, Measure] | None = None,
    reserved: dict[tuple[int, Key, dt.date], tuple[int, int]] | None = None,
    done: dt.date | None = None,
) -> Attribution:
    """The month allocated (the module's rule). ``done``: the first day not yet over (metered to its end), whose
    idle and overhead are not shared yet; None when every day of the month is."""
    # A reservation's team has a line in its pool each day of it, used or not (rule 0): one of its own, with no
    # usage, in the name of who asked for it, where the team's usage has none.
    reserved = reserved or {}
    grains = {_grain(r) for r in usage_rows}
    for (team, (cluster, flavor, kind), day), (_, asker) in sorted(reserved.items()):
        grain = (day, team, None, asker, cluster, flavor, kind)
        if grain not in grains:
            grains.add(grain)
            usage_rows = [*usage_rows, dict(zip(GRAIN_FIELDS, grain, strict=True), ms=0)]
    # Usage: exact cost of every line.
    keys: list[Key] = [(r["cluster_id"], r["flavor_id"], r["capacity_type"]) for r in usage_rows]
    rates = [book.rate(key, r["day"]) for key, r in zip(keys, usage_rows, strict=True)]
    ms = [int(r["ms"]) for r in usage_rows]
    usage = [Decimal(m) * (rate or 0) / MILLI_SECONDS_PER_HOUR for m, rate in zip(ms, rates, strict=True)]

    # Pools, per day: what was present, what was used, at that day's rate.
    used_pool_day: dict[tuple[Key, dt.date], int] = defaultdict(int)
    for key, r, m in zip(keys, usage_rows, ms, strict=True):
        used_pool_day[(key, r["day"])] += m
    present_pool_day: dict[tuple[Key, dt.date], int] = defaultdict(int)
    for r in capacity_rows:
        present_pool_day[((r["cluster_id"], r["flavor_id"], r["capacity_type"]), r["day"])] += int(r["ms"]) * 1000
    pool_cost: dict[Key, Decimal] = defaultdict(Decimal)
    idle_pool_day: dict[tuple[Key, dt.date], Decimal] = {}
    pool_present: dict[Key, int] = defaultdict(int)
    pool_used: dict[Key, int] = defaultdict(int)
    pool_priced: dict[Key, bool] = defaultdict(lambda: True)
    idle_by_day: dict[dt.date, Decimal] = defaultdict(Decimal)
    for key_day in set(used_pool_day) | set(present_pool_day):
        key, day = key_day
        used, present = used_pool_day.get(key_day, 0), present_pool_day.get(key_day, 0)
        rate = book.rate(key, day)
        if rate is None:
            pool_priced[key] = False
            rate = Decimal(0)
        pool_present[key] += present
        pool_used[key] += used
        pool_cost[key] += Decimal(max(present, used)) * rate / MILLI_SECONDS_PER_HOUR
        idle = Decimal(max(0, present - used)) * rate / MILLI_SECONDS_PER_HOUR
        idle_pool_day[key_day] = idle
        idle_by_day[day] += idle

    first, end = month_bounds(month)
    done = end if done is None else max(first, min(done, end))
    # Reserved: a team's booked hours its own usage did not fill, out of the pool-day's idle (rule 0).
    idle_share = [Decimal(0)] * len(usage_rows)
    if reserved:
        reserved = {k: v for k, v in reserved.items() if k[2] < done}
        _charge_reserved(reserved, usage_rows, keys, ms, book, used_pool_day, idle_pool_day, idle_share)
    overhead_share = [Decimal(0)] * len(usage_rows)
    overhead_to_date = _share_days(
        first, end, done, usage_rows, keys, usage, ms, idle_pool_day, overhead, idle_share, overhead_share
    )

    # To cents: each team's usage, idle and overhead rounded down (so a team's figures never fall as its exact ones
    # grow), its lines apportioned to them; what rounding leaves (under a cent a team and part) stays unallocated.
    capacity_total = to_cents(sum(pool_cost.values(), Decimal(0)))
    teams = [r["team_id"] for r in usage_rows]
    usage_cents = team_cents(usage, teams)
    idle_cents = team_cents(idle_share, teams)
    idle_cents.append(capacity_total - sum(usage_cents) - sum(idle_cents))
    overhead_cents = team_cents(overhead_share, teams)
    overhead_cents.append(to_cents(overhead_to_date) - sum(overhead_cents))
    measures = measures or {}
    lines = [
        _measured_line(
            measures.get(_grain(r), (0, 0, 0, 0, 0)),
            day=r["day"],
            team=r["team_id"],
            project=r["project_id"],
            user=r["user_id"],
            cluster=r["cluster_id"],
            flavor=r["flavor_id"],
            capacity_type=r["capacity_type"],
            milli_seconds=ms[i],
            usage=usage_cents[i],
            idle=idle_cents[i],
            overhead=overhead_cents[i],
            priced=rates[i] is not None,
        )
        for i, r in enumerate(usage_rows)
    ]
    lines.sort(key=lambda line: (line.day, line.team, line.project or 0, line.user, line.cluster, line.flavor))

    # Pools in cents: their costs apportioned to the rounded capacity total; used = their lines' usage.
    pool_keys = sorted(pool_cost)
    pool_cents = apportion([pool_cost[k] for k in pool_keys], capacity_total)
    used_cents: dict[Key, int] = defaultdict(int)
    for key, cents in zip(keys, usage_cents, strict=True):
        used_cents[key] += cents
    pools = [
        Pool(
            cluster=k[0],
            flavor=k[1],
            capacity_type=k[2],
            capacity_milli_seconds=pool_present[k],
            used_milli_seconds=pool_used[k],
            cost=cents,
            used=used_cents[k],
            priced=pool_priced[k],
        )
        for k, cents in zip(pool_keys, pool_cents, strict=True)
    ]
    return Attribution(
        organization_id=org_id,
        month=month,
        lines=lines,
        pools=pools,
        overhead=to_cents(overhead_to_date),
        overhead_of_month=to_cents(overhead),
        unallocated_idle=idle_cents[-1],
        unallocated_overhead=overhead_cents[-1],
        idle_by_day={day: to_cents(v) for day, v in sorted(idle_by_day.items())},
        names=names,
    )


def _charge_reserved(
    reserved: dict[tuple[int, Key, dt.date], tuple[int, int]],
    usage_rows: list[dict[str, Any]],
    keys: list[Key],
    ms: list[int],
    book: RateBook,
    used_pool_day: dict[tuple[Key, dt.date], int],
    idle_pool_day: dict[tuple[Key, dt.date], Decimal],
    idle_share: list[Decimal],
) -> None:
    """Rule 0: move each reservation's unfilled hours, at the pool-day's rate, from the pool-day's idle cost to the
    team's line of no usage in the asker's name. Teams share a pool-day's idle in proportion when their unfilled
    hours together pass it (a booked node gone from the fleet is not idle capacity)."""
    team_used: dict[tuple[int, Key, dt.date], int] = defaultdict(int)
    line_of: dict[tuple[int, Key, dt.date, int], int] = {}
    for i, (key, r) in enumerate(zip(keys, usage_rows, strict=True)):
        team_used[(r["team_id"], key, r["day"])] += ms[i]
        if r["project_id"] is None:
            line_of[(r["team_id"], key, r["day"], r["user_id"])] = i
    unfilled: dict[tuple[Key, dt.date], dict[tuple[int, int], int]] = defaultdict(dict)
    for (team, key, day), (held, asker) in reserved.items():
        left = held - team_used.get((team, key, day), 0)
        if left > 0:
            unfilled[(key, day)][(team, asker)] = left
    for (key, day), teams in unfilled.items():
        rate = book.rate(key, day)
        idle_cost = idle_pool_day.get((key, day), Decimal(0))
        if rate is None or not idle_cost:
            continue
        idle = idle_cost * MILLI_SECONDS_PER_HOUR / rate  # thousandth-accelerator-seconds
        asked = sum(teams.values())
        for (team, asker), left in teams.items():
            taken = Decimal(left) if asked <= idle else idle * left / asked
            cost = taken * rate / MILLI_SECONDS_PER_HOUR
            idle_share[line_of[(team, key, day, asker)]] += cost
            idle_pool_day[(key, day)] -= cost


def _share_days(
    first: dt.date,
    end: dt.date,
    done: dt.date,
    usage_rows: list[dict[str, Any]],
    keys: list[Key],
    usage: list[Decimal],
    ms: list[int],
    idle_pool_day: dict[tuple[Key, dt.date], Decimal],
    overhead: Decimal,
    idle_share: list[Decimal],
    overhead_share: list[Decimal],
) -> Decimal:
    """Rules 1 to 4, day by day: each day that is over shares its pools' idle cost (a pool's users by
    accelerator-hours; a pool nobody used, that day's usage by cost) and its part of the month's overhead (that
    day's usage by cost); a day over with no usage at all hands both on to the next day with usage; once the month
    is over, what no day took goes to the month's usage by cost. Days not over share nothing yet. Adds to the
    shares (what none takes stays unallocated: the rest of the totals) and returns the overhead of the days over."""
    days = (end - first).days
    per_day = overhead / days
    rows_of_day: dict[dt.date, list[int]] = defaultdict(list)
    members: dict[tuple[Key, dt.date], list[int]] = defaultdict(list)
    for i, (key, r) in enumerate(zip(keys, usage_rows, strict=True)):
        rows_of_day[r["day"]].append(i)
        members[(key, r["day"])].append(i)
    pools_of_day: dict[dt.date, list[Key]] = defaultdict(list)
    for key, day in sorted(idle_pool_day):
        pools_of_day[day].append(key)
    carried_idle = carried_overhead = Decimal(0)
    for n in range((min(done, end) - first).days):
        day = first + dt.timedelta(days=n)
        orphaned, carried_overhead = carried_idle, carried_overhead + per_day
        for key in pools_of_day.get(day, []):
            weights = _shares([ms[i] for i in members.get((key, day), [])])
            if weights is None:
                orphaned += idle_pool_day[(key, day)]
                continue
            for i, w in zip(members[(key, day)], weights, strict=True):
                idle_share[i] += idle_pool_day[(key, day)] * w
        rows = rows_of_day.get(day, [])
        weights = _shares([usage[i] for i in rows]) or _shares([ms[i] for i in rows])
        if weights is None:
            carried_idle = orphaned
            continue
        for i, w in zip(rows, weights, strict=True):
            idle_share[i] += orphaned * w
            overhead_share[i] += carried_overhead * w
        carried_idle = carried_overhead = Decimal(0)
    everyone = _shares(usage) or _shares(ms)
    if done >= end and everyone is not None:
        for i, w in enumerate(everyone):
            idle_share[i] += carried_idle * w
            overhead_share[i] += carried_overhead * w
    return overhead * (min(done, end) - first).days / days


def _measured_line(measure: Measure, **fields: Any) -> Line:
    """A line with its measured and busy parts and energy, and its usage split into allocated idle and unmeasured."""
    measured, busy, energy, estimated, emitted = measure
    idle, unmeasured = split(fields["usage"], fields["milli_seconds"], measured, busy)
    return Line(
        **fields,
        measured_milli_seconds=measured,
        busy_milli_seconds=busy,
        allocated_idle=idle,
        unmeasured=unmeasured,
        energy_wh=energy,
        estimated_wh=estimated,
        emissions_g=emitted,
    )


def visible_teams(user: AnyUser, organization_id: int) -> list[int] | None:
    """The teams whose costs ``user`` may see: None for all of them and the fleet (finance and admins)."""
    if policy.can(user, "finance.read", Organization(pk=organization_id)):
        return None
    teams = Team.objects.for_user(user, Action.VIEW).filter(organization_id=organization_id)
    return list(teams.values_list("pk", flat=True))


def visible_to(user: AnyUser, attribution: Attribution) -> Attribution:
    """What ``user`` may see of it: finance and admins everything; others their own teams' lines."""
    teams = visible_teams(user, attribution.organization_id)
    return attribution if teams is None else attribution.for_teams(teams, fleet_visible=False)


@dataclass(frozen=True, slots=True)
class JobCost:
    job: int
    name: str
    team: int
    project: int | None
    user: int
    milli_seconds: int
    cost: int  # cents
    #: The exact cost, in millionths of a currency unit times thousandth-accelerator-seconds per hour (an integer:
    #: ``exact_cost / MICRO / MILLI_SECONDS_PER_HOUR`` is the amount), for apportioning jobs to a total.
    exact_cost: int = 0

    @property
    def amount(self) -> Decimal:
        """The exact cost in currency units."""
        return Decimal(self.exact_cost) / MICRO / MILLI_SECONDS_PER_HOUR


def job_costs(
    organization_id: int, month: dt.date, teams: Iterable[int] | None = None, limit: int | None = None
) -> list[JobCost]:
    """Jobs' usage cost in the month, the costliest first (all of them when ``limit`` is None). The rates
    are joined in the database as whole millionths (rates have six decimals), so the sums are exact integers
    and this reads each record once and returns only jobs."""
    start, end = month_bounds(month)
    book = RateBook.of(organization_id)
    days = [start + dt.timedelta(days=i) for i in range((end - start).days)]
    rates = [
        (k[0], k[1], k[2], d.isoformat(), int(rate * MICRO))
        for k in book.priced_keys()
        for d in days
        if (rate := book.rate(k, d)) is not None
    ]
    team_ids = None if teams is None else sorted(set(teams))
    if not rates or team_ids == []:
        return []
    postgres = connection.vendor == "postgresql"
    values = ", ".join(["(%s, %s, %s, %s, %s)"] * len(rates))
    day, a_day = ("CAST(r.day AS date)", "CAST(%s AS date)") if postgres else ("r.day", "%s")
    # A day of a node's accelerators (at most 86,400 s x their thousandths) times the rate fits 64 bits up
    # to a few thousand an accelerator-hour; beyond that the products are taken as numeric.
    micro = "CAST(r.micro AS bigint)" if max(r[4] for r in rates) < 4 * 10**9 else "CAST(r.micro AS numeric)"
    team_filter = f"AND u.team_id IN ({', '.join(['%s'] * len(team_ids))})" if team_ids else ""
    sql = f"""
        WITH r(cluster_id, flavor_id, capacity_type, day, micro) AS (VALUES {values}),
        costs AS (
            SELECT u.job_id, SUM(CAST(u.seconds AS bigint) * u.milli) AS ms,
                   SUM(CAST(u.seconds AS bigint) * u.milli * {micro}) AS cost
            FROM billing_usagerecord u
            JOIN r ON r.cluster_id = u.cluster_id AND r.flavor_id = u.flavor_id
                  AND r.capacity_type = u.capacity_type AND {day} = u.day
            WHERE u.organization_id = %s AND u.day >= {a_day} AND u.day < {a_day} {team_filter}
            GROUP BY u.job_id
            ORDER BY cost DESC, u.job_id
            {"LIMIT %s" if limit is not None else ""}
        )
        SELECT c.job_id, j.name, j.team_id, j.project_id, j.submitted_by_id, c.ms, c.cost
        FROM costs c JOIN scheduler_job j ON j.id = c.job_id
        ORDER BY c.cost DESC, c.job_id
    """  # noqa: S608 (only placeholders are formatted in)
    params: list[Any] = [p for row in rates for p in row]
    params += [organization_id, start.isoformat(), end.isoformat(), *(team_ids or [])]
    if limit is not None:
        params.append(limit)
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        rows = cursor.fetchall()
    return [
        JobCost(
            job=r[0],
            name=r[1],
            team=r[2],
            project=r[3],
            user=r[4],
            milli_seconds=int(r[5]),
            cost=to_cents(Decimal(int(r[6])) / MICRO / MILLI_SECONDS_PER_HOUR),
            exact_cost=int(r[6]),
        )
        for r in rows
    ]


# --- closed months: the attribution frozen as it was closed ---------------------------------------------------

_DATES = ("day", "corrects")


def freeze(result: Attribution, jobs: Sequence[JobCost]) -> bytes:
    """A month's attribution and its jobs' costs as a closed month keeps them (compressed JSON)."""

    def line(row: Line) -> list[Any]:
        values = [getattr(row, f.name) for f in fields(Line)]
        return [v.isoformat() if isinstance(v, dt.date) else v for v in values]

    body = {
        "organization_id": result.organization_id,
        "month": result.month.isoformat(),
        "lines": [line(row) for row in result.lines],
        "pools": [[getattr(p, f.name) for f in fields(Pool)] for p in result.pools],
        "overhead": result.overhead,
        "overhead_of_month": result.overhead_of_month,
        "currency": result.currency,
        "unallocated_idle": result.unallocated_idle,
        "unallocated_overhead": result.unallocated_overhead,
        "idle_by_day": [[day.isoformat(), cents] for day, cents in result.idle_by_day.items()],
        "names": {f.name: list(getattr(result.names, f.name).items()) for f in fields(Names)},
        "job_measures": [[job, *measures] for job, measures in result.job_measures.items()],
        "job_energy": [[job, *energy] for job, energy in result.job_energy.items()],
        "adjustments": result.adjustments,
        "jobs": [[getattr(j, f.name) for f in fields(JobCost)] for j in jobs],
    }
    return zlib.compress(json.dumps(body, separators=(",", ":")).encode(), 6)


def thaw(frozen: bytes) -> tuple[Attribution, list[JobCost]]:
    """``freeze``'s month back, as it was."""
    body = json.loads(zlib.decompress(frozen))
    names = [f.name for f in fields(Line)]

    def line(values: list[Any]) -> Line:
        row = dict(zip(names, values, strict=True))
        for name in _DATES:
            if row[name] is not None:
                row[name] = dt.date.fromisoformat(row[name])
        return Line(**row)

    result = Attribution(
        organization_id=body["organization_id"],
        month=dt.date.fromisoformat(body["month"]),
        lines=[line(values) for values in body["lines"]],
        pools=[Pool(*values) for values in body["pools"]],
        overhead=body["overhead"],
        overhead_of_month=body.get("overhead_of_month", body["overhead"]),
        currency=body.get("currency", ""),
        unallocated_idle=body["unallocated_idle"],
        unallocated_overhead=body["unallocated_overhead"],
        idle_by_day={dt.date.fromisoformat(day): cents for day, cents in body["idle_by_day"]},
        names=Names(**{name: {int(k): v for k, v in pairs} for name, pairs in body["names"].items()}),
        job_measures={job: (held, measured, busy) for job, held, measured, busy in body["job_measures"]},
        job_energy={job: (e, x, g) for job, e, x, g in body.get("job_energy", [])},
        adjustments=body["adjustments"],
    )
    return result, [JobCost(*values) for values in body["jobs"]]


def closed(organization_id: int, month: dt.date) -> tuple[Attribution, list[JobCost]] | None:
    """A closed month as it was closed (kept while its revision stands), or None for an open month."""
    first, _ = month_bounds(month)
    state = f"billing:period:{organization_id}:{first:%Y-%m}:{version(organization_id)}"
    period = cache.get(state)  # the revision in force, 0 for an open month
    if period is None:
        period = (
            Period.objects.filter(organization_id=organization_id, month=first, closed=True)
            .values_list("revision", flat=True)
            .first()
        ) or 0
        cache.set(state, period, CACHE_SECONDS)
    if not period:
        return None
    key = f"billing:closed:{organization_id}:{first:%Y-%m}:{period}"
    found = cache.get(key)
    if isinstance(found, tuple):
        return found
    snapshot = Period.objects.filter(organization_id=organization_id, month=first).values_list("snapshot", flat=True)
    result = thaw(bytes(snapshot[0]))
    cache.set(key, result, CLOSED_CACHE_SECONDS)
    return result


def charges_to_date(organization_id: int, now: dt.datetime) -> dict[tuple[str, int], Decimal]:
    """What ``BUDGET_CHARGES`` names: each team's and project's full charge in ``now``'s month so far (usage with its
    shares of idle capacity and overhead, corrections of closed months included: its statement's total), keyed
    ``("team", id)`` and ``("project", id)``, for the budgets that count it."""
    month = kept(organization_id, now.astimezone(dt.UTC).date())
    found: dict[tuple[str, int], Decimal] = {}
    for dimension in ("team", "project"):
        for row in month.rollup([dimension]):
            if row[dimension] is not None:
                found[(dimension, row[dimension])] = money(row["total"])
    return found


#: How long a month's attribution is kept: the meter writes every minute, so a page is a minute behind at most.
CACHE_SECONDS = 60
#: A closed month does not change: kept for an hour.
CLOSED_CACHE_SECONDS = 3600


def kept(organization_id: int, month: dt.date) -> Attribution:
    """``attribute``, kept for ``CACHE_SECONDS`` (and no longer than the price book and overhead stay the same);
    a closed month as it was closed."""
    frozen = closed(organization_id, month)
    if frozen is not None:
        return frozen[0]
    key = f"billing:attribution:{organization_id}:{month_bounds(month)[0]:%Y-%m}:{version(organization_id)}"
    found = cache.get(key)
    if isinstance(found, Attribution):
        return found
    result = attribute(organization_id, month)
    cache.set(key, result, CACHE_SECONDS)
    return result


def kept_job_costs(
    organization_id: int, month: dt.date, teams: Iterable[int] | None = None, limit: int | None = None
) -> list[JobCost]:
    """``job_costs``, kept as long as ``kept`` keeps the month (pages ask for the same top jobs again); a closed
    month's as it was closed."""
    frozen = closed(organization_id, month)
    if frozen is not None:
        keep = None if teams is None else set(teams)
        jobs = [j for j in frozen[1] if keep is None or j.team in keep]
        return jobs if limit is None else jobs[:limit]
    who = "all" if teams is None else ",".join(map(str, sorted(set(teams))))
    key = f"billing:jobs:{organization_id}:{month_bounds(month)[0]:%Y-%m}:{version(organization_id)}:{who}:{limit}"
    found = cache.get(key)
    if isinstance(found, list):
        return found
    result = job_costs(organization_id, month, teams, limit)
    cache.set(key, result, CACHE_SECONDS)
    return result
