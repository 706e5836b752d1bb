"""Checkpoints a job reports with its attempt's token: the token (unforgeable, fenced by attempt), the
report endpoint and no other, validation, the rate limit and retention, what the job's detail, page and
``qm show`` say of its attempts and last checkpoint, what the engine's snapshot reads, and ``qm checkpoint``
end to end against a live server."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.utils import timezone
from rest_framework.test import APIClient

from qm import cli
from scheduler.actions import checkpoints
from scheduler.models import Attempt, Checkpoint, Job
from scheduler.placement import snapshot
from tenancy import actions as portal_actions
from tests.scheduler.conftest import Fleet

pytestmark = pytest.mark.django_db


def running(fleet: Fleet, **fields: Any) -> tuple[Job, Attempt]:
    """A running job of alice's, and its current attempt."""
    job = fleet.submit("alice", **{"checkpoint_location": "s3://lab/run", **fields})
    fleet.cycle()
    fleet.follow()
    job.refresh_from_db()
    assert job.state == Job.State.RUNNING
    return job, Attempt.objects.get(job=job, number=job.attempt)


def as_job(token: str) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {token}")
    return client


def url(job: Job) -> str:
    return f"/api/v1/jobs/{job.pk}/checkpoints/"


def next_attempt(job: Job, outcome: str = Attempt.Outcome.LOST) -> Attempt:
    """End the job's current attempt and start another on the same cluster (as a restart would)."""
    old = Attempt.objects.get(job=job, number=job.attempt)
    now = timezone.now()
    Attempt.objects.filter(pk=old.pk).update(outcome=outcome, ended_at=now)
    new = Attempt.objects.create(job=job, number=old.number + 1, cluster=old.cluster, admitted_at=now, started_at=now)
    Job.objects.filter(pk=job.pk).update(attempt=new.number)
    job.refresh_from_db()
    return new


# --- the token ---------------------------------------------------------------------------------------------


def test_a_token_names_its_job_and_attempt_and_cannot_be_forged(fleet: Fleet, settings: Any) -> None:
    job, attempt = running(fleet)
    token = checkpoints.token_for(attempt)
    assert token.startswith(f"qmj_{job.pk}.{attempt.number}.")
    assert token == checkpoints.token_for(attempt)  # stateless: the same every time
    assert checkpoints.parse_token(token) == checkpoints.JobToken(job.pk, attempt.number)
    mac = token.rsplit(".", 1)[1]
    for forged in (
        f"qmj_{job.pk + 1}.{attempt.number}.{mac}",  # another job, same MAC
        f"qmj_{job.pk}.{attempt.number + 1}.{mac}",  # another attempt
        token[:-1] + ("0" if token[-1] != "0" else "1"),  # a MAC one digit off
        f"qmj_{job.pk}.{attempt.number}.",
        f"qmj_{job.pk}.{attempt.number}",
        f"qmj_²{job.pk}.{attempt.number}.{mac}",
        token.replace("qmj_", "qm_"),
    ):
        assert checkpoints.parse_token(forged) is None, forged

    # Rotating SECRET_KEY keeps the running jobs' tokens good while the old key is among the fallbacks.
    old_key = settings.SECRET_KEY
    settings.SECRET_KEY, settings.SECRET_KEY_FALLBACKS = "a-new-key-" + "x" * 50, [old_key]
    assert checkpoints.parse_token(token) == checkpoints.JobToken(job.pk, attempt.number)
    settings.SECRET_KEY_FALLBACKS = []
    assert checkpoints.parse_token(token) is None


def test_env_for_hands_the_attempt_its_token_the_api_and_where_to_resume(fleet: Fleet, settings: Any) -> None:
    settings.PUBLIC_URL = "https://qm.example.org"
    job, attempt = running(fleet)
    env = checkpoints.env_for(attempt)
    assert env == {
        "QM_JOB_TOKEN": checkpoints.token_for(attempt),
        "QM_API_URL": "https://qm.example.org",
        "QM_JOB_ID": f"{job.pk}-{attempt.number}-{job.key_suffix}",
        "QM_RESUME_FROM": "",  # a first run: nothing to resume
    }
    checkpoints.report(job, attempt.number, "s3://lab/run/step-100", 100)
    second = next_attempt(job)
    assert checkpoints.env_for(second)["QM_RESUME_FROM"] == "s3://lab/run/step-100"
    assert checkpoints.resume_from(job) == "s3://lab/run/step-100"


