"""The simulated cluster's state file survives a process that dies while writing it (the chaos tests kill
workers in the middle of a submit): the jobs it held are still there, and the file is still readable. And
its injected faults, in memory and in a state file, behave as the backend's docstring says."""

from __future__ import annotations

import json
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from clusters.backends.base import Failure, InvalidJob, JobSpec, JobState, Unreachable, permanent
from clusters.backends.simulated import clear, inject
from clusters.backends.simulated.backend import SimulatedBackend


def spec(key: str) -> JobSpec:
    return JobSpec(
        id=key,
        name="train",
        workers=1,
        accelerators_per_worker=1,
        cpu_per_worker=1,
        memory_per_worker=1,
        nodes=(),
        time_limit=60,
        image="img",
        command=("true",),
    )


def test_a_write_that_dies_half_way_leaves_the_previous_state_whole(tmp_path: Path) -> None:
    path = tmp_path / "east.json"
    cluster = SimulatedBackend("east", options={"state_file": str(path)})
    cluster.submit(spec("1-1"))
    cluster.submit(spec("2-1"))

    # The write fails after the file was opened for it, as a killed process's would: here because the new
    # state cannot be serialised, half-way through the jobs.
    with pytest.raises(TypeError), cluster._state(write=True) as state:
        state["jobs"]["3-1"] = {"submitted": object()}

    assert cluster.find("1-1") == "1-1"
    assert cluster.find("2-1") == "2-1"
    assert cluster.find("3-1") is None
    assert sorted(path.parent.glob("*.json")) == [path]
    cluster.submit(spec("3-1"))  # and the cluster goes on
    assert cluster.find("3-1") == "3-1"


# ------------------------------------------------------------------------------------ fault injection


def gang(key: str, workers: int = 1, **fields: Any) -> JobSpec:
    return replace(spec(key), workers=workers, **fields)


@pytest.fixture(params=["memory", "state_file"])
def where(request: pytest.FixtureRequest, tmp_path: Path) -> tuple[str, str]:
    """(endpoint, state file): the faults of a cluster kept in this process's memory, and in a state file."""
    endpoint = f"faults-{request.node.name}-{time.time_ns()}"
    return endpoint, str(tmp_path / "faults.json") if request.param == "state_file" else ""


def cluster(where: tuple[str, str], **options: object) -> SimulatedBackend:
    endpoint, state_file = where
    return SimulatedBackend(endpoint, options={**({"state_file": state_file} if state_file else {}), **options})


def test_a_refused_submission_is_permanent_until_cleared(where: tuple[str, str]) -> None:
    inject(where[0], "submit_refused", state_file=where[1], message="quota policy forbids 64 GPUs")
    with pytest.raises(InvalidJob, match="quota policy forbids 64 GPUs") as refused:
        cluster(where).submit(spec("1"))
    assert permanent(refused.value)
    assert cluster(where).find("1") is None
    clear(where[0], state_file=where[1])
    assert cluster(where).submit(spec("1")) == "1"


def test_a_transient_submit_error_fails_the_next_n_calls_then_mends(where: tuple[str, str]) -> None:
    cluster(where).inject("submit_error", times=2)
    for _ in range(2):
        with pytest.raises(Unreachable) as failed:
            cluster(where).submit(spec("1"))
        assert not permanent(failed.value)
        assert cluster(where).find("1") is None
    assert cluster(where).submit(spec("1")) == "1"


def test_an_unreachable_cluster_answers_nothing_until_cleared(where: tuple[str, str]) -> None:
    cluster(where).submit(spec("1"))
    inject(where[0], "unreachable", state_file=where[1])
    sim = cluster(where)
    calls = [
        sim.inventory,
        sim.health,
        lambda: sim.status("1"),
        lambda: sim.find("1"),
        lambda: sim.submit(spec("2")),
        lambda: sim.cancel("1"),
        lambda: sim.signal("1", 30),
        lambda: sim.cordon("h100-00000", "x"),
        lambda: sim.drain("h100-00000", "x"),
        lambda: sim.resume("h100-00000"),
    ]
    for call in calls:
        with pytest.raises(Unreachable, match="does not answer"):
            call()
    clear(where[0], "unreachable", state_file=where[1])
    assert sim.status("1").state is JobState.RUNNING  # the job ran on meanwhile


@pytest.mark.parametrize(
    ("fault", "params", "reason", "exit_code"),
    [
        ("exit_code", {"code": 3}, Failure.EXIT_CODE, 3),
        ("oom", {}, Failure.OOM_KILLED, 137),
        ("node_lost", {}, Failure.NODE_LOST, None),
    ],
)
def test_a_job_fails_as_injected(
    where: tuple[str, str], fault: str, params: dict[str, object], reason: str, exit_code: int | None
) -> None:
    sim = cluster(where)
    sim.inject(fault, after=60, **params)
    sim.submit(gang("1", workers=2))
    running = sim.status("1")
    assert (running.state, running.workers_running) == (JobState.RUNNING, 2)  # not yet: 60 s in
    _later(sim, "1", 61)
    failed = sim.status("1")
    assert (failed.state, failed.reason, failed.exit_code, failed.workers_running) == (
        JobState.FAILED,
        reason,
        exit_code,
        0,
    )
    sim.clear(fault)
    sim.submit(spec("2"))
    assert sim.status("2").state is JobState.RUNNING  # later jobs are well again


