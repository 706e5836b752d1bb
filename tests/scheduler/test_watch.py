"""Progress reports (``POST /api/v1/jobs/{id}/progress/``, ``qm progress``) and the watch round
(``scheduler/watch/rounds.py``): a straggler and a hang flagged from what the job reported, once, on its
timeline with the evidence, and what its tier says follows: the owner told, the straggler's node drained, the
hung job stopped to restart from its checkpoint."""

from __future__ import annotations

import re
from datetime import datetime, timedelta
from typing import Any

import pytest
from django.core import mail
from django.utils import timezone

from clusters.models import Drain, GpuSample, Node
from governance.models import PriorityTier, WatchAction
from qm import cli
from scheduler.actions import checkpoints
from scheduler.models import Attempt, Job, JobEvent, Progress
from scheduler.watch.rounds import watch_round
from tests.scheduler.conftest import Fleet
from tests.scheduler.test_checkpoints import as_job, running

pytestmark = pytest.mark.django_db


def url(job: Job) -> str:
    return f"/api/v1/jobs/{job.pk}/progress/"


def test_a_job_reports_each_workers_progress_with_its_token(fleet: Fleet) -> None:
    job, attempt = running(fleet, workers=2)
    client = as_job(checkpoints.token_for(attempt))
    answer = client.post(url(job), {"worker": 1, "step": 100, "step_seconds": 0.5}, format="json")
    assert answer.status_code == 201, answer.content
    assert answer.json()["worker"] == 1
    assert answer.json()["step_seconds"] == 0.5
    # The same worker again at once: 429 with Retry-After; another worker is another stream.
    again = client.post(url(job), {"worker": 1, "step": 101}, format="json")
    assert again.status_code == 429
    assert "Retry-After" in again
    assert client.post(url(job), {"worker": 0, "step": 100}, format="json").status_code == 201
    assert Progress.objects.filter(job=job).count() == 2


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"worker": 2, "step": 1}, "worker"),  # the job has two workers: 0 and 1
        ({"worker": -1, "step": 1}, "worker"),
        ({"step": -5}, "step"),
        ({"step": "12"}, "step"),
        ({"step": 1, "step_seconds": 0}, "step_seconds"),
        ({"step": 1, "step_seconds": "fast"}, "step_seconds"),
        ({"step": 1, "speed": 3}, "speed"),
    ],
)
def test_bad_progress_is_a_400_naming_the_field(fleet: Fleet, body: dict[str, Any], field: str) -> None:
    job, attempt = running(fleet, workers=2)
    answer = as_job(checkpoints.token_for(attempt)).post(url(job), body, format="json")
    assert answer.status_code == 400, answer.content
    assert field in answer.json()["error"]["fields"]
    assert not Progress.objects.exists()


def test_only_the_jobs_current_attempt_reports_and_people_do_not(fleet: Fleet, api: Any) -> None:
    job, attempt = running(fleet)
    _other, other_attempt = running(fleet)
    assert as_job(checkpoints.token_for(other_attempt)).post(url(job), {"step": 1}, format="json").status_code == 403
    assert api("alice").post(url(job), {"step": 1}, format="json").status_code == 403
    assert api("mallory").post(url(job), {"step": 1}, format="json").status_code == 404
    Attempt.objects.filter(pk=attempt.pk).update(outcome=Attempt.Outcome.LOST)
    assert as_job(checkpoints.token_for(attempt)).post(url(job), {"step": 1}, format="json").status_code == 403
    assert not Progress.objects.exists()


