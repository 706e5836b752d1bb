"""Hypothesis strategies for random but valid engine snapshots.

The fleet is drawn first, then running workloads are carved out of it, so that every node's free
accelerators, CPU and memory are exactly its capacity less what its running workloads hold. Sizes stay
small (a few dozen nodes, a dozen pending jobs) so that one example takes milliseconds.

Rare things are drawn as ``integers(0, n - 1) == n - 1`` so that Hypothesis shrinks towards the common case.
"""

from __future__ import annotations

import functools
import random
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import TypeVar

from hypothesis import strategies as st

from scheduler.engine.model import (
    WHOLE,
    Assignment,
    Budget,
    Cluster,
    Cohort,
    Config,
    Job,
    Node,
    Queue,
    Quota,
    Quotas,
    Reclaim,
    Snapshot,
    Tier,
    Topology,
    TopologyMode,
    WithinQueue,
    Workload,
)

NOW = 1_700_000_000.0
FLAVORS = ("h100", "a100", "l4")
REGIONS = ("eu-west", "us-east")
LEVELS = (("block", "rack"), ("block", "rack"), ("rack",), ())
ACCEL_COUNTS = (1, 2, 4, 8)
PRICES = (0.0, 1.0, 2.5, 4.0)
TIME_LIMITS = (300, 1800, 3600, 7200, 86_400)
#: Who submitted jobs, for per-member limits.
OWNERS = ("ann", "ben", "cy")
TEAMS = ("red", "blue")
BUDGETS = ("team-a", "project-x")
ROOT = "org"

T = TypeVar("T")


# Building a strategy validates it, which costs more than drawing from it: build each one once.
@functools.cache
def _ints(lo: int, hi: int) -> st.SearchStrategy[int]:
    return st.integers(lo, hi)


@functools.cache
def _subsets(items: tuple[str, ...]) -> st.SearchStrategy[list[str]]:
    return st.lists(st.sampled_from(items), min_size=1, unique=True)


@functools.cache
def _orders(items: tuple[str, ...]) -> st.SearchStrategy[list[str]]:
    return st.permutations(items)


def _int(draw: st.DrawFn, lo: int, hi: int) -> int:
    return draw(_ints(lo, hi))


def _pick(draw: st.DrawFn, items: Sequence[T]) -> T:
    """One of ``items``; shrinks towards the first."""
    return items[draw(_ints(0, len(items) - 1))]


def _rare(draw: st.DrawFn, n: int) -> bool:
    """True about once in n draws; shrinks to False."""
    return draw(_ints(0, n - 1)) == n - 1


def _coin(draw: st.DrawFn) -> bool:
    return _rare(draw, 2)


def _tiers(draw: st.DrawFn) -> tuple[Tier, ...]:
    graces = (0, 60, 300, 900)
    bounds = (0.0, 0.0, 3600.0, 6 * 3600.0, 43_200.0)  # bounds on waiting: pending jobs are up to a day old
    runtimes = (0.0, 0.0, 600.0, 7200.0)  # minimum runtimes before preemption: running work is up to hours old
    return (
        Tier(
            "low",
            0,
            preemptible=True,
            grace_seconds=_pick(draw, graces),
            max_wait=_pick(draw, bounds),
            min_runtime=_pick(draw, runtimes),
        ),
        Tier(
            "normal",
            10,
            preemptible=True,
            grace_seconds=_pick(draw, graces),
            max_wait=_pick(draw, bounds),
            min_runtime=_pick(draw, runtimes),
        ),
        Tier("batch", 10, preemptible=True, grace_seconds=_pick(draw, graces), max_wait=_pick(draw, bounds)),
        Tier("urgent", 100, preemptible=False, grace_seconds=_pick(draw, graces)),
    )


def _whole(draw: st.DrawFn, lo: int, hi: int) -> int:
    """Whole accelerators, in milli (quotas count accelerators in milli too)."""
    return _int(draw, lo, hi) * WHOLE


def _quota(draw: st.DrawFn, amount: Callable[[], int], *, limits: bool = True) -> Quota:
    """A nominal quota, and now and then a borrowing and a lending limit of the same kind of amount."""
    nominal = amount()
    borrowing = amount() if limits and _rare(draw, 3) else None
    lending = amount() if limits and _rare(draw, 3) else None
    return Quota(nominal, borrowing, lending)


