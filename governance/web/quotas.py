"""Quota pages: a team's quotas beside their usage (a table and a chart), its running and waiting jobs and
the history of its quota changes, edited in place by its lead or an admin; the organization's quotas and
cohort tree for its admins and finance. The budgets and member limits on these pages are ``budgets.py``'s.

Thin: teams, queues, cohorts and history are looked up through ``for_user`` (another team's page is a 404);
the numbers come from ``governance.usage``; every change goes through ``governance.actions.quotas``, which decides
who may change what (403) and what a valid change is (400 with the message by its field, nothing written).
The pages only ask it which controls to show.

In-place edits are htmx requests: the row comes back as a small form (GET ``?edit=1``), is posted, and comes
back as the row again with ``HX-Trigger: quotas-changed``, on which the chart and the history reload.

Size: the quota pages of a team and of the organization (rows, cells, charts, history, cohort rows); the
organization's cohort pages would split out first.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable
from decimal import Decimal
from http import HTTPStatus
from typing import Any
from urllib.parse import urlsplit

from django.contrib import messages
from django.core.exceptions import PermissionDenied, ValidationError
from django.core.paginator import Paginator
from django.http import Http404, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.utils.text import slugify
from django.views.decorators.http import require_GET, require_http_methods, require_POST

from common import params
from common.types import AuthenticatedHttpRequest
from common.web.forms import apply_errors
from governance import placed, usage
from governance.actions import fairshare, quotas
from governance.fairshare import words
from governance.models import Cohort, FairShare, Queue, Quota, QuotaChange
from governance.web import budgets as budget_views
from governance.web import capacity as capacity_views
from governance.web import pages
from governance.web.forms import TEAM_QUEUE, CohortForm, CohortQuotaForm, FairShareForm, TeamQuotaForm
from tenancy import policy
from tenancy.models import Organization, Team
from tenancy.scoping import Action

HISTORY_PER_PAGE = 20
LIMIT_LABELS = {"nominal": "nominal", "borrowing_limit": "may borrow", "lending_limit": "may lend"}
#: Beside a value its viewer may not change in a form (``quotas.quota_fields``, ``policy_fields``): who may. A
#: team's lead changes the lending limit, project sub-quotas and the flavor order; the rest is an admin's.
LOCKED_NOTE = "Set by an organization admin"
FIELD_LABELS = {
    **LIMIT_LABELS,
    "flavor_order": "flavor order",
    "within_queue": "preemption within the queue",
    "reclaim": "reclaim",
    "weight": "fair-sharing weight",
    "cohort": "cohort",
    "queue": "queue",
    "name": "name",
    "parent": "inside",
    "accelerators": "accelerators at once",
    "accelerator_hours": "accelerator-hours a month",
    "amount": "money a month",
    "hard": "hard",
    "recipients": "also alerted",
    "webhook_url": "webhook",
}
#: Fields whose empty value means no limit.
UNLIMITED = {*LIMIT_LABELS, "accelerators", "accelerator_hours", "amount"}
RESOURCE_LABELS = dict(Quota.Resource.choices)


# --- lookups ----------------------------------------------------------------------------------------------


def _queue(request: AuthenticatedHttpRequest, team: Team, pk: int) -> Queue:
    scoped = Queue.objects.for_user(request.user, Action.VIEW).filter(team=team)
    queue: Queue = get_object_or_404(scoped.select_related("team__organization", "project", "cohort"), pk=pk)
    return queue


def _cohort(request: AuthenticatedHttpRequest, pk: int) -> Cohort:
    cohort: Cohort = get_object_or_404(
        Cohort.objects.for_user(request.user, Action.VIEW).select_related("organization", "parent"), pk=pk
    )
    return cohort


# --- what the tables and the chart show ---------------------------------------------------------------------


def _chart(rows: list[usage.Row]) -> dict[str, Any]:
    """Grouped bars per queue and accelerator type: used within nominal, borrowed, nominal, pending demand."""
    bars = [row for row in rows if row.resource == Quota.Resource.ACCELERATORS]
    x = [f"{row.queue} · {row.flavor}" for row in bars]

    def trace(name: str, values: list[Decimal | None], color: str) -> dict[str, Any]:
        numbers = [float(v) if v is not None else 0.0 for v in values]
        return {
            "type": "bar",
            "name": name,
            "x": x,
            "y": numbers,
            "marker": {"color": color},
            "hovertemplate": "%{y:.3~f}<extra>" + name + "</extra>",
        }

    return {
        "data": [
            trace("Used within nominal", [row.within for row in bars], "blue"),
            trace("Borrowed", [row.borrowed for row in bars], "orange"),
            trace("Nominal", [row.own for row in bars], "grey"),
            trace("Pending demand", [row.pending for row in bars], "iris"),
        ],
        "layout": {
            "barmode": "group",
            "height": 360,
            "margin": {"l": 50, "r": 10, "t": 40, "b": 10},
            "xaxis": {"automargin": True},
            "yaxis": {"title": {"text": "accelerators"}, "rangemode": "tozero", "automargin": True},
        },
    }


def _chart_context(team: Team, rows: list[usage.Row]) -> dict[str, Any]:
    return {
        "chart": _chart(rows),
        "chart_id": "team-chart",
        "figure_id": "team-chart-figure",
        "refresh": reverse("team-quota-chart", args=[team.pk]),
    }


def _row_context(row: usage.Row, fields: frozenset[str], team: Team) -> dict[str, Any]:
    """A quota row and the cells its viewer may change. A lead whose only cell is the lending limit has
    nothing to lend on a row without a nominal quota (``set_quota`` would remove it): no edit there."""
    if row.nominal is None and "nominal" not in fields:
        fields = frozenset()
    return {
        "row": row,
        "fields": fields,
        "team": team,
        "resource_label": RESOURCE_LABELS.get(row.resource, row.resource),
        "url": reverse("team-quota-cell", kwargs={"pk": team.pk, "queue": row.queue_id}),
        "key": f"q{row.queue_id}",
    }


def _form(context: dict[str, Any], row: Any, posted: Any, errors: dict[str, list[str]] | None) -> dict[str, Any]:
    """The edit form of a quota row (a queue's or a cohort's): one cell per limit, an input where its viewer
    may change it, with what was posted and the messages by their fields; other messages beside the reason."""
    errors = errors or {}
    posted = posted if posted is not None else {}
    fields = context["fields"]
    cells = []
    for name in quotas.LIMITS:
        value = posted[name] if name in posted else pages.plain(getattr(row, name))
        cells.append(
            {
                "name": name,
                "label": LIMIT_LABELS[name].capitalize(),
                "editable": name in fields,
                "value": value,
                "errors": errors.get(name, []),
                "shown": getattr(row, name),
            }
        )
    shown = {name for name in quotas.LIMITS if name in fields} | {"reason"}
    context.update(
        cells=cells,
        reason=posted.get("reason", ""),
        reason_errors=errors.get("reason", []),
        other_errors=[m for k, ms in errors.items() if k not in shown for m in ms],
        form_id=f"quota-{context['key']}-{slugify(row.flavor)}-{row.resource}",
        locked_note=LOCKED_NOTE,
    )
    return context


def _history(request: AuthenticatedHttpRequest, changes: Any) -> dict[str, Any]:
    page = Paginator(changes.select_related("actor"), HISTORY_PER_PAGE).get_page(request.GET.get("page"))
    entries = []
    for change in page:
        keys = sorted(set(change.before) | set(change.after))
        diffs = []
        for k in keys:
            old, new = change.before.get(k), change.after.get(k)
            before, after = _shown(k, old), _shown(k, new)
            if before == after:
                if k != "webhook_url" or not (old and new) or old == new:
                    continue  # a budget records all its fields: what did not change is left out
                after += " (another URL)"  # on the same host
            diffs.append((FIELD_LABELS.get(k, k), before, after))
        entries.append((change, diffs))
    return {"page": page, "entries": entries}


def _shown(field: str, value: Any) -> str:
    if field == "webhook_url":  # often a secret (a chat's incoming webhook): its host only
        return (urlsplit(value).hostname or "set") if value else "none"
    if value is None:
        return "none" if field == "nominal" else ("no limit" if field in UNLIMITED else "—")
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, list):
        return ", ".join(str(v) for v in value) or ("any, cheapest first" if field == "flavor_order" else "none")
    return str(value)


def _team_history(request: AuthenticatedHttpRequest, team: Team) -> dict[str, Any]:
    changes = QuotaChange.objects.for_user(request.user, Action.VIEW).filter(team=team)
    return {
        **_history(request, changes),
        "history_url": reverse("team-quota-history", args=[team.pk]),
        "page_url": reverse("team-quotas", args=[team.pk]),
    }


def _policy_context(
    request: AuthenticatedHttpRequest,
    queue: Queue,
    team: Team,
    *,
    posted: Any = None,
    errors: dict[str, list[str]] | None = None,
) -> dict[str, Any]:
    """A queue's policy row: its values (as posted, on a refused edit), the fields its viewer may change and
    the messages by them."""
    fields = quotas.policy_fields(request.user, queue)
    cohorts = Cohort.objects.for_user(request.user, Action.VIEW).filter(organization=team.organization)
    values = {
        "flavor_order": ", ".join(queue.flavor_order),
        "within_queue": queue.within_queue,
        "reclaim": queue.reclaim,
        "weight": f"{queue.weight:g}",
        "cohort": str(queue.cohort_id or ""),
        "reason": "",
    }
    if posted is not None:
        values.update({k: posted[k] for k in values if k in posted})
    errors = errors or {}
    shown = set(fields) | {"reason"}
    return {
        "queue": queue,
        "fields": fields,
        "team": team,
        "url": reverse("team-queue-policy", kwargs={"pk": team.pk, "queue": queue.pk}),
        "within_choices": Queue.WithinQueue.choices,
        "reclaim_choices": Queue.Reclaim.choices,
        "cohorts": list(cohorts.order_by("name")) if "cohort" in fields else [],
        "values": values,
        "errors": errors,
        "other_errors": [m for k, ms in errors.items() if k not in shown for m in ms],
        "locked_note": LOCKED_NOTE,
    }


# --- the team's page ----------------------------------------------------------------------------------------


def _render_team(request: AuthenticatedHttpRequest, team: Team, status: int = 200, **extra: Any) -> HttpResponse:

    queues = list(
        Queue.objects.for_user(request.user, Action.VIEW)
        .filter(team=team)
        .select_related("project", "cohort", "team__organization")
        .order_by("project__name")
    )
    queues.sort(key=lambda q: (q.project_id is not None, q.name))
    usage = placed.organization_usage(team.organization)
    rows = usage.of_team(team.pk)
    fields = {q.pk: quotas.quota_fields(request.user, q) for q in queues}
    held = policy.granted(request.user, team, "quota.set", "quota.lend")
    admin, governs = "quota.set" in held, "quota.lend" in held
    context = {
        "team": team,
        "rows": [_row_context(row, fields.get(row.queue_id, frozenset()), team) for row in rows],
        **_chart_context(team, rows),
        "policies": [_policy_context(request, q, team) for q in queues],
        "standings": [usage.standings[q.pk] for q in queues if q.pk in usage.standings],
        "states": [placed.queue_jobs(request, q.pk) for q in queues],
        "quota_form": extra.get("quota_form") or (TeamQuotaForm(team, admin=admin) if governs else None),
        "governs": governs,
        **budget_views.budgets_context(request, team, target=request.GET.get("target")),
        **budget_views.members_context(request, team),
        **capacity_views.team_context(request, team),
        **_team_history(request, team),
    }
    return render(request, "governance/quotas/team.html", context, status=status)


@require_GET
def team_quotas(request: AuthenticatedHttpRequest, pk: int) -> HttpResponse:
    return _render_team(request, pages.team(request, pk))


@require_GET
def team_chart(request: AuthenticatedHttpRequest, pk: int) -> HttpResponse:
    team = pages.team(request, pk)
    return render(request, "governance/quotas/_chart.html", _chart_context(team, placed.team_usage(team)))


@require_GET
def team_history(request: AuthenticatedHttpRequest, pk: int) -> HttpResponse:
    team = pages.team(request, pk)
    context = {"team": team, **_team_history(request, team)}
    return render(request, "governance/quotas/_history.html", context)


@require_http_methods(["GET", "POST"])
def quota_cell(request: AuthenticatedHttpRequest, pk: int, queue: int) -> HttpResponse:
    """One quota row of a team's queue: read (GET), as a form (GET ``?edit=1``), or changed (POST: the flavor,
    the resource, the limits the form offers and a reason; limits not posted keep their values)."""
    team = pages.team(request, pk)
    owner = _queue(request, team, queue)

    def cell(flavor: str, resource: str, **options: Any) -> HttpResponse:
        return _cell(request, team, owner, flavor, resource, **options)

    return _quota_row(request, owner, cell)


def _quota_row(
    request: AuthenticatedHttpRequest, owner: Queue | Cohort, cell: Callable[..., HttpResponse]
) -> HttpResponse:
    """One quota row of a queue or a cohort: read (GET), as a form (GET ``?edit=1``), or changed (POST: the
    flavor, the resource, the limits the form offers and a reason; limits not posted keep their values).
    ``cell(flavor, resource, **options)`` renders the row."""
    data = request.POST if request.method == "POST" else request.GET
    flavor, resource = data.get("flavor", ""), data.get("resource", Quota.Resource.ACCELERATORS)
    if request.method == "GET":
        return cell(flavor, resource, edit=bool(request.GET.get("edit")))
    limits = {k: data.get(k, quotas.KEEP) for k in quotas.LIMITS}
    try:
        change = quotas.set_quota(
            request.user, owner, flavor=flavor, resource=resource, reason=data.get("reason", ""), http=request, **limits
        )
    except ValidationError as exc:
        return cell(
            flavor, resource, edit=True, errors=pages.errors_of(exc), posted=data, status=HTTPStatus.BAD_REQUEST
        )
    except PermissionDenied as exc:
        return cell(
            flavor, resource, edit=True, errors={"__all__": [str(exc)]}, posted=data, status=HTTPStatus.FORBIDDEN
        )
    return cell(flavor, resource, headers=pages.CHANGED if change else None)


def _cell(
    request: AuthenticatedHttpRequest,
    team: Team,
    queue: Queue,
    flavor: str,
    resource: str,
    *,
    edit: bool = False,
    errors: dict[str, list[str]] | None = None,
    posted: Any = None,
    status: int = 200,
    headers: dict[str, str] | None = None,
) -> HttpResponse:
    rows = placed.organization_usage(team.organization).of_queue(queue.pk)
    row = next((r for r in rows if r.flavor == flavor and r.resource == resource), None)
    if row is None:  # a quota removed with nothing left to show, or a flavor that is not there
        row = usage.Row(
            queue.pk,
            queue.name,
            team.pk,
            queue.project_id,
            flavor,
            resource,
            None,
            None,
            None,
            None,
            Decimal(0),
            Decimal(0),
            Decimal(0),
            Decimal(0),
            False,
        )
        if not edit:
            return HttpResponse("", headers=headers)
    context = _row_context(row, quotas.quota_fields(request.user, queue), team)
    if edit and (context["fields"] or errors):
        return render(request, "governance/quotas/_row_form.html", _form(context, row, posted, errors), status=status)
    return pages.render_page(request, "governance/quotas/_row.html", context, status=status, headers=headers)


@require_http_methods(["GET", "POST"])
def queue_policy(request: AuthenticatedHttpRequest, pk: int, queue: int) -> HttpResponse:
    """A queue's policy row: read, as a form, or changed through ``quotas.set_policy`` (only the fields
    posted; the flavor order as comma-separated names, the cohort by id, empty for none)."""
    team = pages.team(request, pk)
    owner = _queue(request, team, queue)
    if request.method == "GET":
        context = _policy_context(request, owner, team)
        editing = request.GET.get("edit") and context["fields"]
        return render(request, f"governance/quotas/_policy{'_form' if editing else ''}.html", context)
    fields: dict[str, Any] = {}
    for name in quotas.POLICY:
        if name not in request.POST:
            continue
        raw = request.POST[name].strip()
        if name == "flavor_order":
            fields[name] = [part.strip() for part in raw.split(",") if part.strip()]
        elif name == "cohort":
            cohort_pk = params.as_id(raw)
            cohorts = Cohort.objects.for_user(request.user, Action.VIEW)
            found = cohorts.filter(pk=cohort_pk).first() if cohort_pk is not None else None
            fields[name] = None if raw == "" else (found or raw)  # quotas.set_policy names a bad one
        else:
            fields[name] = raw
    try:
        change = quotas.set_policy(request.user, owner, reason=request.POST.get("reason", ""), http=request, **fields)
    except (ValidationError, PermissionDenied) as exc:
        refused = isinstance(exc, PermissionDenied)
        errors = pages.errors_of(exc) if isinstance(exc, ValidationError) else {"__all__": [str(exc)]}
        context = _policy_context(request, owner, team, errors=errors, posted=request.POST)
        status = HTTPStatus.FORBIDDEN if refused else HTTPStatus.BAD_REQUEST
        return render(request, "governance/quotas/_policy_form.html", context, status=status)
    owner.refresh_from_db()
    context = _policy_context(request, owner, team)
    return pages.render_page(
        request, "governance/quotas/_policy.html", context, headers=pages.CHANGED if change else None
    )


@require_POST
def team_quota_new(request: AuthenticatedHttpRequest, pk: int) -> HttpResponse:
    """The "give a project a sub-quota, or set a quota" form: a project's queue is made on first use."""
    team = pages.team(request, pk)
    policy.require(request.user, "quota.lend", Queue.objects.get(team=team, project=None))
    form = TeamQuotaForm(team, request.POST, admin=policy.can(request.user, "quota.set", team))
    if form.is_valid():
        data = form.cleaned_data
        values = {k: data[k] for k in ("flavor", "resource", "nominal", "borrowing_limit", "lending_limit", "reason")}
        try:
            if data["target"] == TEAM_QUEUE:
                queue = Queue.objects.get(team=team, project=None)
                quotas.set_quota(request.user, queue, http=request, **values)
            else:
                queue, _ = quotas.give_project_quota(
                    request.user, form.projects[data["target"]], http=request, **values
                )
        except ValidationError as exc:
            apply_errors(form, exc)
        else:
            messages.success(request, f"Quota of {queue.name} for {data['flavor']} set.")
            return redirect("team-quotas", pk=team.pk)
    return _render_team(request, team, HTTPStatus.BAD_REQUEST, quota_form=form)


