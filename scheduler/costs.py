"""What a job has cost so far: each attempt's price per hour times the hours it has held its accelerators.

An attempt holds its accelerators from admission (the engine reserves them for it then, so nobody else can
be placed there) until it ends; a live attempt is counted up to now. The billing app's metering, when it
comes, replaces this estimate with what the clusters report.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime
from decimal import Decimal

from django.utils import timezone

from scheduler.models import Attempt, Job

CENT = Decimal("0.01")
SECONDS_PER_HOUR = Decimal(3600)


def _cost(attempt: Attempt, now: datetime) -> Decimal:
    end = attempt.ended_at or now
    seconds = max(Decimal(0), Decimal(str((end - attempt.admitted_at).total_seconds())))
    return attempt.cost_per_hour * seconds / SECONDS_PER_HOUR


def attempt_cost(attempt: Attempt, now: datetime | None = None) -> Decimal:
    """``attempt``'s cost from its admission to its end (or ``now`` while it lasts), to the cent."""
    return _cost(attempt, now or timezone.now()).quantize(CENT)


def cost_so_far(job: Job, now: datetime | None = None, attempts: Iterable[Attempt] | None = None) -> Decimal:
    """The sum over ``job``'s attempts (pass them when already fetched; else ``job.attempts.all()``, which
    uses a prefetch if there is one)."""
    now = now or timezone.now()
    rows = job.attempts.all() if attempts is None else attempts
    return sum((_cost(a, now) for a in rows), Decimal(0)).quantize(CENT)
