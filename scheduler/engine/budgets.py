"""Hard budgets in a cycle: a job is admitted only if what it may use before its budgets' period ends fits
what they have left (``Snapshot.budgets``; the snapshot has already taken off what running work used this
period and may still use until its time limit).

- **Accelerator-hours** are known before placement: the job's accelerators times its time limit, cut at
  the end of the period. A job that needs more than one of its budgets has left waits (reason ``budget``).
- **Money** depends on where the job lands. What a budget has left, spread over the job's hours, is a price
  per hour the job may not pass; it becomes the job's price limit for the cycle, so placement picks what the
  budget can pay for (a cheaper flavor or cluster), and a job that nothing affordable can hold waits with
  reason ``budget`` rather than ``price_limit``. Lowering the price limit keeps the failure cache sound: a
  lower limit fails wherever a higher one failed.
- Each admission, and each preemption issued for a job (which then waits for its victims), is charged at
  once, so the jobs after it in the cycle see what is left.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace

from .model import WHOLE, Budget, Job

SECONDS_PER_HOUR = 3600.0


class Ledger:
    """What each hard budget has left as the cycle admits work."""

    def __init__(self, budgets: Mapping[str, Budget], now: float) -> None:
        self.budgets = budgets
        self.now = now
        self.accel_left = {name: b.accel_seconds for name, b in budgets.items()}
        self.money_left = {name: b.money for name, b in budgets.items()}

    def __bool__(self) -> bool:
        return bool(self.budgets)

    def _seconds(self, job: Job, name: str) -> float:
        """How long ``job`` may run before budget ``name``'s period ends (its time limit at most)."""
        return min(float(job.time_limit), max(0.0, self.budgets[name].until - self.now))

    def over(self, job: Job) -> dict[str, object] | None:
        """The facts for the pending message if ``job`` needs more accelerator-hours than one of its budgets
        has left; None if they all have enough."""
        total = job.request()[0]
        for name in job.budgets:
            left = self.accel_left.get(name)
            if left is None:
                continue
            seconds = self._seconds(job, name)
            if total * seconds > left:
                # A job is charged only for its time before the period ends, so it fits once so little of
                # the period is left that its accelerators for the rest of it take no more than is left.
                until = self.budgets[name].until
                start = until - left / total if left > 0 and until != float("inf") else None
                return {
                    "never": self.budgets[name].never,
                    "measure": "accelerator-hours",
                    "label": self.budgets[name].label or name,
                    "left": max(0, left) / WHOLE / SECONDS_PER_HOUR,
                    "needed": total * seconds / WHOLE / SECONDS_PER_HOUR,
                    "hours": seconds / SECONDS_PER_HOUR,
                    "start": start,
                }
        return None

    def within_money(self, job: Job) -> tuple[Job, str | None]:
        """``job`` with its price limit lowered to what its budgets can pay per hour over its hours, and the
        budget that set the limit (None: its own limit stands)."""
        if not job.request()[0]:
            return job, None  # prices are per accelerator-hour: CPU-only work costs nothing
        cap, by = job.max_price_per_hour, None
        for name in job.budgets:
            left = self.money_left.get(name)
            if left is None:
                continue
            seconds = self._seconds(job, name)
            if seconds <= 0:
                continue
            affordable = max(0.0, left) / (seconds / SECONDS_PER_HOUR)
            if cap is None or affordable < cap:
                cap, by = affordable, name
        return (job, None) if by is None else (replace(job, max_price_per_hour=cap), by)

    def money_facts(self, job: Job, name: str) -> dict[str, object]:
        """The facts for the pending message of a job that no placement its budget ``name`` can pay for holds."""
        return {
            "never": self.budgets[name].never,
            "measure": "money",
            "label": self.budgets[name].label or name,
            "left": max(0.0, self.money_left.get(name) or 0.0),
            "cap": job.max_price_per_hour or 0.0,
            "hours": self._seconds(job, name) / SECONDS_PER_HOUR,
        }

    def charge(self, job: Job, cost_per_hour: float) -> None:
        """Take what ``job`` may use, at ``cost_per_hour``, off each of its budgets."""
        total = job.request()[0]
        for name in job.budgets:
            if name not in self.budgets:
                continue
            seconds = self._seconds(job, name)
            accel = self.accel_left[name]
            if accel is not None:
                self.accel_left[name] = accel - int(total * seconds)
            money = self.money_left[name]
            if money is not None:
                self.money_left[name] = money - cost_per_hour * seconds / SECONDS_PER_HOUR
