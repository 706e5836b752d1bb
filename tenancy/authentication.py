"""`Authorization: Bearer <token>` authentication against hashed API tokens (personal or a service account's;
what a service account's token may do is `tenancy.scopes`)."""

from __future__ import annotations

from typing import Any

from drf_spectacular.extensions import OpenApiAuthenticationExtension
from rest_framework import authentication, exceptions
from rest_framework.request import Request

from tenancy import actions
from tenancy.models import ApiToken, hash_token


def usable_token(raw: str) -> ApiToken | None:
    """The API token ``raw`` is, with its user and service account, if it is usable (neither expired nor revoked)
    and its user active; its last use recorded (to the minute). None otherwise. The API's authentication and
    the data plane's (``serving/dataplane/source.py``) both ask this."""
    usable = ApiToken.objects.usable().select_related("user", "user__service_account")
    token = usable.filter(key_hash=hash_token(raw)).first()
    if token is None or not token.user.is_active:
        return None
    actions.note_token_use(token)
    return token


class ApiTokenAuthentication(authentication.BaseAuthentication):
    keyword = "Bearer"

    def authenticate(self, request: Request) -> tuple[Any, ApiToken] | None:
        header = authentication.get_authorization_header(request).split()
        if not header or header[0].lower() != self.keyword.lower().encode():
            return None
        if len(header) != 2:
            raise exceptions.AuthenticationFailed("Malformed Authorization header: use 'Bearer <token>'.")
        try:
            raw = header[1].decode()
        except UnicodeDecodeError:
            raise exceptions.AuthenticationFailed("The token contains invalid characters.") from None
        token = usable_token(raw)
        if token is None:
            raise exceptions.AuthenticationFailed("Invalid, expired or revoked token.")
        return token.user, token

    def authenticate_header(self, request: Request) -> str:
        return f'{self.keyword} realm="api"'


class ApiTokenScheme(OpenApiAuthenticationExtension):  # type: ignore[no-untyped-call]
    target_class = "tenancy.authentication.ApiTokenAuthentication"
    name = "bearerAuth"

    def get_security_definition(self, auto_schema: Any) -> dict[str, str]:
        return {"type": "http", "scheme": "bearer", "description": "A personal API token (qm_…)."}
