"""Admins' actions on nodes: drain and resume. One transaction each, authorized, audited; the cluster
itself is told afterwards, by a task (``clusters.tasks.apply_drain``), once the change is committed.

Each action raises ``ValidationError`` naming the field for bad input and ``PermissionDenied`` when the
actor may see the node but not change it; both leave the database as it was. ``actor=None`` is the
auto-drain policy acting on its own.
"""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING

from django.core.exceptions import PermissionDenied, ValidationError
from django.db import transaction
from django.utils import timezone

from clusters.models import Cluster, Drain, MaintenanceWindow, Node, ProbeToken
from portal import audit
from portal.tenancy import Action, can

if TYPE_CHECKING:
    from django.contrib.auth.models import User
    from django.http import HttpRequest

MAX_REASON = 2000


def _reason(reason: str) -> str:
    reason = (reason or "").strip()
    if not reason:
        raise ValidationError({"reason": "Say why, for the people whose jobs this moves and for the audit log."})
    if len(reason) > MAX_REASON:
        raise ValidationError({"reason": f"Ensure this field has no more than {MAX_REASON} characters."})
    return reason


def _authorize(actor: User | None, node: Node, what: str) -> None:
    if actor is not None and not can(actor, Action.CHANGE, node):
        raise PermissionDenied(f"You may not {what} nodes of {node.cluster}.")


def drain_node(
    actor: User | None,
    node: Node,
    reason: str,
    *,
    window: MaintenanceWindow | None = None,
    request: HttpRequest | None = None,
) -> Drain:
    """Take the node out of service: no new work now, running work moved off by the cluster next."""
    reason = _reason(reason)
    _authorize(actor, node, "drain")
    with transaction.atomic():
        locked = Node.objects.select_for_update().get(pk=node.pk)
        if locked.state in (Node.State.DRAINING, Node.State.DRAINED):
            raise ValidationError({"node": f"{locked.name} is already {locked.get_state_display().lower()}."})
        drain = Drain.objects.create(
            node=locked, requested_by=actor, automatic=actor is None, reason=reason, window=window
        )
        Node.objects.filter(pk=locked.pk).update(state=Node.State.DRAINING)
        audit.record(
            "node.drained",
            actor=actor,
            target=locked,
            organization=locked.cluster.organization,
            changes={"state": [locked.state, Node.State.DRAINING], "automatic": actor is None},
            reason=reason,
            request=request,
        )
        transaction.on_commit(lambda: _tell_cluster(drain.pk))
    node.refresh_from_db()
    return drain


def resume_node(actor: User | None, node: Node, reason: str, *, request: HttpRequest | None = None) -> Node:
    """Put a cordoned, draining or drained node back in service."""
    reason = _reason(reason)
    _authorize(actor, node, "resume")
    with transaction.atomic():
        locked = Node.objects.select_for_update().get(pk=node.pk)
        if locked.state not in (Node.State.CORDONED, Node.State.DRAINING, Node.State.DRAINED):
            raise ValidationError({"node": f"{locked.name} is {locked.get_state_display().lower()}, not drained."})
        Node.objects.filter(pk=locked.pk).update(state=Node.State.SCHEDULABLE, passing_checks=0)
        open_drains = Drain.objects.filter(node=locked, state__in=[Drain.State.DRAINING, Drain.State.DRAINED])
        ids = list(open_drains.values_list("pk", flat=True))
        open_drains.update(state=Drain.State.RESUMED, finished_at=timezone.now())
        audit.record(
            "node.resumed",
            actor=actor,
            target=locked,
            organization=locked.cluster.organization,
            changes={"state": [locked.state, Node.State.SCHEDULABLE], "drains": ids},
            reason=reason,
            request=request,
        )
        transaction.on_commit(lambda: _tell_cluster_resume(locked.pk))
    node.refresh_from_db()
    return node


def _tell_cluster(drain_id: int) -> None:
    from clusters.tasks import apply_drain

    apply_drain.delay(drain_id)


def _tell_cluster_resume(node_id: int) -> None:
    from clusters.tasks import apply_resume

    apply_resume.delay(node_id)


def issue_probe_token(
    actor: User, cluster: Cluster, name: str, *, request: HttpRequest | None = None
) -> tuple[ProbeToken, str]:
    """A token for the node probes of ``cluster``; returns the row and the raw token, shown only once."""
    name = (name or "").strip()
    if not name or len(name) > 80:
        raise ValidationError({"name": "Name the token (at most 80 characters), e.g. the rack or image using it."})
    if not can(actor, Action.CHANGE, cluster):
        raise PermissionDenied(f"You may not issue probe tokens for {cluster}.")
    raw, key_hash, hint = ProbeToken.generate()
    with transaction.atomic():
        token = ProbeToken.objects.create(cluster=cluster, name=name, key_hash=key_hash, hint=hint, created_by=actor)
        audit.record(
            "probe_token.created",
            actor=actor,
            target=token,
            organization=cluster.organization,
            changes={"cluster": cluster.slug, "name": name},
            request=request,
        )
    return token, raw


def plan_maintenance(
    actor: User,
    cluster: Cluster,
    *,
    starts_at: datetime,
    ends_at: datetime,
    reason: str,
    nodes: list[Node] | None = None,
    drain_ahead_minutes: int = 60,
    request: HttpRequest | None = None,
) -> MaintenanceWindow:
    """Plan work on some nodes of a cluster (all when none are named): they are drained
    ``drain_ahead_minutes`` before the window and resumed when it ends (``clusters.maintenance``)."""
    reason = _reason(reason)
    if not can(actor, Action.CHANGE, cluster):
        raise PermissionDenied(f"You may not plan maintenance on {cluster}.")
    if ends_at <= starts_at:
        raise ValidationError({"ends_at": "The window must end after it starts."})
    if ends_at <= timezone.now():
        raise ValidationError({"ends_at": "The window is already over."})
    if not 0 <= drain_ahead_minutes <= 7 * 24 * 60:
        raise ValidationError({"drain_ahead_minutes": "Between 0 and 10080 minutes (a week)."})
    nodes = nodes or []
    if any(n.cluster_id != cluster.pk for n in nodes):
        raise ValidationError({"nodes": f"Every node must belong to {cluster}."})
    with transaction.atomic():
        window = MaintenanceWindow.objects.create(
            cluster=cluster,
            starts_at=starts_at,
            ends_at=ends_at,
            reason=reason,
            drain_ahead_minutes=drain_ahead_minutes,
            created_by=actor,
        )
        window.nodes.set(nodes)
        audit.record(
            "maintenance.planned",
            actor=actor,
            target=window,
            organization=cluster.organization,
            changes={
                "starts_at": starts_at.isoformat(),
                "ends_at": ends_at.isoformat(),
                "nodes": [n.name for n in nodes] or "all",
                "drain_ahead_minutes": drain_ahead_minutes,
            },
            reason=reason,
            request=request,
        )
    return window
