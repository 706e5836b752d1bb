"""Budgets and member limits on the quota pages: a team's budgets with where each stands this month (a table, a
chart and its recent alerts) and its members' limits, both changed in place by those allowed; every team's and
project's budget on the organization's page.

Thin, as ``quotas.py``: budgets, alerts, members and limits are read through ``for_user``; the month's use
comes from ``placed.use_of``, once per request; every change goes through ``budgets.set_budget`` or
``quotas.set_member_limit``, which say who may (403) and what is valid (400, the message by its field, nothing
written). The pages only ask the policy (``tenancy.policy``) which controls to show.

A webhook's URL is often a secret (a chat's incoming webhook): it is shown only in the form of those who may
set the budget, and a failed delivery's error, which may quote it, only to them too.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime
from decimal import Decimal
from http import HTTPStatus
from typing import Any

from django.contrib import messages
from django.contrib.auth.models import User
from django.core.exceptions import PermissionDenied, ValidationError
from django.http import HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.utils import timezone
from django.views.decorators.http import require_http_methods

from common.types import AuthenticatedHttpRequest
from common.web.forms import apply_errors
from governance import placed
from governance.actions import budgets, quotas
from governance.models import Budget, BudgetAlert, MemberLimit
from governance.web import pages
from governance.web.forms import TEAM_BUDGET, BudgetForm
from tenancy import policy
from tenancy.models import Membership, Organization, Project, Team
from tenancy.scoping import Action

RECENT_ALERTS = 10
MEASURE_LABELS = {"accelerator_hours": "Accelerator-hours", "amount": "Money"}
#: Colours by name, as static/js/charts.js knows them.
CHART_COLORS = {"Used": "blue", "Forecast": "orange", "Limit": "grey"}


# --- what the budget tables and the chart show ---------------------------------------------------------------


def figure(value: Decimal | None, measure: str, exact: bool = False) -> str:
    """A budget figure as read: money to the cent, accelerator-hours to a tenth (a limit ``exact``, as set),
    thousands grouped."""
    if value is None:
        return ""
    if measure == "amount":
        return f"{value:,.2f}"
    if exact:
        return f"{value.normalize():,f}"
    text = f"{value:,.1f}"
    return text.removesuffix(".0")


@dataclass
class Line:
    """One limited measure of a budget, as its row shows it."""

    measure: str
    label: str
    limit: str
    used: str
    percent: str
    meter: float
    over: bool
    committed: str
    forecast: str
    forecast_over: bool
    #: Money both ways (the money measure): what usage alone, and the full charge, come to so far.
    both: str = ""


@dataclass
class BudgetRow:
    """A budget and its lines, with what its viewer may do with it."""

    budget: Budget
    scope: str
    target: str
    lines: list[Line]
    alerted: str
    may_set: bool
    change_url: str = ""
    partial_url: str = ""
    standings: list[budgets.Standing] = field(default_factory=list)


def _line(standing: budgets.Standing, counts: str) -> Line:
    measure, percent = standing.measure, standing.percent
    label = MEASURE_LABELS[measure]
    both = ""
    if measure == "amount":
        label = f"{label} ({'full charge' if counts == Budget.Counts.CHARGE else 'usage'})"
        if standing.charge is not None:
            both = f"usage {figure(standing.usage, measure)} · full charge {figure(standing.charge, measure)}"
    return Line(
        measure=measure,
        label=label,
        both=both,
        limit=figure(standing.limit, measure, exact=True),
        used=figure(standing.used, measure),
        percent=f"{percent:.0f}",
        meter=min(percent, 100.0),
        over=standing.used >= standing.limit,
        committed=figure(standing.committed, measure),
        forecast=figure(standing.forecast, measure),
        forecast_over=standing.forecast is not None and standing.forecast > standing.limit,
    )


def _alerted(budget: Budget) -> str:
    """Who a budget's alerts go to, in words (a webhook without its URL)."""
    parts = ["the team's leads", *budget.recipients]
    if budget.webhook_url:
        parts.append("a webhook")
    return ", ".join(parts)


def target_of(budget: Budget) -> str:
    return f"project:{budget.project_id}" if budget.project_id else TEAM_BUDGET


class Setters:
    """Whom the policy lets set which budget (``budgets.permission``), asked once per team and kind of budget
    (a team's own, or a project's: the rule names no particular project)."""

    def __init__(self, user: User) -> None:
        self.user = user
        self.known: dict[tuple[int, bool], bool] = {}

    def can_set(self, team: Team, project: Project | None) -> bool:
        key = (team.pk, project is None)
        if key not in self.known:
            self.known[key] = policy.can(self.user, budgets.permission(project), team)
        return self.known[key]


