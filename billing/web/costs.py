"""The costs pages, under ``/billing/``: a month's costs and the price book.

- ``/billing/`` (``?month=YYYY-MM``): for finance and admins, chargeback: the fleet's figures, every team's
  share of them (adding up to the fleet's total), cost by team over time, the costliest jobs, idle cost per
  pool and per day, budget burn and the downloads. For researchers and leads, showback: the same page cut to
  their teams (``attribution.visible_to``): their totals, cost by project and by user, their jobs, their
  statements; nothing of the fleet or of another team.
- ``/billing/teams/<id>/``: one team's statement (another team's is a 404 for its non-members).
- ``/billing/prices/``: the price book and shared overhead, for finance and admins (others 403, as the
  organization's quota page; a row they may not change is a 404). Every change goes through
  ``billing/actions/prices.py``, which says who may and names each bad field (400, the message beside the field).

Thin: figures come from ``attribution.kept`` (one allocation per organization and month, kept a minute) and
the costliest jobs from ``attribution.kept_job_costs`` (kept as long), and are formatted here; query strings
are read by ``billing/params.py`` (a bad month is a 400 naming it); the downloads are the API's
(``billing/api/costs.py``), which serve the same ``Attribution``.

Size: Finance's pages (the month's chargeback and showback, a team's costs, the price book and its edits); the
price-book views would split out first.
"""

from __future__ import annotations

import datetime as dt
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from http import HTTPStatus
from itertools import groupby
from typing import Any
from urllib.parse import urlencode

from django.contrib import messages
from django.core.exceptions import PermissionDenied, ValidationError
from django.http import Http404, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.utils import timezone
from django.views.decorators.http import require_GET, require_http_methods, require_POST

from billing import attribution, columns, params, reports
from billing.actions import prices
from billing.attribution import Attribution, hours, money, month_bounds
from billing.models import GridIntensity, Overhead, Period, Price
from billing.web.forms import OverheadForm, PriceForm
from clusters.capacity import CapacityType
from common.types import AuthenticatedHttpRequest
from common.web.forms import apply_errors
from governance import placed
from governance.actions import budgets
from governance.actions.budgets import scope_of
from governance.models import Budget
from tenancy import policy
from tenancy.models import Organization, Team
from tenancy.scoping import Action

TOP_JOBS = 10
TEAM_JOBS = 25
#: Series a stacked chart draws before the rest are summed as one.
MOST_SERIES = 10
KINDS = dict(CapacityType.choices)


# --- figures as read ----------------------------------------------------------------------------------------


def amount(cents: int) -> str:
    """Money to the cent, thousands grouped."""
    return f"{money(cents):,.2f}"


def hours_of(milli_seconds: int) -> str:
    """Accelerator-hours to a tenth, thousands grouped."""
    return f"{hours(milli_seconds):,.1f}"


def percent(part: float, whole: float) -> str:
    return f"{part / whole * 100:.1f}%" if whole else "none"


def rate_text(rate: Any) -> str:
    """A rate as the book keeps it (up to six places), with at least cents."""
    text = f"{rate.normalize():f}"
    whole, _, places = text.partition(".")
    return f"{int(whole):,}.{places.ljust(2, '0')}"


def figures(row: Mapping[str, int]) -> dict[str, Any]:
    """A row's amounts for a page (``columns.AMOUNTS``): by name, and as the ``cells`` of its table row."""
    return columns.shown(columns.AMOUNTS, row)


# --- what every costs page shares ---------------------------------------------------------------------------


def _query(**values: Any) -> str:
    return urlencode({k: v for k, v in values.items() if v not in (None, "")})


def month_nav(month: dt.date, organization: Organization, several: bool) -> dict[str, Any]:
    """The month shown, the one before and the one after (none after the current month)."""
    previous = (month - dt.timedelta(days=1)).replace(day=1)
    following = month_bounds(month)[1]
    this = timezone.now().astimezone(dt.UTC).date().replace(day=1)
    org = organization.slug if several else None
    closed = (
        Period.objects.filter(organization=organization, month=month, closed=True)
        .select_related("closed_by")
        .defer("snapshot")
        .first()
    )
    return {
        "closed": closed,
        "value": reports.month_label(month),
        "first": month,
        "previous_first": previous,
        "next_first": following,
        "previous": _query(month=reports.month_label(previous), organization=org),
        "next": _query(month=reports.month_label(following), organization=org) if following <= this else "",
        "current": month == this,
    }