def test_an_image_that_cannot_be_pulled_keeps_the_job_pending(where: tuple[str, str]) -> None:
    sim = cluster(where)
    sim.inject("image_pull", message="ErrImagePull: ghcr.io/acme/nope:1 not found", job="1")
    sim.submit(spec("1"))
    sim.submit(spec("2"))  # the fault names job 1 only
    status = sim.status("1")
    assert (status.state, status.reason, status.workers_running) == (JobState.PENDING, Failure.IMAGE_PULL, 0)
    assert status.message == "ErrImagePull: ghcr.io/acme/nope:1 not found"
    assert sim.status("2").state is JobState.RUNNING


def test_a_partial_gang_is_pending_with_some_workers_running(where: tuple[str, str]) -> None:
    sim = cluster(where)
    sim.inject("partial_gang", running=3)
    sim.submit(gang("1", workers=4, nodes=("h100-00000", "h100-00001", "h100-00002", "h100-00003")))
    status = sim.status("1")
    assert (status.state, status.reason, status.workers_running) == (JobState.PENDING, Failure.UNSCHEDULABLE, 3)
    assert status.message.startswith("3 of 4 workers running")


def test_a_job_that_ignores_sigterm_runs_on_until_cancelled(where: tuple[str, str]) -> None:
    sim = cluster(where, checkpoint_seconds=0)
    sim.inject("ignore_sigterm")
    sim.submit(spec("1"))
    assert sim.signal("1", 30) is None
    _later(sim, "1", 31)
    assert sim.status("1").state is JobState.RUNNING
    sim.cancel("1")
    assert sim.status("1").state is JobState.CANCELLED


def test_a_job_exits_its_checkpoint_seconds_after_sigterm(where: tuple[str, str]) -> None:
    sim = cluster(where)
    sim.inject("checkpoint_seconds", seconds=20)
    sim.submit(spec("1"))
    sim.signal("1", 60)
    assert sim.status("1").state is JobState.RUNNING
    _later(sim, "1", 21)
    assert (sim.status("1").state, sim.status("1").message) == (JobState.CANCELLED, "exited after SIGTERM")


def test_unknown_faults_and_parameters_are_refused(where: tuple[str, str]) -> None:
    with pytest.raises(ValueError, match="unknown simulated fault 'meteor'"):
        cluster(where).inject("meteor")
    with pytest.raises(ValueError, match="fault oom takes after, job"):
        cluster(where).inject("oom", code=3)


def test_a_cluster_that_runs_no_containers_refuses_a_job_with_an_image(where: tuple[str, str]) -> None:
    with pytest.raises(InvalidJob, match="runs no containers"):
        cluster(where, runs=["batch_scripts"]).submit(spec("1"))
    assert cluster(where, runs=["batch_scripts"]).submit(replace(spec("2"), image="")) == "2"


def _later(sim: SimulatedBackend, job_id: str, seconds: float) -> None:
    """Move the job's clock on ``seconds``, as the scheduler tests' ``Fleet.run_for`` does."""
    with sim._state(write=True) as state:
        job = state["jobs"][job_id]
        job["submitted"] -= seconds
        if job.get("exits_at") is not None:
            job["exits_at"] -= seconds


def test_the_inventory_counts_what_running_jobs_hold_and_ended_jobs_are_forgotten(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from clusters.backends.simulated import backend as simulated

    path = tmp_path / "east.json"
    cluster = SimulatedBackend("east", options={"state_file": str(path), "profile": "h100-onprem", "nodes": 4})
    gang = replace(
        spec("1-1"),
        workers=3,
        accelerators_per_worker=4,
        cpu_per_worker=2000,
        memory_per_worker=1024,
        nodes=("h100-00000", "h100-00000", "h100-00001"),
        env={"SIM_RUN_SECONDS": "30"},
    )
    cluster.submit(gang)
    used = {n.name: (n.accelerators_used, n.cpu_used, n.memory_used) for n in cluster.inventory().nodes}
    assert used == {
        "h100-00000": (8, 4000, 2048),
        "h100-00001": (4, 2000, 1024),
        "h100-00002": (0, 0, 0),
        "h100-00003": (0, 0, 0),
    }
    # It runs SIM_RUN_SECONDS, not its whole limit; ended, it holds nothing.
    assert cluster.status("1-1").state is JobState.RUNNING
    ended = float(json.loads(path.read_text())["jobs"]["1-1"]["submitted"]) + 31
    monkeypatch.setattr(time, "time", lambda: ended)
    assert cluster.status("1-1").state is JobState.SUCCEEDED
    assert {n.accelerators_used for n in cluster.inventory().nodes} == {0}
    # Kept an hour after it ended (its status and output readable), then forgotten at the next submission.
    cluster.submit(spec("2-1"))
    assert cluster.find("1-1") == "1-1"
    later = ended + simulated.KEEP_ENDED_SECONDS + 1
    monkeypatch.setattr(time, "time", lambda: later)
    cluster.submit(spec("3-1"))
    assert cluster.find("1-1") is None
    assert cluster.find("3-1") == "3-1"


def test_shares_of_a_gpu_are_counted_together(tmp_path: Path) -> None:
    cluster = SimulatedBackend("east", options={"state_file": str(tmp_path / "east.json"), "nodes": 2})
    for key in ("1-1", "2-1", "3-1", "4-1", "5-1"):
        cluster.submit(replace(spec(key), nodes=("h100-00000",), accelerator_milli=250))
    used = {n.name: n.accelerators_used for n in cluster.inventory().nodes}
    assert used == {"h100-00000": 2, "h100-00001": 0}  # five quarters: two GPUs, not five


def test_a_bad_run_time_is_refused(tmp_path: Path) -> None:
    cluster = SimulatedBackend("east", options={"state_file": str(tmp_path / "east.json")})
    with pytest.raises(InvalidJob, match="SIM_RUN_SECONDS"):
        cluster.submit(replace(spec("1-1"), env={"SIM_RUN_SECONDS": "soon"}))
