"""Capacity elastic pools could add for the work left waiting for lack of it (docs/scheduling.md §Elastic pools).

After the cycle, the jobs left waiting for capacity (reason *capacity*, *backfill* or *reserved*: their quota fits,
only nodes are missing), in the order the cycle considered them, are packed onto the nodes on their way to the pools
(``Elastic.coming``: asked in an earlier cycle, not up yet) and then onto nodes the pools could add
(``Snapshot.elastic``): to each job the pool that costs least for it among those it may use (a flavor its queue
offers and its quota fits, a cluster it may go to and that runs its program; a spot pool only for preemptible work
that accepts spot), then the one up soonest; first fit on the nodes already asked of that pool this cycle, on new
ones while the pool has room (``Elastic.most``: its maximum less what it has and what is on the way) and its budget
pays for them (``Elastic.left``: each new node until the longest time limit of its jobs ends, then the release
delay). A job that a pool's nodes would hold only later than its reservation starts
is left alone. Quota is counted as jobs are packed, so two jobs that fit their queue's quota only one at a time ask
for one's nodes. A gang's workers and its Ray head go on the pool's nodes like any job's, each worker whole on one
node; pools have no topology (a gang asking for one domain is not packed).

The answer is one ``Want`` per pool (how many nodes, for which jobs, what they cost an hour, how long they are held),
and each packed job's pending message says so, with its start estimated at the pool's lead time. ``horizons`` gives
the edges what a pool's budget lets its nodes take (``Node.horizon``) and what is left for new ones. Pure; nothing
is asked of a cloud here.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from .model import WHOLE, Cluster, Elastic, Job, Pending, PendingReason, Want
from .quota import Mode

if TYPE_CHECKING:
    from .state import CycleState

#: The reasons of jobs that more nodes would start: quota fits, the nodes are busy (or free only later).
WANTING = (PendingReason.CAPACITY, PendingReason.BACKFILL_BLOCKED, PendingReason.RESERVED)


def horizons(
    held: Mapping[str, float], now: float, idle: float, longest: float, node_hour: float, left: float | None
) -> tuple[dict[str, float], float | None]:
    """How long new work may run on each of a pool's nodes now (``Node.horizon``), and what is left of ``left`` for
    new nodes (``Elastic.left``).

    ``held``: per node, when it would be given back if it took no more work (the end of its work's time limits, or
    of its last work, then ``idle``). ``left``: what the pool's monthly budget has left after the month's spend and
    every node's commitment (those on their way: their ask's ``Want.hold``); None: no limit. New work that ends by a
    node's commitment costs nothing more; beyond it, the node's price until the work ends and ``idle`` more. The
    nodes held longest, whose time costs least to extend, get the longest time limit of the work waiting
    (``longest``) first, as far as ``left`` pays; the next what is left; the rest only what they are held for. So
    what the nodes may add, and then what new nodes may cost, never passes the budget."""
    if left is None or node_hour <= 0:
        return dict.fromkeys(held, math.inf), left
    rate = node_hour / 3600
    out: dict[str, float] = {}
    for name, until in sorted(held.items(), key=lambda item: (-item[1], item[0])):
        paid = max(until, now)  # its time is paid for until then
        cost = rate * max(0.0, now + longest + idle - paid)
        if cost <= left:
            out[name], left = max(longest, paid - now - idle), left - cost
        else:
            out[name], left = max(0.0, paid + max(0.0, left) / rate - now - idle), min(left, 0.0)
    return out, left


@dataclass(slots=True)
class _Pool:
    spec: Elastic
    cluster: Cluster
    #: The pool's nodes on their way, then those asked of it this cycle: what each has left (accelerators,
    #: millicores, MiB).
    nodes: list[list[int]] = field(init=False)
    #: Per node asked this cycle (after those on their way), the longest time limit of the jobs put on it.
    limits: list[float] = field(default_factory=list)
    #: The jobs new nodes were asked for (those packed on nodes on their way are not).
    jobs: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        spec = self.spec
        self.nodes = [[spec.accelerators, spec.cpu, spec.memory] for _ in range(spec.coming)]

    @property
    def new(self) -> int:
        """The nodes asked of it this cycle."""
        return len(self.nodes) - self.spec.coming

    @property
    def hold(self) -> float:
        """How long the longest held of the nodes asked this cycle is held once up."""
        return max(self.limits, default=0.0) + self.spec.idle_release

    def cost(self, limits: Sequence[float]) -> float:
        """What nodes asked this cycle, held for ``limits`` (then ``idle_release``), cost in all."""
        spec = self.spec
        return sum(spec.accelerators * spec.price_per_accel_hour * (t + spec.idle_release) / 3600 for t in limits)

    def fit(
        self, items: Sequence[tuple[int, int, int]], limit: float, paying: bool = True
    ) -> tuple[list[list[int]], list[float], bool] | None:
        """The pool's nodes with ``items`` placed first fit (new nodes while it has room and, ``paying``, its budget
        pays for them until ``limit`` ends), the longest time limit on each new node, and whether any went on a
        node asked this cycle; None if they do not fit."""
        spec, nodes, limits, asked = self.spec, [list(n) for n in self.nodes], list(self.limits), False
        for item in items:
            if any(need > have for need, have in zip(item, (spec.accelerators, spec.cpu, spec.memory), strict=True)):
                return None
            k = next((k for k, n in enumerate(nodes) if all(h >= d for h, d in zip(n, item, strict=True))), None)
            if k is None:
                if len(nodes) - spec.coming >= spec.most:
                    return None
                k = len(nodes)
                nodes.append([spec.accelerators, spec.cpu, spec.memory])
                limits.append(0.0)
            node = nodes[k]
            if k >= spec.coming:
                asked = True
                limits[k - spec.coming] = max(limits[k - spec.coming], limit)
            for i, need in enumerate(item):
                node[i] -= need
        if paying and asked and spec.left is not None and self.cost(limits) > spec.left + 1e-9:
            return None  # its budget cannot hold the new nodes that long
        return nodes, limits, asked


def demand(cycle: CycleState, pending: list[Pending]) -> tuple[list[Pending], tuple[Want, ...]]:
    """The waiting jobs that the pools' nodes would start, their pending messages saying so, and what to ask."""
    clusters = {c.name: c for c in cycle.snapshot.clusters}
    pools = [
        _Pool(spec, clusters[spec.cluster])
        for spec in cycle.snapshot.elastic
        if (spec.most > 0 or spec.coming > 0) and spec.cluster in clusters
    ]
    if not pools:
        return pending, ()
    jobs = {j.id: j for j in cycle.snapshot.pending}
    charged: list[tuple[int, str, tuple[int, int, int]]] = []
    told: dict[str, tuple[_Pool, float]] = {}
    unpaid: dict[str, _Pool] = {}  # jobs a pool could take but for its budget
    try:
        for p in pending:
            job = jobs.get(p.job)
            if p.reason not in WANTING or job is None or job.topology is not None:
                continue
            chosen, poor = _pool_for(cycle, job, pools, p.estimated_start)
            if chosen is None:
                if poor is not None:
                    unpaid[job.id] = poor
                continue
            pool, (nodes, limits, grew), qi = chosen
            flavor = pool.spec.flavor
            pool.nodes, pool.limits = nodes, limits
            if grew:
                pool.jobs.append(job.id)
            cycle.quota.charge(qi, flavor, job.request())
            charged.append((qi, flavor, job.request()))
            # on nodes already on their way: when those are up; else when new ones would be
            up = cycle.now + pool.spec.lead_time if grew else max(cycle.now, pool.spec.coming_at)
            told[job.id] = (pool, up)
    finally:
        for qi, flavor, request in charged:
            cycle.quota.charge(qi, flavor, request, -1)
    wants = tuple(
        Want(
            pool.spec.name,
            pool.spec.cluster,
            pool.spec.flavor,
            pool.new,
            tuple(pool.jobs),
            pool.new * pool.spec.accelerators * pool.spec.price_per_accel_hour,
            cycle.now + pool.spec.lead_time,
            pool.hold,
        )
        for pool in pools
        if pool.new > 0
    )
    return [
        _told(p, *told[p.job], cycle.now) if p.job in told else _unpaid(p, unpaid[p.job]) if p.job in unpaid else p
        for p in pending
    ], wants


