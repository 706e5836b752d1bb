"""A Ray job on Slurm: one batch job over the head's node and the workers' nodes that starts a Ray cluster
there, runs the entrypoint on it with ``ray job submit``, exits with the entrypoint's exit code and stops Ray.

**The allocation.** The engine places the head as one more member of the gang: on a worker's node when it
fits there, else on a node of its own (docs/scheduling.md §Ray heads). Slurm describes a job's tasks alike,
so the job is *heterogeneous* (Slurm's "hetjob"), whose components never share a node:

- component 0, the head's node: one task holding all that Quartermaster gave the job on that node, the
  head and the workers placed with it;
- component 1, the other workers' nodes (left out when every worker is with the head): one task a worker,
  as a plain job's.

The batch script runs on component 0's node. There it starts the Ray head (``ray start --head``) with the
component's CPUs and GPUs; each task of component 1 becomes a Ray worker node (``srun --het-group=1 ray start
--address=... --block``). It waits until every Ray node has joined (``ray_start_timeout``, default 300 s),
submits the entrypoint with the job's runtime environment (``ray job submit``, which applies it to the
entrypoint too and streams its output into the job's output), reads the entrypoint's exit code from Ray's
job record, stops Ray and exits with that code.

**Ports.** Several Ray clusters may share a node (two jobs placed there; the lab's nodes are one machine), so
every Ray process listens on a port picked free on its node, and each Ray node keeps its files under a
directory of its own (``ray start --temp-dir``), as Ray's documentation for several nodes on one machine asks.
A port picked free may be taken by another process before Ray binds it: a worker that fails within seconds,
and a head that ends before it answers, start again with other ports, three times at most; the wait for
the head ends as soon as the head's ``ray start`` has.
The script records the dashboard's port in the job's comment (``scontrol update``), where ``status`` reads
it: the dashboard link is ``options["ray_dashboard"]`` (e.g. ``http://{node}:{port}``) filled with the head's
node and that port; without the option there is no link, since only the cluster's admin knows whether and
how the nodes are reachable from browsers.

**Where Ray comes from.** ``options["ray_setup"]``: a shell line that puts ``ray`` and its Python on PATH on
the nodes (``source /opt/ray/bin/activate``, ``module load ray``); empty: they are already there. Pure; no I/O.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
import shlex
from collections import Counter
from collections.abc import Mapping
from typing import Any

from clusters.backends.base import InvalidJob, JobSpec
from clusters.backends.slurm import versions

#: The job comment's prefix that marks a Ray job, and what the script adds to it once Ray's dashboard is up.
COMMENT = "Quartermaster Ray job"
DASHBOARD_IN_COMMENT = re.compile(r"\bray-dashboard-port=(\d{1,5})\b")
#: Marks the end of the entrypoint and the runtime environment in the here-documents that hold them.
END_OF_ENTRYPOINT = "QM_END_OF_RAY_ENTRYPOINT"
DEFAULT_START_TIMEOUT = 300
#: The exit code of the wait for the Ray nodes when the head's ``ray start`` ended meanwhile.
HEAD_ENDED = 3


def is_ray(spec: JobSpec) -> bool:
    return spec.kind == "ray"


def ray_dir_name(job_id: str) -> str:
    """The attempt's part of the name of its Ray directory on each node (``qm-ray-<Slurm job>-<this>``): eight
    hex digits of the attempt's id, short because Ray's socket paths under it must stay within 107 bytes."""
    return hashlib.sha256(job_id.encode()).hexdigest()[:8]


# --- the allocation ------------------------------------------------------------------------------------


def components(spec: JobSpec, workers: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Slurm's job descriptions of a Ray job (component 0: the head's node; 1: the other workers), from
    ``workers``, the description the job's workers would have as a plain job."""
    head_accelerators, head_cpu, head_memory = spec.head
    cpus = max(1, math.ceil(spec.cpu_per_worker / 1000))
    on_head = sum(1 for node in spec.nodes if node == spec.head_node) if spec.head_node else 0
    head: dict[str, Any] = {
        **{key: value for key, value in workers.items() if key not in ("nodelist", "nodes", "tasks_per_node")},
        "comment": f"{COMMENT} {spec.id}: {spec.name}",
        "tasks": 1,
        "cpus_per_task": max(1, math.ceil(head_cpu / 1000)) + on_head * cpus,
    }
    head.pop("gpus_per_task", None)
    gpus = head_accelerators + on_head * spec.accelerators_per_worker
    if gpus:
        head["gpus_per_task"] = str(gpus)
    memory = head_memory + on_head * spec.memory_per_worker
    if memory:
        head["memory_per_cpu"] = math.ceil(memory / head["cpus_per_task"])
    if spec.head_node:
        head["nodelist"] = spec.head_node
        head["nodes"] = [1, 1]
    left = spec.workers - on_head if spec.nodes else spec.workers
    if not left:
        return [head]
    rest: dict[str, Any] = {**workers, "tasks": left, "comment": head["comment"]}
    others = [node for node in spec.nodes if node != spec.head_node]
    if others:
        per_node = Counter(others)
        rest["nodelist"] = ",".join(per_node)
        rest["nodes"] = [len(per_node), len(per_node)]
        rest.pop("tasks_per_node", None)
        if len(set(per_node.values())) == 1:
            rest["tasks_per_node"] = left // len(per_node)
    return [head, rest]


