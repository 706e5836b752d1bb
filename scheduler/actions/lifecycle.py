"""A job's moves between its states (``scheduler/states.py`` has the states and the moves allowed).

Every move goes through ``move`` (one job, compare-and-set on the state it was read in) or, for the
placement loop's batches, through ``record`` after the loop has locked the rows itself. Each move writes a
``JobEvent`` with its reason; a move the table does not allow raises ``IllegalTransition``.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime
from typing import TYPE_CHECKING, Any

from django.db import transaction
from django.utils import timezone

from scheduler.models import Job, JobEvent
from scheduler.states import TRANSITIONS, WAITING

if TYPE_CHECKING:
    from django.contrib.auth.models import User

S = Job.State


class IllegalTransition(ValueError):
    def __init__(self, job: int, frm: str, to: str) -> None:
        super().__init__(f"job {job} cannot go from {frm} to {to}")
        self.job, self.frm, self.to = job, frm, to


def check(job_id: int, frm: str, to: str) -> None:
    if to not in TRANSITIONS[frm]:
        raise IllegalTransition(job_id, frm, to)


def event(
    job_id: int,
    frm: str,
    to: str,
    reason: str,
    message: str = "",
    *,
    attempt: int = 0,
    actor: User | None = None,
    detail: dict[str, Any] | None = None,
    at: datetime | None = None,
) -> JobEvent:
    """An unsaved event of a move the table allows (for batches: ``JobEvent.objects.bulk_create``)."""
    check(job_id, frm, to)
    return JobEvent(
        job_id=job_id,
        created_at=at or timezone.now(),
        from_state=frm,
        to_state=to,
        reason=reason,
        message=message,
        attempt=attempt,
        actor=actor,
        detail=detail or {},
    )


#: What a job's row no longer says once it stops waiting (``move``).
LEFT_WAITING: dict[str, Any] = {
    "pending_reason": "",
    "pending_message": "",
    "queue_position": None,
    "estimated_start": None,
}


def move(
    job: Job,
    to: str,
    reason: str,
    text: str = "",
    *,
    actor: User | None = None,
    detail: dict[str, Any] | None = None,
    at: datetime | None = None,
    **fields: Any,
) -> bool:
    """Move ``job`` from the state it was read in to ``to``, setting ``fields`` too, and record the event
    (``reason`` a short code, ``text`` in words).

    Compare-and-set: if the row's state changed since ``job`` was read (another worker moved it), nothing is
    written and False comes back; the caller re-reads and decides again. ``job`` is updated in place.

    A job that leaves the waiting states loses its pending reason, queue position and estimated start
    (``LEFT_WAITING``): they describe a wait that is over. A caller may still set ``pending_message`` (a
    job placing on a cluster that says why it has not started).
    """
    frm = job.state
    at = at or timezone.now()
    check(job.pk, frm, to)
    if to not in WAITING:
        fields = {**LEFT_WAITING, **fields}
    with transaction.atomic():
        if not Job.objects.filter(pk=job.pk, state=frm).update(state=to, state_changed_at=at, **fields):
            return False
        event(job.pk, frm, to, reason, text, attempt=job.attempt, actor=actor, detail=detail, at=at).save()
    job.state, job.state_changed_at = to, at
    for name, value in fields.items():
        setattr(job, name, value)
    return True


def note(
    job: Job, reason: str, text: str, *, detail: dict[str, Any] | None = None, at: datetime | None = None
) -> JobEvent:
    """Record something seen of ``job`` that moves it nowhere (a straggler flagged, a hang): an event whose
    states are both the job's state now, on its timeline among its moves."""
    return JobEvent.objects.create(
        job_id=job.pk,
        created_at=at or timezone.now(),
        from_state=job.state,
        to_state=job.state,
        reason=reason,
        message=text,
        attempt=job.attempt,
        detail=detail or {},
    )


def timeline(job: Job) -> Iterable[JobEvent]:
    return job.events.select_related("actor").order_by("created_at", "pk")
