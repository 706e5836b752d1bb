"""Ray jobs on Slurm (``clusters/backends/slurm/ray.py``): the heterogeneous allocation and the batch script,
then real Ray (``deploy/slurm-lab/ray-venv.sh``) on the real Slurm lab: the entrypoint runs remote tasks on
the workers' Ray nodes and the job ends with the entrypoint's exit code; the dashboard link comes back."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

import pytest
import requests

from clusters.backends.base import InvalidJob, JobSpec, JobState, JobStatus
from clusters.backends.slurm import ray as slurm_ray
from clusters.backends.slurm.backend import SlurmBackend
from clusters.backends.slurm.script import batch_script
from clusters.backends.slurm.versions import LEGACY
from tests.clusters.slurm_lab import SlurmLab

RAY_VENV = Path(os.environ.get("QM_RAY_VENV", "/var/cache/quartermaster/ray-venv"))
RAY_OPTIONS: dict[str, Any] = {
    "ray_setup": f"source {RAY_VENV}/bin/activate",
    "ray_dashboard": "http://127.0.0.1:{port}",  # the lab's nodes are this machine
}
#: The entrypoint of the lab tests: remote tasks spread over the Ray nodes, then the exit code asked for.
PROGRAM = """import os, sys, time
import ray
ray.init()
@ray.remote(num_cpus=1, scheduling_strategy="SPREAD")
def where():
    time.sleep(0.5)
    return ray.get_runtime_context().get_node_id(), os.environ.get("GREETING")