def budget_rows(user: User, found: Iterable[Budget], now: datetime, setters: Setters | None = None) -> list[BudgetRow]:
    """The rows of ``found`` (with their teams and projects), the month's use from one ``use_of``."""
    found = list(found)
    uses = placed.use_of(found, now, both=True)
    setters = setters or Setters(user)
    rows = []
    for budget in found:
        standings = budgets.standings(budget, uses[budget.pk], now)
        target = target_of(budget)
        page = reverse("team-quotas", args=[budget.team_id])
        rows.append(
            BudgetRow(
                budget=budget,
                scope=budgets.scope_of(budget),
                target=target,
                lines=[_line(s, budget.counts) for s in standings],
                alerted=_alerted(budget),
                may_set=setters.can_set(budget.team, budget.project),
                change_url=f"{page}?target={target}#budget-form",
                partial_url=f"{reverse('team-budgets', args=[budget.team_id])}?target={target}",
                standings=standings,
            )
        )
    rows.sort(key=lambda r: (r.budget.team.name, r.budget.project is not None, r.scope))
    return rows


def budget_chart(rows: list[BudgetRow], with_team: bool = False) -> dict[str, Any]:
    """Bars per budget of what was used this month, its forecast for the month and its limit: one panel per
    measure (accelerator-hours, money), each with its own axis."""
    measures = [m for m in budgets.MEASURES if any(s.measure == m for r in rows for s in r.standings)]
    data: list[dict[str, Any]] = []
    layout: dict[str, Any] = {"barmode": "group"}
    gap = 0.08
    width = (1 - gap * (len(measures) - 1)) / max(len(measures), 1)
    for i, measure in enumerate(measures):
        suffix = "" if i == 0 else str(i + 1)
        lines = [(r, s) for r in rows for s in r.standings if s.measure == measure]
        x = [f"{r.budget.team.slug} · {r.scope}" if with_team else r.scope for r, _ in lines]
        for name, values in (
            ("Used", [s.used for _, s in lines]),
            ("Forecast", [s.forecast for _, s in lines]),
            ("Limit", [s.limit for _, s in lines]),
        ):
            data.append(
                {
                    "type": "bar",
                    "name": name,
                    "x": x,
                    "y": [float(v) if v is not None else None for v in values],
                    "xaxis": f"x{suffix}",
                    "yaxis": f"y{suffix}",
                    "legendgroup": name,
                    "showlegend": i == 0,
                    "marker": {"color": CHART_COLORS[name]},
                    "hovertemplate": "%{y:,.2f} " + budgets.MEASURE_WORDS[measure] + "<extra>" + name + "</extra>",
                }
            )
        start = i * (width + gap)
        layout[f"xaxis{suffix}"] = {"domain": [start, start + width], "anchor": f"y{suffix}", "automargin": True}
        layout[f"yaxis{suffix}"] = {
            "anchor": f"x{suffix}",
            "title": {"text": budgets.MEASURE_WORDS[measure]},
            "rangemode": "tozero",
            "automargin": True,
        }
    return {"data": data, "layout": layout}


def _alert_rows(alerts: Iterable[BudgetAlert], setters: Setters) -> list[dict[str, Any]]:
    rows = []
    for alert in alerts:
        budget = alert.budget
        channels = []
        if alert.emailed_at is not None:
            channels.append("e-mailed")
        if budget.webhook_url:
            channels.append("webhook sent" if alert.webhook_sent_at is not None else "webhook not sent")
        error = ""
        if alert.last_error:
            mine = setters.can_set(budget.team, budget.project)
            error = alert.last_error if mine else "A channel failed; it is tried again."
        rows.append(
            {
                "alert": alert,
                "scope": budgets.scope_of(budget),
                "measure": MEASURE_LABELS[alert.measure],
                "spent": figure(alert.spent, alert.measure),
                "limit": figure(alert.limit, alert.measure, exact=True),
                "delivered": alert.delivered,
                "channels": ", ".join(channels) or "not sent yet",
                "error": error,
            }
        )
    return rows


# --- the team's budgets -------------------------------------------------------------------------------------


def _targets(user: User, team: Team, setters: Setters) -> tuple[list[Project], list[Project | None]]:
    """The team's projects (visible to ``user``), and the budgets ``user`` may set: the team's (None) and its
    projects'."""
    projects = list(Project.objects.for_user(user, Action.VIEW).filter(team=team).order_by("name"))
    allowed: list[Project | None] = [None] if setters.can_set(team, None) else []
    allowed += [p for p in projects if not p.archived and setters.can_set(team, p)]
    return projects, allowed


