"""Capacity requests on the quota pages (docs/scheduling.md §Bookings): the team's page lists its requests and,
for its leads, a form to ask and a button to withdraw; the organization's page lists every team's requests
waiting for a decision, with approve and refuse for its admins. Thin: the actions decide
(``governance.actions.capacity``); a form sent with a mistake comes back on a page of its own, each mistake
beside its field (400), nothing written."""

from __future__ import annotations

from datetime import UTC
from http import HTTPStatus
from typing import Any

from django.contrib import messages
from django.core.exceptions import ValidationError
from django.http import HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.http import require_POST

from common.types import AuthenticatedHttpRequest
from common.web.forms import apply_errors
from governance.actions import capacity
from governance.models import CapacityRequest
from governance.web import pages
from governance.web.forms import CapacityDecisionForm, CapacityRequestForm
from tenancy import policy
from tenancy.models import Organization, Team
from tenancy.scoping import Action

#: How many of a team's requests its page lists (the API has them all).
SHOWN = 20


def _requests(request: AuthenticatedHttpRequest) -> Any:
    return (
        CapacityRequest.objects.for_user(request.user, Action.VIEW)
        .select_related("team", "flavor", "cluster")
        .prefetch_related("nodes")
    )


def team_context(request: AuthenticatedHttpRequest, team: Team) -> dict[str, Any]:
    """The team page's section: its latest requests, and the form to ask for its leads."""
    asks = policy.can(request.user, "capacity.request", team)
    return {
        "capacity_requests": list(_requests(request).filter(team=team)[:SHOWN]),
        "capacity_form": CapacityRequestForm(team.organization) if asks else None,
        "capacity_asks": asks,
    }


def org_context(request: AuthenticatedHttpRequest, organization: Organization) -> dict[str, Any]:
    """The organization page's section: every team's requests waiting for a decision, oldest first."""
    waiting = _requests(request).filter(team__organization=organization, state=CapacityRequest.State.PENDING)
    return {
        "capacity_pending": list(waiting.order_by("created_at", "pk")),
        "capacity_decides": policy.can(request.user, "capacity.decide", organization),
    }


def _form_page(
    request: AuthenticatedHttpRequest,
    team: Team,
    form: Any,
    action: str,
    what: str,
    asked: CapacityRequest | None = None,
) -> HttpResponse:
    context = {"team": team, "form": form, "action": action, "what": what, "asked": asked}
    return render(request, "governance/capacity/form.html", context, status=HTTPStatus.BAD_REQUEST)


@require_POST
def ask(request: AuthenticatedHttpRequest, pk: int) -> HttpResponse:
    team = pages.team(request, pk)
    policy.require(request.user, "capacity.request", team)
    form = CapacityRequestForm(team.organization, request.POST)
    if form.is_valid():
        data = form.cleaned_data
        utc = {k: data[k].replace(tzinfo=UTC) if data[k] else None for k in ("starts_at", "ends_at")}
        try:
            made = capacity.ask(
                request.user,
                team,
                kind=data["kind"],
                flavor=data["flavor"],
                accelerators=data["accelerators"],
                reason=data["reason"],
                http=request,
                **utc,
            )
        except ValidationError as exc:
            apply_errors(form, exc)
        else:
            messages.success(request, f"Asked: request {made.pk} waits for an organization admin's decision.")
            return redirect("team-quotas", pk=team.pk)
    return _form_page(request, team, form, request.path, "Ask for capacity")


@require_POST
def withdraw(request: AuthenticatedHttpRequest, pk: int, request_id: int) -> HttpResponse:
    team = pages.team(request, pk)
    found = get_object_or_404(_requests(request).filter(team=team), pk=request_id)
    policy.require(request.user, "capacity.request", team)
    form = CapacityDecisionForm(request.POST)
    if form.is_valid():
        try:
            capacity.withdraw(request.user, found, reason=form.cleaned_data["reason"], http=request)
        except ValidationError as exc:
            apply_errors(form, exc)
        else:
            messages.success(request, f"Request {found.pk} withdrawn.")
            return redirect("team-quotas", pk=team.pk)
    return _form_page(request, team, form, request.path, f"Withdraw request {found.pk}", found)


@require_POST
def decide(request: AuthenticatedHttpRequest, request_id: int) -> HttpResponse:
    found = get_object_or_404(_requests(request), pk=request_id)
    policy.require(request.user, "capacity.decide", found.team.organization)
    approve = request.POST.get("decision") == "approve"
    books = approve and found.kind == CapacityRequest.Kind.RESERVATION
    form = CapacityDecisionForm(request.POST, books=books)
    if form.is_valid():
        data = form.cleaned_data
        try:
            done = capacity.decide(
                request.user, found, approve=approve, reason=data["reason"], cluster=data.get("cluster"), http=request
            )
        except ValidationError as exc:
            apply_errors(form, exc)
        else:
            nodes = sorted(n.name for n in done.nodes.all())
            booked = f": {len(nodes)} nodes of {done.cluster} booked ({', '.join(nodes)})" if nodes else ""
            messages.success(request, f"Request {done.pk} {done.get_state_display()}{booked}.")
            return redirect("org-quotas")
    what = f"{'Approve' if approve else 'Refuse'} request {found.pk}"
    return _form_page(request, found.team, form, request.path, what, found)
