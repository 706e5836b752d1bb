"""The FGD paper's packing protocol (Weng et al., ATC'23) on Alibaba's ``openb`` trace.

Per seed: shuffle the pods, inflate the list by sampling pods with replacement until the GPUs asked for
reach 130% of the fleet's, then place the pods one by one with no departures; a pod that fits nowhere
is skipped. The measure is the share of the fleet's GPUs allocated once the demand that has arrived
reaches each whole percent of capacity, 0 to 130.

Policies: the published baselines (``random``, ``best-fit``, ``dot-product``, ``fgd``), each choosing a
node for one pod at a time, and ``quartermaster``: the production engine, unchanged, given the whole
inflated list as one cycle's pending jobs (one queue, one tier, no quota, no backfill), so that it places
them in arrival order exactly as the protocol does.

A GPU model is a cluster of the engine's fleet (one flavor, ``gpu``): a pod's ``gpu_spec`` is the
clusters it may run in.

Workloads: the pod list as it is, or a variant of it drawn per seed (``workload``), to check that a policy
does not win on one trace's shape only: more fractional-GPU pods, more multi-GPU pods, or more pods that
require a GPU model, always made of the list's own pods.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, replace

import numpy as np

from scheduler.engine import schedule
from scheduler.engine.fgd import Fragmentation, Shape, workload_mix
from scheduler.engine.model import WHOLE, Assignment, Cluster, Config, Job, Node, Queue, Snapshot, Tier
from scheduler.engine.nodes import IntArray, NodeTable
from scheduler.engine.placement import accelerator_slots

from .traces import PackNode, Pod

FLAVOR = "gpu"
CPU_ONLY = "cpu-only"  # the cluster of nodes without GPUs
ARRIVALS = range(0, 131)  # percent of the fleet's GPUs asked for so far
DEFAULT_POLICY = "quartermaster"
#: Request shapes in the FGD workload mix: all of them (the default list has 126 distinct GPU shapes), as
#: the paper does; the production default (16) keeps a cycle short on a large fleet.
FGD_SHAPES = 256


@dataclass(slots=True)
class PolicyResult:
    """One policy's allocation curves, one per seed, and the time they took."""

    curves: list[list[float]] = field(default_factory=list)
    seconds: float = 0.0

    def mean(self) -> list[float]:
        return [round(float(v), 2) for v in np.mean(np.array(self.curves), axis=0)]

    def figures(self) -> dict[str, object]:
        curve = self.mean()
        at = {x: round(float(np.std([c[x] for c in self.curves])), 2) for x in (100, 130)}
        return {
            "alloc_pct_at_100": curve[100],
            "alloc_pct_at_130": curve[130],
            "std_at_100": at[100],
            "std_at_130": at[130],
            "seeds": len(self.curves),
            "seconds": round(self.seconds, 1),
            "curve": curve,
        }


def arrival_order(pods: Sequence[Pod], capacity: float, seed: int, target: float = 1.3) -> list[Pod]:
    """The protocol's arrivals for one seed: the pods shuffled, then pods drawn with replacement, until
    the GPUs asked for reach ``target`` times ``capacity`` (the list is cut there if it gets there first)."""
    rnd = random.Random(seed)
    shuffled = list(pods)
    rnd.shuffle(shuffled)
    arrivals: list[Pod] = []
    asked = 0.0
    draws = iter(shuffled)
    while asked < target * capacity:
        pod = next(draws, None) or rnd.choice(pods)
        arrivals.append(pod)
        asked += pod.gpu_demand
    return arrivals


def allocation_curve(arrivals: Sequence[Pod], placed: Sequence[bool], capacity: float) -> list[float]:
    """Allocated GPUs (% of capacity) at the moment arrived demand first reaches each percent in ARRIVALS."""
    demand = np.array([p.gpu_demand for p in arrivals])
    arrived = np.cumsum(demand)
    allocated = np.cumsum(np.where(np.asarray(placed, np.bool_), demand, 0.0))
    curve = []
    for percent in ARRIVALS:
        i = int(np.searchsorted(arrived, percent / 100 * capacity - 1e-9))
        curve.append(0.0 if percent == 0 else 100 * float(allocated[min(i, len(arrivals) - 1)]) / capacity)
    return curve


# ------------------------------------------------------------------------------------------- workload variants

