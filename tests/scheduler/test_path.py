"""The whole path of a job on simulated clusters: submitted, admitted, handed to the cluster, running,
succeeded; every move an event with its reason."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from django.core.exceptions import ValidationError

from clusters.actions import sync
from clusters.actions.sync import backend_for
from clusters.backends.base import JobState
from clusters.models import Cluster
from scheduler.models import Attempt, Job
from scheduler.placement import feasibility, follow
from tests.clusters.slurm_lab import SlurmLab
from tests.scheduler.conftest import Fleet, states

pytestmark = pytest.mark.django_db


def test_submitted_job_is_placed_dispatched_run_and_succeeds(fleet: Fleet) -> None:
    job = fleet.submit(accelerators=4, workers=2, topology_level="rack")
    assert job.state == Job.State.PENDING
    assert job.queue.name == "vision"

    report = fleet.cycle()
    assert report.admitted == 1
    assert not report.stale
    job.refresh_from_db()
    assert job.state == Job.State.PLACING
    assert job.attempt == 1
    attempt = job.attempts.get()
    assert attempt.backend_id == attempt.backend_key == f"{job.pk}-1-{job.key_suffix}"
    assert len(job.key_suffix) == 6  # random letters: two Quartermasters sharing a cluster never meet
    nodes = list(attempt.assignments.values_list("node__name", "workers"))
    assert sum(w for _, w in nodes) == 2
    assert sum(len(a) for a in attempt.assignments.values_list("accelerators", flat=True)) == 8

    cluster_side = backend_for(attempt.cluster).status(attempt.backend_id)
    assert cluster_side.state == JobState.RUNNING
    fleet.follow()
    assert states(job) == [Job.State.RUNNING]

    fleet.run_for(3600)
    fleet.follow()
    job.refresh_from_db()
    attempt.refresh_from_db()
    assert job.state == Job.State.SUCCEEDED
    assert attempt.outcome == Attempt.Outcome.SUCCEEDED
    assert [(e.from_state, e.to_state, e.reason) for e in job.events.all()] == [
        ("", "pending", "submitted"),
        ("pending", "admitted", "admitted"),
        ("admitted", "placing", "dispatching"),
        ("placing", "running", "started"),
        ("running", "succeeded", "succeeded"),
    ]


def test_a_second_cycle_places_nothing_twice(fleet: Fleet) -> None:
    jobs = [fleet.submit(accelerators=8) for _ in range(8)]
    assert fleet.cycle().admitted == 6  # 6 nodes of 8 GPUs
    assert fleet.cycle().admitted == 0
    assert Attempt.objects.count() == 6
    waiting = [j for j in jobs if Job.objects.get(pk=j.pk).state == Job.State.PENDING]
    assert len(waiting) == 2
    for job in waiting:
        job.refresh_from_db()
        assert job.pending_reason in {"capacity", "reserved"}
        assert job.pending_message
        assert job.queue_position is not None


def test_a_request_that_can_never_fit_is_refused_with_the_reason(fleet: Fleet) -> None:
    with pytest.raises(ValidationError) as too_big:
        fleet.submit(accelerators=16)
    assert "accelerators" in too_big.value.message_dict
    with pytest.raises(ValidationError) as unknown:
        fleet.submit(accelerator_types=["B200"])
    assert "B200" in unknown.value.message_dict["accelerator_types"][0]
    with pytest.raises(ValidationError) as topology:
        fleet.submit(accelerators=8, workers=8, topology_level="rack")  # racks hold 4 nodes
    assert "topology_level" in topology.value.message_dict
    assert not Job.objects.exists()


def test_the_same_idempotency_key_returns_the_first_job(fleet: Fleet) -> None:
    first = fleet.submit(idempotency_key="run-42")
    again = fleet.submit(idempotency_key="run-42", name="other")
    assert again.pk == first.pk
    assert Job.objects.count() == 1


@pytest.mark.slurm
def test_a_job_runs_to_success_on_the_real_slurm_lab(fleet: Fleet, slurm_lab: SlurmLab) -> None:
    cluster = Cluster.objects.create(
        organization=fleet.org,
        name="Slurm lab",
        slug="slurm-lab",
        kind="slurm",
        endpoint=slurm_lab.endpoint,
        region="eu",
        options=slurm_lab.options,
    )
    cluster.set_credentials({"user": "root", "token": slurm_lab.token})
    cluster.save()
    assert sync.sync_cluster(cluster.pk).ok
    feasibility.forget(fleet.org)
    marker = f"qm-path-{time.time_ns()}"
    job = fleet.submit(
        accelerators=2, clusters=[cluster], script=f'echo "{marker} $QM_JOB_ID $CUDA_VISIBLE_DEVICES"', image=""
    )

    fleet.cycle()
    job.refresh_from_db()
    attempt = job.attempts.get()
    assert attempt.cluster == cluster
    assert attempt.backend_id.isdigit()  # Slurm's own job id
    deadline = time.monotonic() + 30
    while job.state != Job.State.SUCCEEDED and time.monotonic() < deadline:
        time.sleep(0.5)
        follow.follow(cluster.pk)
        job.refresh_from_db()
    assert job.state == Job.State.SUCCEEDED, job.events.values_list("reason", "message")
    output = Path(slurm_lab.options["workdir"], f"slurm-{attempt.backend_id}.out").read_text().split()
    assert output[:2] == [marker, attempt.backend_key]  # the backends set QM_JOB_ID to the attempt key
    assert len(output[2].split(",")) == 2  # the two GPUs it asked for
