"""Tenancy (organizations, teams, projects, memberships), API tokens and the audit log."""

from __future__ import annotations

import hashlib
import secrets
from typing import Any, ClassVar

from django.conf import settings
from django.contrib.contenttypes.models import ContentType
from django.db import models
from django.db.models import Q
from django.utils import timezone

from portal.tenancy import ALL_ROLES, ORG_ROLES, TEAM_ROLES, Action, Role, TenancyRules, TenantQuerySet

__all__ = ["Action", "ApiToken", "AuditLog", "Membership", "Organization", "Project", "Role", "Team"]

SLUG_HELP = "Lower-case letters, digits and hyphens; used in URLs and the CLI."


class Organization(models.Model):
    name = models.CharField(max_length=120, unique=True)
    slug = models.SlugField(max_length=60, unique=True, help_text=SLUG_HELP)
    created_at = models.DateTimeField(auto_now_add=True)

    objects: ClassVar[TenantQuerySet] = TenantQuerySet.as_manager()  # type: ignore[assignment]

    class Tenancy(TenancyRules):
        team_field = None
        org_field = "pk"
        policy = {Action.VIEW: ALL_ROLES, Action.CHANGE: frozenset({Role.ADMIN})}

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name


class Team(models.Model):
    organization = models.ForeignKey(Organization, on_delete=models.PROTECT, related_name="teams")
    name = models.CharField(max_length=120)
    slug = models.SlugField(max_length=60, help_text=SLUG_HELP)
    description = models.TextField(blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    objects: ClassVar[TenantQuerySet] = TenantQuerySet.as_manager()  # type: ignore[assignment]

    class Tenancy(TenancyRules):
        team_field = "pk"
        org_field = "organization"

    class Meta:
        ordering = ["organization__name", "name"]
        constraints = [
            models.UniqueConstraint(fields=["organization", "slug"], name="team_slug_unique_in_org"),
            models.UniqueConstraint(fields=["organization", "name"], name="team_name_unique_in_org"),
        ]

    def __str__(self) -> str:
        return self.name


class Project(models.Model):
    team = models.ForeignKey(Team, on_delete=models.PROTECT, related_name="projects")
    name = models.CharField(max_length=120)
    slug = models.SlugField(max_length=60, help_text=SLUG_HELP)
    description = models.TextField(blank=True)
    archived = models.BooleanField(default=False)
    created_at = models.DateTimeField(auto_now_add=True)

    objects: ClassVar[TenantQuerySet] = TenantQuerySet.as_manager()  # type: ignore[assignment]

    class Tenancy(TenancyRules):
        pass

    class Meta:
        ordering = ["team__name", "name"]
        constraints = [
            models.UniqueConstraint(fields=["team", "slug"], name="project_slug_unique_in_team"),
            models.UniqueConstraint(fields=["team", "name"], name="project_name_unique_in_team"),
        ]

    def __str__(self) -> str:
        return f"{self.team.name}/{self.name}"


class Membership(models.Model):
    """A user's role: in one team (researcher, lead) or over a whole organization (finance, admin)."""

    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="memberships")
    organization = models.ForeignKey(Organization, on_delete=models.CASCADE, related_name="memberships")
    team = models.ForeignKey(Team, null=True, blank=True, on_delete=models.CASCADE, related_name="memberships")
    role = models.CharField(max_length=20, choices=Role.choices)
    created_at = models.DateTimeField(auto_now_add=True)

    objects: ClassVar[TenantQuerySet] = TenantQuerySet.as_manager()  # type: ignore[assignment]

    class Tenancy(TenancyRules):
        org_field = "organization"

    class Meta:
        ordering = ["organization__name", "team__name", "user__username"]
        constraints = [
            models.CheckConstraint(
                condition=(
                    Q(role__in=sorted(TEAM_ROLES), team__isnull=False) | Q(role__in=sorted(ORG_ROLES), team=None)
                ),
                name="membership_team_iff_team_role",
            ),
            models.UniqueConstraint(fields=["user", "team"], name="membership_one_role_per_team"),
            models.UniqueConstraint(
                fields=["user", "organization", "role"],
                condition=Q(team=None),
                name="membership_org_role_once",
            ),
        ]

    def __str__(self) -> str:
        scope = self.team.name if self.team_id else self.organization.name  # type: ignore[union-attr]
        return f"{self.user} — {self.get_role_display()} of {scope}"


