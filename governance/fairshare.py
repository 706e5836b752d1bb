"""Recent use as governance keeps and shows it (docs/scheduling.md §Memory: recent use counts): accelerator-hours
whose weight halves every half-life. What one hold is worth at a moment is the engine's
(``scheduler.engine.fairshare.hours``, which the meter and the simulator use); what was kept at one moment is worth
``decay`` of it at a later one, every hold alike.
"""

from __future__ import annotations

from datetime import datetime


def decay(amount: float, since: datetime, until: datetime, half_life: float) -> float:
    """``amount`` kept as of ``since``, as of ``until``."""
    return float(amount * 2.0 ** (-(until - since).total_seconds() / half_life))


def words(seconds: float) -> str:
    """A half-life in words: "7 days", "12 hours"."""
    days = seconds / 86400
    if days >= 1 and days == int(days):
        return f"{int(days)} day{'s' if days != 1 else ''}"
    hours = seconds / 3600
    return f"{hours:g} hour{'s' if hours != 1 else ''}"