def _queue_quotas(draw: st.DrawFn, flavors: tuple[str, ...], *, generous: bool) -> Quotas:
    amounts: dict[str, Callable[[], int]] = {
        "accelerator": lambda: _whole(draw, 16, 64) if generous else _whole(draw, 0, 16),
        "cpu": lambda: _pick(draw, (1_000_000, 1_000_000, 256_000, 64_000, 0)),
        "memory": lambda: _pick(draw, (10_000_000, 10_000_000, 1_048_576, 131_072, 0)),
    }
    quotas: Quotas = {}
    for flavor in flavors:
        for resource, amount in amounts.items():
            if not generous and _rare(draw, 10):
                continue  # a missing entry is a nominal of 0
            quotas[(flavor, resource)] = _quota(draw, amount)
    return quotas


def _cohort_quotas(draw: st.DrawFn, flavors: tuple[str, ...], *, root: bool) -> Quotas:
    quotas: Quotas = {}
    for flavor in flavors:
        if _coin(draw):
            quotas[(flavor, "accelerator")] = _quota(draw, lambda: _whole(draw, 0, 8), limits=not root)
    return quotas


def _cohorts_and_queues(
    draw: st.DrawFn, flavors: tuple[str, ...], *, generous: bool
) -> tuple[tuple[Cohort, ...], tuple[Queue, ...]]:
    cohorts = [Cohort(ROOT, None, _cohort_quotas(draw, flavors, root=True))]
    leaves = [ROOT]
    if _int(draw, 1, 2) == 2:  # depth 2: sub-cohorts under the root
        subs = [f"{ROOT}-{i}" for i in range(_int(draw, 1, 2))]
        cohorts += [Cohort(name, ROOT, _cohort_quotas(draw, flavors, root=False)) for name in subs]
        leaves = [*subs, ROOT]
    queues = []
    for i in range(_int(draw, 2, 4)):
        order = draw(_orders(flavors))
        offered = tuple(order[: _int(draw, 1, len(order))])
        queues.append(
            Queue(
                name=f"q{i}",
                cohort=None if _rare(draw, 8) else _pick(draw, leaves),
                quotas=_queue_quotas(draw, offered, generous=generous),
                flavors=offered,
                within_queue=_pick(draw, tuple(WithinQueue)),
                reclaim=_pick(draw, tuple(Reclaim)),
                weight=_pick(draw, (1.0, 1.0, 2.0, 0.5)),
            )
        )
    return tuple(cohorts), tuple(queues)


def _topology(draw: st.DrawFn, levels: tuple[str, ...]) -> tuple[str, ...]:
    block = f"b{_int(draw, 0, 1)}"
    rack = _int(draw, 0, 2)
    names = {"block": block, "rack": f"{block}.r{rack}" if "block" in levels else f"r{rack}"}
    return tuple(names[level] for level in levels)


class _Fleet:
    """Node capacities and what is still free while running workloads are carved out of them."""

    def __init__(self, draw: st.DrawFn, clusters: tuple[Cluster, ...], flavors: tuple[str, ...], size: int) -> None:
        self.specs: list[Node] = []
        for i in range(size):
            cluster = _pick(draw, clusters)
            count = _pick(draw, ACCEL_COUNTS)
            cpu = _pick(draw, (16_000, 64_000, 128_000))
            memory = _pick(draw, (65_536, 262_144, 1_048_576))
            self.specs.append(
                Node(
                    name=f"{cluster.name}-n{i:02d}",
                    cluster=cluster.name,
                    flavor=_pick(draw, flavors),
                    accel_free=(WHOLE,) * count,
                    cpu_free=cpu,
                    memory_free=memory,
                    cpu_capacity=cpu,
                    memory_capacity=memory,
                    topology=_topology(draw, cluster.levels),
                    healthy=not _rare(draw, 10),
                    schedulable=not _rare(draw, 10),
                    price_per_accel_hour=_pick(draw, PRICES),
                    # Now and then a node lent to one team only (``Node.team``).
                    team=_pick(draw, TEAMS) if _rare(draw, 8) else "",
                    spot=_rare(draw, 5),
                )
            )
        self.accel = [list(n.accel_free) for n in self.specs]
        self.cpu = [n.cpu_free for n in self.specs]
        self.memory = [n.memory_free for n in self.specs]

    def take(self, i: int, accels: int, milli: int, cpu: int, memory: int, from_back: bool) -> Assignment | None:
        """Carve one worker out of node i, or None when it does not fit."""
        if self.cpu[i] < cpu or self.memory[i] < memory:
            return None
        indices = list(range(len(self.accel[i])))
        if from_back:
            indices.reverse()
        chosen = [x for x in indices if self.accel[i][x] >= milli][:accels]
        if len(chosen) < accels:
            return None
        for x in chosen:
            self.accel[i][x] -= milli
        self.cpu[i] -= cpu
        self.memory[i] -= memory
        return Assignment(self.specs[i].name, 1, tuple((x, milli) for x in sorted(chosen)), cpu, memory)

    def nodes(self) -> tuple[Node, ...]:
        return tuple(
            replace(n, accel_free=tuple(self.accel[i]), cpu_free=self.cpu[i], memory_free=self.memory[i])
            for i, n in enumerate(self.specs)
        )


