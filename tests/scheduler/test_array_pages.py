"""The array page and the submit form's array / sweep section; the job page's array and pipeline links."""

from __future__ import annotations

import pytest

from scheduler import submission
from scheduler.actions import arrays, pipelines
from scheduler.actions.pipelines import After, PipelineRequest, Step
from scheduler.models import Job, JobArray
from scheduler.sweeps import ArrayRequest
from tests.scheduler.conftest import Fleet
from tests.scheduler.test_pages import form_data, signed_in

pytestmark = pytest.mark.django_db
S = Job.State


def sweep(fleet: Fleet) -> JobArray:
    job = submission.JobRequest(
        team=fleet.world.teams["vision"], name="lr-sweep", time_limit=3600, image="ghcr.io/lab/train:1"
    )
    made, _ = arrays.submit_array(fleet.user("alice"), ArrayRequest(job=job, grid={"lr": [0.1, 0.01, 0.001]}))
    return made


def test_the_array_page_counts_tasks_by_state_with_the_failed_first(fleet: Fleet) -> None:
    made = sweep(fleet)
    Job.objects.filter(array=made, array_index=2).update(state=S.FAILED, message="Exit code 3.")
    page = signed_in(fleet, "lena").get(f"/jobs/arrays/{made.pk}/")
    assert page.status_code == 200
    html = page.content.decode()
    assert "Pending: 2" in html
    assert "Failed: 1" in html
    assert html.index('data-task="2"') < html.index('data-task="0"')  # the failed task first
    assert "Exit code 3." in html
    assert "Requeue the 1 failed task" in html
    assert signed_in(fleet, "bob").get(f"/jobs/arrays/{made.pk}/").status_code == 404


def test_cancel_and_requeue_from_the_page(fleet: Fleet) -> None:
    made = sweep(fleet)
    Job.objects.filter(array=made, array_index=0).update(state=S.FAILED)
    client = signed_in(fleet, "alice")
    assert client.post(f"/jobs/arrays/{made.pk}/requeue/").status_code == 302
    assert Job.objects.get(array=made, array_index=0).state == S.REQUEUED
    assert signed_in(fleet, "bob").post(f"/jobs/arrays/{made.pk}/cancel/", {"reason": ""}).status_code == 404
    assert client.post(f"/jobs/arrays/{made.pk}/cancel/", {"reason": "done"}).status_code == 302
    assert set(Job.objects.filter(array=made).values_list("state", flat=True)) == {S.CANCELLED}
    again = client.post(f"/jobs/arrays/{made.pk}/requeue/")
    assert again.status_code == 400
    assert "nothing to requeue" in again.content.decode()


def test_the_form_submits_a_sweep(fleet: Fleet) -> None:
    client = signed_in(fleet, "alice")
    data = form_data(fleet, accelerators=1, array_grid="lr = 0.1, 0.01\nmodel = small, big", array_max_running=2)
    answer = client.post("/jobs/new/", data)
    assert answer.status_code == 302, answer.content.decode()[:2000]
    made = JobArray.objects.get()
    assert answer["Location"] == f"/jobs/arrays/{made.pk}/"
    assert (made.count, made.max_running) == (4, 2)
    assert sorted(Job.objects.filter(array=made).values_list("array_params", flat=True), key=str) == sorted(
        [
            {"lr": 0.1, "model": "small"},
            {"lr": 0.1, "model": "big"},
            {"lr": 0.01, "model": "small"},
            {"lr": 0.01, "model": "big"},
        ],
        key=str,
    )


def test_a_bad_range_is_shown_beside_its_field_and_nothing_is_written(fleet: Fleet) -> None:
    answer = signed_in(fleet, "alice").post("/jobs/new/", form_data(fleet, accelerators=1, array_range="7-3"))
    assert answer.status_code == 400
    assert "goes nowhere" in answer.content.decode()
    assert not Job.objects.exists()


def test_a_task_links_to_its_array_and_a_job_shows_what_it_waits_for(fleet: Fleet) -> None:
    made = sweep(fleet)
    task = Job.objects.get(array=made, array_index=1)
    client = signed_in(fleet, "alice")
    html = client.get(f"/jobs/{task.pk}/").content.decode()
    assert f"task 1 of array #{made.pk} lr-sweep" in html
    assert f"array #{made.pk}" in client.get("/jobs/").content.decode()
    job = submission.JobRequest(team=fleet.world.teams["vision"], name="eval", time_limit=3600, image="x:1")
    evaluate = pipelines.submit_pipeline(
        fleet.user("alice"), PipelineRequest([Step("eval", job, after=[After(array=made.pk, kind="after_any")])])
    )["eval"]
    html = client.get(f"/jobs/{evaluate.pk}/").content.decode()
    assert f"array #{made.pk} lr-sweep" in html
    assert "after it ends" in html
