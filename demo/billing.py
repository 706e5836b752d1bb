"""Billing's demo data: the demo fleet's price book and overhead, and months of past jobs to bill and forecast.

The history is made the way it would have happened: jobs of the demo teams arrive through each day (fewer at
weekends, more as the months go by), each waits until enough accelerators of its flavor are free (the
earliest-free nodes, whole nodes for jobs of eight or more) and holds them for its run. The jobs, their
attempts, assignments and events are written as the placement loop writes them; then the meter meters them
like any others, and the fleet's capacity is back-filled over the same months. Deterministic (one seed), and
idempotent: history is only written once per organization.
"""

from __future__ import annotations

import datetime as dt
import math
import random
from dataclasses import dataclass
from decimal import Decimal

from django.contrib.auth import get_user_model
from django.contrib.auth.models import User
from django.db import transaction
from django.utils import timezone

from billing.actions import metering, periods, prices
from billing.models import CapacityChange, Overhead, Price
from clusters import capacity
from clusters.capacity import CapacityType
from clusters.models import AcceleratorType, Cluster, ElasticPool, Node
from governance.models import PriorityTier, Queue
from scheduler.actions import lifecycle
from scheduler.models import Assignment, Attempt, Job, JobEvent
from tenancy.models import Organization, Project, Team

HISTORY_DAYS = 182
KINDS = ("train", "finetune", "eval", "sweep", "pretrain")
HISTORY_KEY = "history-"
#: Cluster slug -> the price book's row: on-prem from the node's costs, the cloud TPU at its list price.
PRICE_BOOK: dict[str, dict[str, object]] = {
    "onprem-h100": {
        "capacity_type": CapacityType.ON_PREM,
        "purchase_price": "300000",
        "accelerators_per_node": 8,
        "depreciation_months": 48,
        "power_kw": "10.2",
        "energy_price": "0.15",
        "hosting_per_month": "1500",
    },
    "slurm-a100": {
        "capacity_type": CapacityType.ON_PREM,
        "purchase_price": "150000",
        "accelerators_per_node": 8,
        "depreciation_months": 48,
        "power_kw": "6.5",
        "energy_price": "0.15",
        "hosting_per_month": "1000",
    },
    "tpu-v5p": {"capacity_type": CapacityType.ON_DEMAND, "hourly_rate": "4.2000"},
}
OVERHEAD = ("Platform team, support contracts and storage", Decimal("40000.00"))
#: What an accelerator-hour of an elastic pool's nodes costs, by the pool's capacity type (a cloud's list price).
POOL_RATES = {CapacityType.ON_DEMAND: "8.5000", CapacityType.SPOT: "3.4000", CapacityType.RESERVED: "5.2000"}
#: team slug -> (user, jobs a weekday at the start, {flavor: weight}, sizes in accelerators, hours median)
TEAMS = {
    "vision": ("alice", 18, {"H100-SXM-80GB": 3, "A100-SXM-40GB": 1}, (1, 4, 8, 16, 32, 64), 10.0),
    "robotics": ("bob", 14, {"A100-SXM-40GB": 3, "H100-SXM-80GB": 1, "v5p": 1}, (2, 4, 8, 16, 32), 8.0),
}


