"""Synthetic fleets and pending mixes for benchmarking the placement engine (pure Python, no Django).

`synthetic_snapshot(nodes, jobs, seed)` builds a deterministic, realistic snapshot: five clusters in three
regions (on-prem H100 with IB blocks, racks and NVLink domains; cloud H100 with reserved and spot flavors;
an A100 cluster of 8- and 4-GPU nodes; an L4/T4 inference cluster; a small TPU cluster), a cohort tree of
team queues whose nominal quota adds up to the fleet's capacity, running workloads that fill ~85% of it
(within quota, mostly preemptible tiers) and a pending mix of single, fractional, multi-GPU and gang jobs.
`advance(snapshot, decisions, seconds)` applies one cycle's decisions and moves the clock, so a benchmark
can run consecutive cycles without a database.

Size: one generator of a whole synthetic fleet (clusters, flavors, teams and their quota tree, running work that
fills the fleet to a target, and the pending queue), kept together so that a benchmark's world is read in one place;
it is not product code.
"""

from __future__ import annotations

import math
import random
from bisect import bisect
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, replace
from itertools import accumulate

import numpy as np

from scheduler.engine.model import (
    RESOURCES,
    WHOLE,
    Assignment,
    Cluster,
    Cohort,
    Decisions,
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

GIB = 1024  # MiB
CORE = 1000  # millicores
DAY = 24 * 3600


@dataclass(frozen=True, slots=True)
class _ClusterSpec:
    name: str
    region: str
    levels: tuple[str, ...]
    #: Nodes in one domain of each level, widest first; each divides the one before it.
    sizes: tuple[int, ...]
    prefixes: tuple[str, ...]
    preference: int
    #: Nodes per domain in which running gangs are carved (a rack or a TPU slice); 0 = no gangs.
    gang_domain: int
    #: Chance that a gang domain holds a running gang.
    gang_chance: float


@dataclass(frozen=True, slots=True)
class _FlavorSpec:
    name: str
    cluster: str
    share: float  # of the fleet's nodes
    price: float  # per accelerator-hour
    #: Node shapes (accelerators, cores, GiB, weight).
    shapes: tuple[tuple[int, int, int, float], ...]
    #: Shapes drawn per gang domain (homogeneous racks) rather than per node.
    shape_per_domain: bool = False
    tpu: bool = False


CLUSTERS = (
    _ClusterSpec("dc1-h100", "us-east", ("block", "rack", "nvlink"), (256, 16, 4), ("b", "r", "nv"), 90, 16, 0.5),
    _ClusterSpec("gcp-h100", "us-central", ("block", "rack"), (128, 16), ("b", "r"), 40, 16, 0.4),
    _ClusterSpec("dc2-a100", "eu-west", ("rack",), (16,), ("r",), 70, 16, 0.3),
    _ClusterSpec("gcp-inference", "us-central", (), (), (), 50, 0, 0.0),
    _ClusterSpec("gcp-tpu", "us-central", ("slice",), (8,), ("s",), 50, 8, 0.6),
)

FLAVORS = (
    _FlavorSpec("h100", "dc1-h100", 0.30, 1.80, ((8, 192, 2048, 1.0),)),
    _FlavorSpec("h100-reserved", "gcp-h100", 0.15, 2.90, ((8, 208, 1872, 1.0),)),
    _FlavorSpec("h100-spot", "gcp-h100", 0.10, 1.20, ((8, 208, 1872, 1.0),)),
    _FlavorSpec("a100", "dc2-a100", 0.20, 1.10, ((8, 128, 1024, 0.65), (4, 64, 512, 0.35)), shape_per_domain=True),
    _FlavorSpec("l4", "gcp-inference", 0.12, 0.55, ((1, 12, 48, 0.4), (2, 24, 96, 0.3), (4, 48, 192, 0.3))),
    _FlavorSpec("t4", "gcp-inference", 0.08, 0.30, ((1, 8, 32, 0.4), (2, 16, 64, 0.3), (4, 32, 128, 0.3))),
    _FlavorSpec("tpu-v5p", "gcp-tpu", 0.03, 2.10, ((4, 208, 448, 1.0),), tpu=True),
    _FlavorSpec("tpu-v5e", "gcp-tpu", 0.02, 0.95, ((8, 224, 384, 1.0),), tpu=True),
)
FLAVOR = {f.name: f for f in FLAVORS}
#: The smallest fleet: one node of each flavor.
MIN_NODES = len(FLAVORS)
INFERENCE_FLAVORS = ("l4", "t4")

TIERS = (
    Tier("low", 0, preemptible=True, grace_seconds=120),
    Tier("normal", 100, preemptible=True, grace_seconds=300),
    Tier("high", 1000, preemptible=True, grace_seconds=600),
    Tier("production", 10000, preemptible=False, grace_seconds=900),
)
RUNNING_TIERS = (("low", 35), ("normal", 50), ("high", 10), ("production", 5))
PENDING_TIERS = (("low", 30), ("normal", 55), ("high", 12), ("production", 3))

ROOT = "org"
#: Child cohorts of the root; the value is a borrowing limit as a share of each flavor's capacity.
COHORTS: dict[str, float | None] = {"research": None, "product": None, "platform": 0.15}
#: Share of each flavor's capacity given to the teams as nominal quota; the root cohort holds the rest.
TEAM_POOL = 0.9


@dataclass(frozen=True, slots=True)
class _Team:
    name: str
    cohort: str
    weight: float
    within: WithinQueue
    reclaim: Reclaim
    #: Borrowing limit as a share of each flavor's capacity (None: unlimited).
    borrow: float | None
    #: Lending limit as a share of the team's own nominal (None: lends everything).
    lend: float | None
    flavors: tuple[str, ...]
    #: Relative nominal share of each flavor; listed flavors without a share are borrow-only.
    shares: dict[str, int]


_W, _R = WithinQueue, Reclaim
TEAMS = (
    _Team("llm-pretrain", "research", 2.0, _W.LOWER_PRIORITY, _R.FAIR_SHARING, None, None,
          ("h100", "h100-reserved", "h100-spot", "tpu-v5p"), {"h100": 4, "h100-reserved": 2, "tpu-v5p": 2}),
    _Team("llm-posttrain", "research", 1.5, _W.LOWER_OR_NEWER_EQUAL_PRIORITY, _R.FAIR_SHARING, 0.3, None,
          ("h100", "h100-reserved", "h100-spot", "a100"), {"h100": 2, "h100-reserved": 1}),
    _Team("multimodal", "research", 1.0, _W.LOWER_PRIORITY, _R.FAIR_SHARING, None, None,
          ("h100-reserved", "h100-spot", "a100"), {"h100-reserved": 2, "h100-spot": 1, "a100": 1}),
    _Team("rl", "research", 1.0, _W.NEVER, _R.FAIR_SHARING, 0.2, None,
          ("h100-spot", "a100", "h100"), {"h100-spot": 2, "a100": 1}),
    _Team("vision", "research", 1.0, _W.LOWER_PRIORITY, _R.LOWER_PRIORITY, 0.25, None,
          ("a100", "h100-spot"), {"a100": 3}),
    _Team("speech", "research", 0.5, _W.LOWER_PRIORITY, _R.ANY, 0.1, None, ("a100", "l4"), {"a100": 1, "l4": 1}),
    _Team("safety", "research", 1.0, _W.LOWER_PRIORITY, _R.FAIR_SHARING, None, None,
          ("h100", "a100", "h100-spot"), {"h100": 1, "a100": 1}),
    _Team("tpu-research", "research", 1.0, _W.LOWER_OR_NEWER_EQUAL_PRIORITY, _R.LOWER_PRIORITY, None, None,
          ("tpu-v5p", "tpu-v5e"), {"tpu-v5p": 2, "tpu-v5e": 1}),
    _Team("search-ranking", "product", 1.0, _W.LOWER_PRIORITY, _R.LOWER_PRIORITY, 0.15, 0.5,
          ("a100", "l4", "t4"), {"a100": 2, "l4": 1, "t4": 1}),
    _Team("ads", "product", 1.5, _W.LOWER_PRIORITY, _R.ANY, 0.2, 0.5,
          ("l4", "t4", "a100"), {"l4": 3, "t4": 2, "a100": 1}),
    _Team("recsys", "product", 1.0, _W.LOWER_OR_NEWER_EQUAL_PRIORITY, _R.LOWER_PRIORITY, 0.2, None,
          ("a100", "h100-reserved", "l4"), {"a100": 2, "h100-reserved": 1, "l4": 1}),
    _Team("assistant", "product", 2.0, _W.LOWER_PRIORITY, _R.ANY, None, 0.3,
          ("h100-reserved", "h100", "l4"), {"h100-reserved": 2, "h100": 1, "l4": 2}),
    _Team("translate", "product", 0.5, _W.NEVER, _R.NEVER, 0.1, None,
          ("t4", "l4", "tpu-v5e"), {"t4": 2, "l4": 1, "tpu-v5e": 1}),
    _Team("eval", "platform", 1.0, _W.LOWER_PRIORITY, _R.LOWER_PRIORITY, None, None,
          ("h100-spot", "l4", "t4"), {"h100-spot": 1, "l4": 1, "t4": 1}),
    _Team("data-pipelines", "platform", 0.5, _W.LOWER_PRIORITY, _R.NEVER, 0.1, None, ("t4", "l4"), {"t4": 2, "l4": 1}),
    _Team("ci", "platform", 0.5, _W.NEVER, _R.LOWER_PRIORITY, 0.05, None, ("t4", "l4", "a100"), {"t4": 1, "a100": 1}),
)  # fmt: skip

#: Pending mix: (kind, weight).
PENDING_MIX = (("single", 45), ("fractional", 20), ("multi", 15), ("eight", 12), ("gang", 8))
GANG_WORKERS = ((2, 20), (3, 3), (4, 18), (6, 3), (8, 15), (12, 3), (16, 12), (24, 2), (32, 8), (48, 2), (64, 4))


class _Weighted:
    """Weighted choice by bisection on cumulative weights (``random.choices`` rebuilds them on every call)."""

    def __init__(self, options: Sequence[tuple[str, float]]) -> None:
        self.names = [name for name, _ in options]
        self.cumulative = list(accumulate(w for _, w in options))

    def pick(self, rng: random.Random) -> str:
        return self.names[bisect(self.cumulative, rng.random() * self.cumulative[-1])]


def _log_uniform(rng: random.Random, low: float, high: float) -> int:
    """Seconds, log-uniform in [low, high], rounded to whole minutes."""
    return max(60, round(math.exp(rng.uniform(math.log(low), math.log(high))) / 60) * 60)


def _ratio(flavor: str) -> tuple[int, int]:
    """Cores and GiB per accelerator of the flavor's nodes (the same for every shape of a flavor)."""
    accels, cores, gib, _ = FLAVOR[flavor].shapes[0]
    return cores // accels, gib // accels


# ------------------------------------------------------------------------------------------------- the fleet


class _Fleet:
    """Nodes while they are being filled: capacities, and free resources that carving takes from."""

    def __init__(self, rng: random.Random, nodes: int) -> None:
        self.name: list[str] = []
        self.cluster: list[str] = []
        self.flavor: list[str] = []
        self.topology: list[tuple[str, ...]] = []
        self.cpu_cap: list[int] = []
        self.mem_cap: list[int] = []
        self.accel_free: list[list[int]] = []
        self.cpu_free: list[int] = []
        self.mem_free: list[int] = []
        self.healthy: list[bool] = []
        self.schedulable: list[bool] = []
        #: Gang domains (racks, TPU slices) as lists of node indices.
        self.domains: list[list[int]] = []
        counts = _flavor_counts(nodes)
        for spec in CLUSTERS:
            position = 0  # position in the cluster's topology; each flavor starts a fresh top-level domain
            serial = 0
            for flavor in FLAVORS:
                if flavor.cluster != spec.name:
                    continue
                top = spec.sizes[0] if spec.sizes else 1
                position = -(-position // top) * top
                shape = flavor.shapes[0]
                domain: list[int] = []
                for k in range(counts[flavor.name]):
                    new_domain = spec.gang_domain and position % spec.gang_domain == 0
                    if k == 0 or new_domain or not flavor.shape_per_domain:
                        shape = rng.choices(flavor.shapes, weights=[s[3] for s in flavor.shapes])[0]
                    if spec.gang_domain and (k == 0 or new_domain):
                        domain = []
                        self.domains.append(domain)
                    domain.append(len(self.name))
                    self._add(rng, spec, flavor, shape, position, serial)
                    position += 1
                    serial += 1

    def _add(self, rng: random.Random, spec: _ClusterSpec, flavor: _FlavorSpec, shape: tuple[int, int, int, float],
             position: int, serial: int) -> None:  # fmt: skip
        accels, cores, gib, _ = shape
        topology = []
        path = spec.name
        for level, size in enumerate(spec.sizes):
            parent = spec.sizes[level - 1] if level else None
            index = (position % parent if parent else position) // size
            path += f"/{spec.prefixes[level]}{index:0{3 if parent is None else 2}d}"  # zero-padded: sorts stably
            topology.append(path)
        draw = rng.random()
        self.name.append(f"{spec.name}-{serial:05d}")
        self.cluster.append(spec.name)
        self.flavor.append(flavor.name)
        self.topology.append(tuple(topology))
        self.cpu_cap.append(cores * CORE)
        self.mem_cap.append(gib * GIB)
        self.accel_free.append([WHOLE] * accels)
        self.cpu_free.append(cores * CORE)
        self.mem_free.append(gib * GIB)
        self.healthy.append(draw >= 0.02)
        self.schedulable.append(not 0.02 <= draw < 0.03)

    def take(self, node: int, accels: Sequence[tuple[int, int]], cpu: int, memory: int) -> Assignment:
        for index, milli in accels:
            self.accel_free[node][index] -= milli
        self.cpu_free[node] -= cpu
        self.mem_free[node] -= memory
        return Assignment(self.name[node], 1, tuple(accels), cpu, memory)

    def nodes(self) -> tuple[Node, ...]:
        return tuple(
            Node(
                name=self.name[i],
                cluster=self.cluster[i],
                flavor=self.flavor[i],
                accel_free=tuple(self.accel_free[i]),
                cpu_free=self.cpu_free[i],
                memory_free=self.mem_free[i],
                cpu_capacity=self.cpu_cap[i],
                memory_capacity=self.mem_cap[i],
                topology=self.topology[i],
                healthy=self.healthy[i],
                schedulable=self.schedulable[i],
                price_per_accel_hour=FLAVOR[self.flavor[i]].price,
            )
            for i in range(len(self.name))
        )


def _flavor_counts(nodes: int) -> dict[str, int]:
    """Nodes per flavor: by share (largest remainder), but at least one each."""
    exact = {f.name: nodes * f.share for f in FLAVORS}
    counts = {name: max(1, int(x)) for name, x in exact.items()}
    by_remainder = sorted(exact, key=lambda name: (int(exact[name]) - exact[name], name))
    for name in by_remainder[: max(0, nodes - sum(counts.values()))]:
        counts[name] += 1
    while sum(counts.values()) > nodes:  # the minimum of one pushed a small fleet over
        counts[max(counts, key=lambda name: counts[name])] -= 1
    return counts


# ---------------------------------------------------------------------------------------- quotas and cohorts


def _capacity(fleet: _Fleet) -> dict[str, tuple[int, int, int]]:
    totals = {f.name: [0, 0, 0] for f in FLAVORS}
    for i, flavor in enumerate(fleet.flavor):
        t = totals[flavor]
        t[0] += len(fleet.accel_free[i]) * WHOLE
        t[1] += fleet.cpu_cap[i]
        t[2] += fleet.mem_cap[i]
    return {name: (t[0], t[1], t[2]) for name, t in totals.items()}


def _quota_tree(capacity: dict[str, tuple[int, int, int]]) -> tuple[tuple[Cohort, ...], tuple[Queue, ...]]:
    """Team queues whose nominal quota is TEAM_POOL of each flavor; the root cohort holds the rest."""
    total_shares = {f.name: sum(t.shares.get(f.name, 0) for t in TEAMS) for f in FLAVORS}
    queues = []
    given = {f.name: [0, 0, 0] for f in FLAVORS}
    for team in TEAMS:
        quotas: Quotas = {}
        for flavor in team.flavors:
            share = team.shares.get(flavor, 0) / total_shares[flavor] if total_shares[flavor] else 0.0
            for r, resource in enumerate(RESOURCES):
                nominal = int(capacity[flavor][r] * TEAM_POOL * share)
                if r == 0:
                    nominal -= nominal % WHOLE  # whole accelerators
                given[flavor][r] += nominal
                borrow = None if team.borrow is None else int(capacity[flavor][r] * team.borrow)
                lend = None if team.lend is None else int(nominal * team.lend)
                quotas[flavor, resource] = Quota(nominal, borrowing_limit=borrow, lending_limit=lend)
        queues.append(Queue(team.name, team.cohort, quotas, team.flavors, team.within, team.reclaim, team.weight))
    root_quotas: Quotas = {
        (f.name, resource): Quota(capacity[f.name][r] - given[f.name][r])
        for f in FLAVORS
        for r, resource in enumerate(RESOURCES)
    }
    cohorts = [Cohort(ROOT, None, root_quotas)]
    for name, cohort_share in COHORTS.items():
        limits: Quotas = {}
        if cohort_share is not None:
            limits = {
                (f.name, resource): Quota(0, borrowing_limit=int(capacity[f.name][r] * cohort_share))
                for f in FLAVORS
                for r, resource in enumerate(RESOURCES)
            }
        cohorts.append(Cohort(name, ROOT, limits))
    return tuple(cohorts), tuple(queues)


class QuotaLedger:
    """Kueue's hierarchical quota arithmetic (docs/scheduling.md §Quotas and borrowing), to keep generated
    workloads within quota.

    Tree nodes are ``("cohort", name)`` or ``("queue", name)``; quota keys are (flavor, resource). For each
    tree node and key the ledger keeps ``[subtree quota, local (unlendable) quota, borrowing limit, usage]``,
    with a borrowing limit of -1 for none.
    """

    def __init__(self, cohorts: Iterable[Cohort], queues: Iterable[Queue]) -> None:
        parent: dict[tuple[str, str], tuple[str, str] | None] = {}
        quotas: dict[tuple[str, str], Quotas] = {}
        for c in cohorts:
            parent["cohort", c.name] = ("cohort", c.parent) if c.parent else None
            quotas["cohort", c.name] = c.quotas
        for q in queues:
            parent["queue", q.name] = ("cohort", q.cohort) if q.cohort else None
            quotas["queue", q.name] = q.quotas
        children: dict[tuple[str, str], list[tuple[str, str]]] = {}
        for node, up in parent.items():
            if up is not None:
                children.setdefault(up, []).append(node)
        keys = sorted({key for q in quotas.values() for key in q})
        self.state: dict[tuple[str, str], dict[tuple[str, str], list[int]]] = {}

        def settle(node: tuple[str, str]) -> None:
            below = children.get(node, [])
            for child in below:
                settle(child)
            state: dict[tuple[str, str], list[int]] = {}
            for key in keys:
                quota = quotas[node].get(key) or Quota(0)
                sq = quota.nominal + sum(self.state[c][key][0] - self.state[c][key][1] for c in below)
                local = max(0, sq - quota.lending_limit) if quota.lending_limit is not None else 0
                limit = quota.borrowing_limit if parent[node] and quota.borrowing_limit is not None else -1
                state[key] = [sq, local, limit, 0]
            self.state[node] = state

        for node, up in parent.items():
            if up is None:
                settle(node)
        #: Each tree node's path up to its root, itself first.
        self.chain: dict[tuple[str, str], list[dict[tuple[str, str], list[int]]]] = {}
        for node in parent:
            path: list[dict[tuple[str, str], list[int]]] = []
            step: tuple[str, str] | None = node
            while step is not None:
                path.append(self.state[step])
                step = parent[step]
            self.chain[node] = path

    def available(self, node: tuple[str, str], key: tuple[str, str]) -> int:
        chain = self.chain[node]
        sq, _, _, usage = chain[-1][key]
        avail = sq - usage  # at the root
        for state in reversed(chain[:-1]):
            sq, local, limit, usage = state[key]
            if limit >= 0:
                avail = min(avail, sq - local - max(0, usage - local) + limit)
            avail = max(0, max(0, local - usage) + avail)
        return avail

    def fits(self, queue: str, flavor: str, request: Sequence[int]) -> bool:
        node = ("queue", queue)
        return all(v <= self.available(node, (flavor, r)) for r, v in zip(RESOURCES, request, strict=True) if v)

    def add(self, queue: str, flavor: str, request: Sequence[int]) -> None:
        chain = self.chain["queue", queue]
        for resource, amount in zip(RESOURCES, request, strict=True):
            key = (flavor, resource)
            v = amount
            for state in chain:
                entry = state[key]
                local_avail = max(0, entry[1] - entry[3])
                entry[3] += v
                v -= local_avail
                if v <= 0:
                    break


# ----------------------------------------------------------------------------------------- running workloads


class _Filler:
    """Carves running workloads out of the fleet, each admitted to a queue with quota for it."""

    def __init__(self, rng: random.Random, fleet: _Fleet, ledger: QuotaLedger, now: float) -> None:
        self.rng, self.fleet, self.ledger, self.now = rng, fleet, ledger, now
        self.workloads: list[Workload] = []
        #: Per flavor, the queues that list it and how much of it they tend to run.
        self.queues: dict[str, tuple[list[str], list[float]]] = {}
        self.tiers = _Weighted(RUNNING_TIERS)
        for f in FLAVORS:
            teams = [t for t in TEAMS if f.name in t.flavors]
            weights = [(t.shares.get(f.name, 0) + 0.5) * rng.uniform(0.4, 1.6) for t in teams]
            self.queues[f.name] = ([t.name for t in teams], list(accumulate(weights)))
        self.cohort = {t.name: t.cohort for t in TEAMS}

    def _queue_for(self, flavor: str, request: Sequence[int]) -> str | None:
        names, cumulative = self.queues[flavor]
        first = bisect(cumulative, self.rng.random() * cumulative[-1])
        for k in range(len(names)):
            name = names[(first + k) % len(names)]
            if self.ledger.fits(name, flavor, request):
                return name
        return None

    def place(self, node_shares: Sequence[tuple[int, Sequence[tuple[int, int]], int, int]]) -> bool:
        """Run one workload holding (node, accels, cpu, memory) on each node, if a queue has quota for it."""
        fleet = self.fleet
        flavor = fleet.flavor[node_shares[0][0]]
        request = [
            sum(m for _, accels, _, _ in node_shares for _, m in accels),
            sum(c for _, _, c, _ in node_shares),
            sum(m for _, _, _, m in node_shares),
        ]
        queue = self._queue_for(flavor, request)
        if queue is None:
            return False
        self.ledger.add(queue, flavor, request)
        rng = self.rng
        tier = self.tiers.pick(rng)
        if tier == "production" and self.cohort[queue] != "product":
            tier = "normal"
        limit = _log_uniform(rng, 600, 3 * DAY)
        admitted = self.now - limit * rng.uniform(0.02, 0.98)
        checkpoint = None
        if rng.random() < 0.4:
            checkpoint = self.now - rng.uniform(0, min(7200.0, self.now - admitted))
        self.workloads.append(
            Workload(
                id=f"run-{len(self.workloads):06d}",
                queue=queue,
                tier=tier,
                cluster=fleet.cluster[node_shares[0][0]],
                flavor=flavor,
                assignments=tuple(fleet.take(n, accels, c, m) for n, accels, c, m in node_shares),
                admitted_at=admitted,
                time_limit=limit,
                submitted_at=admitted - rng.uniform(0, 3600),
                preemptible=tier != "production",
                last_checkpoint_at=checkpoint,
                evicting=rng.random() < 0.003,
            )
        )
        return True

    def _share(self, node: int, gpus: int, milli: int = WHOLE) -> tuple[int, int]:
        """CPU and memory for `gpus` accelerators (of `milli` each): up to the node's per-accelerator ratio."""
        fleet, rng = self.fleet, self.rng
        per_accel_cpu = fleet.cpu_cap[node] // len(fleet.accel_free[node])
        per_accel_mem = fleet.mem_cap[node] // len(fleet.accel_free[node])
        fraction = rng.choice((0.5, 0.75, 1.0)) * gpus * milli / WHOLE
        return int(per_accel_cpu * fraction) // 100 * 100, int(per_accel_mem * fraction) // GIB * GIB

    def gangs(self) -> None:
        fleet, rng = self.fleet, self.rng
        chance = {c.name: c.gang_chance for c in CLUSTERS}
        for domain in fleet.domains:
            usable = [n for n in domain if fleet.healthy[n] and len(fleet.accel_free[n]) >= 4]
            if len(usable) < 2 or rng.random() >= chance[fleet.cluster[domain[0]]]:
                continue
            size = min(len(usable), rng.choice((2, 2, 4, 4, 8, 16)))
            start = rng.randrange(len(usable) - size + 1)
            share = self._share(usable[start], len(fleet.accel_free[usable[start]]))
            self.place(
                [
                    (n, [(i, WHOLE) for i in range(len(fleet.accel_free[n]))], *share)
                    for n in usable[start : start + size]
                ]
            )

    def singles(self) -> None:
        fleet, rng = self.fleet, self.rng
        for n in range(len(fleet.name)):
            free = fleet.accel_free[n]
            if not fleet.healthy[n] or min(free) < WHOLE or rng.random() >= 0.9:
                continue  # unhealthy, already holds a gang, or idle
            count = len(free)
            if fleet.flavor[n] in INFERENCE_FLAVORS:
                self._inference(n)
            elif count >= 4 and rng.random() < (0.45 if count == 8 else 0.35):
                self.place([(n, [(i, WHOLE) for i in range(count)], *self._share(n, count))])
            else:
                target = math.ceil(count * rng.uniform(0.6, 1.0))
                used = 0
                while used < target:
                    size = min(rng.choice((1, 1, 1, 1, 1, 2, 2, 2, 4, 4)), target - used)
                    if not self.place([(n, [(i, WHOLE) for i in range(used, used + size)], *self._share(n, size))]):
                        break
                    used += size

    def _inference(self, n: int) -> None:
        """Whole-GPU services and fractional shares (250/500 milli) on a 1/2/4-GPU inference node."""
        fleet, rng = self.fleet, self.rng
        count = len(fleet.accel_free[n])
        if count > 1 and rng.random() < 0.25:
            self.place([(n, [(i, WHOLE) for i in range(count)], *self._share(n, count))])
            return
        for i in range(count):
            draw = rng.random()
            if draw < 0.55:
                self.place([(n, [(i, WHOLE)], *self._share(n, 1))])
            elif draw < 0.95:
                while fleet.accel_free[n][i] > 0 and rng.random() < 0.85:
                    milli = min(rng.choice((250, 250, 500)), fleet.accel_free[n][i])
                    if not self.place([(n, [(i, milli)], *self._share(n, 1, milli))]):
                        break


# ----------------------------------------------------------------------------------------------- pending mix


@dataclass(frozen=True, slots=True)
class _Offer:
    """A queue that can take one kind of job, with the job's flavor restriction (empty: any of the queue's)."""

    queue: str
    flavors: tuple[str, ...]
    cpu_per_accel: int  # cores: the most any of its flavors' nodes have per accelerator
    gib_per_accel: int
    homes: tuple[str, ...]  # clusters of its flavors


def _offers(queues: Sequence[Queue], demand: dict[str, float]) -> dict[str, tuple[list[_Offer], list[float]]]:
    """For each kind of pending job, the queues that offer a flavor able to hold it, weighted by demand."""
    eight = {f.name for f in FLAVORS if any(s[0] == 8 for s in f.shapes)}
    kinds: dict[str, tuple[Callable[[str], bool], float]] = {
        "single": (lambda f: True, 0.25),
        "multi": (lambda f: True, 0.25),
        "fractional": (lambda f: f in INFERENCE_FLAVORS, 0.0),
        "eight": (lambda f: f in eight, 0.2),
        "gang": (lambda f: f in eight and f not in INFERENCE_FLAVORS, 0.0),
        "tpu-gang": (lambda f: f == "tpu-v5p", 1.0),
    }
    result = {}
    for kind, (keep, tpu_share) in kinds.items():
        found: list[_Offer] = []
        weights: list[float] = []
        for q in queues:
            for is_tpu, share in ((False, 1.0 - tpu_share), (True, tpu_share)):
                flavors = tuple(f for f in q.flavors if FLAVOR[f].tpu == is_tpu and keep(f))
                if flavors and share > 0:
                    found.append(
                        _Offer(
                            q.name,
                            () if flavors == q.flavors else flavors,
                            max(_ratio(f)[0] for f in flavors),
                            max(_ratio(f)[1] for f in flavors),
                            tuple(sorted({FLAVOR[f].cluster for f in flavors})),
                        )
                    )
                    weights.append(demand[q.name] * share)
        result[kind] = (found, weights)
    return result


def _pending(seed: int, queues: Sequence[Queue], jobs: int, now: float) -> tuple[Job, ...]:
    """`jobs` pending jobs per PENDING_MIX; every random draw is made up front, vectorised, for speed."""
    gen = np.random.default_rng(seed)
    demand = {t.name: t.weight * float(gen.uniform(0.5, 1.5)) for t in TEAMS}
    offers = _offers(queues, demand)
    kinds = [kind for kind, _ in PENDING_MIX] + ["tpu-gang"]
    weights = np.array([w for _, w in PENDING_MIX] + [0], dtype=float)
    weights[-1], weights[-2] = 0.1 * weights[-2], 0.9 * weights[-2]  # a tenth of the gangs are TPU slices
    kind = gen.choice(len(kinds), size=jobs, p=weights / weights.sum())
    offer = np.zeros(jobs, dtype=np.int64)
    for k, name in enumerate(kinds):
        mask = kind == k
        p = np.array(offers[name][1])
        offer[mask] = gen.choice(len(p), size=int(mask.sum()), p=p / p.sum())

    def draw(values: Sequence[int]) -> list[int]:
        return [int(v) for v in gen.choice(np.array(values), size=jobs)]

    cpa, mpa = draw((4, 6, 8, 8, 12, 16)), draw((16, 32, 48, 64, 64, 96))
    frac_milli, frac_cpa, frac_mpa = draw((250, 250, 500)), draw((4, 8)), draw((16, 32))
    multi = draw((2, 2, 2, 3, 4, 4))
    gang_p = np.array([p for _, p in GANG_WORKERS], dtype=float)
    gang = gen.choice(np.array([w for w, _ in GANG_WORKERS]), size=jobs, p=gang_p / gang_p.sum()).tolist()
    gang_cpa, gang_mpa, tpu_workers = draw((8, 12, 16)), draw((64, 96, 128)), draw((2, 4, 4, 8, 8, 16))
    tier_p = np.array([p for _, p in PENDING_TIERS], dtype=float)
    tier = gen.choice(len(PENDING_TIERS), size=jobs, p=tier_p / tier_p.sum()).tolist()
    topology_draw, limit_draw, home_draw, place_draw, price_draw = gen.random((5, jobs)).tolist()
    price_factor = gen.uniform(0.8, 2.5, size=jobs).tolist()
    submitted = (now - gen.uniform(0, DAY, size=jobs)).tolist()
    limits = (np.rint(np.exp(gen.uniform(math.log(600), math.log(3 * DAY), size=jobs)) / 60) * 60).astype(int)
    time_limit = limits.tolist()
    region = {c.name: c.region for c in CLUSTERS}
    width = max(6, len(str(jobs)))
    result = []
    for i, (k, o) in enumerate(zip(kind.tolist(), offer.tolist(), strict=True)):
        name = kinds[k]
        of = offers[name][0][o]
        workers, accelerators, milli, topology = 1, 1, WHOLE, None
        c, m = cpa[i], mpa[i]
        if name == "fractional":
            milli, c, m = frac_milli[i], frac_cpa[i], frac_mpa[i]
        elif name == "multi":
            accelerators = multi[i]
        elif name == "eight":
            accelerators = 8
        elif name == "gang":
            accelerators, workers, c, m = 8, gang[i], gang_cpa[i], gang_mpa[i]
            level = "rack" if workers <= 16 else "block"
            if topology_draw[i] < 0.45:
                topology = Topology(level, TopologyMode.REQUIRED)
            elif topology_draw[i] < 0.7:
                topology = Topology(level, TopologyMode.PREFERRED)
        elif name == "tpu-gang":
            accelerators, workers = 4, tpu_workers[i]
            mode = TopologyMode.REQUIRED if topology_draw[i] < 0.9 else TopologyMode.PREFERRED
            topology = Topology("slice", mode)
        clusters: tuple[str, ...] = ()
        regions: tuple[str, ...] = ()
        locality = None
        home = of.homes[int(home_draw[i] * len(of.homes))]
        if limit_draw[i] < 0.04:
            clusters = (home,)
        elif limit_draw[i] < 0.08:
            regions = (region[home],)
        elif limit_draw[i] < 0.18:
            locality = home if place_draw[i] < 0.5 else region[home]
        price = None
        if price_draw[i] < 0.04:
            price = round(workers * accelerators * milli / WHOLE * price_factor[i], 2)
        tier_name = PENDING_TIERS[tier[i]][0]
        result.append(
            Job(
                id=f"job-{i:0{width}d}",
                queue=of.queue,
                tier=tier_name,
                submitted_at=submitted[i],
                workers=workers,
                accelerators=accelerators,
                accel_milli=milli,
                cpu=min(c, of.cpu_per_accel) * CORE * accelerators * milli // WHOLE,
                memory=min(m, of.gib_per_accel) * GIB * accelerators * milli // WHOLE,
                flavors=of.flavors,
                clusters=clusters,
                regions=regions,
                topology=topology,
                time_limit=max(60, time_limit[i]),
                max_price_per_hour=price,
                locality=locality,
                preemptible=tier_name != "production",
            )
        )
    return tuple(result)


# --------------------------------------------------------------------------------------------------- entries


def synthetic_snapshot(nodes: int, jobs: int, seed: int, now: float = 1_700_000_000.0) -> Snapshot:
    """A realistic fleet of `nodes` nodes, ~85% busy, with `jobs` pending jobs; the same for the same seed."""
    if nodes < MIN_NODES:
        raise ValueError(f"a synthetic fleet needs at least {MIN_NODES} nodes (one per flavor)")
    if jobs < 0:
        raise ValueError("jobs must be >= 0")
    rng = random.Random(seed)  # noqa: S311 - reproducible test data, not cryptography
    fleet = _Fleet(rng, nodes)
    cohorts, queues = _quota_tree(_capacity(fleet))
    filler = _Filler(rng, fleet, QuotaLedger(cohorts, queues), now)
    filler.gangs()
    filler.singles()
    clusters = tuple(Cluster(c.name, c.region, c.levels, c.preference) for c in CLUSTERS)
    return Snapshot(
        now=now,
        clusters=clusters,
        nodes=fleet.nodes(),
        tiers=TIERS,
        cohorts=cohorts,
        queues=queues,
        running=tuple(filler.workloads),
        pending=_pending(seed, queues, jobs, now),
    )


def advance(snapshot: Snapshot, decisions: Decisions, seconds: float) -> Snapshot:
    """The snapshot after applying `decisions` and letting `seconds` pass.

    Preempted and already-evicting workloads stop (their resources return to their nodes), admitted jobs
    start on their assignments and leave the pending list, the clock moves on and workloads whose time limit
    has run out finish. Raises ValueError when an admission names an unknown job or overcommits a node.
    """
    index = {n.name: i for i, n in enumerate(snapshot.nodes)}
    accel = [list(n.accel_free) for n in snapshot.nodes]
    cpu = [n.cpu_free for n in snapshot.nodes]
    memory = [n.memory_free for n in snapshot.nodes]
    touched: set[int] = set()

    def move(assignments: Iterable[Assignment], sign: int) -> None:
        for a in assignments:
            i = index[a.node]
            touched.add(i)
            for gpu, milli in a.accels:
                accel[i][gpu] += sign * milli
            cpu[i] += sign * a.cpu
            memory[i] += sign * a.memory

    stopped = {p.workload for p in decisions.preemptions}
    running: list[Workload] = []
    for w in snapshot.running:
        if w.evicting or w.id in stopped:
            move(w.assignments, +1)
        else:
            running.append(w)
    jobs = {j.id: j for j in snapshot.pending}
    admitted: set[str] = set()
    for a in decisions.admissions:
        job = jobs.get(a.job)
        if job is None or a.job in admitted:
            raise ValueError(f"admission of {a.job!r}, which is not pending")
        admitted.add(a.job)
        move(a.assignments, -1)
        running.append(
            Workload(
                id=job.id,
                queue=job.queue,
                tier=job.tier,
                cluster=a.cluster,
                flavor=a.flavor,
                assignments=a.assignments,
                admitted_at=snapshot.now,
                time_limit=job.time_limit,
                submitted_at=job.submitted_at,
                preemptible=job.preemptible,
            )
        )
    for i in touched:
        if cpu[i] < 0 or memory[i] < 0 or min(accel[i], default=0) < 0:
            raise ValueError(f"the admissions overcommit node {snapshot.nodes[i].name}")
    now = snapshot.now + seconds
    still: list[Workload] = []
    for w in running:
        if w.expected_end <= now:
            move(w.assignments, +1)
        else:
            still.append(w)
    nodes = tuple(
        replace(n, accel_free=tuple(accel[i]), cpu_free=cpu[i], memory_free=memory[i]) if i in touched else n
        for i, n in enumerate(snapshot.nodes)
    )
    return replace(
        snapshot,
        now=now,
        nodes=nodes,
        running=tuple(still),
        pending=tuple(j for j in snapshot.pending if j.id not in admitted),
    )
