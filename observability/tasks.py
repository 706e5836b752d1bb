"""The beat's work for the SLOs: a sample of the time-based ones every minute."""

from __future__ import annotations

from celery import shared_task
from django.utils import timezone

from observability.actions import sampling


@shared_task
def sample_slos() -> int:
    return sampling.sample(timezone.now())
