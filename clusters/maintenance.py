"""Maintenance windows: drain their nodes ahead of time, resume them when the window is over.

``apply_windows`` runs on the beat and is idempotent: a node already draining or drained is left as it
is, and only drains made for a window are resumed by it (a node an admin or the health policy drained
stays drained).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from django.db.models import Q
from django.utils import timezone

from clusters import actions
from clusters.models import Drain, MaintenanceWindow, Node


@dataclass(frozen=True, slots=True)
class Applied:
    drained: int = 0
    resumed: int = 0


def apply_windows(now: datetime | None = None) -> Applied:
    now = now or timezone.now()
    drained = resumed = 0
    starting = (
        MaintenanceWindow.objects.filter(ends_at__gt=now)
        .filter(starts_at__lte=now + timedelta(days=7))
        .select_related("cluster")
    )
    for window in starting:
        if window.starts_at - timedelta(minutes=window.drain_ahead_minutes) > now:
            continue
        chosen = list(window.nodes.all()) or list(Node.objects.filter(cluster=window.cluster, present=True))
        for node in chosen:
            if node.state in (Node.State.DRAINING, Node.State.DRAINED):
                continue
            reason = f"maintenance from {window.starts_at:%Y-%m-%d %H:%M} UTC: {window.reason}"[: actions.MAX_REASON]
            actions.drain_node(None, node, reason, window=window)
            drained += 1
    over = (
        Drain.objects.filter(window__ends_at__lte=now)
        .filter(Q(state=Drain.State.DRAINING) | Q(state=Drain.State.DRAINED))
        .select_related("node", "window")
    )
    for drain in over:
        if drain.window is None or drain.node.state not in (Node.State.DRAINING, Node.State.DRAINED):
            continue
        actions.resume_node(None, drain.node, f"maintenance window ended at {drain.window.ends_at:%Y-%m-%d %H:%M} UTC")
        resumed += 1
    return Applied(drained, resumed)