def _running(
    draw: st.DrawFn, fleet: _Fleet, queues: tuple[Queue, ...], tiers: tuple[Tier, ...], count: int, *, recent: bool
) -> tuple[Workload, ...]:
    """``count`` attempts to carve a workload; ``recent``: started lately, so most end well after now."""
    workloads = []
    for k in range(count):
        i = _int(draw, 0, len(fleet.specs) - 1)
        node = fleet.specs[i]
        accels, milli = _pick(draw, ((1, WHOLE), (1, 250), (1, 500), (1, 750), (2, WHOLE), (4, WHOLE)))
        if _rare(draw, 4):
            accels, milli = node.accel_count, WHOLE  # the whole node
        cpu = _pick(draw, (0, 1000, 4000, 16_000))
        memory = _pick(draw, (0, 1024, 16_384, 65_536))
        from_back = _coin(draw)
        nodes = [i]
        if _rare(draw, 4):  # a two-node gang on a second node of the same cluster and flavor
            peers = [
                j
                for j, other in enumerate(fleet.specs)
                if j != i and other.cluster == node.cluster and other.flavor == node.flavor
            ]
            if peers:
                nodes.append(_pick(draw, peers))
        taken = [fleet.take(j, accels, milli, cpu, memory, from_back) for j in nodes]
        assignments = tuple(a for a in taken if a is not None)
        if len(assignments) < len(nodes):
            # Give back what did fit: carving has to stay all-or-nothing too.
            for a in assignments:
                j = next(x for x, n in enumerate(fleet.specs) if n.name == a.node)
                for x, m in a.accels:
                    fleet.accel[j][x] += m
                fleet.cpu[j] += a.cpu
                fleet.memory[j] += a.memory
            continue
        admitted_at = NOW - _int(draw, 0, 1800 if recent else 20_000)
        offering = [q for q in queues if node.flavor in q.flavors] or list(queues)
        workloads.append(
            Workload(
                id=f"w{k:02d}",
                queue=_pick(draw, offering).name,
                tier=_pick(draw, tiers).name,
                cluster=node.cluster,
                flavor=node.flavor,
                assignments=assignments,
                admitted_at=admitted_at,
                time_limit=_pick(draw, TIME_LIMITS),
                submitted_at=admitted_at - _int(draw, 0, 3600),
                preemptible=not _rare(draw, 8),
                last_checkpoint_at=None if _coin(draw) else admitted_at + _int(draw, 0, 600),
                evicting=_rare(draw, 10),
                owner=_pick(draw, OWNERS),
                team=_pick(draw, (*TEAMS, "")),
            )
        )
    return tuple(workloads)


