"""Budgets as placement reads them: a budget's month so far (``use_of``, also what governance's budget pages and
alerts show, through ``governance/placed.py``) and what each hard budget has left for the engine. What counts
is ``governance/actions/budgets.py``'s docstring."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import replace
from datetime import datetime, timedelta
from decimal import Decimal
from typing import Any

from django.conf import settings
from django.db.models import DurationField, Q, Sum, Value
from django.db.models.functions import Greatest, Least
from django.utils import timezone
from django.utils.module_loading import import_string

from governance.actions.budgets import FORECAST_WINDOW, month_of
from governance.models import Budget
from governance.placed import Use
from scheduler.engine import model as m
from scheduler.models import Attempt


def _overlap(start: datetime, end: datetime, lo: datetime, hi: datetime) -> float:
    return max(0.0, (min(end, hi) - max(start, lo)).total_seconds())


def use_of(budgets: Iterable[Budget], now: datetime | None = None, *, both: bool = False) -> dict[int, Use]:
    """The month's use of each of ``budgets`` (by pk). Ended attempts are summed by the database, grouped by
    what multiplies their time (team, project, accelerators, price); live ones, far fewer, are read one by one
    for what they may still use. The full charge (an attribution of the month, kept a minute) is read only where a
    budget counts it, or, with ``both``, for every money budget (pages that show it beside usage): not for the
    placement loop's and the metrics' usage budgets."""
    budgets = list(budgets)
    now = now or timezone.now()
    start, end = month_of(now)
    recent_from = max(start, now - FORECAST_WINDOW)
    teams = {b.team_id for b in budgets}
    by_team: defaultdict[int, Use] = defaultdict(Use)
    by_project: defaultdict[int, Use] = defaultdict(Use)

    def add(row: dict[str, Any], used: float, recent: float, ahead: float) -> None:
        accelerators = row["job__workers"] * row["job__accelerators"] * row["job__accelerator_milli"] / 1000 / 3600
        price = float(row["cost_per_hour"]) / 3600
        for use in (by_team[row["job__team_id"]], by_project[row["job__project_id"]]):
            use.hours += accelerators * used
            use.money += price * used
            use.recent_hours += accelerators * recent
            use.recent_money += price * recent
            use.committed_hours += accelerators * ahead
            use.committed_money += price * ahead

    shape = (
        "job__team_id",
        "job__project_id",
        "job__workers",
        "job__accelerators",
        "job__accelerator_milli",
        "cost_per_hour",
    )
    until_now = Least("ended_at", Value(now))
    ended = (
        Attempt.objects.filter(job__team__in=teams, ended_at__gt=start, admitted_at__lt=now)
        .values(*shape)
        .annotate(
            used=Sum(until_now - Greatest("admitted_at", Value(start)), output_field=DurationField()),
            recent=Sum(
                until_now - Greatest("admitted_at", Value(recent_from)),
                output_field=DurationField(),
                filter=Q(ended_at__gt=recent_from),
            ),
        )
        .order_by()
    )
    for row in ended:
        recent = row["recent"].total_seconds() if row["recent"] is not None else 0.0
        add(row, row["used"].total_seconds(), recent, 0.0)
    live = Attempt.objects.filter(job__team__in=teams, outcome=Attempt.Outcome.ACTIVE, ended_at=None)
    for row in live.values(*shape, "admitted_at", "job__time_limit"):
        admitted = row["admitted_at"]
        ahead = _overlap(now, admitted + timedelta(seconds=row["job__time_limit"]), now, end)
        add(row, _overlap(admitted, now, start, now), _overlap(admitted, now, recent_from, now), ahead)

    def charged(budget: Budget) -> bool:
        return budget.amount is not None and (both or budget.counts == Budget.Counts.CHARGE)

    charges = _charges(budgets, now) if any(charged(b) for b in budgets) else {}
    result = {}
    for budget in budgets:
        base = by_project[budget.project_id] if budget.project_id else by_team[budget.team_id]
        use = replace(base, usage_money=base.money)
        if charged(budget):
            key = ("project", budget.project_id) if budget.project_id else ("team", budget.team_id)
            use.charge_money = float(charges.get(key, 0))
            if budget.counts == Budget.Counts.CHARGE:
                # Counted as billed: what is ahead (running jobs, the forecast's rate) at this month's charge per
                # unit of usage so far.
                ratio = use.charge_money / base.money if base.money > 0 else 1.0
                use.money = use.charge_money
                use.recent_money *= ratio
                use.committed_money *= ratio
        result[budget.pk] = use
    return result


def _charges(budgets: list[Budget], now: datetime) -> dict[tuple[str, int], Decimal]:
    """The full charge of each team and project of the budgets' organizations this month so far, as billing says
    (``BUDGET_CHARGES``: the scheduler never imports billing)."""
    charges = import_string(settings.BUDGET_CHARGES)
    organizations = {b.team.organization_id for b in budgets}  # the budgets' teams are read with them
    found: dict[tuple[str, int], Decimal] = {}
    for organization in sorted(organizations):
        found.update(charges(organization, now))
    return found


def budget_name(team_id: int, project_id: int | None) -> str:
    """The engine's name of the budget of a team, or of one of its projects (``Job.budgets``)."""
    return f"project:{project_id}" if project_id is not None else f"team:{team_id}"


def snapshot_budgets(organization_id: int, now: datetime) -> dict[str, m.Budget]:
    """What each hard budget of the organization has left for the engine: its limit less the month's use and
    less what running jobs may still use before their time limits."""
    hard = list(Budget.objects.filter(team__organization=organization_id, hard=True).select_related("team", "project"))
    if not hard:
        return {}
    uses = use_of(hard, now)
    until = month_of(now)[1].timestamp()
    result = {}
    for budget in hard:
        use = uses[budget.pk]
        accel = money = None
        if budget.accelerator_hours is not None:
            accel = int((float(budget.accelerator_hours) - use.hours - use.committed_hours) * 3600 * 1000)
        if budget.amount is not None:
            money = float(budget.amount) - use.money - use.committed_money
        never = budget.accelerator_hours == 0 or budget.amount == 0
        result[budget_name(budget.team_id, budget.project_id)] = m.Budget(accel, money, until, str(budget), never)
    return result


def never_budgets(organization_id: int) -> dict[str, m.Budget]:
    """The organization's hard budgets whose limit is zero, as the engine sees them over any month: nothing
    such a budget limits can ever be used (the submission check)."""
    found = Budget.objects.filter(team__organization=organization_id, hard=True).filter(
        Q(accelerator_hours=0) | Q(amount=0)
    )
    return {
        budget_name(b.team_id, b.project_id): m.Budget(
            0 if b.accelerator_hours == 0 else None, 0.0 if b.amount == 0 else None, label=str(b), never=True
        )
        for b in found
    }


def charged_to(budgets: Mapping[str, m.Budget], team_id: int, project_id: int | None) -> tuple[str, ...]:
    """The hard budgets a job of ``team_id`` (and ``project_id``) is charged to."""
    names = [budget_name(team_id, None)] + ([budget_name(team_id, project_id)] if project_id is not None else [])
    return tuple(name for name in names if name in budgets)
