"""Job-level replay: a stream of gang jobs through the event simulator (``events.py``) under each policy.

Policies:

- ``fifo``: first come, first served, strictly: when the oldest waiting job does not fit, nothing behind it
  starts (head-of-line blocking), as the Helios artifact's FIFO does.
- ``sjf``: shortest job first with runtime knowledge (the job's true duration), non-preemptive and strict
  in the same way.
- ``tiresias``: Tiresias's discretised two-dimensional least-attained-service (Gu et al., NSDI '19):
  jobs are ranked by the accelerator-seconds they have had (queues at 1 and 10 GPU-hours), first come
  first served within a rank; a job that has waited longer than ``PROMOTE`` times the time it ran goes
  back to the first rank, its service counted afresh (the starvation guard). Preemptive: running jobs
  that fall out of the top ranks are stopped at once (no grace period, no lost work), and waiting jobs
  are placed in rank order, skipping those that do not fit.
- ``quartermaster``: the production engine, unchanged, every cycle: tiers, fair sharing, backfill with
  reservations for the jobs that head the queue, preemption with grace periods.

The baselines place a gang's workers one at a time, each on the up node that it fits most tightly, among the
nodes of the flavors and clusters the job accepts (``SimJob.flavors``, ``SimJob.clusters``; the engine honours
those and ``SimJob.topology`` as it does for real jobs).
"""

from __future__ import annotations

import heapq
import math
import random
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, replace

from scheduler.engine import schedule
from scheduler.engine.fairshare import hours
from scheduler.engine.model import (
    WHOLE,
    Assignment,
    Cluster,
    Cohort,
    Config,
    Job,
    Node,
    Queue,
    Quota,
    Snapshot,
    Tier,
    Workload,
)

from .events import NodeState, Outage, Plan, Policy, SimJob, Simulation, may_use
from .pools import Pool
from .traces import TraceJob

DEFAULT_POLICY = "quartermaster"
FLAVOR = "gpu"


# -------------------------------------------------------------------------------------- the baselines


