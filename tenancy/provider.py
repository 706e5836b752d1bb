"""Sign-in with the organisation's identity provider: OpenID Connect's authorization code flow with PKCE,
through mozilla-django-oidc, beside local accounts.

The library runs the flow (state, nonce, PKCE verifier, code exchange, the ID token's signature against the
provider's keys). This module adds what it leaves out — the ID token's issuer and audience are checked, users
are found by issuer and subject (never by e-mail, which would let a provider account take over a local one),
the provider's refresh token is kept sealed — and hands the claims to `tenancy.actions.identity.sign_in`, which syncs
memberships to the groups claim and refuses users who end up with no role. The callback view still calls
Django's `authenticate()` with the request, so sign-in throttling hooks it as it hooks the password form.
"""

from __future__ import annotations

import logging
from typing import Any

import jwt
import requests
from django.conf import settings
from django.contrib import messages
from django.contrib.auth.backends import ModelBackend
from django.contrib.auth.decorators import login_not_required
from django.core.exceptions import SuspiciousOperation
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseRedirect
from django.urls import reverse
from django.utils.decorators import method_decorator
from mozilla_django_oidc.auth import OIDCAuthenticationBackend
from mozilla_django_oidc.views import OIDCAuthenticationCallbackView, OIDCAuthenticationRequestView

from tenancy.actions import audit, identity

logger = logging.getLogger(__name__)


class ProviderBackend(OIDCAuthenticationBackend):  # type: ignore[misc]
    """The authentication backend for the provider's callback; it answers nothing anywhere else."""

    def authenticate(self, request: HttpRequest | None, **kwargs: Any) -> Any:
        # Only the callback view passes nonce and code_verifier; a password form never reaches the provider.
        if not settings.OIDC_ENABLED or request is None or not {"nonce", "code_verifier"} <= kwargs.keys():
            return None
        if request.path != reverse("oidc-callback"):
            return None
        self._token_info: dict[str, Any] = {}
        self._claims: dict[str, Any] = {}
        try:
            return super().authenticate(request, **kwargs)
        except requests.RequestException as exc:
            logger.warning("sign-in through the identity provider failed: %s", exc)
            _refuse(request, "the identity provider could not be reached or refused the sign-in")
            return None

    def get_token(self, payload: dict[str, Any]) -> dict[str, Any]:
        self._token_info = super().get_token(payload)
        return self._token_info

    def retrieve_matching_jwk(self, token: str) -> Any:
        """The provider's key for ``token``: its header is read first, and a token signed with another algorithm
        than the configured one, or naming no key (``kid``), is refused as a bad request (the library indexed
        the header's ``kid`` and the keys' own, a 500 for a token or a key set without one)."""
        try:
            header = jwt.get_unverified_header(token)
        except jwt.InvalidTokenError as exc:
            raise SuspiciousOperation(f"The ID token is not a signed JWT: {exc}") from None
        algorithm = header.get("alg")
        if algorithm != settings.OIDC_RP_SIGN_ALGO:
            raise SuspiciousOperation(f"The ID token is signed with {algorithm!r}, not {settings.OIDC_RP_SIGN_ALGO}.")
        if not isinstance(header.get("kid"), str) or not header["kid"]:
            raise SuspiciousOperation("The ID token names no key (kid) of the provider's to verify it with.")
        try:
            return super().retrieve_matching_jwk(token)
        except (KeyError, TypeError, ValueError, jwt.PyJWTError) as exc:
            raise SuspiciousOperation(f"The provider's keys could not be read: {exc!r}") from None

    def verify_token(self, token: str, **kwargs: Any) -> dict[str, Any]:
        try:
            payload: dict[str, Any] = super().verify_token(token, **kwargs)
        except jwt.InvalidTokenError as exc:
            # The library turns a bad signature into SuspiciousOperation (400) but lets an expired or not yet
            # valid token through as an error (500).
            raise SuspiciousOperation(f"The ID token is not valid: {exc}") from None
        # The library checks the signature, expiry and nonce, not who issued the token nor for whom.
        audience = payload.get("aud")
        audiences = audience if isinstance(audience, list) else [audience]
        if payload.get("iss") != settings.OIDC_ISSUER or settings.OIDC_RP_CLIENT_ID not in audiences:
            raise SuspiciousOperation("The ID token was not issued by the configured provider for this client.")
        return payload

    def get_userinfo(self, access_token: str, id_token: str, payload: dict[str, Any]) -> dict[str, Any]:
        claims: dict[str, Any] = super().get_userinfo(access_token, id_token, payload)
        if claims.get("sub") != payload.get("sub"):
            raise SuspiciousOperation("The provider's userinfo is about another subject than the ID token.")
        self._claims = claims
        return claims

    def verify_claims(self, claims: dict[str, Any]) -> bool:
        return bool(claims.get("sub"))

    def get_or_create_user(self, access_token: str, id_token: str, payload: dict[str, Any]) -> Any:
        claims = self.get_userinfo(access_token, id_token, payload)
        user = identity.sign_in(claims, refresh_token=self._token_info.get("refresh_token"), request=self.request)
        if user is not None and not user.is_active:
            _refuse(self.request, f"your account is deactivated ({identity.NO_MAPPED_GROUP})")
        return user

    def get_user(self, user_id: int) -> Any:
        # The library's version returns deactivated users too: a deactivated user's session must end.
        return ModelBackend.get_user(self, user_id)


def _refuse(request: HttpRequest, why: str) -> None:
    request._qm_sign_in_refused = why  # type: ignore[attr-defined]


@method_decorator(login_not_required, name="dispatch")
class ProviderSignInView(OIDCAuthenticationRequestView):  # type: ignore[misc]
    """Redirects to the provider's sign-in, with state, nonce and a PKCE challenge (S256)."""

    def get(self, request: HttpRequest) -> HttpResponse:
        if not settings.OIDC_ENABLED:
            raise Http404("Sign-in with an identity provider is not configured.")
        response: HttpResponse = super().get(request)
        return response


@method_decorator(login_not_required, name="dispatch")
class ProviderCallbackView(OIDCAuthenticationCallbackView):  # type: ignore[misc]
    """Where the provider sends the browser back; a refused sign-in returns to the sign-in page, saying why."""

    def get(self, request: HttpRequest) -> HttpResponse:
        if not settings.OIDC_ENABLED:
            raise Http404("Sign-in with an identity provider is not configured.")
        response: HttpResponse = super().get(request)
        return response

    def login_failure(self) -> HttpResponse:
        why = getattr(self.request, "_qm_sign_in_refused", None)
        if why is None:
            error = self.request.GET.get("error_description") or self.request.GET.get("error")
            why = f"the provider answered: {error[:200]}" if error else "the provider's answer could not be verified"
        user = getattr(self, "user", None)
        if user is not None and user.pk is None:  # someone new whom no group maps: no account was made
            user = None
        audit.record(
            "auth.login_failed",
            actor=None,
            target=user,
            organization=audit.home_organization(user),
            changes={"method": "identity provider"},
            reason=why,
            request=self.request,
        )
        messages.error(self.request, f"Sign-in with {settings.OIDC_PROVIDER_NAME} failed: {why}.")
        return HttpResponseRedirect(reverse("login"))