# --- the organization's page --------------------------------------------------------------------------------


def _organizations(request: AuthenticatedHttpRequest) -> list[Organization]:
    """The organizations the user holds an organization-wide role in (finance, admin); a superuser, all."""
    return list(policy.permitted(request.user, "quota.org.view", Organization.objects.order_by("name")))


def _render_org(request: AuthenticatedHttpRequest, status: int = 200, **forms: Any) -> HttpResponse:
    organizations = _organizations(request)
    if not organizations:
        raise PermissionDenied("The organization's quotas are for its admins and finance; your team's are on its page.")
    budgets_of = budget_views.org_budgets(request, organizations)
    sections = []
    for org in organizations:
        found = placed.organization_usage(org)
        admin = policy.can(request.user, "quota.set", org)
        editable = frozenset(quotas.LIMITS) if admin else frozenset()
        teams = {t.pk: t for t in Team.objects.for_user(request.user, Action.VIEW).filter(organization=org)}
        by_team: dict[int, list[dict[str, Any]]] = defaultdict(list)
        for row in found.rows:
            if row.team_id in teams:
                by_team[row.team_id].append(_row_context(row, editable, teams[row.team_id]))
        posted_for = forms.get("organization")
        setting = fairshare.setting(org)
        sections.append(
            {
                "organization": org,
                "admin": admin,
                "teams": [(team, by_team[team.pk]) for team in sorted(teams.values(), key=lambda t: t.name)],
                "cohorts": [_cohort_context(node, admin) for node in found.cohorts],
                "cohort_form": (forms.get("cohort_form") if posted_for == org.pk else None)
                or CohortForm(org, request.user),
                "cohort_quota_form": (forms.get("cohort_quota_form") if posted_for == org.pk else None)
                or CohortQuotaForm(org, request.user),
                "chart": _chart(found.rows),
                "chart_id": f"organization-{org.pk}-chart",
                "figure_id": f"organization-{org.pk}-chart-figure",
                "budgets": budgets_of[org.pk],
                "fair_share": setting,
                "half_life": words(setting.half_life),
                "fair_share_form": (forms.get("fair_share_form") if posted_for == org.pk else None)
                or _fair_share_form(setting),
                "standings": sorted(found.standings.values(), key=lambda s: s.rank),
                **capacity_views.org_context(request, org),
            }
        )
    return render(request, "governance/quotas/org.html", {"sections": sections}, status=status)


