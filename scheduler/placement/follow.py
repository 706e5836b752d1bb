"""The loop's I/O half, second step: ask each cluster how its attempts are doing and move their jobs along.

Per active attempt, every follow round (``follow``):
- what the cluster says is read back and named in the timeline (``report``): started, succeeded, failed
  with its exit code, killed for memory, an image it cannot pull (the cluster refused it: placed elsewhere),
  stopped by the cluster; while it waits there, the cluster's words are its pending message (Kueue's reason);
- a job the cluster preempted and holds to run again later (Kueue's eviction) is deleted there and requeued
  here, so that two schedulers never both requeue it;
- a job is *running* only when every worker runs: a gang that started in part stays *placing*;
- **reported end**: where the cluster cannot tell that the program ended (a Cloud TPU queued resource stays
  ACTIVE), the exit code the workload reported through its job token (``checkpoints.report_exit``) ends the
  attempt: 0 succeeded, anything else failed with ``exit_code`` (then the retry policy); what it ran on is
  then cancelled there (``cleanup_pending``: the queued resource and its slices are deleted);
- **start timeout**: a job not wholly running ``Cluster.start_timeout`` after it was submitted is cancelled
  there and requeued whole (Kueue's waitForPodsReady), so a partial gang never holds its nodes for nothing;
- **time limit**: at its time limit a running job is signalled, gets its tier's grace, then is stopped; the
  job fails with ``time_limit`` (Quartermaster enforces it on every backend: a TPU slice has no limit). A
  service replica has none: it runs until it is stopped (its time limit is the engine's planning horizon);
- a job being stopped (preempted, drained, at its limit) whose grace is over is cancelled;
- an attempt whose cluster answers again after a partition is simply known again (``unknown_since``
  cleared): a short partition costs nothing.

Then ended attempts left behind on the cluster are cancelled there (``sweep_cleanup``), except that a job
failed over from a silent cluster whose old copy still runs there, while its replacement has not started,
is **reattached** to the old copy and the replacement withdrawn (``reattach``).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import datetime, timedelta
from functools import partial

from django.db import transaction
from django.utils import timezone

from clusters.actions.sync import backend_for
from clusters.backends import kinds
from clusters.backends.base import Backend, BackendError, Failure, JobState, JobStatus, NotFound
from clusters.models import Cluster
from clusters.secrets import CredentialsError
from common import enqueue
from scheduler.actions import lifecycle, sessions
from scheduler.models import Attempt, Job
from scheduler.placement import measure, outcomes, recover
from scheduler.placement.dispatch import cancel_there
from scheduler.states import FINAL, WAITING

log = logging.getLogger(__name__)
S = Job.State
O = Attempt.Outcome  # noqa: E741 - short name for the outcome choices

#: What the cluster's failure codes mean for the attempt (``outcomes.RULES``).
FAILURES = {
    Failure.OOM_KILLED: "oom_killed",
    Failure.EXIT_CODE: "exit_code",
    Failure.TIME_LIMIT: "time_limit",
    Failure.NODE_LOST: "node_failed",
    Failure.PREEMPTED: "preempted_by_cluster",
    Failure.IMAGE_PULL: "image_pull",
    Failure.INVALID: "invalid",
}
#: Failures that show while the job is still pending there, and will not mend.
NEVER_STARTS = frozenset({Failure.IMAGE_PULL, Failure.INVALID})
# On kinds whose failed jobs keep what they ran on until deleted (``Kind.leaves_behind``: a Cloud TPU queued
# resource stays FAILED, SUSPENDED, or ACTIVE over a broken slice, holding its slots), failed attempts are
# cancelled there afterwards (``cleanup_pending``), which deletes them; elsewhere a failed job holds nothing
# and is left for its logs.


@dataclass
class FollowReport:
    cluster: str
    checked: int = 0
    started: int = 0
    ended: int = 0
    lost: int = 0
    stopped: int = 0
    timed_out: int = 0
    answered_again: int = 0
    reattached: int = 0
    cleaned: int = 0
    errors: int = 0


def follow(cluster_id: int, now: datetime | None = None) -> FollowReport:
    """One round over the cluster's active attempts (see the module's docstring)."""
    now = now or timezone.now()
    cluster = Cluster.objects.get(pk=cluster_id)
    report = FollowReport(cluster.slug)
    if cluster.status == Cluster.Status.UNREACHABLE:
        return report  # nothing can be asked now; ``recover`` decides when its work moves
    try:
        backend = backend_for(cluster)
    except (BackendError, CredentialsError):
        report.errors += 1
        return report
    attempts = (
        Attempt.objects.filter(cluster=cluster, outcome=O.ACTIVE)
        .exclude(backend_id="")
        .select_related("job__tier", "cluster")
        .order_by("pk")
    )
    for attempt in attempts:
        report.checked += 1
        _follow_one(attempt, backend, now, report)
    report.cleaned, report.reattached = sweep_cleanup(cluster, backend, now)
    return report


def _follow_one(attempt: Attempt, backend: Backend, now: datetime, report: FollowReport) -> None:
    try:
        if attempt.stop_deadline and attempt.stop_deadline <= now:
            backend.cancel(attempt.backend_id)
            report.stopped += outcomes.stopped(attempt, now, killed=True)
            return
        status = backend.status(attempt.backend_id)
    except NotFound:
        if attempt.stop_deadline:  # e.g. a Kubernetes Job deleted with its grace period: it went in time
            report.ended += outcomes.stopped(attempt, now, killed=False)
        elif outcomes.end(attempt, "lost", f"Cluster {attempt.cluster} no longer knows the job.", now):
            report.lost += 1
        return
    except BackendError:
        report.errors += 1
        return
    if attempt.unknown_since is not None:
        Attempt.objects.filter(pk=attempt.pk).update(unknown_since=None)
        report.answered_again += 1
    note_dashboard(attempt, status)
    report_state(attempt, status, now, report)
    try:
        _deadlines(attempt, status, backend, now, report)
    except BackendError:
        report.errors += 1


#: What a cluster says of a job that does not tell whether its program ended: the job's own report decides.
UNDECIDED = frozenset({JobState.PENDING, JobState.RUNNING, JobState.UNKNOWN})


def report_state(attempt: Attempt, status: JobStatus, now: datetime, report: FollowReport) -> None:
    """Move the attempt's job by what the cluster says of it (or, where it cannot tell, by what the job
    reported)."""
    job = attempt.job
    where = f"cluster {attempt.cluster}"
    words = status.message or ""
    if attempt.reported_at is not None and status.state in UNDECIDED and not attempt.stop_deadline:
        report.ended += _reported_end(attempt, where, now)
    elif status.state == JobState.RUNNING:
        if _wholly_running(job, status) and job.state in (S.ADMITTED, S.PLACING) and job.attempt == attempt.number:
            with transaction.atomic():
                started = job.started_at or now
                moved = lifecycle.move(
                    job, S.RUNNING, "started", "Running.", at=now, started_at=started, pending_message=""
                )
                if moved:
                    Attempt.objects.filter(pk=attempt.pk).update(started_at=now)
                    attempt.started_at = now
                    report.started += 1
            if moved:
                measure.started(attempt, job, now)
    elif status.state == JobState.PENDING and status.reason in NEVER_STARTS:
        report.ended += _refused_late(attempt, status, now)
    elif status.state == JobState.PENDING and status.reason == Failure.PREEMPTED:
        # The cluster took it back and holds it to run again later (Kueue requeues what it evicts): it is deleted
        # there and requeued here, so that only Quartermaster decides where it runs next.
        message = f"Preempted by {where}: {words}."
        report.ended += outcomes.end(attempt, "preempted_by_cluster", message, now, cleanup_pending=True, said=words)
    elif status.state == JobState.PENDING:
        _note_pending(attempt, words)
    elif status.state == JobState.FAILED and status.reason == Failure.UNSCHEDULABLE and not attempt.stop_deadline:
        # It never started: the cluster gave up finding capacity (a queued resource FAILED, RESOURCE_EXHAUSTED).
        # Not the job's fault: placed elsewhere, that cluster avoided for a while, no retry spent.
        message = f"Cluster {attempt.cluster} has no capacity for it: {words or 'no reason given'}."
        report.ended += outcomes.end(attempt, "no_capacity", message, now, cleanup_pending=True, said=words or None)
    elif status.state in (JobState.SUCCEEDED, JobState.FAILED, JobState.CANCELLED) and attempt.stop_deadline:
        # It exited on our signal. Exit 0 too: a job that checkpoints on SIGTERM and exits cleanly (Slurm's
        # COMPLETED, a Kubernetes index completed) was interrupted, not finished.
        report.ended += outcomes.stopped(attempt, now, killed=False)
    elif status.state == JobState.SUCCEEDED:
        # an interactive session that said it ended idle says so (docs/jobs.md, "Interactive sessions")
        said = sessions.ended_words(attempt) or words or "Finished successfully."
        report.ended += outcomes.end(attempt, "succeeded", said, now)
    elif status.state == JobState.FAILED:
        reason, words = _failure(attempt, status, where)
        left = kinds.get(attempt.cluster.kind).leaves_behind
        report.ended += outcomes.end(attempt, reason, words, now, exit_code=status.exit_code, cleanup_pending=left)
    elif status.state == JobState.CANCELLED:
        if status.reason == Failure.PREEMPTED:
            report.ended += outcomes.end(attempt, "preempted_by_cluster", f"Preempted by {where}: {words}.", now)
        else:  # stopped there by an operator: the work is lost, not the job's fault
            report.lost += outcomes.end(
                attempt, "stopped_by_cluster", f"The cluster stopped it: {words or 'cancelled there'}.", now
            )


def note_dashboard(attempt: Attempt, status: JobStatus) -> None:
    """Keep where the cluster says the attempt can be watched (a Ray dashboard), when it says something new.
    Only an http(s) address is kept: the job page links to it."""
    url = (status.dashboard_url or "").strip()[:500]
    if url and url != attempt.dashboard_url and url.startswith(("http://", "https://")):
        Attempt.objects.filter(pk=attempt.pk).update(dashboard_url=url)
        attempt.dashboard_url = url


def _note_pending(attempt: Attempt, words: str) -> None:
    """Why the cluster has not started it yet, in the cluster's words (Kueue's reason, the scheduler's), as the
    job's pending message while it is being placed there."""
    if words:
        placing = Job.objects.filter(pk=attempt.job_id, attempt=attempt.number, state__in=[S.ADMITTED, S.PLACING])
        placing.exclude(pending_message=words).update(pending_message=words)


