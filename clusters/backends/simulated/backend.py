"""A simulated cluster: the fleet of ``fleet.py``, and the cluster-side state a real cluster would keep
(cordoned and down nodes, submitted jobs).

That state lives in a JSON file when ``options["state_file"]`` names one (so the web process, the workers
and beat see the same simulated cluster; writes take an exclusive lock and replace the file whole), else
in this process's memory, per endpoint. Jobs run for ``options["job_seconds"]`` (default: their time limit,
at most 10 minutes), or for the seconds a job's environment gives as ``SIM_RUN_SECONDS`` (the demo's
background work: jobs that end before their limit), and then succeed.

The inventory counts what the simulated jobs hold, as a real cluster's does: a node reports in use the
accelerators, CPU and memory of the running jobs' workers on it, beside the background load ``busy``. Ended
jobs are kept ``KEEP_ENDED_SECONDS`` (their status and output stay readable), at most ``KEEP_ENDED`` of them,
then forgotten at the next submission, so the state stays small however long a demo runs.

Options: ``profile`` (see ``fleet.PROFILES``), ``nodes`` (how many), ``seed``, ``busy`` (average share of
accelerators in use by work Quartermaster does not know of, for demos), ``down`` (node names the cluster
reports not ready), ``state_file``, ``job_seconds``, ``checkpoint_seconds`` (how long a signalled job takes
to checkpoint and exit), ``runs`` (what it runs, as ``clusters.capabilities`` reads it: a job it cannot run
is ``InvalidJob``).

**Fault injection**, so that tests drive every failure through the real dispatch code. A fault is stored in
the cluster's state (memory or state file), so the web process, the workers and the tests all see it;
``inject(endpoint, fault, state_file=..., **params)`` sets one, ``clear(endpoint, state_file=...)`` removes
them (or the methods of the same names on the backend). The faults:

| fault | params | effect |
|---|---|---|
| ``submit_refused`` | ``message`` | ``submit`` raises ``InvalidJob(message)``, until cleared |
| ``submit_error`` | ``times`` (1), ``message`` | the next ``times`` submissions raise ``Unreachable`` |
| ``unreachable`` | | every call raises ``Unreachable``, until cleared |
| ``unhealthy`` | ``node``, ``check``, ``message``, ``until`` | ``health`` fails ``check`` on ``node`` till ``until`` |
| ``exit_code`` | ``code`` (1), ``after`` (0 s) | jobs submitted now fail ``after`` seconds in: ``Failure.EXIT_CODE`` |
| ``oom`` | ``after`` (0 s) | jobs submitted now are OOM-killed ``after`` seconds in (exit code 137) |
| ``node_lost`` | ``after`` (0 s) | jobs submitted now lose a node ``after`` seconds in: ``Failure.NODE_LOST`` |
| ``image_pull`` | ``message`` | jobs submitted now stay pending: ``Failure.IMAGE_PULL`` |
| ``partial_gang`` | ``running`` (1) | jobs submitted now stay pending, ``running`` workers up: ``UNSCHEDULABLE`` |
| ``ignore_sigterm`` | | jobs submitted now ignore ``signal``: they run on until cancelled |
| ``checkpoint_seconds`` | ``seconds`` | jobs submitted now exit that long after ``signal`` (the option, per job) |
| ``stockout`` | ``left`` (0) | ``provision`` gives at most ``left`` more nodes, then refuses (out of stock) |

``until`` is seconds since the epoch (0: until cleared). A job fault applies to every job submitted while
it is set, or only to the job whose id is ``job`` when that parameter is given; it stays with the job once
submitted (clearing it changes only later jobs). Jobs report ``workers_running``: all their workers while
running, none while pending or ended.

**A simulated cloud** (``provision``, ``release``): nodes asked for an elastic pool join the cluster's fleet
(named ``<prefix>-<pool>-<n>``, of the profile's shape, labelled with the pool and its capacity type) and report
ready ``lead_time`` seconds after they were asked for; released, they leave it. They are kept in the cluster's
state, like its jobs.

**Output** (``logs``): each worker's lines are made up from what the simulation knows of the job, and only
that: when it was submitted, the node the worker started on, its progress through its run time (a line
every tenth of it), a signal and its checkpoint, and how it ended (the exit code, an OOM kill, the node
lost, a cancellation). They grow as the job runs and are complete once it has ended.

**Service replicas run for real** (kind ``service``; ``replicas.py``): ``submit`` starts the replica's script
(``clusters/backends/slurm/service.py``, the one Slurm runs) with ``/bin/sh`` on this machine, bound to
127.0.0.1, as a process group of its own; the cluster's state keeps its process, and ``status`` reads whether it
lives (its exit code: succeeded or failed). ``cancel``, ``drain`` and ``signal`` stop it (SIGTERM to its group;
a cancel kills what is left after ``replicas.GRACE`` seconds). Its output is its real output. The inventory
counts it like any simulated job. Job faults do not apply to a replica; cluster faults do.
"""