def _cohort_context(node: usage.CohortNode, admin: bool) -> dict[str, Any]:
    return {
        "node": node,
        "rows": [_cohort_row_context(row, admin) for row in node.rows],
        "children": [_cohort_context(child, admin) for child in node.children],
    }


def _cohort_row_context(row: usage.CohortRow, admin: bool) -> dict[str, Any]:
    return {
        "row": row,
        "fields": frozenset(quotas.LIMITS) if admin else frozenset(),
        "resource_label": RESOURCE_LABELS.get(row.resource, row.resource),
        "url": reverse("cohort-quota-cell", kwargs={"pk": row.cohort_id}),
        "key": f"c{row.cohort_id}",
    }


@require_GET
def org_quotas(request: AuthenticatedHttpRequest) -> HttpResponse:
    return _render_org(request)


@require_http_methods(["GET", "POST"])
def cohort_cell(request: AuthenticatedHttpRequest, pk: int) -> HttpResponse:
    """One quota row of a cohort, read, as a form or changed: as ``quota_cell`` for a team's queue."""
    cohort = _cohort(request, pk)

    def cell(flavor: str, resource: str, **options: Any) -> HttpResponse:
        return _cohort_cell(request, cohort, flavor, resource, **options)

    return _quota_row(request, cohort, cell)


