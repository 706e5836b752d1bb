"""What happened to a job, in one place: ``GET /api/v1/jobs/{id}/debug/``, its page and ``qm debug``."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.utils import timezone

from qm import cli
from scheduler.models import Job
from scheduler.watch.rounds import watch_round
from tests.scheduler.conftest import Fleet
from tests.scheduler.test_checkpoints import running
from tests.scheduler.test_watch import report_for

pytestmark = pytest.mark.django_db


def flagged(fleet: Fleet) -> Job:
    """A running gang of four, one of whose workers is a straggler its progress shows."""
    job, _ = running(fleet, workers=4, accelerators=8)
    start = timezone.now() - timedelta(minutes=30)
    report_for(job, start, 30, {0: 1.0, 1: 1.0, 2: 1.0, 3: 1.6})
    watch_round(fleet.org, start + timedelta(minutes=30))
    job.refresh_from_db()
    return job


def test_the_api_gathers_placement_timeline_nodes_progress_flags_and_output(fleet: Fleet, api: Any) -> None:
    job = flagged(fleet)
    answer = api("alice").get(f"/api/v1/jobs/{job.pk}/debug/", {"lines": 5})
    assert answer.status_code == 200, answer.content
    found = answer.json()
    assert found["job"]["state"] == "running"
    (attempt,) = found["attempts"]
    assert len(attempt["nodes"]) == 4
    assert {n["name"] for n in found["nodes"]} == set(attempt["nodes"])
    assert all(n["healthy"] for n in found["nodes"])
    assert [e["to"] for e in found["timeline"]][:3] == ["pending", "admitted", "placing"]
    assert any(w["waited_for"] or w["event"] for w in found["waits"])
    assert [p["worker"] for p in found["progress"]] == [0, 1, 2, 3]
    (flag,) = found["flags"]
    assert flag["kind"] == "straggler"
    assert flag["detail"]["worker"] == "3"
    # The simulated cluster's output of the job, its last lines.
    assert found["output"]["error"] == ""
    assert 0 < len(found["output"]["text"].splitlines()) <= 5
    assert set(found["utilization"]) >= {"gpu_hours_allocated", "mean_utilization"}


def test_another_teams_job_is_a_404_and_a_bad_parameter_a_400(fleet: Fleet, api: Any) -> None:
    job, _ = running(fleet)
    assert api("mallory").get(f"/api/v1/jobs/{job.pk}/debug/").status_code == 404
    bad = api("alice").get(f"/api/v1/jobs/{job.pk}/debug/", {"lines": "all"})
    assert bad.status_code == 400
    assert "lines" in bad.json()["error"]["fields"]


def test_a_job_not_yet_placed_says_so(fleet: Fleet, api: Any) -> None:
    job = fleet.submit("alice")
    found = api("alice").get(f"/api/v1/jobs/{job.pk}/debug/").json()
    assert found["attempts"] == []
    assert found["output"] == {
        "attempt": None,
        "text": "",
        "error": "It has not been handed to a cluster yet: no output.",
    }


def test_the_page_shows_every_part(fleet: Fleet, client: Any) -> None:
    job = flagged(fleet)
    client.force_login(fleet.user("alice"))
    page = client.get(f"/jobs/{job.pk}/debug/")
    assert page.status_code == 200
    text = page.content.decode()
    for part in ("debug-attempts", "debug-waits", "debug-nodes", "debug-utilization", "debug-progress", "debug-output"):
        assert f'data-testid="{part}"' in text
    assert "straggler" in text
    assert f'href="/jobs/{job.pk}/debug/"' in client.get(f"/jobs/{job.pk}/").content.decode()
    client.force_login(fleet.user("mallory"))
    assert client.get(f"/jobs/{job.pk}/debug/").status_code == 404


@pytest.mark.django_db(transaction=True)
def test_qm_debug_prints_it(fleet: Fleet, live_server: Any, monkeypatch: pytest.MonkeyPatch, capsys: Any) -> None:
    from tenancy import actions as portal_actions

    job = flagged(fleet)
    _, token = portal_actions.issue_token(fleet.user("alice"), name="cli")
    monkeypatch.setenv("QM_URL", live_server.url)
    monkeypatch.setenv("QM_TOKEN", token)
    monkeypatch.setenv("XDG_CONFIG_HOME", "/nonexistent")
    assert cli.main(["debug", str(job.pk), "--lines", "3"]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"Job #{job.pk} ")
    for heading in ("Attempts:", "Why it waited:", "Nodes:", "Progress:", "Flags:", "Timeline:", "GPU utilization:"):
        assert heading in out
    assert "straggler" in out
    assert "Last lines of its output (attempt 1):" in out
