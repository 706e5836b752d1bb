"""Billing's Celery tasks. Thin: each takes ids and calls ``billing.whatif``, which claims its row, so a task
run twice, or killed anywhere, does no harm."""

from __future__ import annotations

from celery import shared_task

from billing import whatif
from scheduler.tasks import send

__all__ = ["requeue_what_ifs", "run_what_if", "send"]


@shared_task(ignore_result=True)
def run_what_if(what_if_id: int) -> str:
    """Replay one capacity what-if (``done``, ``failed``, ``skipped`` when another worker holds it)."""
    return whatif.run(what_if_id)


@shared_task(ignore_result=True)
def requeue_what_ifs() -> int:
    """On the beat: queue again the what-ifs whose task was lost or whose worker died."""
    return len(whatif.requeue_stale())
