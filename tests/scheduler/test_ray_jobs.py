"""Ray jobs end to end: submitted through the API, the form and ``qm`` (bad input a 400 naming the field),
placed as a gang with their head (quota counts it; the head's node reaches the backend), the dashboard
link shown; and on the real Slurm lab with real Ray, through the placement loop, success and failure."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest

from clusters.actions import sync
from clusters.backends.base import JobState, JobStatus
from clusters.models import Cluster
from scheduler.models import Attempt, Job
from scheduler.placement import dispatch, feasibility, follow
from tests.clusters.conftest import slurm_lab_2205  # noqa: F401 - the Slurm 22.05 lab: its jobs see the host's Ray
from tests.clusters.slurm_lab import SlurmLab
from tests.clusters.test_slurm_ray import PROGRAM, RAY_OPTIONS, ray_venv  # noqa: F401 - the Ray fixture
from tests.scheduler.conftest import Fleet
from tests.scheduler.test_cli import qm, server  # noqa: F401 - the live server fixture
from tests.scheduler.test_pages import form_data, signed_in

pytestmark = pytest.mark.django_db

JOBS = "/api/v1/jobs/"
RAY: dict[str, Any] = {
    "team": "vision",
    "name": "rl",
    "time_limit": "1h",
    "kind": "ray",
    "entrypoint": "python train.py --env cartpole",
    "runtime_env": {"pip": ["gymnasium==1.0.0"], "env_vars": {"SEED": "7"}, "working_dir": "/shared/rl"},
    "workers": 2,
    "accelerators": 4,
    "cpu": 8,
    "memory_gib": 32,
    "head_cpu": 2,
    "head_memory_gib": 8,
    "head_accelerators": 0,
}


def submit(api: Any, **fields: Any) -> Any:
    return api("alice").post(JOBS, {**RAY, **fields}, format="json")


# --- submission --------------------------------------------------------------------------------------------


def test_a_ray_job_is_taken_in_peoples_units_and_read_back(fleet: Fleet, api: Any) -> None:
    response = submit(api)
    assert response.status_code == 201, response.json()
    job = Job.objects.get()
    assert (job.kind, job.entrypoint, job.runtime_env) == ("ray", RAY["entrypoint"], RAY["runtime_env"])
    assert (job.head_cpu, job.head_memory, job.head_accelerators) == (2000, 8192, 0)
    body = api("alice").get(f"{JOBS}{job.pk}/").json()
    assert (body["kind"], body["head_cpu"], body["head_memory_gib"], body["runtime_env"]) == (
        "ray",
        2.0,
        8.0,
        RAY["runtime_env"],
    )


@pytest.mark.parametrize(
    ("fields", "field", "words"),
    [
        ({"entrypoint": ""}, "entrypoint", "needs an entrypoint"),
        ({"entrypoint": "   "}, "entrypoint", "needs an entrypoint"),
        ({"runtime_env": ["numpy"]}, "runtime_env", "JSON object"),
        ({"runtime_env": {"conda": "env.yaml"}}, "runtime_env", "Unknown runtime environment key(s): conda"),
        ({"runtime_env": {"pip": "numpy"}}, "runtime_env", "runtime_env.pip must be a list"),
        ({"runtime_env": {"env_vars": {"SEED": 7}}}, "runtime_env", "runtime_env.env_vars must be"),
        ({"runtime_env": {"env_vars": {"QM_JOB_TOKEN": "x"}}}, "runtime_env", "QM_ names are reserved"),
        ({"runtime_env": {"config": {"setup_timeout_seconds": "soon"}}}, "runtime_env", "runtime_env.config"),
        ({"runtime_env": {"config": {"setup_timeout_seconds": True}}}, "runtime_env", "runtime_env.config"),
        ({"runtime_env": {"pip": {"packages": ["x"], "index": "y"}}}, "runtime_env", "runtime_env.pip"),
        ({"kind": "spark"}, "kind", ""),
        ({"command": ["python", "x.py"]}, "command", "leave the command empty"),
        ({"script": "#!/bin/bash\necho hi"}, "image", "not a batch script"),
        ({"head_cpu": 0}, "head_cpu", ""),
        ({"head_accelerators": 99}, "head_accelerators", "between 0 and 64"),
        ({"head_cpu": 1000}, "head_cpu", "has 110 CPU cores"),  # no node has 1,000 cores: under the head's field
    ],
)
def test_bad_ray_input_is_a_400_naming_the_field(
    fleet: Fleet, api: Any, fields: dict[str, Any], field: str, words: str
) -> None:
    response = submit(api, **fields)
    assert response.status_code == 400, response.json()
    problems = response.json()["error"]["fields"]
    assert field in problems, problems
    assert words in " ".join(problems[field])
    assert not Job.objects.exists()


def test_ray_fields_on_a_plain_job_are_refused_by_name(fleet: Fleet, api: Any) -> None:
    plain = {"kind": "job", "image": "ghcr.io/lab/train:1", "command": ["python", "train.py"]}
    response = submit(api, **plain)
    problems = response.json()["error"]["fields"]
    assert response.status_code == 400
    assert {"entrypoint", "runtime_env", "head_cpu", "head_memory_gib", "head_accelerators"} <= set(problems)
    assert "Only a Ray job" in " ".join(problems["entrypoint"])


# --- placement: the head is one more member of the gang ------------------------------------------------------


def test_the_head_is_placed_counted_and_handed_to_the_backend(fleet: Fleet) -> None:
    """Two 8-GPU workers fill two nodes; a 1-GPU head cannot ride with them, so it gets a node of its own,
    recorded as an assignment of no workers; the backend is told where it is."""
    job = fleet.submit(
        kind="ray",
        entrypoint="python main.py",
        image="",
        command=[],
        workers=2,
        accelerators=8,
        head_accelerators=1,
        head_cpu=2000,
        head_memory=4096,
        clusters=[fleet.clusters["east"]],
    )
    fleet.cycle()
    job.refresh_from_db()
    attempt = job.attempts.get()
    rows = list(attempt.assignments.select_related("node").order_by("pk"))
    head = [a for a in rows if a.workers == 0]
    assert [len(a.accelerators) for a in rows if a.workers] == [8, 8]
    assert len(head) == 1
    assert (len(head[0].accelerators), head[0].cpu, head[0].memory) == (1, 2000, 4096)
    spec = dispatch.spec_for(attempt)
    assert spec.kind == "ray"
    assert spec.head_node == head[0].node.name
    assert spec.head == (1, 2000, 4096)
    assert len(spec.nodes) == 2
    assert head[0].node.name not in spec.nodes


def test_the_attempt_holds_the_heads_accelerators_beside_the_workers(fleet: Fleet) -> None:
    """One 1-GPU worker and a 1-GPU head: both fit one node, so the head rides there; the attempt holds two
    GPUs (what the meter and the quota count), and the backend is told which node is the head's."""
    job = fleet.submit(
        kind="ray", entrypoint="python main.py", image="", command=[], workers=1, accelerators=1, head_accelerators=1
    )
    fleet.cycle()
    attempt = Attempt.objects.get(job=job)
    (only,) = attempt.assignments.select_related("node")
    assert (only.workers, len(only.accelerators), only.cpu) == (1, 2, 1000 + job.head_cpu)
    assert dispatch.spec_for(attempt).head_node == only.node.name


