"""Billing's Celery tasks. Thin: the what-if tasks take ids and call ``billing.actions.whatif``, which claims its row;
the meter's runs are idempotent and take turns per organization. A task run twice, or killed anywhere,
does no harm."""

from __future__ import annotations

import logging

from celery import shared_task

from billing.actions import metering, periods, whatif
from tenancy.models import Organization

log = logging.getLogger(__name__)

__all__ = ["adjust_periods", "meter", "reconcile", "requeue_what_ifs", "run_what_if"]


@shared_task(ignore_result=True)
def run_what_if(what_if_id: int) -> str:
    """Replay one capacity what-if (``done``, ``failed``, ``skipped`` when another worker holds it)."""
    return whatif.run(what_if_id)


@shared_task(ignore_result=True)
def requeue_what_ifs() -> int:
    """On the beat: queue again the what-ifs whose task was lost or whose worker died."""
    return len(whatif.requeue_stale())


@shared_task(ignore_result=True)
def meter() -> dict[str, int]:
    """On the beat, every minute: one metering run per organization (``billing.actions.metering.meter``)."""
    runs = [metering.meter(org) for org in Organization.objects.all()]
    return {"attempts": sum(r.attempts for r in runs), "usage_records": sum(r.usage_records for r in runs)}


@shared_task(ignore_result=True)
def reconcile() -> list[dict[str, object]]:
    """On the beat, hourly: prove each organization's metered hours equal its placements (and repair), then book
    the corrections of closed months that what was repaired (or anything else) changed."""
    found = []
    for org in Organization.objects.all():
        found.append(metering.reconcile(org).as_dict())
        try:
            periods.adjust(org)
        except Exception:  # one organization's closed months must not keep the others' from being checked
            log.exception("could not check the closed months of %s; the next hour tries again", org.slug)
    return found


@shared_task(ignore_result=True)
def adjust_periods(organization_id: int) -> int:
    """After a change of the price book or overhead: book the corrections of the organization's closed months."""
    return len(periods.adjust(organization_id))