def _pool_for(
    cycle: CycleState, job: Job, pools: list[_Pool], reserved_at: float | None
) -> tuple[tuple[_Pool, tuple[list[list[int]], list[float], bool], int] | None, _Pool | None]:
    """The pool that costs least for ``job`` and can take it, then the one up soonest, with its nodes after; or
    None, and the first pool that could take it if its budget paid (None: none could)."""
    queue = cycle.queues.get(job.queue)
    if queue is None:
        return None, None
    poor: _Pool | None = None
    qi = cycle.quota.index[queue.name]
    items = _items(job)
    best: tuple[float, float, str, _Pool, tuple[list[list[int]], list[float], bool]] | None = None
    for pool in pools:
        spec = pool.spec
        if reserved_at is not None and reserved_at <= cycle.now + spec.lead_time:
            continue  # its reservation starts it sooner than new nodes would
        if not _may_use(job, spec, pool.cluster, queue.flavors) or spec.flavor not in cycle.quota.flavor_index:
            continue  # (a flavor no node of the fleet has yet keeps no quota here: nothing is asked for it)
        if cycle.quota.classify(qi, spec.flavor, job.request()) is not Mode.FIT:
            continue
        nodes = pool.fit(items, float(job.time_limit))
        if nodes is None:
            if poor is None and spec.left is not None and pool.fit(items, float(job.time_limit), paying=False):
                poor = pool
            continue
        key = (spec.price_per_accel_hour, spec.lead_time, spec.name)
        if best is None or key < best[:3]:
            best = (*key, pool, nodes)
    return (None, poor) if best is None else ((best[3], best[4], qi), None)


