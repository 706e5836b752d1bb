"""Billing fixtures: the scheduler's small fleet (two simulated H100 clusters), and jobs placed on it whose
attempts held their accelerators over chosen times."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from scheduler.models import Attempt
from tests.scheduler.conftest import Fleet, fleet  # noqa: F401 - the fixture, shared with the scheduler tests


def placed(fleet: Fleet, *, admitted: datetime, ended: datetime | None, **job: Any) -> Attempt:  # noqa: F811
    """A job of ``job``'s shape placed by a real cycle, its attempt then moved to hold its accelerators from
    ``admitted`` to ``ended`` (None: it still runs)."""
    submitted = fleet.submit(**job)
    fleet.cycle()
    attempt = Attempt.objects.get(job=submitted)
    Attempt.objects.filter(pk=attempt.pk).update(
        admitted_at=admitted,
        ended_at=ended,
        outcome=Attempt.Outcome.ACTIVE if ended is None else Attempt.Outcome.SUCCEEDED,
    )
    return Attempt.objects.get(pk=attempt.pk)
