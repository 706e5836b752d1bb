"""The events people may be told about, by code, with their built-in channels and their words.

An event is found one of two ways: a job event (``scheduler.models.JobEvent``, written by every move of a job
and every note the watch round makes) that ``classify`` maps to a code, or a search the outbox makes itself
(``waiting``: a job pending longer than its submitter's limit; ``array_finished``: the last task of an array
ended). To add one, add an ``EventKind`` to ``EVENTS`` and either map its job event in ``classify`` or find its
occurrences in ``outbox.collect`` with a ``key`` that names it once; preferences, pages, the API and delivery
take it from this table.

**Built-in defaults** (when neither the user nor their team chose): e-mail when a job failed, was preempted, is
flagged as hung, or has waited longer than 24 hours, and when an array (a sweep) has finished; nothing for the
rest, which happen to every job (started, succeeded) or follow another (requeued after a preemption or a
retried failure, a straggler that may catch up).
"""

from __future__ import annotations

from dataclasses import dataclass

from django.db.models import Q

from notifications.models import Channel
from scheduler.models import Attempt, JobEvent
from scheduler.states import JobState as S
from scheduler.watch.rounds import HUNG, STRAGGLER

STARTED, SUCCEEDED, FAILED, PREEMPTED, REQUEUED = "started", "succeeded", "failed", "preempted", "requeued"
WAITING, STRAGGLER_FLAGGED, HANG_FLAGGED = "waiting", "straggler", "hang"
#: Every task of an array (a sweep) has ended, however (``outbox.arrays_finished``).
ARRAY_FINISHED = "array_finished"
#: A notification sent to try the channels out; not an event anyone chooses.
TEST = "test"

#: Hours a job may stay pending before its submitter is told, unless they or their team chose otherwise.
DEFAULT_WAIT_HOURS = 24
MAX_WAIT_HOURS = 24 * 30

EMAIL = frozenset({Channel.EMAIL})
NONE: frozenset[Channel] = frozenset()


@dataclass(frozen=True)
class EventKind:
    code: str
    label: str
    #: The channels used when neither the user nor their team chose.
    builtin: frozenset[Channel]
    #: How the subject says it: "Job 12 (train) {verb}".
    verb: str


EVENTS: dict[str, EventKind] = {
    kind.code: kind
    for kind in (
        EventKind(STARTED, "Started", NONE, "started"),
        EventKind(SUCCEEDED, "Succeeded", NONE, "succeeded"),
        EventKind(FAILED, "Failed", EMAIL, "failed"),
        EventKind(PREEMPTED, "Preempted", EMAIL, "was preempted"),
        EventKind(REQUEUED, "Requeued", NONE, "was requeued"),
        EventKind(WAITING, "Waiting longer than the limit", EMAIL, "is still waiting"),
        EventKind(STRAGGLER_FLAGGED, "Straggler flagged", NONE, "has a straggler"),
        EventKind(HANG_FLAGGED, "Hang flagged", EMAIL, "looks hung"),
        EventKind(ARRAY_FINISHED, "Array or sweep finished", EMAIL, "finished"),
    )
}

#: Notes of the watch round (``scheduler/watch/rounds.py``): a job event that moves the job nowhere.
_NOTES = {STRAGGLER: STRAGGLER_FLAGGED, HUNG: HANG_FLAGGED}
#: Moves, by the state moved to.
_MOVES: dict[str, str] = {
    S.RUNNING.value: STARTED,
    S.SUCCEEDED.value: SUCCEEDED,
    S.FAILED.value: FAILED,
    S.REQUEUED.value: REQUEUED,
    S.PREEMPTING.value: PREEMPTED,
}


def worth_reading() -> Q:
    """The job events ``classify`` may give a code to, for the database to pick out of all of them."""
    return Q(to_state__in=list(_MOVES)) | Q(reason__in=list(_NOTES))


def classify(event: JobEvent) -> str | None:
    """The code of what ``event`` tells its job's submitter, or None for a move nobody is told of (submitted,
    admitted, placing, cancelled: the person who cancelled knows)."""
    if event.from_state == event.to_state:
        return _NOTES.get(event.reason)
    code = _MOVES.get(event.to_state)
    if code == PREEMPTED and event.reason == Attempt.Stop.TIME_LIMIT:
        return None  # reaching its time limit is not a preemption: the job fails next, and that is told
    return code


def label(code: str) -> str:
    return EVENTS[code].label if code in EVENTS else "Test" if code == TEST else code