def test_qm_progress_reports_from_inside_the_job(
    fleet: Fleet, monkeypatch: pytest.MonkeyPatch, capsys: Any, live_server: Any, settings: Any
) -> None:
    settings.PUBLIC_URL = live_server.url
    job, attempt = running(fleet, workers=2)
    for name, value in checkpoints.env_for(attempt).items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("NODE_RANK", "1")  # torchrun's: the worker's rank among the nodes
    assert cli.main(["progress", "--step", "42", "--step-seconds", "0.8"]) == 0
    assert capsys.readouterr().out == f"Worker 1 at step 42, 0.8 s a step (job {job.pk}, attempt 1).\n"
    monkeypatch.setenv("NODE_RANK", "first")
    assert cli.main(["progress", "--step", "43"]) == 2
    assert "NODE_RANK='first' is not a worker's index" in capsys.readouterr().err
    monkeypatch.delenv("QM_JOB_TOKEN")
    assert cli.main(["progress", "--step", "43"]) == 1
    assert "qm progress runs inside a job started by Quartermaster (QM_JOB_TOKEN" in capsys.readouterr().err


def report_for(job: Job, start: datetime, minutes: int, pace: dict[int, float], stop_at: int | None = None) -> None:
    """Progress every 30 s for ``minutes``: each worker at its seconds per step; no steps after ``stop_at``."""
    steps = dict.fromkeys(pace, 0.0)
    rows = []
    for i in range(minutes * 2):
        at = start + timedelta(seconds=30 * (i + 1))
        for worker, seconds in pace.items():
            if stop_at is None or i < stop_at * 2:
                steps[worker] += 30 / max(pace.values())
            wobble = 1 + 0.01 * ((i + worker) % 3 - 1)
            rows.append(
                Progress(
                    job=job,
                    attempt=job.attempt,
                    worker=worker,
                    step=int(steps[worker]),
                    step_seconds=seconds * wobble,
                    reported_at=at,
                )
            )
    Progress.objects.bulk_create(rows)


def set_tier(job: Job, **fields: str) -> None:
    PriorityTier.objects.filter(pk=job.tier_id).update(**fields)
    job.refresh_from_db()


def test_a_straggler_is_flagged_once_and_its_owner_told(fleet: Fleet) -> None:
    job, _ = running(fleet, workers=4, accelerators=8)
    start = timezone.now() - timedelta(minutes=30)
    report_for(job, start, 30, {0: 1.0, 1: 1.0, 2: 1.45, 3: 1.0})
    report = watch_round(fleet.org, start + timedelta(minutes=30))
    assert (report.jobs, report.stragglers, report.hangs) == (1, 1, 0)
    (event,) = JobEvent.objects.filter(job=job, reason="straggler")
    assert (event.from_state, event.to_state) == ("running", "running")
    assert event.detail["worker"] == "2"
    assert event.detail["ratio"] == pytest.approx(1 / 1.45, rel=0.03)
    assert "worker 2 on " in event.message
    assert re.search(r"is a straggler: 3[0-2] % slower than its peers' median", event.message), event.message
    assert "Its owner (alice) was told by e-mail." in event.message
    # The next round flags nothing new.
    assert watch_round(fleet.org, start + timedelta(minutes=31)).stragglers == 0
    assert JobEvent.objects.filter(job=job, reason="straggler").count() == 1


def test_a_tier_that_restarts_drains_the_stragglers_node(fleet: Fleet, django_capture_on_commit_callbacks: Any) -> None:
    job, attempt = running(fleet, workers=4, accelerators=8)
    set_tier(job, on_straggler=WatchAction.RESTART)
    start = timezone.now() - timedelta(minutes=30)
    report_for(job, start, 30, {0: 1.0, 1: 1.6, 2: 1.0, 3: 1.0})
    with django_capture_on_commit_callbacks():
        watch_round(fleet.org, start + timedelta(minutes=30))
    (event,) = JobEvent.objects.filter(job=job, reason="straggler")
    node = Node.objects.get(cluster=attempt.cluster, name=event.detail["node"])
    drain = Drain.objects.get(node=node)
    assert drain.automatic
    assert f"straggler in job #{job.pk}" in drain.reason
    assert "is drained: the job restarts from its last checkpoint without it" in event.message
    assert not mail.outbox  # restart only: nobody told