def test_a_restart_without_a_checkpoint_resumes_from_the_location_it_was_submitted_with(fleet: Fleet) -> None:
    job, _ = running(fleet)
    assert checkpoints.last(job) is None
    second = next_attempt(job)
    assert checkpoints.env_for(second)["QM_RESUME_FROM"] == checkpoints.resume_from(job) == "s3://lab/run"


# --- reporting ---------------------------------------------------------------------------------------------


def test_the_job_reports_a_checkpoint_with_its_token(fleet: Fleet) -> None:
    job, attempt = running(fleet)
    response = as_job(checkpoints.token_for(attempt)).post(
        url(job), {"location": "s3://lab/run/step-1000", "step": 1000}, format="json"
    )
    assert response.status_code == 201, response.content
    body = response.json()
    assert {k: body[k] for k in ("attempt", "location", "step")} == {
        "attempt": attempt.number,
        "location": "s3://lab/run/step-1000",
        "step": 1000,
    }
    stored = Checkpoint.objects.get(job=job)
    assert (stored.attempt, stored.location, stored.step) == (attempt.number, "s3://lab/run/step-1000", 1000)
    assert checkpoints.last(job) == stored
    job.refresh_from_db()
    assert job.checkpoint_location == "s3://lab/run"  # what was asked for (QM_CHECKPOINT_DIR) stays as it was


def test_a_step_may_be_left_out(fleet: Fleet) -> None:
    job, attempt = running(fleet)
    response = as_job(checkpoints.token_for(attempt)).post(url(job), {"location": "gs://b/ckpt"}, format="json")
    assert response.status_code == 201, response.content
    assert response.json()["step"] is None


def test_forged_and_foreign_tokens_are_refused_and_nothing_is_stored(fleet: Fleet) -> None:
    job, attempt = running(fleet)
    other, other_attempt = running(fleet, name="other")
    body = {"location": "s3://x", "step": 1}
    forged = checkpoints.token_for(attempt)[:-4] + "abcd"
    response = as_job(forged).post(url(job), body, format="json")
    assert response.status_code == 401
    assert response.json()["error"]["message"] == "Invalid job token."
    response = as_job(checkpoints.token_for(other_attempt)).post(url(job), body, format="json")
    assert response.status_code == 403
    assert response.json()["error"]["message"] == f"This job token is for job #{other.pk}, not #{job.pk}."
    assert not Checkpoint.objects.exists()


def test_an_earlier_attempts_token_is_refused_once_the_job_moved_on(fleet: Fleet) -> None:
    job, first = running(fleet)
    old_token = checkpoints.token_for(first)
    second = next_attempt(job)
    response = as_job(old_token).post(url(job), {"location": "s3://stale"}, format="json")
    assert response.status_code == 403
    assert response.json()["error"]["message"] == (
        f"This token is of attempt 1 of job #{job.pk}, which is now on attempt 2: "
        "only the current attempt reports checkpoints."
    )
    assert not Checkpoint.objects.exists()
    response = as_job(checkpoints.token_for(second)).post(url(job), {"location": "s3://fresh"}, format="json")
    assert response.status_code == 201
    assert list(Checkpoint.objects.values_list("attempt", "location")) == [(2, "s3://fresh")]


def test_an_ended_attempts_token_is_refused(fleet: Fleet) -> None:
    job, attempt = running(fleet)
    Attempt.objects.filter(pk=attempt.pk).update(outcome=Attempt.Outcome.SUCCEEDED, ended_at=timezone.now())
    Job.objects.filter(pk=job.pk).update(state=Job.State.SUCCEEDED)
    response = as_job(checkpoints.token_for(attempt)).post(url(job), {"location": "s3://late"}, format="json")
    assert response.status_code == 403
    message = response.json()["error"]["message"]
    assert message == f"Attempt 1 of job #{job.pk} has ended (succeeded): it reports no more checkpoints."
    assert not Checkpoint.objects.exists()


def test_a_job_being_preempted_may_checkpoint_in_its_grace_period(fleet: Fleet) -> None:
    job, attempt = running(fleet)
    now = timezone.now()
    checkpoints.report(job, attempt.number, "s3://lab/run/step-1", 1, at=now)
    Job.objects.filter(pk=job.pk).update(state=Job.State.PREEMPTING)
    Attempt.objects.filter(pk=attempt.pk).update(stop_reason=Attempt.Stop.PREEMPTED, stop_deadline=now)
    # Within its grace period the job saves once more, a few seconds after its last checkpoint: taken.
    saved = checkpoints.report(job, attempt.number, "s3://lab/run/final", 2, at=now + timedelta(seconds=2))
    assert checkpoints.resume_from(job) == saved.location == "s3://lab/run/final"
    with pytest.raises(checkpoints.TooSoon, match="once every 1 s"):  # still not a flood
        checkpoints.report(job, attempt.number, "s3://lab/run/final-2", 3, at=now + timedelta(seconds=2.5))


