"""Elastic pools at the placement loop's edges (docs/scheduling.md §Elastic pools): what each pool could add, as the
engine reads it (``pools``), and the engine's wants written as asks in the cycle's own transaction (``ask``), so
that a cycle that lost the compare-and-set asks for nothing. After the commit the pool's cloud is asked
(``provision``: the ask is claimed under a row lock, so a task run twice asks once; a cloud that does not answer
leaves it to the next run), and on the beat (``settle``) nodes that came up are noted and those idle past their
pool's ``idle_release`` are given back while the pool keeps its minimum, never one that holds work (they are closed
to new work first, under the loop's compare-and-set). Every step is in the audit log and counted
in ``/metrics``.

A pool may add nodes up to its maximum, less the nodes it has (present, labelled with it) and those asked for and
not up yet; within its monthly budget, a bound: what its nodes have cost this month, what every node is paid for
until its work's time limits and release delay end, and what new nodes would cost over their holds, stay within it
(docs/scheduling.md §Elastic pools). Prices are the price book's for the pool's cluster, flavor and capacity type.
"""

from __future__ import annotations

import logging
import math
from collections import Counter, defaultdict
from collections.abc import Iterable
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import TYPE_CHECKING

from django.db import transaction
from django.db.models import F, Max
from django.utils import timezone

from clusters.actions.sync import backend_for
from clusters.backends.base import ELASTIC_POOL, BackendError, Unreachable
from clusters.backends.tpu.accelerators import UnknownAcceleratorType
from clusters.elastic import month_spend, pool_shape
from clusters.models import Cluster, ElasticGrant, ElasticPool, Node
from common.metrics import ELASTIC_NODES
from scheduler.engine import model as m
from scheduler.engine.elastic import horizons
from scheduler.models import Assignment, LoopState
from scheduler.placement.prices import Prices
from tenancy.actions import audit

if TYPE_CHECKING:
    from tenancy.models import Organization

#: Grants whose nodes are on their way.
COMING = (ElasticGrant.State.ASKED, ElasticGrant.State.COMING)


def engine_name(pool: ElasticPool) -> str:
    return f"{pool.cluster.slug}/{pool.name}"


