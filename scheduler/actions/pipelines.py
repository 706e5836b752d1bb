"""Pipelines: jobs and arrays that wait for each other (preprocess -> train -> evaluate), submitted at once
(docs/jobs.md §Pipelines).

A pipeline is named steps, each a job or an array of the usual request shape, each ``after`` other steps,
or jobs and arrays already submitted that the submitter can see, with a kind: ``after_ok`` (it succeeded),
``after_any`` (it ended) or ``after_not_ok`` (it failed or was cancelled). Everything is checked before
anything is written: every step's request, every reference (another team's job is "no such job", as one
that does not exist), and that no steps wait for each other in a cycle. Then all steps are written in one
transaction, with one audit record. The placement loop gives the engine no job whose dependencies are
unmet (``placement/gates.py``), and cancels or holds it when they can no longer be met.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from django.core.exceptions import ValidationError
from django.db import transaction
from django.utils import timezone

from scheduler import actions, sweeps
from scheduler.actions import arrays
from scheduler.models import Dependency, DependencyFailure, Job, JobArray
from scheduler.submission import JobRequest
from scheduler.sweeps import ArrayRequest
from tenancy.actions import audit
from tenancy.scoping import Action

if TYPE_CHECKING:
    from django.contrib.auth.models import User
    from django.http import HttpRequest

MAX_STEPS = 50
KINDS = Dependency.Kind


@dataclass
class After:
    """What a step waits for: another step (by name), or a job or an array already submitted."""

    step: str = ""
    job: int | None = None
    array: int | None = None
    kind: str = KINDS.AFTER_OK


@dataclass
class Step:
    """One step: a job (``array`` None) or an array of tasks of ``job``'s request."""

    name: str
    job: JobRequest
    array: ArrayRequest | None = None
    after: Sequence[After] = ()
    on_dependency_failure: str = DependencyFailure.CANCEL


@dataclass
class PipelineRequest:
    steps: Sequence[Step] = field(default_factory=list)


def _order(steps: Sequence[Step], errors: dict[str, str]) -> list[Step]:
    """The steps with each after those it waits for; a cycle is an error naming its steps."""
    by_name = {s.name: s for s in steps}
    done: list[Step] = []
    state: dict[str, int] = {}  # 1: being visited, 2: done

    def visit(step: Step, path: list[str]) -> None:
        if state.get(step.name) == 2:
            return
        if state.get(step.name) == 1:
            loop = [*path[path.index(step.name) :], step.name]
            errors.setdefault("steps", f"Steps {' -> '.join(loop)} wait for each other in a cycle; none could start.")
            return
        state[step.name] = 1
        for after in step.after:
            if after.step in by_name:
                visit(by_name[after.step], [*path, step.name])
        state[step.name] = 2
        done.append(step)

    for step in steps:
        visit(step, [])
    return done


def _check_after(actor: User, step: Step, names: set[str], team_org: int, errors: dict[str, str]) -> None:
    """Each ``after`` of ``step``: a kind we know, exactly one target, a step of the pipeline or a job or
    array the actor can see in the step's organization (anything else: "no such job")."""
    where = f"steps.{step.name}.after"
    for after in step.after:
        targets = [t for t in (after.step, after.job, after.array) if t not in ("", None)]
        if after.kind not in KINDS.values:
            errors[where] = f"{after.kind!r} is not a kind of dependency; use {', '.join(KINDS.values)}."
        elif len(targets) != 1:
            errors[where] = "Each dependency names one step, job or array."
        elif after.step:
            if after.step == step.name:
                errors[where] = f"Step {step.name} cannot wait for itself."
            elif after.step not in names:
                errors[where] = f"No step is called {after.step!r}."
        elif after.job is not None:
            seen = Job.objects.for_user(actor, Action.VIEW).filter(pk=after.job, team__organization=team_org)
            if not seen.exists():
                errors[where] = f"No such job #{after.job}."
        else:
            seen = JobArray.objects.for_user(actor, Action.VIEW).filter(pk=after.array, team__organization=team_org)
            if not seen.exists():
                errors[where] = f"No such array #{after.array}."
    if step.on_dependency_failure not in DependencyFailure.values:
        errors[f"steps.{step.name}.on_dependency_failure"] = "Choose cancel or hold."