#: Workload variants of a pod list (``workload``): each raises one kind of pod to a share of the list.
#: ``fractional``: pods on a share of one GPU (gpu_milli < 1000) ask for 60% of the GPUs (28% in openb's
#: ``default``); ``multi-gpu``: pods of two or more GPUs ask for 30% of them (7% in ``default``);
#: ``gpu-spec``: a third of the pods that ask for GPUs accept only one GPU model (none do in ``default``).
WORKLOADS = ("default", "fractional", "multi-gpu", "gpu-spec")
FRACTIONAL_SHARE = 0.6
MULTI_GPU_SHARE = 0.3
GPU_SPEC_SHARE = 1 / 3


def _resampled(pods: Sequence[Pod], chosen: Callable[[Pod], bool], share: float, rnd: random.Random) -> list[Pod]:
    """As many pods as ``pods``, drawn with replacement: the chosen ones weighted so that they ask for
    ``share`` of the GPUs, the rest as often as in the list."""
    mine = sum(p.gpu_demand for p in pods if chosen(p))
    rest = sum(p.gpu_demand for p in pods if not chosen(p))
    if not mine or not rest:
        raise ValueError("the pod list has no pods of the kind this workload raises, or only those")
    weight = share * rest / ((1 - share) * mine)
    return rnd.choices(pods, weights=[weight if chosen(p) else 1.0 for p in pods], k=len(pods))


def _with_gpu_specs(pods: Sequence[Pod], nodes: Sequence[PackNode], rnd: random.Random) -> list[Pod]:
    """The pods, with a GPU model required by a third of those that ask for GPUs (counting any that
    already name models): a model drawn in proportion to its GPUs in the fleet, among the models with a
    node that could hold the pod when empty, so that no pod is made impossible."""
    gpus_of: dict[str, int] = {}
    for n in nodes:
        if n.gpus:
            gpus_of[n.model] = gpus_of.get(n.model, 0) + n.gpus
    models = sorted(gpus_of)
    with_gpus = [p for p in pods if p.gpus]
    free = sum(1 for p in with_gpus if not p.models)
    wanted = max(0.0, GPU_SPEC_SHARE * len(with_gpus) - (len(with_gpus) - free))
    chance = wanted / free if free else 0.0
    rooms: dict[tuple[int, int, int], list[str]] = {}
    varied = []
    for p in pods:
        if p.gpus and not p.models and rnd.random() < chance:
            need = (p.gpus, p.cpu, p.memory)
            room = rooms.get(need)
            if room is None:
                fit = {n.model for n in nodes if n.gpus >= p.gpus and n.cpu >= p.cpu and n.memory >= p.memory}
                room = rooms[need] = [m for m in models if m in fit]
            if room:
                model = rnd.choices(room, weights=[gpus_of[m] for m in room])[0]
                p = replace(p, models=(model,))
        varied.append(p)
    return varied


def workload(pods: Sequence[Pod], name: str, seed: int, nodes: Sequence[PackNode] = ()) -> list[Pod]:
    """The pod list as the workload variant ``name`` (see ``WORKLOADS``), the same for the same seed.

    The pods stay real: a variant is a weighted re-sample of the list's own rows (``fractional``,
    ``multi-gpu``) or the list itself with GPU models required of some pods (``gpu-spec``, which needs
    the ``nodes`` to know which models could hold each pod). ``default`` is the list as it is."""
    rnd = random.Random(f"workload {name} {seed}")
    if name == "default":
        return list(pods)
    if name == "fractional":
        return _resampled(pods, lambda p: p.gpus == 1 and p.milli < WHOLE, FRACTIONAL_SHARE, rnd)
    if name == "multi-gpu":
        return _resampled(pods, lambda p: p.gpus >= 2, MULTI_GPU_SHARE, rnd)
    if name == "gpu-spec":
        return _with_gpu_specs(pods, nodes, rnd)
    raise ValueError(f"unknown workload {name}; choose from {', '.join(WORKLOADS)}")


# ------------------------------------------------------------------------------------ the fleet, as the engine sees it


def engine_fleet(nodes: Sequence[PackNode]) -> tuple[tuple[Cluster, ...], tuple[Node, ...]]:
    """One cluster per GPU model (and one for CPU-only nodes), all of flavor ``gpu``."""
    models = sorted({n.model or CPU_ONLY for n in nodes})
    clusters = tuple(Cluster(name=m, region="openb") for m in models)
    fleet = tuple(
        Node(
            name=n.name,
            cluster=n.model or CPU_ONLY,
            flavor=FLAVOR,
            accel_free=(WHOLE,) * n.gpus,
            cpu_free=n.cpu,
            memory_free=n.memory,
            cpu_capacity=n.cpu,
            memory_capacity=n.memory,
        )
        for n in nodes
    )
    return clusters, fleet