answers = ray.get([where.remote() for _ in range(8)])
alive = [n for n in ray.nodes() if n["Alive"]]
print("qm-ray-nodes", len(alive), "used", len({node for node, _ in answers}), "greeting", answers[0][1], flush=True)
sys.exit(int(sys.argv[1]))
"""


def ray_spec(job_id: str, *, nodes: tuple[str, ...] = (), head_node: str = "", **fields: Any) -> JobSpec:
    values: dict[str, Any] = {
        "id": job_id,
        "name": "ray test",
        "workers": len(nodes) or 2,
        "accelerators_per_worker": 1,
        "cpu_per_worker": 2000,
        "memory_per_worker": 2048,
        "nodes": nodes,
        "time_limit": 600,
        "kind": "ray",
        "entrypoint": "python main.py 0",
        "runtime_env": {"env_vars": {"GREETING": "hello"}},
        "head": (0, 1000, 2048),
        "head_node": head_node,
    }
    return JobSpec(**{**values, **fields})


# --- the allocation and the script (no Slurm needed) ---------------------------------------------------------


def workers_of(spec: JobSpec) -> dict[str, Any]:
    backend = SlurmBackend("http://127.0.0.1:1", {"user": "root", "token": "t"}, {})
    return backend._job_properties(spec)


def test_the_head_and_the_workers_with_it_are_one_task_and_the_other_workers_a_second_component() -> None:
    spec = ray_spec("7-1", nodes=("lab-node2", "lab-node2", "lab-node3"), head_node="lab-node2")
    body = slurm_ray.submit_body(LEGACY, "#!/bin/bash", spec, workers_of(spec))
    head, rest = body["jobs"]
    assert body["script"] == "#!/bin/bash"
    # The head (1 core, 2 GiB) and two workers (2 cores, 1 GPU, 2 GiB each) on lab-node2: one task.
    assert (head["tasks"], head["cpus_per_task"], head["gpus_per_task"], head["nodelist"]) == (1, 5, "2", "lab-node2")
    assert head["memory_per_cpu"] * head["cpus_per_task"] >= 2048 * 3
    assert (rest["tasks"], rest["cpus_per_task"], rest["gpus_per_task"], rest["nodelist"]) == (1, 2, "1", "lab-node3")
    assert head["comment"].startswith(slurm_ray.COMMENT)
    assert rest["name"] == head["name"] == "qm-7-1"


def test_a_ray_job_whose_workers_are_all_with_the_head_is_a_plain_job_and_a_plain_job_is_unchanged() -> None:
    spec = ray_spec("7-2", nodes=("lab-node1", "lab-node1"), head_node="lab-node1")
    body = slurm_ray.submit_body(LEGACY, "S", spec, workers_of(spec))
    assert set(body) == {"script", "job"}
    assert body["job"]["cpus_per_task"] == 1 + 2 * 2
    plain = ray_spec("8-1", nodes=("lab-node1",), kind="job", command=("true",), entrypoint="")
    assert slurm_ray.submit_body(LEGACY, "S", plain, workers_of(plain)) == {"script": "S", "job": workers_of(plain)}


def test_a_head_on_a_node_of_its_own_asks_for_its_own_shape_there() -> None:
    spec = ray_spec("7-3", nodes=("lab-node1", "lab-node2"), head_node="lab-node4", head=(1, 3000, 8192))
    head, rest = slurm_ray.submit_body(LEGACY, "S", spec, workers_of(spec))["jobs"]
    assert (head["cpus_per_task"], head["gpus_per_task"], head["nodelist"]) == (3, "1", "lab-node4")
    assert (rest["tasks"], rest["nodelist"], rest["tasks_per_node"]) == (2, "lab-node1,lab-node2", 1)


def test_newer_data_parsers_get_the_components_in_their_words_with_the_script_in_the_heads() -> None:
    spec = ray_spec("7-8", nodes=("lab-node2", "lab-node3"), head_node="lab-node2")
    head, rest = slurm_ray.submit_body("v0.0.42", "#!/bin/bash", spec, workers_of(spec))["jobs"]
    assert (head["script"], head["required_nodes"], rest["required_nodes"]) == (
        "#!/bin/bash",
        ["lab-node2"],
        ["lab-node3"],
    )
    assert "script" not in rest
    assert rest["tres_per_task"] == "gres/gpu:1"


def test_the_script_starts_the_head_then_the_workers_then_submits_the_entrypoint() -> None:
    spec = ray_spec("7-4", nodes=("lab-node2", "lab-node3"), head_node="lab-node2", entrypoint="python main.py 'a b'")
    text = batch_script(spec, {"ray_setup": "module load ray"})
    assert text.startswith("#!/bin/bash\n")
    assert text.index("module load ray") < text.index("ray start --head") < text.index("srun --het-group=1")
    assert text.index("srun --het-group=1") < text.index("ray job submit") < text.index('exit "${QM_EXIT:-1}"')
    assert "python main.py 'a b'" in text  # in a quoted here-document: run as typed
    assert "--num-cpus=2 --num-gpus=1" in text  # the head's node: 1 core of head and one 2-core worker
    assert '"GREETING": "hello"' in text
    # its Ray's own directory: Slurm job ids repeat across the Slurm clusters of one machine, attempts do not
    # and each run of it (Slurm requeues it when a node is lost) a directory of its own in that
    run = "run-${SLURM_RESTART_COUNT:-0}"
    assert f'QM_RAY_DIR="${{TMPDIR:-/tmp}}/qm-ray-$SLURM_JOB_ID-{slurm_ray.ray_dir_name("7-4")}/{run}"' in text
    assert slurm_ray.ray_dir_name("7-4") != slurm_ray.ray_dir_name("7-5")
    alone = batch_script(ray_spec("7-5", nodes=("lab-node1",), head_node="lab-node1"), {})
    assert "srun" not in alone
    assert "qm_ray_wait 1 ||" in alone


def test_a_ray_job_without_an_entrypoint_or_with_the_reserved_marker_is_invalid() -> None:
    with pytest.raises(InvalidJob, match="no entrypoint"):
        batch_script(ray_spec("7-6", entrypoint=" "), {})
    with pytest.raises(InvalidJob, match="reserved"):
        batch_script(ray_spec("7-7", entrypoint=f"echo {slurm_ray.END_OF_ENTRYPOINT}"), {})


def test_the_dashboard_link_needs_the_clusters_word_and_the_jobs_port() -> None:
    said = {"comment": f"{slurm_ray.COMMENT} 7-1 ray-dashboard-port=43210"}
    options = {"ray_dashboard": "https://{node}.lab.example:{port}/"}
    assert slurm_ray.dashboard_url(options, said, ("lab-node2",)) == "https://lab-node2.lab.example:43210/"
    assert slurm_ray.dashboard_url({}, said, ("lab-node2",)) == ""  # the cluster does not say how to reach it
    assert slurm_ray.dashboard_url(options, {"comment": f"{slurm_ray.COMMENT} 7-1"}, ("n",)) == ""  # not up yet
    assert slurm_ray.dashboard_url(options, {"comment": "Quartermaster job 7-1 ray-dashboard-port=1"}, ("n",)) == ""
    assert slurm_ray.dashboard_url({"ray_dashboard": "http://{host}"}, said, ("n",)) == ""  # a bad template


# --- real Ray on the Slurm lab ---------------------------------------------------------------------------------


def needs_ray(lab: SlurmLab | None = None) -> Path:
    """Where Ray is for the jobs of ``lab`` (the host's, or inside its root filesystem), as seen from here;
    the test skips without it (fails in CI, where ``.ci/run`` builds it)."""
    venv = lab.spec.path(RAY_VENV) if lab else RAY_VENV
    if not (venv / "bin" / "ray").exists():
        root = lab.spec.root if lab else None
        message = f"Ray is not installed in {venv} (deploy/slurm-lab/ray-venv.sh {root or ''})"
        if os.environ.get("CI", "").lower() in ("true", "1"):
            pytest.fail(message, pytrace=False)
        pytest.skip(message)
    return venv


@pytest.fixture(scope="module")
def ray_venv() -> Path:
    """Ray on the host, for the jobs of the 22.05 lab."""
    return needs_ray()


def wait_until(backend: SlurmBackend, job: str, done: Any, seconds: float = 180) -> JobStatus:
    deadline = time.monotonic() + seconds
    status = backend.status(job)
    while not done(status) and time.monotonic() < deadline:
        time.sleep(1)
        status = backend.status(job)
    return status


def ended(status: JobStatus) -> bool:
    return status.state in (JobState.SUCCEEDED, JobState.FAILED, JobState.CANCELLED)


@pytest.mark.slurm
def test_a_ray_job_runs_remote_tasks_on_its_workers_and_ends_with_the_entrypoints_code(
    slurm_lab: SlurmLab, tmp_path: Path
) -> None:
    """On each lab (24.11's jobs run inside its root filesystem, with the root's Python and Ray), two Ray jobs
    on real Ray and real Slurm: one exits 0 (succeeded), one exits 3 (failed, exit code 3). Each has a head
    with one worker on lab-node3 and one worker on lab-node1: a Ray cluster of two Ray nodes, whose remote
    tasks run on both; the dashboard answers at the link while it runs. (Not lab-node2: test_slurm_backend
    counts what its own job uses there, and lab-node4 it drains.)"""
    needs_ray(slurm_lab)
    (tmp_path / "main.py").write_text(PROGRAM)
    backend = slurm_lab.backend(workdir=str(tmp_path), **RAY_OPTIONS)
    runs = {}
    for code in (0, 3):
        spec = ray_spec(
            f"ray-{code}-{time.time_ns()}",
            nodes=("lab-node3", "lab-node1"),
            head_node="lab-node3",
            entrypoint=f"python {tmp_path / 'main.py'} {code}",
        )
        started = time.monotonic()
        submitted = backend.submit(spec)
        assert isinstance(submitted, str)
        runs[code] = (submitted, started)
    job, _ = runs[0]
    running = wait_until(backend, job, lambda s: ended(s) or bool(s.dashboard_url))
    if running.dashboard_url:  # the dashboard itself, where the link says
        assert requests.get(running.dashboard_url, timeout=10).ok
    for code, (job, started) in runs.items():
        status = wait_until(backend, job, ended)
        output = (tmp_path / f"slurm-{job}.out").read_text()
        assert "qm-ray-nodes 2 used 2 greeting hello" in output, output[-3000:]
        if code == 0:
            assert (status.state, status.reason, status.exit_code) == (JobState.SUCCEEDED, "", None), output[-2000:]
        else:
            assert (status.state, status.exit_code) == (JobState.FAILED, 3), output[-2000:]
        took = [line for line in output.splitlines() if line.startswith("qm: Ray is up")]
        print(
            f"Slurm {slurm_lab.version}: Ray job {job} (exit {code}): {took[0] if took else '?'};"
            f" {time.monotonic() - started:.1f} s in all"
        )
    assert running.dashboard_url.startswith("http://127.0.0.1:"), running


@pytest.mark.slurm
def test_a_ray_that_cannot_start_fails_the_job_and_says_why(slurm_lab: SlurmLab, tmp_path: Path) -> None:
    """On each lab (each data parser: the heterogeneous job is accepted in its words), a cluster whose
    ray_setup leaves no Ray on PATH: the head does not start, the job fails (exit 1) saying so."""
    backend = slurm_lab.backend(workdir=str(tmp_path), ray_setup=f"export PATH={tmp_path}/no-ray:/usr/bin:/bin")
    spec = ray_spec(f"ray-none-{time.time_ns()}", nodes=("lab-node4",), head_node="lab-node3")
    job = backend.submit(spec)
    assert isinstance(job, str)
    status = wait_until(backend, job, ended, seconds=60)
    output = (tmp_path / f"slurm-{job}.out").read_text()
    assert (status.state, status.exit_code) == (JobState.FAILED, 1), output
    assert "qm: the Ray head did not start" in output
    assert "ray: command not found" in output or "python: command not found" in output, output
