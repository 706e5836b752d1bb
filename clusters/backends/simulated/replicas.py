"""Service replicas on the simulated cluster, run for real: the replica's script (``slurm/service.py``, the one
Slurm runs) under ``/bin/sh`` on this machine, its program bound to 127.0.0.1, isolated from the portal
(``sandbox.py``: it sees its own directory, the system and the network, nothing of the portal's; where that
cannot be made, it is refused). Only where ``SIMULATED_CLUSTERS`` is on (off in production by default).

Each replica gets a working directory of its own under the cluster's replica root (``SIMULATED_REPLICA_ROOT``,
outside ``QM_VAR_DIR``); its script, its output and its exit code live there. It is started as a process
group of its own, by a shell that exits at once (so the process that submitted it, a web worker or a Celery
worker, keeps no child to reap): a supervisor in the group runs the script, passes a SIGTERM on to it and
writes the script's exit code to ``exit_code`` when it ends. The cluster's state keeps the supervisor's pid,
its start time (so a pid the system reused is never taken for it) and the group.

``status`` is read from the system: the supervisor lives (running), or its exit code (0 succeeded; 143 after a
signal: stopped; else failed). ``stop`` sends SIGTERM to the group and, ``GRACE`` seconds later, SIGKILL to
what is left, so that no process outlives a cancel.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import shlex
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

from django.conf import settings

from clusters.backends.base import Failure, InvalidJob, JobSpec, JobState, JobStatus
from clusters.backends.simulated import sandbox
from clusters.backends.slurm import service

#: Where a replica listens on the simulated cluster's one machine.
ADDRESS = "127.0.0.1"
#: Seconds a cancelled replica has to exit after SIGTERM before its group is killed.
GRACE = 3.0
#: What the replica is given of this machine's environment, besides its job's own.
INHERITED = ("PATH", "HOME", "LANG", "LC_ALL", "TMPDIR", "TZ")

#: The supervisor: runs the replica's script, forwards SIGTERM, records the script's exit code.
SUPERVISOR = """trap 'kill -TERM $QM_CHILD 2>/dev/null' TERM INT
/bin/sh ./replica.sh >output.log 2>&1 </dev/null &
QM_CHILD=$!
wait $QM_CHILD; QM_CODE=$?
while kill -0 $QM_CHILD 2>/dev/null; do wait $QM_CHILD; QM_CODE=$?; done
echo $QM_CODE >exit_code.new && mv exit_code.new exit_code
"""


def is_replica(job: dict[str, Any]) -> bool:
    return "process" in job


def root_of(cluster: str) -> Path:
    """The directory a simulated cluster's replicas work in (``cluster``: its state file, else its endpoint)."""
    return Path(settings.SIMULATED_REPLICA_ROOT) / hashlib.sha256(cluster.encode()).hexdigest()[:12]


def prepare(spec: JobSpec) -> str:
    """The replica's script; ``InvalidJob`` when it cannot be run (no command, several workers)."""
    return service.script(spec, address=ADDRESS)


def start(spec: JobSpec, script: str, root: Path) -> dict[str, Any]:
    """Start the replica (see the module's docstring); what the cluster's state keeps of its process."""
    if not settings.SIMULATED_CLUSTERS:
        raise InvalidJob(
            f"service replica {spec.id}: this installation runs no simulated cluster's replicas (SIMULATED_CLUSTERS)."
        )
    try:
        sandbox.check()
    except sandbox.Unavailable as why:
        raise InvalidJob(f"service replica {spec.id}: the simulated cluster cannot run it here: {why}.") from None
    root.mkdir(mode=0o700, parents=True, exist_ok=True)
    workdir = Path(tempfile.mkdtemp(prefix=f"{spec.id[:60]}-", dir=root))
    (workdir / "replica.sh").write_text(script, encoding="utf-8")
    (workdir / "supervise.sh").write_text(SUPERVISOR, encoding="utf-8")
    env = {name: os.environ[name] for name in INHERITED if name in os.environ}
    env.update(spec.env)
    env.setdefault("PATH", os.defpath)
    try:
        isolated = shlex.join(sandbox.command(workdir, root))
    except sandbox.Unavailable as why:
        shutil.rmtree(workdir, ignore_errors=True)
        raise InvalidJob(f"service replica {spec.id}: the simulated cluster cannot run it here: {why}.") from None
    try:
        started = subprocess.run(  # noqa: S603 - the argv is made here, quoted by shlex
            ["/bin/sh", "-c", f"{isolated} </dev/null >/dev/null 2>&1 & echo $!"],
            cwd=workdir,
            env=env,
            start_new_session=True,  # its own session and group: a signal to the group reaches all of it
            capture_output=True,
            text=True,
            timeout=30,
            check=True,
        )
        pid = int(started.stdout.strip())
        group = os.getpgid(pid)
    except (OSError, ValueError, subprocess.SubprocessError) as error:
        shutil.rmtree(workdir, ignore_errors=True)
        raise InvalidJob(f"service replica {spec.id}: the simulated cluster could not start it ({error})") from None
    return {"pid": pid, "group": group, "start": _start_time(pid), "dir": str(workdir)}


