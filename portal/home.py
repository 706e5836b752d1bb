"""What each role's home page shows: the live state of the user's work, not a menu.

One section per role the user holds, each with a link to the page that does that role's main job:

- **researcher**: their running and waiting jobs (the engine's reason, position and estimated start), their
  failures of the last seven days, and what they and their teams have spent this month;
- **lead**: per team they lead, quota in use against nominal (``governance.usage``) and where each budget
  stands this month (``governance.actions.budgets``);
- **finance**: per organization, the month so far: cost to date, a forecast at the recent pace, the costliest
  teams and the month's downloads;
- **admin**: per organization, fleet health (clusters synced, nodes by state and health, open drains), the
  SLOs (``observability.slo``), what is firing by the same rules Prometheus evaluates
  (``observability.rules``) and the recent budget alerts.

Reads only, each through ``for_user`` or the policy (``policy.permitted``). Costs come from billing's
attribution (the portal package may import billing; the apps below it may not).
"""

from __future__ import annotations

import datetime as dt
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from django.contrib.auth.models import User
from django.db.models import Case, Count, Q, Value, When
from django.urls import reverse
from django.utils import timezone

from billing import attribution
from billing.forecast_history import forecast_organization
from billing.reports import month_label
from clusters.models import OPEN_DRAINS, Cluster, Drain, Node
from governance.actions import budgets
from governance.models import Budget, BudgetAlert
from governance.usage import Row
from observability import rules, slo
from scheduler.governed import organization_usage, use_of
from scheduler.models import Job
from scheduler.queues import REASON_LABELS, describe_resources
from scheduler.states import ACTIVE, PLACED
from tenancy import policy
from tenancy.models import Organization, Team
from tenancy.scoping import Action, Role

#: Jobs listed in each of the researcher's tables (the jobs page has the rest).
SHOWN_JOBS = 10
RECENT_FAILURES = dt.timedelta(days=7)
TOP_TEAMS = 5
RECENT_BUDGET_ALERTS = 5


def money(cents: int) -> str:
    return f"{attribution.money(cents):,.2f}"


# --- researcher ----------------------------------------------------------------------------------------------


@dataclass
class JobLine:
    job: Job
    asks: str
    reason: str

    @property
    def waiting(self) -> bool:
        return self.job.state not in PLACED


@dataclass
class Work:
    active: list[JobLine]
    active_count: int
    failures: list[Job]
    failure_count: int
    spend_mine: str
    spend_teams: str
    month: str


def _line(job: Job) -> JobLine:
    return JobLine(job, describe_resources(job), REASON_LABELS.get(job.pending_reason, ""))


def work_of(user: User, now: dt.datetime) -> Work:
    """The user's own active jobs (running first, then waiting by queue position), failures of the last week,
    and this month's spend: theirs, and their teams' (as the costs page shows them)."""
    mine = Job.objects.for_user(user, Action.VIEW).filter(submitted_by=user).select_related("team", "queue")
    placed_first = Case(When(state__in=PLACED, then=Value(0)), default=Value(1))
    active = (
        mine.filter(state__in=ACTIVE)
        .annotate(placed_first=placed_first)
        .order_by("placed_first", "queue_position", "submitted_at", "pk")
    )
    failed = mine.filter(state=Job.State.FAILED, finished_at__gte=now - RECENT_FAILURES).order_by("-finished_at")
    month = now.astimezone(dt.UTC).date().replace(day=1)
    cents_mine = cents_teams = 0
    organizations = Organization.objects.for_user(user, Action.VIEW).values_list("pk", flat=True)
    for organization in organizations:
        seen = attribution.visible_to(user, attribution.kept(organization, month))
        for line in seen.lines:
            cents_teams += line.total
            if line.user == user.pk:
                cents_mine += line.total
    return Work(
        active=[_line(job) for job in active[:SHOWN_JOBS]],
        active_count=active.count(),
        failures=list(failed[:SHOWN_JOBS]),
        failure_count=failed.count(),
        spend_mine=money(cents_mine),
        spend_teams=money(cents_teams),
        month=f"{month:%B %Y}",
    )


# --- lead ----------------------------------------------------------------------------------------------------


@dataclass
class BudgetLine:
    scope: str
    standing: budgets.Standing

    @property
    def meter(self) -> float:
        return min(self.standing.percent, 100.0)