def seed_prices(org: Organization, since: dt.date) -> None:
    """The demo clusters' price book rows (from ``since``), its elastic pools' (``POOL_RATES``) and the
    organization's overhead, once."""
    now = timezone.now()
    for cluster in Cluster.objects.filter(organization=org, slug__in=PRICE_BOOK):
        row = PRICE_BOOK[cluster.slug]
        flavors = AcceleratorType.objects.filter(pk__in=cluster.nodes.values("accelerator_id"))
        for flavor in flavors:
            if Price.objects.filter(cluster=cluster, flavor=flavor).exists():
                continue
            values = prices.clean_price(
                org, {**row, "cluster": cluster.pk, "flavor": flavor.pk, "effective_from": since.isoformat()}
            )
            Price.objects.create(organization=org, updated_at=now, **{**values, "note": "Demo price book"})
    for pool in ElasticPool.objects.filter(cluster__organization=org).select_related("cluster"):
        kind = pool.capacity_type
        if (
            kind in POOL_RATES
            and not Price.objects.filter(cluster=pool.cluster, flavor=pool.accelerator_id, capacity_type=kind).exists()
        ):
            asked = {"cluster": pool.cluster_id, "flavor": pool.accelerator_id, "capacity_type": kind,
                     "hourly_rate": POOL_RATES[kind], "effective_from": since.isoformat()}  # fmt: skip
            values = prices.clean_price(org, asked)
            Price.objects.create(organization=org, updated_at=now, **{**values, "note": f"Demo: pool {pool.name}"})
    name, amount = OVERHEAD
    Overhead.objects.get_or_create(
        organization=org, name=name, defaults={"amount": amount, "starts": since.replace(day=1), "updated_at": now}
    )


@dataclass
class _Pool:
    cluster: Cluster
    flavor: AcceleratorType
    nodes: list[Node]
    #: Per node, when each of its accelerators is next free (seconds since the history began).
    free: list[list[float]]
    rate: Decimal


def _pools(org: Organization) -> dict[str, _Pool]:
    book, today = prices.RateBook.of(org), timezone.now().date()
    pools: dict[str, _Pool] = {}
    nodes = Node.objects.filter(cluster__organization=org, present=True, accelerators__gt=0, accelerator__isnull=False)
    for node in nodes.select_related("cluster", "accelerator").order_by("pk"):
        assert node.accelerator is not None
        pool = pools.get(node.accelerator.name)
        if pool is None:
            kind = capacity.capacity_type(node.labels or {}, node.cluster.kind, node.cluster.options or {})
            rate = book.rate((node.cluster_id, node.accelerator_id, kind), today) or Decimal(0)
            pool = pools[node.accelerator.name] = _Pool(node.cluster, node.accelerator, [], [], rate)
        if node.cluster_id == pool.cluster.pk:
            pool.nodes.append(node)
            pool.free.append([0.0] * node.accelerators)
    return pools


def _place(pool: _Pool, wanted: int, submitted: float, hours: float) -> tuple[float, list[tuple[Node, list[int]]]]:
    """When the job starts (the earliest the accelerators are free, not before it was submitted) and on what."""
    per_node = len(pool.free[0])
    if wanted >= per_node:
        count = math.ceil(wanted / per_node)
        ranked = sorted(range(len(pool.nodes)), key=lambda i: (max(pool.free[i]), i))[:count]
        start = max([submitted, *(max(pool.free[i]) for i in ranked)])
        chosen = [(i, list(range(per_node))) for i in ranked]
    else:
        best = min(range(len(pool.nodes)), key=lambda i: (sorted(pool.free[i])[wanted - 1], i))
        indices = sorted(range(per_node), key=lambda k: (pool.free[best][k], k))[:wanted]
        start = max(submitted, max(pool.free[best][k] for k in indices))
        chosen = [(best, indices)]
    for i, indices in chosen:
        for k in indices:
            pool.free[i][k] = start + hours * 3600
    return start, [(pool.nodes[i], indices) for i, indices in chosen]