def test_a_job_token_is_refused_everywhere_else(fleet: Fleet) -> None:
    job, attempt = running(fleet)
    client = as_job(checkpoints.token_for(attempt))
    for path in ("/api/v1/jobs/", f"/api/v1/jobs/{job.pk}/", f"/api/v1/jobs/{job.pk}/events/", "/api/v1/me/"):
        assert client.get(path).status_code == 401, path
    assert client.post(f"/api/v1/jobs/{job.pk}/cancel/", {"reason": "x"}, format="json").status_code == 401
    job.refresh_from_db()
    assert job.state == Job.State.RUNNING
    # On its own endpoint it reports; it reads nothing, not even the checkpoints.
    response = client.get(url(job))
    assert response.status_code == 403
    assert response.json()["error"]["message"] == "A job token only reports its job's checkpoints; it reads nothing."


def test_people_do_not_report_checkpoints_and_another_teams_job_is_a_404(fleet: Fleet, api: Any) -> None:
    job, _ = running(fleet)
    body = {"location": "s3://by-hand"}
    response = api("alice").post(url(job), body, format="json")  # the job's owner
    assert response.status_code == 403
    assert "reported by the job itself" in response.json()["error"]["message"]
    assert api("adam").post(url(job), body, format="json").status_code == 403
    assert api("mallory").post(url(job), body, format="json").status_code == 404
    assert api("bob").post(url(job), body, format="json").status_code == 404  # another team of the same org
    assert APIClient().post(url(job), body, format="json").status_code == 401
    assert not Checkpoint.objects.exists()


def test_people_who_see_the_job_list_its_checkpoints(fleet: Fleet, api: Any) -> None:
    job, attempt = running(fleet)
    now = timezone.now()
    for step in range(3):
        checkpoints.report(job, attempt.number, f"s3://lab/run/step-{step}", step, at=now + timedelta(minutes=step))
    response = api("lena").get(url(job))
    assert response.status_code == 200
    assert [row["step"] for row in response.json()["results"]] == [2, 1, 0]  # newest first
    assert api("mallory").get(url(job)).status_code == 404
    assert api("bob").get(url(job)).status_code == 404


@pytest.mark.parametrize(
    ("body", "field", "message"),
    [
        ({}, "location", "This field is required."),
        ({"location": "  "}, "location", "This field is required."),
        ({"location": "s3://" + "x" * 496}, "location", "at most 500 characters"),
        ({"location": "s3://a\nb"}, "location", "no control characters"),
        ({"location": "s3://a\tb"}, "location", "no control characters"),
        ({"location": 7}, "location", "Not a string."),
        ({"location": "s3://a", "step": -1}, "step", "greater than or equal to 0"),
        ({"location": "s3://a", "step": "12"}, "step", "A valid integer is required."),
        ({"location": "s3://a", "step": True}, "step", "A valid integer is required."),
        ({"location": "s3://a", "step": 1.5}, "step", "A valid integer is required."),
        ({"location": "s3://a", "step": 2**63}, "step", "less than or equal to"),
        ({"location": "s3://a", "stepp": 1}, "stepp", "Unknown field. Did you mean step?"),
    ],
)
def test_bad_input_is_a_400_naming_the_field_with_nothing_stored(
    fleet: Fleet, body: dict[str, Any], field: str, message: str
) -> None:
    job, attempt = running(fleet)
    response = as_job(checkpoints.token_for(attempt)).post(url(job), body, format="json")
    assert response.status_code == 400, response.content
    error = response.json()["error"]
    assert error["code"] == "invalid"
    assert message in " ".join(error["fields"][field])
    assert not Checkpoint.objects.exists()


