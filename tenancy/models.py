"""Tenancy (organizations, teams, projects, memberships), identities from the organisation's provider and the
mapping of its groups, service accounts, API tokens and the audit log."""

from __future__ import annotations

import hashlib
import secrets
from typing import Any

from django.conf import settings
from django.contrib.contenttypes.models import ContentType
from django.db import models
from django.db.models import Q
from django.utils import timezone

from tenancy.scoping import ALL_ROLES, ORG_ROLES, TEAM_ROLES, Action, Role, TenancyRules, TenantManager

__all__ = [
    "Action",
    "ApiToken",
    "AuditLog",
    "GroupMapping",
    "Membership",
    "Organization",
    "Project",
    "ProviderIdentity",
    "Role",
    "ServiceAccount",
    "Team",
]

SLUG_HELP = "Lower-case letters, digits and hyphens; used in URLs and the CLI."


class Organization(models.Model):
    name = models.CharField(max_length=120, unique=True)
    slug = models.SlugField(max_length=60, unique=True, help_text=SLUG_HELP)
    #: The ISO 4217 code of every amount of the organization (prices, costs, budgets, statements); set by finance
    #: (``billing/actions/codes.py``).
    currency = models.CharField(max_length=3, default="USD")
    created_at = models.DateTimeField(auto_now_add=True)

    objects = TenantManager()

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
    #: Finance's code for the team's costs, carried into its statements (``billing/actions/codes.py``).
    cost_centre = models.CharField(max_length=40, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    objects = TenantManager()

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
    #: Finance's code for the project's costs (else its team's), carried into statements.
    cost_centre = models.CharField(max_length=40, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    objects = TenantManager()

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
    """A user's role: in one team (researcher, lead) or over a whole organization (finance, admin).

    `source` says who keeps it: a person (set by hand: the identity provider's groups never change it), the
    identity provider (follows the user's groups at each sign-in), or a service account (lives and dies with
    the account).
    """

    class Source(models.TextChoices):
        LOCAL = "local", "Set by hand"
        PROVIDER = "provider", "From the identity provider"
        SERVICE_ACCOUNT = "service_account", "Service account"

    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="memberships")
    organization = models.ForeignKey(Organization, on_delete=models.CASCADE, related_name="memberships")
    team = models.ForeignKey(Team, null=True, blank=True, on_delete=models.CASCADE, related_name="memberships")
    role = models.CharField(max_length=20, choices=Role.choices)
    source = models.CharField(max_length=20, choices=Source.choices, default=Source.LOCAL)
    created_at = models.DateTimeField(auto_now_add=True)

    objects = TenantManager()

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


class GroupMapping(models.Model):
    """A group of the identity provider's groups claim, and the role its members get in one organization.

    A team role (researcher, lead) names its team; an organization role (finance, admin) names none.
    """

    organization = models.ForeignKey(Organization, on_delete=models.CASCADE, related_name="group_mappings")
    group = models.CharField(max_length=200, help_text="The group's name exactly as the provider sends it.")
    team = models.ForeignKey(Team, null=True, blank=True, on_delete=models.CASCADE, related_name="group_mappings")
    role = models.CharField(max_length=20, choices=Role.choices)
    created_at = models.DateTimeField(auto_now_add=True)

    objects = TenantManager()

    class Tenancy(TenancyRules):
        team_field = None
        org_field = "organization"
        # The provider serves every organization of the installation, and a group means the same people to all
        # of them: an organization admin who could map any group name could claim another organization's
        # people. So organization admins read their mappings, and only the installation's administrators
        # (superusers, whom `for_user` lets through) make or remove them.
        policy = {Action.VIEW: frozenset({Role.ADMIN}), Action.CHANGE: frozenset()}

    class Meta:
        ordering = ["organization__name", "group", "team__name", "role"]
        constraints = [
            models.CheckConstraint(
                condition=(
                    Q(role__in=sorted(TEAM_ROLES), team__isnull=False) | Q(role__in=sorted(ORG_ROLES), team=None)
                ),
                name="groupmapping_team_iff_team_role",
            ),
            models.UniqueConstraint(fields=["organization", "group", "team"], name="groupmapping_once_per_team"),
            models.UniqueConstraint(
                fields=["organization", "group", "role"], condition=Q(team=None), name="groupmapping_org_role_once"
            ),
        ]

    def __str__(self) -> str:
        scope = self.team.name if self.team_id else self.organization.name  # type: ignore[union-attr]
        return f"{self.group} → {self.get_role_display()} of {scope}"


class ProviderIdentity(models.Model):
    """The identity provider's account behind a user, found again by issuer and subject (never by e-mail).

    `refresh_token` is sealed (`common.sealed`); the portal uses it to ask the provider whether it still knows
    the user (`tenancy.provider.check_provider_accounts`).
    """

    user = models.OneToOneField(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="provider_identity")
    issuer = models.CharField(max_length=300)
    subject = models.CharField(max_length=255)
    groups: models.JSONField[Any, Any] = models.JSONField(
        default=list, blank=True, help_text="The groups claim at the last sign-in."
    )
    refresh_token = models.BinaryField(null=True, blank=True, editable=False)
    last_sign_in_at = models.DateTimeField(null=True, blank=True)
    last_checked_at = models.DateTimeField(null=True, blank=True)
    deactivated_by_provider = models.BooleanField(
        default=False, help_text="Deactivated because the provider stopped vouching for the user (not by hand)."
    )

    class Meta:
        constraints = [models.UniqueConstraint(fields=["issuer", "subject"], name="provider_identity_unique")]

    def __str__(self) -> str:
        return f"{self.subject} at {self.issuer}"


class ServiceAccount(models.Model):
    """A team's non-person account for CI pipelines and on-call tooling: one API token with a scope.

    It is a user of its own (no password, no sign-in) holding one membership in its team, so tenancy
    (`for_user`, `can`) treats it like a member: a lead for the admin scope, a researcher otherwise. The
    scope then narrows what its token may do, in one place (`tenancy.scopes`).
    """

    class Scope(models.TextChoices):
        READ = "read", "Read-only"
        SUBMIT = "submit", "Submit jobs"
        ADMIN = "admin", "Team admin"

    team = models.ForeignKey(Team, on_delete=models.PROTECT, related_name="service_accounts")
    user = models.OneToOneField(settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="service_account")
    name = models.CharField(max_length=80)
    scope = models.CharField(max_length=10, choices=Scope.choices)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    created_at = models.DateTimeField(auto_now_add=True)
    revoked_at = models.DateTimeField(null=True, blank=True)

    objects = TenantManager()

    class Tenancy(TenancyRules):
        policy = {Action.VIEW: frozenset({Role.LEAD, Role.ADMIN}), Action.CHANGE: frozenset({Role.LEAD, Role.ADMIN})}

    class Meta:
        ordering = ["team__name", "name"]
        constraints = [
            models.UniqueConstraint(
                fields=["team", "name"], condition=Q(revoked_at=None), name="service_account_name_unique_in_team"
            )
        ]

    def __str__(self) -> str:
        return f"{self.team.name}/{self.name}"

    @property
    def role(self) -> Role:
        return Role.LEAD if self.scope == self.Scope.ADMIN else Role.RESEARCHER


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


ApiTokenManager = models.Manager.from_queryset(ApiTokenQuerySet)


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

    objects = ApiTokenManager()

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
    """Who did what to which object, from where. Written only through `tenancy.actions.audit.record`."""

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

    objects = TenantManager()

    class Tenancy(TenancyRules):
        team_field = None
        org_field = "organization"
        policy = {Action.VIEW: frozenset({Role.ADMIN})}

    class Meta:
        ordering = ["-created_at", "-id"]
        indexes = [models.Index(fields=["organization", "-created_at"])]

    def __str__(self) -> str:
        return f"{self.created_at:%Y-%m-%d %H:%M:%S} {self.actor_name} {self.action} {self.target_repr}"
