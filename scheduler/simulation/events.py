"""A deterministic discrete-event simulator: a fleet, a stream of jobs and a scheduling policy.

Time jumps from event to event. The events, and what each does:

- **submit**: the job joins the waiting jobs;
- **cycle**: the policy looks at the fleet, the running and the waiting jobs and returns a ``Plan``: jobs
  to start (with their placement) and running jobs to stop (with a grace period);
- **finish**: a running job's work is done; its resources free up;
- **preemption completes**: a stopped job's grace period ends; it frees its resources and waits again,
  resuming from where it stopped (it checkpoints when told to stop);
- **node failure** and **recovery**: a failed node's jobs lose the work since their last periodic
  checkpoint and wait again; the node takes no work until it recovers;
- **elastic nodes up**, **released** and **reclaimed** (``pools.py``): nodes a policy asked of an elastic pool
  (``Plan.asks``) join the fleet after the pool's lead time; one idle for the pool's ``idle_release`` leaves it; a
  spot node is reclaimed at random: it takes no new work, its jobs are told to stop with the pool's notice as their
  grace period (they checkpoint, as for a preemption, and wait again) and it leaves when the notice ends.

A cycle runs after anything that changed the fleet or the queue, but not more often than once every
``cycle_seconds``, as a production placement loop would (it runs on a beat and on submit); a policy can
also ask to be woken at a time of its choosing (``Plan.wake_at``). Events at the same time are handled
in a fixed order (recoveries and nodes up, finishes, completed preemptions, nodes gone, failures and reclaims,
releases, submissions, then the cycle), ties by the order they were made, so a run is a pure function of its
inputs (a spot pool's reclaims come from a seeded generator).

The simulator checks every plan against the free resources and refuses one that double-books a node
(``SimulationError``): a policy cannot cheat, and a test can rely on it.

A fleet is the engine's ``Cluster`` and ``Node`` values (each node's ``accel_free`` is its capacity), a
workload is a list of ``SimJob``; where they come from (a trace, the database, a what-if) is the caller's
business.

Size: one event loop, its handlers and the checks that keep a policy honest, over one state (nodes, runs, the
waiting, the pools' nodes); the pools' money is in ``pools.py``, the policies in ``jobs.py``. Split further, the
handlers would share that state across modules.
"""

from __future__ import annotations

import heapq
import math
import random
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from enum import IntEnum
from typing import Protocol

import numpy as np

from scheduler.engine.model import WHOLE, Assignment, Cluster, Elastic, Job, Node, Topology

from .pools import Account, Pool


class SimulationError(RuntimeError):
    """A policy asked for something impossible: to start a job on resources that are not free, to start a
    job that is not waiting, or to stop one that is not running."""


@dataclass(frozen=True, slots=True)
class SimJob:
    """A job to replay: ``workers`` identical workers, started all together, that run ``duration`` seconds."""

    id: str
    submitted: float
    duration: float
    workers: int = 1
    accelerators: int = 1  # per worker
    accel_milli: int = WHOLE
    cpu: int = 0  # millicores per worker
    memory: int = 0  # MiB per worker
    queue: str = "default"
    tier: str = "normal"
    #: What the job's owner declared it needs at most, in seconds (backfill plans with it); at least 1.
    time_limit: int = 0
    #: Where it may run: accelerator types (flavors) and clusters it accepts, empty meaning any; all workers in
    #: one domain of a topology level. The engine's policy honours all three, the baselines the first two;
    #: ``fits_empty`` judges flavors and clusters (a topology it cannot meet leaves the job stuck instead).
    flavors: tuple[str, ...] = ()
    clusters: tuple[str, ...] = ()
    topology: Topology | None = None
    #: The engine's view of the job as it was asked for, when it is one of the portal's own (``of``): the
    #: Quartermaster policy plans with all of it (price limit, preemptibility, owner, Ray head, TPU shape, team,
    #: spread group). None for a trace's job, which the fields above describe whole.
    request: Job | None = None
    #: It accepts spot capacity (a spot pool's nodes), being preemptible.
    spot: bool = False

    def __post_init__(self) -> None:
        if self.time_limit <= 0:
            object.__setattr__(self, "time_limit", max(1, math.ceil(self.duration)))

    @classmethod
    def of(
        cls, request: Job, submitted: float, duration: float, flavors: tuple[str, ...], clusters: tuple[str, ...]
    ) -> SimJob:
        """The job ``request`` (``scheduler.placement.jobs.engine_job``) to replay from ``submitted`` for
        ``duration`` seconds, on those of ``flavors`` and ``clusters`` (empty: any) it may use."""
        return cls(
            id=request.id,
            submitted=submitted,
            duration=duration,
            workers=request.workers,
            accelerators=request.accelerators,
            accel_milli=request.accel_milli,
            cpu=request.cpu,
            memory=request.memory,
            queue=request.queue,
            tier=request.tier,
            time_limit=max(1, request.time_limit),
            flavors=flavors,
            clusters=clusters,
            topology=request.topology,
            request=request,
            spot=request.spot,
        )

    @property
    def gpus(self) -> float:
        return self.workers * self.accelerators * self.accel_milli / WHOLE