def _lowered(
    draw: st.DrawFn, cohorts: tuple[Cohort, ...], queues: tuple[Queue, ...], running: tuple[Workload, ...]
) -> tuple[tuple[Cohort, ...], tuple[Queue, ...]]:
    """A quota lowered below what runs, as a team lead or an admin may do at any time (docs/scheduling.md
    §Quota lowered below usage): a queue's accelerator quota in a flavor it uses cut to a fraction of its
    usage (and now and then its borrowing too), or its cohort's borrowing cut to nothing."""
    used: dict[tuple[str, str], int] = {}
    for w in running:
        key = (w.queue, w.flavor)
        used[key] = used.get(key, 0) + sum(milli for a in w.assignments for _, milli in a.accels)
    busy = sorted(key for key, amount in used.items() if amount)
    if not busy:
        return cohorts, queues
    name, flavor = _pick(draw, busy)
    key = (flavor, "accelerator")
    cohort = next(q.cohort for q in queues if q.name == name)
    if cohort is None or _coin(draw):
        nominal = used[(name, flavor)] * _int(draw, 0, 3) // 4 // WHOLE * WHOLE
        quota = Quota(nominal, 0 if _coin(draw) else None)
        queues = tuple(replace(q, quotas={**q.quotas, key: quota}) if q.name == name else q for q in queues)
    else:
        cohorts = tuple(
            replace(c, quotas={**c.quotas, key: Quota(0, None if c.parent is None else 0)}) if c.name == cohort else c
            for c in cohorts
        )
    return cohorts, queues


def _job(
    draw: st.DrawFn,
    k: int,
    clusters: tuple[Cluster, ...],
    flavors: tuple[str, ...],
    queues: tuple[Queue, ...],
    tiers: tuple[Tier, ...],
    *,
    short: bool,
) -> Job:
    kind = _pick(draw, ("single", "fraction", "eight", "gang", "multi", "cpu"))
    workers, accelerators, milli = {
        "single": (1, 1, WHOLE),
        "fraction": (_int(draw, 1, 3), 1, _pick(draw, (250, 500))),
        "eight": (1, 8, WHOLE),
        "gang": (_int(draw, 2, 4), _pick(draw, ACCEL_COUNTS), WHOLE),
        "multi": (1, _pick(draw, (2, 4)), WHOLE),
        "cpu": (_int(draw, 1, 2), 0, WHOLE),
    }[kind]
    cluster_names = [c.name for c in clusters]
    topology = None
    if _coin(draw):
        topology = Topology(_pick(draw, ("rack", "block", "host")), _pick(draw, tuple(TopologyMode)))
    return Job(
        id=f"j{k:02d}",
        queue="ghost-queue" if _rare(draw, 20) else _pick(draw, queues).name,
        tier="ghost-tier" if _rare(draw, 20) else _pick(draw, tiers).name,
        submitted_at=NOW - _int(draw, 0, 86_400),
        workers=workers,
        accelerators=accelerators,
        accel_milli=milli,
        cpu=_pick(draw, (0, 1000, 4000, 16_000)),
        memory=_pick(draw, (0, 1024, 16_384, 65_536)),
        flavors=tuple(draw(_subsets(tuple(flavors)))) if _rare(draw, 3) else (),
        clusters=tuple(draw(_subsets(tuple(cluster_names)))) if _rare(draw, 4) else (),
        regions=tuple(draw(_subsets(tuple(REGIONS)))) if _rare(draw, 6) else (),
        topology=topology,
        # Short jobs are what backfill can start before a reservation.
        time_limit=_pick(draw, (60, 300, 600, 3600) if short else TIME_LIMITS),
        max_price_per_hour=_pick(draw, (0.0, 1.0, 5.0, 40.0)) if _rare(draw, 4) else None,
        locality=_pick(draw, cluster_names + list(REGIONS)) if _rare(draw, 4) else None,
        preemptible=not _rare(draw, 6),
        owner=_pick(draw, OWNERS),
        team=_pick(draw, (*TEAMS, "")),
        spot=_coin(draw),
        budgets=tuple(draw(_subsets(BUDGETS))) if _coin(draw) else (),
        # A Ray job's head, one more member of the gang with its own shape (docs/scheduling.md §Ray heads).
        head=_pick(draw, ((0, 1000, 4096), (1, 2000, 8192), (4, 16_000, 65_536))) if _rare(draw, 5) else (0, 0, 0),
    )


