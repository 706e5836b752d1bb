"""Governance's writes: every change to its tables goes through this package (quotas and queues in
``quotas``, budgets in ``budgets``).

``changed`` is sent inside the transaction of every change to a quota, a queue's policy, a tier or a budget,
with the organization: the placement loop (``scheduler/signals.py``) listens, so governance never imports the
scheduler (docs/architecture.md, "Layers")."""

from __future__ import annotations

from typing import TYPE_CHECKING

from django.dispatch import Signal

from governance.models import Queue

if TYPE_CHECKING:
    from tenancy.models import Team

#: Sent with ``organization=`` inside the transaction of a governance change, before its commit.
changed = Signal()


def open_team_queue(team: Team) -> Queue:
    """A new team's own queue (named as the team), unless it has one."""
    return Queue.objects.get_or_create(team=team, project=None, defaults={"name": team.slug})[0]