def _reported_end(attempt: Attempt, where: str, now: datetime) -> bool:
    """End the attempt by the exit code its workload reported; what it ran on is cancelled there after."""
    code = attempt.reported_exit_code
    if code == 0:
        message = f"It reported exit code 0: finished on {where}."
        return outcomes.end(attempt, "succeeded", message, now, cleanup_pending=True, exit_code=0)
    message = f"It exited with code {code} on {where} (reported by the job)."
    return outcomes.end(attempt, "exit_code", message, now, cleanup_pending=True, exit_code=code)


def _wholly_running(job: Job, status: JobStatus) -> bool:
    return status.workers_running is None or status.workers_running >= job.workers


def _failure(attempt: Attempt, status: JobStatus, where: str) -> tuple[str, str]:
    """How a failed attempt ends (``outcomes.RULES``), and why in words. A lost node that was spot capacity is
    the cloud taking it back: a preemption by the cluster, not the job's failure."""
    reason = FAILURES.get(Failure(status.reason), "job_failed") if status.reason in Failure else "job_failed"
    if reason == "node_failed" and (spot := recover.spot_node(attempt)) is not None:
        return "preempted_by_cluster", recover.reclaimed_words(spot)
    return reason, _failed_words(reason, status, where)


def _failed_words(reason: str, status: JobStatus, where: str) -> str:
    said = f": {status.message}" if status.message else ""
    if reason == "oom_killed":
        return f"A worker ran out of memory on {where}{said}."
    if reason == "exit_code" and status.exit_code is not None:
        return f"It exited with code {status.exit_code} on {where}{said}."
    if reason == "time_limit":
        return f"The time limit of {where} stopped it{said}."
    if reason == "node_failed":
        return f"Its node failed on {where}{said}."
    if reason == "preempted_by_cluster":
        return f"Preempted by {where}{said}."
    return f"The job failed on {where}: {status.message or 'no reason given'}."