class ApiTokenQuerySet(models.QuerySet["ApiToken"]):
    def usable(self) -> ApiTokenQuerySet:
        now = timezone.now()
        return self.filter(revoked_at=None).filter(Q(expires_at=None) | Q(expires_at__gt=now))


def hash_token(raw: str) -> str:
    # Tokens carry 256 random bits, so a fast unsalted hash is as strong as a password hash would be here
    # and keeps every API request to one indexed lookup.
    return hashlib.sha256(raw.encode()).hexdigest()


def new_token(prefix: str) -> tuple[str, str, str]:
    """A new raw token (256 random bits after ``prefix``), its hash and its hint (the first characters)."""
    raw = prefix + secrets.token_urlsafe(32)
    return raw, hash_token(raw), raw[: len(prefix) + 6]


class ApiToken(models.Model):
    """A personal API token. Only its SHA-256 is stored; the token itself is shown once, at creation."""

    PREFIX = "qm_"

    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="api_tokens")
    name = models.CharField(max_length=80)
    key_hash = models.CharField(max_length=64, unique=True, editable=False)
    hint = models.CharField(max_length=12, editable=False, help_text="The first characters, to tell tokens apart.")
    created_at = models.DateTimeField(auto_now_add=True)
    expires_at = models.DateTimeField(null=True, blank=True)
    last_used_at = models.DateTimeField(null=True, blank=True)
    revoked_at = models.DateTimeField(null=True, blank=True)

    objects: ClassVar[ApiTokenQuerySet] = ApiTokenQuerySet.as_manager()  # type: ignore[assignment]

    class Meta:
        ordering = ["-created_at"]

    def __str__(self) -> str:
        return f"{self.name} ({self.hint}…)"

    @classmethod
    def generate(cls) -> tuple[str, str, str]:
        return new_token(cls.PREFIX)

    @property
    def is_usable(self) -> bool:
        return self.revoked_at is None and (self.expires_at is None or self.expires_at > timezone.now())


class AuditLog(models.Model):
    """Who did what to which object, from where. Written only through `portal.audit.record`."""

    organization = models.ForeignKey(
        Organization, null=True, blank=True, on_delete=models.SET_NULL, related_name="audit_entries"
    )
    actor = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="audit_entries"
    )
    actor_name = models.CharField(max_length=150, help_text="Kept when the user is deleted.")
    action = models.CharField(max_length=80, db_index=True)
    target_type = models.ForeignKey(ContentType, null=True, blank=True, on_delete=models.SET_NULL)
    target_id = models.CharField(max_length=64, blank=True)
    target_repr = models.CharField(max_length=200, blank=True)
    changes: models.JSONField[Any, Any] = models.JSONField(default=dict, blank=True)
    reason = models.TextField(blank=True)
    ip_address = models.GenericIPAddressField(null=True, blank=True)
    user_agent = models.CharField(max_length=300, blank=True)
    created_at = models.DateTimeField(default=timezone.now, db_index=True)

    objects: ClassVar[TenantQuerySet] = TenantQuerySet.as_manager()  # type: ignore[assignment]

    class Tenancy(TenancyRules):
        team_field = None
        org_field = "organization"
        policy = {Action.VIEW: frozenset({Role.ADMIN})}

    class Meta:
        ordering = ["-created_at", "-id"]
        indexes = [models.Index(fields=["organization", "-created_at"])]

    def __str__(self) -> str:
        return f"{self.created_at:%Y-%m-%d %H:%M:%S} {self.actor_name} {self.action} {self.target_repr}"
