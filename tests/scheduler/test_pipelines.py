"""Pipelines: jobs and arrays that wait for each other. A waiting job is not given to the engine and its
reason names what it waits for; a broken dependency cancels (or holds) its dependents down the chain;
cycles and other teams' jobs are refused at submission."""

from __future__ import annotations

from typing import Any

import pytest
from django.core.exceptions import ValidationError

from clusters.backends.simulated import backend as simulated
from scheduler import submission
from scheduler.actions import pipelines
from scheduler.actions.pipelines import After, PipelineRequest, Step
from scheduler.models import Dependency, Job, JobArray
from scheduler.sweeps import ArrayRequest
from tenancy.models import AuditLog
from tests.scheduler.conftest import Fleet

pytestmark = pytest.mark.django_db
S = Job.State


def request(fleet: Fleet, team: str = "vision", **fields: Any) -> submission.JobRequest:
    defaults: dict[str, Any] = {
        "name": "step",
        "time_limit": 3600,
        "image": "ghcr.io/lab/train:1",
        "command": ["python", "run.py"],
        "accelerators": 1,
        "max_retries": 0,
    }
    return submission.JobRequest(team=fleet.world.teams[team], **{**defaults, **fields})


def step(fleet: Fleet, name: str, *after: After, array: dict[str, Any] | None = None, **fields: Any) -> Step:
    job = request(fleet, name=name, **fields.pop("job", {}))
    return Step(name, job, ArrayRequest(job=job, **array) if array else None, after, **fields)


def fail(fleet: Fleet, job: Job) -> None:
    """Make the simulated clusters fail ``job``'s first attempt with exit code 1."""
    for cluster in fleet.clusters.values():
        key = f"{job.pk}-1-{job.key_suffix}"
        simulated.inject(cluster.endpoint, "exit_code", state_file=cluster.options["state_file"], job=key)


def test_a_pipeline_runs_each_step_after_the_one_it_waits_for(fleet: Fleet) -> None:
    made = pipelines.submit_pipeline(
        fleet.user("alice"),
        PipelineRequest(
            [
                step(fleet, "preprocess"),
                step(fleet, "train", After(step="preprocess"), array={"range": "0-3"}),
                step(fleet, "evaluate", After(step="train", kind="after_any")),
            ]
        ),
    )
    pre, train, evaluate = made["preprocess"], made["train"], made["evaluate"]
    assert isinstance(pre, Job)
    assert isinstance(train, JobArray)
    assert isinstance(evaluate, Job)
    assert Dependency.objects.filter(on_job=pre).count() == 4  # each task of the array waits
    assert AuditLog.objects.filter(action="pipeline.submitted").count() == 1
    report = fleet.cycle()
    assert report.admitted == 1  # only preprocess: the others were not given to the engine
    task = Job.objects.filter(array=train).first()
    assert task is not None
    assert (task.pending_reason, task.pending_message) == (
        "dependency",
        f"Waits for #{pre.pk} preprocess to succeed.",
    )
    evaluate.refresh_from_db()
    assert evaluate.pending_message == f"Waits for array #{train.pk} train to end (0 of 4 done)."
    fleet.follow()
    fleet.run_for(3600)
    fleet.follow()
    assert Job.objects.get(pk=pre.pk).state == S.SUCCEEDED
    fleet.cycle()
    assert Job.objects.filter(array=train).exclude(state=S.PENDING).count() == 4
    evaluate.refresh_from_db()
    assert evaluate.state == S.PENDING
    assert evaluate.pending_reason == "dependency"


