"""Governance's signals: ``changed`` for the apps above it, and every team's queue.

``changed`` is sent inside the transaction of every change to a quota, a queue's policy, a tier or a budget,
with the organization: the placement loop (``scheduler/signals.py``) listens, so governance never imports the
scheduler (docs/architecture.md, "Layers").

Every team has its queue from the moment it exists: jobs of the team (and of its projects without a
queue of their own) wait there, and team leads set its quotas. Made here, not on a job's first
submission, so that checking or previewing a request never writes."""

from __future__ import annotations

from typing import Any

from django.db.models.signals import post_save
from django.dispatch import Signal, receiver

from governance.models import Queue
from tenancy.models import Team

#: Sent with ``organization=`` inside the transaction of a governance change, before its commit.
changed = Signal()


@receiver(post_save, sender=Team)
def _team_queue(sender: Any, instance: Team, created: bool, raw: bool = False, **kwargs: Any) -> None:
    if created and not raw:
        Queue.objects.get_or_create(team=instance, project=None, defaults={"name": instance.slug})