def test_an_attempt_reports_at_most_once_every_ten_seconds(fleet: Fleet) -> None:
    job, attempt = running(fleet)
    client = as_job(checkpoints.token_for(attempt))
    assert client.post(url(job), {"location": "s3://a/1"}, format="json").status_code == 201
    response = client.post(url(job), {"location": "s3://a/2"}, format="json")
    assert response.status_code == 429
    assert 1 <= int(response["Retry-After"]) <= 10
    error = response.json()["error"]
    assert error["code"] == "throttled"
    assert error["message"] == (
        f"Checkpoints are taken once every 10 s per attempt. Expected available in {response['Retry-After']} seconds."
    )
    assert list(Checkpoint.objects.values_list("location", flat=True)) == ["s3://a/1"]
    now = timezone.now()
    with pytest.raises(checkpoints.TooSoon):
        checkpoints.report(job, attempt.number, "s3://a/3", None, at=now + timedelta(seconds=5))
    checkpoints.report(job, attempt.number, "s3://a/4", None, at=now + checkpoints.MIN_INTERVAL)
    assert checkpoints.resume_from(job) == "s3://a/4"


def test_a_job_keeps_its_last_fifty_checkpoints(fleet: Fleet) -> None:
    job, attempt = running(fleet)
    start = timezone.now()
    for step in range(checkpoints.KEEP + 5):
        checkpoints.report(job, attempt.number, f"s3://r/{step}", step, at=start + timedelta(seconds=10 * step))
    steps = sorted(Checkpoint.objects.filter(job=job).values_list("step", flat=True))
    assert steps == list(range(5, checkpoints.KEEP + 5))
    assert checkpoints.resume_from(job) == f"s3://r/{checkpoints.KEEP + 4}"


# --- what the job's detail, page and the engine read -------------------------------------------------------


def test_the_job_detail_lists_attempts_and_the_last_checkpoint_in_a_bounded_number_of_queries(
    fleet: Fleet, api: Any
) -> None:
    job, first = running(fleet)
    client = api("alice")
    client.get("/api/v1/me/")  # the token's first use is written down (last_used_at): not counted below
    with CaptureQueriesContext(connection) as few:
        assert client.get(f"/api/v1/jobs/{job.pk}/").status_code == 200
    now = timezone.now()
    checkpoints.report(job, first.number, "s3://lab/run/a", 10, at=now)
    Attempt.objects.filter(pk=first.pk).update(reason="oom_killed", message="worker 0 was OOM-killed", exit_code=137)
    for n in range(3):
        attempt = next_attempt(job)
        checkpoints.report(job, attempt.number, f"s3://lab/run/{n}", 100 + n, at=now + timedelta(minutes=n + 1))
    with CaptureQueriesContext(connection) as more:
        response = client.get(f"/api/v1/jobs/{job.pk}/")
    assert len(more) == len(few), [q["sql"] for q in more.captured_queries]
    body = response.json()
    assert body["last_checkpoint"] == {
        "attempt": 4,
        "location": "s3://lab/run/2",
        "step": 102,
        "reported_at": body["last_checkpoint"]["reported_at"],
    }
    rows = body["attempts"]
    assert [(a["number"], a["outcome"], a["checkpoints"]) for a in rows] == [
        (1, "lost", 1),
        (2, "lost", 1),
        (3, "lost", 1),
        (4, "active", 1),
    ]
    assert rows[0]["cluster"] == first.cluster.slug
    assert rows[0]["nodes"][0]["name"]
    assert (rows[0]["reason"], rows[0]["exit_code"]) == ("oom_killed", 137)
    assert rows[0]["ended_because"] == "Worker 0 was OOM-killed; exit code 137"
    assert rows[3]["state"] == "Running"
    for key in ("admitted_at", "submitted_at", "started_at", "ended_at", "stop_reason", "unknown_since", "message"):
        assert key in rows[0]
    # The list stays lean: neither attempts nor checkpoints there.
    listed = client.get("/api/v1/jobs/").json()["results"][0]
    assert "attempts" not in listed
    assert "last_checkpoint" not in listed


def test_a_job_with_no_checkpoint_says_so(fleet: Fleet, api: Any) -> None:
    job, _ = running(fleet)
    body = api("alice").get(f"/api/v1/jobs/{job.pk}/").json()
    assert body["last_checkpoint"] is None
    assert body["attempts"][0]["checkpoints"] == 0


