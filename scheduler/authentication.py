"""Job tokens (``Authorization: Bearer qmj_…``) on the two endpoints they are for: reporting a checkpoint, and
reporting the exit code.

``JobTokenAuthentication`` is not among the API's default authentication classes: only the checkpoints and
report endpoints list it, so everywhere else a job token is an unknown API token (401). Here it authenticates no
user: ``request.user`` stays anonymous and ``request.auth`` is the ``JobToken`` (which job, which attempt),
and ``JobTokenOrSignedIn`` lets either that or a signed-in user through to the view, which decides the rest.
"""

from __future__ import annotations

from typing import Any

from django.contrib.auth.models import AnonymousUser
from drf_spectacular.extensions import OpenApiAuthenticationExtension
from rest_framework import authentication, exceptions
from rest_framework.permissions import BasePermission
from rest_framework.request import Request

from scheduler.actions.checkpoints import TOKEN_PREFIX, JobToken, parse_token


class JobTokenAuthentication(authentication.BaseAuthentication):
    keyword = "Bearer"

    def authenticate(self, request: Request) -> tuple[Any, JobToken] | None:
        header = authentication.get_authorization_header(request).split()
        if len(header) != 2 or header[0].lower() != self.keyword.lower().encode():
            return None  # another scheme, or a malformed header: the API token's class answers it
        if not header[1].startswith(TOKEN_PREFIX.encode()):
            return None  # a personal or service account token
        token = parse_token(header[1].decode(errors="replace"))
        if token is None:
            raise exceptions.AuthenticationFailed("Invalid job token.")
        return AnonymousUser(), token

    def authenticate_header(self, request: Request) -> str:
        return f'{self.keyword} realm="api"'


class JobTokenOrSignedIn(BasePermission):
    """A verified job token, or a signed-in user (what the token allows is the view's to say)."""

    def has_permission(self, request: Request, view: Any) -> bool:
        return isinstance(request.auth, JobToken) or bool(request.user and request.user.is_authenticated)


class JobTokenScheme(OpenApiAuthenticationExtension):  # type: ignore[no-untyped-call]
    target_class = "scheduler.authentication.JobTokenAuthentication"
    name = "jobToken"

    def get_security_definition(self, auto_schema: Any) -> dict[str, str]:
        return {
            "type": "http",
            "scheme": "bearer",
            "description": "A job's own token (qmj_…, QM_JOB_TOKEN in its environment): reports its checkpoints "
            "and its exit code.",
        }
