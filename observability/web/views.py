"""The SLO page, for organization admins (``/metrics`` is ``observability/scrape.py``)."""

from __future__ import annotations

from django.core.exceptions import PermissionDenied
from django.http import HttpResponse
from django.shortcuts import render
from django.utils import timezone

from common.types import AuthenticatedHttpRequest
from observability import slo
from tenancy import policy
from tenancy.models import Organization


def slo_page(request: AuthenticatedHttpRequest) -> HttpResponse:
    organizations = policy.permitted(request.user, "slo.view", Organization.objects.order_by("name"))
    if not organizations.exists():
        raise PermissionDenied(policy.PERMISSIONS["slo.view"].denied)
    now = timezone.now()
    context = {
        "now": now,
        "windows": [name for name, _ in slo.PAGE_WINDOWS],
        "organizations": [(org, slo.standings(org, now)) for org in organizations],
    }
    return render(request, "observability/slo.html", context)