class Room:
    """The free resources of the up nodes, as a policy plans a cycle: places gangs and takes what they use."""

    def __init__(self, sim: Simulation) -> None:
        self.nodes = [(name, list(s.accel_free), [s.cpu_free, s.memory_free]) for name, s in sim.nodes.items() if s.up]
        self.sim = sim

    def free(self, assignments: Iterable[Assignment]) -> None:
        """Give back what a job about to be stopped holds (on nodes that are up)."""
        index = {name: i for i, (name, _, _) in enumerate(self.nodes)}
        for a in assignments:
            if a.node in index:
                _, accels, rest = self.nodes[index[a.node]]
                for slot, milli in a.accels:
                    accels[slot] += milli
                rest[0] += a.cpu
                rest[1] += a.memory

    def place(self, job: SimJob) -> tuple[Assignment, ...] | None:
        """Each worker on the node it fits most tightly (fewest free accelerators left, then the node order);
        None, taking nothing, when the gang does not fit as a whole."""
        whole = job.accel_milli == WHOLE
        counts = []
        for name, accels, (cpu, memory) in self.nodes:
            if (job.flavors or job.clusters) and not may_use(self.sim.nodes[name].node, job):
                counts.append(0)
                continue
            if whole:
                fit = sum(1 for m in accels if m == WHOLE) // job.accelerators if job.accelerators else job.workers
            else:
                fit = sum(m // job.accel_milli for m in accels)
            if job.cpu:
                fit = min(fit, cpu // job.cpu)
            if job.memory:
                fit = min(fit, memory // job.memory)
            counts.append(fit)
        if sum(counts) < job.workers:
            return None
        assignments = []
        for _ in range(job.workers):
            i = min((c, i) for i, c in enumerate(counts) if c > 0)[1]
            counts[i] -= 1
            name, accels, rest = self.nodes[i]
            taken: list[tuple[int, int]] = []
            if whole:
                for slot, milli in enumerate(accels):
                    if len(taken) == job.accelerators:
                        break
                    if milli == WHOLE:
                        taken.append((slot, WHOLE))
            else:
                slot = min((m, s) for s, m in enumerate(accels) if m >= job.accel_milli)[1]
                taken.append((slot, job.accel_milli))
            for slot, milli in taken:
                accels[slot] -= milli
            rest[0] -= job.cpu
            rest[1] -= job.memory
            assignments.append(Assignment(name, 1, tuple(taken), job.cpu, job.memory))
        return tuple(assignments)


class Strict:
    """Start waiting jobs in the order of ``key`` until one does not fit (head-of-line blocking)."""

    def __init__(self, name: str, key: Callable[[SimJob], tuple[float, ...]]) -> None:
        self.name = name
        self.key = key
        self._heap: list[tuple[tuple[float, ...], str]] = []

    def plan(self, sim: Simulation, arrived: Sequence[str]) -> Plan:
        for job_id in arrived:
            heapq.heappush(self._heap, (self.key(sim.waiting[job_id].job), job_id))
        room, starts = Room(sim), []
        while self._heap:
            job_id = self._heap[0][1]
            waiting = sim.waiting.get(job_id)
            if waiting is not None:
                placed = room.place(waiting.job)
                if placed is None:
                    break
                starts.append((job_id, placed))
            heapq.heappop(self._heap)
        return Plan(starts)


def fifo() -> Strict:
    return Strict("fifo", lambda job: (job.submitted,))


def sjf() -> Strict:
    return Strict("sjf", lambda job: (job.duration, job.submitted))


class Tiresias:
    """Discretised 2D-LAS with a starvation guard; see the module's docstring."""

    name = "tiresias"
    #: Queue thresholds, accelerator-seconds of attained service.
    THRESHOLDS = (3600.0, 36000.0)
    #: A waiting job goes back to the first queue once it has waited this many times as long as it ran.
    PROMOTE = 4.0

    def __init__(self) -> None:
        #: Service counted from here on: a promoted job starts again from the first queue.
        self._base: dict[str, float] = {}

    def _service(self, sim: Simulation, job_id: str) -> float:
        return sim.attained(job_id) - self._base.get(job_id, 0.0)

    def plan(self, sim: Simulation, arrived: Sequence[str]) -> Plan:
        now = sim.now
        if not sim.waiting:
            return Plan()
        for job_id, waiting in sim.waiting.items():
            service = self._service(sim, job_id)
            if service > 0 and now - waiting.since >= self.PROMOTE * service / waiting.job.gpus:
                self._base[job_id] = sim.attained(job_id)

        def rank(job_id: str) -> int:
            service = self._service(sim, job_id)
            return sum(1 for t in self.THRESHOLDS if service >= t)

        active = [(rank(i), r.job.submitted, i, True) for i, r in sim.running.items()] + [
            (rank(i), w.job.submitted, i, False) for i, w in sim.waiting.items()
        ]
        active.sort()
        capacity = sum(len(s.accel_free) for s in sim.nodes.values() if s.up)
        chosen, used = set(), 0.0
        for _, _, job_id, _ in active:
            gpus = sim.records[job_id].job.gpus
            if used + gpus <= capacity:
                chosen.add(job_id)
                used += gpus
        room = Room(sim)
        stops = [(job_id, 0.0) for job_id, run in sim.running.items() if job_id not in chosen]
        for job_id, _ in stops:
            room.free(sim.running[job_id].assignments)
        starts = []
        for _, _, job_id, running in active:
            if not running and job_id in chosen:
                placed = room.place(sim.waiting[job_id].job)
                if placed is not None:
                    starts.append((job_id, placed))
        return Plan(starts, stops, self._next_change(sim, chosen))

    def _next_change(self, sim: Simulation, chosen: set[str]) -> float | None:
        """When a rank next changes: a running job crosses a threshold, or a waiting one earns promotion."""
        times = []
        for job_id, run in sim.running.items():
            if job_id in chosen:
                service = self._service(sim, job_id)
                above = [t for t in self.THRESHOLDS if t > service]
                if above:
                    times.append(sim.now + (above[0] - service) / run.job.gpus)
        for job_id, waiting in sim.waiting.items():
            service = self._service(sim, job_id)
            if service > 0:
                times.append(waiting.since + self.PROMOTE * service / waiting.job.gpus)
        later = [t for t in times if t > sim.now]
        return min(later) if later else None


# ---------------------------------------------------------------------------------------------- ours


class Quartermaster:
    """The production engine's ``schedule``, called unchanged on a snapshot of the simulation. A cycle with
    nobody waiting is skipped when no queue keeps a quota (it could decide nothing): a month's replay spends
    most of its cycles on finishes with an empty queue."""

    name = DEFAULT_POLICY

    def __init__(
        self,
        clusters: Sequence[Cluster],
        config: Config | None = None,
        tiers: Sequence[Tier] = (),
        queues: Sequence[Queue] = (),
        half_life: float = 0.0,
        cohorts: Sequence[Cohort] = (),
    ) -> None:
        self.clusters = tuple(clusters)
        self.config = config or Config()
        #: Recent use as the product's meter keeps it (docs/scheduling.md §Memory: recent use counts), with this
        #: half-life in seconds; 0: none kept, shares forget.
        self.half_life = half_life
        self._closed: dict[str, float] = {}  # per queue: ended runs' recent use as of ``_closed_at``
        self._closed_at = 0.0
        self._seen = 0  # how many of ``Simulation.ended`` are in ``_closed``
        self.tiers = {t.name: t for t in tiers}
        self.queues = {q.name: q for q in queues}
        self.cohorts = tuple(cohorts)
        #: Whether a queue keeps a quota: fixed here (queues that ``_job`` adds for unknown names keep none).
        self._quotas = any(q.quotas for q in queues)
        self._jobs: dict[str, tuple[float, Job]] = {}  # per waiting job: (work left, its engine Job)
        self._workloads: dict[str, tuple[int, bool, Workload]] = {}  # per run: (token, stopping, Workload)
        self._nodes: dict[str, tuple[tuple[object, ...], Node]] = {}  # per node: (what is free, its engine Node)

    def _node(self, name: str, state: NodeState, horizon: float = math.inf) -> Node:
        """The engine's view of a node as it is now, made again only when what is free on it changed."""
        free = (tuple(state.accel_free), state.cpu_free, state.memory_free, state.up, horizon)
        known = self._nodes.get(name)
        if known is None or known[0] != free:
            node = state.node
            engine_node = Node(
                name=name,
                cluster=node.cluster,
                flavor=node.flavor,
                accel_free=free[0],
                cpu_free=state.cpu_free,
                memory_free=state.memory_free,
                cpu_capacity=node.cpu_capacity,
                memory_capacity=node.memory_capacity,
                topology=node.topology,
                healthy=state.up,
                price_per_accel_hour=node.price_per_accel_hour,
                spot=node.spot,
                horizon=horizon,
            )
            known = self._nodes[name] = (free, engine_node)
        return known[1]

    def _job(self, waiting_remaining: float, job: SimJob) -> Job:
        known = self._jobs.get(job.id)
        if known is None or known[0] != waiting_remaining:
            done = job.duration - waiting_remaining
            self.tiers.setdefault(job.tier, Tier(job.tier, 0))
            self.queues.setdefault(job.queue, Queue(job.queue, cohort=None, flavors=(FLAVOR,)))
            time_limit = max(1, math.ceil(job.time_limit - done))
            if job.request is not None:
                # The portal's own job: as it was asked, on the flavors and clusters the replay left it (its
                # regions are in those), charged to no budget the simulation keeps.
                engine_job = replace(
                    job.request,
                    submitted_at=job.submitted,
                    time_limit=time_limit,
                    flavors=job.flavors,
                    clusters=job.clusters,
                    regions=(),
                    excluded=(),
                    budgets=(),
                )
            else:
                engine_job = Job(
                    id=job.id,
                    queue=job.queue,
                    tier=job.tier,
                    submitted_at=job.submitted,
                    workers=job.workers,
                    accelerators=job.accelerators,
                    accel_milli=job.accel_milli,
                    cpu=job.cpu,
                    memory=job.memory,
                    time_limit=time_limit,
                    flavors=job.flavors,
                    clusters=job.clusters,
                    topology=job.topology,
                    spot=job.spot,
                )
            known = self._jobs[job.id] = (waiting_remaining, engine_job)
        return known[1]

    def recent_use(self, sim: Simulation) -> dict[str, float]:
        """Each queue's recent use now: its ended runs, folded in once (the meter's records), and its running
        ones up to now, valued exactly as the product's meter values usage records."""
        h, now = self.half_life, sim.now
        factor = 2.0 ** (-(now - self._closed_at) / h)
        closed = {queue: amount * factor for queue, amount in self._closed.items()}
        for queue, gpus, start, end in sim.ended[self._seen :]:
            closed[queue] = closed.get(queue, 0.0) + hours(gpus * 1000, start, end, now, h)
        self._closed, self._closed_at, self._seen = closed, now, len(sim.ended)
        recent = dict(closed)
        for run in sim.running.values():
            queue = run.job.queue
            recent[queue] = recent.get(queue, 0.0) + hours(run.job.gpus * 1000, run.started, now, now, h)
        return recent

    def plan(self, sim: Simulation, arrived: Sequence[str]) -> Plan:
        if not sim.waiting and not self._quotas:
            # Nobody waits and no quota is kept: the engine could only admit or preempt for a waiting job (its
            # one other move gives back quota lowered below usage), so the cycle would decide nothing.
            return Plan()
        pending = tuple(self._job(w.remaining, w.job) for w in sim.waiting.values())
        elastic, horizons = sim.elastic(max((j.time_limit for j in pending), default=0)) if sim.pools else ((), {})
        nodes = tuple(self._node(name, s, horizons.get(name, math.inf)) for name, s in sim.nodes.items())
        running = []
        for job_id, run in sim.running.items():
            known = self._workloads.get(job_id)
            stopping = run.stopping_at is not None
            if known is None or known[0] != run.token or known[1] != stopping:
                done = run.job.duration - run.remaining
                workload = Workload(
                    id=job_id,
                    queue=run.job.queue,
                    tier=run.job.tier,
                    cluster=run.cluster,
                    flavor=run.flavor,
                    assignments=run.assignments,
                    admitted_at=run.started,
                    # When it is expected to end: its limit, or the end of its grace period once told to stop.
                    time_limit=(
                        max(1, math.ceil(run.stopping_at - run.started))
                        if run.stopping_at is not None
                        else max(1, math.ceil(run.job.time_limit - done))
                    ),
                    submitted_at=run.job.submitted,
                    evicting=stopping,
                )
                known = self._workloads[job_id] = (run.token, stopping, workload)
            running.append(known[2])
        for job_id in [j for j in self._jobs if j not in sim.waiting]:
            del self._jobs[job_id]
        for job_id in [j for j in self._workloads if j not in sim.running]:
            del self._workloads[job_id]
        if len(self._nodes) > len(sim.nodes):  # elastic nodes gone
            for name in [n for n in self._nodes if n not in sim.nodes]:
                del self._nodes[name]
        decisions = schedule(
            Snapshot(
                now=sim.now,
                clusters=self.clusters,
                nodes=nodes,
                tiers=tuple(self.tiers.values()),
                cohorts=self.cohorts,
                queues=tuple(self.queues.values()),
                running=tuple(running),
                pending=pending,
                config=self.config,
                usage=self.recent_use(sim) if self.half_life else {},
                elastic=elastic,
            )
        )
        return Plan(
            starts=[(a.job, a.assignments) for a in decisions.admissions],
            stops=[(p.workload, float(p.grace_seconds)) for p in decisions.preemptions],
            asks=[(w.pool, w.nodes, w.hold) for w in decisions.wanted],
        )


def policies(
    clusters: Sequence[Cluster],
    max_wait: float = 0.0,
    config: Config | None = None,
    half_life: float = 0.0,
    quotas: Mapping[str, int] | None = None,
) -> dict[str, Callable[[], Policy]]:
    """Each policy by name, as a factory (a policy keeps state through one simulation); ours with ``config``
    (the engine's defaults if None), one tier, ``normal``, whose bound on waiting is ``max_wait`` seconds
    (0: none), each queue's recent use kept with ``half_life`` seconds (0: none), and, with ``quotas``, a queue
    per name holding that many GPUs of nominal quota in one cohort (they lend each other what they leave idle)."""
    tiers = (Tier("normal", 0, max_wait=max_wait),)
    cohorts = (Cohort("fleet"),) if quotas else ()
    queues = tuple(
        Queue(name, "fleet", {(FLAVOR, "accelerator"): Quota(gpus * WHOLE)}, (FLAVOR,))
        for name, gpus in sorted((quotas or {}).items())
    )
    return {
        "fifo": fifo,
        "sjf": sjf,
        "tiresias": Tiresias,
        DEFAULT_POLICY: lambda: Quartermaster(clusters, config, tiers, queues, half_life, cohorts),
    }


POLICY_NAMES = tuple(policies(()))


# ---------------------------------------------------------------------------------- the Philly replay


def philly_fleet(nodes: int, gpus_per_node: Sequence[int]) -> tuple[tuple[Cluster, ...], tuple[Node, ...]]:
    """``nodes`` machines of one virtual cluster, their GPU counts taken in turn from ``gpus_per_node``.
    The trace says nothing of CPU and memory, so neither is asked for (each node gets a nominal 64 cores
    and 512 GiB)."""
    if nodes < 1 or not gpus_per_node or min(gpus_per_node) < 1:
        raise ValueError("a fleet needs at least one node, each with at least one GPU")
    cluster = Cluster(name="philly", region="philly")
    fleet = tuple(
        Node(
            name=f"node-{i:04d}",
            cluster=cluster.name,
            flavor=FLAVOR,
            accel_free=(WHOLE,) * gpus_per_node[i % len(gpus_per_node)],
            cpu_free=64_000,
            memory_free=512 * 1024,
            cpu_capacity=64_000,
            memory_capacity=512 * 1024,
        )
        for i in range(nodes)
    )
    return (cluster,), fleet


#: Time limits users declare, when ``limits="rounded"``: the duration rounded up to one of these (seconds).
LIMIT_STEPS = (3600, 2 * 3600, 4 * 3600, 8 * 3600, 24 * 3600, 3 * 24 * 3600, 7 * 24 * 3600)


def declared_limit(duration: float, limits: str) -> int:
    """A job's time limit: its true duration (``exact``), or that rounded up to a preset that users pick
    from (``rounded``, the next of 1 h, 2 h, 4 h, 8 h, 1 d, 3 d, 7 d, else whole weeks)."""
    exact = max(1, math.ceil(duration))
    if limits == "exact":
        return exact
    if limits != "rounded":
        raise ValueError(f"limits must be 'exact' or 'rounded', not {limits!r}")
    return next((step for step in LIMIT_STEPS if step >= exact), math.ceil(exact / LIMIT_STEPS[-1]) * LIMIT_STEPS[-1])


def gang(gpus: int, node_sizes: Sequence[int]) -> tuple[int, int]:
    """(workers, GPUs per worker) for a gang of ``gpus``: workers as large as the largest node allows and
    dividing the gang evenly (8 GPUs on 2-GPU nodes: 4 workers of 2)."""
    largest = max(node_sizes)
    per = max(d for d in range(1, min(gpus, largest) + 1) if gpus % d == 0)
    return gpus // per, per


def philly_jobs(trace: Sequence[TraceJob], node_sizes: Sequence[int], limits: str = "exact") -> list[SimJob]:
    jobs = []
    for t in trace:
        workers, per = gang(t.gpus, node_sizes)
        jobs.append(
            SimJob(
                id=t.name,
                submitted=t.submitted,
                duration=t.duration,
                workers=workers,
                accelerators=per,
                queue=t.vc,
                time_limit=declared_limit(t.duration, limits),
            )
        )
    return jobs


@dataclass(frozen=True, slots=True)
class Replay:
    """One replay's inputs: a fleet, a workload and how the simulation runs."""

    clusters: tuple[Cluster, ...]
    nodes: tuple[Node, ...]
    jobs: tuple[SimJob, ...]
    outages: tuple[Outage, ...] = ()
    cycle_seconds: float = 60.0
    #: Our policy's bound on waiting (``Tier.max_wait``), in seconds; 0: none.
    max_wait: float = 0.0
    #: Our policy's engine configuration; None: the engine's defaults.
    config: Config | None = None
    #: The half-life of our policy's recent use per queue, in seconds; 0: none kept.
    half_life: float = 0.0
    #: Per queue, the GPUs of nominal quota it holds in one cohort with the others (``policies``); None: no quota.
    quotas: Mapping[str, int] | None = None
    #: Elastic pools beside the fleet (only our policy asks them for nodes), and the seed of spot reclaims.
    pools: tuple[Pool, ...] = ()
    seed: int = 1


def run_jobs(
    replay: Replay,
    names: Sequence[str],
    progress: Callable[[str, int], None] | None = None,
) -> dict[str, object]:
    """Every policy on the replay; the report ``simulate jobs --json`` prints."""
    factories = policies(replay.clusters, replay.max_wait, replay.config, replay.half_life, replay.quotas)
    unknown = [n for n in names if n not in factories]
    if unknown:
        raise ValueError(f"unknown policy {', '.join(unknown)}; choose from {', '.join(factories)}")
    results = {name: _figures(replay, factories[name](), name, progress, replay.pools) for name in names}
    return {"default_policy": DEFAULT_POLICY, **_fleet(replay), "policies": results}


def run_elastic(
    replay: Replay, budgets: Sequence[float | None], progress: Callable[[str, int], None] | None = None
) -> dict[str, object]:
    """Our policy on the fixed fleet alone, then with the replay's pools beside it at each monthly budget (None: no
    limit); the report ``simulate jobs --elastic-budgets`` prints."""
    factory = policies(replay.clusters, replay.max_wait, replay.config, replay.half_life, replay.quotas)[DEFAULT_POLICY]
    runs = [{"budget": "fixed fleet", **_figures(replay, factory(), "fixed fleet", progress, ())}]
    for budget in budgets:
        label = f"{budget:g}" if budget is not None else "no limit"
        pools = tuple(replace(p, monthly_budget=budget) for p in replay.pools)
        runs.append({"budget": label, **_figures(replay, factory(), label, progress, pools)})
    return {**_fleet(replay), "pools": [asdict(p) for p in replay.pools], "runs": runs}


def _fleet(replay: Replay) -> dict[str, object]:
    return {"nodes": len(replay.nodes), "gpus": sum(n.accel_count for n in replay.nodes), "jobs": len(replay.jobs)}


def _figures(
    replay: Replay,
    policy: Policy,
    label: str,
    progress: Callable[[str, int], None] | None,
    pools: Sequence[Pool],
) -> dict[str, object]:
    """One simulation of the replay under ``policy`` with ``pools``: its figures and how long it took."""
    started = time.perf_counter()
    simulation = Simulation(
        replay.clusters,
        replay.nodes,
        replay.jobs,
        policy,
        outages=replay.outages,
        cycle_seconds=replay.cycle_seconds,
        progress=(lambda done: progress(label, done)) if progress else None,
        pools=pools,
        seed=replay.seed,
    )
    figures = simulation.run().figures()
    figures["seconds"] = round(time.perf_counter() - started, 1)
    return figures


def random_outages(
    nodes: Sequence[Node], span: float, mtbf_days: float, repair_hours: float, seed: int
) -> tuple[Outage, ...]:
    """Node failures for a what-if: each node fails after exponentially distributed times with mean
    ``mtbf_days`` and stays down ``repair_hours``; the same seed gives the same failures."""
    if mtbf_days <= 0 or repair_hours <= 0:
        raise ValueError("the mean time between failures and the repair time must be positive")
    rnd = random.Random(seed)
    mtbf, repair = mtbf_days * 86400, repair_hours * 3600
    outages = []
    for node in nodes:
        at = rnd.expovariate(1 / mtbf)
        while at < span:
            outages.append(Outage(node.name, at, at + repair))
            at += repair + rnd.expovariate(1 / mtbf)
    return tuple(outages)
