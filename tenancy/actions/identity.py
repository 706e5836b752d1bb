"""Users from the organisation's identity provider: their memberships follow the provider's groups, and a user
the provider stops vouching for is deactivated. Actions-style: one transaction each, audited.

How memberships follow the groups (`sync_memberships`, at every sign-in through the provider):

* Each organization maps group names onto a team role or an organization role (`GroupMapping`). The user's
  groups claim, through those mappings, gives the roles the provider grants; where two groups grant roles in
  one team, the higher (lead over researcher) wins.
* Memberships the provider granted (`Membership.Source.PROVIDER`) are created, changed and removed to match.
* A membership set by hand (`Source.LOCAL`) is never touched, and where one exists for a team the provider
  would grant nothing is added there: the hand-set role wins. A hand change to a provider membership
  (`tenancy.actions.change_role`) turns it into a hand-set one. A provider membership removed by hand comes
  back at the next sign-in while the groups still grant it: change the groups or the mapping instead.

When a user is deactivated (`is_active=False`: sessions end, API tokens answer 401, sign-in is refused):

* at sign-in, when the user came from the provider and holds no role at all after the sync — the provider
  knows them, but none of their groups is mapped in any organization and nobody gave them a role by hand;
* when the provider no longer knows them: `check_provider_accounts` (on the beat, every ``OIDC_CHECK_SECONDS``)
  redeems each provider user's refresh token at the provider's token endpoint, and the provider refusing it
  with ``invalid_grant`` (account deleted, grant or refresh token revoked or expired) deactivates the user. A
  provider that cannot be reached, or answers anything else, changes nothing. A provider that issued no refresh
  token (no ``offline_access``) leaves that user to the sign-in rule alone.

A user deactivated by either rule is reactivated when they next sign in through the provider with a mapped
group; a user an administrator deactivated by hand is not (``ProviderIdentity.deactivated_by_provider``).
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import requests
from django.conf import settings
from django.contrib.auth import get_user_model
from django.db import transaction
from django.utils import timezone

from common.sealed import seal, unseal
from tenancy.actions import audit
from tenancy.models import GroupMapping, Membership, Organization, ProviderIdentity
from tenancy.scoping import TEAM_ROLES, Role

if TYPE_CHECKING:
    from django.contrib.auth.models import User
    from django.http import HttpRequest

logger = logging.getLogger(__name__)

REFRESH_TOKEN_PURPOSE = "identity provider refresh token"  # noqa: S105 - a key-derivation label
# Roles compared where two groups grant different roles in the same team.
RANK = {Role.RESEARCHER: 0, Role.LEAD: 1}
NOT_VOUCHED = "the identity provider no longer knows this user"
NO_MAPPED_GROUP = "none of the user's groups at the identity provider gives a role here"


@dataclass(frozen=True)
class Grant:
    """One role the provider's groups grant: in a team, or over an organization (team None)."""

    organization_id: int
    team_id: int | None
    role: Role


def groups_of(claims: dict[str, Any]) -> list[str]:
    """The groups claim as a list of names; a provider sending one group as a string is understood too."""
    value = claims.get(settings.OIDC_GROUPS_CLAIM)
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list):
        return []
    return sorted({str(group) for group in value if isinstance(group, str | int) and str(group)})


def grants_for(groups: list[str]) -> set[Grant]:
    """The roles `groups` are mapped to, over every organization; the higher team role wins per team."""
    best: dict[tuple[int, int | None, Role | None], Grant] = {}
    for mapping in GroupMapping.objects.filter(group__in=groups):
        role = Role(mapping.role)
        if role in TEAM_ROLES:
            key: tuple[int, int | None, Role | None] = (mapping.organization_id, mapping.team_id, None)
            held = best.get(key)
            if held is None or RANK[role] > RANK[held.role]:
                best[key] = Grant(mapping.organization_id, mapping.team_id, role)
        else:
            best[(mapping.organization_id, None, role)] = Grant(mapping.organization_id, None, role)
    return set(best.values())


def _same_place(membership: Membership, grant: Grant) -> bool:
    if grant.team_id is not None:
        return membership.team_id == grant.team_id
    return (
        membership.team_id is None
        and membership.organization_id == grant.organization_id
        and (membership.role == grant.role)
    )