@dataclass(frozen=True, slots=True)
class Outage:
    """Node ``node`` fails at ``at`` and recovers at ``until``."""

    node: str
    at: float
    until: float


@dataclass(slots=True)
class Run:
    """A job while it holds resources (from start until it finishes or its preemption completes)."""

    job: SimJob
    assignments: tuple[Assignment, ...]
    cluster: str
    flavor: str
    started: float
    remaining: float  # work left when this run started, in seconds
    token: int  # tells this run's finish event from a stale one
    stopping_at: float | None = None  # when told to stop: the end of its grace period


@dataclass(slots=True)
class Waiting:
    job: SimJob
    remaining: float
    since: float


@dataclass(frozen=True, slots=True)
class Plan:
    """A policy's decisions for one cycle. A stop with grace 0 frees its resources before the starts."""

    starts: Sequence[tuple[str, tuple[Assignment, ...]]] = ()
    stops: Sequence[tuple[str, float]] = ()
    wake_at: float | None = None
    #: Nodes to ask of elastic pools: (pool, how many, how long each is held once up: ``Want.hold``).
    asks: Sequence[tuple[str, int, float]] = ()


class Policy(Protocol):
    name: str

    def plan(self, sim: Simulation, arrived: Sequence[str]) -> Plan:
        """Decide, given the simulation as it is now; ``arrived``: jobs that started waiting since the last
        cycle (submitted, preempted or failed), in that order."""
        ...


class Event(IntEnum):
    """Kinds of event, in the order they are handled when they happen at the same time."""

    RECOVER = 0
    UP = 1
    FINISH = 2
    STOPPED = 3
    GONE = 4
    FAIL = 5
    RECLAIM = 6
    RELEASE = 7
    SUBMIT = 8
    CYCLE = 9


@dataclass(slots=True)
class NodeState:
    node: Node  # the node as built, free = capacity
    accel_free: list[int]
    cpu_free: int
    memory_free: int
    up: bool = True
    pool: str = ""  # the elastic pool it belongs to, if any
    runs: int = 0  # runs on it now
    idle_token: int = 0  # moves on with each start: tells a release check from a stale one
    idle_since: float = 0.0  # when its last run ended (or it came up)
    going: bool = False  # a spot node being taken back: it leaves when the notice ends, not before

    @property
    def whole_free(self) -> int:
        return sum(1 for milli in self.accel_free if milli == WHOLE)


@dataclass(slots=True)
class JobRecord:
    job: SimJob
    waited: float = 0.0
    first_start: float | None = None
    finished: float | None = None
    attained: float = 0.0  # accelerator-seconds run so far, lost work included
    preempted: int = 0
    failed: int = 0
    reclaimed: int = 0  # stopped because its spot node was taken back