@st.composite
def snapshots(
    draw: st.DrawFn,
    max_nodes: int = 40,
    max_running: int = 24,
    max_pending: int = 12,
    contended: bool | None = None,
) -> Snapshot:
    """A random, internally consistent snapshot of a small fleet.

    ``contended`` (drawn when None): a handful of busy nodes and generous quotas, so that capacity, not
    quota, is what blocks jobs: that is where preemption for room, reservations and backfill happen.
    Running work is carved out of the fleet whatever the quotas, so it often uses more than a queue or
    cohort may (as after a quota was lowered); now and then a quota is lowered below usage on purpose.
    """
    if contended is None:
        contended = _rare(draw, 3)
    flavors = tuple(draw(_subsets(FLAVORS)))[: 1 if contended else 3]
    clusters = tuple(
        Cluster(
            name=f"c{i}",
            region=_pick(draw, REGIONS),
            levels=_pick(draw, LEVELS),
            preference=_int(draw, 0, 100),
        )
        for i in range(_int(draw, 1, 2 if contended else 3))
    )
    tiers = _tiers(draw)
    cohorts, queues = _cohorts_and_queues(draw, flavors, generous=contended)
    size = _int(draw, 2, min(8, max_nodes) if contended else max_nodes)
    fleet = _Fleet(draw, clusters, flavors, size)
    attempts = _int(draw, size, 4 * size) if contended else _int(draw, 0, max_running)
    running = _running(draw, fleet, queues, tiers, attempts, recent=contended)
    if _rare(draw, 3):
        cohorts, queues = _lowered(draw, cohorts, queues, running)
    pending = tuple(
        _job(draw, k, clusters, flavors, queues, tiers, short=contended) for k in range(_int(draw, 0, max_pending))
    )
    config = Config(
        fair_sharing=_coin(draw),
        backfill=contended or not _rare(draw, 4),
        reservations=16 if contended else _pick(draw, (16, 2, 1, 0)),
        max_jobs_per_cycle=3 if _rare(draw, 8) else 100_000,
        max_admissions_per_cycle=2 if _rare(draw, 8) else 100_000,
        fgd=_coin(draw),
        time_quantum=_pick(draw, (60, 1)),
        # Tight limits on the victim search now and then, so that its give-up paths run too.
        preemption_attempts=1 if _rare(draw, 8) else 16,
        max_victims=1 if _rare(draw, 8) else 64,
        usage_weight=_pick(draw, (1.0, 0.0, 3.0)),
    )
    return Snapshot(
        now=NOW,
        clusters=clusters,
        nodes=fleet.nodes(),
        tiers=tiers,
        cohorts=cohorts,
        queues=queues,
        running=running,
        pending=pending,
        config=config,
        # Per-member limits now and then, from none at all to more than anyone asks for.
        member_limits={o: _pick(draw, (0, 1000, 4000, 16_000)) for o in OWNERS if _rare(draw, 3)},
        # Hard budgets now and then: nothing left, some accelerator-hours or money, a period ending soon.
        budgets={name: _budget(draw) for name in BUDGETS if _coin(draw)},
        # Recent use now and then (docs/scheduling.md §Memory: recent use counts), for some queues.
        usage={q.name: _pick(draw, (0.0, 2.0, 40.0, 900.0)) for q in queues if _rare(draw, 2)},
        # A cap on disruption now and then: nothing left, some, plenty (docs/scheduling.md §Disruption).
        disruption_left={t.name: _pick(draw, (0.0, 3600.0, 1e7)) for t in tiers if _rare(draw, 3)},
    )


def _budget(draw: st.DrawFn) -> Budget:
    return Budget(
        accel_seconds=_pick(draw, (None, 0, 3_600_000, 36_000_000)),
        money=_pick(draw, (None, 0.0, 2.0, 30.0)),
        until=NOW + _pick(draw, (600, 86_400, 30 * 86_400)),
    )


def shuffled(snapshot: Snapshot, rnd: random.Random) -> Snapshot:
    """The same snapshot with every collection in another order (quota dicts included)."""

    def perm(items: tuple[T, ...]) -> tuple[T, ...]:
        out = list(items)
        rnd.shuffle(out)
        return tuple(out)

    def quotas(q: Quotas) -> Quotas:
        return dict(perm(tuple(q.items())))

    return replace(
        snapshot,
        clusters=perm(snapshot.clusters),
        nodes=perm(snapshot.nodes),
        tiers=perm(snapshot.tiers),
        cohorts=perm(tuple(replace(c, quotas=quotas(c.quotas)) for c in snapshot.cohorts)),
        queues=perm(tuple(replace(q, quotas=quotas(q.quotas)) for q in snapshot.queues)),
        running=perm(snapshot.running),
        pending=perm(snapshot.pending),
    )
