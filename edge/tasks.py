"""The edge fleet's periodic work: each running rollout's time-based steps (a phase held back only by devices
offline past their grace), every 5 s from the beat. Reports step rollouts too, as they arrive."""

from __future__ import annotations

from celery import shared_task

from common import metrics
from edge.actions import rollouts
from edge.models import Rollout, RolloutState


@shared_task
def advance_rollouts() -> int:
    """Step each running rollout under its row lock; safe to run twice (each step re-reads the rollout)."""
    with metrics.LoopRound("edge_rollouts"):
        ids = list(Rollout.objects.filter(state=RolloutState.RUNNING).values_list("pk", flat=True))
        for rollout_id in ids:
            rollouts.advance(rollout_id)
    return len(ids)