def seed_history(org: Organization, days: int = HISTORY_DAYS, now: dt.datetime | None = None, seed: int = 7) -> int:
    """``days`` of past jobs, metered, and the fleet's capacity over them. Returns the jobs written (0 when
    the organization already has its history, or lacks the demo teams, users or fleet)."""
    now = (now or timezone.now()).replace(microsecond=0)
    begin = now - dt.timedelta(days=days)
    if Job.objects.filter(team__organization=org, idempotency_key__startswith=HISTORY_KEY).exists():
        return 0
    seed_prices(org, begin.date() - dt.timedelta(days=1))
    pools = _pools(org)
    users = {u.username: u for u in get_user_model().objects.filter(username__in=[t[0] for t in TEAMS.values()])}
    teams = {t.slug: t for t in Team.objects.filter(organization=org, slug__in=TEAMS)}
    queues = {q.team_id: q for q in Queue.objects.filter(team__in=teams.values(), project=None)}
    tier = PriorityTier.objects.filter(organization=org, is_default=True).first()
    if not pools or tier is None or len(teams) < len(TEAMS) or len(users) < len(TEAMS) or len(queues) < len(teams):
        return 0
    projects = {slug: list(Project.objects.filter(team=team)) for slug, team in teams.items()}
    rnd = random.Random(seed)  # noqa: S311 - reproducible demo data, not secrets

    arrivals = []
    for slug, (username, per_day, flavors, sizes, median_hours) in TEAMS.items():
        for day in range(days):
            growth = 1 + 0.6 * day / days
            weekend = (begin + dt.timedelta(days=day)).weekday() >= 5
            expected = per_day * growth * (0.35 if weekend else 1.0)
            for _ in range(_poisson(rnd, expected)):
                at = day * 86400 + rnd.uniform(0, 86400)
                flavor = rnd.choices(list(flavors), weights=list(flavors.values()))[0]
                size = rnd.choice(sizes)
                hours = min(72.0, rnd.lognormvariate(math.log(median_hours), 0.9))
                arrivals.append((at, slug, username, flavor, size, hours))
    arrivals.sort()

    runs = []
    for n, (at, slug, username, flavor, size, hours) in enumerate(arrivals):
        pool = pools.get(flavor)
        if pool is None:
            continue
        start, placed = _place(pool, size, at, hours)
        end = start + hours * 3600
        if begin + dt.timedelta(seconds=end) <= now:  # one that would still run is left out: the live demo runs
            runs.append(
                _Run(
                    n,
                    teams[slug],
                    users[username],
                    pool,
                    placed,
                    size,
                    hours,
                    *(begin + dt.timedelta(seconds=s) for s in (at, start, end)),
                )
            )
    with transaction.atomic():
        _write(runs, projects, queues, tier, rnd)
    metering.meter(org, now)
    metering.backfill_capacity(org, begin, now)
    return len(runs)


@dataclass(frozen=True)
class _Run:
    n: int
    team: Team
    user: User
    pool: _Pool
    placed: list[tuple[Node, list[int]]]
    size: int
    hours: float
    submitted: dt.datetime
    admitted: dt.datetime
    ended: dt.datetime


def _write(
    runs: list[_Run],
    projects: dict[str, list[Project]],
    queues: dict[int, Queue],
    tier: PriorityTier,
    rnd: random.Random,
) -> None:
    """The runs' jobs, attempts, assignments and events, as the placement loop would have written them."""
    jobs = []
    for run in runs:
        per_node = len(run.pool.free[0])
        workers, per_worker = (len(run.placed), per_node) if run.size >= per_node else (1, run.size)
        jobs.append(
            Job(
                team=run.team,
                project=rnd.choice([*projects[run.team.slug], None]),
                queue=queues[run.team.pk],
                submitted_by=run.user,
                tier=tier,
                name=f"{rnd.choice(KINDS)}-{run.n:05d}",
                idempotency_key=f"{HISTORY_KEY}{run.n}",
                accelerator_types=[run.pool.flavor.name],
                accelerators=per_worker,
                workers=workers,
                time_limit=math.ceil(run.hours * 1.5 * 3600),
                image="ghcr.io/demo/train:1",
                command=["python", "train.py"],
                state=Job.State.SUCCEEDED,
                state_changed_at=run.ended,
                submitted_at=run.submitted,
                attempt=1,
                started_at=run.admitted,
                finished_at=run.ended,
            )
        )
    Job.objects.bulk_create(jobs, batch_size=500)
    attempts = [
        Attempt(
            job=job,
            number=1,
            cluster=run.pool.cluster,
            flavor=run.pool.flavor.name,
            cost_per_hour=run.pool.rate * run.size,
            admitted_at=run.admitted,
            started_at=run.admitted,
            ended_at=run.ended,
            outcome=Attempt.Outcome.SUCCEEDED,
            backend_id=f"{HISTORY_KEY}{run.n}",
        )
        for job, run in zip(jobs, runs, strict=True)
    ]
    Attempt.objects.bulk_create(attempts, batch_size=500)
    Assignment.objects.bulk_create(
        [
            Assignment(
                attempt=attempt,
                node=node,
                workers=1,
                accelerators=[[k, 1000] for k in indices],
                cpu=8000 * len(indices),
                memory=65536 * len(indices),
            )
            for attempt, run in zip(attempts, runs, strict=True)
            for node, indices in run.placed
        ],
        batch_size=1000,
    )
    S = Job.State
    events = []
    for job, run in zip(jobs, runs, strict=True):
        events.append(JobEvent(job=job, created_at=run.submitted, to_state=S.PENDING, reason="submitted"))
        for frm, to, reason, when in (
            (S.PENDING, S.ADMITTED, "admitted", run.admitted),
            (S.ADMITTED, S.RUNNING, "started", run.admitted),
            (S.RUNNING, S.SUCCEEDED, "succeeded", run.ended),
        ):
            events.append(lifecycle.event(job.pk, frm, to, reason, attempt=1, at=when))
    JobEvent.objects.bulk_create(events, batch_size=1000)


