from __future__ import annotations

from typing import Any

from django.http import HttpRequest

from portal import navigation as main_navigation
from tenancy.models import Membership
from tenancy.scoping import Role


def user_roles(user: Any) -> set[Role]:
    if not user.is_authenticated:
        return set()
    return {Role(role) for role in Membership.objects.filter(user=user).values_list("role", flat=True)}


def request_roles(request: HttpRequest) -> set[Role]:
    """The signed-in user's roles, computed once per request."""
    if not hasattr(request, "_qm_roles"):
        request._qm_roles = user_roles(request.user)  # type: ignore[attr-defined]
    roles: set[Role] = request._qm_roles  # type: ignore[attr-defined]
    return roles


def navigation(request: HttpRequest) -> dict[str, Any]:
    """The user's roles, and the main navigation's links for them (``portal/navigation.py``)."""
    roles = request_roles(request)
    user = request.user
    links = []
    if user.is_authenticated:
        here = getattr(request.resolver_match, "url_name", None)
        links = main_navigation.links_for(roles, user.is_superuser, here)
    return {"user_roles": sorted(roles), "is_org_admin": Role.ADMIN in roles, "nav_links": links}