def pools(
    organization: Organization, now: datetime, prices: Prices, known: dict[str, int], pending: Iterable[m.Job] = ()
) -> tuple[tuple[m.Elastic, ...], dict[str, float]]:
    """The organization's enabled pools as the engine reads them, priced from ``prices`` (the snapshot's price
    book), and how long new work may run on each of their nodes (by engine node name: ``Node.horizon``), given the
    work ``pending``; ``known`` gets each pool's engine name -> pk."""
    found = list(
        ElasticPool.objects.filter(cluster__organization=organization, enabled=True)
        .exclude(cluster__status=Cluster.Status.DISABLED)
        .select_related("cluster", "accelerator")
    )
    if not found:
        return (), {}
    members: defaultdict[tuple[int, str], dict[int, str]] = defaultdict(dict)  # (cluster, pool) -> node pk: name
    for pk, cluster_id, name, labels in Node.objects.filter(
        cluster__in={p.cluster_id for p in found}, present=True
    ).values_list("pk", "cluster_id", "name", "labels"):
        if (labels or {}).get(ELASTIC_POOL):
            members[(cluster_id, str(labels[ELASTIC_POOL]))][pk] = name
    paid = _paid_until(found, members, now)
    coming: Counter[int] = Counter()
    coming_at: dict[int, datetime] = {}
    committed: defaultdict[int, Decimal] = defaultdict(Decimal)  # per pool: what its nodes on their way will cost
    for pool_id, count, up_at, cost_per_hour, hold in ElasticGrant.objects.filter(
        pool__in=found, state__in=COMING
    ).values_list("pool_id", "count", "up_at", "cost_per_hour", "hold"):
        coming[pool_id] += count
        coming_at[pool_id] = max(up_at, coming_at.get(pool_id, up_at))
        committed[pool_id] += cost_per_hour * hold / 3600
    spent = month_spend(found, now)
    longest = max((job.time_limit for job in pending), default=0)  # the longest time limit waiting
    out, reach = [], {}
    for pool in found:
        try:
            shape = pool_shape(pool)
        except UnknownAcceleratorType as exc:  # made before pools were checked for it: asked for nothing
            log.warning("elastic pool %s: %s", pool, exc)
            continue
        labels = {"quartermaster.io/capacity-type": pool.capacity_type}
        price = prices.of(pool.cluster_id, pool.accelerator_id, labels, pool.cluster.kind, pool.cluster.options or {})
        node_hour = Decimal(str(price)) * pool.node_accelerators
        held = {f"{pool.cluster.slug}/{name}": until for name, until in paid.get(pool.pk, {}).items()}
        left = None
        if pool.monthly_budget is not None:
            ahead = sum(max(0.0, until - now.timestamp()) for until in held.values())
            committed[pool.pk] += node_hour * Decimal(str(ahead)) / 3600
            left = float(pool.monthly_budget - spent.get(pool.pk, Decimal(0)) - committed[pool.pk])
        reachable, left = horizons(held, now.timestamp(), float(pool.idle_release), longest, float(node_hour), left)
        reach.update(reachable)
        known[engine_name(pool)] = pool.pk
        out.append(
            m.Elastic(
                engine_name(pool),
                pool.cluster.slug,
                pool.accelerator.name,
                pool.node_accelerators,
                pool.node_cpu,
                pool.node_memory,
                float(price),
                float(pool.lead_time),
                max(0, pool.max_nodes - len(members[(pool.cluster_id, pool.name)]) - coming[pool.pk]),
                spot=pool.capacity_type == "spot",
                coming=coming[pool.pk],
                coming_at=coming_at[pool.pk].timestamp() if pool.pk in coming_at else 0.0,
                left=left,
                idle_release=float(pool.idle_release),
                shape=shape,
            )
        )
    return tuple(out), reach


def _paid_until(
    found: list[ElasticPool], members: dict[tuple[int, str], dict[int, str]], now: datetime
) -> dict[int, dict[str, float]]:
    """Per pool, per node of it: until when the node is paid for if it takes no more work (its work's time limits
    end, or its last work ended or it came up, then the pool's ``idle_release``), in seconds since the epoch."""
    pools_of = {pk: p for p in found for pk in members.get((p.cluster_id, p.name), {})}
    if not pools_of:
        return {}
    up_at = {
        (g.pool_id, name): g.up_at
        for g in ElasticGrant.objects.filter(pool__in=found, state=State.UP).only("pool_id", "nodes", "up_at")
        for name in g.nodes
    }
    ends: dict[int, datetime] = {}
    for node_id, admitted, started, limit in Assignment.objects.filter(
        node_id__in=pools_of, attempt__outcome="active"
    ).values_list("node_id", "attempt__admitted_at", "attempt__started_at", "attempt__job__time_limit"):
        end = (started if started is not None else max(admitted, now)) + timedelta(seconds=limit)
        ends[node_id] = max(end, ends.get(node_id, end))
    last = _last_work(pools_of)
    out: dict[int, dict[str, float]] = defaultdict(dict)
    for pk, pool in pools_of.items():
        name = members[(pool.cluster_id, pool.name)][pk]
        if pk in ends:
            until = ends[pk]
        else:
            seen = [d for d in (up_at.get((pool.pk, name)), last.get(pk)) if d is not None]
            until = max(seen) if seen else now
        out[pool.pk][name] = until.timestamp() + pool.idle_release
    return out


def _last_work(node_ids: Iterable[int]) -> dict[int, datetime | None]:
    """Per node (by pk) that ever held our work: when its last attempt there ended (None: one still runs)."""
    return dict(
        Assignment.objects.filter(node_id__in=list(node_ids))
        .values("node_id")
        .annotate(ended=Max("attempt__ended_at"))
        .values_list("node_id", "ended")
    )