def engine_jobs(arrivals: Sequence[Pod]) -> tuple[Job, ...]:
    """The arrivals as pending jobs of one queue, submitted in arrival order."""
    return tuple(
        Job(
            id=f"{i:06d}-{pod.name}",
            queue="pods",
            tier="pods",
            submitted_at=float(i),
            accelerators=pod.gpus,
            accel_milli=pod.milli,
            cpu=pod.cpu,
            memory=pod.memory,
            clusters=pod.models,
        )
        for i, pod in enumerate(arrivals)
    )


def packing_config() -> Config:
    """The engine's settings for the protocol: nothing but placement matters (no reservations, no price,
    no preference between clusters beyond how well the pod fits)."""
    return Config(
        fair_sharing=False,
        backfill=False,
        fgd_shapes=FGD_SHAPES,
        max_jobs_per_cycle=10**9,
        weight_availability=0.0,
        weight_price=0.0,
        weight_locality=0.0,
        weight_preference=0.0,
    )


def quartermaster(nodes: Sequence[PackNode], arrivals: Sequence[Pod], seed: int) -> list[bool]:
    """Our engine, unchanged: the arrivals are one cycle's pending jobs, placed in arrival order."""
    clusters, fleet = engine_fleet(nodes)
    jobs = engine_jobs(arrivals)
    snapshot = Snapshot(
        now=0.0,
        clusters=clusters,
        nodes=fleet,
        tiers=(Tier("pods", 0, preemptible=False),),
        cohorts=(),
        queues=(Queue("pods", cohort=None, flavors=(FLAVOR,)),),
        running=(),
        pending=jobs,
        config=packing_config(),
    )
    admitted = {a.job for a in schedule(snapshot).admissions}
    return [job.id in admitted for job in jobs]


# ------------------------------------------------------------------------------------------------ the baselines


class _Fleet:
    """The fleet for the one-pod-at-a-time baselines: the engine's node arrays, changed in place, with the
    seed's random numbers and, for FGD, the workload mix (the arrivals' own, as in the paper)."""

    def __init__(self, nodes: Sequence[PackNode], arrivals: Sequence[Pod], seed: int, mix: bool) -> None:
        clusters, fleet = engine_fleet(nodes)
        self.table = NodeTable(clusters, fleet)
        self.state = self.table.free
        self.capacity = self.table.empty
        self.rnd = random.Random(seed)
        self.fgd: Fragmentation | None = None
        if mix:
            jobs = engine_jobs(arrivals)
            shapes = workload_mix(self.table, jobs, FGD_SHAPES, len(jobs))
            self.fgd = Fragmentation(self.table, shapes, every_worker=False)

    def allowed(self, pod: Pod) -> IntArray:
        """Rows that may host the pod and have room for it now."""
        state, table = self.state, self.table
        ok = (state.cpu >= pod.cpu) & (state.memory >= pod.memory)
        if pod.gpus:
            if pod.milli == WHOLE:
                ok &= state.whole >= pod.gpus
            else:
                ok &= (state.accel >= pod.milli).any(axis=1)
        if pod.models:
            ok &= np.isin(table.cluster, [table.cluster_index[m] for m in pod.models if m in table.cluster_index])
        return np.flatnonzero(ok)

    def take(self, row: int, slot: int, pod: Pod) -> None:
        """Place the pod on ``row`` (its share on accelerator ``slot``, or the tightest one when -1), as the
        engine places a worker."""
        shares = accelerator_slots(self.state, row, Shape(pod.gpus, pod.milli, pod.cpu, pod.memory), 1, slot)
        self.table.take(self.state, [Assignment(self.table.names[row], 1, tuple(shares), pod.cpu, pod.memory)])


Chooser = Callable[[_Fleet, Pod, IntArray], tuple[int, int]]


def _baseline(choose: Chooser, mix: bool = False) -> Callable[[Sequence[PackNode], Sequence[Pod], int], list[bool]]:
    def run(nodes: Sequence[PackNode], arrivals: Sequence[Pod], seed: int) -> list[bool]:
        fleet = _Fleet(nodes, arrivals, seed, mix)
        placed = []
        for pod in arrivals:
            rows = fleet.allowed(pod)
            if len(rows):
                fleet.take(*choose(fleet, pod, rows), pod)
            placed.append(bool(len(rows)))
        return placed

    return run


