"""``GET /api/v1/jobs/{id}/logs/``: a job's output from its cluster through the API, on the simulated fleet
(its made-up lines), paged and followed; a job not dispatched yet; bad parameters named; another team's job
a 404; what the cluster says (no such worker, no output kept, not answering, failing) in the API's error
format, never a 500."""

from __future__ import annotations

from typing import Any

import pytest
from django.utils import timezone

from clusters.backends.simulated import backend as simulated
from clusters.models import Cluster
from scheduler.models import Attempt, Job
from tests.scheduler.conftest import Fleet

pytestmark = pytest.mark.django_db

JOBS = "/api/v1/jobs/"


def running(fleet: Fleet, **fields: Any) -> Job:
    job = fleet.submit("alice", **fields)
    fleet.cycle()
    fleet.follow()
    job.refresh_from_db()
    assert job.state == Job.State.RUNNING, job.state
    return job


def logs(api: Any, job: Job, username: str = "alice", **query: Any) -> Any:
    return api(username).get(f"{JOBS}{job.pk}/logs/", query)


def test_a_running_jobs_output_page_by_page_then_on_from_the_offset(fleet: Fleet, api: Any) -> None:
    job = running(fleet, workers=2)
    attempt = job.attempts.get()
    first = logs(api, job)
    assert first.status_code == 200, first.content
    page = first.json()
    assert (page["job"], page["attempt"], page["latest_attempt"], page["job_state"]) == (job.pk, 1, 1, "running")
    assert page["cluster"] == attempt.cluster.name
    assignment = attempt.assignments.order_by("pk").first()
    assert assignment is not None
    node = assignment.node.name
    assert f"worker 0 of 2 started on node {node}" in page["text"]
    assert (page["more"], page["complete"]) == (False, False)
    assert "worker 1 of 2" in logs(api, job, worker="1").json()["text"]

    fleet.run_for(3600)  # the simulated job's whole run time
    rest = logs(api, job, offset=page["next_offset"]).json()
    assert "progress 90%" in rest["text"]
    assert "finished: exit code 0" in rest["text"]
    assert "started on node" not in rest["text"]
    assert rest["complete"] is True
    tail = logs(api, job, tail=1).json()
    assert tail["text"].count("\n") == 1
    assert "finished" in tail["text"]
    small = logs(api, job, limit=1024).json()
    assert len(small["text"].encode()) <= 1024


def test_a_job_not_dispatched_yet_has_an_empty_page_complete_only_once_it_ended(fleet: Fleet, api: Any) -> None:
    job = fleet.submit("alice")
    page = logs(api, job).json()
    assert (page["attempt"], page["text"], page["complete"], page["job_state"]) == (None, "", False, "pending")
    api("alice").post(f"{JOBS}{job.pk}/cancel/", {"reason": "never mind"}, format="json")
    assert logs(api, job).json()["complete"] is True


@pytest.mark.parametrize(
    ("query", "field"),
    [
        ({"tail": "-1"}, "tail"),
        ({"tail": "10001"}, "tail"),
        ({"tail": "٣"}, "tail"),
        ({"limit": "10"}, "limit"),
        ({"limit": str(2 << 20)}, "limit"),
        ({"offset": "12", "tail": "5"}, "tail"),
        ({"offset": "a b"}, "offset"),
        ({"worker": "../etc"}, "worker"),
        ({"attempt": "0"}, "attempt"),
        ({"offset": "nonsense"}, "offset"),  # well-formed, but no position the backend gave
    ],
)
def test_bad_parameters_are_a_400_naming_them(fleet: Fleet, api: Any, query: dict[str, str], field: str) -> None:
    job = running(fleet)
    response = logs(api, job, **query)
    assert response.status_code == 400, response.content
    assert field in response.json()["error"]["fields"]


@pytest.mark.parametrize("username", ["bob", "mallory", "trent"])
def test_another_teams_job_is_a_404(fleet: Fleet, api: Any, username: str) -> None:
    job = running(fleet)
    response = logs(api, job, username)
    assert (response.status_code, response.json()["error"]["code"]) == (404, "not_found")
    assert "started on node" not in response.content.decode()


def test_what_the_cluster_says_comes_back_in_the_api_error_format(fleet: Fleet, api: Any) -> None:
    job = running(fleet)
    attempt = job.attempts.select_related("cluster").get()
    cluster = attempt.cluster

    no_worker = logs(api, job, worker="7")
    assert (no_worker.status_code, no_worker.json()["error"]["code"]) == (404, "not_on_cluster")
    assert "workers 0 to 0" in no_worker.json()["error"]["message"]
    no_attempt = logs(api, job, attempt=2)
    assert (no_attempt.status_code, no_attempt.json()["error"]["code"]) == (404, "no_such_attempt")

    simulated.inject(cluster.endpoint, "unreachable", state_file=cluster.options["state_file"])
    down = logs(api, job)
    assert (down.status_code, down.json()["error"]["code"]) == (503, "cluster_unavailable")
    assert cluster.name in down.json()["error"]["message"]
    assert "does not answer" in down.json()["error"]["message"]
    simulated.clear(cluster.endpoint, state_file=cluster.options["state_file"])

    Cluster.objects.filter(pk=cluster.pk).update(options={**cluster.options, "profile": "no-such-profile"})
    broken = logs(api, job)
    assert (broken.status_code, broken.json()["error"]["code"]) == (502, "cluster_error")
    assert "unknown simulated profile" in broken.json()["error"]["message"]


def test_a_cluster_that_keeps_no_output_says_so(fleet: Fleet, api: Any) -> None:
    """A Slurm cluster without log_dir: the backend says what an admin can do, as a 404 the CLI shows."""
    job = fleet.submit("alice")
    slurm = Cluster.objects.create(
        organization=fleet.org, name="hpc", slug="hpc", kind="slurm", endpoint="http://127.0.0.1:9"
    )
    Attempt.objects.create(job=job, number=1, cluster=slurm, admitted_at=timezone.now(), backend_id="12")
    response = logs(api, job)
    assert (response.status_code, response.json()["error"]["code"]) == (404, "logs_unavailable")
    assert "log_dir" in response.json()["error"]["message"]