def _poisson(rnd: random.Random, mean: float) -> int:
    """A Poisson draw (Knuth's method; the means here are small)."""
    limit, k, product = math.exp(-mean), 0, rnd.random()
    while product > limit:
        k += 1
        product *= rnd.random()
    return k


def close_history(org: Organization, now: dt.datetime) -> list[str]:
    """Close the history's ended months but the last, as finance would have (the last is left for the demo's
    finance user to close): months closed, as YYYY-MM. Idempotent: a month closed already is left alone."""
    finance = get_user_model().objects.filter(username="fiona").first()
    if finance is None:
        return []
    first = Job.objects.filter(team__organization=org, idempotency_key__startswith=HISTORY_KEY).order_by("submitted_at")
    oldest = first.values_list("submitted_at", flat=True).first()
    if oldest is None:
        return []
    month = oldest.date().replace(day=1)
    last_ended = (now.date().replace(day=1) - dt.timedelta(days=1)).replace(day=1)
    shut = periods.closed_months(org.pk)
    closed = []
    while month < last_ended:
        if month not in shut:
            periods.close(finance, org, month)
            closed.append(f"{month:%Y-%m}")
        month = (month + dt.timedelta(days=32)).replace(day=1)
    return closed


def seed_capacity_plan(org: Organization, today: dt.date) -> list[str]:
    """What procurement has planned for the largest accelerator type: an order placed a month ago arriving in six
    weeks, and a retirement in four months (rows written as they stand, not through the action: nobody of the demo
    made them). Once only."""
    if CapacityChange.objects.filter(organization=org).exists():
        return []
    counts: dict[int, int] = {}
    for flavor_id, accelerators in Node.objects.filter(
        cluster__organization=org, present=True, accelerator__isnull=False
    ).values_list("accelerator_id", "accelerators"):
        counts[flavor_id] = counts.get(flavor_id, 0) + accelerators
    if not counts:
        return []
    flavor = AcceleratorType.objects.get(pk=max(sorted(counts), key=lambda pk: counts[pk]))
    now = timezone.now()
    ordered = today - dt.timedelta(days=30)
    rows = [
        CapacityChange(
            organization=org, flavor=flavor, kind=CapacityChange.Kind.ORDER, accelerators=16, ordered_on=ordered,
            lead_days=72, starts_on=ordered + dt.timedelta(days=72), note="two more nodes", updated_at=now,
        ),
        CapacityChange(
            organization=org, flavor=flavor, kind=CapacityChange.Kind.RETIREMENT, accelerators=8,
            starts_on=today + dt.timedelta(days=120), note="the oldest node, out of warranty", updated_at=now,
        ),
    ]  # fmt: skip
    CapacityChange.objects.bulk_create(rows)
    return [str(row) for row in rows]
