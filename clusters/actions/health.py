"""Health checks and the auto-drain policy.

Each round gathers signals per node: what the cluster reports (``Backend.health``: not ready, pressure),
a heartbeat older than ``HEARTBEAT_STALE``, a node probe gone quiet as long, and what node probes posted
since the last round (GPU XID and ECC errors, temperatures, NVLink; ``probe.py``). Then, per node:

- any failing signal: the node is marked unhealthy and, unless it is already draining or drained, it is
  **drained automatically** with the failing checks as the reason; a **reclaim notice** (the cloud is taking a
  spot node back: ``RECLAIM``, from a Kubernetes node's taints) drains it with the notice as every job's grace
  (30 s, or the cluster's option ``reclaim_notice_seconds``), so each checkpoints, exits and is requeued
  without spending a retry before the node goes;
- every signal passing: its count of passing rounds goes up; a node the policy drained is **resumed**
  after ``RESUME_AFTER`` passing rounds in a row, so one good reading between bad ones resumes nothing
  (no flapping). A node an admin drained is never resumed automatically.

Only failures and recoveries are stored as ``HealthCheckResult`` rows, so the history shows what
happened without a row per node per round.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.db.models import Q
from django.utils import timezone

from clusters import actions
from clusters.actions import sync
from clusters.backends.base import RECLAIM, BackendError, HealthSignal
from clusters.models import Cluster, Drain, HealthCheckResult, Node
from clusters.secrets import CredentialsError

HEARTBEAT_STALE = timedelta(minutes=5)
RESUME_AFTER = 3
#: The grace a reclaim notice leaves by default (GKE gives a spot VM 30 s; a cluster's ``reclaim_notice_seconds``
#: says otherwise, e.g. 120 on AWS).
RECLAIM_NOTICE = 30


@dataclass(frozen=True, slots=True)
class Verdict:
    """What the policy does to one node this round."""

    healthy: bool
    passing_checks: int
    drain: str = ""  # the reason, when the node is to be drained
    resume: bool = False
    #: The drain's grace: a reclaim notice's (the cloud takes the node back then), else None (each job's tier's).
    grace: int | None = None


def decide(
    failing: list[HealthSignal], state: str, passing_checks: int, auto_drained: bool, notice: int = RECLAIM_NOTICE
) -> Verdict:
    """The auto-drain policy for one node, as a pure function of this round's failing signals and the
    node's state (see the module's docstring); ``notice``: the seconds a reclaim notice leaves."""
    if failing:
        reason = "; ".join(f"{s.check}: {s.message}" if s.message else s.check for s in failing)
        draining = state in (Node.State.DRAINING, Node.State.DRAINED)
        grace = notice if any(s.check == RECLAIM for s in failing) else None
        return Verdict(healthy=False, passing_checks=0, drain="" if draining else f"auto-drain: {reason}", grace=grace)
    passing = passing_checks + 1
    resume = auto_drained and passing >= RESUME_AFTER and state in (Node.State.DRAINING, Node.State.DRAINED)
    return Verdict(healthy=True, passing_checks=passing, resume=resume)


@dataclass(frozen=True, slots=True)
class RoundResult:
    cluster: int
    checked: int = 0
    failing: int = 0
    drained: int = 0
    resumed: int = 0
    error: str = ""


def check_cluster(cluster_id: int, now: datetime | None = None) -> RoundResult:
    now = now or timezone.now()
    cluster = Cluster.objects.get(pk=cluster_id)
    try:
        signals = list(sync.backend_for(cluster).health())
    except (BackendError, CredentialsError) as error:
        return RoundResult(cluster_id, error=str(error) or type(error).__name__)
    nodes = {n.name: n for n in Node.objects.filter(cluster=cluster, present=True)}
    notice = min(actions.MAX_GRACE, _whole((cluster.options or {}).get("reclaim_notice_seconds"), RECLAIM_NOTICE))
    for node in nodes.values():
        if node.heartbeat_at and now - node.heartbeat_at > HEARTBEAT_STALE:
            age = int((now - node.heartbeat_at).total_seconds() // 60)
            signals.append(HealthSignal(node.name, "heartbeat", False, f"last heartbeat {age} min ago", now))
        # A node that has a probe and whose probe went quiet may have a hung driver.
        if node.probe_reported_at and now - node.probe_reported_at > HEARTBEAT_STALE:
            age = int((now - node.probe_reported_at).total_seconds() // 60)
            signals.append(HealthSignal(node.name, "probe", False, f"no probe report for {age} min", now))
    last_round = now - HEARTBEAT_STALE
    probed = HealthCheckResult.objects.filter(
        node__in=nodes.values(), source=HealthCheckResult.Source.PROBE, observed_at__gt=last_round, ok=False
    ).select_related("node")
    from_cluster: defaultdict[str, list[HealthSignal]] = defaultdict(list)
    for signal in signals:
        if not signal.ok and signal.node in nodes:
            from_cluster[signal.node].append(signal)
    from_probes: defaultdict[str, list[HealthSignal]] = defaultdict(list)
    for result in probed:
        from_probes[result.node.name].append(HealthSignal(result.node.name, result.name, False, result.message))
    auto_drained = set(
        Drain.objects.filter(node__in=nodes.values(), automatic=True, window=None)
        .filter(Q(state=Drain.State.DRAINING) | Q(state=Drain.State.DRAINED))
        .values_list("node__name", flat=True)
    )
    drained = resumed = failing = 0
    records = []
    for name, node in nodes.items():
        verdict = decide(
            from_cluster[name] + from_probes[name], node.state, node.passing_checks, name in auto_drained, notice
        )
        failing += not verdict.healthy
        # History on changes only: the round a node starts failing (probe results are stored when posted)
        # and the round it recovers.
        if node.healthy and not verdict.healthy:
            records += [_record(node, s, now) for s in from_cluster[name]]
        elif verdict.healthy and not node.healthy:
            records.append(_record(node, HealthSignal(name, "all", True, "every check passes again"), now))
        if (verdict.healthy, verdict.passing_checks) != (node.healthy, node.passing_checks):
            Node.objects.filter(pk=node.pk).update(healthy=verdict.healthy, passing_checks=verdict.passing_checks)
        if verdict.drain:
            actions.drain_node(None, node, verdict.drain, grace_seconds=verdict.grace)
            drained += 1
        elif verdict.resume:
            actions.resume_node(None, node, f"auto-resume: {verdict.passing_checks} passing health checks in a row")
            resumed += 1
    HealthCheckResult.objects.bulk_create(records, batch_size=sync.BATCH)
    return RoundResult(cluster_id, len(nodes), failing, drained, resumed)


def _whole(value: object, default: int) -> int:
    try:
        return max(0, int(str(value))) if value is not None else default
    except ValueError:
        return default


def _record(node: Node, signal: HealthSignal, now: datetime) -> HealthCheckResult:
    return HealthCheckResult(
        node=node,
        name=signal.check,
        ok=signal.ok,
        message=signal.message,
        source=HealthCheckResult.Source.CLUSTER,
        observed_at=signal.observed_at or now,
    )
