"""The one way to write the audit log: `record(...)`, called by every privileged action."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from django.contrib.auth.models import User
from django.contrib.contenttypes.models import ContentType
from django.db import models

from common.client import client_address
from tenancy.models import AuditLog, Organization

if TYPE_CHECKING:
    from django.http import HttpRequest

    from common.types import AnyUser


def organization_of(obj: models.Model | None) -> Organization | None:
    """The organization an object belongs to, by the path its `Tenancy` declares."""
    if obj is None:
        return None
    if isinstance(obj, Organization):
        return obj
    for path in ("organization", "team__organization", "project__team__organization"):
        current: Any = obj
        for part in path.split("__"):
            current = getattr(current, part, None)
            if current is None:
                break
        if isinstance(current, Organization):
            return current
    return None


def home_organization(user: AnyUser | None) -> Organization | None:
    """The organization of a user's first membership: where entries about the user themselves belong."""
    if user is None or not user.is_authenticated:
        return None
    membership = user.memberships.select_related("organization").order_by("pk").first()
    return membership.organization if membership is not None else None


def record(
    action: str,
    *,
    actor: AnyUser | None,
    target: models.Model | None = None,
    organization: Organization | None = None,
    changes: dict[str, Any] | None = None,
    reason: str = "",
    request: HttpRequest | None = None,
) -> AuditLog:
    """Record that `actor` did `action` (a dotted verb such as `membership.role_changed`) to `target`.

    Call it inside the action's transaction, so the entry exists exactly when the change does.
    """
    user = actor if isinstance(actor, User) else None
    return AuditLog.objects.create(
        organization=organization or organization_of(target),
        actor=user,
        actor_name=user.get_username() if user is not None else "system",
        action=action,
        target_type=ContentType.objects.get_for_model(target) if target is not None else None,
        target_id=str(target.pk) if target is not None else "",
        target_repr=str(target)[:200] if target is not None else "",
        changes=changes or {},
        reason=reason,
        ip_address=client_address(request) if request is not None else None,
        user_agent=(request.META.get("HTTP_USER_AGENT", "")[:300] if request is not None else ""),
    )
