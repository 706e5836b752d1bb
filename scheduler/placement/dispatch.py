"""The loop's I/O half: hand admitted attempts to their clusters, follow them, stop and recover them.

Every function here takes ids, claims its row with a conditional update, and is safe to run twice or to be
killed anywhere: a second run finds the work done, or the claim expired and does it again. Clusters are
called outside any transaction; their submit is idempotent on the attempt's key, so a retried dispatch
never starts a job twice.

How an attempt ends, and what becomes of its job:

| what happened | attempt | job |
|---|---|---|
| the cluster says it succeeded | succeeded | succeeded |
| the cluster says it failed | failed | failed, then requeued while retries are left |
| its node failed or was drained, or its cluster became unreachable | lost | failed, then requeued likewise |
| the cluster stopped it after we asked it to (preemption) | preempted | requeued, resumes from its checkpoint |
| the user cancelled it | cancelled | cancelled |

An attempt that may still run somewhere after it ended (its cluster was cut off, or it was cancelled while
being submitted) is marked ``cleanup_pending`` and cancelled on its cluster as soon as that answers.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from clusters.backends.base import (
    AuthenticationFailed,
    BackendError,
    DryRun,
    JobSpec,
    JobState,
    NotFound,
    Refused,
)
from clusters.models import Cluster, Node
from clusters.secrets import CredentialsError
from clusters.sync import backend_for
from common import enqueue
from scheduler import lifecycle
from scheduler.models import Attempt, Job
from scheduler.states import PLACED
from tenancy.models import Organization

log = logging.getLogger(__name__)
S = Job.State
O = Attempt.Outcome  # noqa: E741 - short name for the outcome choices

#: How long a dispatch may hold an attempt before another worker may take it over.
DISPATCH_CLAIM = timedelta(minutes=2)
#: Retry backoff after a failed attempt: 30 s, 1, 2, 4 ... minutes, at most 15.
BACKOFF_BASE, BACKOFF_MAX = 30, 15 * 60
#: A node in one of these states has lost the work on it.
LOST_NODE_STATES = (Node.State.DOWN, Node.State.DRAINING, Node.State.DRAINED)


def _unclaimed(now: datetime) -> Q:
    """Attempts no dispatch holds now (never claimed, or the claim ran out)."""
    return Q(dispatch_claimed_until=None) | Q(dispatch_claimed_until__lt=now)


def _on_lost_node(prefix: str = "") -> Q:
    """Rows (through ``prefix``) on a node that is gone, unhealthy, not ready, down or drained."""
    return (
        Q(**{f"{prefix}node__present": False})
        | Q(**{f"{prefix}node__healthy": False})
        | Q(**{f"{prefix}node__ready": False})
        | Q(**{f"{prefix}node__state__in": LOST_NODE_STATES})
    )


def backoff(retries: int) -> timedelta:
    return timedelta(seconds=min(BACKOFF_MAX, BACKOFF_BASE * 2 ** max(0, retries - 1)))


# --------------------------------------------------------------------------------------------- dispatch


def spec_for(attempt: Attempt) -> JobSpec:
    job = attempt.job
    nodes: list[str] = []
    for a in attempt.assignments.select_related("node").order_by("pk"):
        nodes.extend([a.node.name] * a.workers)
    return JobSpec(
        id=attempt.backend_key,
        name=job.name,
        workers=job.workers,
        accelerators_per_worker=job.accelerators,
        cpu_per_worker=job.cpu,
        memory_per_worker=job.memory,
        nodes=tuple(nodes),
        time_limit=job.time_limit,
        image=job.image,
        command=tuple(job.command),
        script=job.script,
        env={
            **job.env,
            **job.secret_env(),  # decrypted here only, for the cluster (a key that changed: refused below)
            "QM_ATTEMPT": str(attempt.number),
            "QM_CHECKPOINT_DIR": job.checkpoint_location,
        },
        spot=False,
    )


def dispatch(attempt_id: int, now: datetime | None = None) -> str:
    """Submit one admitted attempt to its cluster. Returns what happened, in a word (for logs and tests)."""
    now = now or timezone.now()
    claimed = (
        Attempt.objects.filter(pk=attempt_id, outcome=O.ACTIVE, backend_id="", job__state__in=[S.ADMITTED, S.PLACING])
        .filter(_unclaimed(now))
        .update(dispatch_claimed_until=now + DISPATCH_CLAIM)
    )
    if not claimed:
        return "not-claimed"
    attempt = Attempt.objects.select_related("job", "cluster").get(pk=attempt_id)
    job = attempt.job
    if job.attempt != attempt.number:
        return "stale"
    if job.state == S.ADMITTED and not lifecycle.move(
        job, S.PLACING, "dispatching", f"Handing it to cluster {attempt.cluster}.", at=now
    ):
        return "moved"
    try:
        backend = backend_for(attempt.cluster)
        backend_id = backend.submit(spec_for(attempt))
    except (Refused, NotFound, AuthenticationFailed, CredentialsError) as error:
        # The cluster will not take it as placed: end this attempt; the job may land elsewhere.
        _end(attempt, O.LOST, f"Cluster {attempt.cluster} refused the job: {error}", "dispatch_refused", now)
        return "refused"
    except BackendError as error:
        # Perhaps transient (a timeout): keep the claim until it runs out, then the next cycle retries.
        Attempt.objects.filter(pk=attempt_id).update(dispatch_error=str(error)[:2000])
        return "retry"
    if isinstance(backend_id, DryRun):  # a dry-run cluster: nothing was started
        backend_id = f"dry-run:{attempt.backend_key}"
    with transaction.atomic():
        recorded = Attempt.objects.filter(pk=attempt_id, outcome=O.ACTIVE).update(
            backend_id=backend_id, dispatch_claimed_until=None, dispatch_error=""
        )
        if not recorded:  # it ended while we were submitting (cancelled, preempted): stop it there
            Attempt.objects.filter(pk=attempt_id).update(backend_id=backend_id, cleanup_pending=True)
    if not recorded:
        cleanup(attempt_id)
        return "ended-meanwhile"
    return "submitted"


# ------------------------------------------------------------------------------------------- ending


def _end(
    attempt: Attempt,
    outcome: str,
    message: str,
    reason: str,
    now: datetime,
    *,
    cleanup_pending: bool = False,
) -> bool:
    """End ``attempt`` with ``outcome`` and move its job accordingly (see the module's table), in one
    transaction with the job row locked. False if the job had moved on already (nothing written)."""
    with transaction.atomic():
        job = Job.objects.select_for_update().get(pk=attempt.job_id)
        if job.attempt != attempt.number or job.state not in PLACED:
            return False
        ended = Attempt.objects.filter(pk=attempt.pk, outcome=O.ACTIVE).update(
            outcome=outcome, ended_at=now, cleanup_pending=cleanup_pending, dispatch_claimed_until=None
        )
        if not ended:
            return False
        if outcome == O.SUCCEEDED:
            lifecycle.move(job, S.SUCCEEDED, "succeeded", message, at=now, finished_at=now, message=message)
        elif outcome == O.PREEMPTED:
            lifecycle.move(job, S.REQUEUED, "preempted", message + _resume_note(job), at=now, not_before=None)
        else:
            lifecycle.move(job, S.FAILED, reason, message, at=now, message=message, finished_at=now)
            _retry(job, now)
    return True


def _resume_note(job: Job) -> str:
    return f" It resumes from {job.checkpoint_location}." if job.checkpoint_location else ""


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
        f"Retry {retries} of {job.max_retries} in {int(wait.total_seconds())} s{_resume_note(job)}",
        at=now,
        retries=retries,
        not_before=now + wait,
        finished_at=None,
    )


# --------------------------------------------------------------------------------------------- follow


@dataclass
class FollowReport:
    cluster: str
    checked: int = 0
    started: int = 0
    ended: int = 0
    lost: int = 0
    stopped: int = 0
    cleaned: int = 0
    errors: int = 0


def follow(cluster_id: int, now: datetime | None = None) -> FollowReport:
    """Ask the cluster how its attempts are doing and move their jobs along; stop preempted attempts
    whose grace period is over; cancel attempts left behind."""
    now = now or timezone.now()
    cluster = Cluster.objects.get(pk=cluster_id)
    report = FollowReport(cluster.slug)
    if cluster.status == Cluster.Status.UNREACHABLE:
        return report  # recover() requeues its work; nothing can be asked now
    try:
        backend = backend_for(cluster)
    except (BackendError, CredentialsError):
        report.errors += 1
        return report
    attempts = (
        Attempt.objects.filter(cluster=cluster, outcome=O.ACTIVE)
        .exclude(backend_id="")
        .select_related("job", "cluster")
        .order_by("pk")
    )
    for attempt in attempts:
        report.checked += 1
        try:
            if attempt.stop_deadline and attempt.stop_deadline <= now:
                backend.cancel(attempt.backend_id)
                if _end(attempt, O.PREEMPTED, "Preempted: its grace period ended and it was stopped.", "", now):
                    report.stopped += 1
                continue
            status = backend.status(attempt.backend_id)
        except NotFound:
            if attempt.job.state == S.PREEMPTING:  # e.g. a Kubernetes Job deleted with its grace period
                report.ended += _end(attempt, O.PREEMPTED, "Preempted: it stopped within its grace period.", "", now)
            elif _end(attempt, O.LOST, f"Cluster {cluster} no longer knows the job.", "lost", now):
                report.lost += 1
            continue
        except BackendError:
            report.errors += 1
            continue
        report_state(attempt, status.state, status.message, now, report)
    report.cleaned = sweep_cleanup(cluster, backend)
    return report


def report_state(attempt: Attempt, state: JobState, message: str, now: datetime, report: FollowReport) -> None:
    job = attempt.job
    where = f"cluster {attempt.cluster}"
    if state == JobState.RUNNING:
        if job.state in (S.ADMITTED, S.PLACING) and job.attempt == attempt.number:
            with transaction.atomic():
                if lifecycle.move(job, S.RUNNING, "started", "Running.", at=now, started_at=job.started_at or now):
                    Attempt.objects.filter(pk=attempt.pk).update(started_at=now)
                    report.started += 1
    elif state == JobState.SUCCEEDED:
        report.ended += _end(attempt, O.SUCCEEDED, message or "Finished successfully.", "succeeded", now)
    elif state == JobState.FAILED:
        report.ended += _end(
            attempt, O.FAILED, f"The job failed on {where}: {message or 'no reason given'}.", "job_failed", now
        )
    elif state == JobState.CANCELLED:
        if job.state == S.PREEMPTING:
            report.ended += _end(attempt, O.PREEMPTED, "Preempted: it stopped within its grace period.", "", now)
        else:  # stopped by the cluster itself (a drain, an operator): the work is lost, not the job's fault
            report.lost += _end(
                attempt, O.LOST, f"The cluster stopped it: {message or 'cancelled there'}.", "stopped_by_cluster", now
            )


# -------------------------------------------------------------------------------------------- recover


def recover(organization: Organization, now: datetime | None = None) -> dict[str, int]:
    """Run before each placement cycle: requeue the work of failed nodes and unreachable clusters, and
    re-send attempts whose dispatch never finished (a worker died, or the message was lost)."""
    now = now or timezone.now()
    counts = {"node_failed": 0, "cluster_unreachable": 0, "redispatched": 0}
    active = Attempt.objects.filter(cluster__organization=organization, outcome=O.ACTIVE, job__state__in=PLACED)

    reachable = active.exclude(cluster__status=Cluster.Status.UNREACHABLE)
    for attempt in reachable.filter(_on_lost_node("assignments__")).distinct().select_related("job"):
        node = attempt.assignments.filter(_on_lost_node()).select_related("node").first()
        what = f"node {node.node.name} ({node.node.get_state_display().lower()})" if node else "its node"
        if _end(
            attempt,
            O.LOST,
            f"Its {what} failed or was taken out of service.",
            "node_failed",
            now,
            cleanup_pending=attempt.may_run_on_cluster,
        ):
            counts["node_failed"] += 1

    for attempt in active.filter(cluster__status=Cluster.Status.UNREACHABLE).select_related("job", "cluster"):
        if _end(
            attempt,
            O.LOST,
            f"Cluster {attempt.cluster} cannot be reached.",
            "cluster_unreachable",
            now,
            cleanup_pending=True,
        ):
            counts["cluster_unreachable"] += 1

    # Preempted before it ever reached its cluster: nothing runs, it can go back to the queue now.
    undispatched = active.filter(backend_id="").filter(_unclaimed(now))
    for attempt in undispatched.filter(job__state=S.PREEMPTING).select_related("job"):
        _end(attempt, O.PREEMPTED, "Preempted before it started.", "", now, cleanup_pending=True)

    stuck = undispatched.exclude(cluster__status=Cluster.Status.UNREACHABLE)
    ids = list(stuck.filter(admitted_at__lt=now - timedelta(seconds=30)).values_list("pk", flat=True)[:5000])
    if ids:
        for start in range(0, len(ids), 200):
            enqueue.send("scheduler.tasks.dispatch_attempts", ids[start : start + 200])
        counts["redispatched"] = len(ids)
    return counts


def signal(job_id: int) -> str:
    """Tell a preempted job to checkpoint and exit; ``follow`` stops it for good when its grace period ends."""
    attempt = (
        Attempt.objects.filter(job_id=job_id, outcome=O.ACTIVE, job__state=S.PREEMPTING)
        .exclude(backend_id="")
        .select_related("cluster")
        .first()
    )
    if attempt is None or attempt.stop_deadline is None:
        return "nothing-to-signal"
    grace = max(0, int((attempt.stop_deadline - timezone.now()).total_seconds()))
    try:
        backend_for(attempt.cluster).signal(attempt.backend_id, grace)
    except (BackendError, CredentialsError) as error:
        log.warning("could not signal job %s on %s: %s", job_id, attempt.cluster, error)
        return "failed"
    return "signalled"


# --------------------------------------------------------------------------------------------- cleanup


def cleanup(attempt_id: int) -> bool:
    """Cancel an ended attempt on its cluster if it may still run there. True once nothing is left."""
    attempt = Attempt.objects.select_related("cluster").get(pk=attempt_id)
    if not attempt.cleanup_pending:
        return True
    try:
        return _cancel_there(attempt, backend_for(attempt.cluster))
    except (BackendError, CredentialsError):
        return False


def _cancel_there(attempt: Attempt, backend: object) -> bool:
    from clusters.backends.base import Backend

    assert isinstance(backend, Backend)
    try:
        backend_id = attempt.backend_id or backend.find(attempt.backend_key)
        if backend_id and not backend_id.startswith("dry-run:"):
            backend.cancel(backend_id)
    except NotFound:
        pass
    except BackendError:
        return False
    Attempt.objects.filter(pk=attempt.pk).update(cleanup_pending=False)
    return True


def sweep_cleanup(cluster: Cluster, backend: object) -> int:
    done = 0
    for attempt in Attempt.objects.filter(cluster=cluster, cleanup_pending=True).exclude(outcome=O.ACTIVE):
        if attempt.dispatch_claimed_until and attempt.dispatch_claimed_until > timezone.now():
            continue  # a dispatch may still be submitting it: wait until its claim runs out
        done += _cancel_there(attempt, backend)
    return done