@dataclass(slots=True)
class Outcome:
    """What happened to every job, and how the fleet was used."""

    records: dict[str, JobRecord]
    never_fits: list[str]  # jobs no node set of the fleet could ever hold
    gpus: float
    busy_gpu_seconds: float
    cycles: int
    stuck: list[str] = field(default_factory=list)  # still waiting when the events ran out
    #: Per elastic pool: its nodes and their cost (``pools.Account.figures``).
    pools: dict[str, dict[str, float]] = field(default_factory=dict)
    #: Accelerator-seconds of elastic nodes in the fleet (they add to its capacity while up).
    elastic_gpu_seconds: float = 0.0

    def figures(self) -> dict[str, object]:
        done = [r for r in self.records.values() if r.finished is not None]
        if not done:
            return {"jobs": 0, "never_fits": len(self.never_fits), "stuck": len(self.stuck)}
        jct = np.array([r.finished - r.job.submitted for r in done if r.finished is not None])
        wait = np.array([r.waited for r in done])
        start = min(r.job.submitted for r in done)
        makespan = max(r.finished for r in done if r.finished is not None) - start
        capacity = self.gpus * makespan + self.elastic_gpu_seconds
        figures: dict[str, object] = {
            "jobs": len(done),
            "avg_jct_s": round(float(jct.mean()), 1),
            "p50_jct_s": round(float(np.percentile(jct, 50)), 1),
            "p99_jct_s": round(float(np.percentile(jct, 99)), 1),
            "avg_wait_s": round(float(wait.mean()), 1),
            "p95_wait_s": round(float(np.percentile(wait, 95)), 1),
            "p99_wait_s": round(float(np.percentile(wait, 99)), 1),
            "max_wait_s": round(float(wait.max()), 1),
            "makespan_s": round(makespan, 1),
            "gpu_utilization": round(self.busy_gpu_seconds / capacity, 4) if capacity > 0 else 0.0,
            "preemptions": sum(r.preempted for r in done),
            "failures": sum(r.failed for r in done),
            "cycles": self.cycles,
            "never_fits": len(self.never_fits),
            "stuck": len(self.stuck),
            "by_gpus": by_size(done),
            "by_queue": by_queue(done),
        }
        if self.pools:
            figures["pools"] = self.pools
            figures["elastic_cost"] = round(sum(p["cost"] for p in self.pools.values()), 2)
            figures["reclaims"] = sum(r.reclaimed for r in done)
        return figures


#: Job sizes the report breaks waits down by, so that starved large gangs show.
SIZES = (("1", 0, 1), ("2-4", 1, 4), ("5-8", 4, 8), ("9+", 8, math.inf))


def by_size(done: Sequence[JobRecord]) -> dict[str, dict[str, float]]:
    sizes: dict[str, dict[str, float]] = {}
    for label, low, high in SIZES:
        group = [r for r in done if low < r.job.gpus <= high]
        if group:
            waits = np.array([r.waited for r in group])
            sizes[label] = {
                "jobs": len(group),
                "avg_wait_s": round(float(waits.mean()), 1),
                "max_wait_s": round(float(waits.max()), 1),
            }
    return sizes


def by_queue(done: Sequence[JobRecord]) -> dict[str, dict[str, float]]:
    """Per queue (a Philly virtual cluster, a team): its jobs' average completion time and wait."""
    queues: dict[str, dict[str, float]] = {}
    for queue in sorted({r.job.queue for r in done}):
        group = [r for r in done if r.job.queue == queue]
        jct = np.array([r.finished - r.job.submitted for r in group if r.finished is not None])
        waits = np.array([r.waited for r in group])
        queues[queue] = {
            "jobs": len(group),
            "avg_jct_s": round(float(jct.mean()), 1),
            "avg_wait_s": round(float(waits.mean()), 1),
            "max_wait_s": round(float(waits.max()), 1),
        }
    return queues


def may_use(node: Node, job: SimJob) -> bool:
    """Whether the job accepts the node's flavor and cluster."""
    return (not job.flavors or node.flavor in job.flavors) and (not job.clusters or node.cluster in job.clusters)


def fits_empty(nodes: Sequence[Node], job: SimJob) -> bool:
    """Whether the fleet, empty and healthy, could hold all of the job's workers at once (on nodes it accepts)."""
    per = job.accelerators if job.accel_milli == WHOLE else 1
    workers = 0
    for node in nodes:
        if (job.flavors or job.clusters) and not may_use(node, job):
            continue
        by_accel = node.accel_count // per if per else job.workers
        by_cpu = node.cpu_capacity // job.cpu if job.cpu else job.workers
        by_memory = node.memory_capacity // job.memory if job.memory else job.workers
        workers += min(by_accel, by_cpu, by_memory)
    return workers >= job.workers


