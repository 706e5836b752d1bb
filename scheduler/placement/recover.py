"""The loop's I/O half, third step, run before each placement cycle: disruptions, handled gracefully.

- **A dead node** (gone from its cluster, not ready, down) has lost the work on it: its attempts end
  ``node_failed`` (a retry is spent) and are cancelled there if the node comes back. A dead *spot* node
  (``clusters.capacity``) is the cloud taking its capacity back: its attempts end ``preempted_by_cluster``,
  requeued to resume from their checkpoints without spending a retry.
- **A drained node**: each job on it is signalled, given the drain's grace (else its tier's) to checkpoint,
  then requeued elsewhere without spending a retry (``outcomes.begin_stop``; ``follow`` ends it). Once no
  work is left on it, the drain is done and the node *drained*. A *cordoned* node keeps its running work.
- **A silent cluster** (unreachable): its attempts become *unknown*, not lost. After the failover delay
  (the tier's ``failover_after``, else the cluster's), counted from the cluster's last answer, work that may
  move (not pinned to that cluster) ends ``failover`` and is placed elsewhere from its last checkpoint; the
  old copy is reattached or stopped when the cluster answers again (``follow.reattach``). A shorter
  partition costs nothing.
- **Dispatch**: an attempt preempted before it reached its cluster goes back to the queue; one not taken by
  its cluster within ``dispatch.DISPATCH_DEADLINE`` is given up (placed elsewhere); one whose dispatch never
  finished (a worker died, a message was lost, a transient error's backoff ran out) is sent again.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from django.db.models import Exists, OuterRef, Q
from django.utils import timezone

from clusters.capacity import CapacityType, capacity_type
from clusters.models import Cluster, Drain, Node
from common import enqueue
from scheduler.models import Assignment, Attempt, Job
from scheduler.placement import dispatch, outcomes
from scheduler.states import PLACED
from tenancy.models import Organization

S = Job.State
O = Attempt.Outcome  # noqa: E741 - short name for the outcome choices
#: An admitted attempt not sent within this long is sent again (its first dispatch was lost).
REDISPATCH_AFTER = timedelta(seconds=30)
TAKEN_OUT = (Node.State.DRAINING, Node.State.DRAINED)


def _on_dead_node(prefix: str = "") -> Q:
    """Rows (through ``prefix``) on a node that is gone, not ready or down: its work is lost."""
    return (
        Q(**{f"{prefix}node__present": False})
        | Q(**{f"{prefix}node__ready": False})
        | Q(**{f"{prefix}node__state": Node.State.DOWN})
    )


def recover(organization: Organization, now: datetime | None = None) -> dict[str, int]:
    """Handle the organization's disruptions (see the module's docstring). Returns counts, for logs and tests."""
    now = now or timezone.now()
    counts = {
        "node_failed": 0,
        "drain_signalled": 0,
        "drains_done": 0,
        "unknown": 0,
        "failed_over": 0,
        "undeliverable": 0,
        "redispatched": 0,
    }
    active = Attempt.objects.filter(cluster__organization=organization, outcome=O.ACTIVE, job__state__in=PLACED)
    reachable = active.exclude(cluster__status=Cluster.Status.UNREACHABLE)
    for attempt in reachable.filter(_on_dead_node("assignments__")).distinct().select_related("job", "cluster"):
        counts["node_failed"] += _lost_with_node(attempt, now)
    draining = reachable.filter(assignments__node__state__in=TAKEN_OUT, stop_deadline=None).exclude(
        _on_dead_node("assignments__")
    )
    for attempt in draining.distinct().select_related("job__tier", "cluster"):
        counts["drain_signalled"] += _drain(attempt, now)
    counts["drains_done"] = finish_drains(organization, now)

    silent = active.filter(cluster__status=Cluster.Status.UNREACHABLE).exclude(backend_id="")
    for attempt in silent.select_related("job__tier", "cluster"):
        verdict = _partitioned(attempt, now)
        counts["unknown"] += verdict == "unknown"
        counts["failed_over"] += verdict == "failover"

    undispatched = active.filter(backend_id="").filter(dispatch.unclaimed(now))
    for attempt in undispatched.filter(job__state=S.PREEMPTING).select_related("job"):
        outcomes.end(attempt, "preempted", "Preempted before it started.", now, cleanup_pending=True)
    late = undispatched.exclude(job__state=S.PREEMPTING).filter(admitted_at__lt=now - dispatch.DISPATCH_DEADLINE)
    for attempt in late.select_related("cluster"):
        words = attempt.dispatch_error or f"cluster {attempt.cluster} {attempt.cluster.get_status_display().lower()}"
        counts["undeliverable"] += dispatch.give_up(attempt, words, now)
    stuck = undispatched.exclude(cluster__status=Cluster.Status.UNREACHABLE).exclude(job__state=S.PREEMPTING)
    # Never tried for a while (its dispatch was lost), or tried and its backoff ran out (``unclaimed``).
    due = Q(admitted_at__lt=now - REDISPATCH_AFTER) | Q(dispatch_tries__gt=0)
    ids = list(stuck.filter(due).values_list("pk", flat=True)[:5000])
    for start in range(0, len(ids), 200):
        enqueue.send("scheduler.tasks.dispatch_attempts", ids[start : start + 200])
    counts["redispatched"] = len(ids)
    return counts


def _lost_with_node(attempt: Attempt, now: datetime) -> bool:
    node = attempt.assignments.filter(_on_dead_node()).select_related("node").first()
    if node is not None and is_spot(node.node, attempt.cluster):
        return outcomes.end(
            attempt, "preempted_by_cluster", reclaimed_words(node.node), now, cleanup_pending=attempt.may_run_on_cluster
        )
    what = f"node {node.node.name} ({_condition(node.node)})" if node else "its node"
    return outcomes.end(attempt, "node_failed", f"Its {what} failed.", now, cleanup_pending=attempt.may_run_on_cluster)


def is_spot(node: Node, cluster: Cluster) -> bool:
    """Whether ``node`` is spot capacity (``clusters.capacity``): the cloud may take it back at any time."""
    return capacity_type(node.labels or {}, cluster.kind, cluster.options or {}) == CapacityType.SPOT


def reclaimed_words(node: Node) -> str:
    """A spot node gone, in the job's timeline: the cloud took it back, which is a preemption, not a failure."""
    return (
        f"The cloud took back its spot node {node.name}: preempted by the cluster. It is requeued and resumes from "
        "its checkpoint; no retry is spent."
    )