def downloads(organization: Organization, month: dt.date, team: Team | None = None) -> dict[str, str]:
    """Links to the API's CSV and XLSX of the fleet summary, or of ``team``'s statement (session auth)."""
    query = _query(month=reports.month_label(month), organization=organization.slug)
    links = {}
    for ext in ("csv", "xlsx"):
        if team is None:
            url = reverse("api:billing-fleet", kwargs={"ext": ext})
        else:
            url = reverse("api:billing-statement", kwargs={"team": team.slug, "ext": ext})
        links[ext] = f"{url}?{query}"
    return links


def _organizations(request: AuthenticatedHttpRequest) -> list[Organization]:
    return list(Organization.objects.for_user(request.user, Action.VIEW).order_by("name"))


def _bad_month(request: AuthenticatedHttpRequest, template: str, exc: ValidationError, **context: Any) -> HttpResponse:
    """The page with only its month selector and what was wrong with the month asked for (400)."""
    errors = exc.message_dict
    context.update(
        bad=True,
        errors=[f"{name}: {' '.join(found)}" for name, found in errors.items()],
        month_error=" ".join(errors.get("month", [])),
        month={"value": request.GET.get("month", "")},
    )
    return render(request, template, context, status=HTTPStatus.BAD_REQUEST)


def days_of(month: dt.date) -> list[dt.date]:
    first, following = month_bounds(month)
    return [first + dt.timedelta(days=i) for i in range((following - first).days)]


def stacked_days(
    days: list[dt.date],
    series: list[tuple[str, dict[dt.date, int]]],
    what: str,
    ordered: bool = False,
    colors: Sequence[str] = (),
) -> dict[str, Any]:
    """Bars per day, one colour per series stacked (the largest first, unless ``ordered``), in currency units; no
    bars at all when every day is zero. The colours are ``colors`` in turn (names static/js/charts.js knows), else
    every chart's."""
    if not any(cents for _, values in series for cents in values.values()):
        series = []
    if not ordered:
        series = sorted(series, key=lambda s: (-sum(s[1].values()), s[0]))
    if len(series) > MOST_SERIES:
        rest: dict[dt.date, int] = defaultdict(int)
        for _, values in series[MOST_SERIES - 1 :]:
            for day, cents in values.items():
                rest[day] += cents
        series = [*series[: MOST_SERIES - 1], ("Others", rest)]
    x = [day.isoformat() for day in days]
    data = [
        {
            "type": "bar",
            "name": name,
            "x": x,
            "y": [float(money(values.get(day, 0))) for day in days],
            "hovertemplate": "%{x|%b %d}: %{y:,.2f}<extra>%{fullData.name}</extra>",
        }
        for name, values in series
    ]
    span = [f"{days[0]} 00:00", f"{days[-1]} 23:59"]
    layout: dict[str, Any] = {
        "barmode": "stack",
        "showlegend": True,
        "legend": {"traceorder": "normal"},
        "xaxis": {"type": "date", "tickformat": "%b %d", "automargin": True, "range": span},
        "yaxis": {"title": {"text": what}, "rangemode": "tozero", "automargin": True, "tickformat": ",.0f"},
    }
    if colors:
        layout["colorway"] = list(colors)
    return {"data": data, "layout": layout}


def _by_day(rows: Iterable[Mapping[str, Any]], name: Any) -> list[tuple[str, dict[dt.date, int]]]:
    found: dict[str, dict[dt.date, int]] = defaultdict(dict)
    for row in rows:
        found[name(row)][row["day"]] = row["total"]
    return list(found.items())


def job_rows(month: Attribution, jobs: Iterable[attribution.JobCost], with_team: bool = True) -> list[dict[str, Any]]:
    names, rows = month.names, []
    for job in jobs:
        rows.append(
            {
                "job": job.job,
                "name": job.name,
                "url": reverse("job-detail", args=[job.job]),
                "team": names.of("team", job.team) if with_team else "",
                "project": names.of("project", job.project),
                "user": names.of("user", job.user),
                **columns.shown(columns.JOB_AMOUNTS, {"milli_seconds": job.milli_seconds, "cost": job.cost}),
            }
        )
    return rows


