"""One minute of the time-based SLOs, recorded by the beat (``observability.tasks.sample_slos``): for each
organization, whether its placement loop was silent past the SLO's threshold while work waited, and how many
of its clusters were freshly synced. A second run in the same minute changes nothing; rows older than the
budget window (and a day) are deleted."""

from __future__ import annotations

from datetime import datetime, timedelta

from clusters.metrics import sync_ages
from observability import slo
from observability.models import SloSample
from scheduler.metrics import silence_by_organization
from tenancy.models import Organization

KEEP = slo.BUDGET_WINDOW + timedelta(days=1)


def sample(now: datetime) -> int:
    """Record the minute of ``now``; returns the rows offered (those of a minute already recorded are kept)."""
    minute = now.replace(second=0, microsecond=0)
    silence = silence_by_organization(now)
    fresh: dict[int, list[int]] = {}
    for org, _, _, _, age, _ in sync_ages(now):
        counts = fresh.setdefault(org, [0, 0])
        counts[0] += age <= slo.SYNC_SECONDS
        counts[1] += 1
    rows = []
    for org in Organization.objects.values_list("pk", flat=True):
        quiet = silence.get(org, 0.0) <= slo.SILENCE_SECONDS
        rows.append(SloSample(organization_id=org, slo="loop", minute=minute, good=int(quiet), total=1))
        if org in fresh:
            good, total = fresh[org]
            rows.append(SloSample(organization_id=org, slo="cluster_sync", minute=minute, good=good, total=total))
    SloSample.objects.bulk_create(rows, ignore_conflicts=True)
    SloSample.objects.filter(minute__lt=minute - KEEP).delete()
    return len(rows)
