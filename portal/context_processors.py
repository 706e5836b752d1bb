from __future__ import annotations

from typing import Any

from django.http import HttpRequest

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
    roles = request_roles(request)
    return {"user_roles": sorted(roles), "is_org_admin": Role.ADMIN in roles}