def _refused_late(attempt: Attempt, status: JobStatus, now: datetime) -> bool:
    """The cluster took the job but will never start it (an image it cannot pull, a spec its admission
    rejects): cancel it there and place it elsewhere."""
    reason = FAILURES[Failure(status.reason)]
    what = "cannot pull its image" if reason == "image_pull" else "will not start it"
    said = status.message or status.reason
    message = f"Cluster {attempt.cluster} {what}: {said}"
    return outcomes.end(attempt, reason, message, now, cleanup_pending=True, said=said)


def _deadlines(attempt: Attempt, status: JobStatus, backend: Backend, now: datetime, report: FollowReport) -> None:
    """The start timeout and the time limit."""
    job = attempt.job
    if job.attempt != attempt.number or attempt.stop_deadline is not None:
        return
    if job.state in (S.ADMITTED, S.PLACING) and attempt.submitted_at is not None:
        timeout = timedelta(seconds=attempt.cluster.start_timeout)
        if now - attempt.submitted_at >= timeout:
            running = status.workers_running if status.workers_running is not None else 0
            said = f" ({status.message})" if status.message else ""
            message = (
                f"Only {running} of its {job.workers} workers were running {_duration(timeout)} after cluster "
                f"{attempt.cluster} took it{said}: requeued whole."
            )
            if outcomes.end(attempt, "start_timeout", message, now, cleanup_pending=True):
                report.timed_out += 1
    elif job.state == S.RUNNING and attempt.started_at is not None and job.kind != Job.Kind.SERVICE:
        # a service replica runs until it is stopped: its time limit only plans (docs/jobs.md, "Service replicas")
        limit = timedelta(seconds=job.time_limit)
        if now - attempt.started_at >= limit:
            grace = job.tier.grace_seconds
            message = f"Reached its time limit of {_duration(limit)}: it has {grace} s to checkpoint and exit."
            if outcomes.begin_stop(attempt, job, Attempt.Stop.TIME_LIMIT, grace, message, now):
                transaction.on_commit(lambda: enqueue.send("scheduler.tasks.signal_job", job.pk))
                report.timed_out += 1