def test_the_clusters_dashboard_link_is_kept_and_shown(fleet: Fleet, api: Any) -> None:
    job = fleet.submit(kind="ray", entrypoint="python main.py", image="", command=[])
    fleet.cycle()
    attempt = Attempt.objects.get(job=job)
    for said in ("javascript:alert(1)", ""):  # only an http(s) address is a link
        follow.note_dashboard(attempt, JobStatus(attempt.backend_id, JobState.RUNNING, dashboard_url=said))
    attempt.refresh_from_db()
    assert attempt.dashboard_url == ""
    url = "http://lab-node2.example:8265"
    follow.note_dashboard(attempt, JobStatus(attempt.backend_id, JobState.RUNNING, dashboard_url=url))
    attempt.refresh_from_db()
    assert attempt.dashboard_url == url
    fleet.follow()
    page = signed_in(fleet, "alice").get(f"/jobs/{job.pk}/").content.decode()
    assert f'href="{url}"' in page
    assert "python main.py" in page
    attempts = api("alice").get(f"{JOBS}{job.pk}/").json()["attempts"]
    assert attempts[0]["dashboard_url"] == url


# --- the form -------------------------------------------------------------------------------------------------


def test_the_form_submits_a_ray_job_and_names_what_is_wrong(fleet: Fleet) -> None:
    client = signed_in(fleet, "alice")
    page = client.get("/jobs/new/").content.decode()
    assert 'data-testid="ray-section"' in page
    ray = {
        "kind": "ray",
        "image": "",
        "command": "",
        "accelerators": 1,
        "entrypoint": "python main.py",
        "runtime_env": '{"env_vars": {"SEED": "1"}}',
        "head_cpu_cores": "2",
        "head_memory_gib": "8",
        "head_accelerators": 0,
    }
    bad = client.post("/jobs/new/", form_data(fleet, **{**ray, "entrypoint": "", "runtime_env": "{not json"}))
    assert bad.status_code == 400
    text = bad.content.decode()
    assert "A Ray job needs an entrypoint" in text
    assert "Not JSON" in text
    assert not Job.objects.exists()
    done = client.post("/jobs/new/", form_data(fleet, **ray))
    assert done.status_code == 302, done.content.decode()[-2000:]
    job = Job.objects.get()
    assert (job.kind, job.entrypoint, job.runtime_env, job.head_cpu, job.head_memory) == (
        "ray",
        "python main.py",
        {"env_vars": {"SEED": "1"}},
        2000,
        8192,
    )
    clone = client.get(f"/jobs/{job.pk}/clone/").content.decode()
    assert "python main.py" in clone


def test_a_plain_job_from_the_form_is_still_a_plain_job(fleet: Fleet) -> None:
    client = signed_in(fleet, "alice")
    assert client.post("/jobs/new/", form_data(fleet)).status_code == 302
    job = Job.objects.get()
    assert (job.kind, job.entrypoint, job.runtime_env) == ("job", "", {})


