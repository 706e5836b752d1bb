"""On-call: an admin force-preempts or requeues a job (API, pages, on the simulated fleet).

A preempted job gets its tier's grace to checkpoint, is stopped, requeued and placed again, and the
preemption is not counted as a retry; a failed job out of retries is requeued for one more try. Only admins
of the job's organization may; another organization's job is a 404; a job in the wrong state is a 409 (a 400
on the page) naming its state; nothing changes when refused; every change is audited.
"""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.core.exceptions import ValidationError
from django.test import Client
from django.utils import timezone

from clusters.actions.sync import backend_for
from clusters.backends.base import JobState
from clusters.models import Node
from scheduler import actions
from scheduler.models import Attempt, Job, JobEvent
from scheduler.placement import recover
from tenancy.models import AuditLog
from tests.conftest import api_client
from tests.scheduler.conftest import Fleet

pytestmark = pytest.mark.django_db

JOBS = "/api/v1/jobs/"


def running(fleet: Fleet, **fields: Any) -> Job:
    """A running job of alice's on a node of its own (a node taken down under another job leaves it be)."""
    job = fleet.submit("alice", **{"accelerators": 8, **fields})
    fleet.cycle()
    fleet.follow()
    job.refresh_from_db()
    assert job.state == Job.State.RUNNING
    return job


def failed(fleet: Fleet, **fields: Any) -> Job:
    """A job whose node went down under it on every attempt until it ran out of retries."""
    job = running(fleet, **fields)
    while job.state != Job.State.FAILED:
        attempt = job.attempts.get(number=job.attempt)
        Node.objects.filter(pk=attempt.assignments.get().node_id).update(state=Node.State.DOWN)
        recover.recover(fleet.org)
        job.refresh_from_db()
        if job.state == Job.State.REQUEUED:
            fleet.cycle(job.not_before)
            job.refresh_from_db()
    assert "No retries left" in job.message
    return job


def snapshot(job: Job) -> tuple[Any, ...]:
    """What a refused change must leave as it was."""
    job.refresh_from_db()
    attempts = list(Attempt.objects.filter(job=job).values_list("outcome", "stop_deadline").order_by("number"))
    return job.state, job.attempt, job.retries, job.not_before, attempts, JobEvent.objects.filter(job=job).count()


def post(username: str, fleet: Fleet, path: str, body: dict[str, Any]) -> Any:
    return api_client(fleet.user(username)).post(path, body, format="json")


# --------------------------------------------------------------------------------------------- preempt


def test_an_admin_preempts_a_running_job_which_gets_its_grace_stops_and_runs_again(
    fleet: Fleet, django_capture_on_commit_callbacks: Any
) -> None:
    job = running(fleet, tier=fleet.tiers["high"], checkpoint_location="s3://ckpt/run-1")
    first = job.attempts.get()
    before = timezone.now()
    with django_capture_on_commit_callbacks(execute=True):  # the signal to the cluster, as after a commit
        response = post("adam", fleet, f"{JOBS}{job.pk}/preempt/", {"reason": "Rack 3 needs new firmware"})
    assert response.status_code == 200, response.json()
    assert response.json()["state"] == "preempting"

    job.refresh_from_db()
    first.refresh_from_db()
    assert job.state == Job.State.PREEMPTING
    assert first.stop_deadline is not None
    grace = first.stop_deadline - before
    assert timedelta(seconds=60) <= grace < timedelta(seconds=65)  # the high tier's grace period
    event = job.events.order_by("pk").last()
    assert event is not None
    assert (event.reason, event.from_state, event.actor) == ("preempted_by_admin", "running", fleet.user("adam"))
    assert "Rack 3 needs new firmware" in event.message
    entry = AuditLog.objects.get(action="job.preempted")
    assert (entry.actor, entry.target_id, entry.reason) == (
        fleet.user("adam"),
        str(job.pk),
        "Rack 3 needs new firmware",
    )
    assert entry.changes == {"state": ["running", "preempting"]}
    # The cluster was told: the simulated job checkpoints and exits a few seconds after the signal.
    cluster_state = json.loads((fleet.state_dir / f"{first.cluster.slug}.json").read_text())
    assert cluster_state["jobs"][first.backend_id]["exits_at"] is not None

    fleet.follow()  # within its grace: still stopping, still holding its accelerators
    job.refresh_from_db()
    assert job.state == Job.State.PREEMPTING
    assert fleet.cycle().admitted == 0

    after = first.stop_deadline + timedelta(seconds=1)
    fleet.follow(after)
    job.refresh_from_db()
    first.refresh_from_db()
    assert job.state == Job.State.REQUEUED
    assert first.outcome == Attempt.Outcome.PREEMPTED
    assert backend_for(first.cluster).status(first.backend_id).state == JobState.CANCELLED
    assert "s3://ckpt/run-1" in job.events.order_by("pk").last().message  # type: ignore[union-attr]

    fleet.cycle(after)
    fleet.follow(after)
    job.refresh_from_db()
    assert job.state == Job.State.RUNNING
    assert job.attempt == 2
    assert (job.retries, job.max_retries) == (0, 3)  # a preemption is not the job's failure
    assert job.attempts.get(number=2).outcome == Attempt.Outcome.ACTIVE


