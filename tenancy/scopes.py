"""What a service account's token may do, by its scope: the one place scopes are enforced.

Tenancy decides *which* objects a service account reaches (it is a member of its team: a lead for the admin
scope, a researcher otherwise); this permission, in ``DEFAULT_PERMISSION_CLASSES``, decides *which requests*
its token may make:

* ``read``: safe methods (GET, HEAD, OPTIONS) only;
* ``submit``: those, plus submitting, previewing and cancelling jobs (``SUBMIT_OPERATIONS``), and calling a
  service's endpoint with any method (the data plane asks, as ``SERVE_ENDPOINT``);
* ``admin``: whatever the team's lead may do through the API — tenancy and the actions answer as for a lead.

Personal tokens and sessions carry no scope and pass untouched.
"""

from __future__ import annotations

from typing import Any

from rest_framework.exceptions import PermissionDenied
from rest_framework.permissions import SAFE_METHODS, BasePermission
from rest_framework.request import Request

from tenancy.models import ApiToken, ServiceAccount

# The API routes (view name, method) a submit-scoped token may call beyond reading.
SUBMIT_OPERATIONS = frozenset({("api:job-list", "POST"), ("api:job-preview", "POST"), ("api:job-cancel", "POST")})
#: A service's endpoint, as the data plane names it here: calling a model with a POST uses compute as a submitted
#: job does, so a submit-scoped token may; a read-scoped one only reads (GET, HEAD, OPTIONS).
SERVE_ENDPOINT = "serve-endpoint"


def allows(scope: str, view_name: str, method: str) -> bool:
    if method in SAFE_METHODS:
        return True
    if scope == ServiceAccount.Scope.SUBMIT:
        return (view_name, method) in SUBMIT_OPERATIONS or view_name == SERVE_ENDPOINT
    return scope == ServiceAccount.Scope.ADMIN


class TokenScope(BasePermission):
    def has_permission(self, request: Request, view: Any) -> bool:
        token = request.auth
        if not isinstance(token, ApiToken):
            return True
        account: ServiceAccount | None = getattr(token.user, "service_account", None)
        if account is None:
            return True
        match = request.resolver_match
        if not allows(account.scope, match.view_name if match else "", request.method or ""):
            label = ServiceAccount.Scope(account.scope).label.lower()
            raise PermissionDenied(f"This service account's token is scoped {label!r}: it may not do this.")
        return True