def _find_cohort_row(nodes: list[usage.CohortNode], pk: int, flavor: str, resource: str) -> usage.CohortRow | None:
    for node in nodes:
        if node.pk == pk:
            return next((r for r in node.rows if r.flavor == flavor and r.resource == resource), None)
        found = _find_cohort_row(node.children, pk, flavor, resource)
        if found is not None:
            return found
    return None


def _cohort_cell(
    request: AuthenticatedHttpRequest,
    cohort: Cohort,
    flavor: str,
    resource: str,
    *,
    edit: bool = False,
    errors: dict[str, list[str]] | None = None,
    posted: Any = None,
    status: int = 200,
    headers: dict[str, str] | None = None,
) -> HttpResponse:
    found = placed.organization_usage(cohort.organization)
    row = _find_cohort_row(found.cohorts, cohort.pk, flavor, resource)
    if row is None:
        row = usage.CohortRow(
            cohort.pk,
            cohort.name,
            str(cohort.parent) if cohort.parent else None,
            flavor,
            resource,
            None,
            None,
            None,
            Decimal(0),
            Decimal(0),
            Decimal(0),
            Decimal(0),
        )
        if not edit:
            return HttpResponse("", headers=headers)
    context = _cohort_row_context(row, bool(quotas.quota_fields(request.user, cohort)))
    if edit and (context["fields"] or errors):
        form = _form(context, row, posted, errors)
        return render(request, "governance/quotas/_cohort_row_form.html", form, status=status)
    return pages.render_page(request, "governance/quotas/_cohort_row.html", context, status=status, headers=headers)