def submit_body(version: str, script: str, spec: JobSpec, job: Mapping[str, Any]) -> dict[str, Any]:
    """slurmrestd's submission (data parser ``version``) of ``spec``, whose plain description is ``job`` (in
    ``v0.0.38``'s words): ``versions.submit_body``'s, or for a Ray job with workers off the head's node, a
    heterogeneous one, ``jobs`` (its components in order) where a plain job has ``job``. The batch script
    is the first component's, the head's: the others run only the steps it starts."""
    parts = components(spec, job) if is_ray(spec) else [dict(job)]
    if len(parts) == 1:
        return versions.submit_body(version, script, parts[0])
    if version == versions.LEGACY:
        return {"script": script, "jobs": parts}
    jobs = [versions.submit_body(version, script, part)["job"] for part in parts]
    for later in jobs[1:]:
        del later["script"]
    return {"jobs": jobs}


def dashboard_url(options: Mapping[str, Any], raw: Mapping[str, Any], nodes: tuple[str, ...]) -> str:
    """Where the Ray dashboard of the job Slurm describes as ``raw`` is reachable, if the cluster says how
    (``options["ray_dashboard"]``) and the job has said its port; "" otherwise."""
    template = str(options.get("ray_dashboard") or "")
    comment = raw.get("comment")
    if not template or not nodes or not isinstance(comment, str) or not comment.startswith(COMMENT):
        return ""
    found = DASHBOARD_IN_COMMENT.search(comment)
    if found is None:
        return ""
    try:
        return template.format(node=nodes[0], port=int(found.group(1)))
    except (KeyError, IndexError, ValueError):
        return ""


# --- the batch script ----------------------------------------------------------------------------------

#: A free TCP port on this node (the kernel's choice), printed by Ray's own Python.
FREE_PORT = "python -c 'import socket; s = socket.socket(); s.bind((\"\", 0)); print(s.getsockname()[1])'"

#: ``ray start`` options that give one Ray node ports of its own (Ray's defaults clash on a shared node). The
#: hundred ports of its workers lie in 18000-30099, below the range the kernel picks free ports from (Linux:
#: 32768-60999): Ray refuses to start a node whose worker ports hold one of its other, picked, ports.
PORTS = r"""ray_ports() {  # every port a Ray node listens on, each picked free on this node
  local base; base=$(qm_free_port)
  echo --node-manager-port=$(qm_free_port) --object-manager-port=$(qm_free_port) \
    --dashboard-agent-grpc-port=$(qm_free_port) --dashboard-agent-listen-port=$(qm_free_port) \
    --runtime-env-agent-port=$(qm_free_port) --metrics-export-port=$(qm_free_port) \
    --min-worker-port=$(( 18000 + base % 12000 )) --max-worker-port=$(( 18099 + base % 12000 ))
}"""


