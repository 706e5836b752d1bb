"""What people do to job arrays: submit one (many tasks of one request), cancel it, requeue its failed tasks,
and read its counts. One transaction each, authorized, validated, with one audit record for the array
(docs/jobs.md §Arrays and sweeps).

Submitting validates the request once (``actions.validate``: every task has the same shape, so one
feasibility check answers for all), then writes the array, its tasks and their first events with
``bulk_create``: a 10,000-task array is a handful of statements (``manage.py bench_arrays`` measures it).
Requeuing failed tasks gives each of them one more attempt (failed -> requeued, as an admin's requeue
does for one job), so a task keeps its id, index and parameters, and jobs waiting on the array see it again.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

from django.core.exceptions import ValidationError
from django.db import IntegrityError, connection, transaction
from django.db.models import Case, Count, IntegerField, QuerySet, Value, When
from django.utils import timezone

from common.staging import staged
from scheduler import actions, sweeps
from scheduler.actions import lifecycle
from scheduler.models import Job, JobArray, JobEvent, key_suffix
from scheduler.states import FINAL, PLACED, WAITING
from scheduler.sweeps import ArrayRequest
from tenancy import policy
from tenancy.actions import audit

if TYPE_CHECKING:
    from django.contrib.auth.models import User
    from django.http import HttpRequest

S = Job.State
#: Rows per statement when writing tasks and their events.
BATCH = 2000


def validate(actor: User, request: ArrayRequest) -> tuple[Any, Any, list[tuple[int, dict[str, Any]]]]:
    """Check the job request and the array's own fields; raise one ``ValidationError`` naming every bad
    field. Returns the queue, the tier and the tasks."""
    errors = sweeps.shape_errors(request)
    try:
        queue, tier = actions.validate(actor, request.job)
    except ValidationError as error:
        if not hasattr(error, "error_dict"):
            raise
        errors = {**{k: " ".join(v) for k, v in error.message_dict.items()}, **errors}
    if errors:
        raise ValidationError(errors)
    return queue, tier, sweeps.tasks(request)


def submit_array(
    actor: User, request: ArrayRequest, *, http: HttpRequest | None = None, wake: bool = True
) -> tuple[JobArray, bool]:
    """Create the array and its tasks (pending) and wake the placement loop. Returns (array, created): a
    request repeating an idempotency key returns the array first created with it."""
    key = request.job.idempotency_key.strip()
    if key and (existing := JobArray.objects.filter(submitted_by=actor, idempotency_key=key).first()):
        return existing, False
    queue, tier, tasks = validate(actor, request)
    secrets = actions.secret_env_of(actor, request.job)
    try:
        with transaction.atomic():
            array = create(actor, request, queue, tier, tasks, secrets, timezone.now())
            audit.record(
                "array.submitted",
                actor=actor,
                target=array,
                organization=request.job.team.organization,
                changes={"tasks": array.count, "max_running": array.max_running, "spec": _short(array.spec)},
                request=http,
            )
            if wake:
                transaction.on_commit(actions.wake_loop)
    except IntegrityError:  # the same key raced in from another request: that one won
        existing = JobArray.objects.filter(submitted_by=actor, idempotency_key=key).first()
        if key and existing is not None:
            return existing, False
        raise
    return array, True


def _short(spec: dict[str, Any]) -> dict[str, Any]:
    """The spec as the audit log keeps it: a long list of parameters is counted, not copied."""
    if "params" in spec and len(spec["params"]) > 20:
        return {"params": f"{len(spec['params'])} sets"}
    return spec


def create(
    actor: User,
    request: ArrayRequest,
    queue: Any,
    tier: Any,
    tasks: list[tuple[int, dict[str, Any]]],
    secrets: dict[str, str],
    now: datetime,
) -> JobArray:
    """Write a validated array, its tasks and their first events (inside the caller's transaction)."""
    job = request.job
    array = JobArray.objects.create(
        team=job.team,
        project=job.project,
        submitted_by=actor,
        name=job.name.strip(),
        spec=request.spec(),
        count=len(tasks),
        max_running=request.max_running,
        submitted_at=now,
        idempotency_key=job.idempotency_key.strip(),
    )
    template = actions.new_job(actor, job, queue, tier, now)
    template.idempotency_key = ""
    template.set_secret_env(secrets)  # sealed once, shared by every task
    words = (f"Submitted to queue {queue} by {actor.get_username()}, task ", f" of array #{array.pk}.")
    if connection.vendor == "postgresql":
        _copy_tasks(template, array, tasks, [c.pk for c in job.clusters], actor, now, words)
    else:
        _create_tasks(template, array, tasks, [c.pk for c in job.clusters], actor, now, words)
    return array


def _task_name(array: JobArray, index: int) -> str:
    return f"{array.name[: 120 - 9]} [{index}]"


def _create_tasks(
    template: Job,
    array: JobArray,
    tasks: list[tuple[int, dict[str, Any]]],
    clusters: list[int],
    actor: User,
    now: datetime,
    words: tuple[str, str],
) -> None:
    """The tasks, their clusters and first events with ``bulk_create`` (any database)."""
    fields = {f.attname: getattr(template, f.attname) for f in Job._meta.concrete_fields if not f.primary_key}
    rows = []
    for index, params in tasks:
        task = Job(**{**fields, "key_suffix": key_suffix()})
        task.array_id, task.array_index, task.array_params = array.pk, index, params
        task.name = _task_name(array, index)
        rows.append(task)
    created = Job.objects.bulk_create(rows, batch_size=BATCH)
    through = Job.clusters.through
    through.objects.bulk_create(
        [through(job_id=t.pk, cluster_id=c) for t in created for c in clusters], batch_size=BATCH
    )
    JobEvent.objects.bulk_create(
        [
            JobEvent(
                job_id=t.pk,
                created_at=now,
                from_state="",
                to_state=S.PENDING,
                reason="submitted",
                actor=actor,
                message=f"{words[0]}{t.array_index}{words[1]}",
            )
            for t in created
        ],
        batch_size=BATCH,
    )


#: The columns that differ from task to task; the rest are the template's.
VARYING = ("name", "array_index", "array_params", "key_suffix")


def _copy_tasks(
    template: Job,
    array: JobArray,
    tasks: list[tuple[int, dict[str, Any]]],
    clusters: list[int],
    actor: User,
    now: datetime,
    words: tuple[str, str],
) -> None:
    """The same on PostgreSQL, in three statements: what differs per task is COPYed into a staging table and
    the tasks inserted from it with the template's other columns; their events and clusters are inserted
    from the tasks. (``bulk_create`` builds 60 parameters a row in Python: 28 s for 10,000 tasks.)"""
    template.array_id = array.pk
    fixed = [f for f in Job._meta.concrete_fields if not f.primary_key and f.attname not in VARYING]
    values = [f.get_db_prep_save(getattr(template, f.attname), connection) for f in fixed]
    table = connection.ops.quote_name(Job._meta.db_table)
    columns = ", ".join(connection.ops.quote_name(column) for column in [*(f.column for f in fixed), *VARYING])
    constants = ", ".join(f"%s::{f.db_type(connection)}" for f in fixed)
    staged_rows = ((_task_name(array, i), i, json.dumps(p), key_suffix()) for i, p in tasks)
    staging = (("name", "text"), ("idx", "integer"), ("params", "jsonb"), ("suffix", "text"))
    events = connection.ops.quote_name(JobEvent._meta.db_table)
    through = Job.clusters.through
    before, after = words
    with connection.cursor() as cursor, staged(cursor, "array_tasks", staging, staged_rows):
        cursor.execute(
            f"INSERT INTO {table} ({columns}) SELECT {constants}, s.name, s.idx, s.params, s.suffix"  # noqa: S608
            " FROM array_tasks s ORDER BY s.idx",
            values,
        )
        cursor.execute(
            f"INSERT INTO {events} (job_id, created_at, from_state, to_state, reason, message, attempt, actor_id,"  # noqa: S608
            f" detail) SELECT j.id, %s, '', %s, 'submitted', %s || j.array_index || %s, 0, %s, '{{}}'::jsonb"
            f" FROM {table} j WHERE j.array_id = %s",
            [now, S.PENDING, before, after, actor.pk, array.pk],
        )
        if clusters:
            cursor.execute(
                f"INSERT INTO {connection.ops.quote_name(through._meta.db_table)} (job_id, cluster_id)"  # noqa: S608
                f" SELECT j.id, c.id FROM {table} j CROSS JOIN unnest(%s::bigint[]) AS c(id) WHERE j.array_id = %s",
                [clusters, array.pk],
            )


# --- cancel and requeue ----------------------------------------------------------------------------------


def cancel_array(actor: User, array: JobArray, reason: str = "", *, http: HttpRequest | None = None) -> int:
    """Cancel every task of ``array`` still waiting or placed; returns how many. Waiting tasks are cancelled
    in bulk; placed ones one by one, as ``cancel_job`` does (their attempts are stopped on their clusters)."""
    policy.require(actor, "array.cancel", array)
    reason = (reason or "").strip()[: actions.MAX_REASON]
    message = f"Cancelled with array #{array.pk} by {actor.get_username()}" + (f": {reason}" if reason else ".")
    now = timezone.now()
    cleanups: list[int] = []
    with transaction.atomic():
        waiting = _move_all(array, WAITING, S.CANCELLED, "cancelled", message, actor, now, finished_at=now)
        placed = 0
        for job in Job.objects.select_for_update().filter(array=array, state__in=PLACED).order_by("pk"):
            attempt = actions.cancel_locked(job, message, actor, now)
            placed += 1
            if attempt is not None:
                cleanups.append(attempt.pk)
        if waiting + placed == 0:
            raise ValidationError({"state": f"No task of array #{array.pk} is waiting or running; nothing to cancel."})
        audit.record(
            "array.cancelled",
            actor=actor,
            target=array,
            organization=array.team.organization,
            changes={"cancelled": waiting + placed},
            reason=reason,
            request=http,
        )
        transaction.on_commit(lambda: _cleanup_all(cleanups))
    return waiting + placed


def _cleanup_all(attempt_ids: list[int]) -> None:
    for pk in attempt_ids:
        actions.cleanup_later(pk)


def requeue_failed(actor: User, array: JobArray, *, http: HttpRequest | None = None) -> int:
    """Give every failed task of ``array`` one more attempt (failed -> requeued, its retries not given
    back), resuming from its checkpoint as any requeued job does; returns how many."""
    policy.require(actor, "array.requeue", array)
    now = timezone.now()
    message = f"Requeued with the failed tasks of array #{array.pk} by {actor.get_username()}. One more try."
    with transaction.atomic():
        count = _move_all(
            array, {S.FAILED}, S.REQUEUED, "requeued", message, actor, now, not_before=None, finished_at=None
        )
        if not count:
            raise ValidationError({"state": f"No task of array #{array.pk} has failed; nothing to requeue."})
        audit.record(
            "array.requeued",
            actor=actor,
            target=array,
            organization=array.team.organization,
            changes={"requeued": count},
            request=http,
        )
        transaction.on_commit(actions.wake_loop)
    return count


def _move_all(
    array: JobArray,
    states: Iterable[str],
    to: str,
    reason: str,
    message: str,
    actor: User,
    now: datetime,
    **fields: Any,
) -> int:
    """Move every task of ``array`` in ``states`` to ``to`` in bulk: the rows are locked in primary-key order
    and moved from the state each was read in, with an event each (``lifecycle.event`` checks the move)."""
    rows = list(
        Job.objects.select_for_update()
        .filter(array=array, state__in=list(states))
        .order_by("pk")
        .values_list("pk", "state", "attempt")
    )
    by_state: dict[str, list[int]] = {}
    events = []
    for pk, state, attempt in rows:
        events.append(lifecycle.event(pk, state, to, reason, message, attempt=attempt, actor=actor, at=now))
        by_state.setdefault(state, []).append(pk)
    extra = {"message": message} if to in FINAL else {"message": ""}
    if to not in WAITING:
        extra |= lifecycle.LEFT_WAITING  # as lifecycle.move does: the wait is over
    for state, pks in by_state.items():
        for start in range(0, len(pks), BATCH):
            Job.objects.filter(pk__in=pks[start : start + BATCH], state=state).update(
                state=to, state_changed_at=now, **extra, **fields
            )
    JobEvent.objects.bulk_create(events, batch_size=BATCH)
    return len(rows)


# --- what it looks like ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Summary:
    """An array's tasks counted by state, and how many have ended."""

    counts: dict[str, int]
    total: int

    @property
    def done(self) -> int:
        return sum(n for state, n in self.counts.items() if state in FINAL)

    @property
    def failed(self) -> int:
        return self.counts.get(S.FAILED, 0)


def summary(array: JobArray) -> Summary:
    """The array's tasks counted by state, in one query."""
    counts = Counter(
        dict(Job.objects.filter(array=array).values_list("state").annotate(n=Count("pk")).values_list("state", "n"))
    )
    return Summary({s: counts[s] for s in S.values if counts[s]}, sum(counts.values()))


#: The order tasks are listed in: failed first, then the running, the waiting, the rest.
ORDER = [S.FAILED, S.CANCELLED, S.PREEMPTING, S.RUNNING, S.PLACING, S.ADMITTED, S.REQUEUED, S.PENDING, S.SUCCEEDED]


def tasks_in_order(array: JobArray) -> QuerySet[Job]:
    """The array's tasks, the failed ones first, then by index."""
    rank = Case(*(When(state=s, then=Value(i)) for i, s in enumerate(ORDER)), output_field=IntegerField())
    tasks: QuerySet[Job] = Job.objects.filter(array=array).annotate(state_rank=rank)
    return tasks.order_by("state_rank", "array_index")
