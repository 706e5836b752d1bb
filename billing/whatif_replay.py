"""The replay behind a capacity what-if (``billing/actions/whatif.py``): the organization's last ``days`` days of jobs
through the simulator (``scheduler.simulation``) with the production engine, on today's fleet and on one with
N nodes of a flavor added to (or removed from) a cluster, measured side by side. No HTTP, no writes.

Decisions, each a choice a reader of the result should know:

- **Today's fleet** is the organization's idle fleet (``scheduler.placement.snapshot.fleet`` with nothing placed) less
  the nodes that take no work today, by the placement loop's own rule: a node counts if it is present, ready,
  healthy and schedulable (not cordoned, draining, drained or down) on a cluster that is neither disabled nor
  unreachable. A what-if asks what the fleet as it serves could do.
- **Adding** N nodes copies a template: the first node by name of that flavor in that cluster that takes work
  (else the first present one), with its accelerators, CPU, memory, price and topology domains; each copy is
  named ``<cluster>/what-if-<k>``. **Removing** N takes out that flavor's nodes in that cluster that take work,
  the last by name first (deterministic; names usually grow with age, so the newest racks go first).
- **The workload** is every job of the organization submitted in the window ``[now - days, now)``, at its
  submission time (seconds from the window's start), as the placement loop's engine sees it
  (``scheduler.placement.jobs.engine_job`` on the same columns): its shape, queue, tier, time limit, price limit,
  preemptibility, topology, Ray head, TPU slice shape, team and spread group, its accepted accelerator types
  narrowed by its queue's flavor order (as the engine narrows them) and its allowed clusters (named clusters and
  regions). Its duration is the time it held capacity: over its
  attempts, the end (or now, for one still running) less the start (or the admission, when the cluster never
  reported a start). A job waiting now that never ran replays with its time limit; a job that ended without
  ever running (cancelled, or failed before it started) is left out. A job that no node could ever hold, or
  whose accepted types or clusters leave nothing, is reported under ``never_fits``.
- **The policy** is the production engine (``jobs.Quartermaster``) under the organization's rules as the
  placement loop reads them (``Rules``): its tiers, its cohort tree and its queues with their quotas, borrowing
  and lending limits, flavor orders and preemption settings, and fair sharing's memory (half-life and weight),
  cycling at most every ``CYCLE_SECONDS`` as the placement loop does. So nodes bought beside quotas that stay
  as they are help only as far as borrowing lets the queues reach them: what a purchase without a quota change
  would do. Member limits and hard budgets are not replayed yet. The fleet starts empty at the window's start
  (jobs submitted earlier are not replayed).
- **Lead time**: bought nodes arrive ``lead_days`` into the window (out of service until then, as a node down
  from the start); reserved ones are there from the start.
- **Utilisation** is busy accelerator-seconds within the window over the fleet's accelerator-seconds in it
  (of the whole fleet, and of the flavor changed; a node counts from its arrival); queue wait is what each job
  that finished waited in all (including after preemptions). ``observed`` is what the same jobs waited in
  reality until first placed.
- **Cost** is each fleet's nodes at today's price book over the window, each from its arrival, to the cent in
  the organization's currency: a node's rate is its cluster's for its type and capacity type (on-prem: the
  purchase written off over its months, power and hosting; cloud: the hourly rate), so a bought node costs what
  the cluster's nodes of its type cost, and a reserved one the book's reserved rate. ``priced`` sets the extra
  cost beside the hours of waiting saved: what a saved hour of waiting costs.
"""

from __future__ import annotations

import math
import random
import time
from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from decimal import ROUND_HALF_EVEN, Decimal
from typing import Any

import numpy as np
from django.conf import settings
from django.core.exceptions import ValidationError
from django.db.models import QuerySet
from django.utils import timezone

from clusters.models import Cluster, Node
from governance.models import FairShare
from scheduler.engine import model as m
from scheduler.models import Attempt, Job
from scheduler.placement import snapshot
from scheduler.placement.jobs import REQUEST_COLUMNS, engine_job
from scheduler.simulation.events import Outage, Outcome, SimJob, Simulation
from scheduler.simulation.jobs import Quartermaster
from scheduler.simulation.pools import Pool
from scheduler.states import WAITING
from tenancy.models import Organization