class Simulation:
    def __init__(
        self,
        clusters: Sequence[Cluster],
        nodes: Sequence[Node],
        jobs: Iterable[SimJob],
        policy: Policy,
        *,
        outages: Iterable[Outage] = (),
        cycle_seconds: float = 60.0,
        checkpoint_seconds: float = 3600.0,
        progress: Callable[[int], None] | None = None,
        keep_runs: bool = False,
        pools: Sequence[Pool] = (),
        seed: int = 1,
    ) -> None:
        self.clusters = tuple(clusters)
        self.policy = policy
        self.cycle_seconds = cycle_seconds
        self.checkpoint_seconds = checkpoint_seconds
        self.progress = progress
        self.nodes = {n.name: NodeState(n, list(n.accel_free), n.cpu_free, n.memory_free) for n in nodes}
        self.now = 0.0
        self.running: dict[str, Run] = {}
        self.waiting: dict[str, Waiting] = {}
        self.records: dict[str, JobRecord] = {}
        self._events: list[tuple[float, int, int, str, int]] = []
        self._seq = 0
        self._arrived: list[str] = []
        self._next_cycle = math.inf
        self._last_cycle = -math.inf
        self._busy = 0.0  # accelerator-seconds of finished runs
        self._cycles = 0
        self._finished = 0
        #: With ``keep_runs``: every run once it ended, as (start, end, accelerators, cluster, flavor), so a
        #: caller can measure use over a window of its choosing, by flavor or by day.
        self.runs: list[tuple[float, float, float, str, str]] | None = [] if keep_runs else None
        #: Every run once it ended, as (queue, accelerators, start, end): the simulation's meter, from which a
        #: policy keeps each queue's recent use (``jobs.Quartermaster``).
        self.ended: list[tuple[str, float, float, float]] = []
        self.never_fits: list[str] = []
        self.pools = {p.name: Account(p) for p in pools}
        if len(self.pools) != len(pools) or any(p.cluster not in {c.name for c in self.clusters} for p in pools):
            raise SimulationError("each elastic pool needs a name of its own and a cluster of the fleet")
        self._reclaims = random.Random(seed)
        self._reclaiming: set[str] = set()  # jobs told to stop because their spot node is being taken back
        # A job fits if the fleet could hold it with every pool at its maximum.
        fleet = [*nodes, *(p.node(f"{p.name}-{k}") for p in pools for k in range(p.max_nodes))]
        fits: dict[tuple[object, ...], bool] = {}  # by shape: a long history repeats a few shapes many times
        for job in jobs:
            if job.id in self.records:
                raise SimulationError(f"job {job.id} appears twice")
            shape = (job.workers, job.accelerators, job.accel_milli, job.cpu, job.memory, job.flavors, job.clusters)
            if shape not in fits:
                fits[shape] = fits_empty(fleet, job)
            if not fits[shape]:
                self.never_fits.append(job.id)
                continue
            self.records[job.id] = JobRecord(job)
            self._push(job.submitted, Event.SUBMIT, job.id)
        for outage in outages:
            if outage.node not in self.nodes:
                raise SimulationError(f"outage of unknown node {outage.node}")
            if outage.until <= outage.at:
                raise SimulationError(f"outage of {outage.node} must end after it starts")
            self._push(outage.at, Event.FAIL, outage.node)
            self._push(outage.until, Event.RECOVER, outage.node)
        self.gpus = sum(n.accel_count for n in nodes)

    # ------------------------------------------------------------------------------------------ the loop

    def _push(self, at: float, kind: Event, key: str, token: int = 0) -> None:
        self._seq += 1
        heapq.heappush(self._events, (at, kind, self._seq, key, token))

    def _want_cycle(self, at: float) -> None:
        at = max(at, self._last_cycle + self.cycle_seconds)
        if at < self._next_cycle:
            self._next_cycle = at
            self._push(at, Event.CYCLE, "")

    def run(self) -> Outcome:
        events, handlers = (
            self._events,
            {
                Event.SUBMIT: self._submit,
                Event.FINISH: self._finish,
                Event.STOPPED: self._stopped,
                Event.FAIL: self._fail,
                Event.RECOVER: self._recover,
                Event.UP: self._up,
                Event.RELEASE: self._release_idle,
                Event.RECLAIM: self._reclaim,
                Event.GONE: self._gone,
            },
        )
        while events:
            at, kind, _, key, token = heapq.heappop(events)
            self.now = at
            if kind == Event.CYCLE:
                if at == self._next_cycle:
                    self._next_cycle = math.inf
                    self._cycle()
                continue
            if handlers[Event(kind)](key, token):
                self._want_cycle(at)
        stuck = sorted(self.waiting)
        elastic = sum((g - s) * a.pool.accelerators for a in self.pools.values() for s, g in a.spans) + sum(
            (self.now - s) * a.pool.accelerators for a in self.pools.values() for s in a.up.values()
        )
        pools = {name: a.figures(self.now) for name, a in self.pools.items()}
        return Outcome(self.records, self.never_fits, self.gpus, self._busy, self._cycles, stuck, pools, elastic)

    def _cycle(self) -> None:
        self._cycles += 1
        self._last_cycle = self.now
        arrived, self._arrived = self._arrived, []
        plan = self.policy.plan(self, arrived)
        for job_id, grace in plan.stops:
            self._stop(job_id, grace)
        for job_id, assignments in plan.starts:
            self._start(job_id, assignments)
        for pool, count, hold in plan.asks:
            account = self.pools.get(pool)
            if account is None:
                raise SimulationError(f"no elastic pool {pool}")
            try:
                self._push(account.ask(count, self.now, hold), Event.UP, pool)
            except ValueError as error:
                raise SimulationError(str(error)) from None
        if plan.wake_at is not None and plan.wake_at > self.now:
            self._want_cycle(plan.wake_at)

    # ---------------------------------------------------------------------------------------- the events

    def _wait(self, job: SimJob, remaining: float) -> None:
        self.waiting[job.id] = Waiting(job, remaining, self.now)
        self._arrived.append(job.id)

    def _submit(self, job_id: str, _: int) -> bool:
        job = self.records[job_id].job
        self._wait(job, job.duration)
        return True

    def _finish(self, job_id: str, token: int) -> bool:
        run = self.running.get(job_id)
        if run is None or run.token != token:
            return False  # the run was stopped or failed before this
        self._release(run)
        self.records[job_id].finished = self.now
        self._finished += 1
        if self.progress:
            self.progress(self._finished)
        return True

    def _stopped(self, job_id: str, token: int) -> bool:
        run = self.running.get(job_id)
        if run is None or run.token != token:
            return False  # finished or failed during the grace period
        self._release(run)
        record = self.records[job_id]
        if job_id in self._reclaiming:
            self._reclaiming.discard(job_id)
            record.reclaimed += 1
        else:
            record.preempted += 1
        self._wait(run.job, run.remaining - (self.now - run.started))
        return True

    def _fail(self, name: str, _: int) -> bool:
        self.nodes[name].up = False
        self._lose(name)
        return True

    def _lose(self, name: str) -> None:
        """The node's runs end: each loses the work since its last periodic checkpoint and waits again."""
        for run in [r for r in self.running.values() if any(a.node == name for a in r.assignments)]:
            self._release(run)
            done = self.now - run.started
            kept = math.floor(done / self.checkpoint_seconds) * self.checkpoint_seconds
            self.records[run.job.id].failed += 1
            self._reclaiming.discard(run.job.id)
            self._wait(run.job, run.remaining - kept)

    def _recover(self, name: str, _: int) -> bool:
        self.nodes[name].up = True
        return True

    def _up(self, pool: str, _: int) -> bool:
        account = self.pools[pool]
        spec = account.pool
        for name in account.arrive(self.now):
            node = spec.node(name)
            self.nodes[name] = NodeState(
                node, list(node.accel_free), node.cpu_free, node.memory_free, pool=pool, idle_since=self.now
            )
            self._push(self.now + spec.idle_release, Event.RELEASE, name)
            if spec.reclaims_per_day > 0:
                self._push(self.now + self._reclaims.expovariate(spec.reclaims_per_day / 86400), Event.RECLAIM, name)
        return True

    def _release_idle(self, name: str, token: int) -> bool:
        state = self.nodes.get(name)
        if state is None or state.runs or token != state.idle_token or state.going:
            return False  # gone, or it took work since, or it is being taken back
        del self.nodes[name]
        self.pools[state.pool].gone(name, self.now)
        return False

    def _reclaim(self, name: str, _: int) -> bool:
        state = self.nodes.get(name)
        if state is None:
            return False  # released before
        state.up, state.going = False, True
        notice = self.pools[state.pool].pool.notice
        for run in [r for r in self.running.values() if any(a.node == name for a in r.assignments)]:
            if run.stopping_at is None or run.stopping_at > self.now + notice:
                run.stopping_at = None  # a longer grace period is cut to the notice
                self._reclaiming.add(run.job.id)
                self._stop(run.job.id, notice)
        self._push(self.now + notice, Event.GONE, name)
        return True

    def _gone(self, name: str, _: int) -> bool:
        self._lose(name)  # none, unless a run outlived the notice
        state = self.nodes.pop(name)
        self.pools[state.pool].gone(name, self.now, reclaimed=True)
        return True

    # --------------------------------------------------------------------------------- applying a plan

    def _start(self, job_id: str, assignments: tuple[Assignment, ...]) -> None:
        waiting = self.waiting.get(job_id)
        if waiting is None:
            raise SimulationError(f"cannot start {job_id}: it is not waiting")
        job = waiting.job
        workers = sum(a.workers for a in assignments)
        if workers != job.workers:
            raise SimulationError(f"cannot start {job_id}: {workers} workers placed, it has {job.workers}")
        for a in assignments:
            state = self.nodes.get(a.node)
            if state is None or not state.up:
                raise SimulationError(f"cannot start {job_id} on {a.node}: the node is down or unknown")
            milli = sum(m for _, m in a.accels)
            if milli != a.workers * job.accelerators * job.accel_milli:
                raise SimulationError(f"cannot start {job_id}: {milli} milli on {a.node} is not what it asks")
            if a.cpu > state.cpu_free or a.memory > state.memory_free:
                raise SimulationError(f"cannot start {job_id}: {a.node} has not the CPU or memory free")
            for slot, m in a.accels:
                if state.accel_free[slot] < m:
                    raise SimulationError(f"cannot start {job_id}: accelerator {slot} of {a.node} is not free")
                state.accel_free[slot] -= m
            state.cpu_free -= a.cpu
            state.memory_free -= a.memory
            state.runs += 1
            state.idle_token += 1
        del self.waiting[job_id]
        record = self.records[job_id]
        record.waited += self.now - waiting.since
        if record.first_start is None:
            record.first_start = self.now
        node = self.nodes[assignments[0].node].node
        self._seq += 1
        run = Run(job, assignments, node.cluster, node.flavor, self.now, waiting.remaining, self._seq)
        self.running[job_id] = run
        self._push(self.now + waiting.remaining, Event.FINISH, job_id, run.token)

    def _stop(self, job_id: str, grace: float) -> None:
        run = self.running.get(job_id)
        if run is None or run.stopping_at is not None:
            raise SimulationError(f"cannot stop {job_id}: it is not running, or already stopping")
        run.stopping_at = self.now + grace
        if grace <= 0:
            self._stopped(job_id, run.token)
        else:
            self._push(run.stopping_at, Event.STOPPED, job_id, run.token)

    def _release(self, run: Run) -> None:
        del self.running[run.job.id]
        for a in run.assignments:
            state = self.nodes[a.node]
            for slot, m in a.accels:
                state.accel_free[slot] += m
            state.cpu_free += a.cpu
            state.memory_free += a.memory
            state.runs -= 1
            if state.pool and not state.runs:
                state.idle_since = self.now
                self._push(self.now + self.pools[state.pool].pool.idle_release, Event.RELEASE, a.node, state.idle_token)
        ran = (self.now - run.started) * run.job.gpus
        self._busy += ran
        if self.runs is not None:
            self.runs.append((run.started, self.now, run.job.gpus, run.cluster, run.flavor))
        self.ended.append((run.job.queue, run.job.gpus, run.started, self.now))
        self.records[run.job.id].attained += ran

    # ------------------------------------------------------------------------------------ for policies

    def elastic(self, longest: float) -> tuple[tuple[Elastic, ...], dict[str, float]]:
        """The elastic pools as the engine reads them now, and how long new work may run on each of their nodes
        (``longest``: the longest time limit of the work waiting)."""
        if not self.pools:
            return (), {}
        ends: dict[str, float] = {}  # per pool node with work: when its work's time limits end
        for run in self.running.values():
            if run.stopping_at is not None:
                end = run.stopping_at
            else:
                end = run.started + max(1, math.ceil(run.job.time_limit - (run.job.duration - run.remaining)))
            for a in run.assignments:
                if self.nodes[a.node].pool:
                    ends[a.node] = max(ends.get(a.node, end), end)
        specs, reach = [], {}
        for _name, account in self.pools.items():
            idle = account.pool.idle_release
            held = {n: ends.get(n, self.nodes[n].idle_since) + idle for n in account.up}
            spec, horizons = account.engine(self.now, held, longest)
            specs.append(spec)
            reach.update(horizons)
        return tuple(specs), reach

    def attained(self, job_id: str) -> float:
        """Accelerator-seconds the job has run so far, including the current run."""
        record = self.records[job_id]
        run = self.running.get(job_id)
        return record.attained + ((self.now - run.started) * run.job.gpus if run else 0.0)