from __future__ import annotations

import fcntl
import io
import json
import os
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from clusters import capabilities
from clusters.backends.base import (
    LOG_LIMIT,
    Backend,
    BackendError,
    BadResponse,
    DryRun,
    Failure,
    HealthSignal,
    InvalidJob,
    Inventory,
    JobSpec,
    JobState,
    JobStatus,
    LogChunk,
    NotFound,
    Provisioned,
    Refused,
    Unreachable,
)
from clusters.backends.logpages import read_page, text

from . import fleet, replicas

_MEMORY: dict[str, dict[str, Any]] = {}
#: How long an ended job is kept in the state, and at most how many ended jobs are kept.
KEEP_ENDED_SECONDS = 3600.0
KEEP_ENDED = 500
#: A job's own run time, in seconds, from its environment (shorter than the cluster's ``job_seconds``).
RUN_SECONDS_ENV = "SIM_RUN_SECONDS"

#: Faults of the cluster itself, and faults given to the jobs submitted while they are set (the module
#: docstring's table), with their parameters' defaults.
CLUSTER_FAULTS: dict[str, dict[str, Any]] = {
    "submit_refused": {"message": "the simulated cluster refuses this job"},
    "submit_error": {"times": 1, "message": "the simulated cluster failed to answer"},
    "unreachable": {},
    "unhealthy": {"node": "", "check": "gpu", "message": "GPU fell off the bus (simulated XID 79)", "until": 0.0},
    "stockout": {"left": 0},
}
JOB_FAULTS: dict[str, dict[str, Any]] = {
    "exit_code": {"code": 1, "after": 0.0},
    "oom": {"after": 0.0},
    "node_lost": {"after": 0.0},
    "image_pull": {"message": "simulated: the image cannot be pulled"},
    "partial_gang": {"running": 1},
    "ignore_sigterm": {},
    "checkpoint_seconds": {"seconds": 5.0},
}


def _empty() -> dict[str, Any]:
    return {"cordoned": {}, "jobs": {}, "faults": {}, "elastic": {}}


def inject(endpoint: str, fault: str, *, state_file: str = "", **params: Any) -> None:
    """Set ``fault`` on the simulated cluster at ``endpoint`` (its ``state_file``, when it has one)."""
    SimulatedBackend(endpoint, options={"state_file": state_file} if state_file else {}).inject(fault, **params)


def clear(endpoint: str, fault: str = "", *, state_file: str = "") -> None:
    """Remove ``fault`` (every fault when it is "") from the simulated cluster at ``endpoint``."""
    SimulatedBackend(endpoint, options={"state_file": state_file} if state_file else {}).clear(fault)