def script(spec: JobSpec, options: Mapping[str, Any]) -> str:
    """The batch script of a Ray job (see the module's docstring)."""
    if not spec.entrypoint.strip():
        raise InvalidJob(f"Ray job {spec.id} has no entrypoint")
    runtime_env = json.dumps(dict(spec.runtime_env))
    for text in (spec.entrypoint, runtime_env):
        if END_OF_ENTRYPOINT in text:
            raise InvalidJob(f"Ray job {spec.id}: its entrypoint contains {END_OF_ENTRYPOINT}, which is reserved")
    head_accelerators, head_cpu, _ = spec.head
    on_head = sum(1 for node in spec.nodes if node == spec.head_node) if spec.head_node else 0
    cpus = max(1, math.ceil(spec.cpu_per_worker / 1000))
    head_cpus = max(1, math.ceil(head_cpu / 1000)) + on_head * cpus
    head_gpus = head_accelerators + on_head * spec.accelerators_per_worker
    workers_elsewhere = spec.workers - on_head if spec.nodes else spec.workers
    ray_nodes = 1 + workers_elsewhere
    timeout = int(options.get("ray_start_timeout") or DEFAULT_START_TIMEOUT)
    setup = str(options.get("ray_setup") or "").strip()
    submission = f"qm-{spec.id}"
    # A Ray node that fails within seconds lost a race for a port it picked free (another Ray on the node took
    # it first): it starts again with new ports, three times at most. One that ran a while ended for good.
    worker_start = (
        'mkdir -p "$QM_RAY_DIR"; log="$QM_RAY_DIR/worker-$SLURM_PROCID.log"; for try in 1 2 3; do '
        'began=$(date +%s); ray start --address="$QM_RAY_ADDRESS" --block --disable-usage-stats '
        f"--num-cpus={cpus} --num-gpus={spec.accelerators_per_worker} $(ray_ports) "
        '>>"$log" 2>&1 && exit 0; [ $(( $(date +%s) - began )) -lt 30 ] || exit 1; '
        'echo "qm: Ray node start $try failed; again with other ports" >>"$log"; sleep 1; done; exit 1'
    )
    lines = [
        "#!/bin/bash",
        f"# {COMMENT} {spec.id}: a Ray head on this node, a Ray node per worker elsewhere, then the entrypoint.",
        "set -u",
        *([setup] if setup else []),
        "qm_free_port() { " + FREE_PORT + "; }",
        PORTS,
        "export -f qm_free_port ray_ports",
        # The job's own directory: named by the attempt too, since Slurm's job ids repeat across the Slurm
        # clusters whose nodes share a machine (the labs), and it is removed when the job's Ray stops. Each run
        # of the job (Slurm requeues it when a node is lost) has a directory of its own in it: a run killed
        # while it stopped may leave its Ray's files behind, or remove them late, and must not touch the next.
        f'QM_RAY_DIR="${{TMPDIR:-/tmp}}/qm-ray-$SLURM_JOB_ID-{ray_dir_name(spec.id)}/run-${{SLURM_RESTART_COUNT:-0}}"',
        'mkdir -p "$QM_RAY_DIR/head"',
        "export QM_RAY_DIR RAY_USAGE_STATS_ENABLED=0",
        f"cat > \"$QM_RAY_DIR/entrypoint.sh\" <<'{END_OF_ENTRYPOINT}'",
        spec.entrypoint.rstrip("\n"),
        END_OF_ENTRYPOINT,
        f"cat > \"$QM_RAY_DIR/runtime_env.json\" <<'{END_OF_ENTRYPOINT}'",
        runtime_env,
        END_OF_ENTRYPOINT,
        # Stopping Ray is stopping this job's own Ray processes: ``ray stop`` would stop every Ray on the node.
        "qm_ray_stop() { kill ${QM_RAY_HEAD:-} ${QM_RAY_WORKERS:-} 2>/dev/null; wait 2>/dev/null; "
        'rm -rf "$QM_RAY_DIR"; rmdir "${QM_RAY_DIR%/*}" 2>/dev/null; }',
        "trap 'qm_ray_stop; exit 143' TERM",
        # bounded from outside too: a Ray client may retry a head that died under it for minutes
        f"qm_ray_wait() {{ QM_RAY_NODES=$1 QM_RAY_TIMEOUT={timeout} QM_RAY_HEAD_PID=${{QM_RAY_HEAD:-}} "
        f"timeout {timeout + 30} python - <<'{END_OF_ENTRYPOINT}'",
        WAIT_FOR_NODES,
        END_OF_ENTRYPOINT,
        "}",
        "QM_RAY_STARTED=$(date +%s)",
        # A head that ended while starting (a port it picked free was taken; on a loaded node, a dashboard
        # module that gave up) starts again with other ports; one that did not answer in time does not.
        "for try in 1 2 3; do",
        "  QM_RAY_PORT=$(qm_free_port); QM_RAY_DASHBOARD_PORT=$(qm_free_port)",
        '  export QM_RAY_ADDRESS="$(python -c "import ray._private.services as s; '
        'print(s.get_node_ip_address())"):$QM_RAY_PORT"',
        '  ray start --head --block --port="$QM_RAY_PORT" --dashboard-host=0.0.0.0 '
        '--dashboard-port="$QM_RAY_DASHBOARD_PORT" --include-dashboard=true --temp-dir="$QM_RAY_DIR/head" '
        f"--disable-usage-stats --ray-client-server-port=$(qm_free_port) --num-cpus={head_cpus} "
        f'--num-gpus={head_gpus} $(ray_ports) >>"$QM_RAY_DIR/head.log" 2>&1 &',
        "  QM_RAY_HEAD=$!",
        "  qm_ray_wait 1; waited=$?",
        '  [ "$waited" = 0 ] && break',
        '  kill "$QM_RAY_HEAD" 2>/dev/null; wait "$QM_RAY_HEAD" 2>/dev/null; QM_RAY_HEAD=""',
        f'  if [ "$try" = 3 ] || [ "$waited" != {HEAD_ENDED} ]; then',
        '    echo "qm: the Ray head did not start:" >&2; cat "$QM_RAY_DIR/head.log" >&2; qm_ray_stop; exit 1',
        "  fi",
        '  echo "qm: Ray head start $try failed; again with other ports" >>"$QM_RAY_DIR/head.log"',
        "done",
        'scontrol update JobId="$SLURM_JOB_ID" Comment="'
        + f"{COMMENT} {spec.id}"
        + ' ray-dashboard-port=$QM_RAY_DASHBOARD_PORT" >/dev/null 2>&1 || true',
    ]
    if workers_elsewhere:
        lines += [
            f"srun --het-group=1 --kill-on-bad-exit=0 bash -c {shlex.quote(worker_start)} &",
            "QM_RAY_WORKERS=$!",
        ]
    lines += [
        f"qm_ray_wait {ray_nodes} || {{ echo 'qm: not every Ray node joined:' >&2; "
        'tail -n 20 "$QM_RAY_DIR"/worker-*.log >&2 2>/dev/null; qm_ray_stop; exit 1; }',
        f'echo "qm: Ray is up with {ray_nodes} node(s) in $(( $(date +%s) - QM_RAY_STARTED )) s" >&2',
        # unbuffered: the entrypoint's output reaches the job's output file as it comes, not at the end
        f'PYTHONUNBUFFERED=1 ray job submit --log-color=false --address="http://127.0.0.1:$QM_RAY_DASHBOARD_PORT" '
        f'--submission-id={submission} --runtime-env-json="$(cat "$QM_RAY_DIR/runtime_env.json")" '
        '-- bash "$QM_RAY_DIR/entrypoint.sh"',
        f"QM_EXIT=$(python - \"http://127.0.0.1:$QM_RAY_DASHBOARD_PORT\" {submission} <<'{END_OF_ENTRYPOINT}'",
        EXIT_CODE,
        END_OF_ENTRYPOINT,
        ")",
        "qm_ray_stop",
        'exit "${QM_EXIT:-1}"',
    ]
    return "\n".join(lines) + "\n"