def _random(fleet: _Fleet, pod: Pod, rows: IntArray) -> tuple[int, int]:
    return int(rows[fleet.rnd.randrange(len(rows))]), -1


def _best_fit(fleet: _Fleet, pod: Pod, rows: IntArray) -> tuple[int, int]:
    """The node left with the least free GPU, then CPU, then memory, once the pod is on it."""
    s = fleet.state
    order = np.lexsort((rows, s.memory[rows], s.cpu[rows], s.accel[rows].sum(axis=1)))
    return int(rows[order[0]]), -1


def _dot_product(fleet: _Fleet, pod: Pod, rows: IntArray) -> tuple[int, int]:
    """Tetris's alignment: the request and the node's free resources, each over the node's capacity,
    with the largest dot product."""
    s, cap = fleet.state, fleet.capacity
    gpus = np.maximum(fleet.table.accel_count[rows] * WHOLE, 1)
    score = (
        (pod.gpus * pod.milli / gpus) * (s.accel[rows].sum(axis=1) / gpus)
        + (pod.cpu / np.maximum(cap.cpu[rows], 1)) * (s.cpu[rows] / np.maximum(cap.cpu[rows], 1))
        + (pod.memory / np.maximum(cap.memory[rows], 1)) * (s.memory[rows] / np.maximum(cap.memory[rows], 1))
    )
    return int(rows[np.argmax(score)]), -1


def _fgd(fleet: _Fleet, pod: Pod, rows: IntArray) -> tuple[int, int]:
    """FGD as published: the node (and GPU, for a share) whose fragmentation grows least; ties to the
    first node. A pod without GPUs goes where best fit puts it."""
    frag = fleet.fgd
    if frag is None or not pod.gpus:
        return _best_fit(fleet, pod, rows)
    shape = Shape(pod.gpus, pod.milli, pod.cpu, pod.memory)
    # Scores of whole (flavor, cluster) groups, kept per node between pods: one placement changes one node.
    scored = [(group, *frag.score(fleet.state, every, shape, group)) for group, every in fleet.table.groups.items()]
    every = np.concatenate([fleet.table.groups[group] for group, _, _ in scored])
    delta = np.concatenate([d for _, d, _ in scored])
    slots = np.concatenate([s for _, _, s in scored])
    usable = np.isin(every, rows)
    best = int(np.flatnonzero(usable)[np.argmin(delta[usable])])
    return int(every[best]), int(slots[best]) if pod.milli < WHOLE else -1


POLICIES: dict[str, Callable[[Sequence[PackNode], Sequence[Pod], int], list[bool]]] = {
    "random": _baseline(_random),
    "dot-product": _baseline(_dot_product),
    "best-fit": _baseline(_best_fit),
    "fgd": _baseline(_fgd, mix=True),
    DEFAULT_POLICY: quartermaster,
}


def run_packing(
    nodes: Sequence[PackNode],
    pods: Sequence[Pod],
    policies: Sequence[str],
    seeds: Iterable[int],
    progress: Callable[[str, int], None] | None = None,
    variant: str = "default",
) -> dict[str, object]:
    """Every policy on every seed; the report ``simulate packing --json`` prints. With a ``variant`` other
    than ``default``, each seed replays its own draw of that workload (``workload``)."""
    unknown = [p for p in policies if p not in POLICIES]
    if unknown:
        raise ValueError(f"unknown policy {', '.join(unknown)}; choose from {', '.join(POLICIES)}")
    if variant not in WORKLOADS:
        raise ValueError(f"unknown workload {variant}; choose from {', '.join(WORKLOADS)}")
    capacity = float(sum(n.gpus for n in nodes))
    if capacity <= 0:
        raise ValueError("the node list has no GPUs")
    if not any(p.gpus for p in pods):
        raise ValueError("no pod asks for a GPU: there is no GPU demand to arrive")
    results = {name: PolicyResult() for name in policies}
    for seed in seeds:
        arrivals = arrival_order(workload(pods, variant, seed, nodes), capacity, seed)
        for name in policies:
            started = time.perf_counter()
            placed = POLICIES[name](nodes, arrivals, seed)
            results[name].seconds += time.perf_counter() - started
            results[name].curves.append(allocation_curve(arrivals, placed, capacity))
            if progress:
                progress(name, seed)
    return {
        "default_policy": DEFAULT_POLICY,
        "workload": variant,
        "nodes": len(nodes),
        "gpus": int(capacity),
        "pods": len(pods),
        "policies": {name: result.figures() for name, result in results.items()},
    }
