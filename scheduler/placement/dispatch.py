"""The loop's I/O half, first step: hand admitted attempts to their clusters, and stop them there.

Every function here takes ids, claims its row with a conditional update, and is safe to run twice or to be
killed anywhere: a second run finds the work done, or the claim expired and does it again. Clusters are
called outside any transaction; their submit is idempotent on the attempt's key, so a retried dispatch
never starts a job twice.

A submission that fails is classified (``clusters.backends.base.permanent``):
- **permanent** (the cluster refuses this job: an invalid spec, an image or queue it does not have, a
  policy): the attempt ends ``refused`` with the cluster's words, and the job goes back to the queue; the
  engine no longer routes it there, and fails it with those words when no cluster is left;
- **transient** (unreachable, timeouts, 5xx, credentials being rotated): retried with backoff (10 s, 20 s ...
  at most 2 minutes) until ``DISPATCH_DEADLINE`` after admission; then the attempt ends ``undeliverable``
  and the job is placed again, avoiding that cluster for a while (``recover`` enforces the deadline, also
  for attempts never tried because their cluster was unreachable).

What happens to an attempt afterwards is ``follow.py``'s and ``recover.py``'s; how attempts end is
``outcomes.py``'s table.
"""

from __future__ import annotations

import logging
from datetime import datetime, timedelta

from django.db import transaction
from django.db.models import F, Q
from django.utils import timezone

from clusters.actions.sync import backend_for
from clusters.backends.base import Backend, BackendError, DryRun, JobSpec, NotFound, permanent
from clusters.secrets import CredentialsError
from common import metrics
from scheduler.actions import checkpoints, lifecycle, replicas, sessions
from scheduler.models import Assignment, Attempt, Job
from scheduler.placement import outcomes

log = logging.getLogger(__name__)
S = Job.State
O = Attempt.Outcome  # noqa: E741 - short name for the outcome choices

#: How long a dispatch may hold an attempt before another worker may take it over.
DISPATCH_CLAIM = timedelta(minutes=2)
#: How long after admission transient errors are retried before the job is placed elsewhere.
DISPATCH_DEADLINE = timedelta(minutes=10)
#: Backoff between dispatches that failed with a transient error: 10 s, 20 s, 40 s ... at most 2 minutes.
RETRY_BASE, RETRY_MAX = 10, 120


def unclaimed(now: datetime) -> Q:
    """Attempts no dispatch holds now (never claimed, or the claim or its backoff ran out)."""
    return Q(dispatch_claimed_until=None) | Q(dispatch_claimed_until__lt=now)


def retry_after(tries: int) -> timedelta:
    return timedelta(seconds=min(RETRY_MAX, RETRY_BASE * 2 ** max(0, tries - 1)))


# --------------------------------------------------------------------------------------------- dispatch


def worker_nodes(assignments: list[Assignment]) -> list[str]:
    """The node of each worker, in worker order (assignments in primary-key order, a node once per worker on
    it): what a backend is given as ``JobSpec.nodes``, and what a worker's index means everywhere else."""
    nodes: list[str] = []
    for a in assignments:
        nodes.extend([a.node.name] * a.workers)
    return nodes


def spec_for(attempt: Attempt) -> JobSpec:
    job = attempt.job
    assignments = list(attempt.assignments.select_related("node").order_by("pk"))
    nodes = worker_nodes(assignments)
    return JobSpec(
        id=attempt.backend_key,
        name=job.name,
        workers=job.workers,
        accelerators_per_worker=job.accelerators,
        accelerator_milli=job.accelerator_milli,
        cpu_per_worker=job.cpu,
        memory_per_worker=job.memory,
        nodes=tuple(nodes),
        # a service replica runs until it is stopped: no limit of the cluster's own (docs/jobs.md)
        time_limit=0 if job.kind == Job.Kind.SERVICE else job.time_limit,
        image=job.image,
        command=tuple(job.command),
        script=job.script,
        env={
            **job.env,
            **job.secret_env(),  # decrypted here only, for the cluster (a key that changed: refused below)
            **(job.array.task_env(job.array_index or 0, job.array_params) if job.array is not None else {}),
            "QM_ATTEMPT": str(attempt.number),
            "QM_CHECKPOINT_DIR": job.checkpoint_location,
            **checkpoints.env_for(attempt),  # its token, the API's address, where to resume from
        },
        spot=job.spot,
        team=job.team.slug,
        project=job.project.slug if job.project else "",
        tier=job.tier.name,
        team_queue=job.queue.name,
        kind=job.kind,
        entrypoint=job.entrypoint,
        runtime_env=job.runtime_env,
        head=(job.head_accelerators, job.head_cpu, job.head_memory) if job.kind == job.Kind.RAY else (0, 0, 0),
        tpu_type=job.tpu_type,
        tpu_topology=job.tpu_topology,
        head_node=head_node(job, assignments),
        session_app=job.session_app if job.kind == Job.Kind.SESSION else "",
        session_idle_minutes=(job.session_idle_minutes or 0) if job.kind == Job.Kind.SESSION else 0,
        # this attempt's own, made once (a retried dispatch hands the cluster the same one)
        session_secret=sessions.secret_for(attempt) if job.kind == Job.Kind.SESSION else "",
        serve_port=replicas.hand_out_port(attempt),  # 0 but for a service replica
        serve_health_path=job.serve_health_path if job.kind == Job.Kind.SERVICE else "",
    )