#: Wait until the Ray cluster has ``QM_RAY_NODES`` nodes alive, at most ``QM_RAY_TIMEOUT`` seconds. It joins the
#: cluster only once the head's port answers: ``ray.init`` on a head still starting (or one that died) retries
#: for minutes before it gives up, and meanwhile nobody would notice the head's ``ray start`` had ended.
WAIT_FOR_NODES = """import os, socket, sys, time
import ray
want, deadline = int(os.environ["QM_RAY_NODES"]), time.time() + int(os.environ["QM_RAY_TIMEOUT"])
head = os.environ.get("QM_RAY_HEAD_PID", "")
def head_ended():  # the head's `ray start --block` exited (a zombie until the script waits for it)
    try:
        with open(f"/proc/{head}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] == "Z"
    except OSError:
        return True
alive = 0
while time.time() < deadline:
    if head and head_ended():
        print("qm: the Ray head ended", file=sys.stderr)
        sys.exit(3)  # HEAD_ENDED
    host, _, port = os.environ["QM_RAY_ADDRESS"].rpartition(":")
    try:
        if not ray.is_initialized():
            socket.create_connection((host, int(port)), timeout=2).close()
            ray.init(address=os.environ["QM_RAY_ADDRESS"], logging_level="ERROR", log_to_driver=False)
        alive = sum(1 for node in ray.nodes() if node["Alive"])
    except Exception:  # the head is not up yet
        pass
    if alive >= want:
        sys.exit(0)
    time.sleep(1)
print(f"qm: only {alive} of {want} Ray nodes joined in time", file=sys.stderr)
sys.exit(1)"""

#: The entrypoint's exit code from Ray's record of the job (1 if Ray has none, e.g. it never started).
EXIT_CODE = """import sys
from ray.job_submission import JobSubmissionClient
info = JobSubmissionClient(sys.argv[1]).get_job_info(sys.argv[2])
code = info.driver_exit_code
print(1 if code is None else code)"""
