"""Governance's signal handlers: every team's queue. (Governance's own signal, ``changed``, is sent by its
actions: ``governance.actions.changed``.)

Every team has its queue from the moment it exists: jobs of the team (and of its projects without a
queue of their own) wait there, and team leads set its quotas. Made here, not on a job's first
submission, so that checking or previewing a request never writes."""

from __future__ import annotations

from typing import Any

from django.db.models.signals import post_save
from django.dispatch import receiver

from governance import actions
from tenancy.models import Team


@receiver(post_save, sender=Team)
def _team_queue(sender: Any, instance: Team, created: bool, raw: bool = False, **kwargs: Any) -> None:
    if created and not raw:
        actions.open_team_queue(instance)
