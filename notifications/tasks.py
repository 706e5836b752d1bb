"""The notifications' Celery tasks: the beat's round (``collect``) and one delivery per notification."""

from __future__ import annotations

from celery import shared_task

from common import enqueue
from notifications.actions import outbox


@shared_task(
    ignore_result=True,
    autoretry_for=(outbox.DeliveryFailed,),
    retry_backoff=30,
    retry_backoff_max=3600,
    max_retries=outbox.MAX_ATTEMPTS,
)
def deliver_notification(notification_id: int) -> bool:
    """Send one notification by its channel (once; retried with backoff until taken or given up on)."""
    return outbox.deliver(notification_id)


@shared_task(ignore_result=True)
def notify() -> int:
    """On the beat: make the notifications owed for new job events and long waits, and queue again the
    deliveries still owed (a task lost with its worker)."""
    made = outbox.collect()
    for notification_id in outbox.undelivered():
        enqueue.send(outbox.DELIVER_TASK, notification_id)
    return len(made)