def _may_use(job: Job, spec: Elastic, cluster: Cluster, offered: Sequence[str]) -> bool:
    return (
        spec.flavor in offered
        and (not job.flavors or spec.flavor in job.flavors)
        and (not job.clusters or spec.cluster in job.clusters)
        and (not job.regions or cluster.region in job.regions)
        and not cluster.refuses(job.needs)
        and spec.cluster not in dict(job.excluded)
        and (not spec.spot or (job.spot and job.preemptible))
        and _same_shape(job.shape, spec.shape)
        and (job.max_price_per_hour is None or spec.price_per_accel_hour * _accelerators(job) <= job.max_price_per_hour)
    )


def _same_shape(wanted: str, offered: str) -> bool:
    """Whether a pool's nodes of slice shape ``offered`` take a job asking for ``wanted`` (``NodeTable.shaped``'s
    rule: a type without a topology takes any topology of it)."""
    return offered == wanted or ("/" not in wanted and offered.startswith(f"{wanted}/"))


def _accelerators(job: Job) -> float:
    return job.request()[0] / WHOLE


def _items(job: Job) -> list[tuple[int, int, int]]:
    """What the job puts on nodes: each worker whole on one node (a share of an accelerator takes one), and its
    Ray head, where it has one, on a node of its own or beside a worker (first fit decides)."""
    worker = (math.ceil(job.accelerators * job.accel_milli / WHOLE), job.cpu, job.memory)
    items = [worker] * job.workers
    if any(job.head):
        items.append(job.head)
    return sorted(items, reverse=True)


def _unpaid(p: Pending, pool: _Pool) -> Pending:
    spec = pool.spec
    said = (
        f"{p.message} {spec.name} on {spec.cluster} could add nodes for it, but what its monthly budget has left "
        "does not pay for them until its time limit ends."
    )
    return p._replace(message=said)


def _told(p: Pending, pool: _Pool, start: float, now: float) -> Pending:
    spec = pool.spec
    more = f"{len(pool.nodes)} more {spec.flavor} node{'s' if len(pool.nodes) != 1 else ''}"
    said = f"{p.message} Capacity is being added for it: {more} of {spec.name} on {spec.cluster}, up in about " + (
        f"{max(1, round((start - now) / 60))} min."
    )
    estimate = start if p.estimated_start is None else min(p.estimated_start, start)
    return p._replace(message=said, estimated_start=estimate)
