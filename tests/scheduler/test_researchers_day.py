"""Issue 23's "done when", end to end on the simulated fleet through the API a researcher (or ``qm``) uses:
a 100-point sweep followed by an evaluation job in one submission, the evaluation starting only once every
task has ended, an e-mail when the sweep finished, and the output of a failed job read back. (Opening a
notebook on a GPU is ``test_sessions.py`` and ``test_sessions_lab.py``; each role's home, ``test_home.py``
and the browser tests.)"""

from __future__ import annotations

from typing import Any

import pytest
from django.core import mail
from django.db.models import Max

from clusters.backends.simulated import backend as simulated
from notifications.actions import outbox
from notifications.models import Notification
from scheduler.models import Job, JobArray
from tests.conftest import api_client
from tests.scheduler.conftest import Fleet

pytestmark = pytest.mark.django_db
S = Job.State

TRAIN = {"name": "sweep", "time_limit": "1h", "image": "ghcr.io/lab/train:1", "command": ["python", "train.py"]}
EVALUATE = {"name": "evaluate", "time_limit": "1h", "image": "ghcr.io/lab/eval:1", "command": ["python", "eval.py"]}


def drive(fleet: Fleet, done: Any, rounds: int = 40) -> int:
    """Run the placement loop and the clusters until ``done()``; the rounds it took."""
    for n in range(1, rounds + 1):
        fleet.cycle()
        fleet.follow()
        fleet.run_for(3600)
        fleet.follow()
        if done():
            return n
    raise AssertionError(f"not done after {rounds} rounds")


def test_a_100_point_sweep_then_an_evaluation_in_one_submission_and_an_e_mail_when_the_sweep_finished(
    fleet: Fleet,
) -> None:
    alice = fleet.user("alice")
    team = {"team": fleet.world.teams["vision"].pk}
    answer = api_client(alice).post(
        "/api/v1/pipelines/",
        {
            "steps": [
                {
                    "name": "train",
                    "job": {**TRAIN, **team},
                    "array": {
                        "grid": {"lr": [0.1, 0.03, 0.01, 0.003, 0.001], "seed": list(range(20))},
                        "max_running": 25,
                    },
                },
                {"name": "evaluate", "after": ["train"], "job": {**EVALUATE, **team}},
            ]
        },
        format="json",
    )
    assert answer.status_code == 201, answer.content
    array = JobArray.objects.get(submitted_by=alice)
    evaluate = Job.objects.get(name="evaluate")
    assert array.count == 100
    outbox.collect()  # nothing to tell yet: the cursor starts here

    fleet.cycle()
    assert Job.objects.filter(array=array).exclude(state=S.PENDING).count() == 25  # its limit
    evaluate.refresh_from_db()
    assert evaluate.pending_message == f"Waits for array #{array.pk} sweep to succeed (0 of 100 done)."

    drive(fleet, lambda: Job.objects.get(pk=evaluate.pk).state == S.SUCCEEDED)
    tasks = Job.objects.filter(array=array)
    assert set(tasks.values_list("state", flat=True)) == {S.SUCCEEDED}
    evaluate.refresh_from_db()
    assert evaluate.started_at is not None
    assert evaluate.started_at >= tasks.aggregate(last=Max("finished_at"))["last"]

    outbox.collect()
    (told,) = Notification.objects.filter(user=alice, event="array_finished")
    assert outbox.deliver(told.pk)
    (sent,) = [m for m in mail.outbox if "Array" in m.subject]
    assert sent.subject == f"[Quartermaster] Array {array.pk} (sweep) finished: 100 succeeded"
    assert sent.to == [alice.email]
    assert f"/jobs/arrays/{array.pk}/" in sent.body


def test_a_researcher_reads_the_output_of_a_job_that_failed(fleet: Fleet) -> None:
    job = fleet.submit("alice", max_retries=0)
    for cluster in fleet.clusters.values():
        key = f"{job.pk}-1-{job.key_suffix}"
        simulated.inject(cluster.endpoint, "exit_code", state_file=cluster.options["state_file"], job=key, code=3)
    drive(fleet, lambda: Job.objects.get(pk=job.pk).state == S.FAILED, rounds=3)
    page = api_client(fleet.user("alice")).get(f"/api/v1/jobs/{job.pk}/logs/").json()
    assert page["job_state"] == "failed"
    assert "worker 0 of 1 started on node" in page["text"]
    assert page["complete"] is True
    assert api_client(fleet.user("bob")).get(f"/api/v1/jobs/{job.pk}/logs/").status_code == 404