def spot_node(attempt: Attempt) -> Node | None:
    """The first spot node ``attempt`` ran on, if any."""
    for held in attempt.assignments.select_related("node").order_by("pk"):
        if is_spot(held.node, attempt.cluster):
            return held.node
    return None


def _condition(node: Node) -> str:
    if not node.present:
        return "gone from its cluster"
    if not node.ready:
        return "not ready"
    return node.get_state_display().lower()


def _drain(attempt: Attempt, now: datetime) -> bool:
    """Start stopping an attempt on a drained node, with the drain's grace or its tier's."""
    node = attempt.assignments.filter(node__state__in=TAKEN_OUT).select_related("node").first()
    if node is None:
        return False
    drain = (
        Drain.objects.filter(
            node=node.node, kind=Drain.Kind.DRAIN, state__in=(Drain.State.DRAINING, Drain.State.DRAINED)
        )
        .order_by("-created_at")
        .first()
    )
    why = f" ({drain.reason})" if drain else ""
    if not attempt.backend_id:  # not on its cluster yet: nothing to signal
        message = f"Its node {node.node.name} was drained{why} before it started."
        return outcomes.end(attempt, "drain", message, now, cleanup_pending=attempt.may_run_on_cluster)
    job = attempt.job
    grace = drain.grace_seconds if drain is not None and drain.grace_seconds is not None else job.tier.grace_seconds
    message = (
        f"Its node {node.node.name} is being drained{why}: it has {grace} s to checkpoint and exit, "
        "then it moves elsewhere (no retry is spent)."
    )
    if not outcomes.begin_stop(attempt, job, Attempt.Stop.DRAIN, grace, message, now):
        return False
    enqueue.send("scheduler.tasks.signal_job", job.pk)
    return True


def finish_drains(organization: Organization | None, now: datetime) -> int:
    """Drains (of the organization, or all) whose node has no active work left are done: the node is *drained*.
    Run before each cycle and on the beat (``scheduler.tasks.follow_clusters``), so that a node with no work of
    ours is drained within seconds."""
    busy = Assignment.objects.filter(node=OuterRef("node"), attempt__outcome=O.ACTIVE)
    drains = Drain.objects.filter(kind=Drain.Kind.DRAIN, state=Drain.State.DRAINING)
    if organization is not None:
        drains = drains.filter(node__cluster__organization=organization)
    done = list(drains.filter(~Exists(busy)).values_list("pk", "node_id"))
    for pk, node_id in done:
        if Drain.objects.filter(pk=pk, state=Drain.State.DRAINING).update(state=Drain.State.DRAINED, finished_at=now):
            Node.objects.filter(pk=node_id, state=Node.State.DRAINING).update(state=Node.State.DRAINED)
    return len(done)


def _partitioned(attempt: Attempt, now: datetime) -> str:
    """An attempt on a silent cluster: unknown until the failover delay, then moved if it may move."""
    cluster = attempt.cluster
    silent_since = cluster.last_sync_at or attempt.admitted_at
    if attempt.unknown_since is None:
        Attempt.objects.filter(pk=attempt.pk).update(unknown_since=silent_since)
    job = attempt.job
    delay = timedelta(seconds=job.tier.failover_after or cluster.failover_after)
    if now - silent_since < delay or not _may_move(job, cluster):
        return "unknown"
    minutes = int((now - silent_since).total_seconds() // 60)
    message = (
        f"Cluster {cluster} has not answered since {silent_since:%Y-%m-%d %H:%M} UTC ({minutes} min): "
        "placing it elsewhere. If it still runs there when the cluster answers, it is reattached unless the "
        "new copy has started."
    )
    ended = outcomes.end(attempt, "failover", message, now, cleanup_pending=True)
    return "failover" if ended else "unknown"


def _may_move(job: Job, cluster: Cluster) -> bool:
    """Work pinned to this one cluster waits for it; other work may run elsewhere."""
    allowed = list(job.clusters.values_list("pk", flat=True))
    return not allowed or any(pk != cluster.pk for pk in allowed)