@dataclass
class TeamStanding:
    team: Team
    quota: list[Row]
    budgets: list[BudgetLine]


def _budget_scope(budget: Budget) -> str:
    return f"project {budget.project.name}" if budget.project_id and budget.project else "the team"


def teams_led(user: User, now: dt.datetime) -> list[TeamStanding]:
    """Each team whose projects' quotas the user may set (its leads), with its quota rows (those with a quota
    or in use) and its budgets' standings this month."""
    teams = list(
        policy.permitted(user, "quota.project.set", Team.objects.for_user(user, Action.VIEW))
        .select_related("organization")
        .order_by("organization__name", "name")
    )
    usage = {org.pk: organization_usage(org) for org in {team.organization for team in teams}}
    team_budgets = list(
        Budget.objects.for_user(user, Action.VIEW).filter(team__in=teams).select_related("project", "team")
    )
    uses = use_of(team_budgets, now)
    result = []
    for team in teams:
        rows = [row for row in usage[team.organization_id].of_team(team.pk) if row.own is not None or row.used]
        lines = [
            BudgetLine(_budget_scope(b), standing)
            for b in sorted((b for b in team_budgets if b.team_id == team.pk), key=lambda b: b.project_id or 0)
            for standing in budgets.standings(b, uses[b.pk], now)
        ]
        result.append(TeamStanding(team, rows, lines))
    return result


# --- finance -------------------------------------------------------------------------------------------------


@dataclass
class MonthSoFar:
    organization: Organization
    month: str
    cost: str
    forecast: str
    top_teams: list[tuple[str, str, int]]
    downloads: dict[str, str]


def forecast_cents(month: attribution.Attribution, now: dt.datetime) -> int | None:
    """The month's fleet cost at this month's pace: the capacity cost metered so far, scaled from the time
    elapsed to the whole month, plus the month's shared overhead (a fixed amount). None in the month's first
    hour, too early for a pace."""
    start, end = (dt.datetime.combine(day, dt.time(), tzinfo=dt.UTC) for day in attribution.month_bounds(month.month))
    elapsed = (now - start).total_seconds()
    if elapsed < 3600:
        return None
    whole = (end - start).total_seconds()
    return round(month.capacity_cost * whole / min(elapsed, whole)) + month.overhead


def month_so_far(user: User, now: dt.datetime) -> list[MonthSoFar]:
    """Every organization whose costs the user reads whole (finance and admins)."""
    result = []
    first = now.astimezone(dt.UTC).date().replace(day=1)
    for organization in policy.permitted(user, "finance.read", Organization.objects.order_by("name")):
        month = attribution.kept(organization.pk, first)
        forecast = forecast_cents(month, now)
        query = f"month={month_label(first)}&organization={organization.slug}"
        result.append(
            MonthSoFar(
                organization=organization,
                month=f"{first:%B %Y}",
                cost=money(month.fleet_total),
                forecast="" if forecast is None else money(forecast),
                top_teams=[
                    (row["team_name"], money(row["total"]), row["team"]) for row in month.rollup(["team"])[:TOP_TEAMS]
                ],
                downloads={
                    ext: f"{reverse('api:billing-fleet', kwargs={'ext': ext})}?{query}" for ext in ("csv", "xlsx")
                },
            )
        )
    return result


# --- procurement ---------------------------------------------------------------------------------------------


@dataclass
class Outlook:
    """An organization's next 12 weeks per accelerator type: what the fleet has, the weeks demand may pass it,
    and how far the forecast can be trusted."""

    organization: Organization
    flavors: list[dict[str, Any]]


def capacity_outlook(user: User, now: dt.datetime) -> list[Outlook]:
    """Every organization whose forecasts the user plans from (procurement, finance, admins), at a glance."""
    result = []
    for organization in policy.permitted(user, "forecast.read", Organization.objects.order_by("name")):
        found = forecast_organization(organization, "12w", now)
        flavors = [
            {
                "flavor": f.flavor,
                "accelerators": f.accelerators,
                "short": len(f.shortfall),
                "first": f.shortfall[0].start if f.shortfall else None,
                "reliable": f.reliable,
                "verdict": f.verdict,
            }
            for f in found.flavors
            if not f.message
        ]
        result.append(Outlook(organization, flavors))
    return result


