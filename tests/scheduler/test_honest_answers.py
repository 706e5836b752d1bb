"""Honest answers, tried as a new user would: the form's estimate and the API's preview (``qm submit
--dry-run``) run the same limits as the placement loop; a request that can never start is refused with the
limit and the numbers; a queue position means one thing everywhere; a job that stopped waiting shows no
reason for waiting; an error sits under the field it is about (docs/scheduling.md §Pending reasons and
estimates)."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from governance.actions import quotas
from scheduler import actions
from scheduler.engine import schedule
from scheduler.models import Job
from scheduler.placement import loop
from scheduler.placement.snapshot import build
from scheduler.states import PLACED
from tests.scheduler.conftest import Fleet
from tests.scheduler.test_pages import form_data, signed_in

pytestmark = pytest.mark.django_db

JOBS = "/api/v1/jobs/"
BODY: dict[str, Any] = {
    "team": "vision",
    "name": "train",
    "time_limit": "2h",
    "image": "ghcr.io/lab/train:1",
    "command": ["python", "train.py"],
}


def limit_alice(fleet: Fleet, accelerators: int) -> None:
    team = fleet.world.teams["vision"]
    quotas.set_member_limit(fleet.user("lena"), team, fleet.user("alice"), accelerators, reason="share")


def test_the_preview_is_held_by_the_submitters_member_limit_as_the_loop_would_hold_the_job(
    fleet: Fleet, api: Any
) -> None:
    """The fleet has room; alice's own running job already holds her limit: the preview must not say "now"."""
    limit_alice(fleet, 8)
    running = fleet.submit("alice", name="first", accelerators=8, time_limit=3 * 3600)
    fleet.cycle()
    assert Job.objects.get(pk=running.pk).state in PLACED
    preview = api("alice").post(f"{JOBS}preview/", {**BODY, "accelerators": 8}, format="json")
    assert preview.status_code == 200, preview.json()
    said = preview.json()
    assert (said["starts_now"], said["reason"]) == (False, "member_limit")
    assert "the team lead allows each member 8 at once" in said["message"]
    admitted = running.attempts.get().admitted_at
    assert said["estimated_start"] is not None  # when her running job reaches its time limit
    start = Job._meta.get_field("estimated_start").to_python(said["estimated_start"])
    assert abs(start - (admitted + timedelta(hours=3))) < timedelta(minutes=2)
    # The loop agrees: submitted, it waits for the same reason.
    job = fleet.submit("alice", name="second", accelerators=8)
    fleet.cycle()
    job.refresh_from_db()
    assert (job.state, job.pending_reason) == ("pending", "member_limit")
    # Lena has no limit: her preview of the same request starts now.
    other = api("lena").post(f"{JOBS}preview/", {**BODY, "accelerators": 8}, format="json").json()
    assert other["starts_now"] is True


def test_the_forms_estimate_names_the_member_limit_and_when_it_frees(fleet: Fleet) -> None:
    limit_alice(fleet, 8)
    fleet.submit("alice", name="first", accelerators=8, time_limit=3 * 3600)
    fleet.cycle()
    response = signed_in(fleet, "alice").post("/jobs/new/preview/", form_data(fleet))
    estimate = response.context["estimate"]
    assert (estimate.starts_now, estimate.reason) == (False, "member_limit")
    assert estimate.estimated_start is not None
    assert "at its submitter&#x27;s limit" in response.content.decode()


def test_a_job_larger_than_the_member_limit_is_refused_naming_the_limit_and_the_numbers(fleet: Fleet, api: Any) -> None:
    limit_alice(fleet, 4)
    for path in (JOBS, f"{JOBS}preview/"):
        refused = api("alice").post(path, {**BODY, "accelerators": 8}, format="json")
        assert refused.status_code == 400, refused.json()
        fields = refused.json()["error"]["fields"]
        assert list(fields) == ["accelerators"]
        assert "It needs 8 accelerators at once, more than the 4 its team lead allows each member" in str(fields)
    assert not Job.objects.exists()
    assert api("alice").post(JOBS, {**BODY, "accelerators": 4}, format="json").status_code == 201


def test_a_lowered_limit_tells_a_waiting_job_it_can_never_start_as_things_stand(fleet: Fleet) -> None:
    job = fleet.submit("alice", accelerators=8)
    limit_alice(fleet, 4)  # after it was accepted
    fleet.cycle()
    job.refresh_from_db()
    assert job.pending_reason == "member_limit"
    assert "it can never start as things stand" in job.pending_message