def _start_time(pid: int) -> str:
    """The process's start time in clock ticks since boot (``/proc/<pid>/stat`` field 22); "" if it is gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return ""
    return stat.rsplit(")", 1)[1].split()[19]


def _alive(process: dict[str, Any]) -> bool:
    """The supervisor still runs (not a zombie, and not another process with its pid)."""
    pid = int(process["pid"])
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    fields = stat.rsplit(")", 1)[1].split()
    return fields[0] != "Z" and fields[19] == process["start"]


def members(group: int) -> list[int]:
    """The live processes (not zombies) of process group ``group``."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if fields[0] != "Z" and int(fields[2]) == group:
            found.append(int(stat.parent.name))
    return found


def _exit_code(process: dict[str, Any]) -> int | None:
    try:
        return int((Path(process["dir"]) / "exit_code").read_text().strip())
    except (OSError, ValueError):
        return None


def output(job: dict[str, Any]) -> Path:
    return Path(job["process"]["dir"]) / "output.log"


def status(backend_id: str, job: dict[str, Any]) -> JobStatus:
    """What the system says of the replica (not cancelled: the caller answers that)."""
    process, nodes = job["process"], tuple(job["nodes"])
    if _alive(process):
        return JobStatus(backend_id, JobState.RUNNING, "", nodes, workers_running=1)
    code = _exit_code(process)
    if code == 0:
        return JobStatus(backend_id, JobState.SUCCEEDED, "the replica exited", nodes, exit_code=0, workers_running=0)
    if job.get("signalled") and code in (None, 128 + signal.SIGTERM):
        return JobStatus(backend_id, JobState.CANCELLED, "exited after SIGTERM", nodes, workers_running=0)
    message = f"the replica exited with code {code}" if code is not None else "the replica's process is gone"
    return JobStatus(backend_id, JobState.FAILED, message, nodes, Failure.EXIT_CODE, code, workers_running=0)


def ended_at(job: dict[str, Any], now: float) -> float:
    """When the replica ended, as far as its directory says (its exit code's time), else ``now``."""
    try:
        return (Path(job["process"]["dir"]) / "exit_code").stat().st_mtime
    except OSError:
        return now


def _signal_group(process: dict[str, Any], number: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(int(process["group"]), number)


def terminate(job: dict[str, Any]) -> None:
    """SIGTERM to the replica's group (its program checkpoints and exits; the script exits 143)."""
    if is_replica(job):
        _signal_group(job["process"], signal.SIGTERM)


def stop(job: dict[str, Any]) -> None:
    """SIGTERM to the replica's group, then SIGKILL to what is left after ``GRACE`` seconds."""
    if not is_replica(job):
        return
    process = job["process"]
    _signal_group(process, signal.SIGTERM)
    deadline = time.monotonic() + GRACE
    while members(int(process["group"])) and time.monotonic() < deadline:
        time.sleep(0.05)
    _signal_group(process, signal.SIGKILL)


def forget(job: dict[str, Any]) -> None:
    """A replica the cluster forgets: whatever is left of it is killed and its directory removed."""
    if is_replica(job):
        _signal_group(job["process"], signal.SIGKILL)
        shutil.rmtree(job["process"]["dir"], ignore_errors=True)