def test_the_job_page_shows_attempts_why_they_ended_and_the_last_checkpoint(fleet: Fleet) -> None:
    job, first = running(fleet)
    Attempt.objects.filter(pk=first.pk).update(reason="exit_code", message="train.py crashed", exit_code=3)
    second = next_attempt(job, outcome=Attempt.Outcome.FAILED)
    checkpoints.report(job, second.number, "s3://lab/run/step-5000", 5000)
    page = Client()
    page.force_login(fleet.user("alice"))
    response = page.get(f"/jobs/{job.pk}/")
    assert response.status_code == 200
    html = response.content.decode()
    assert "Train.py crashed; exit code 3" in html
    assert "s3://lab/run/step-5000" in html
    assert "step 5000" in html
    assert 'data-testid="attempt-2"' in html
    assert "resuming from <code>s3://lab/run/step-5000</code>" not in html  # alice may not preempt
    admin = Client()
    admin.force_login(fleet.user("adam"))
    assert "resuming from <code>s3://lab/run/step-5000</code>" in admin.get(f"/jobs/{job.pk}/").content.decode()


def test_the_snapshot_gives_running_workloads_their_last_checkpoint(fleet: Fleet) -> None:
    job, attempt = running(fleet)
    other, _ = running(fleet, name="never-saves")
    at = timezone.now().replace(microsecond=0)
    checkpoints.report(job, attempt.number, "s3://a", 1, at=at - timedelta(minutes=5))
    checkpoints.report(job, attempt.number, "s3://b", 2, at=at)
    with CaptureQueriesContext(connection) as queries:
        state, _ = snapshot.build(fleet.org)
    workloads = {w.id: w for w in state.running}
    assert workloads[str(job.pk)].last_checkpoint_at == at.timestamp()
    assert workloads[str(other.pk)].last_checkpoint_at is None
    # An earlier attempt's checkpoint is not the current attempt's progress.
    next_attempt(job)
    with CaptureQueriesContext(connection) as again:
        state, _ = snapshot.build(fleet.org)
    assert {w.id: w for w in state.running}[str(job.pk)].last_checkpoint_at is None
    assert len(again) == len(queries)


# --- qm ----------------------------------------------------------------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_qm_checkpoint_reports_from_inside_the_job_and_qm_show_lists_it(
    live_server: Any, fleet: Fleet, settings: Any, tmp_path: Any, monkeypatch: pytest.MonkeyPatch, capsys: Any
) -> None:
    settings.VAR_DIR = tmp_path / "var"
    settings.PUBLIC_URL = live_server.url
    job, attempt = running(fleet)
    for name, value in checkpoints.env_for(attempt).items():
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("QM_TOKEN", raising=False)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))

    assert cli.main(["checkpoint", "--location", "s3://lab/run/step-10", "--step", "10"]) == 0
    out, err = capsys.readouterr()
    assert (out, err) == (f"Checkpoint s3://lab/run/step-10 at step 10 reported (job {job.pk}, attempt 1).\n", "")
    assert list(Checkpoint.objects.values_list("location", "step")) == [("s3://lab/run/step-10", 10)]

    # Too soon: the server's words, exit 1, nothing stored.
    assert cli.main(["checkpoint", "--location", "s3://lab/run/step-11"]) == 1
    assert "once every 10 s per attempt" in capsys.readouterr().err
    # A bad step is named.
    Checkpoint.objects.all().delete()
    assert cli.main(["checkpoint", "--location", "s3://x", "--step", "-3"]) == 2
    assert "step: Ensure this value is greater than or equal to 0." in capsys.readouterr().err

    # Outside a job it says what is missing.
    monkeypatch.delenv("QM_JOB_TOKEN")
    assert cli.main(["checkpoint", "--location", "s3://x"]) == 1
    assert capsys.readouterr().err == (
        "qm: qm checkpoint runs inside a job started by Quartermaster (QM_JOB_TOKEN is not set).\n"
    )

    # qm show, as alice, lists the last checkpoint and the attempts.
    checkpoints.report(job, attempt.number, "s3://lab/run/step-20", 20, at=timezone.now() + timedelta(minutes=1))
    _, token = portal_actions.issue_token(fleet.user("alice"), name="cli")
    monkeypatch.setenv("QM_URL", live_server.url)
    monkeypatch.setenv("QM_TOKEN", token)
    assert cli.main(["show", str(job.pk)]) == 0
    out = capsys.readouterr().out
    assert "  checkpoint   s3://lab/run/step-20, step 20 (" in out
    lines = out.splitlines()
    header = lines.index("Attempts:") + 1
    assert lines[header].split() == [
        "#",
        "CLUSTER",
        "NODES",
        "STATE",
        "STARTED",
        "ENDED",
        "CKPTS",
        "COST",
        "WHY",
        "IT",
        "ENDED",
    ]
    assert lines[header + 1].split()[:4] == ["1", attempt.cluster.slug, lines[header + 1].split()[2], "Running"]