def head_node(job: Job, assignments: list[Assignment]) -> str:
    """The node of a Ray job's head: the engine adds the head's share to the assignment of the node it
    chose (one assignment a node), so it is the assignment holding more than its workers' share, or one
    of no workers (docs/scheduling.md §Ray heads). "" for other jobs, and for an attempt placed without a
    head (admitted before the job had one): the backend then chooses."""
    if job.kind != Job.Kind.RAY:
        return ""
    for a in assignments:
        more = (
            a.cpu > a.workers * job.cpu
            or a.memory > a.workers * job.memory
            or len(a.accelerators) > a.workers * job.accelerators
        )
        if a.workers == 0 or more:
            return a.node.name
    return ""


def dispatch(attempt_id: int, now: datetime | None = None) -> str:
    """Submit one admitted attempt to its cluster. Returns what happened, in a word (for logs and tests)."""
    now = now or timezone.now()
    claimed = (
        Attempt.objects.filter(pk=attempt_id, outcome=O.ACTIVE, backend_id="", job__state__in=[S.ADMITTED, S.PLACING])
        .filter(unclaimed(now))
        .update(dispatch_claimed_until=now + DISPATCH_CLAIM)
    )
    if not claimed:
        return "not-claimed"
    attempt = Attempt.objects.select_related("job__team", "job__project", "job__tier", "job__queue", "cluster").get(
        pk=attempt_id
    )
    job = attempt.job
    if job.attempt != attempt.number:
        return "stale"
    if job.state == S.ADMITTED and not lifecycle.move(
        job, S.PLACING, "dispatching", f"Handing it to cluster {attempt.cluster}.", at=now
    ):
        return "moved"
    try:
        spec = spec_for(attempt)
    except CredentialsError as error:  # the job's own secrets: no cluster can take it
        outcomes.end(attempt, "invalid", str(error), now)
        return "refused"
    try:
        backend_id = backend_for(attempt.cluster).submit(spec)
    except (BackendError, CredentialsError) as error:
        metrics.DISPATCH_FAILURES.labels(attempt.cluster.kind, "permanent" if permanent(error) else "transient").inc()
        if permanent(error):
            message = f"Cluster {attempt.cluster} refused the job: {error}"
            outcomes.end(attempt, "refused", message, now, said=str(error) or type(error).__name__)
            return "refused"
        return _transient(attempt, error, now)
    if isinstance(backend_id, DryRun):  # a dry-run cluster: nothing was started
        backend_id = f"dry-run:{attempt.backend_key}"
    with transaction.atomic():
        recorded = Attempt.objects.filter(pk=attempt_id, outcome=O.ACTIVE).update(
            backend_id=backend_id, dispatch_claimed_until=None, dispatch_error="", submitted_at=now
        )
        if not recorded:  # it ended while we were submitting (cancelled, preempted): stop it there
            Attempt.objects.filter(pk=attempt_id).update(backend_id=backend_id, cleanup_pending=True)
    if not recorded:
        cleanup(attempt_id)
        return "ended-meanwhile"
    return "submitted"


def _transient(attempt: Attempt, error: BaseException, now: datetime) -> str:
    """A failure that may mend: try again after a backoff (``recover`` sends it again), or, past the dispatch
    deadline, end the attempt so that the job is placed elsewhere."""
    words = str(error) or type(error).__name__
    if now - attempt.admitted_at >= DISPATCH_DEADLINE:
        give_up(attempt, words, now)
        return "undeliverable"
    Attempt.objects.filter(pk=attempt.pk, outcome=O.ACTIVE).update(
        dispatch_error=words[:2000],
        dispatch_tries=F("dispatch_tries") + 1,
        dispatch_claimed_until=now + retry_after(attempt.dispatch_tries + 1),
    )
    return "retry"


def give_up(attempt: Attempt, words: str, now: datetime) -> bool:
    """End an attempt its cluster did not take before the dispatch deadline (it may have got through: it is
    cancelled there once the cluster answers)."""
    minutes = int(DISPATCH_DEADLINE.total_seconds() // 60)
    message = f"Cluster {attempt.cluster} did not take it within {minutes} min ({words}); placing it elsewhere."
    return outcomes.end(attempt, "undeliverable", message, now, cleanup_pending=True)


def signal(job_id: int) -> str:
    """Tell a job being stopped (preempted, drained, at its time limit) to checkpoint and exit; ``follow``
    stops it for good when its grace period ends."""
    attempt = (
        Attempt.objects.filter(job_id=job_id, outcome=O.ACTIVE, stop_deadline__isnull=False)
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
        return cancel_there(attempt, backend_for(attempt.cluster))
    except (BackendError, CredentialsError):
        return False


def cancel_there(attempt: Attempt, backend: Backend) -> bool:
    """Cancel ``attempt`` on its cluster (found by its key if it never got an id); True once it is gone."""
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


__all__ = ["cancel_there", "cleanup", "dispatch", "give_up", "signal", "spec_for"]
