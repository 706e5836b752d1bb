"""A simulated cluster: the fleet of ``fleet.py``, and the cluster-side state a real cluster would keep
(cordoned and down nodes, submitted jobs).

That state lives in a JSON file when ``options["state_file"]`` names one (so the web process, the workers
and beat see the same simulated cluster; writes take an exclusive lock and replace the file whole), else
in this process's memory, per endpoint. Jobs run for ``options["job_seconds"]`` (default: their time limit,
at most 10 minutes) and then succeed.

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
| ``exit_code`` | ``code`` (1), ``after`` (0 s) | jobs submitted now fail ``after`` seconds in: ``Failure.EXIT_CODE`` |
| ``oom`` | ``after`` (0 s) | jobs submitted now are OOM-killed ``after`` seconds in (exit code 137) |
| ``node_lost`` | ``after`` (0 s) | jobs submitted now lose a node ``after`` seconds in: ``Failure.NODE_LOST`` |
| ``image_pull`` | ``message`` | jobs submitted now stay pending: ``Failure.IMAGE_PULL`` |
| ``partial_gang`` | ``running`` (1) | jobs submitted now stay pending, ``running`` workers up: ``UNSCHEDULABLE`` |
| ``ignore_sigterm`` | | jobs submitted now ignore ``signal``: they run on until cancelled |
| ``checkpoint_seconds`` | ``seconds`` | jobs submitted now exit that long after ``signal`` (the option, per job) |

A job fault applies to every job submitted while it is set, or only to the job whose id is ``job`` when
that parameter is given; it stays with the job once submitted (clearing it changes only later jobs). Jobs
report ``workers_running``: all their workers while running, none while pending or ended.
"""

from __future__ import annotations

import fcntl
import json
import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from clusters import capabilities
from clusters.backends.base import (
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
    NotFound,
    Unreachable,
)

from . import fleet

_MEMORY: dict[str, dict[str, Any]] = {}

#: Faults of the cluster itself, and faults given to the jobs submitted while they are set (the module
#: docstring's table), with their parameters' defaults.
CLUSTER_FAULTS: dict[str, dict[str, Any]] = {
    "submit_refused": {"message": "the simulated cluster refuses this job"},
    "submit_error": {"times": 1, "message": "the simulated cluster failed to answer"},
    "unreachable": {},
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
    return {"cordoned": {}, "jobs": {}, "faults": {}}


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

    def _node_names(self) -> set[str]:
        return {fleet.node(self.profile, self.seed, i).name for i in range(self.size)}

    def _known(self, name: str) -> None:
        prefix = fleet.PROFILES[self.profile].prefix
        try:
            index = int(name.removeprefix(f"{prefix}-"))
        except ValueError:
            index = -1
        if not name.startswith(f"{prefix}-") or not 0 <= index < self.size:
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

    def _reachable(self) -> None:
        with self._state() as state:
            unreachable = "unreachable" in state["faults"]
        if unreachable:
            raise Unreachable(f"the simulated cluster {self.endpoint} does not answer (fault injected)")

    # ------------------------------------------------------------------------------------------- reads

    def inventory(self) -> Inventory:
        self._reachable()
        with self._state() as state:
            cordoned = dict(state["cordoned"])
        nodes = []
        for i in range(self.size):
            node = fleet.node(self.profile, self.seed, i, self.busy)
            if node.name in self.down or node.name in cordoned:
                node = replace(node, ready=node.name not in self.down, schedulable=node.name not in cordoned)
            nodes.append(node)
        return Inventory(tuple(nodes), (fleet.PROFILES[self.profile].accelerator,))

    def status(self, backend_id: str) -> JobStatus:
        self._reachable()
        with self._state() as state:
            job = state["jobs"].get(backend_id)
        if job is None:
            raise NotFound(f"no job {backend_id!r} in this simulated cluster")
        nodes = tuple(job["nodes"])
        workers = int(job.get("workers", 1))
        faults: dict[str, dict[str, Any]] = job.get("faults", {})
        now = time.time()
        if job["cancelled"]:
            return JobStatus(backend_id, JobState.CANCELLED, "cancelled", nodes, workers_running=0)
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

    def find(self, job_id: str) -> str | None:
        self._reachable()
        with self._state() as state:
            return job_id if job_id in state["jobs"] else None

    def health(self) -> tuple[HealthSignal, ...]:
        self._reachable()
        now = datetime.now(UTC)
        return tuple(
            HealthSignal(name, "ready", name not in self.down, "" if name not in self.down else "node not ready", now)
            for name in sorted(self._node_names())
        )

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
        seconds = float(self.options.get("job_seconds", min(spec.time_limit, 600)))
        with self._state(write=True) as state:
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
                    "cancelled": False,
                    "faults": {
                        fault: {key: value for key, value in params.items() if key != "job"}
                        for fault, params in faults.items()
                        if fault in JOB_FAULTS and params.get("job") in (None, spec.id)
                    },
                }
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
            for job in state["jobs"].values():
                if node in job["nodes"]:
                    job["cancelled"] = True
        return None

    def resume(self, node: str) -> DryRun | None:
        self._reachable()
        self._known(node)
        if self.dry_run:
            return DryRun("resume", node)
        with self._state(write=True) as state:
            state["cordoned"].pop(node, None)
        return None