CYCLE_SECONDS = 10.0  # the placement loop's beat (``placement-cycle``)
LISTED = 50  # job ids listed under never_fits and stuck
DAY = 86_400.0
CENT = Decimal("0.01")


# ---------------------------------------------------------------------------------------------- fleets


@dataclass(frozen=True, slots=True)
class Fleet:
    clusters: tuple[m.Cluster, ...]
    nodes: tuple[m.Node, ...]
    #: Every flavor in the default fallback order (a queue without its own order tries them so).
    every_flavor: tuple[str, ...]
    #: Present nodes that take no work today, kept as templates for a flavor with none in service.
    idle: tuple[m.Node, ...] = ()


def in_service(nodes: QuerySet[Node]) -> QuerySet[Node]:
    """Those of ``nodes`` that take work today (``Node.takes_work``, on a cluster neither disabled nor
    unreachable): the placement loop's rule, which the ask, the replay and the pages share."""
    return nodes.filter(present=True, ready=True, healthy=True, state=Node.State.SCHEDULABLE).exclude(
        cluster__status__in=(Cluster.Status.DISABLED, Cluster.Status.UNREACHABLE)
    )


def today_fleet(organization: Organization) -> Fleet:
    """The nodes that take work today (see the module's docstring), each with its capacity free."""
    index = snapshot.Index(generation=0)
    clusters, nodes, every_flavor = snapshot.fleet(organization, index, None)
    serving = set(in_service(Node.objects.filter(cluster__organization=organization)).values_list("pk", flat=True))
    working = tuple(n for n in nodes if index.nodes[n.name] in serving)
    idle = tuple(n for n in nodes if index.nodes[n.name] not in serving)
    return Fleet(clusters, working, every_flavor, idle)


def change_errors(cluster: str, flavor: str, nodes: int, serving: int, present: int) -> dict[str, str]:
    """What is wrong with adding (removing) ``nodes`` nodes of ``flavor`` to ``cluster``, which has ``serving``
    of them in service and ``present`` in all."""
    if nodes > 0 and present == 0:
        return {"flavor": f"Cluster {cluster} has no {flavor} nodes to copy; choose a flavor it has."}
    if nodes < 0 and -nodes > serving:
        return {"nodes": f"Cluster {cluster} has {serving} {flavor} nodes in service; at most {serving} can go."}
    return {}


def changed_fleet(
    fleet: Fleet, cluster: str, flavor: str, nodes: int, rate: Decimal | None = None
) -> tuple[Fleet, dict[str, Any]]:
    """``fleet`` with ``nodes`` nodes of ``flavor`` added to (removed from, when negative) ``cluster``, and what
    changed; added nodes cost ``rate`` an accelerator-hour when given (reserved capacity), else what the template
    costs. ``ValidationError`` names the field when the change is impossible on this fleet."""
    if not any(c.name == cluster for c in fleet.clusters):
        raise ValidationError({"cluster": f"Cluster {cluster} is disabled: it has no fleet to change."})
    mine = sorted((n for n in fleet.nodes if n.cluster == cluster and n.flavor == flavor), key=lambda n: n.name)
    spare = sorted((n for n in fleet.idle if n.cluster == cluster and n.flavor == flavor), key=lambda n: n.name)
    if errors := change_errors(cluster, flavor, nodes, len(mine), len(mine) + len(spare)):
        raise ValidationError(errors)
    if nodes < 0:
        gone = {n.name for n in mine[nodes:]}
        kept = tuple(n for n in fleet.nodes if n.name not in gone)
        return replace(fleet, nodes=kept), {"removed": sorted(gone)}
    template = (mine or spare)[0]
    if rate is not None:
        template = replace(template, price_per_accel_hour=float(rate))
    taken = {n.name for n in (*fleet.nodes, *fleet.idle)}
    added: list[m.Node] = []
    k = 0
    while len(added) < nodes:
        k += 1
        name = f"{cluster}/what-if-{k}"
        if name not in taken:
            added.append(replace(template, name=name, healthy=True, schedulable=True))
    return replace(fleet, nodes=(*fleet.nodes, *added)), {"template": template.name, "added": len(added)}