def budget_burn(request: AuthenticatedHttpRequest, organization: Organization, month: dt.date) -> dict[str, Any]:
    """Each budget the user sees against its limit in ``month`` (its use as the budgets count it, up to now or
    the month's end), as rows and a horizontal bar chart of the share of the limit used."""
    now = timezone.now()
    first, following = (dt.datetime.combine(d, dt.time(), dt.UTC) for d in month_bounds(month))
    if first > now:
        return {"rows": [], "chart": None}
    at = min(now, following - dt.timedelta(seconds=1))
    found = list(
        Budget.objects.for_user(request.user, Action.VIEW)
        .filter(team__organization=organization)
        .select_related("team", "project")
    )
    uses = placed.use_of(found, at)
    rows = []
    for budget in found:
        for standing in budgets.standings(budget, uses[budget.pk], at):
            places = 2 if standing.measure == "amount" else 1
            scope = scope_of(budget)
            rows.append(
                {
                    "team": budget.team.name,
                    "scope": scope,
                    "label": f"{budget.team.name} · {scope}",
                    "measure": standing.words,
                    "used": f"{standing.used:,.{places}f}",
                    "limit": f"{standing.limit:,.{places}f}",
                    "percent": standing.percent,
                    "over": standing.used >= standing.limit,
                    "hard": budget.hard,
                }
            )
    rows.sort(key=lambda r: (r["team"], r["scope"] != "the team", r["scope"], r["measure"]))
    if not rows:
        return {"rows": [], "chart": None}
    labels = [f"{r['label']} ({r['measure']})" for r in rows]
    chart = {
        "data": [
            {
                "type": "bar",
                "orientation": "h",
                "y": labels,
                "x": [round(r["percent"], 1) for r in rows],
                "text": [f"{r['used']} of {r['limit']}" for r in rows],
                "textposition": "auto",
                "marker": {"color": ["maroon" if r["over"] else "blue" for r in rows]},
                "hovertemplate": "%{y}: %{x:.0f}% of the limit (%{text})<extra></extra>",
                "name": "Used",
            }
        ],
        "layout": {
            "height": 90 + 34 * len(rows),
            "margin": {"l": 10, "r": 20, "t": 30, "b": 40},
            "showlegend": False,
            "xaxis": {"title": {"text": "% of the monthly limit used"}, "rangemode": "tozero", "ticksuffix": "%"},
            "yaxis": {"autorange": "reversed", "automargin": True},
            "shapes": [
                {
                    "type": "line",
                    "x0": 100,
                    "x1": 100,
                    "yref": "paper",
                    "y0": 0,
                    "y1": 1,
                    "line": {"color": "slate", "dash": "dash", "width": 1},
                }
            ],
        },
    }
    return {"rows": rows, "chart": chart}


def _team_rows(teams: Iterable[Team], month: Attribution, organization: Organization) -> list[dict[str, Any]]:
    """A row per team (zeros for a team without usage), with its statement's page and downloads."""
    by_team = {row["team"]: row for row in month.rollup(["team"])}
    zero = dict.fromkeys((column.source for column in columns.AMOUNTS), 0)
    rows = []
    for team in teams:
        found = by_team.get(team.pk, zero)
        rows.append(
            {
                "team": team,
                "total_cents": found["total"],
                **figures(found),
                "url": f"{reverse('costs-team', args=[team.pk])}?{_query(month=reports.month_label(month.month))}",
                "downloads": downloads(organization, month.month, team),
            }
        )
    rows.sort(key=lambda r: (-r["total_cents"], r["team"].name))
    return rows


# --- the costs page -----------------------------------------------------------------------------------------


