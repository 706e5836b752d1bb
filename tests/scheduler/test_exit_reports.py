"""The exit code a job reports with its attempt's token (``POST /api/v1/jobs/{id}/report/``): who may report
(the job's current attempt, once), what is refused and how, and how the placement loop's follow round ends the
attempt by it where the cluster cannot tell (docs/jobs.md)."""

from __future__ import annotations

from typing import Any

import pytest
from django.test import Client
from rest_framework.test import APIClient

from scheduler.actions import checkpoints
from scheduler.models import Attempt, Job
from tests.scheduler.conftest import Fleet
from tests.scheduler.test_checkpoints import as_job, next_attempt, running

pytestmark = pytest.mark.django_db


def url(job: Job) -> str:
    return f"/api/v1/jobs/{job.pk}/report/"


def test_the_job_reports_its_exit_code_once(fleet: Fleet) -> None:
    job, attempt = running(fleet)
    client = as_job(checkpoints.token_for(attempt))
    answer = client.post(url(job), {"exit_code": 3}, format="json")
    assert answer.status_code == 201, answer.content
    assert answer.json()["attempt"] == attempt.number
    assert answer.json()["exit_code"] == 3
    attempt.refresh_from_db()
    assert (attempt.reported_exit_code, attempt.reported_at is not None) == (3, True)

    again = client.post(url(job), {"exit_code": 0}, format="json")  # a later success does not undo a failure
    assert again.status_code == 409, again.content
    assert "reported exit code 3 already" in again.json()["error"]["message"]
    attempt.refresh_from_db()
    assert attempt.reported_exit_code == 3


@pytest.mark.parametrize(
    ("body", "field", "words"),
    [
        ({}, "exit_code", "required"),
        ({"exit_code": "0"}, "exit_code", "valid integer"),
        ({"exit_code": True}, "exit_code", "valid integer"),
        ({"exit_code": 1.5}, "exit_code", "valid integer"),
        ({"exit_code": 256}, "exit_code", "from 0 to 255"),
        ({"exit_code": -1}, "exit_code", "from 0 to 255"),
        ({"exit_code": 0, "signal": 9}, "signal", "Unknown field"),
    ],
)
def test_bad_reports_are_refused_naming_the_field(fleet: Fleet, body: dict[str, Any], field: str, words: str) -> None:
    job, attempt = running(fleet)
    answer = as_job(checkpoints.token_for(attempt)).post(url(job), body, format="json")
    assert answer.status_code == 400, answer.content
    fields = answer.json()["error"]["fields"]
    assert words in " ".join(fields.get(field, [])), fields
    attempt.refresh_from_db()
    assert attempt.reported_at is None


def test_a_stale_attempts_token_is_refused(fleet: Fleet) -> None:
    job, attempt = running(fleet)
    old_token = checkpoints.token_for(attempt)
    next_attempt(job)
    answer = as_job(old_token).post(url(job), {"exit_code": 0}, format="json")
    assert answer.status_code == 403, answer.content
    assert "only the current attempt reports its exit code" in answer.json()["error"]["message"]
    assert not Attempt.objects.filter(job=job).exclude(reported_at=None).exists()


def test_only_the_jobs_own_token_reports(fleet: Fleet) -> None:
    job, attempt = running(fleet)
    other, other_attempt = running(fleet, name="other")
    answer = as_job(checkpoints.token_for(other_attempt)).post(url(job), {"exit_code": 0}, format="json")
    assert answer.status_code == 403, answer.content
    assert f"for job #{other.pk}, not #{job.pk}" in answer.json()["error"]["message"]

    person = APIClient()
    person.force_authenticate(fleet.user("alice"))
    answer = person.post(url(job), {"exit_code": 0}, format="json")
    assert answer.status_code == 403, answer.content
    assert "reported by the job itself" in answer.json()["error"]["message"]

    forged = as_job(checkpoints.token_for(attempt)[:-1] + "x")
    assert forged.post(url(job), {"exit_code": 0}, format="json").status_code == 401
    assert Client().post(url(job), {"exit_code": 0}, content_type="application/json").status_code in (401, 403)
    attempt.refresh_from_db()
    assert attempt.reported_at is None