def sync_memberships(user: User, groups: list[str], *, request: HttpRequest | None = None) -> None:
    """Make the user's provider-granted memberships match `groups` (rules in the module docstring)."""
    grants = grants_for(groups)
    reason = f"identity provider groups: {', '.join(groups) or 'none'}"
    with transaction.atomic():
        held = list(
            Membership.objects.select_for_update(of=("self",))
            .filter(user=user)
            .select_related("team", "organization")
            .order_by("pk")
        )
        for membership in held:
            if membership.source != Membership.Source.PROVIDER:
                continue
            grant = next((g for g in grants if _same_place(membership, g)), None)
            if grant is None:
                audit.record(
                    "membership.removed",
                    actor=None,
                    target=membership,
                    changes={"user": user.get_username(), "role": membership.role, "source": "provider"},
                    reason=reason,
                    request=request,
                )
                membership.delete()
            elif grant.role != membership.role:
                old = membership.role
                Membership.objects.filter(pk=membership.pk).update(role=grant.role)
                membership.role = grant.role
                audit.record(
                    "membership.role_changed",
                    actor=None,
                    target=membership,
                    changes={"role": [old, grant.role.value], "source": "provider"},
                    reason=reason,
                    request=request,
                )
        for grant in sorted(grants, key=lambda g: (g.organization_id, g.team_id or 0, g.role.value)):
            if any(_same_place(membership, grant) for membership in held):
                continue  # already held: from the provider (adjusted above) or set by hand (which wins)
            membership = Membership.objects.create(
                user=user,
                organization_id=grant.organization_id,
                team_id=grant.team_id,
                role=grant.role,
                source=Membership.Source.PROVIDER,
            )
            audit.record(
                "membership.created",
                actor=None,
                target=membership,
                changes={"user": user.get_username(), "role": grant.role.value, "source": "provider"},
                reason=reason,
                request=request,
            )


def deactivate(user: User, *, reason: str, request: HttpRequest | None = None) -> None:
    """Deactivate a provider user (sessions end, tokens stop working) because the provider stopped vouching."""
    with transaction.atomic():
        organization = audit.home_organization(user)
        if not type(user).objects.filter(pk=user.pk, is_active=True).update(is_active=False):
            return
        user.is_active = False
        ProviderIdentity.objects.filter(user=user).update(deactivated_by_provider=True)
        audit.record(
            "user.deactivated", actor=None, target=user, organization=organization, reason=reason, request=request
        )


def _reactivate(user: User, identity: ProviderIdentity, *, request: HttpRequest | None) -> None:
    type(user).objects.filter(pk=user.pk).update(is_active=True)
    user.is_active = True
    identity.deactivated_by_provider = False
    audit.record(
        "user.reactivated",
        actor=None,
        target=user,
        organization=audit.home_organization(user),
        reason="signed in through the identity provider with a mapped group",
        request=request,
    )


def _username_for(claims: dict[str, Any]) -> str:
    """A free username from the provider's preferred username (or e-mail), made unique with a suffix."""
    wanted = str(claims.get("preferred_username") or str(claims.get("email") or "").split("@")[0] or "user")
    base = re.sub(r"[^\w.@+-]", "", wanted)[:140] or "user"
    users = get_user_model().objects
    candidate, number = base, 1
    while users.filter(username__iexact=candidate).exists():
        number += 1
        candidate = f"{base}-{number}"
    return candidate


def sign_in(claims: dict[str, Any], *, refresh_token: str | None, request: HttpRequest | None = None) -> User | None:
    """The user the provider vouched for with `claims` (found by issuer and subject, or created), with their
    memberships synced to the groups; inactive (and so refused) when they end up with no role. Someone new whose
    groups give no role here is refused without an account being made: an unsaved, inactive user is returned,
    so that anyone the provider knows cannot fill the user table by signing in."""
    subject = str(claims.get("sub") or "")
    if not subject:
        return None
    issuer = settings.OIDC_ISSUER
    with transaction.atomic():
        identity = (
            ProviderIdentity.objects.select_for_update()
            .select_related("user")
            .filter(issuer=issuer, subject=subject)
            .first()
        )
        email = str(claims.get("email") or "")[:254]
        if identity is None and not grants_for(groups_of(claims)):  # the callback audits the refusal
            return get_user_model()(username=_username_for(claims), email=email, is_active=False)
        if identity is None:
            user = get_user_model().objects.create_user(_username_for(claims), email=email)
            user.set_unusable_password()
            identity = ProviderIdentity(user=user, issuer=issuer, subject=subject)
            audit.record(
                "user.created",
                actor=None,
                target=user,
                changes={"username": user.get_username(), "source": "provider", "subject": subject},
                request=request,
            )
        user = identity.user
        user.email = email
        user.first_name = str(claims.get("given_name") or "")[:150]
        user.last_name = str(claims.get("family_name") or "")[:150]
        user.save()
        groups = groups_of(claims)
        identity.groups = groups
        identity.last_sign_in_at = identity.last_checked_at = timezone.now()
        if refresh_token:
            identity.refresh_token = seal(refresh_token, purpose=REFRESH_TOKEN_PURPOSE)
        identity.save()
        sync_memberships(user, groups, request=request)
        has_role = Membership.objects.filter(user=user).exists()
        if not has_role:
            deactivate(user, reason=NO_MAPPED_GROUP, request=request)
        elif not user.is_active and identity.deactivated_by_provider:
            _reactivate(user, identity, request=request)
            identity.save(update_fields=["deactivated_by_provider"])
    return user