def test_an_admitted_job_not_yet_on_its_cluster_is_requeued_at_the_next_round(fleet: Fleet) -> None:
    from scheduler.placement import loop

    job = fleet.submit("alice")
    loop.run_cycle(fleet.org)  # admitted; not handed to its cluster yet
    job.refresh_from_db()
    assert job.state == Job.State.ADMITTED
    actions.preempt_job(fleet.user("adam"), job, "wrong cluster")
    job.refresh_from_db()
    assert job.state == Job.State.PREEMPTING
    recover.recover(fleet.org)
    job.refresh_from_db()
    assert job.state == Job.State.REQUEUED
    assert job.retries == 0


@pytest.mark.parametrize("username", ["alice", "lena", "fiona"])  # owner, lead, finance: they see it
def test_only_admins_preempt_and_requeue(fleet: Fleet, username: str) -> None:
    job = running(fleet)
    gone = failed(fleet, name="out-of-retries", max_retries=0)
    states = snapshot(job), snapshot(gone)
    for path, body in [
        (f"{JOBS}{job.pk}/preempt/", {"reason": "mine"}),
        (f"{JOBS}{gone.pk}/requeue/", {"reason": "x"}),
    ]:
        response = post(username, fleet, path, body)
        assert response.status_code == 403, (path, response.json())
        assert response.json()["error"]["status"] == 403
    assert (snapshot(job), snapshot(gone)) == states
    assert not AuditLog.objects.filter(action__in=["job.preempted", "job.requeued"]).exists()


@pytest.mark.parametrize("username", ["mallory", "trent", "bob"])  # another org's admin and lead; another team
def test_another_organizations_or_teams_job_is_a_404(fleet: Fleet, username: str) -> None:
    job = running(fleet)
    gone = failed(fleet, name="out-of-retries", max_retries=0)
    states = snapshot(job), snapshot(gone)
    assert post(username, fleet, f"{JOBS}{job.pk}/preempt/", {"reason": "mine"}).status_code == 404
    assert post(username, fleet, f"{JOBS}{gone.pk}/requeue/", {"reason": "mine"}).status_code == 404
    assert (snapshot(job), snapshot(gone)) == states


def test_a_job_in_the_wrong_state_is_a_409_naming_it_and_nothing_changes(fleet: Fleet) -> None:
    placed = running(fleet, name="placed")
    waiting = fleet.submit("alice", name="waiting")  # no cycle since: pending
    states = snapshot(waiting), snapshot(placed)

    response = post("adam", fleet, f"{JOBS}{waiting.pk}/preempt/", {"reason": "stop it"})
    assert response.status_code == 409
    error = response.json()["error"]
    assert (error["status"], error["code"]) == (409, "conflict")
    assert "pending" in error["fields"]["state"][0]

    response = post("adam", fleet, f"{JOBS}{placed.pk}/requeue/", {"reason": "again"})
    assert response.status_code == 409
    assert "running" in response.json()["error"]["fields"]["state"][0]

    actions.preempt_job(fleet.user("adam"), placed, "first time")
    again = post("adam", fleet, f"{JOBS}{placed.pk}/preempt/", {"reason": "second time"})
    assert again.status_code == 409
    assert "preempting" in again.json()["error"]["fields"]["state"][0]
    assert snapshot(waiting) == states[0]
    assert AuditLog.objects.filter(action="job.preempted").count() == 1


@pytest.mark.parametrize("body", [{}, {"reason": ""}, {"reason": "   "}, {"reason": 7}, {"reason": "x" * 2001}])
def test_a_reason_is_required(fleet: Fleet, body: dict[str, Any]) -> None:
    job = running(fleet)
    before = snapshot(job)
    response = post("adam", fleet, f"{JOBS}{job.pk}/preempt/", body)
    assert response.status_code == 400
    assert list(response.json()["error"]["fields"]) == ["reason"]
    assert snapshot(job) == before
    with pytest.raises(ValidationError) as refused:
        actions.preempt_job(fleet.user("adam"), job, "  ")
    assert "reason" in refused.value.message_dict


# --------------------------------------------------------------------------------------------- requeue