def _pool_row(pool: attribution.Pool, names: attribution.Names) -> dict[str, Any]:
    utilisation = "—" if pool.utilisation is None else f"{pool.utilisation * 100:.1f}%"
    return {
        "cluster": names.of("cluster", pool.cluster),
        "flavor": names.of("flavor", pool.flavor),
        "kind": KINDS.get(pool.capacity_type, pool.capacity_type),
        "capacity": hours_of(pool.capacity_milli_seconds),
        "used": hours_of(pool.used_milli_seconds),
        "utilisation": utilisation,
        "cost": amount(pool.cost),
        "idle": amount(pool.idle),
        "priced": pool.priced,
    }


def _chargeback(organization: Organization, month: Attribution, teams: list[Team]) -> dict[str, Any]:
    """The fleet's month for finance and admins (``teams``: every team of the organization)."""
    totals, names = month.totals(), month.names
    team_rows = _team_rows(teams, month, organization)
    for row in team_rows:
        row["share"] = percent(row["total_cents"], month.fleet_total)
    unallocated = month.unallocated
    fleet = month.fleet_totals()
    idle = fleet["idle"]
    headline = [
        ("Fleet total", amount(month.fleet_total), "capacity cost + shared overhead"),
        ("Capacity cost", amount(month.capacity_cost), f"{percent(totals['usage'], month.capacity_cost)} used"),
        ("Usage", amount(totals["usage"]), f"{hours_of(totals['milli_seconds'])} accelerator-hours"),
        ("Idle capacity", amount(idle), "capacity paid for but not used"),
        (
            "Shared overhead",
            amount(month.overhead),
            "staff, storage, network, support"
            if month.overhead == month.overhead_of_month
            else f"the days over, of {amount(month.overhead_of_month)} for the month",
        ),
        (
            "Unallocated",
            amount(unallocated),
            "today's idle, days with no usage to share them, and rounding"
            if unallocated
            else "everything is allocated",
        ),
    ]
    pools = sorted(month.pools, key=lambda p: (-p.idle, names.of("cluster", p.cluster), names.of("flavor", p.flavor)))
    days = days_of(month.month)
    idle_chart = stacked_days(days, [("Idle capacity", month.idle_by_day)], "Idle cost", colors=["grey"])
    idle_chart["layout"].update(showlegend=False, height=260)
    unpriced = [
        " ".join((names.of("cluster", p.cluster), names.of("flavor", p.flavor), KINDS[p.capacity_type]))
        for p in month.pools
        if not p.priced
    ]
    return {
        "headline": headline,
        "team_rows": team_rows,
        "team_totals": figures(fleet),  # the fleet summary's own total row (``reports.fleet_rows``)
        "unallocated": unallocated and figures(reports.unallocated_row(month)),
        "cost_chart": stacked_days(days, _by_day(month.rollup(["day", "team"]), lambda r: r["team_name"]), "Cost"),
        "idle_chart": idle_chart,
        "pools": [_pool_row(p, names) for p in pools],
        "unpriced_hours": hours_of(month.unpriced_milli_seconds) if month.unpriced_milli_seconds else "",
        "unpriced_pools": unpriced,
        "jobs": job_rows(month, attribution.kept_job_costs(organization.pk, month.month, None, TOP_JOBS)),
        "fleet_downloads": downloads(organization, month.month),
    }


def _showback(organization: Organization, month: Attribution, teams: list[Team]) -> dict[str, Any]:
    """The month of the user's own teams (researchers and leads): nothing of the fleet or of other teams."""
    team_ids = [team.pk for team in teams]  # what attribution.visible_teams gives them
    several = len(teams) > 1
    totals = month.totals()

    def project(row: Mapping[str, Any]) -> str:
        return f"{row['team_name']} · {row['project_name']}" if several else str(row["project_name"])

    projects = [{"name": project(r), **figures(r)} for r in month.rollup(["team", "project"])]
    by_day = _by_day(month.rollup(["day", "team", "project"]), project)
    users = [
        {"name": f"{r['user_name']} ({r['team_name']})" if several else r["user_name"], **figures(r)}
        for r in month.rollup(["team", "user"])
    ]
    return {
        "teams": teams,
        "several": several,
        "headline": [
            ("Total", amount(totals["total"]), "what your team is charged" if not several else "your teams' total"),
            ("Usage", amount(totals["usage"]), f"{hours_of(totals['milli_seconds'])} accelerator-hours"),
            ("Idle capacity share", amount(totals["idle"]), "of the pools you used"),
            ("Shared overhead share", amount(totals["overhead"]), "in proportion to usage"),
        ],
        "team_rows": _team_rows(teams, month, organization),
        "team_totals": figures(totals),
        "projects": projects,
        "users": users,
        "cost_chart": stacked_days(days_of(month.month), by_day, "Cost"),
        "unpriced_hours": hours_of(month.unpriced_milli_seconds) if month.unpriced_milli_seconds else "",
        "jobs": job_rows(month, attribution.kept_job_costs(organization.pk, month.month, team_ids, TOP_JOBS), several),
    }