def ask(known: dict[str, int], wanted: tuple[m.Want, ...], now: datetime) -> list[int]:
    """The engine's wants as asks of their pools (in the cycle's transaction); the new grants' ids."""
    made = []
    for want in wanted:
        pool = ElasticPool.objects.select_related("cluster__organization").get(pk=known[want.pool])
        grant = ElasticGrant.objects.create(
            pool=pool,
            count=want.nodes,
            jobs=[int(job) for job in want.jobs],
            cost_per_hour=Decimal(str(round(want.cost_per_hour, 4))),
            hold=math.ceil(want.hold),
            asked_at=now,
            up_at=now + timedelta(seconds=pool.lead_time),
        )
        audit.record(
            "elastic.asked",
            actor=None,
            target=grant,
            organization=pool.cluster.organization,
            changes={"nodes": [None, want.nodes], "jobs": [None, grant.jobs]},
            reason=f"{len(want.jobs)} job(s) wait for capacity that {pool} can add",
        )
        made.append(grant.pk)
    return made


# --- the clouds ----------------------------------------------------------------------------------------------

State = ElasticGrant.State
log = logging.getLogger(__name__)


def provision(grant_id: int) -> str:
    """Ask the cloud for an ask's nodes; its new state."""
    with transaction.atomic():
        grant = (
            ElasticGrant.objects.select_for_update()
            .select_related("pool__cluster__organization", "pool__accelerator")
            .get(pk=grant_id)
        )
        if grant.state != State.ASKED:
            return str(grant.state)
        pool = grant.pool
        try:
            given = backend_for(pool.cluster).provision(
                pool.name,
                grant.count,
                pool.capacity_type,
                pool.lead_time,
                pool.node_accelerators,
                pool.accelerator.name,
            )
        except Unreachable as exc:
            log.warning("elastic pool %s: the cloud did not answer: %s", pool, exc)
            return str(grant.state)  # asked again by the next run
        except BackendError as exc:  # refused: a stock-out, a quota of the cloud's
            grant.state, grant.message = State.REFUSED, str(exc)
        else:
            grant.state, grant.nodes = State.COMING, list(given.nodes)
            grant.count = len(given.nodes) + given.unnamed  # those it did not name are claimed as they join
            grant.up_at = datetime.fromtimestamp(given.up_at, tz=UTC)
        grant.save(update_fields=["state", "message", "nodes", "count", "up_at"])
        audit.record(
            "elastic.granted" if grant.state == State.COMING else "elastic.refused",
            actor=None,
            target=grant,
            organization=pool.cluster.organization,
            changes={"state": [State.ASKED.value, grant.state], "nodes": [None, grant.nodes]},
            reason=grant.message or f"{grant.count} node(s) of {pool} up at about {grant.up_at:%H:%M} UTC",
        )
    ELASTIC_NODES.labels(pool=str(pool), event="granted" if grant.state == State.COMING else "refused").inc(
        grant.count if grant.state == State.COMING else 0
    )
    return str(grant.state)


def settle(now: datetime | None = None) -> dict[str, int]:
    """Asks the last run could not make, tried again; nodes that came up, noted; idle nodes given back."""
    now = now or timezone.now()
    report = {"asked": 0, "up": 0, "released": 0}
    for grant_id in ElasticGrant.objects.filter(state=State.ASKED).values_list("pk", flat=True):
        report["asked"] += provision(grant_id) != State.ASKED
    for grant in (
        ElasticGrant.objects.filter(state=State.COMING).select_related("pool__cluster__organization").order_by("pk")
    ):
        if len(grant.nodes) < grant.count:
            _claim(grant)
        if grant.up_at > now:
            continue
        present = set(
            Node.objects.filter(cluster=grant.pool.cluster, name__in=grant.nodes, present=True).values_list(
                "name", flat=True
            )
        )
        if len(grant.nodes) == grant.count and present >= set(grant.nodes):
            ElasticGrant.objects.filter(pk=grant.pk, state=State.COMING).update(state=State.UP)
            report["up"] += 1
        elif now - grant.up_at > NEVER_CAME:
            _never_came(grant, sorted(set(grant.nodes) - present), now)
    for pool in ElasticPool.objects.select_related("cluster__organization"):
        report["released"] += _release_idle(pool, now)
    return report