def _initial(budget: Budget | None, target: str) -> dict[str, Any]:
    if budget is None:
        return {"target": target}
    return {
        "target": target,
        "accelerator_hours": pages.plain(budget.accelerator_hours),
        "amount": pages.plain(budget.amount),
        "counts": budget.counts,
        "hard": budget.hard,
        "recipients": ", ".join(budget.recipients),
        "webhook_url": budget.webhook_url,
    }


def budgets_context(
    request: AuthenticatedHttpRequest,
    team: Team,
    *,
    form: BudgetForm | None = None,
    target: str | None = None,
    saved: str = "",
) -> dict[str, Any]:
    """The team's budgets section: its rows and chart, its recent alerts, and the form for those who may set
    one (bound, after a refusal; else filled with the budget of ``target``, and open)."""
    user, now = request.user, timezone.now()
    setters = Setters(user)
    found = Budget.objects.for_user(user, Action.VIEW).filter(team=team).select_related("team", "project")
    rows = budget_rows(user, found, now, setters)
    alerts = (
        BudgetAlert.objects.for_user(user, Action.VIEW)
        .filter(budget__team=team)
        .select_related("budget__team", "budget__project")[:RECENT_ALERTS]
    )
    projects, allowed = _targets(user, team, setters)
    if form is None and allowed:
        known = {TEAM_BUDGET if p is None else f"project:{p.pk}" for p in allowed}
        chosen = next((r.budget for r in rows if r.target == target), None)
        form = BudgetForm(team, projects, allowed, initial=_initial(chosen, target) if target in known else {})
    return {
        "team": team,
        "month": budgets.month_of(now)[0],
        "budget_rows": rows,
        "budget_chart": budget_chart(rows),
        "budget_alerts": _alert_rows(alerts, setters),
        "budget_form": form,
        "budget_form_open": bool(form is not None and (form.is_bound or form.initial.get("target"))),
        "budgets_url": reverse("team-budgets", args=[team.pk]),
        "saved": saved,
    }


@require_http_methods(["GET", "POST"])
def team_budgets(request: AuthenticatedHttpRequest, pk: int) -> HttpResponse:
    """The team's budgets section (GET; ``?target=team`` or ``project:<id>`` opens the form on that budget), or
    a budget set, changed or removed (POST: the target, both limits, hard, recipients, the webhook's URL and a
    reason; both limits empty remove it). An htmx request gets the section back; a plain one is sent back to
    the page on success."""
    team = pages.team(request, pk)
    template = "governance/quotas/_budgets.html"
    if request.method == "GET":
        return render(request, template, budgets_context(request, team, target=request.GET.get("target")))
    projects, allowed = _targets(request.user, team, Setters(request.user))
    if not allowed:
        raise PermissionDenied(f"Only a lead of {team} or an admin may set its budgets.")  # (policy.can said no)
    form = BudgetForm(team, projects, allowed, request.POST)
    status = HTTPStatus.BAD_REQUEST
    if form.is_valid():
        data = form.cleaned_data
        project = data["target"]
        values = {k: data[k] for k in budgets.FIELDS}
        try:
            change = budgets.set_budget(
                request.user, team, project, reason=data["reason"], confirm=data["confirm"], http=request, **values
            )
        except PermissionDenied as exc:
            form.add_error(None, str(exc))
            status = HTTPStatus.FORBIDDEN
        except ValidationError as exc:
            apply_errors(form, exc)
            form.confirm_needed = below_use(exc)  # type: ignore[attr-defined]
        else:
            gone = not Budget.objects.for_user(request.user, Action.VIEW).filter(team=team, project=project).exists()
            what = f"Budget of {'project ' + project.name if project else 'the team'}"
            saved = f"{what} {'removed' if gone else 'set'}." if change else f"{what} unchanged."
            if request.headers.get("HX-Request") != "true":
                messages.success(request, saved)
                return redirect(f"{reverse('team-quotas', args=[team.pk])}#budgets")
            context = budgets_context(request, team, saved=saved)
            return pages.render_page(request, template, context, headers=pages.CHANGED if change else None)
    return render(request, template, budgets_context(request, team, form=form), status=status)


def below_use(exc: ValidationError) -> bool:
    """Whether a refusal is of a limit below what is used (``budgets.BELOW_USE``): the form then offers to
    confirm it."""
    found = exc.error_dict.values() if hasattr(exc, "error_dict") else [exc.error_list]
    return any(error.code == budgets.BELOW_USE for errors in found for error in errors)


# --- the team's member limits -------------------------------------------------------------------------------