def test_a_failed_step_cancels_the_chain_below_it_with_the_cause(fleet: Fleet) -> None:
    made = pipelines.submit_pipeline(
        fleet.user("alice"),
        PipelineRequest(
            [
                step(fleet, "a"),
                step(fleet, "b", After(step="a")),
                step(fleet, "c", After(step="b")),
                step(fleet, "cleanup", After(step="a", kind="after_not_ok")),
            ]
        ),
    )
    a, b, c, cleanup = (made[n] for n in ("a", "b", "c", "cleanup"))
    assert isinstance(a, Job)
    fail(fleet, a)
    fleet.cycle()
    fleet.follow()
    assert Job.objects.get(pk=a.pk).state == S.FAILED
    fleet.cycle()  # one cycle settles the whole chain
    b_now, c_now = Job.objects.get(pk=b.pk), Job.objects.get(pk=c.pk)
    assert (b_now.state, c_now.state) == (S.CANCELLED, S.CANCELLED)
    assert b_now.message == f"Cancelled because #{a.pk} a failed, so what it waited for cannot happen."
    assert c_now.message == f"Cancelled because #{b.pk} b was cancelled, so what it waited for cannot happen."
    assert Job.objects.get(pk=cleanup.pk).state != S.PENDING  # after_not_ok: its turn came


def test_a_held_dependent_waits_and_runs_once_its_dependency_is_requeued_and_succeeds(fleet: Fleet) -> None:
    made = pipelines.submit_pipeline(
        fleet.user("alice"),
        PipelineRequest([step(fleet, "a"), step(fleet, "b", After(step="a"), on_dependency_failure="hold")]),
    )
    a, b = made["a"], made["b"]
    assert isinstance(a, Job)
    fail(fleet, a)
    fleet.cycle()
    fleet.follow()
    fleet.cycle()
    held = Job.objects.get(pk=b.pk)
    assert held.state == S.PENDING
    assert held.pending_message == f"Held: #{a.pk} a failed. Requeue it, or cancel this job."
    Job.objects.filter(pk=a.pk).update(state=S.SUCCEEDED)  # as if an admin's requeue had run it again
    fleet.cycle()
    assert Job.objects.get(pk=b.pk).state != S.PENDING


def test_cycles_are_refused_naming_the_steps_and_nothing_is_written(fleet: Fleet) -> None:
    cyclic = PipelineRequest(
        [step(fleet, "a", After(step="c")), step(fleet, "b", After(step="a")), step(fleet, "c", After(step="b"))]
    )
    with pytest.raises(ValidationError) as refused:
        pipelines.submit_pipeline(fleet.user("alice"), cyclic)
    assert refused.value.message_dict["steps"] == [
        "Steps a -> c -> b -> a wait for each other in a cycle; none could start."
    ]
    assert not Job.objects.exists()


def test_another_teams_job_is_no_such_job(fleet: Fleet) -> None:
    theirs = fleet.submit("bob")
    bad = PipelineRequest([step(fleet, "eval", After(job=theirs.pk)), step(fleet, "e2", After(array=999999))])
    with pytest.raises(ValidationError) as refused:
        pipelines.submit_pipeline(fleet.user("alice"), bad)
    errors = refused.value.message_dict
    assert errors["steps.eval.after"] == [f"No such job #{theirs.pk}."]
    assert errors["steps.e2.after"] == ["No such array #999999."]
    assert Job.objects.count() == 1


def test_a_dependency_on_an_existing_job_of_the_team(fleet: Fleet) -> None:
    mine = fleet.submit("alice")
    made = pipelines.submit_pipeline(fleet.user("alice"), PipelineRequest([step(fleet, "eval", After(job=mine.pk))]))
    evaluate = made["eval"]
    assert isinstance(evaluate, Job)
    fleet.cycle()
    evaluate.refresh_from_db()
    assert evaluate.pending_message == f"Waits for #{mine.pk} train to succeed."
    assert [d.on_job_id for d in pipelines.dependencies_of(Job.objects.get(pk=evaluate.pk))] == [mine.pk]
    assert [d.job_id for d in pipelines.dependents_of(mine, fleet.user("alice"))] == [evaluate.pk]
    assert pipelines.dependents_of(mine, fleet.user("bob")) == []