#: How long past its expected time an ask's nodes may take to join the fleet before it counts as refused (the
#: pool may then ask again; what did come stays, and is released once idle).
NEVER_CAME = timedelta(minutes=30)


def _claim(grant: ElasticGrant) -> None:
    """The nodes of an ask its cloud did not name (a Kubernetes ``ProvisioningRequest`` names none): the pool's
    nodes in the fleet that no other ask of the pool holds, taken by the asks on their way in the order they were
    made, each up to its count."""
    pool = grant.pool
    asks = list(pool.grants.filter(state__in=(*COMING, State.UP)).only("pk", "count", "nodes", "state"))
    if any(g.pk < grant.pk and g.state == State.COMING and len(g.nodes) < g.count for g in asks):
        return  # an earlier ask takes them first
    held = {name for g in asks for name in g.nodes}
    joined = sorted(
        name
        for name, labels in Node.objects.filter(cluster=pool.cluster, present=True).values_list("name", "labels")
        if (labels or {}).get(ELASTIC_POOL) == pool.name and name not in held
    )
    taken = joined[: grant.count - len(grant.nodes)]
    if taken:
        grant.nodes = [*grant.nodes, *taken]
        ElasticGrant.objects.filter(pk=grant.pk, state=State.COMING).update(nodes=grant.nodes)


def _never_came(grant: ElasticGrant, missing: list[str], now: datetime) -> None:
    unnamed = grant.count - len(grant.nodes)  # asked for, never named and never seen
    gone = [*missing, *([f"{unnamed} node(s)"] if unnamed else [])]
    message = f"{', '.join(gone)} had not joined the fleet {NEVER_CAME.seconds // 60} min after they were due"
    arrived = [n for n in grant.nodes if n not in missing]
    with transaction.atomic():
        if not ElasticGrant.objects.filter(pk=grant.pk, state=State.COMING).update(
            state=State.UP if arrived else State.REFUSED,
            nodes=arrived,
            count=len(arrived),
            message=message,
        ):
            return
        audit.record(
            "elastic.refused",
            actor=None,
            target=grant,
            organization=grant.pool.cluster.organization,
            changes={"nodes": [grant.nodes, arrived]},
            reason=message,
        )
    if not arrived:  # nothing of it will come: what the cloud keeps of the ask (a failed request) can go
        try:
            backend_for(grant.pool.cluster).release([])
        except BackendError as exc:
            log.warning("elastic pool %s: tidying after a refused ask failed: %s", grant.pool, exc)


def _closed_for_release(pool: ElasticPool, idle: list[str]) -> list[str]:
    """``idle`` nodes closed to new work, those that took some meanwhile opened again: the ones to release.

    The nodes are cordoned and the organization's loop generation moved on in one transaction, so that a cycle
    whose snapshot still had them free cannot apply (its compare-and-set fails) and later cycles see them closed;
    whatever a cycle placed on them before that is found by looking again after the commit."""
    if not idle:
        return []
    with transaction.atomic():
        LoopState.objects.filter(organization=pool.cluster.organization_id).update(generation=F("generation") + 1)
        Node.objects.filter(cluster=pool.cluster, name__in=idle, state=Node.State.SCHEDULABLE).update(
            state=Node.State.CORDONED
        )
    taken = set(
        Assignment.objects.filter(
            node__cluster=pool.cluster, node__name__in=idle, attempt__outcome="active"
        ).values_list("node__name", flat=True)
    )
    if taken:
        Node.objects.filter(cluster=pool.cluster, name__in=taken).update(state=Node.State.SCHEDULABLE)
    return [name for name in idle if name not in taken]


