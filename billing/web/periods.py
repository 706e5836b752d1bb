"""Closed months, under ``/billing/periods/``: finance and admins see the last twelve months open or closed, close
an ended month (its figures frozen, its statements issued and numbered) and reopen the latest closed one with a
reason. Thin: ``billing/actions/periods.py`` decides and audits; a refusal is shown beside the month (400)."""

from __future__ import annotations

from http import HTTPStatus
from typing import Any

from django.contrib import messages
from django.core.exceptions import ValidationError
from django.http import HttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.views.decorators.http import require_http_methods

from billing import params, reports
from billing.actions import periods
from common.types import AuthenticatedHttpRequest
from tenancy import policy
from tenancy.models import Organization


def _context(request: AuthenticatedHttpRequest, organization: Organization, **extra: Any) -> dict[str, Any]:
    rows = periods.periods(organization, request.user)
    latest = max((row["month"] for row in rows if row["closed"]), default=None)
    for row in rows:
        row["label"] = reports.month_label(row["month"])
        row["costs"] = f"{reverse('costs')}?month={row['label']}"
        row["reopenable"] = row["month"] == latest
        row["documents"] = _documents(organization, row)
    return {
        "organization": organization,
        "rows": rows,
        "may_close": policy.can(request.user, "period.close", organization),
        **extra,
    }


def _documents(organization: Organization, row: dict[str, Any]) -> list[dict[str, Any]]:
    """A closed month's statements, one per number, each with its files (CSV, XLSX) to download."""
    query = f"?organization={organization.slug}&month={row['label']}"
    documents: dict[str, dict[str, Any]] = {}
    for statement in row["statements"]:
        document = documents.setdefault(
            statement.number,
            {"number": statement.number, "of": statement.team.name if statement.team else "Fleet summary", "files": []},
        )
        if statement.team:
            url = reverse("api:billing-statement", kwargs={"team": statement.team.slug, "ext": statement.format})
        else:
            url = reverse("api:billing-fleet", kwargs={"ext": statement.format})
        document["files"].append({"format": statement.get_format_display(), "url": f"{url}{query}"})
    return list(documents.values())


@require_http_methods(["GET", "POST"])
def period_list(request: AuthenticatedHttpRequest) -> HttpResponse:
    """The months (GET), or one closed or reopened (POST: ``action`` close or reopen, ``month``, ``reason``)."""
    organization = params.organization(request.user, request.GET.get("organization"))
    policy.require(request.user, "finance.read", organization, "Closed months are for finance and admins.")
    if request.method == "GET":
        return render(request, "billing/periods.html", _context(request, organization))
    action, month = request.POST.get("action"), request.POST.get("month")
    try:
        if action == "reopen":
            periods.reopen(request.user, organization, month, request.POST.get("reason"), http=request)
            done = f"{month} reopened: its statements are superseded until it is closed again."
        elif action == "close":
            period = periods.close(request.user, organization, month, http=request)
            done = f"{month} closed: its figures are frozen and its statements issued (revision {period.revision})."
        else:
            raise ValidationError({"action": "Choose close or reopen."})
    except ValidationError as exc:
        errors = {field: " ".join(texts) for field, texts in exc.message_dict.items()}
        context = _context(request, organization, errors=errors, failed=month, reason=request.POST.get("reason", ""))
        return render(request, "billing/periods.html", context, status=HTTPStatus.BAD_REQUEST)
    messages.success(request, done)
    return redirect(f"{reverse('billing-periods')}?organization={organization.slug}")