# -------------------------------------------------------------------------------------------- workload


@dataclass(slots=True)
class Workload:
    jobs: list[SimJob]
    #: Jobs whose accepted types or clusters leave no node at all (before any fleet is asked).
    never_fits: list[str]
    #: Left out: ended without ever running.
    left_out: int
    #: Replayed with their time limit: waiting now, never ran.
    at_limit: int
    #: What the jobs waited in reality until their first placement (seconds), for comparison.
    observed_waits: list[float]


def _ts(value: datetime | None, start: datetime) -> float:
    return (value - start).total_seconds() if value is not None else 0.0


def history(organization: Organization, start: datetime, end: datetime, queues: Sequence[m.Queue]) -> Workload:
    """The jobs of ``organization`` submitted in ``[start, end)`` as the simulator replays them (see the
    module's docstring), in submission order; ``end`` stands for now."""
    jobs_of = Job.objects.filter(team__organization=organization, submitted_at__gte=start, submitted_at__lt=end)
    ran: dict[int, float] = defaultdict(float)
    first: dict[int, datetime] = {}
    for job_id, admitted, started, ended in Attempt.objects.filter(job__in=jobs_of.values("pk")).values_list(
        "job_id", "admitted_at", "started_at", "ended_at"
    ):
        ran[job_id] += max(0.0, ((ended or end) - (started or admitted)).total_seconds())
        if job_id not in first or admitted < first[job_id]:
            first[job_id] = admitted
    named: dict[int, set[str]] = defaultdict(set)
    for job_id, slug in Job.clusters.through.objects.filter(job__in=jobs_of.values("pk")).values_list(
        "job_id", "cluster__slug"
    ):
        named[job_id].add(slug)
    regions = dict(Cluster.objects.filter(organization=organization).values_list("slug", "region"))
    queue_flavors = {q.name: q.flavors for q in queues}
    workload = Workload([], [], 0, 0, [])
    for j in jobs_of.values("state", *REQUEST_COLUMNS).order_by("submitted_at", "pk"):
        pk = j["pk"]
        duration = ran.get(pk, 0.0)
        if pk in first:
            workload.observed_waits.append(max(0.0, (first[pk] - j["submitted_at"]).total_seconds()))
        if duration <= 0:
            if j["state"] not in WAITING:
                workload.left_out += 1
                continue
            duration = float(j["time_limit"])
            workload.at_limit += 1
        request = engine_job({**j, "clusters": ()})
        types = set(request.flavors)
        flavors = tuple(f for f in queue_flavors.get(request.queue, ()) if not types or f in types)
        clusters = set(regions)
        if named.get(pk):
            clusters &= named[pk]
        if request.regions:
            clusters &= {slug for slug, region in regions.items() if region in request.regions}
        if not flavors or not clusters:
            workload.never_fits.append(request.id)
            continue
        workload.jobs.append(
            SimJob.of(
                request,
                submitted=_ts(j["submitted_at"], start),
                duration=max(1.0, duration),
                flavors=flavors,
                clusters=tuple(sorted(clusters)) if len(clusters) < len(regions) else (),
            )
        )
    return workload


@dataclass(frozen=True, slots=True)
class Rules:
    """What the placement loop decides by besides the fleet: tiers, the cohort tree, the queues with their quotas,
    flavor orders and preemption settings, and how fair sharing remembers (``FairShare``)."""

    tiers: tuple[m.Tier, ...]
    cohorts: tuple[m.Cohort, ...]
    queues: tuple[m.Queue, ...]
    half_life: float = 0.0
    usage_weight: float = 1.0


