"""What a service account's token may do through the jobs and quotas API, by its scope (read, submit, admin),
and that another team's account reaches nothing of ours."""

from __future__ import annotations

import pytest

from scheduler.models import Job
from tests.governance.test_quota_api import H100, team_queue
from tests.scheduler.conftest import Fleet
from tests.scheduler.test_api import BODY, JOBS
from tests.tenancy.test_service_accounts import bearer, service_token

pytestmark = pytest.mark.django_db


def test_read_only_reads_but_cannot_submit(fleet: Fleet) -> None:
    raw = service_token(fleet.world, "read")
    client = bearer(raw)
    assert client.get(JOBS).status_code == 200
    response = client.post(JOBS, BODY, format="json")
    assert response.status_code == 403
    assert response.json()["error"]["message"].startswith("This service account's token is scoped 'read-only'")
    assert client.delete("/api/v1/auth/token/").status_code == 403
    assert Job.objects.count() == 0


def test_submit_submits_and_cancels_but_cannot_change_quotas(fleet: Fleet) -> None:
    client = bearer(service_token(fleet.world, "submit"))
    created = client.post(JOBS, BODY, format="json")
    assert created.status_code == 201, created.json()
    job = Job.objects.get()
    assert job.submitted_by.service_account.name == "ci-submit"
    assert client.post(f"{JOBS}{job.pk}/cancel/", {"reason": "superseded"}, format="json").status_code == 200
    quota = {"flavor": H100, "lending_limit": 4, "reason": "nights"}
    assert client.post(f"/api/v1/queues/{team_queue(fleet).pk}/quotas/", quota).status_code == 403
    assert client.post("/api/v1/projects/", {"team": fleet.world.teams["vision"].pk, "name": "p"}).status_code == 403


def test_admin_does_what_the_teams_lead_may(fleet: Fleet) -> None:
    client = bearer(service_token(fleet.world, "admin"))
    quota = {"flavor": H100, "lending_limit": 4, "reason": "nights"}
    assert client.post(f"/api/v1/queues/{team_queue(fleet).pk}/quotas/", quota).status_code == 200
    robotics = fleet.world.teams["robotics"]
    assert client.post("/api/v1/projects/", {"team": robotics.pk, "name": "p"}).status_code == 400
    assert client.post("/api/v1/projects/", {"team": fleet.world.teams["vision"].pk, "name": "p"}).status_code == 201
    # A lead may set nothing of the organization: neither may the lead's token.
    nominal = {"flavor": H100, "nominal": 64, "reason": "more"}
    assert client.post(f"/api/v1/queues/{team_queue(fleet).pk}/quotas/", nominal).status_code == 403


def test_another_teams_account_sees_nothing_of_ours(fleet: Fleet) -> None:
    job = fleet.submit("alice")
    robotics = bearer(service_token(fleet.world, "admin", team="robotics", by="adam"))
    assert robotics.get(f"{JOBS}{job.pk}/").status_code == 404
    assert robotics.post(f"{JOBS}{job.pk}/cancel/", {"reason": "x"}, format="json").status_code == 404
    assert robotics.get(f"/api/v1/teams/{fleet.world.teams['vision'].pk}/").status_code == 404
    assert robotics.get(JOBS).json()["results"] == []
    rival = bearer(service_token(fleet.world, "admin", team="intruders", by="trent"))
    assert rival.get(f"{JOBS}{job.pk}/").status_code == 404