def test_an_admin_requeues_a_failed_job_with_no_retries_left_for_one_more_try(
    fleet: Fleet, django_capture_on_commit_callbacks: Any
) -> None:
    job = failed(fleet, max_retries=1, checkpoint_location="s3://ckpt/run-2")
    assert (job.attempt, job.retries) == (2, 1)

    with django_capture_on_commit_callbacks() as after_commit:
        response = post("adam", fleet, f"{JOBS}{job.pk}/requeue/", {"reason": "Node firmware fixed"})
    assert response.status_code == 200, response.json()
    body = response.json()
    assert (body["state"], body["not_before"], body["finished_at"]) == ("requeued", None, None)
    assert after_commit == [actions.wake_loop]
    event = job.events.get(reason="requeued_by_admin")
    assert (event.reason, event.from_state, event.actor) == ("requeued_by_admin", "failed", fleet.user("adam"))
    assert "Node firmware fixed" in event.message
    assert "s3://ckpt/run-2" in event.message
    entry = AuditLog.objects.get(action="job.requeued")
    assert (entry.actor, entry.target_id, entry.reason) == (fleet.user("adam"), str(job.pk), "Node firmware fixed")

    fleet.cycle()  # now: no backoff left to wait out
    fleet.follow()
    job.refresh_from_db()
    assert job.state == Job.State.RUNNING
    assert job.attempt == 3
    assert (job.retries, job.max_retries) == (1, 1)

    # One more try, not a new allowance: failing again leaves it failed.
    attempt = job.attempts.get(number=3)
    Node.objects.filter(pk=attempt.assignments.get().node_id).update(state=Node.State.DOWN)
    recover.recover(fleet.org)
    job.refresh_from_db()
    assert job.state == Job.State.FAILED


def test_a_superuser_may_intervene(fleet: Fleet) -> None:
    root = User.objects.create_superuser("root", password="pw")
    job = failed(fleet, max_retries=0)
    response = api_client(root).post(f"{JOBS}{job.pk}/requeue/", {"reason": "try again"}, format="json")
    assert response.status_code == 200
    assert Job.objects.get(pk=job.pk).state == Job.State.REQUEUED
    assert AuditLog.objects.get(action="job.requeued").actor == root


# ----------------------------------------------------------------------------------------------- pages


def signed_in(fleet: Fleet, username: str) -> Client:
    client = Client()
    client.force_login(fleet.user(username))
    return client


@pytest.mark.parametrize(("username", "shown"), [("adam", True), ("alice", False), ("lena", False), ("fiona", False)])
def test_the_job_page_offers_preempt_and_requeue_to_admins_only(fleet: Fleet, username: str, shown: bool) -> None:
    placed = running(fleet, name="placed")
    gone = failed(fleet, name="gone", max_retries=0)
    waiting = fleet.submit("alice", name="waiting")  # no cycle since: pending
    client = signed_in(fleet, username)
    page = {job.name: client.get(f"/jobs/{job.pk}/").content.decode() for job in (waiting, placed, gone)}
    assert ("Preempt this job" in page["placed"]) is shown
    assert ("Requeue this job" in page["gone"]) is shown
    assert "Requeue this job" not in page["placed"]
    assert "Preempt this job" not in page["gone"]
    assert "Preempt this job" not in page["waiting"]
    assert "Requeue this job" not in page["waiting"]


def test_an_admin_preempts_and_requeues_from_the_job_page(fleet: Fleet) -> None:
    adam = signed_in(fleet, "adam")
    job = running(fleet)
    before = snapshot(job)
    refused = adam.post(f"/jobs/{job.pk}/preempt/", {"reason": ""})
    assert refused.status_code == 400
    assert "This field is required." in refused.content.decode()
    assert snapshot(job) == before
    wrong = adam.post(f"/jobs/{job.pk}/requeue/", {"reason": "again"})
    assert wrong.status_code == 400
    assert "is running; only a failed job can be requeued" in wrong.content.decode()
    assert snapshot(job) == before

    response = adam.post(f"/jobs/{job.pk}/preempt/", {"reason": "Rack maintenance"}, follow=True)
    assert response.redirect_chain == [(f"/jobs/{job.pk}/", 302)]
    assert f"Job #{job.pk} is preempted" in response.content.decode()
    job.refresh_from_db()
    assert job.state == Job.State.PREEMPTING
    assert AuditLog.objects.filter(action="job.preempted", reason="Rack maintenance").exists()

    gone = failed(fleet, name="gone", max_retries=0)
    response = adam.post(f"/jobs/{gone.pk}/requeue/", {"reason": "Fixed"}, follow=True)
    assert f"Job #{gone.pk} is requeued" in response.content.decode()
    assert Job.objects.get(pk=gone.pk).state == Job.State.REQUEUED


def test_others_get_403_or_404_from_the_page_posts(fleet: Fleet) -> None:
    job = running(fleet)
    gone = failed(fleet, name="gone", max_retries=0)
    states = snapshot(job), snapshot(gone)
    for username, status in [("alice", 403), ("lena", 403), ("fiona", 403), ("mallory", 404), ("bob", 404)]:
        client = signed_in(fleet, username)
        assert client.post(f"/jobs/{job.pk}/preempt/", {"reason": "x"}).status_code == status, username
        assert client.post(f"/jobs/{gone.pk}/requeue/", {"reason": "x"}).status_code == status, username
    assert (snapshot(job), snapshot(gone)) == states
    assert not AuditLog.objects.filter(action__in=["job.preempted", "job.requeued"]).exists()
