"""How an attempt ends, and what becomes of its job: one table, used by dispatch, follow and recover.

Every way an attempt can end has a short code (``Attempt.reason``, and the reason of the job's timeline
event). The code decides the attempt's outcome and what happens to the job (``RULES``):

- ``succeeded``: the cluster says it succeeded. Attempt *succeeded*, job *succeeded*.
- ``exit_code``, ``oom_killed``, ``job_failed``: the program failed. Attempt *failed*; the job fails and is
  requeued after a backoff while retries are left (a retry is spent).
- ``time_limit``: it reached its time limit (Quartermaster's or the cluster's). Attempt *failed*, job
  *failed* for good.
- ``node_failed``, ``lost``, ``stopped_by_cluster``: its node died, the cluster lost it, or an operator
  there stopped it. Attempt *lost*; the job fails and is requeued while retries are left (a retry is spent).
- ``preempted``, ``preempted_by_cluster``, ``drain``: preempted (by Quartermaster within its grace, or by
  the cluster), or its node was drained (signalled, given its grace, then stopped). Attempt *preempted*;
  the job is requeued and resumes from its checkpoint. No retry is spent.
- ``refused``, ``image_pull``, ``invalid``: the cluster refused the job for good. Attempt *refused*; the job
  is requeued and the engine no longer routes it there (it fails when no cluster is left). No retry.
- ``undeliverable``, ``start_timeout``, ``no_capacity``: its cluster did not take it before the dispatch
  deadline, not every worker was running within the cluster's start timeout (requeued whole), or the cluster
  gave up finding capacity for it (a Cloud TPU queued resource FAILED for want of capacity). Attempt *lost*;
  the job is requeued and the engine avoids that cluster for a while. No retry.
- ``failover``: its cluster was silent past the failover delay. Attempt *lost*; the job is requeued and
  restarts elsewhere from its checkpoint. No retry.
- ``withdrawn``: the old copy of a failed-over job still ran when its cluster answered again, so this newer
  attempt was withdrawn (``follow.reattach``). Attempt *cancelled*; the job runs on as the old attempt.

An ended attempt that may still run on its cluster is marked ``cleanup_pending`` and cancelled there as soon
as the cluster answers (``follow.sweep_cleanup``); that is also where a failed-over attempt is reattached.
Quota and budget are held by active attempts only, so they are released the moment an attempt ends.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from django.db import transaction

from scheduler.actions import checkpoints, lifecycle
from scheduler.models import Attempt, Job
from scheduler.placement import measure
from scheduler.states import PLACED

S = Job.State
O = Attempt.Outcome  # noqa: E741 - short name for the outcome choices

#: Retry backoff after a failed attempt: 30 s, 1, 2, 4 ... minutes, at most 15.
BACKOFF_BASE, BACKOFF_MAX = 30, 15 * 60


@dataclass(frozen=True, slots=True)
class Rule:
    outcome: str
    #: What the job does: "succeed", "fail" (then the retry policy), "fail_final" or "requeue".
    job: str


RULES: dict[str, Rule] = {
    "succeeded": Rule(O.SUCCEEDED, "succeed"),
    "exit_code": Rule(O.FAILED, "fail"),
    "oom_killed": Rule(O.FAILED, "fail"),
    "job_failed": Rule(O.FAILED, "fail"),
    "time_limit": Rule(O.FAILED, "fail_final"),
    "node_failed": Rule(O.LOST, "fail"),
    "lost": Rule(O.LOST, "fail"),
    "stopped_by_cluster": Rule(O.LOST, "fail"),
    "start_timeout": Rule(O.LOST, "requeue"),
    "preempted": Rule(O.PREEMPTED, "requeue"),
    "preempted_by_cluster": Rule(O.PREEMPTED, "requeue"),
    "drain": Rule(O.PREEMPTED, "requeue"),
    "refused": Rule(O.REFUSED, "requeue"),
    "image_pull": Rule(O.REFUSED, "requeue"),
    "invalid": Rule(O.REFUSED, "requeue"),
    "undeliverable": Rule(O.LOST, "requeue"),
    "no_capacity": Rule(O.LOST, "requeue"),
    "failover": Rule(O.LOST, "requeue"),
}


def backoff(retries: int) -> timedelta:
    return timedelta(seconds=min(BACKOFF_MAX, BACKOFF_BASE * 2 ** max(0, retries - 1)))


def end(
    attempt: Attempt,
    reason: str,
    message: str,
    now: datetime,
    *,
    cleanup_pending: bool = False,
    exit_code: int | None = None,
    said: str | None = None,
) -> bool:
    """End ``attempt`` for ``reason`` (a code of ``RULES``) and move its job as the table says, in one
    transaction with the job row locked; ``message`` goes to the job's timeline, ``said`` (the cluster's own
    words, when it gave some) to the attempt, else ``message``. False if the job had moved on already."""
    rule = RULES[reason]
    with transaction.atomic():
        job = Job.objects.select_for_update().get(pk=attempt.job_id)
        if job.attempt != attempt.number or job.state not in PLACED:
            return False
        ended = Attempt.objects.filter(pk=attempt.pk, outcome=O.ACTIVE).update(
            outcome=rule.outcome,
            ended_at=now,
            cleanup_pending=cleanup_pending,
            dispatch_claimed_until=None,
            reason=reason,
            message=(message if said is None else said)[:4000],
            exit_code=exit_code,
        )
        if not ended:
            return False
        if rule.job == "succeed":
            lifecycle.move(job, S.SUCCEEDED, reason, message, at=now, finished_at=now, message=message)
        elif rule.job == "requeue":
            lifecycle.move(job, S.REQUEUED, reason, message + resume_note(job), at=now, not_before=None)
        else:
            lifecycle.move(job, S.FAILED, reason, message, at=now, message=message, finished_at=now)
            if rule.job == "fail":
                _retry(job, now)
    measure.ended(attempt, rule.outcome, reason)
    return True


def begin_stop(attempt: Attempt, job: Job, stop: str, grace: int, message: str, now: datetime) -> bool:
    """Start stopping ``attempt`` for ``stop`` (``Attempt.Stop``): the job moves to ``preempting`` with
    ``message`` in its timeline and gets ``grace`` seconds to checkpoint and exit; the caller signals it after
    the commit, and ``follow`` ends it (``stopped``) when it exits or when the grace runs out. False if the job
    moved on meanwhile."""
    deadline = now + timedelta(seconds=grace)
    with transaction.atomic():
        if not lifecycle.move(
            job, S.PREEMPTING, stop, message, at=now, detail={"deadline": deadline.isoformat(), "grace": grace}
        ):
            return False
        Attempt.objects.filter(pk=attempt.pk, outcome=O.ACTIVE).update(stop_reason=stop, stop_deadline=deadline)
    return True


#: How a stopped attempt ends, by why it was stopped: (reason code, words when it exited in time, words when
#: it had to be killed at the end of its grace).
STOPPED = {
    Attempt.Stop.PREEMPTED: (
        "preempted",
        "Preempted: it stopped within its grace period.",
        "Preempted: its grace period ended and it was stopped.",
    ),
    Attempt.Stop.DRAIN: (
        "drain",
        "Its node was drained: it stopped within its grace period.",
        "Its node was drained: its grace period ended and it was stopped.",
    ),
    Attempt.Stop.TIME_LIMIT: (
        "time_limit",
        "Stopped at its time limit: it exited within its grace period.",
        "Stopped at its time limit: its grace period ended and it was killed.",
    ),
}


def stopped(attempt: Attempt, now: datetime, *, killed: bool) -> bool:
    """End an attempt Quartermaster was stopping, now that it exited (or was killed: ``killed``)."""
    reason, exited, grace_over = STOPPED[Attempt.Stop(attempt.stop_reason or Attempt.Stop.PREEMPTED)]
    return end(attempt, reason, grace_over if killed else exited, now)


def resume_note(job: Job) -> str:
    where = checkpoints.resume_from(job)
    return f" It resumes from {where}." if where else ""


def _retry(job: Job, now: datetime) -> None:
    """The retry policy: a failed job goes back to the queue after a backoff while retries are left."""
    if job.retries >= job.max_retries:
        message = f"{job.message} No retries left ({job.max_retries} allowed)."
        Job.objects.filter(pk=job.pk).update(message=message)
        return
    retries = job.retries + 1
    wait = backoff(retries)
    lifecycle.move(
        job,
        S.REQUEUED,
        "retry",
        f"Retry {retries} of {job.max_retries} in {int(wait.total_seconds())} s.{resume_note(job)}",
        at=now,
        retries=retries,
        not_before=now + wait,
        finished_at=None,
    )
