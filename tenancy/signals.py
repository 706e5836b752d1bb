"""Sign-ins, sign-outs and refused sign-ins go to the audit log."""

from __future__ import annotations

from typing import Any

from django.contrib.auth import get_user_model
from django.contrib.auth.signals import user_logged_in, user_logged_out, user_login_failed
from django.dispatch import receiver

from tenancy.actions import audit


@receiver(user_logged_in)
def _logged_in(sender: Any, request: Any, user: Any, **kwargs: Any) -> None:
    # `login()` notes on the user which backend vouched for them: the password form or the identity provider.
    method = "identity provider" if getattr(user, "backend", "") == "tenancy.provider.ProviderBackend" else "password"
    audit.record(
        "auth.login",
        actor=user,
        target=user,
        organization=audit.home_organization(user),
        changes={"method": method},
        request=request,
    )


@receiver(user_logged_out)
def _logged_out(sender: Any, request: Any, user: Any, **kwargs: Any) -> None:
    if user is not None:
        audit.record(
            "auth.logout", actor=user, target=user, organization=audit.home_organization(user), request=request
        )


@receiver(user_login_failed)
def _login_failed(sender: Any, credentials: dict[str, Any], request: Any = None, **kwargs: Any) -> None:
    if "username" not in credentials:
        return  # the identity provider's callback (tenancy.provider) records its refusals with their reason
    username = str(credentials.get("username", ""))[:150]
    user = get_user_model().objects.filter(username=username).first()
    audit.record(
        "auth.login_failed",
        actor=None,
        target=user,
        organization=audit.home_organization(user),
        changes={"username": username},
        request=request,
    )
