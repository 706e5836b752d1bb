"""A simulated cluster: the fleet of ``fleet.py``, and the cluster-side state a real cluster would keep
(cordoned and down nodes, submitted jobs).

That state lives in a JSON file when ``options["state_file"]`` names one (so the web process, the workers
and beat see the same simulated cluster; writes take an exclusive lock and replace the file whole), else
in this process's memory, per endpoint. Jobs run for ``options["job_seconds"]`` (default: their time limit,
at most 10 minutes) and then succeed.

Options: ``profile`` (see ``fleet.PROFILES``), ``nodes`` (how many), ``seed``, ``busy`` (average share of
accelerators in use by work Quartermaster does not know of, for demos), ``down`` (node names the cluster
reports not ready), ``state_file``, ``job_seconds``, ``checkpoint_seconds`` (how long a signalled job takes
to checkpoint and exit).
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

from clusters.backends.base import (
    Backend,
    BadResponse,
    DryRun,
    HealthSignal,
    Inventory,
    JobSpec,
    JobState,
    JobStatus,
    NotFound,
)

from . import fleet

_MEMORY: dict[str, dict[str, Any]] = {}


def _empty() -> dict[str, Any]:
    return {"cordoned": {}, "jobs": {}}


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
            yield _MEMORY.setdefault(self.endpoint or self.profile, _empty())
            return
        path = Path(self.state_file)
        path.parent.mkdir(parents=True, exist_ok=True)
        with path.with_name(f"{path.name}.lock").open("a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX if write else fcntl.LOCK_SH)
            text = path.read_text(encoding="utf-8") if path.exists() else ""
            state = json.loads(text) if text.strip() else _empty()
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

    # ------------------------------------------------------------------------------------------- reads

    def inventory(self) -> Inventory:
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
        with self._state() as state:
            job = state["jobs"].get(backend_id)
        if job is None:
            raise NotFound(f"no job {backend_id!r} in this simulated cluster")
        if job["cancelled"]:
            return JobStatus(backend_id, JobState.CANCELLED, "cancelled", tuple(job["nodes"]))
        if job.get("exits_at") is not None and time.time() >= job["exits_at"]:
            return JobStatus(backend_id, JobState.CANCELLED, "exited after SIGTERM", tuple(job["nodes"]))
        done = time.time() >= job["submitted"] + job["seconds"]
        state_ = JobState.SUCCEEDED if done else JobState.RUNNING
        return JobStatus(backend_id, state_, "", tuple(job["nodes"]))

    def find(self, job_id: str) -> str | None:
        with self._state() as state:
            return job_id if job_id in state["jobs"] else None

    def health(self) -> tuple[HealthSignal, ...]:
        now = datetime.now(UTC)
        return tuple(
            HealthSignal(name, "ready", name not in self.down, "" if name not in self.down else "node not ready", now)
            for name in sorted(self._node_names())
        )

    # ------------------------------------------------------------------------------------------ writes

    def submit(self, spec: JobSpec) -> str | DryRun:
        for name in spec.nodes:
            self._known(name)
        if self.dry_run:
            return DryRun("submit", spec.id, {"nodes": list(spec.nodes)})
        seconds = float(self.options.get("job_seconds", min(spec.time_limit, 600)))
        with self._state(write=True) as state:
            if spec.id not in state["jobs"]:  # idempotent on the job id
                state["jobs"][spec.id] = {
                    "submitted": time.time(),
                    "seconds": seconds,
                    "nodes": list(spec.nodes),
                    "cancelled": False,
                }
        return spec.id

    def cancel(self, backend_id: str) -> DryRun | None:
        if self.dry_run:
            return DryRun("cancel", backend_id)
        with self._state(write=True) as state:
            job = state["jobs"].get(backend_id)
            if job is None:
                raise NotFound(f"no job {backend_id!r} in this simulated cluster")
            job["cancelled"] = True
        return None

    def signal(self, backend_id: str, grace_seconds: int) -> DryRun | None:
        """The simulated job checkpoints and exits ``checkpoint_seconds`` (option, default 5) after the signal,
        or when its grace period ends if that is sooner."""
        if self.dry_run:
            return DryRun("signal", backend_id, {"signal": "SIGTERM", "grace_seconds": grace_seconds})
        seconds = min(float(self.options.get("checkpoint_seconds", 5)), grace_seconds)
        with self._state(write=True) as state:
            job = state["jobs"].get(backend_id)
            if job is None:
                raise NotFound(f"no job {backend_id!r} in this simulated cluster")
            job["exits_at"] = min(job.get("exits_at") or float("inf"), time.time() + seconds)
        return None

    def cordon(self, node: str, reason: str) -> DryRun | None:
        self._known(node)
        if self.dry_run:
            return DryRun("cordon", node, {"reason": reason})
        with self._state(write=True) as state:
            state["cordoned"][node] = reason
        return None

    def drain(self, node: str, reason: str) -> DryRun | None:
        """Cordon; the simulated jobs on the node are cancelled, as a cluster's drain would stop them."""
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
        self._known(node)
        if self.dry_run:
            return DryRun("resume", node)
        with self._state(write=True) as state:
            state["cordoned"].pop(node, None)
        return None