class SimulatedBackend(Backend):
    kind = "simulated"

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        profile = self.options.get("profile", "h100-onprem")
        if profile not in fleet.PROFILES:
            raise BadResponse(f"unknown simulated profile {profile!r}; choose from {', '.join(fleet.PROFILES)}")
        self.profile = str(profile)
        try:
            self.size = int(self.options.get("nodes", 16))
            self.seed = int(self.options.get("seed", 0))
            self.busy = float(self.options.get("busy", 0.0))
        except (TypeError, ValueError):
            raise BadResponse("simulated options nodes, seed and busy must be numbers") from None
        if not 0 <= self.size <= 100_000 or not 0.0 <= self.busy <= 1.0:
            raise BadResponse("simulated options: nodes must be 0..100000 and busy 0..1")
        self.down = set(self.options.get("down", ()))
        self.state_file = self.options.get("state_file")

    # ------------------------------------------------------------------------------------------- state

    @contextmanager
    def _state(self, write: bool = False) -> Iterator[dict[str, Any]]:
        if not self.state_file:
            memory = _MEMORY.setdefault(self.endpoint or self.profile, _empty())
            memory.setdefault("faults", {})
            yield memory
            return
        path = Path(self.state_file)
        path.parent.mkdir(parents=True, exist_ok=True)
        with path.with_name(f"{path.name}.lock").open("a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX if write else fcntl.LOCK_SH)
            text = path.read_text(encoding="utf-8") if path.exists() else ""
            state = json.loads(text) if text.strip() else _empty()
            state.setdefault("faults", {})
            yield state
            if write:
                # Written aside, then renamed over the old file: a process that dies half-way (a worker
                # killed in the middle of a submit) leaves the previous state whole, as a real cluster would
                # keep its jobs, never an empty or truncated file.
                aside = path.with_name(f"{path.name}.new")
                aside.write_text(json.dumps(state), encoding="utf-8")
                os.replace(aside, path)

    def _replica_root(self) -> Path:
        """Where this cluster's replicas work: a directory of its own (by its state file, else its endpoint) under
        the installation's replica root, never beside the state file (``QM_VAR_DIR``, which they must not see)."""
        return replicas.root_of(str(self.state_file or self.endpoint or self.profile))

    def _node_names(self) -> set[str]:
        with self._state() as state:
            added = set(state.get("elastic", {}))
        return {fleet.node(self.profile, self.seed, i).name for i in range(self.size)} | added

    def _known(self, name: str) -> None:
        prefix = fleet.PROFILES[self.profile].prefix
        try:
            index = int(name.removeprefix(f"{prefix}-"))
        except ValueError:
            index = -1
        if not name.startswith(f"{prefix}-") or not 0 <= index < self.size:
            with self._state() as state:
                if name in state.get("elastic", {}):
                    return
            raise NotFound(f"no node {name!r} in this simulated cluster")

    # ------------------------------------------------------------------------------------------ faults

    def inject(self, fault: str, **params: Any) -> None:
        """Set ``fault`` (the module docstring's table) with ``params`` over its defaults; ``job`` limits a job
        fault to the job of that id. Not a dry-run action: it changes the simulation, not a cluster."""
        defaults = CLUSTER_FAULTS.get(fault, JOB_FAULTS.get(fault))
        if defaults is None:
            known = ", ".join([*CLUSTER_FAULTS, *JOB_FAULTS])
            raise ValueError(f"unknown simulated fault {fault!r}; choose from {known}")
        allowed = {*defaults, *(("job",) if fault in JOB_FAULTS else ())}
        unknown = set(params) - allowed
        if unknown:
            raise ValueError(f"fault {fault} takes {', '.join(sorted(allowed)) or 'no parameters'}, not {unknown}")
        with self._state(write=True) as state:
            state["faults"][fault] = {**defaults, **params}

    def clear(self, fault: str = "") -> None:
        """Remove ``fault``, or every fault when it is ""."""
        with self._state(write=True) as state:
            if fault:
                state["faults"].pop(fault, None)
            else:
                state["faults"].clear()

    def faults(self) -> dict[str, dict[str, Any]]:
        """The faults set now, with their parameters."""
        with self._state() as state:
            return {fault: dict(params) for fault, params in state["faults"].items()}

    def _reachable(self) -> None:
        with self._state() as state:
            unreachable = "unreachable" in state["faults"]
        if unreachable:
            raise Unreachable(f"the simulated cluster {self.endpoint} does not answer (fault injected)")

    # ------------------------------------------------------------------------------------------- reads

    def inventory(self) -> Inventory:
        self._reachable()
        now = time.time()
        with self._state() as state:
            cordoned = dict(state["cordoned"])
            held = _held(state["jobs"], now)
            added = dict(state.get("elastic", {}))
        nodes = []
        for i in range(self.size):
            # Its nodes are this machine, where its service replicas listen (``replicas.ADDRESS``).
            node = replace(fleet.node(self.profile, self.seed, i, self.busy), addresses=(replicas.ADDRESS,))
            if node.name in held:
                node = fleet.holding(node, *held[node.name])
            if node.name in self.down or node.name in cordoned:
                node = replace(node, ready=node.name not in self.down, schedulable=node.name not in cordoned)
            nodes.append(node)
        for name, grown in sorted(added.items()):
            if grown["up_at"] > now:
                continue  # still coming up: the cloud has not handed it over yet
            node = replace(
                fleet.grown(self.profile, name, grown["pool"], grown["capacity_type"]), addresses=(replicas.ADDRESS,)
            )
            if name in held:
                node = fleet.holding(node, *held[name])
            if name in cordoned:
                node = replace(node, schedulable=False)
            nodes.append(node)
        return Inventory(tuple(nodes), (fleet.PROFILES[self.profile].accelerator,))

    def status(self, backend_id: str) -> JobStatus:
        self._reachable()
        with self._state() as state:
            job = state["jobs"].get(backend_id)
        if job is None:
            raise NotFound(f"no job {backend_id!r} in this simulated cluster")
        return _status(backend_id, job, time.time())

    def logs(
        self, backend_id: str, worker: str = "", *, offset: str = "", tail: int | None = None, limit: int = LOG_LIMIT
    ) -> LogChunk:
        status = self.status(backend_id)  # NotFound for no such job; unreachable under that fault
        with self._state() as state:
            job = dict(state["jobs"][backend_id])
        if replicas.is_replica(job):
            if worker not in ("", "0"):
                raise NotFound(f"job {backend_id} has worker 0 only, not {worker!r}")
            path = replicas.output(job)
            size = path.stat().st_size if path.exists() else 0
            with path.open("rb") if path.exists() else io.BytesIO(b"") as stream:
                data, _start, end = read_page(stream, size, offset=offset, tail=tail, limit=limit)
            complete = status.state not in (JobState.PENDING, JobState.RUNNING)
            where = f"the simulated cluster {self.endpoint}, {path}"
            return LogChunk(text(data), str(end), end < size, complete and end >= size, "0", where)
        workers = int(job.get("workers", 1))
        index = worker or "0"
        if not index.isdigit() or int(index) >= workers:
            raise NotFound(f"job {backend_id} has workers 0 to {workers - 1}, not {worker!r}")
        output = "".join(_made_up_lines(job, int(index), status, time.time())).encode()
        data, _start, end = read_page(io.BytesIO(output), len(output), offset=offset, tail=tail, limit=limit)
        complete = status.state not in (JobState.PENDING, JobState.RUNNING)
        where = f"the simulated cluster {self.endpoint}, worker {index}"
        return LogChunk(text(data), str(end), end < len(output), complete and end >= len(output), index, where)

    def find(self, job_id: str) -> str | None:
        self._reachable()
        with self._state() as state:
            return job_id if job_id in state["jobs"] else None

    def health(self) -> tuple[HealthSignal, ...]:
        self._reachable()
        with self._state() as state:
            sick = dict(state["faults"].get("unhealthy") or {})
        now = datetime.now(UTC)
        signals = [
            HealthSignal(name, "ready", name not in self.down, "" if name not in self.down else "node not ready", now)
            for name in sorted(self._node_names())
        ]
        if sick.get("node") and (not sick["until"] or time.time() < float(sick["until"])):
            signals.append(HealthSignal(str(sick["node"]), str(sick["check"]), False, str(sick["message"]), now))
        return tuple(signals)

    # ------------------------------------------------------------------------------------------ writes

    def submit(self, spec: JobSpec) -> str | DryRun:
        self._reachable()
        for name in spec.nodes:
            self._known(name)
        why = capabilities.of(self.kind, self.options).refuses(capabilities.need(spec.image), self.kind)
        if why:
            raise InvalidJob(f"job {spec.id}: this simulated cluster {why}")
        if self.dry_run:
            return DryRun("submit", spec.id, {"nodes": list(spec.nodes)})
        replica = replicas.prepare(spec) if spec.kind == "service" else None  # InvalidJob for a bad replica
        seconds = float(self.options.get("job_seconds", min(spec.time_limit or 600, 600)))
        try:
            seconds = min(seconds, float(spec.env.get(RUN_SECONDS_ENV, seconds)))
        except ValueError:
            raise InvalidJob(f"job {spec.id}: {RUN_SECONDS_ENV} must be a number of seconds") from None
        with self._state(write=True) as state:
            _prune(state["jobs"], time.time())
            faults = state["faults"]
            if "submit_refused" in faults:
                raise InvalidJob(str(faults["submit_refused"]["message"]))
            if "submit_error" in faults:
                failing = faults["submit_error"]
                failing["times"] = int(failing["times"]) - 1
                if failing["times"] <= 0:
                    del faults["submit_error"]
                # The count is kept before the error: the write of the state happens on the way out.
                error: BackendError | None = Unreachable(str(failing["message"]))
            else:
                error = None
            if error is None and spec.id not in state["jobs"]:  # idempotent on the job id
                state["jobs"][spec.id] = {
                    "submitted": time.time(),
                    "seconds": seconds,
                    "nodes": list(spec.nodes),
                    "workers": spec.workers,
                    # What each worker holds on its node, for the inventory's counts of what is in use.
                    "accelerators": spec.accelerators_per_worker,
                    "milli": spec.accelerator_milli,
                    "cpu": spec.cpu_per_worker,
                    "memory": spec.memory_per_worker,
                    "cancelled": False,
                    "faults": {
                        fault: {key: value for key, value in params.items() if key != "job"}
                        for fault, params in faults.items()
                        if fault in JOB_FAULTS and params.get("job") in (None, spec.id) and replica is None
                    },
                }
                if replica is not None:  # started for real, under the lock: a second submit finds it
                    state["jobs"][spec.id]["process"] = replicas.start(spec, replica, self._replica_root())
        if error is not None:
            raise error
        return spec.id

    def cancel(self, backend_id: str) -> DryRun | None:
        self._reachable()
        if self.dry_run:
            return DryRun("cancel", backend_id)
        with self._state(write=True) as state:
            job = state["jobs"].get(backend_id)
            if job is None:
                raise NotFound(f"no job {backend_id!r} in this simulated cluster")
            job["cancelled"] = True
        replicas.stop(job)  # a replica's processes end here (nothing for a simulated job)
        return None

    def signal(self, backend_id: str, grace_seconds: int) -> DryRun | None:
        """The simulated job checkpoints and exits ``checkpoint_seconds`` (its fault, else the option, default 5)
        after the signal, or when its grace period ends if that is sooner; a job with the ``ignore_sigterm``
        fault does not exit at all."""
        self._reachable()
        if self.dry_run:
            return DryRun("signal", backend_id, {"signal": "SIGTERM", "grace_seconds": grace_seconds})
        with self._state(write=True) as state:
            job = state["jobs"].get(backend_id)
            if job is None:
                raise NotFound(f"no job {backend_id!r} in this simulated cluster")
            if replicas.is_replica(job):
                job["signalled"] = True
                replicas.terminate(job)  # SIGTERM to its group; whoever signalled cancels it after the grace
                return None
            faults = job.get("faults", {})
            if "ignore_sigterm" in faults:
                return None
            checkpoint = faults.get("checkpoint_seconds", {}).get("seconds", self.options.get("checkpoint_seconds", 5))
            seconds = min(float(checkpoint), grace_seconds)
            job["exits_at"] = min(job.get("exits_at") or float("inf"), time.time() + seconds)
        return None

    def cordon(self, node: str, reason: str) -> DryRun | None:
        self._reachable()
        self._known(node)
        if self.dry_run:
            return DryRun("cordon", node, {"reason": reason})
        with self._state(write=True) as state:
            state["cordoned"][node] = reason
        return None

    def drain(self, node: str, reason: str) -> DryRun | None:
        """Cordon; the simulated jobs on the node are cancelled, as a cluster's drain would stop them."""
        self._reachable()
        self._known(node)
        if self.dry_run:
            return DryRun("drain", node, {"reason": reason})
        with self._state(write=True) as state:
            state["cordoned"][node] = reason
            stopped = []
            for job in state["jobs"].values():
                if node in job["nodes"]:
                    job["cancelled"] = True
                    stopped.append(job)
        for job in stopped:
            replicas.stop(job)
        return None

    def resume(self, node: str) -> DryRun | None:
        self._reachable()
        self._known(node)
        if self.dry_run:
            return DryRun("resume", node)
        with self._state(write=True) as state:
            state["cordoned"].pop(node, None)
        return None

    def provision(
        self, pool: str, count: int, capacity_type: str, lead_time: int, accelerators: int = 0, flavor: str = ""
    ) -> Provisioned:
        self._reachable()
        if count < 1:
            raise Refused("ask for one node or more")
        with self._state(write=True) as state:
            prefix = fleet.PROFILES[self.profile].prefix
            return _provision(state, prefix, pool, count, capacity_type, lead_time, time.time())

    def release(self, nodes: Sequence[str]) -> None:
        self._reachable()
        with self._state(write=True) as state:
            added = state.setdefault("elastic", {})
            for name in nodes:
                added.pop(name, None)
                state["cordoned"].pop(name, None)


def _provision(
    state: dict[str, Any], prefix: str, pool: str, count: int, capacity_type: str, lead_time: int, now: float
) -> Provisioned:
    """``count`` nodes of ``pool`` added to the state, up ``lead_time`` from ``now``; a stock-out gives what it has
    left, and refuses when that is nothing."""
    stock = state["faults"].get("stockout")
    if stock is not None:
        count = min(count, int(stock["left"]))
        if count <= 0:
            raise Refused(f"the simulated cloud has no more {prefix} nodes for pool {pool} (stock-out)")
        stock["left"] = int(stock["left"]) - count
    added = state.setdefault("elastic", {})
    serial = int(state.get("elastic_serial", 0))
    names = []
    for k in range(serial, serial + count):
        name = f"{prefix}-{pool}-{k:04d}"
        added[name] = {"pool": pool, "capacity_type": capacity_type, "up_at": now + lead_time}
        names.append(name)
    state["elastic_serial"] = serial + count
    return Provisioned(tuple(names), now + lead_time)


def _status(backend_id: str, job: dict[str, Any], now: float) -> JobStatus:
    """What the simulated cluster says of ``job`` at ``now``."""
    nodes = tuple(job["nodes"])
    workers = int(job.get("workers", 1))
    faults: dict[str, dict[str, Any]] = job.get("faults", {})
    if job["cancelled"]:
        return JobStatus(backend_id, JobState.CANCELLED, "cancelled", nodes, workers_running=0)
    if replicas.is_replica(job):
        return replicas.status(backend_id, job)
    if job.get("exits_at") is not None and now >= job["exits_at"]:
        return JobStatus(backend_id, JobState.CANCELLED, "exited after SIGTERM", nodes, workers_running=0)
    if "image_pull" in faults:
        message = str(faults["image_pull"]["message"])
        return JobStatus(backend_id, JobState.PENDING, message, (), Failure.IMAGE_PULL, workers_running=0)
    if "partial_gang" in faults:
        running = min(int(faults["partial_gang"]["running"]), workers)
        message = f"{running} of {workers} workers running; the others are unschedulable (simulated)"
        return JobStatus(
            backend_id, JobState.PENDING, message, nodes[:running], Failure.UNSCHEDULABLE, workers_running=running
        )
    for fault, reason, code in (
        ("oom", Failure.OOM_KILLED, 137),
        ("node_lost", Failure.NODE_LOST, None),
        ("exit_code", Failure.EXIT_CODE, None),
    ):
        if fault in faults and now >= job["submitted"] + float(faults[fault]["after"]):
            exit_code = int(faults[fault]["code"]) if fault == "exit_code" else code
            message = f"failed (simulated {fault.replace('_', ' ')})"
            return JobStatus(backend_id, JobState.FAILED, message, nodes, reason, exit_code, workers_running=0)
    if now >= job["submitted"] + job["seconds"]:
        return JobStatus(backend_id, JobState.SUCCEEDED, "", nodes, exit_code=0, workers_running=0)
    return JobStatus(backend_id, JobState.RUNNING, "", nodes, workers_running=workers)


def _held(jobs: dict[str, dict[str, Any]], now: float) -> dict[str, tuple[int, int, int]]:
    """Per node, the accelerators, millicores and MiB its running jobs' workers hold. Shares of a GPU
    (``milli`` below 1000) are counted together, as packed onto the fewest GPUs: four quarters are one."""
    held: dict[str, list[int]] = {}
    for backend_id, job in jobs.items():
        if _status(backend_id, job, now).state is not JobState.RUNNING:
            continue
        for node in job["nodes"]:
            used = held.setdefault(node, [0, 0, 0])
            used[0] += int(job.get("accelerators", 0)) * int(job.get("milli", 1000))
            used[1] += int(job.get("cpu", 0))
            used[2] += int(job.get("memory", 0))
    return {node: (-(-milli // 1000), c, m) for node, (milli, c, m) in held.items()}


def _prune(jobs: dict[str, dict[str, Any]], now: float) -> None:
    """Forget jobs that ended over ``KEEP_ENDED_SECONDS`` ago, and the oldest ended ones past ``KEEP_ENDED``."""
    ended = []
    for backend_id, job in jobs.items():
        if _status(backend_id, job, now).state in (JobState.PENDING, JobState.RUNNING):
            continue
        if replicas.is_replica(job):
            ended.append((replicas.ended_at(job, now), backend_id))
            continue
        ended.append((float(job.get("exits_at") or 0) or float(job["submitted"]) + float(job["seconds"]), backend_id))
    ended.sort()
    for position, (at, backend_id) in enumerate(ended):
        if now - at > KEEP_ENDED_SECONDS or position < len(ended) - KEEP_ENDED:
            replicas.forget(jobs.pop(backend_id))


def _made_up_lines(job: dict[str, Any], worker: int, status: JobStatus, now: float) -> Iterator[str]:
    """Worker ``worker``'s output as the simulation can honestly tell it: submitted, started on its node,
    progress every tenth of its run time, a signal, and its end (``status``, read at ``now``)."""

    def at(moment: float) -> str:
        return datetime.fromtimestamp(moment, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")

    submitted, seconds = float(job["submitted"]), max(float(job["seconds"]), 0.001)
    nodes, workers = job["nodes"], int(job.get("workers", 1))
    node = nodes[worker] if worker < len(nodes) else "a node the simulation chose"
    yield f"{at(submitted)} simulated: job submitted with {workers} worker(s)\n"
    if status.state is JobState.PENDING:
        yield f"{at(now)} simulated: worker {worker} is not running: {status.message or 'waiting'}\n"
        return
    yield f"{at(submitted)} simulated: worker {worker} of {workers} started on node {node}\n"
    ended = status.state not in (JobState.RUNNING,)
    until = min(now, submitted + seconds)
    if job.get("exits_at") is not None:
        until = min(until, float(job["exits_at"]))
    for tenth in range(1, 10):
        moment = submitted + seconds * tenth / 10
        if moment > until:
            break
        done = f"{moment - submitted:.0f} of {seconds:.0f} s"
        yield f"{at(moment)} simulated: worker {worker} progress {tenth * 10}% ({done})\n"
    if job.get("exits_at") is not None:
        yield f"{at(float(job['exits_at']))} simulated: SIGTERM received; checkpointing and exiting\n"
    if not ended:
        return
    if status.state is JobState.SUCCEEDED:
        end = f"finished: exit code 0 after {seconds:.0f} s"
    elif status.state is JobState.CANCELLED:
        end = status.message or "cancelled"
    else:
        code = "" if status.exit_code is None else f", exit code {status.exit_code}"
        end = f"{status.message or 'failed'} ({status.reason or 'failed'}{code})"
    yield f"{at(min(now, max(until, submitted)))} simulated: worker {worker} {end}\n"