@require_POST
def cohort_new(request: AuthenticatedHttpRequest) -> HttpResponse:
    org = _posted_organization(request)
    form = CohortForm(org, request.user, request.POST)
    if form.is_valid():
        data = form.cleaned_data
        try:
            cohort = quotas.create_cohort(
                request.user,
                org,
                name=data["name"],
                parent=form.cohorts.get(data["parent"]),
                reason=data["reason"],
                http=request,
            )
        except ValidationError as exc:
            apply_errors(form, exc)
        else:
            messages.success(request, f"Cohort {cohort.name} created.")
            return redirect("org-quotas")
    return _render_org(request, HTTPStatus.BAD_REQUEST, cohort_form=form, organization=org.pk)


def _fair_share_form(current: FairShare) -> FairShareForm:
    days = (Decimal(current.half_life) / 86400).quantize(Decimal("0.0001")).normalize()
    return FairShareForm(initial={"half_life_days": days, "usage_weight": current.usage_weight})


@require_POST
def fair_share(request: AuthenticatedHttpRequest) -> HttpResponse:
    """An admin sets the half-life and the weight of recent use (``fairshare.set_fair_share``)."""
    org = _posted_organization(request)
    form = FairShareForm(request.POST)
    if form.is_valid():
        data = form.cleaned_data
        try:
            fairshare.set_fair_share(
                request.user,
                org,
                half_life=round(data["half_life_days"] * 86400),
                usage_weight=data["usage_weight"],
                reason=data["reason"],
                http=request,
            )
        except ValidationError as exc:
            apply_errors(form, exc)
        else:
            messages.success(request, "Fair share set: it counts from the next placement cycle.")
            return redirect("org-quotas")
    return _render_org(request, HTTPStatus.BAD_REQUEST, fair_share_form=form, organization=org.pk)


