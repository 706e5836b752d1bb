"""Budget burn as Prometheus gauges, computed at scrape time: how much of each team's monthly budget is used
so far (``placed.use_of``, the same figures as the budget pages and alerts). Team slugs are bounded by the
configuration, so they may be labels. Names and labels: docs/operations.md#metrics."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime

from prometheus_client.core import GaugeMetricFamily, Metric

from governance import placed
from governance.actions import budgets
from governance.models import Budget


def collect(now: datetime) -> Iterator[Metric]:
    used = GaugeMetricFamily(
        "qm_budget_used_ratio",
        "The share of a team's monthly budget used so far this month (1: all of it), by measure "
        "(accelerator_hours, amount).",
        labels=["organization", "team", "measure"],
    )
    team_budgets = list(Budget.objects.filter(project=None).select_related("team__organization").order_by("pk"))
    uses = placed.use_of(team_budgets, now)
    for budget in team_budgets:
        for standing in budgets.standings(budget, uses[budget.pk], now):
            ratio = float(standing.used / standing.limit) if standing.limit else float(standing.used > 0)
            used.add_metric([budget.team.organization.slug, budget.team.slug, standing.measure], ratio)
    yield used