def _left_by_themselves(
    pool: ElasticPool, grants: list[ElasticGrant], present: set[str], now: datetime
) -> list[ElasticGrant]:
    """Asks in service none of whose nodes is in the fleet any more (the cloud took them back, the cluster powered
    them down itself) are released, as of when their nodes were last seen, so that they stop costing; the others."""
    kept = []
    for grant in grants:
        if any(name in present for name in grant.nodes):
            kept.append(grant)
            continue
        seen = Node.objects.filter(cluster=pool.cluster, name__in=grant.nodes).aggregate(last=Max("last_seen_at"))
        until = min(now, max(seen["last"] or grant.up_at, grant.up_at))
        with transaction.atomic():
            if ElasticGrant.objects.filter(pk=grant.pk, state=State.UP).update(state=State.RELEASED, released_at=until):
                audit.record(
                    "elastic.released",
                    actor=None,
                    target=grant,
                    organization=pool.cluster.organization,
                    changes={"nodes": [grant.nodes, None]},
                    reason="its nodes left the fleet by themselves (taken back by the cloud, or powered down by the "
                    "cluster)",
                )
    return kept


def _release_idle(pool: ElasticPool, now: datetime) -> int:
    """Give back the pool's nodes without work for ``idle_release`` seconds, above its minimum; and, while none of its
    asks is on its way, the pool's nodes that no ask holds (*strays*: what the cloud gave for an ask after it was
    refused, a node the cluster powered up by itself) once nothing runs there, ours or the cluster's."""
    grants = list(pool.grants.filter(state=State.UP))
    up_since = {name: g.up_at for g in grants for name in g.nodes}
    members = {
        n.name: n
        for n in Node.objects.filter(cluster=pool.cluster, present=True, **{f"labels__{ELASTIC_POOL}": pool.name}).only(
            "name", "accelerators_used"
        )
    }
    nodes = {name: node for name, node in members.items() if name in up_since}
    waiting = pool.grants.filter(state__in=COMING).exists()  # a node no ask holds yet may be for one on its way
    strays = (
        {} if waiting else {n: node for n, node in members.items() if n not in up_since and not node.accelerators_used}
    )
    busy = set(
        Assignment.objects.filter(node__in=[*nodes.values(), *strays.values()], attempt__outcome="active").values_list(
            "node__name", flat=True
        )
    )
    grants = _left_by_themselves(pool, grants, set(nodes), now)
    last_work = _last_work(n.pk for n in [*nodes.values(), *strays.values()])
    idle = sorted(
        name
        for name, node in nodes.items()
        if name not in busy
        and (now - max(up_since[name], last_work.get(node.pk) or up_since[name])).total_seconds() >= pool.idle_release
    )
    quiet = now - timedelta(seconds=pool.idle_release)  # a stray none of our work ever ran on is quiet already
    unasked = sorted(n for n, node in strays.items() if n not in busy and (last_work.get(node.pk) or quiet) <= quiet)
    keep = max(0, pool.min_nodes - (len(nodes) - len(idle)))
    going = _closed_for_release(pool, [*idle[keep:], *unasked])
    if not going:
        return 0
    try:
        backend_for(pool.cluster).release(going)
    except BackendError as exc:
        log.warning("elastic pool %s: releasing %s failed: %s", pool, ", ".join(going), exc)
        Node.objects.filter(cluster=pool.cluster, name__in=going).update(state=Node.State.SCHEDULABLE)
        return 0
    with transaction.atomic():
        Node.objects.filter(cluster=pool.cluster, name__in=going).update(present=False)
        for g in grants:  # every node of it gone now, or gone before
            if all(n in going or n not in nodes for n in g.nodes):
                ElasticGrant.objects.filter(pk=g.pk).update(state=State.RELEASED, released_at=now)
        audit.record(
            "elastic.released",
            actor=None,
            target=pool,
            organization=pool.cluster.organization,
            changes={"nodes": [going, None]},
            reason=f"idle for {pool.idle_release // 60} min or more"
            + (f"; {', '.join(n for n in going if n in strays)} held by no ask of the pool" if strays else ""),
        )
    ELASTIC_NODES.labels(pool=str(pool), event="released").inc(len(going))
    return len(going)
