"""The capacity plan, ``/billing/capacity/plan/``: orders with their lead times, retirements and reserved cloud
commitments, which the forecasts' capacity ahead follows. Those who may read forecasts (finance, procurement, admins)
see it, add and remove rows. Thin: ``billing/actions/capacity_plan.py`` judges and audits; a refusal is shown by its
field (400)."""

from __future__ import annotations

from http import HTTPStatus
from typing import Any

from django.contrib import messages
from django.core.exceptions import PermissionDenied, ValidationError
from django.http import HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.views.decorators.http import require_http_methods, require_POST

from billing import params
from billing.actions import capacity_plan
from billing.models import CapacityChange
from clusters.models import AcceleratorType
from common.types import AuthenticatedHttpRequest
from tenancy import policy
from tenancy.models import Organization
from tenancy.scoping import Action

FORM_FIELDS = capacity_plan.FIELDS


def _context(request: AuthenticatedHttpRequest, organization: Organization, **extra: Any) -> dict[str, Any]:
    return {
        "organization": organization,
        "rows": capacity_plan.changes(request.user, organization),
        "kinds": CapacityChange.Kind.choices,
        "flavors": AcceleratorType.objects.filter(organization=organization).order_by("name"),
        "may_change": policy.can(request.user, "capacity.plan", organization),
        "values": {},
        "errors": {},
        **extra,
    }


@require_http_methods(["GET", "POST"])
def plan(request: AuthenticatedHttpRequest) -> HttpResponse:
    """The plan (GET), or a row added to it (POST: the row's fields)."""
    organization = params.organization(request.user, request.GET.get("organization"))
    if not policy.can(request.user, "forecast.read", organization):
        raise PermissionDenied("The capacity plan is for finance, procurement and organization admins.")
    if request.method == "POST":
        values = {name: request.POST.get(name, "") for name in FORM_FIELDS}
        try:
            row = capacity_plan.set_change(request.user, organization, values, http=request)
        except ValidationError as exc:
            errors = {field: " ".join(texts) for field, texts in exc.message_dict.items()}
            context = _context(request, organization, values=values, errors=errors)
            return render(request, "billing/capacity_plan.html", context, status=HTTPStatus.BAD_REQUEST)
        messages.success(request, f"Added to the plan: {row}. The forecasts' capacity follows it.")
        return redirect(f"{reverse('capacity-plan')}?organization={organization.slug}")
    return render(request, "billing/capacity_plan.html", _context(request, organization))


@require_POST
def remove(request: AuthenticatedHttpRequest, pk: int) -> HttpResponse:
    row = get_object_or_404(CapacityChange.objects.for_user(request.user, Action.VIEW), pk=pk)
    what = str(row)
    capacity_plan.delete_change(request.user, row, http=request)
    messages.success(request, f"Removed from the plan: {what}.")
    return redirect(f"{reverse('capacity-plan')}?organization={row.organization.slug}")