@require_GET
def costs(request: AuthenticatedHttpRequest) -> HttpResponse:
    organizations = _organizations(request)
    organization = params.organization(request.user, request.GET.get("organization"))
    several = len(organizations) > 1
    base = {"organization": organization, "organizations": organizations if several else []}
    try:
        first = params.month(request.GET.get("month"))
    except ValidationError as exc:
        return _bad_month(request, "billing/costs.html", exc, **base)
    month = attribution.visible_to(request.user, attribution.kept(organization.pk, first))
    teams = list(Team.objects.for_user(request.user, Action.VIEW).filter(organization=organization).order_by("name"))
    context = {
        **base,
        "month": month_nav(first, organization, several),
        "fleet": month.fleet_visible,
        "budget": budget_burn(request, organization, first),
        "amount_columns": columns.AMOUNTS,
        "job_columns": columns.JOB_AMOUNTS,
    }
    context.update(
        _chargeback(organization, month, teams) if month.fleet_visible else _showback(organization, month, teams)
    )
    return render(request, "billing/costs.html", context)


@require_GET
def team_costs(request: AuthenticatedHttpRequest, pk: int) -> HttpResponse:
    """One team's statement: its lines per project, user, cluster, accelerator type and capacity type, its days
    and its jobs. Members of the team, finance and admins of its organization; for anyone else a 404."""
    team: Team = get_object_or_404(
        Team.objects.for_user(request.user, Action.VIEW).select_related("organization"), pk=pk
    )
    organization = team.organization
    base = {"organization": organization, "team": team}
    try:
        first = params.month(request.GET.get("month"))
    except ValidationError as exc:
        return _bad_month(request, "billing/costs_team.html", exc, **base)
    seen = attribution.visible_to(request.user, attribution.kept(organization.pk, first))
    month = seen.for_teams([team.pk], seen.fleet_visible)
    totals = month.totals()
    names = month.names
    lines = [
        {
            "project": names.of("project", r["project"]),
            "user": names.of("user", r["user"]),
            **figures(r),
            "where": " · ".join(
                (
                    names.of("cluster", r["cluster"]),
                    names.of("flavor", r["flavor"]),
                    KINDS.get(r["capacity_type"], r["capacity_type"]),
                )
            ),
            "correction": names.of("corrects", r["corrects"]) if r["corrects"] else "",
        }
        for r in sorted(month.rollup(reports.STATEMENT_BY), key=lambda r: r["corrects"] is not None)
    ]
    days = days_of(first)
    parts = {"usage": "Usage", "idle": "Idle capacity share", "overhead": "Shared overhead share"}
    by_day = month.rollup(["day"])
    series = [(label, {r["day"]: r[key] for r in by_day}) for key, label in parts.items()]
    chart = stacked_days(days, series, "Cost", ordered=True, colors=["blue", "grey", "orange"])
    context = {
        **base,
        "month": month_nav(first, organization, False),
        "fleet": seen.fleet_visible,
        "totals": figures(totals),
        "share": percent(totals["total"], seen.fleet_total) if seen.fleet_visible else "",
        "lines": lines,
        "unpriced_hours": hours_of(month.unpriced_milli_seconds) if month.unpriced_milli_seconds else "",
        "chart": chart,
        "jobs": job_rows(month, attribution.kept_job_costs(organization.pk, first, [team.pk], TEAM_JOBS), False),
        "most_jobs": TEAM_JOBS,
        "amount_columns": columns.AMOUNTS,
        "job_columns": columns.JOB_AMOUNTS,
        "downloads": downloads(organization, first, team),
        "back": f"{reverse('costs')}?{_query(month=reports.month_label(first))}",
    }
    return render(request, "billing/costs_team.html", context)