# --- admin ---------------------------------------------------------------------------------------------------


@dataclass
class Firing:
    """An alert the portal sees firing, by the rule Prometheus would fire it by."""

    name: str
    severity: str
    summary: str


@dataclass
class Fleet:
    organization: Organization
    clusters: list[Cluster]
    synced: int
    nodes: dict[str, int]
    unhealthy: int
    drains: list[Drain]
    slos: list[slo.Standing]
    firing: list[Firing] = field(default_factory=list)
    budget_alerts: list[BudgetAlert] = field(default_factory=list)


def _firing(standings: list[slo.Standing], clusters: list[Cluster], now: dt.datetime) -> list[Firing]:
    """The burn-rate alerts over the page's windows, and the clusters whose inventory is stale, at the
    thresholds of ``observability.rules`` (the portal cannot see the short windows: its long window alone)."""
    found = []
    for standing in standings:
        burns = {burn.window: burn.rate for burn in standing.burns}
        for severity, window, _short, rate in rules.BURN_ALERTS:
            burn = burns.get(window)
            if burn is not None and burn > rate:
                found.append(
                    Firing(
                        standing.slo.alert,
                        severity,
                        f"{standing.slo.title}: burning its error budget {burn:.1f}x over {window} "
                        f"(alert at {rate:g}x).",
                    )
                )
                break
    stale = now - dt.timedelta(seconds=rules.SYNC_STALE_SECONDS)
    for cluster in clusters:
        if cluster.status != Cluster.Status.DISABLED and (cluster.last_sync_at is None or cluster.last_sync_at < stale):
            when = f"last synced {cluster.last_sync_at:%Y-%m-%d %H:%M} UTC" if cluster.last_sync_at else "never synced"
            found.append(Firing("ClusterSyncStale", "ticket", f"Cluster {cluster.name}: {when}."))
    return found


def fleet_health(user: User, now: dt.datetime) -> list[Fleet]:
    """Every organization whose SLOs the user watches (its admins)."""
    result = []
    for organization in policy.permitted(user, "slo.view", Organization.objects.order_by("name")):
        clusters = list(Cluster.objects.for_user(user, Action.VIEW).filter(organization=organization))
        nodes = Node.objects.for_user(user, Action.VIEW).filter(cluster__organization=organization, present=True)
        by_state = Counter(dict(nodes.values_list("state").annotate(n=Count("pk")).order_by()))
        drains = list(
            Drain.objects.for_user(user, Action.VIEW)
            .filter(node__cluster__organization=organization, state__in=OPEN_DRAINS)
            .select_related("node__cluster")
            .order_by("-created_at")[:10]
        )
        standings = slo.standings(organization, now)
        alerts = list(
            BudgetAlert.objects.for_user(user, Action.VIEW)
            .filter(budget__team__organization=organization)
            .select_related("budget__team", "budget__project")[:RECENT_BUDGET_ALERTS]
        )
        result.append(
            Fleet(
                organization=organization,
                clusters=clusters,
                synced=sum(1 for c in clusters if c.status == Cluster.Status.HEALTHY),
                nodes={label: by_state.get(value, 0) for value, label in Node.State.choices},
                unhealthy=nodes.filter(Q(healthy=False) | Q(ready=False)).count(),
                drains=drains,
                slos=standings,
                firing=_firing(standings, clusters, now),
                budget_alerts=alerts,
            )
        )
    return result


# --- the page ------------------------------------------------------------------------------------------------


def sections(user: User, roles: set[Role], now: dt.datetime | None = None) -> dict[str, Any]:
    """The home page's sections for the roles ``user`` holds (a superuser sees the admin's)."""
    now = now or timezone.now()
    admin = Role.ADMIN in roles or user.is_superuser
    found: dict[str, Any] = {}
    if Role.RESEARCHER in roles or Role.LEAD in roles:
        found["work"] = work_of(user, now)
    if Role.LEAD in roles:
        found["teams"] = teams_led(user, now)
    if Role.FINANCE in roles:
        found["months"] = month_so_far(user, now)
    if Role.PROCUREMENT in roles:
        found["outlooks"] = capacity_outlook(user, now)
    if admin:
        found["fleets"] = fleet_health(user, now)
    return found