def _member_context(membership: Membership, limit: Decimal | None, editable: bool, team: Team) -> dict[str, Any]:
    return {
        "membership": membership,
        "member": membership.user,
        "limit": limit,
        "editable": editable,
        "url": reverse("team-member-limit", kwargs={"pk": team.pk, "user": membership.user_id}),
        "form_id": f"member-limit-{membership.user_id}",
    }


def members_context(request: AuthenticatedHttpRequest, team: Team) -> dict[str, Any]:
    """The team's members, each with the limit set for them, editable by the team's lead and admins."""
    members = (
        Membership.objects.for_user(request.user, Action.VIEW)
        .filter(team=team)
        .select_related("user")
        .order_by("user__username")
    )
    limits = dict(
        MemberLimit.objects.for_user(request.user, Action.VIEW).filter(team=team).values_list("user_id", "accelerators")
    )
    editable = policy.can(request.user, "member_limit.set", team)
    return {"members": [_member_context(m, limits.get(m.user_id), editable, team) for m in members]}


@require_http_methods(["GET", "POST"])
def member_limit(request: AuthenticatedHttpRequest, pk: int, user: int) -> HttpResponse:
    """One member's row: read (GET), as a form (GET ``?edit=1``), or their limit set (POST: ``accelerators``,
    empty for none, and a reason) through ``quotas.set_member_limit``."""
    team = pages.team(request, pk)
    membership: Membership = get_object_or_404(
        Membership.objects.for_user(request.user, Action.VIEW).filter(team=team).select_related("user"), user_id=user
    )
    editable = policy.can(request.user, "member_limit.set", team)

    def row(
        status: int = 200, errors: dict[str, list[str]] | None = None, headers: Any = None, confirm: bool = False
    ) -> HttpResponse:
        limit = MemberLimit.objects.for_user(request.user, Action.VIEW).filter(team=team, user=membership.user)
        context = _member_context(membership, limit.values_list("accelerators", flat=True).first(), editable, team)
        if errors is None and not (request.method == "GET" and request.GET.get("edit") and editable):
            return pages.render_page(
                request, "governance/quotas/_member_row.html", context, status=status, headers=headers
            )
        posted = request.POST if request.method == "POST" else {}
        errors = errors or {}
        context.update(
            accelerators=posted.get("accelerators", pages.plain(context["limit"])),
            reason=posted.get("reason", ""),
            errors=errors,
            confirm_needed=confirm,
            other_errors=[m for k, ms in errors.items() if k not in ("accelerators", "reason") for m in ms],
        )
        return render(request, "governance/quotas/_member_row_form.html", context, status=status)

    if request.method == "GET":
        return row()
    try:
        change = quotas.set_member_limit(
            request.user,
            team,
            membership.user,
            request.POST.get("accelerators", ""),
            reason=request.POST.get("reason", ""),
            confirm=request.POST.get("confirm") == "on",
            http=request,
        )
    except ValidationError as exc:
        return row(HTTPStatus.BAD_REQUEST, pages.errors_of(exc), confirm=below_use(exc))
    except PermissionDenied as exc:
        return row(HTTPStatus.FORBIDDEN, {"__all__": [str(exc)]})
    return row(headers=pages.CHANGED if change else None)


# --- the organization's page --------------------------------------------------------------------------------


def org_budgets(request: AuthenticatedHttpRequest, organizations: list[Organization]) -> dict[int, dict[str, Any]]:
    """Every team's and project's budget of ``organizations`` that the user sees, by organization and team (a
    team without one too): the rows (the month's use from one ``use_of`` for all of them) and a chart."""
    user, now = request.user, timezone.now()
    found = Budget.objects.for_user(user, Action.VIEW).filter(team__organization__in=organizations)
    by_team: defaultdict[int, list[BudgetRow]] = defaultdict(list)
    for row in budget_rows(user, found.select_related("team", "project"), now):
        by_team[row.budget.team_id].append(row)
    teams = Team.objects.for_user(user, Action.VIEW).filter(organization__in=organizations).order_by("name")
    sections: dict[int, dict[str, Any]] = {
        org.pk: {
            "month": budgets.month_of(now)[0],
            "teams": [],
            "chart_id": f"organization-{org.pk}-budget-chart",
            "figure_id": f"organization-{org.pk}-budget-chart-figure",
        }
        for org in organizations
    }
    for team in teams:
        sections[team.organization_id]["teams"].append((team, by_team[team.pk]))
    for section in sections.values():
        rows = [row for _, team_rows in section["teams"] for row in team_rows]
        section.update(rows=rows, chart=budget_chart(rows, with_team=True))
    return sections
