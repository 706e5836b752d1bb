"""What the quota and budget pages share: the team lookup, rendering with headers, errors and amounts as shown.

The budgets and member limits sit on the quota pages (``quotas.py`` lays the page out, ``budgets.py`` adds its
sections); both build on these, so neither imports the other's private helpers.
"""

from __future__ import annotations

from typing import Any

from django.core.exceptions import ValidationError
from django.http import HttpResponse
from django.shortcuts import get_object_or_404, render

from common.types import AuthenticatedHttpRequest
from governance.templatetags.quota_tags import amount
from tenancy.models import Team
from tenancy.scoping import Action

#: Tells the page's other parts to refresh after a change.
CHANGED = {"HX-Trigger": "quotas-changed"}


def team(request: AuthenticatedHttpRequest, pk: int) -> Team:
    team: Team = get_object_or_404(
        Team.objects.for_user(request.user, Action.VIEW).select_related("organization"), pk=pk
    )
    return team


def render_page(
    request: AuthenticatedHttpRequest,
    template: str,
    context: dict[str, Any],
    status: int = 200,
    headers: dict[str, str] | None = None,
) -> HttpResponse:
    response = render(request, template, context, status=status)
    for name, value in (headers or {}).items():
        response[name] = value
    return response


def errors_of(exc: ValidationError) -> dict[str, list[str]]:
    return exc.message_dict if hasattr(exc, "error_dict") else {"__all__": exc.messages}


def plain(value: Any) -> str:
    """A limit as typed into a form: ``16`` rather than ``16.000``, empty for none."""
    return amount(value)
