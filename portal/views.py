"""The portal's own page: each role's home (``portal/home.py`` builds its sections)."""

from __future__ import annotations

from django.http import HttpResponse
from django.shortcuts import render
from django.views.decorators.http import require_GET

from common.types import AuthenticatedHttpRequest
from portal import home as sections
from tenancy import policy
from tenancy.models import Membership
from tenancy.policy import request_roles
from tenancy.tasks import last_heartbeat


@require_GET
def home(request: AuthenticatedHttpRequest) -> HttpResponse:
    roles = request_roles(request)
    context = {
        "memberships": Membership.objects.filter(user=request.user).select_related("organization", "team"),
        "heartbeat": last_heartbeat(),
        "sees_work": policy.anywhere(request.user, "work.read", roles),
        **sections.sections(request.user, roles),
    }
    return render(request, "portal/home.html", context)