def resample(workload: Workload, days: int, seed: int) -> Workload:
    """The workload with its days drawn again (seed 0: as it was): day ``d`` of the window replays the jobs of a
    day drawn at random with replacement, at their times of day, so that a scenario's figures can be seen to
    hold on histories like the one that was and not only on its particular days. Copies of a job are told apart
    by ``.<day>`` after its id."""
    if seed == 0:
        return workload
    rng = random.Random(seed)  # noqa: S311 - a resampling, not a secret
    by_day: dict[int, list[SimJob]] = defaultdict(list)
    for job in workload.jobs:
        by_day[min(days - 1, int(job.submitted // DAY))].append(job)
    drawn: list[SimJob] = []
    for day in range(days):
        source = rng.randrange(days)
        for job in by_day[source]:
            name = f"{job.id}.{day}"
            request = replace(job.request, id=name) if job.request is not None else None
            drawn.append(replace(job, id=name, submitted=job.submitted + (day - source) * DAY, request=request))
    drawn.sort(key=lambda j: (j.submitted, j.id))
    return replace(workload, jobs=drawn)


def grown(rules: Rules, flavor: str, factor: float) -> Rules:
    """``rules`` with every quota of ``flavor`` (of queues and cohorts: nominal, borrowing and lending limits)
    times ``factor``, rounded up: the quotas an admin would give a fleet that grew (or shrank) by it."""

    def scale(quotas: m.Quotas) -> m.Quotas:
        def times(value: int | None) -> int | None:
            return None if value is None else math.ceil(value * factor)

        return {
            key: replace(q, nominal=math.ceil(q.nominal * factor), borrowing_limit=times(q.borrowing_limit),
                         lending_limit=times(q.lending_limit)) if key[0] == flavor else q
            for key, q in quotas.items()
        }  # fmt: skip

    return replace(
        rules,
        queues=tuple(replace(q, quotas=scale(q.quotas)) for q in rules.queues),
        cohorts=tuple(replace(c, quotas=scale(c.quotas)) for c in rules.cohorts),
    )


def governance(organization: Organization, every_flavor: tuple[str, ...]) -> Rules:
    """The organization's rules as the placement loop reads them (``snapshot.governance``; capacity requests
    approved for a while are left out: they end)."""
    tiers, cohorts, queues = snapshot.governance(organization, every_flavor, snapshot.Index(generation=0))
    memory = FairShare.objects.filter(organization=organization).first() or FairShare()
    return Rules(tiers, cohorts, queues, float(memory.half_life), memory.usage_weight)


# ------------------------------------------------------------------------------------------- replaying


def replay(
    fleet: Fleet,
    workload: Workload,
    rules: Rules,
    progress: Callable[[float], None] | None = None,
    outages: Sequence[Outage] = (),
    pools: Sequence[Pool] = (),
) -> tuple[Outcome, list[tuple[float, float, float, str, str]]]:
    """The workload through the production engine on ``fleet`` under ``rules``: what happened, and every run."""
    config = m.Config(max_admissions_per_cycle=settings.PLACEMENT_MAX_ADMISSIONS, usage_weight=rules.usage_weight)
    policy = Quartermaster(
        fleet.clusters, config, rules.tiers, rules.queues, half_life=rules.half_life, cohorts=rules.cohorts
    )
    total = max(1, len(workload.jobs))
    simulation = Simulation(
        fleet.clusters,
        fleet.nodes,
        workload.jobs,
        policy,
        cycle_seconds=CYCLE_SECONDS,
        progress=(lambda done: progress(done / total)) if progress else None,
        keep_runs=True,
        outages=outages,
        pools=pools,
    )
    outcome = simulation.run()
    outcome.never_fits[:0] = workload.never_fits
    return outcome, simulation.runs or []


def _waits(values: Sequence[float]) -> dict[str, float | None]:
    if not values:
        return {"mean_wait_s": None, "p50_wait_s": None, "p95_wait_s": None, "max_wait_s": None}
    waits = np.asarray(values, dtype=float)
    return {
        "mean_wait_s": round(float(waits.mean()), 1),
        "p50_wait_s": round(float(np.percentile(waits, 50)), 1),
        "p95_wait_s": round(float(np.percentile(waits, 95)), 1),
        "max_wait_s": round(float(waits.max()), 1),
    }


def _job_id(name: str) -> int:
    """The portal's id of a replayed job (a resampled copy's, of its original)."""
    return int(str(name).split(".", 1)[0])


def fleet_cost(fleet: Fleet, days: int, arriving: Mapping[str, float] | None = None) -> Decimal:
    """What ``fleet`` costs over ``days`` days at its nodes' rates (the price book's, per accelerator-hour), each
    node from when it arrives (``arriving``: seconds into the window; others from the start), to the cent."""
    arriving = arriving or {}
    total = Decimal(0)
    for node in fleet.nodes:
        hours = Decimal(str(max(0.0, days * DAY - arriving.get(node.name, 0.0)))) / 3600
        total += Decimal(str(node.price_per_accel_hour)) * node.accel_count * hours
    return total.quantize(CENT, rounding=ROUND_HALF_EVEN)


def measures(
    outcome: Outcome,
    runs: Sequence[tuple[float, float, float, str, str]],
    fleet: Fleet,
    flavor: str,
    days: int,
    arriving: Mapping[str, float] | None = None,
) -> dict[str, Any]:
    """Queue wait, utilisation and cost of one replay over a window of ``days`` days, and a series per day.
    Nodes in ``arriving`` (seconds into the window) count toward utilisation and cost from then."""
    span = days * DAY
    arriving = arriving or {}
    accelerators = sum(n.accel_count for n in fleet.nodes)
    flavor_nodes = [n for n in fleet.nodes if n.flavor == flavor]
    flavor_accelerators = sum(n.accel_count for n in flavor_nodes)
    present = sum(n.accel_count * (span - min(span, arriving.get(n.name, 0.0))) for n in fleet.nodes)
    flavor_present = sum(n.accel_count * (span - min(span, arriving.get(n.name, 0.0))) for n in flavor_nodes)
    busy, flavor_busy = 0.0, 0.0
    busy_by_day = np.zeros(days)
    for start, end, gpus, _, run_flavor in runs:
        start, end = max(start, 0.0), min(end, span)
        if end <= start:
            continue
        seconds = (end - start) * gpus
        busy += seconds
        if run_flavor == flavor:
            flavor_busy += seconds
        first, last = int(start // DAY), min(days - 1, math.ceil(end / DAY) - 1)
        for day in range(first, last + 1):
            overlap = min(end, (day + 1) * DAY) - max(start, day * DAY)
            if overlap > 0:
                busy_by_day[day] += overlap * gpus
    done = [r for r in outcome.records.values() if r.finished is not None]
    waits_by_day: dict[int, list[float]] = defaultdict(list)
    for r in done:
        waits_by_day[min(days - 1, max(0, int(r.job.submitted // DAY)))].append(r.waited)
    figures = outcome.figures()
    burst = Decimal(str(figures.get("elastic_cost", 0))).quantize(CENT, rounding=ROUND_HALF_EVEN)
    return {
        "jobs": len(done),
        **_waits([r.waited for r in done]),
        "wait_hours": round(sum(r.waited for r in done) / 3600, 2),
        "cost": str(fleet_cost(fleet, days, arriving) + burst),
        "burst_cost": str(burst),
        "utilisation": round(busy / present, 4) if present else None,
        "flavor_utilisation": round(flavor_busy / flavor_present, 4) if flavor_present else None,
        "nodes": len(fleet.nodes),
        "accelerators": accelerators,
        "flavor_nodes": len(flavor_nodes),
        "flavor_accelerators": flavor_accelerators,
        "preemptions": sum(r.preempted for r in done),
        "cycles": outcome.cycles,
        "makespan_s": figures.get("makespan_s"),
        "never_fits": len(outcome.never_fits),
        "never_fits_jobs": [_job_id(i) for i in outcome.never_fits[:LISTED]],
        "stuck": len(outcome.stuck),
        "stuck_jobs": [_job_id(i) for i in outcome.stuck[:LISTED]],
        "by_day": {
            "mean_wait_s": [
                round(float(np.mean(waits_by_day[d])), 1) if waits_by_day.get(d) else None for d in range(days)
            ],
            "utilisation": [round(float(b / (accelerators * DAY)), 4) if accelerators else None for b in busy_by_day],
        },
    }


def what_if_result(
    organization: Organization,
    cluster: str,
    flavor: str,
    nodes: int,
    days: int,
    now: datetime | None = None,
    progress: Callable[[float], None] | None = None,
    *,
    lead_days: int = 0,
    rate: Decimal | None = None,
    pool: Pool | None = None,
    seed: int = 0,
    grow_quotas: bool = False,
) -> dict[str, Any]:
    """Replay the last ``days`` days on today's fleet and on the changed one, and price both: the result a
    ``WhatIf`` keeps. Added nodes arrive ``lead_days`` into the window (until then they are out of service and
    cost nothing); ``rate`` prices them (reserved capacity), else they cost what the cluster's nodes of the type
    do."""
    started = time.perf_counter()
    now = now or timezone.now()
    start = now - timedelta(days=days)
    today = today_fleet(organization)
    if pool is not None:  # bursting: today's fleet, and the pool's nodes when the loop asks for them
        changed, change = today, {"pool": pool.name, "max_nodes": pool.max_nodes, "spot": pool.spot}
    else:
        changed, change = changed_fleet(today, cluster, flavor, nodes, rate)
    lead = lead_days * DAY
    if lead >= days * DAY:  # they arrive after the window: the replay is of today's fleet
        changed, lead = today, 0.0
        change["arrives_s"] = lead_days * DAY
    added = sorted({n.name for n in changed.nodes} - {n.name for n in today.nodes})
    arriving = dict.fromkeys(added, lead) if lead else {}
    outages = [Outage(name, 0.0, lead) for name in added] if lead else []
    if lead:
        change["arrives_s"] = lead
    rules = governance(organization, today.every_flavor)
    workload = resample(history(organization, start, now, rules.queues), days, seed)
    result: dict[str, Any] = {
        "window": {"start": start.isoformat(), "end": now.isoformat(), "days": days},
        "change": {"cluster": cluster, "flavor": flavor, "nodes": nodes, **change},
        "workload": {
            "jobs": len(workload.jobs) + len(workload.never_fits),
            "left_out": workload.left_out,
            "at_time_limit": workload.at_limit,
        },
        "observed": _waits(workload.observed_waits),
        "seed": seed,
        "days": [(start + timedelta(days=d)).date().isoformat() for d in range(days)],
    }
    bursting: tuple[Pool, ...] = (pool,) if pool is not None else ()
    changed_rules = rules
    if grow_quotas:
        before = sum(n.accel_count for n in today.nodes if n.flavor == flavor)
        after = sum(n.accel_count for n in changed.nodes if n.flavor == flavor)
        after += sum(p.accelerators * p.max_nodes for p in bursting if p.flavor == flavor)
        factor = after / before if before else 1.0
        changed_rules = grown(rules, flavor, factor)
        result["change"]["quotas_times"] = round(factor, 4)
    sides: tuple[tuple[str, Fleet, float, Mapping[str, float], Sequence[Outage], tuple[Pool, ...], Rules], ...] = (
        ("today", today, 0.0, {}, [], (), rules),
        ("changed", changed, 0.5, arriving, outages, bursting, changed_rules),
    )
    for name, fleet, low, late, down, pools, side_rules in sides:
        outcome, runs = replay(fleet, workload, side_rules, _half(progress, low), down, pools)
        result[name] = measures(outcome, runs, fleet, flavor, days, late)
        if progress:
            progress(low + 0.5)
    result["priced"] = priced(result["today"], result["changed"], organization.currency)
    result["seconds"] = round(time.perf_counter() - started, 2)
    return result


def priced(today: Mapping[str, Any], changed: Mapping[str, Any], currency: str) -> dict[str, Any]:
    """The change's price against what it does for waiting: what it costs over the window beyond today's fleet
    (negative: a saving), the hours of waiting it saves (all finished jobs' waits), and what each saved hour
    costs (None when it saves none)."""
    extra = Decimal(changed["cost"]) - Decimal(today["cost"])
    saved = round(float(today["wait_hours"]) - float(changed["wait_hours"]), 2)
    per_hour = (extra / Decimal(str(saved))).quantize(CENT, rounding=ROUND_HALF_EVEN) if saved > 0 else None
    return {
        "currency": currency,
        "extra_cost": str(extra),
        "wait_hours_saved": saved,
        "cost_per_wait_hour_saved": None if per_hour is None else str(per_hour),
    }


def _half(progress: Callable[[float], None] | None, low: float) -> Callable[[float], None] | None:
    """One replay's progress (0 to 1) as its half of the whole, from ``low``."""
    if progress is None:
        return None
    report = progress
    return lambda done: report(low + 0.5 * done)