# --- the price book -----------------------------------------------------------------------------------------


def _books(request: AuthenticatedHttpRequest) -> list[Organization]:
    """The organizations whose price book the user may keep."""
    return [org for org in _organizations(request) if policy.can(request.user, "price.set", org)]


def _book_organization(request: AuthenticatedHttpRequest) -> tuple[Organization, list[Organization]]:
    """The organization whose book is asked for (``organization``: id or slug; else the first), among those
    whose book the user may keep; none: 403."""
    mine = _books(request)
    if not mine:
        raise PermissionDenied("The price book is for the organization's finance staff and admins.")
    wanted = str(request.POST.get("organization") or request.GET.get("organization") or "")
    if not wanted:
        return mine[0], mine
    for org in mine:
        if wanted in (str(org.pk), org.slug):
            return org, mine
    raise Http404("No such organization.")


def _row_status(rows: list[Price], today: dt.date) -> dict[int, str]:
    """Per row: in effect today, scheduled (from a later day) or superseded by a later row."""
    status: dict[int, str] = {}
    current: set[tuple[int, int, str]] = set()
    for row in rows:  # newest first within each cluster, flavor and capacity type
        key = (row.cluster_id, row.flavor_id, row.capacity_type)
        if row.effective_from > today:
            status[row.pk] = "scheduled"
        elif key in current:
            status[row.pk] = "superseded"
        else:
            status[row.pk] = "in effect"
            current.add(key)
    return status


def on_prem_inputs(row: Price) -> str:
    if row.capacity_type != CapacityType.ON_PREM:
        return "the hourly rate"
    return (
        f"{row.purchase_price or 0:,.2f} a node over {row.depreciation_months} months; "
        f"{row.power_kw} kW at {row.energy_price} a kWh; hosting {row.hosting_per_month or 0:,.2f} a month; "
        f"{row.accelerators_per_node} accelerators a node"
    )


def _book_context(
    request: AuthenticatedHttpRequest, organization: Organization, organizations: list[Organization], **forms: Any
) -> dict[str, Any]:
    rows = list(
        Price.objects.for_user(request.user, Action.VIEW)
        .filter(organization=organization)
        .select_related("cluster", "flavor", "updated_by")
        .order_by("cluster__name", "flavor__name", "capacity_type", "-effective_from")
    )
    status = _row_status(rows, timezone.now().astimezone(dt.UTC).date())
    groups = [
        {
            "cluster": cluster,
            "flavor": flavor,
            "rows": [
                {"price": r, "status": status[r.pk], "inputs": on_prem_inputs(r), "rate": rate_text(r.rate)}
                for r in found
            ],
        }
        for (cluster, flavor), found in groupby(rows, key=lambda r: (r.cluster, r.flavor))
    ]
    overheads = Overhead.objects.for_user(request.user, Action.VIEW).filter(organization=organization)
    price_form = forms.get("price_form") or PriceForm(organization)
    overhead_form = forms.get("overhead_form") or OverheadForm()
    return {
        "organization": organization,
        "organizations": organizations if len(organizations) > 1 else [],
        "groups": groups,
        "overheads": overheads.select_related("updated_by"),
        "intensities": GridIntensity.objects.for_user(request.user, Action.VIEW).filter(organization=organization),
        "price_form": price_form,
        "overhead_form": overhead_form,
        "hours_per_month": prices.HOURS_PER_MONTH,
    }


def _back_to_book(
    request: AuthenticatedHttpRequest, organization: Organization, anchor: str, said: str
) -> HttpResponse:
    messages.success(request, said)
    query = f"?{_query(organization=organization.slug)}" if len(_books(request)) > 1 else ""
    return redirect(f"{reverse('price-book')}{query}#{anchor}")


#: The two kinds of rows the book's pages change, each through its own actions in ``billing/actions/prices.py``.
MODELS: dict[str, type[Price] | type[Overhead]] = {"price": Price, "overhead": Overhead}
SETTERS: dict[str, Callable[..., Any]] = {"price": prices.set_price, "overhead": prices.set_overhead}
DELETERS: dict[str, Callable[..., None]] = {"price": prices.delete_price, "overhead": prices.delete_overhead}
NOUNS = {"price": "Price", "overhead": "Shared cost"}


