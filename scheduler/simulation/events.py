"""A deterministic discrete-event simulator: a fleet, a stream of jobs and a scheduling policy.

Time jumps from event to event. The events, and what each does:

- **submit**: the job joins the waiting jobs;
- **cycle**: the policy looks at the fleet, the running and the waiting jobs and returns a ``Plan``: jobs
  to start (with their placement) and running jobs to stop (with a grace period);
- **finish**: a running job's work is done; its resources free up;
- **preemption completes**: a stopped job's grace period ends; it frees its resources and waits again,
  resuming from where it stopped (it checkpoints when told to stop);
- **node failure** and **recovery**: a failed node's jobs lose the work since their last periodic
  checkpoint and wait again; the node takes no work until it recovers.

A cycle runs after anything that changed the fleet or the queue, but not more often than once every
``cycle_seconds``, as a production placement loop would (it runs on a beat and on submit); a policy can
also ask to be woken at a time of its choosing (``Plan.wake_at``). Events at the same time are handled
in a fixed order (recoveries, finishes, completed preemptions, failures, submissions, then the cycle),
ties by the order they were made, so a run is a pure function of its inputs.

The simulator checks every plan against the free resources and refuses one that double-books a node
(``SimulationError``): a policy cannot cheat, and a test can rely on it.

A fleet is the engine's ``Cluster`` and ``Node`` values (each node's ``accel_free`` is its capacity), a
workload is a list of ``SimJob``; where they come from (a trace, the database, a what-if) is the caller's
business.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from enum import IntEnum
from typing import Protocol

import numpy as np

from scheduler.engine.model import WHOLE, Assignment, Cluster, Job, Node, Topology


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


class Policy(Protocol):
    name: str

    def plan(self, sim: Simulation, arrived: Sequence[str]) -> Plan:
        """Decide, given the simulation as it is now; ``arrived``: jobs that started waiting since the last
        cycle (submitted, preempted or failed), in that order."""
        ...


class Event(IntEnum):
    """Kinds of event, in the order they are handled when they happen at the same time."""

    RECOVER = 0
    FINISH = 1
    STOPPED = 2
    FAIL = 3
    SUBMIT = 4
    CYCLE = 5


@dataclass(slots=True)
class NodeState:
    node: Node  # the node as built, free = capacity
    accel_free: list[int]
    cpu_free: int
    memory_free: int
    up: bool = True

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


@dataclass(slots=True)
class Outcome:
    """What happened to every job, and how the fleet was used."""

    records: dict[str, JobRecord]
    never_fits: list[str]  # jobs no node set of the fleet could ever hold
    gpus: float
    busy_gpu_seconds: float
    cycles: int
    stuck: list[str] = field(default_factory=list)  # still waiting when the events ran out

    def figures(self) -> dict[str, object]:
        done = [r for r in self.records.values() if r.finished is not None]
        if not done:
            return {"jobs": 0, "never_fits": len(self.never_fits), "stuck": len(self.stuck)}
        jct = np.array([r.finished - r.job.submitted for r in done if r.finished is not None])
        wait = np.array([r.waited for r in done])
        start = min(r.job.submitted for r in done)
        makespan = max(r.finished for r in done if r.finished is not None) - start
        return {
            "jobs": len(done),
            "avg_jct_s": round(float(jct.mean()), 1),
            "p50_jct_s": round(float(np.percentile(jct, 50)), 1),
            "p99_jct_s": round(float(np.percentile(jct, 99)), 1),
            "avg_wait_s": round(float(wait.mean()), 1),
            "p99_wait_s": round(float(np.percentile(wait, 99)), 1),
            "max_wait_s": round(float(wait.max()), 1),
            "makespan_s": round(makespan, 1),
            "gpu_utilization": round(self.busy_gpu_seconds / (self.gpus * makespan), 4) if makespan > 0 else 0.0,
            "preemptions": sum(r.preempted for r in done),
            "failures": sum(r.failed for r in done),
            "cycles": self.cycles,
            "never_fits": len(self.never_fits),
            "stuck": len(self.stuck),
            "by_gpus": by_size(done),
            "by_queue": by_queue(done),
        }


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
        fits: dict[tuple[object, ...], bool] = {}  # by shape: a long history repeats a few shapes many times
        for job in jobs:
            if job.id in self.records:
                raise SimulationError(f"job {job.id} appears twice")
            shape = (job.workers, job.accelerators, job.accel_milli, job.cpu, job.memory, job.flavors, job.clusters)
            if shape not in fits:
                fits[shape] = fits_empty(nodes, job)
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
        return Outcome(self.records, self.never_fits, self.gpus, self._busy, self._cycles, stuck)

    def _cycle(self) -> None:
        self._cycles += 1
        self._last_cycle = self.now
        arrived, self._arrived = self._arrived, []
        plan = self.policy.plan(self, arrived)
        for job_id, grace in plan.stops:
            self._stop(job_id, grace)
        for job_id, assignments in plan.starts:
            self._start(job_id, assignments)
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
        self.records[job_id].preempted += 1
        self._wait(run.job, run.remaining - (self.now - run.started))
        return True

    def _fail(self, name: str, _: int) -> bool:
        state = self.nodes[name]
        state.up = False
        for run in [r for r in self.running.values() if any(a.node == name for a in r.assignments)]:
            self._release(run)
            done = self.now - run.started
            kept = math.floor(done / self.checkpoint_seconds) * self.checkpoint_seconds
            self.records[run.job.id].failed += 1
            self._wait(run.job, run.remaining - kept)
        return True

    def _recover(self, name: str, _: int) -> bool:
        self.nodes[name].up = True
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
        ran = (self.now - run.started) * run.job.gpus
        self._busy += ran
        if self.runs is not None:
            self.runs.append((run.started, self.now, run.job.gpus, run.cluster, run.flavor))
        self.ended.append((run.job.queue, run.job.gpus, run.started, self.now))
        self.records[run.job.id].attained += ran

    # ------------------------------------------------------------------------------------ for policies

    def attained(self, job_id: str) -> float:
        """Accelerator-seconds the job has run so far, including the current run."""
        record = self.records[job_id]
        run = self.running.get(job_id)
        return record.attained + ((self.now - run.started) * run.job.gpus if run else 0.0)