def validate(actor: User, request: PipelineRequest) -> tuple[list[Step], dict[str, tuple[Any, ...]]]:
    """Check the whole pipeline; raise one ``ValidationError`` naming every bad field as
    ``steps.<step>.<field>``. Returns the steps in an order to create them and each step's checked parts."""
    steps = list(request.steps)
    errors: dict[str, str] = {}
    if not steps:
        raise ValidationError({"steps": "Give the pipeline at least one step."})
    if len(steps) > MAX_STEPS:
        raise ValidationError({"steps": f"A pipeline has at most {MAX_STEPS} steps."})
    names = [s.name.strip() for s in steps]
    if any(not n for n in names):
        raise ValidationError({"steps": "Give every step a name."})
    if duplicates := sorted({n for n in names if names.count(n) > 1}):
        raise ValidationError({"steps": f"Step names must differ: {', '.join(duplicates)} given more than once."})
    checked: dict[str, tuple[Any, ...]] = {}
    for step in steps:
        _check_after(actor, step, set(names), step.job.team.organization_id, errors)
        if step.job.idempotency_key.strip():
            errors[f"steps.{step.name}.job.idempotency_key"] = "A pipeline's steps take no idempotency key."
        try:
            if step.array is not None:
                checked[step.name] = arrays.validate(actor, step.array)
            else:
                checked[step.name] = actions.validate(actor, step.job)
        except ValidationError as error:
            if not hasattr(error, "error_dict"):
                raise
            errors.update({_field(step.name, k): " ".join(v) for k, v in error.message_dict.items()})
    ordered = _order(steps, errors)
    if errors:
        raise ValidationError(errors)
    return ordered, checked


def _field(step: str, name: str) -> str:
    """An error's name in a pipeline: ``steps.<step>.<array field>`` or ``steps.<step>.job.<job field>``."""
    return f"steps.{step}.{name}" if name in sweeps.ARRAY_FIELDS else f"steps.{step}.job.{name}"


def submit_pipeline(
    actor: User, request: PipelineRequest, *, http: HttpRequest | None = None
) -> dict[str, Job | JobArray]:
    """Create every step (jobs and arrays, pending) with their dependencies, in one transaction; returns
    each step's job or array by name."""
    ordered, checked = validate(actor, request)
    now = timezone.now()
    made: dict[str, Job | JobArray] = {}
    with transaction.atomic():
        for step in ordered:
            secrets = actions.secret_env_of(actor, step.job)
            if step.array is not None:
                queue, tier, tasks = checked[step.name]
                array = arrays.create(actor, step.array, queue, tier, tasks, secrets, now)
                made[step.name] = array
                jobs = list(Job.objects.filter(array=array).values_list("pk", flat=True))
                Job.objects.filter(array=array).update(on_dependency_failure=step.on_dependency_failure)
            else:
                queue, tier = checked[step.name]
                job = actions.new_job(actor, step.job, queue, tier, now)
                job.on_dependency_failure = step.on_dependency_failure
                job.set_secret_env(secrets)
                job.save(force_insert=True)
                if step.job.clusters:
                    job.clusters.set(step.job.clusters)
                job.events.create(
                    created_at=now,
                    from_state="",
                    to_state=Job.State.PENDING,
                    reason="submitted",
                    actor=actor,
                    message=f"Submitted to queue {queue} by {actor.get_username()}, step {step.name} of a pipeline.",
                )
                made[step.name] = job
                jobs = [job.pk]
            Dependency.objects.bulk_create(
                [_dependency(pk, after, made) for pk in jobs for after in step.after], batch_size=arrays.BATCH
            )
        first = request.steps[0].job.team
        audit.record(
            "pipeline.submitted",
            actor=actor,
            target=None,
            organization=first.organization,
            changes={name: f"{'array' if isinstance(x, JobArray) else 'job'} #{x.pk}" for name, x in made.items()},
            request=http,
        )
        transaction.on_commit(actions.wake_loop)
    return {step.name: made[step.name] for step in request.steps}


def _dependency(job_id: int, after: After, made: dict[str, Job | JobArray]) -> Dependency:
    if after.step:
        target = made[after.step]
        if isinstance(target, JobArray):
            return Dependency(job_id=job_id, on_array_id=target.pk, kind=after.kind)
        return Dependency(job_id=job_id, on_job_id=target.pk, kind=after.kind)
    return Dependency(job_id=job_id, on_job_id=after.job, on_array_id=after.array, kind=after.kind)


def dependencies_of(job: Job) -> list[Dependency]:
    """What ``job`` waits for, with the jobs and arrays named (its page)."""
    return list(job.dependencies.select_related("on_job", "on_array").order_by("pk"))


def dependents_of(job: Job, user: User) -> list[Dependency]:
    """What waits for ``job`` that ``user`` may see (its page), at most 50."""
    visible = Job.objects.for_user(user, Action.VIEW)
    found = Dependency.objects.filter(on_job=job, job__in=visible).select_related("job").order_by("job_id")
    return list(found[:50])