def described(row: Price | Overhead) -> str:
    if isinstance(row, Price):
        kind, day = row.get_capacity_type_display().lower(), row.effective_from.isoformat()
        return f"{row.flavor.name} on {row.cluster.name}, {kind}, from {day}: {rate_text(row.rate)} an accelerator-hour"
    return f"{row.name}, {row.amount:,.2f} a month from {row.starts:%B %Y}"


def _form(kind: str, organization: Organization, data: Any = None, row: Any = None) -> PriceForm | OverheadForm:
    if kind == "price":
        return PriceForm(organization, data, initial=PriceForm.initial_of(row) if row else None)
    return OverheadForm(data, initial=OverheadForm.initial_of(row) if row else None)


def _add(request: AuthenticatedHttpRequest, kind: str) -> HttpResponse:
    organization, organizations = _book_organization(request)
    form = _form(kind, organization, request.POST)
    form.is_valid()  # free text: billing/actions/prices.py judges it
    try:
        row = SETTERS[kind](request.user, organization, form.values(), None, http=request)
    except ValidationError as exc:
        apply_errors(form, exc)
        context = _book_context(request, organization, organizations, **{f"{kind}_form": form})
        return render(request, "billing/prices.html", context, status=HTTPStatus.BAD_REQUEST)
    return _back_to_book(request, organization, f"{kind}-{row.pk}", f"{NOUNS[kind]} added: {described(row)}.")


def _changeable(request: AuthenticatedHttpRequest, kind: str, pk: int) -> Any:
    """A row of the book the user may change; another's (or another organization's) is a 404."""
    rows = policy.permitted(request.user, "price.set", MODELS[kind].objects.all())
    return get_object_or_404(rows.select_related("organization"), pk=pk)


@require_http_methods(["GET", "POST"])
def edit(request: AuthenticatedHttpRequest, kind: str, pk: int) -> HttpResponse:
    """A row of the book (``kind``: price or overhead): its form (GET), or the row changed, every field given
    again (POST)."""
    row = _changeable(request, kind, pk)
    organization, status = row.organization, 200
    if request.method == "GET":
        form = _form(kind, organization, row=row)
    else:
        form = _form(kind, organization, request.POST)
        form.is_valid()
        try:
            row = SETTERS[kind](request.user, organization, form.values(), row, http=request)
        except ValidationError as exc:
            apply_errors(form, exc)
            row.refresh_from_db()
            status = HTTPStatus.BAD_REQUEST
        else:
            return _back_to_book(request, organization, f"{kind}-{row.pk}", f"{NOUNS[kind]} changed: {described(row)}.")
    context = {"row": row, "form": form, "kind": kind, "hours_per_month": prices.HOURS_PER_MONTH}
    return render(request, "billing/prices_edit.html", context, status=status)


@require_http_methods(["GET", "POST"])
def delete(request: AuthenticatedHttpRequest, kind: str, pk: int) -> HttpResponse:
    """Asks to confirm (GET), then deletes the row (POST)."""
    row = _changeable(request, kind, pk)
    organization, what = row.organization, described(row)
    if request.method == "GET":
        context = {"row": row, "kind": kind, "what": what, "edit": reverse(f"{kind}-edit", args=[pk])}
        return render(request, "billing/prices_delete.html", context)
    DELETERS[kind](request.user, row, http=request)
    return _back_to_book(request, organization, f"{kind}s", f"{NOUNS[kind]} deleted: {what}.")


@require_http_methods(["GET", "POST"])
def price_book(request: AuthenticatedHttpRequest) -> HttpResponse:
    """The book and the shared costs (GET), or a row added to the book (POST: the row's fields)."""
    if request.method == "POST":
        return _add(request, "price")
    organization, organizations = _book_organization(request)
    return render(request, "billing/prices.html", _book_context(request, organization, organizations))


@require_POST
def overhead_add(request: AuthenticatedHttpRequest) -> HttpResponse:
    return _add(request, "overhead")