def _duration(span: timedelta) -> str:
    seconds = int(span.total_seconds())
    if seconds % 3600 == 0:
        return f"{seconds // 3600} h"
    if seconds % 60 == 0:
        return f"{seconds // 60} min"
    return f"{seconds} s"


# --------------------------------------------------------------------------------- cleanup and reattach


def sweep_cleanup(cluster: Cluster, backend: Backend, now: datetime) -> tuple[int, int]:
    """Cancel the ended attempts that may still run on the cluster, or reattach a failed-over one that still
    runs there. Returns (cancelled, reattached)."""
    cleaned = reattached = 0
    left = Attempt.objects.filter(cluster=cluster, cleanup_pending=True).exclude(outcome=O.ACTIVE)
    for attempt in left.select_related("cluster").order_by("pk"):
        if attempt.dispatch_claimed_until and attempt.dispatch_claimed_until > now:
            continue  # a dispatch may still be submitting it: wait until its claim runs out
        if attempt.reason == "failover" and attempt.backend_id:
            verdict = reattach(attempt, backend, now)
            if verdict is None:
                continue  # the cluster did not answer about it: next round
            if verdict:
                reattached += 1
                continue
        cleaned += cancel_there(attempt, backend)
    return cleaned, reattached


def reattach(attempt: Attempt, backend: Backend, now: datetime) -> bool | None:
    """Make a failed-over attempt the job's attempt again if it still runs on its cluster and its replacement
    has not started (the replacement is withdrawn). True if reattached, False if the old copy is to be
    stopped, None if the cluster could not say."""
    try:
        status = backend.status(attempt.backend_id)
    except NotFound:
        return False
    except BackendError:
        return None
    if status.state != JobState.RUNNING:
        return False
    withdrawn: list[int] = []
    with transaction.atomic():
        job = Job.objects.select_for_update().get(pk=attempt.job_id)
        current = Attempt.objects.filter(job=job, number=job.attempt, outcome=O.ACTIVE).first()
        if job.state in FINAL or (current is not None and (current.started_at or job.state not in _NOT_STARTED)):
            return False
        if current is None and job.state not in WAITING:
            return False
        replacement = ""
        if current is not None:
            Attempt.objects.filter(pk=current.pk).update(
                outcome=O.CANCELLED,
                ended_at=now,
                reason="withdrawn",
                message=f"Withdrawn: attempt {attempt.number} still runs on cluster {attempt.cluster}.",
                cleanup_pending=current.may_run_on_cluster,
                dispatch_claimed_until=None,
            )
            withdrawn.append(current.pk)
            replacement = f"; its replacement on cluster {current.cluster} was withdrawn"
        Attempt.objects.filter(pk=attempt.pk).update(
            outcome=O.ACTIVE, ended_at=None, cleanup_pending=False, reason="", message="", unknown_since=None
        )
        job.attempt = attempt.number
        lifecycle.move(
            job,
            S.RUNNING,
            "reattached",
            f"Cluster {attempt.cluster} answers again and the job still runs there: reattached{replacement}.",
            at=now,
            attempt=attempt.number,
            started_at=job.started_at or attempt.started_at,
            not_before=None,
            finished_at=None,
            pending_reason="",
            pending_message="",
        )
        for pk in withdrawn:
            transaction.on_commit(partial(enqueue.send, "scheduler.tasks.cleanup_attempt", pk))
    return True


#: States of a job whose current attempt has not started running yet.
_NOT_STARTED = frozenset({S.ADMITTED, S.PLACING})