def test_a_hung_job_is_flagged_and_restarted_as_its_tier_says(
    fleet: Fleet, django_capture_on_commit_callbacks: Any
) -> None:
    job, _ = running(fleet, workers=2, accelerators=8)
    set_tier(job, on_hang=WatchAction.BOTH)
    start = timezone.now() - timedelta(minutes=60)
    report_for(job, start, 60, {0: 1.0, 1: 1.0}, stop_at=20)  # no step after 20 minutes
    with django_capture_on_commit_callbacks(execute=True):
        report = watch_round(fleet.org, start + timedelta(minutes=60))
    assert report.hangs == 1
    job.refresh_from_db()
    assert job.state == Job.State.PREEMPTING
    hung = JobEvent.objects.get(job=job, reason="hung", to_state="running")
    assert "Hung: no progress for 40 min; its usual step takes 1.0" in hung.message
    stop = JobEvent.objects.get(job=job, reason="hung", to_state="preempting")
    assert "Restarted from its last checkpoint" in stop.message
    (sent,) = mail.outbox
    assert sent.subject == f"Job #{job.pk} is hung"


def test_the_tier_api_takes_what_follows_a_flag(fleet: Fleet, api: Any) -> None:
    body = {"name": "batch", "value": 10, "on_straggler": "both", "on_hang": "restart", "reason": "watch"}
    answer = api("adam").post("/api/v1/tiers/", body, format="json")
    assert answer.status_code == 201, answer.content
    assert (answer.json()["on_straggler"], answer.json()["on_hang"]) == ("both", "restart")
    bad = api("adam").post("/api/v1/tiers/", {**body, "on_hang": "panic"}, format="json")
    assert bad.status_code == 400
    assert "on_hang" in bad.json()["error"]["fields"]


def utilization_for(job: Job, start: datetime, minutes: int, busy: dict[str, list[float]]) -> list[str]:
    """Probe samples every minute for the job's nodes: node i's GPUs at ``busy[i][minute]`` %; its node names."""
    nodes = [a.node for a in Attempt.objects.get(job=job, number=job.attempt).assignments.select_related("node")]
    rows = []
    for i, node in enumerate(nodes):
        for minute in range(minutes):
            at = (start + timedelta(minutes=minute)).replace(second=0, microsecond=0)
            value = busy[str(i)][minute] if str(i) in busy else busy["*"][minute]
            rows += [GpuSample(node=node, gpu=g, at=at, utilization=value) for g in range(node.accelerators)]
    GpuSample.objects.bulk_create(rows)
    return [n.name for n in nodes]


def test_without_progress_reports_a_node_less_busy_than_its_peers_is_the_straggler(fleet: Fleet) -> None:
    job, _ = running(fleet, workers=4, accelerators=8)
    start = timezone.now() - timedelta(minutes=30)
    names = utilization_for(job, start, 30, {"*": [95.0] * 30, "1": [95.0] * 10 + [55.0] * 20})
    report = watch_round(fleet.org, start + timedelta(minutes=30))
    assert (report.jobs, report.stragglers, report.hangs) == (1, 1, 0)
    (event,) = JobEvent.objects.filter(job=job, reason="straggler")
    assert event.detail["worker"] == names[1]
    assert f"node {names[1]} is a straggler: its GPUs 42 % less busy than its peers' median" in event.message


def test_without_progress_reports_gpus_idle_past_the_floor_are_a_hang(fleet: Fleet) -> None:
    job, _ = running(fleet, workers=2, accelerators=8)
    start = timezone.now() - timedelta(minutes=40)
    utilization_for(job, start, 40, {"*": [90.0] * 20 + [0.0] * 20})
    report = watch_round(fleet.org, start + timedelta(minutes=40))
    assert report.hangs == 1
    assert "Hung: no progress for" in JobEvent.objects.get(job=job, reason="hung").message