# --- qm ---------------------------------------------------------------------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_qm_submits_a_ray_job_from_options_or_a_job_file(server: Fleet, tmp_path: Path, capsys: Any) -> None:  # noqa: F811
    env = tmp_path / "env.json"
    env.write_text(json.dumps({"pip": ["numpy"], "env_vars": {"SEED": "3"}}))
    status, out, err = qm(
        capsys,
        "submit",
        "--ray",
        "--name",
        "rl",
        "--time-limit",
        "1h",
        "--entrypoint",
        "python main.py",
        "--runtime-env",
        str(env),
        "--head-cpu",
        "2",
    )
    assert status == 0, err
    job = Job.objects.get(name="rl")
    assert (job.kind, job.entrypoint, job.runtime_env, job.head_cpu) == (
        "ray",
        "python main.py",
        {"pip": ["numpy"], "env_vars": {"SEED": "3"}},
        2000,
    )
    status, out, _ = qm(capsys, "show", str(job.pk))
    assert "Ray: python main.py (head: 0 accelerators, 2 cores, 4 GiB)" in out
    job_file = tmp_path / "ray.yaml"
    job_file.write_text("name: rl2\ntime_limit: 1h\nkind: ray\nentrypoint: python main.py\nworkers: 2\n")
    status, out, err = qm(capsys, "submit", str(job_file))
    assert status == 0, err
    assert Job.objects.get(name="rl2").kind == "ray"
    job_file.write_text("name: rl3\ntime_limit: 1h\nkind: ray\n")
    status, out, err = qm(capsys, "submit", str(job_file))
    assert status == 2, out
    assert "entrypoint" in err
    status, _, err = qm(capsys, "submit", "--ray", "--name", "x", "--time-limit", "1h", "--runtime-env", "/nope")
    assert status == 2
    assert "Cannot read /nope" in err


# --- real Ray on the real Slurm lab, through the placement loop -----------------------------------------------------


@pytest.mark.slurm
def test_a_ray_job_runs_on_real_ray_through_the_loop_and_its_exit_code_comes_back(
    fleet: Fleet,
    slurm_lab_2205: SlurmLab,  # noqa: F811
    ray_venv: Path,  # noqa: F811
    tmp_path: Path,
) -> None:
    (tmp_path / "main.py").write_text(PROGRAM)
    cluster = Cluster.objects.create(
        organization=fleet.org,
        name="Slurm lab",
        slug="slurm-lab",
        kind="slurm",
        endpoint=slurm_lab_2205.endpoint,
        region="eu",
        options={**slurm_lab_2205.options, "workdir": str(tmp_path), **RAY_OPTIONS},
    )
    cluster.set_credentials({"user": "root", "token": slurm_lab_2205.token})
    cluster.save()
    assert sync.sync_cluster(cluster.pk).ok
    feasibility.forget(fleet.org)
    jobs = {
        code: fleet.submit(
            name=f"ray-{code}",
            kind="ray",
            image="",
            command=[],
            entrypoint=f"python {tmp_path / 'main.py'} {code}",
            runtime_env={"env_vars": {"GREETING": "hello"}},
            workers=2,
            accelerators=8,  # a worker a node: the head rides with the first, the second is a Ray node of its own
            cpu=2000,
            memory=2048,
            head_cpu=1000,
            head_memory=2048,
            clusters=[cluster],
            max_retries=0,  # a failure is the job's end, not a retry
        )
        for code in (0, 5)
    }
    fleet.cycle()
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline:
        if Job.objects.filter(pk__in=[job.pk for job in jobs.values()], attempts__isnull=True).exists():
            # the lab is shared with other tests: a job that found its nodes busy is placed when they free,
            # as the loop's next rounds would (the sync sees them free, the cycle places it)
            sync.sync_cluster(cluster.pk)
            fleet.cycle()
        follow.follow(cluster.pk)
        states = {code: Job.objects.get(pk=job.pk).state for code, job in jobs.items()}
        if all(state in (Job.State.SUCCEEDED, Job.State.FAILED) for state in states.values()):
            break
        time.sleep(1)
    for code, job in jobs.items():
        job.refresh_from_db()
        events = list(job.events.values_list("reason", "message"))
        assert job.attempts.count() == 1, (job.state, job.pending_reason, events)
        attempt = job.attempts.get()
        written = tmp_path / f"slurm-{attempt.backend_id}.out"
        assert written.exists(), events
        output = written.read_text()
        assert "qm-ray-nodes 2 used 2 greeting hello" in output, output[-3000:]
        assert attempt.dashboard_url.startswith("http://127.0.0.1:"), attempt.dashboard_url
        if code == 0:
            assert job.state == Job.State.SUCCEEDED, list(job.events.values_list("reason", "message"))
        else:
            assert job.state == Job.State.FAILED, list(job.events.values_list("reason", "message"))
            assert (attempt.outcome, attempt.exit_code) == (Attempt.Outcome.FAILED, 5)