# ----------------------------------------------------------------------------------------- queue position


def test_the_next_job_is_number_one_on_the_page_in_the_api_and_the_list(fleet: Fleet, api: Any) -> None:
    for i in range(6):  # every node of both clusters
        fleet.submit("lena", name=f"fill-{i}", accelerators=8)
    fleet.cycle()
    first = fleet.submit("alice", name="first", accelerators=8)
    second = fleet.submit("alice", name="second", accelerators=8)
    fleet.cycle()
    first.refresh_from_db()
    second.refresh_from_db()
    assert (first.queue_position, second.queue_position) == (1, 2)
    shown = api("alice").get(f"{JOBS}{first.pk}/").json()
    assert shown["queue_position"] == 1
    page = signed_in(fleet, "alice").get(f"/jobs/{first.pk}/").content.decode()
    assert "#1 in" in page
    assert "not known yet" not in page


# ------------------------------------------------------------------------------------- no stale reasons


def test_a_cancelled_job_keeps_no_pending_reason(fleet: Fleet) -> None:
    for i in range(6):
        fleet.submit("lena", name=f"fill-{i}", accelerators=8)
    fleet.cycle()
    job = fleet.submit("alice", name="waits", accelerators=8)
    fleet.cycle()
    job.refresh_from_db()
    assert job.pending_reason
    assert job.queue_position == 1
    actions.cancel_job(fleet.user("alice"), job, "not needed")
    cancelled = Job.objects.get(pk=job.pk)
    assert (cancelled.pending_reason, cancelled.pending_message) == ("", "")
    assert (cancelled.queue_position, cancelled.estimated_start) == (None, None)
    listed = signed_in(fleet, "alice").get("/jobs/?state=cancelled").content.decode()
    assert "waiting for free capacity" not in listed
    assert "capacity reserved for it" not in listed


def test_a_reason_decided_before_a_cancel_is_not_written_after_it(fleet: Fleet) -> None:
    for i in range(6):
        fleet.submit("lena", name=f"fill-{i}", accelerators=8)
    fleet.cycle()
    job = fleet.submit("alice", name="waits", accelerators=8)
    snapshot, index = build(fleet.org)
    decisions = schedule(snapshot)
    actions.cancel_job(fleet.user("alice"), job, "changed my mind")  # between the cycle and its write-back
    loop.write_pending(index, decisions.pending)
    job.refresh_from_db()
    assert (job.state, job.pending_reason, job.queue_position) == ("cancelled", "", None)


# ----------------------------------------------------------------------------------------- field errors


def test_too_much_memory_is_an_error_under_memory_not_accelerators(fleet: Fleet) -> None:
    response = signed_in(fleet, "alice").post("/jobs/new/preview/", form_data(fleet, memory_gib="100000"))
    html = response.content.decode()
    assert 'id="errors-memory_gib" hx-swap-oob="true"><small class="error" role="alert">' in html
    assert 'id="errors-accelerators" hx-swap-oob="true"></div>' in html
    assert "GiB of memory" in html


def test_an_api_request_for_too_much_memory_names_the_memory_field(fleet: Fleet, api: Any) -> None:
    refused = api("alice").post(JOBS, {**BODY, "accelerators": 1, "memory_gib": 100000}, format="json")
    assert refused.status_code == 400
    assert list(refused.json()["error"]["fields"]) == ["memory_gib"]


# ----------------------------------------------------------------------------------------------- budgets


def test_a_hard_budget_of_zero_refuses_accelerator_jobs_at_submission(fleet: Fleet, api: Any) -> None:
    """A limit of zero covers nothing, this month or the next: refused, not left waiting for a new month."""
    from tests.governance.test_budgets import make_budget

    make_budget(fleet, accelerator_hours=0, hard=True)
    refused = api("alice").post(JOBS, {**BODY, "accelerators": 1}, format="json")
    assert refused.status_code == 400, refused.json()
    message = str(refused.json()["error"]["fields"]["accelerators"])
    assert "allows no accelerator-hours a month" in message
    assert "it can never start as things stand" in message
    assert not Job.objects.exists()
    cpu_only = api("alice").post(JOBS, {**BODY, "accelerators": 0}, format="json")
    assert cpu_only.status_code == 201, cpu_only.json()  # it uses none of what the budget limits
