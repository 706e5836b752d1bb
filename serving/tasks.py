"""The control loop's Celery tasks: every service each beat (5 s), or one service soon after a change."""

from __future__ import annotations

from celery import shared_task

from serving.actions import control


@shared_task(ignore_result=True)
def control_tick() -> int:
    """One control tick for every service that has work (idempotent; a service ticked elsewhere is skipped)."""
    return control.tick_all()


@shared_task(ignore_result=True)
def control_service(service_id: int) -> None:
    """One control tick for one service (after a change, or a request while it is at zero replicas)."""
    control.tick_service(service_id)


@shared_task(ignore_result=True)
def prune_samples() -> int:
    """Forget samples older than ``SERVICE_SAMPLE_DAYS``."""
    return control.prune_samples()