@require_POST
def cohort_quota_new(request: AuthenticatedHttpRequest) -> HttpResponse:
    org = _posted_organization(request)
    form = CohortQuotaForm(org, request.user, request.POST)
    if form.is_valid():
        data = form.cleaned_data
        values = {k: data[k] for k in ("flavor", "resource", "nominal", "borrowing_limit", "lending_limit", "reason")}
        cohort = form.cohorts[data["cohort"]]
        try:
            quotas.set_quota(request.user, cohort, http=request, **values)
        except ValidationError as exc:
            apply_errors(form, exc)
        else:
            messages.success(request, f"Quota of cohort {cohort.name} for {data['flavor']} set.")
            return redirect("org-quotas")
    return _render_org(request, HTTPStatus.BAD_REQUEST, cohort_quota_form=form, organization=org.pk)


def _posted_organization(request: AuthenticatedHttpRequest) -> Organization:
    """The organization a form of the organization's page is for: one the user administers (403 for finance
    and for team roles, 404 for an organization the user holds no role in)."""
    organizations = _organizations(request)
    if not organizations:
        raise PermissionDenied("Only an organization admin may shape the cohort tree.")
    org = next((o for o in organizations if str(o.pk) == request.POST.get("organization", "")), None)
    if org is None:
        raise Http404("No such organization.")
    policy.require(request.user, "cohort.set", org)
    return org
