"""The arrays and pipelines API: submit, read (counts by state, failed first), filter jobs by array, cancel,
requeue; bad input is a 400 naming the field; another team's array is a 404 for every verb."""

from __future__ import annotations

from typing import Any

import pytest

from scheduler.models import Dependency, Job, JobArray
from tests.conftest import api_client
from tests.scheduler.conftest import Fleet

pytestmark = pytest.mark.django_db
S = Job.State

JOB = {"name": "sweep", "time_limit": "1h", "image": "ghcr.io/lab/train:1", "command": ["python", "t.py"]}


def post_array(fleet: Fleet, username: str = "alice", **body: Any) -> Any:
    return api_client(fleet.user(username)).post("/api/v1/arrays/", {"job": JOB, **body}, format="json")


def test_submit_read_and_list_the_tasks_of_an_array(fleet: Fleet) -> None:
    answer = post_array(fleet, grid={"lr": [0.1, 0.01], "seed": [1, 2, 3]}, max_running=2)
    assert answer.status_code == 201, answer.json()
    body = answer.json()
    assert (body["count"], body["max_running"], body["counts"], body["done"]) == (6, 2, {"pending": 6}, 0)
    array_id = body["id"]
    Job.objects.filter(array_id=array_id, array_index=4).update(state=S.FAILED, message="exit code 1")
    detail = api_client(fleet.user("lena")).get(f"/api/v1/arrays/{array_id}/").json()
    assert detail["counts"] == {"pending": 5, "failed": 1}
    assert detail["tasks"][0]["index"] == 4  # failed first
    assert detail["tasks"][0]["params"] == {"lr": 0.01, "seed": 2}
    tasks = api_client(fleet.user("alice")).get(f"/api/v1/jobs/?array={array_id}&state=pending").json()
    assert tasks["count"] == 5
    assert {t["array"] for t in tasks["results"]} == {array_id}
    listed = api_client(fleet.user("alice")).get("/api/v1/arrays/").json()
    assert [a["id"] for a in listed["results"]] == [array_id]


def test_cancel_and_requeue_through_the_api(fleet: Fleet) -> None:
    array_id = post_array(fleet, range="0-2").json()["id"]
    Job.objects.filter(array_id=array_id, array_index=0).update(state=S.FAILED)
    client = api_client(fleet.user("alice"))
    requeued = client.post(f"/api/v1/arrays/{array_id}/requeue/", {}, format="json")
    assert requeued.status_code == 200
    assert requeued.json()["requeued"] == 1
    again = client.post(f"/api/v1/arrays/{array_id}/requeue/", {}, format="json")
    assert again.status_code == 409
    assert "nothing to requeue" in again.json()["error"]["message"]
    cancelled = client.post(f"/api/v1/arrays/{array_id}/cancel/", {"reason": "wrong data"}, format="json")
    assert cancelled.status_code == 200
    assert cancelled.json()["array"]["counts"] == {"cancelled": 3}


@pytest.mark.parametrize(
    ("body", "field", "words"),
    [
        ({"range": "5-1"}, "range", "goes nowhere"),
        ({"range": "0-3", "max_running": 0}, "max_running", ""),
        ({"range": "0-3", "job": {**JOB, "accelerators": -1}}, "job.accelerators", "between 0 and"),
        ({"range": "0-3", "job": {**JOB, "memory_gib": "lots"}}, "job.memory_gib", ""),
        ({"range": "0-3", "colour": "red"}, "colour", ""),
    ],
)
def test_bad_input_is_a_400_naming_the_field_and_nothing_is_written(
    fleet: Fleet, body: dict[str, Any], field: str, words: str
) -> None:
    answer = api_client(fleet.user("alice")).post("/api/v1/arrays/", {"job": JOB, **body}, format="json")
    assert answer.status_code == 400, answer.json()
    fields = answer.json()["error"]["fields"]
    assert field in fields, fields
    assert words in " ".join(fields[field])
    assert not JobArray.objects.exists()


def test_another_teams_array_is_404_for_every_verb(fleet: Fleet) -> None:
    array_id = post_array(fleet, range="0-1").json()["id"]
    bob = api_client(fleet.user("bob"))
    assert bob.get(f"/api/v1/arrays/{array_id}/").status_code == 404
    assert bob.post(f"/api/v1/arrays/{array_id}/cancel/", {}, format="json").status_code == 404
    assert bob.post(f"/api/v1/arrays/{array_id}/requeue/", {}, format="json").status_code == 404
    assert bob.get(f"/api/v1/jobs/?array={array_id}").json()["count"] == 0
    assert bob.get("/api/v1/arrays/").json()["count"] == 0
    assert set(Job.objects.filter(array_id=array_id).values_list("state", flat=True)) == {S.PENDING}


def test_a_pipeline_in_one_request(fleet: Fleet) -> None:
    body = {
        "steps": [
            {"name": "preprocess", "job": {**JOB, "name": "pre"}},
            {"name": "train", "job": JOB, "array": {"range": "0-9", "max_running": 5}, "after": ["preprocess"]},
            {
                "name": "evaluate",
                "job": {**JOB, "name": "eval"},
                "after": [{"step": "train", "kind": "after_any"}],
                "on_dependency_failure": "hold",
            },
        ]
    }
    answer = api_client(fleet.user("alice")).post("/api/v1/pipelines/", body, format="json")
    assert answer.status_code == 201, answer.json()
    steps = answer.json()["steps"]
    assert steps["train"]["kind"] == "array"
    evaluate = Job.objects.get(pk=steps["evaluate"]["id"])
    assert evaluate.on_dependency_failure == "hold"
    detail = api_client(fleet.user("alice")).get(f"/api/v1/jobs/{evaluate.pk}/").json()
    assert detail["dependencies"] == [{"kind": "after_any", "on_job": None, "on_array": steps["train"]["id"]}]
    assert Dependency.objects.filter(on_job_id=steps["preprocess"]["id"]).count() == 10


def test_a_pipeline_with_a_cycle_or_someone_elses_job_is_refused(fleet: Fleet) -> None:
    theirs = fleet.submit("bob")
    client = api_client(fleet.user("alice"))
    cyclic = {"steps": [{"name": "a", "job": JOB, "after": ["b"]}, {"name": "b", "job": JOB, "after": ["a"]}]}
    answer = client.post("/api/v1/pipelines/", cyclic, format="json")
    assert answer.status_code == 400
    assert answer.json()["error"]["fields"]["steps"] == [
        "Steps a -> b -> a wait for each other in a cycle; none could start."
    ]
    foreign = {"steps": [{"name": "a", "job": JOB, "after": [{"job": theirs.pk}]}]}
    answer = client.post("/api/v1/pipelines/", foreign, format="json")
    assert answer.status_code == 400
    assert answer.json()["error"]["fields"]["steps.a.after"] == [f"No such job #{theirs.pk}."]
    bad_job = {"steps": [{"name": "a", "job": {**JOB, "workers": 0}}]}
    answer = client.post("/api/v1/pipelines/", bad_job, format="json")
    assert answer.status_code == 400
    assert "steps.a.job.workers" in answer.json()["error"]["fields"]
    assert Job.objects.count() == 1