def check_provider_accounts() -> dict[str, int]:
    """Ask the provider about each active provider user (refresh-token grant); deactivate those it refuses."""
    counts = {"checked": 0, "deactivated": 0, "unreachable": 0}
    if not settings.OIDC_ENABLED:
        return counts
    due = ProviderIdentity.objects.filter(
        user__is_active=True, issuer=settings.OIDC_ISSUER, refresh_token__isnull=False
    ).order_by("pk")
    for pk in due.values_list("pk", flat=True):
        outcome = _check_one(pk)
        if outcome is not None:
            counts[outcome] += 1
    return counts


def _check_one(pk: int) -> str | None:
    """Redeem one user's refresh token. The row stays locked meanwhile: a provider that rotates refresh tokens
    treats a second use of the same token as theft and revokes the grant, which would read as 'unknown'."""
    with transaction.atomic():
        identity = (
            ProviderIdentity.objects.select_for_update(of=("self",), skip_locked=True)
            .select_related("user")
            .filter(pk=pk, user__is_active=True)
            .first()
        )
        refresh_token = unseal(identity.refresh_token, purpose=REFRESH_TOKEN_PURPOSE) if identity else None
        if identity is None or refresh_token is None:
            return None
        try:
            response = requests.post(
                settings.OIDC_OP_TOKEN_ENDPOINT,
                data={
                    "grant_type": "refresh_token",
                    "refresh_token": refresh_token,
                    "client_id": settings.OIDC_RP_CLIENT_ID,
                    "client_secret": settings.OIDC_RP_CLIENT_SECRET,
                },
                timeout=settings.OIDC_TIMEOUT,
                allow_redirects=False,
            )
            json = response.headers.get("content-type", "").startswith("application/json")
            answer = response.json() if json else {}
        except (requests.RequestException, ValueError) as exc:
            logger.warning("identity provider check of %s failed: %s", identity.user, exc)
            return "unreachable"
        identity.last_checked_at = timezone.now()
        if response.status_code == 200 and isinstance(answer, dict):
            rotated = answer.get("refresh_token")
            if isinstance(rotated, str) and rotated:
                identity.refresh_token = seal(rotated, purpose=REFRESH_TOKEN_PURPOSE)
            identity.save(update_fields=["last_checked_at", "refresh_token"])
            return "checked"
        if response.status_code == 400 and isinstance(answer, dict) and answer.get("error") == "invalid_grant":
            identity.refresh_token = None
            identity.save(update_fields=["last_checked_at", "refresh_token"])
            deactivate(identity.user, reason=NOT_VOUCHED)
            return "deactivated"
        logger.warning("identity provider answered %s checking %s", response.status_code, identity.user)
        return "unreachable"


def provider_view(organization: Organization) -> list[dict[str, Any]]:
    """Each membership of `organization` with where it comes from, and for hand-set ones whether they stand in
    for a role the provider's groups (as last seen) would grant: the page of group mappings shows this."""
    memberships = (
        Membership.objects.filter(organization=organization)
        .select_related("user", "team", "user__provider_identity")
        .order_by("user__username", "team__name", "role")
    )
    rows: list[dict[str, Any]] = []
    grants_cache: dict[int, set[Grant]] = {}
    for membership in memberships:
        identity = getattr(membership.user, "provider_identity", None)
        overrides: Role | None = None
        if identity is not None and membership.source == Membership.Source.LOCAL:
            if membership.user_id not in grants_cache:
                grants_cache[membership.user_id] = grants_for(list(identity.groups))
            grant = next((g for g in grants_cache[membership.user_id] if _same_place(membership, g)), None)
            if grant is not None and grant.role != membership.role:
                overrides = grant.role
        rows.append({"membership": membership, "identity": identity, "overrides": overrides})
    return rows
