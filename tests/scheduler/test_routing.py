"""What reaches the engine from the database for routing: what each cluster runs, the clusters a job is
excluded from, maintenance windows and data locality; the submission check refusing what no cluster can
run; data locality as a submission field; what a cluster runs on its page and in its options."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.core.exceptions import ValidationError
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from clusters import actions as cluster_actions
from clusters.models import Cluster, MaintenanceWindow, Node
from scheduler.engine import model as m
from scheduler.models import Attempt, Checkpoint, Job, JobEvent
from scheduler.placement import feasibility
from scheduler.placement.snapshot import build
from tests.scheduler.conftest import Fleet
from tests.scheduler.test_pages import form_data

pytestmark = pytest.mark.django_db

JOBS = "/api/v1/jobs/"
SCRIPT = "#!/bin/bash\npython train.py\n"


def containers_only(fleet: Fleet) -> None:
    """Make every cluster of the fleet run container images only, as Kubernetes clusters do."""
    for cluster in Cluster.objects.filter(organization=fleet.org):
        cluster.options = {**cluster.options, "runs": ["containers"]}
        cluster.save(update_fields=["options"])
    feasibility.forget(fleet.org)


def engine_job(fleet: Fleet, job: Job) -> m.Job:
    snapshot, _ = build(fleet.org)
    return next(j for j in snapshot.pending if j.id == str(job.pk))


def attempt(job: Job, cluster: Cluster, number: int, **fields: Any) -> Attempt:
    now = timezone.now()
    return Attempt.objects.create(job=job, number=number, cluster=cluster, admitted_at=now, **fields)


# ------------------------------------------------------------------------------------- submission check


def test_the_api_refuses_a_script_no_cluster_runs_naming_image(fleet: Fleet, api: Any) -> None:
    containers_only(fleet)
    body = {"team": "vision", "name": "train", "time_limit": "2h", "script": SCRIPT}
    response = api("alice").post(JOBS, body, format="json")
    assert response.status_code == 400, response.json()
    fields = response.json()["error"]["fields"]
    assert list(fields) == ["image"]
    assert "No cluster here runs batch scripts without a container image: east needs a container image" in str(
        fields["image"]
    )
    assert not Job.objects.exists()
    # The same job with an image is taken.
    response = api("alice").post(JOBS, {**body, "image": "ghcr.io/lab/train:1", "script": ""}, format="json")
    assert response.status_code == 201, response.json()


def test_the_form_refuses_a_script_no_cluster_runs_beside_image(fleet: Fleet) -> None:
    containers_only(fleet)
    alice = Client()
    alice.force_login(fleet.user("alice"))
    response = alice.post("/jobs/new/", form_data(fleet, image="", command="", script=SCRIPT))
    assert response.status_code == 400
    errors = response.context["form"].errors
    assert "image" in errors, errors
    assert "needs a container image" in errors["image"][0]
    assert not Job.objects.exists()
    assert not JobEvent.objects.exists()


# ------------------------------------------------------------------------------------------ the snapshot


def test_clusters_say_what_they_run_and_jobs_what_they_need(fleet: Fleet) -> None:
    containers_only(fleet)
    job = fleet.submit()
    snapshot, _ = build(fleet.org)
    assert {c.name: c.runs for c in snapshot.clusters} == {
        "east": frozenset({"containers"}),
        "west": frozenset({"containers"}),
    }
    assert engine_job(fleet, job).needs == "containers"


def test_refused_and_unreachable_clusters_exclude_the_job(fleet: Fleet) -> None:
    job = fleet.submit()
    east, west = fleet.clusters["east"], fleet.clusters["west"]
    ended = timezone.now() - timedelta(minutes=10)
    attempt(
        job, east, 1, outcome=Attempt.Outcome.REFUSED, reason="refused", message="no such partition", ended_at=ended
    )
    attempt(job, west, 2, outcome=Attempt.Outcome.LOST, reason="undeliverable", message="timed out", ended_at=ended)
    Job.objects.filter(pk=job.pk).update(attempt=2)
    assert engine_job(fleet, job).excluded == (
        ("east", "refused it: no such partition"),
        ("west", "could not be reached for it: timed out"),
    )
    # Half an hour after the attempt ended, the unreachable cluster may be tried again; a refusal stays.
    Attempt.objects.filter(job=job, number=2).update(ended_at=timezone.now() - timedelta(minutes=31))
    assert engine_job(fleet, job).excluded == (("east", "refused it: no such partition"),)


def test_exclusions_cost_the_same_queries_however_many_jobs_wait(fleet: Fleet) -> None:
    east = fleet.clusters["east"]
    jobs = [fleet.submit() for _ in range(3)]
    for job in jobs:
        attempt(job, east, 1, outcome=Attempt.Outcome.REFUSED, message="no", ended_at=timezone.now())
    snapshot, _ = build(fleet.org)
    assert all(j.excluded == (("east", "refused it: no"),) for j in snapshot.pending)
    with CaptureQueriesContext(connection) as few:
        build(fleet.org)
    for _ in range(5):
        job = fleet.submit()
        attempt(job, east, 1, outcome=Attempt.Outcome.REFUSED, message="no", ended_at=timezone.now())
    with CaptureQueriesContext(connection) as more:
        build(fleet.org)
    assert len(more) == len(few)


def test_the_snapshot_has_the_maintenance_windows_ahead(fleet: Fleet) -> None:
    east, west = fleet.clusters["east"], fleet.clusters["west"]
    node = Node.objects.filter(cluster=east).order_by("name").first()
    assert node is not None
    now = timezone.now()
    soon = MaintenanceWindow.objects.create(
        cluster=east, starts_at=now + timedelta(hours=1), ends_at=now + timedelta(hours=3), reason="firmware"
    )
    soon.nodes.set([node])
    MaintenanceWindow.objects.create(
        cluster=west, starts_at=now - timedelta(hours=1), ends_at=now + timedelta(hours=1), reason="power"
    )
    MaintenanceWindow.objects.create(  # beyond the backfill window
        cluster=west, starts_at=now + timedelta(days=3), ends_at=now + timedelta(days=4), reason="later"
    )
    MaintenanceWindow.objects.create(  # over
        cluster=west, starts_at=now - timedelta(hours=3), ends_at=now - timedelta(hours=2), reason="done"
    )
    snapshot, _ = build(fleet.org, now)
    windows = {(w.cluster, w.nodes) for w in snapshot.maintenance}
    assert windows == {("east", (f"east/{node.name}",)), ("west", ())}


def test_a_non_preemptible_job_waits_for_maintenance_and_says_so(fleet: Fleet) -> None:
    now = timezone.now()
    for cluster in fleet.clusters.values():
        MaintenanceWindow.objects.create(
            cluster=cluster, starts_at=now + timedelta(minutes=30), ends_at=now + timedelta(hours=2), reason="os"
        )
    kept = fleet.submit(preemptible=False, time_limit=7200)
    started = fleet.submit(time_limit=7200)
    fleet.cycle()
    kept.refresh_from_db()
    started.refresh_from_db()
    assert kept.state == Job.State.PENDING
    assert kept.pending_reason == "maintenance"
    assert "would run into maintenance on" in kept.pending_message
    assert started.state != Job.State.PENDING


def test_locality_is_the_data_or_the_last_checkpoint(fleet: Fleet) -> None:
    near = fleet.submit(data_locality="west")
    assert engine_job(fleet, near).locality == "west"
    job = fleet.submit()
    assert engine_job(fleet, job).locality is None
    east, west = fleet.clusters["east"], fleet.clusters["west"]
    attempt(job, east, 1, outcome=Attempt.Outcome.LOST, ended_at=timezone.now())
    attempt(job, west, 2, outcome=Attempt.Outcome.LOST, ended_at=timezone.now())
    attempt(job, east, 3, outcome=Attempt.Outcome.LOST, ended_at=timezone.now())
    Checkpoint.objects.create(job=job, attempt=1, location="s3://a/1", reported_at=timezone.now())
    Checkpoint.objects.create(job=job, attempt=2, location="s3://a/2", reported_at=timezone.now())
    assert engine_job(fleet, job).locality == "west"  # attempt 3 wrote none


# ------------------------------------------------------------------------------------------ data locality


def test_data_locality_is_a_cluster_or_a_region(fleet: Fleet, api: Any) -> None:
    body = {"team": "vision", "name": "train", "time_limit": "2h", "image": "ghcr.io/lab/train:1"}
    response = api("alice").post(JOBS, {**body, "data_locality": "nowhere"}, format="json")
    assert response.status_code == 400
    assert list(response.json()["error"]["fields"]) == ["data_locality"]
    assert "'nowhere' is neither a cluster nor a region" in str(response.json()["error"]["fields"])
    assert not Job.objects.exists()
    for place in ("west", "us"):
        response = api("alice").post(JOBS, {**body, "data_locality": place}, format="json")
        assert response.status_code == 201, response.json()
        assert response.json()["data_locality"] == place
        assert Job.objects.get(pk=response.json()["id"]).data_locality == place


def test_the_form_and_the_job_page_carry_data_locality(fleet: Fleet) -> None:
    alice = Client()
    alice.force_login(fleet.user("alice"))
    response = alice.post("/jobs/new/", form_data(fleet, data_locality="mars"))
    assert response.status_code == 400
    assert "data_locality" in response.context["form"].errors
    response = alice.post("/jobs/new/", form_data(fleet, data_locality="east"))
    assert response.status_code == 302, response.context["form"].errors if response.context else response
    job = Job.objects.get()
    assert job.data_locality == "east"
    page = alice.get(f"/jobs/{job.pk}/").content.decode()
    assert "Data near" in page
    assert "<dd>east</dd>" in page


# ------------------------------------------------------------------------------------------ cluster page


def test_the_cluster_page_says_what_it_runs(fleet: Fleet) -> None:
    admin = Client()
    admin.force_login(fleet.user("alice"))
    east = fleet.clusters["east"]
    page = admin.get(f"/clusters/{east.pk}/").content.decode()
    assert "Runs" in page
    assert "container images (simulated), batch scripts" in page
    Cluster.objects.filter(pk=east.pk).update(options={**east.options, "runs": ["batch_scripts"]})
    page = admin.get(f"/clusters/{east.pk}/").content.decode()
    assert 'data-testid="runs">batch scripts<' in page


def test_options_say_what_a_cluster_runs_or_are_refused(fleet: Fleet) -> None:
    adam = fleet.user("adam")
    base: dict[str, Any] = {
        "name": "hpc",
        "kind": "slurm",
        "endpoint": "https://slurm.example",
        "region": "eu",
        "levels": [],
    }
    with pytest.raises(ValidationError) as caught:
        cluster_actions.create_cluster(adam, fleet.org, **base, options={"container_runtime": "docker"})
    assert "container_runtime must be one of pyxis, apptainer" in caught.value.message_dict["options"][0]
    cluster = cluster_actions.create_cluster(adam, fleet.org, **base, options={"container_runtime": "pyxis"})
    assert cluster.options["container_runtime"] == "pyxis"
    east = fleet.clusters["east"]  # simulated: changed by the installation's operator
    operator = User.objects.create_superuser("operator")
    with pytest.raises(ValidationError) as caught:
        cluster_actions.update_cluster(operator, east, options={**east.options, "runs": ["gpus"]})
    assert "runs is a list of" in caught.value.message_dict["options"][0]
    cluster_actions.update_cluster(operator, east, options={**east.options, "runs": ["containers"]})
