"""Privileged actions on tenancy and tokens: one transaction each, authorization checked, audited.

Views and API endpoints call these and only these to change data. Each action raises
`django.core.exceptions.ValidationError` (with the offending field named) for bad input and
`PermissionDenied` when the actor may see the object but not change it; both leave the database as it was.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.exceptions import PermissionDenied, ValidationError
from django.db import IntegrityError, transaction
from django.db.models import Q, QuerySet
from django.utils import timezone
from django.utils.text import slugify

from common.validation import check_max_length, message_of, required
from tenancy import policy
from tenancy.actions import audit
from tenancy.models import ApiToken, GroupMapping, Membership, Organization, Project, ServiceAccount, Team
from tenancy.scoping import TEAM_ROLES, Role

if TYPE_CHECKING:
    from django.contrib.auth.models import User
    from django.http import HttpRequest

MAX_TOKEN_DAYS = 366


# --- API tokens -----------------------------------------------------------------------------------------


def issue_token(
    actor: User, *, name: str, expires_in_days: int | None = None, http: HttpRequest | None = None
) -> tuple[ApiToken, str]:
    """A new token of `actor`'s own; returns the row and the raw token, which is never stored or shown again."""
    name = (name or "").strip()
    if not name:
        raise ValidationError({"name": "Give the token a name, e.g. the machine or script that will use it."})
    if len(name) > 80:
        raise ValidationError({"name": message_of(check_max_length, name, 80)})
    days = _token_days(expires_in_days)
    raw, key_hash, hint = ApiToken.generate()
    with transaction.atomic():
        token = ApiToken.objects.create(
            user=actor, name=name, key_hash=key_hash, hint=hint, expires_at=timezone.now() + timedelta(days=days)
        )
        audit.record(
            "token.created",
            actor=actor,
            target=token,
            organization=audit.home_organization(actor),
            changes={"name": name, "expires_at": token.expires_at.isoformat() if token.expires_at else None},
            request=http,
        )
    return token, raw


def _token_days(expires_in_days: int | None) -> int:
    days = settings.API_TOKEN_DEFAULT_DAYS if expires_in_days is None else expires_in_days
    if not 1 <= days <= MAX_TOKEN_DAYS:
        raise ValidationError({"expires_in_days": f"Must be between 1 and {MAX_TOKEN_DAYS} days."})
    return days


def revoke_token(actor: User, token: ApiToken, *, http: HttpRequest | None = None) -> ApiToken:
    """Revoke one of the actor's own tokens. Revoking twice is harmless and records nothing new."""
    policy.require(actor, "token.revoke", token)
    with transaction.atomic():
        claimed = ApiToken.objects.filter(pk=token.pk, revoked_at=None).update(revoked_at=timezone.now())
        token.refresh_from_db()
        if claimed:
            audit.record(
                "token.revoked", actor=actor, target=token, organization=audit.home_organization(actor), request=http
            )
    return token


# --- Teams and projects ---------------------------------------------------------------------------------


def _slug_for(name: str, slug: str | None) -> str:
    value = slugify(slug if slug else name)
    if not value:
        raise ValidationError({"slug" if slug else "name": "Needs at least one letter or digit."})
    return value[:60]


def _named(instance: Team | Project, name: str, slug: str | None, siblings: QuerySet[Any], where: str) -> None:
    """Fill in a new team's or project's name and slug, refusing blanks and clashes with its siblings."""
    name = (name or "").strip()
    if not name:
        raise ValidationError({"name": required()})
    instance.name, instance.slug = name, _slug_for(name, slug)
    instance.full_clean(validate_constraints=False)
    kind = instance._meta.verbose_name
    if siblings.filter(slug=instance.slug).exists():
        raise ValidationError({"slug": f"{where} already has a {kind} with the slug {instance.slug!r}."})
    if siblings.filter(name=name).exists():
        raise ValidationError({"name": f"{where} already has a {kind} named {name!r}."})


def create_team(
    actor: User,
    organization: Organization,
    *,
    name: str,
    slug: str | None = None,
    description: str = "",
    http: HttpRequest | None = None,
) -> Team:
    policy.require(actor, "team.create", organization)
    team = Team(organization=organization, description=description)
    _named(team, name, slug, Team.objects.filter(organization=organization), organization.name)
    with transaction.atomic():
        team.save()
        audit.record("team.created", actor=actor, target=team, changes={"name": team.name}, request=http)
    return team


def create_project(
    actor: User,
    team: Team,
    *,
    name: str,
    slug: str | None = None,
    description: str = "",
    http: HttpRequest | None = None,
) -> Project:
    policy.require(actor, "project.create", team)
    project = Project(team=team, description=description)
    _named(project, name, slug, Project.objects.filter(team=team), f"Team {team.name}")
    with transaction.atomic():
        project.save()
        audit.record("project.created", actor=actor, target=project, changes={"name": project.name}, request=http)
    return project


# --- Memberships ----------------------------------------------------------------------------------------


def add_member(
    actor: User,
    organization: Organization,
    *,
    username: str,
    role: str,
    team: Team | None = None,
    http: HttpRequest | None = None,
) -> Membership:
    """Give a user a role: a team role in `team`, or an organization role (admins only). Who may be given
    one is `_addable_user`'s rule."""
    role_value = _role_in(organization, role, team)
    if team is not None:
        policy.require(actor, "member.add", team)
    else:
        policy.require(
            actor, "member.add", organization, "You may not grant organization-wide roles (organization admins only)."
        )
    user = _addable_user(actor, organization, username)
    if user.pk == actor.pk:
        raise PermissionDenied("You may not change your own roles.")
    try:
        with transaction.atomic():
            membership = Membership.objects.create(user=user, organization=organization, team=team, role=role_value)
            audit.record(
                "membership.created",
                actor=actor,
                target=membership,
                changes={"user": user.get_username(), "role": role_value.value, "team": team.name if team else None},
                request=http,
            )
    except IntegrityError:
        where = team.name if team else organization.name
        raise ValidationError({"username": f"{user.get_username()} already has a role in {where}."}) from None
    return membership


def _role_in(organization: Organization, role: str, team: Team | None) -> Role:
    """`role` as a Role that fits where it is given: a team role in a team of `organization`, an organization
    role with no team."""
    role_value = _parse_role(role)
    if role_value in TEAM_ROLES:
        if team is None:
            raise ValidationError({"team": f"A {role_value.label.lower()} belongs to a team: name the team."})
        if team.organization_id != organization.pk:
            raise ValidationError({"team": "The team is not in this organization."})
    elif team is not None:
        raise ValidationError({"team": f"{role_value.label} is an organization-wide role; leave the team empty."})
    return role_value


def _addable_user(actor: User, organization: Organization, username: str) -> User:
    """The active user called `username` whom `actor` may give a role in `organization`.

    A team lead adds people who already belong to the organization (any role in it). An organization admin
    also adds accounts that belong to no organization yet (someone new, signed up or created by the
    installation's administrator); a superuser, anyone. Somebody of another organization joins only through
    them: otherwise a lead could sound out the installation's usernames and pull a stranger into the team
    (which also moves the stranger's default organization in billing). Unknown, inactive and not allowed
    get one and the same answer, so the answer tells nothing about who exists.
    """
    name = (username or "").strip()
    # A service account's one role is its own: it is never added anywhere else.
    found = get_user_model().objects.filter(username=name, is_active=True, service_account=None)
    if not actor.is_superuser:
        allowed = Q(pk__in=Membership.objects.filter(organization=organization).values("user"))
        if policy.can(actor, "member.add_newcomer", organization):
            allowed |= ~Q(pk__in=Membership.objects.values("user"))
        found = found.filter(allowed)
    user = found.first()
    if user is None:
        raise ValidationError(
            {
                "username": f"No user {name!r} you can add: a team lead adds people already in {organization.name}, "
                "an organization admin also people new to the portal."
            }
        )
    return user


def change_role(
    actor: User, membership: Membership, *, role: str, reason: str = "", http: HttpRequest | None = None
) -> Membership:
    """Change a team member's role (researcher ↔ lead). Nobody changes their own role."""
    role_value = _parse_role(role)
    policy.require(actor, "member.role.set", membership)
    if membership.user_id == actor.pk:
        raise PermissionDenied("You may not change your own role.")
    _refuse_service_account_role(membership)
    if membership.team_id is None:
        raise ValidationError({"role": "Organization-wide roles are granted and removed, not changed."})
    if role_value not in TEAM_ROLES:
        raise ValidationError({"role": f"A team member is a researcher or a lead, not {role_value.label.lower()}."})
    if role_value == membership.role:
        return membership
    with transaction.atomic():
        old, old_source = membership.role, membership.source
        # A role changed by hand is kept by hand: the identity provider's groups no longer change it.
        updated = Membership.objects.filter(pk=membership.pk, role=old).update(
            role=role_value, source=Membership.Source.LOCAL
        )
        if not updated:
            raise ValidationError({"role": "The role was changed by someone else meanwhile; reload and retry."})
        membership.refresh_from_db()
        changes: dict[str, list[str]] = {"role": [old, role_value.value]}
        if old_source != Membership.Source.LOCAL:
            changes["source"] = [old_source, Membership.Source.LOCAL.value]
        audit.record(
            "membership.role_changed",
            actor=actor,
            target=membership,
            changes=changes,
            reason=reason,
            request=http,
        )
    return membership


def remove_member(actor: User, membership: Membership, *, http: HttpRequest | None = None) -> None:
    # Leads reach their team's memberships only; organization-wide ones are reached by admins alone.
    policy.require(actor, "member.remove", membership)
    if membership.user_id == actor.pk:
        raise PermissionDenied("You may not remove your own role.")
    _refuse_service_account_role(membership)
    with transaction.atomic():
        audit.record(
            "membership.removed",
            actor=actor,
            target=membership,
            changes={"user": membership.user.get_username(), "role": membership.role},
            request=http,
        )
        membership.delete()


def _refuse_service_account_role(membership: Membership) -> None:
    if membership.source == Membership.Source.SERVICE_ACCOUNT:
        raise ValidationError({"role": "This is a service account's role: revoke the service account instead."})


def _parse_role(role: str) -> Role:
    try:
        return Role(role)
    except ValueError:
        raise ValidationError({"role": f"{role!r} is not a role; use one of {', '.join(Role.values)}."}) from None


# --- Identity provider: group mappings ------------------------------------------------------------------


NOT_MAPPED_BY_ORGANIZATIONS = (
    "Only the installation's administrators map the identity provider's groups: the provider serves every "
    "organization, so a group mapped by one could pull in another's people."
)


def map_group(
    actor: User,
    organization: Organization,
    *,
    group: str,
    role: str,
    team: Team | None = None,
    http: HttpRequest | None = None,
) -> GroupMapping:
    """Members of the provider's `group` get `role` (in `team` for a team role) at their next sign-in."""
    policy.require(
        actor, "group_mapping.set", organization, NOT_MAPPED_BY_ORGANIZATIONS
    )  # GroupMapping.Tenancy says why
    group = (group or "").strip()
    if not group:
        raise ValidationError({"group": "Name the group exactly as the identity provider sends it."})
    if len(group) > 200:
        raise ValidationError({"group": message_of(check_max_length, group, 200)})
    role_value = _role_in(organization, role, team)
    try:
        with transaction.atomic():
            mapping = GroupMapping.objects.create(organization=organization, group=group, team=team, role=role_value)
            audit.record(
                "group_mapping.created",
                actor=actor,
                target=mapping,
                changes={"group": group, "role": role_value.value, "team": team.name if team else None},
                request=http,
            )
    except IntegrityError:
        where = team.name if team else f"{organization.name} as {role_value.label.lower()}"
        raise ValidationError({"group": f"The group {group!r} is already mapped in {where}."}) from None
    return mapping


def unmap_group(actor: User, mapping: GroupMapping, *, http: HttpRequest | None = None) -> None:
    """Remove a mapping; the roles it granted go at each member's next sign-in."""
    policy.require(actor, "group_mapping.set", mapping, NOT_MAPPED_BY_ORGANIZATIONS)
    with transaction.atomic():
        audit.record(
            "group_mapping.removed",
            actor=actor,
            target=mapping,
            changes={"group": mapping.group, "role": mapping.role, "team": mapping.team.name if mapping.team else None},
            request=http,
        )
        mapping.delete()


# --- Service accounts -----------------------------------------------------------------------------------


def create_service_account(
    actor: User,
    team: Team,
    *,
    name: str,
    scope: str,
    expires_in_days: int | None = None,
    http: HttpRequest | None = None,
) -> tuple[ServiceAccount, str]:
    """A service account of `team` and its token; returns the account and the raw token, shown once."""
    policy.require(actor, "service_account.create", team)
    if ServiceAccount.objects.filter(user=actor).exists():
        raise PermissionDenied("A service account may not create service accounts.")
    name = (name or "").strip()
    if not name:
        raise ValidationError({"name": "Give the account a name, e.g. the pipeline or tool that will use it."})
    if len(name) > 80:
        raise ValidationError({"name": message_of(check_max_length, name, 80)})
    try:
        scope_value = ServiceAccount.Scope(scope)
    except ValueError:
        choices = ", ".join(ServiceAccount.Scope.values)
        raise ValidationError({"scope": f"{scope!r} is not a scope; use one of {choices}."}) from None
    days = _token_days(expires_in_days)
    if ServiceAccount.objects.filter(team=team, name=name, revoked_at=None).exists():
        raise ValidationError({"name": f"Team {team.name} already has a service account named {name!r}."})
    users = get_user_model().objects
    base = f"sa-{team.slug}-{slugify(name) or 'account'}"[:140]
    username, number = base, 1
    while users.filter(username__iexact=username).exists():
        number += 1
        username = f"{base}-{number}"
    raw, key_hash, hint = ApiToken.generate()
    try:
        with transaction.atomic():
            user = users.create_user(username, first_name=name[:150])
            user.set_unusable_password()
            user.save(update_fields=["password"])
            account = ServiceAccount.objects.create(
                team=team, user=user, name=name, scope=scope_value, created_by=actor
            )
            Membership.objects.create(
                user=user,
                organization_id=team.organization_id,
                team=team,
                role=account.role,
                source=Membership.Source.SERVICE_ACCOUNT,
            )
            token = ApiToken.objects.create(
                user=user, name=name, key_hash=key_hash, hint=hint, expires_at=timezone.now() + timedelta(days=days)
            )
            audit.record(
                "service_account.created",
                actor=actor,
                target=account,
                changes={
                    "name": name,
                    "scope": scope_value.value,
                    "username": username,
                    "token": hint,
                    "expires_at": token.expires_at.isoformat() if token.expires_at else None,
                },
                request=http,
            )
    except IntegrityError:  # the same name (or username) taken meanwhile by another request
        raise ValidationError({"name": f"Team {team.name} already has a service account named {name!r}."}) from None
    return account, raw


def revoke_service_account(actor: User, account: ServiceAccount, *, http: HttpRequest | None = None) -> None:
    """Revoke the account: its token stops working at once and its role in the team goes. Twice is harmless."""
    policy.require(actor, "service_account.revoke", account)
    now = timezone.now()
    with transaction.atomic():
        if not ServiceAccount.objects.filter(pk=account.pk, revoked_at=None).update(revoked_at=now):
            return
        account.revoked_at = now
        ApiToken.objects.filter(user_id=account.user_id, revoked_at=None).update(revoked_at=now)
        get_user_model().objects.filter(pk=account.user_id).update(is_active=False)
        Membership.objects.filter(user_id=account.user_id).delete()
        audit.record(
            "service_account.revoked", actor=actor, target=account, changes={"name": account.name}, request=http
        )


#: How finely a token's last use is kept: writing it on every request would turn each read into a write.
LAST_USED_RESOLUTION = timedelta(minutes=1)
#: How long a revoked or expired token stays listed (its owner sees what happened to it) before it is deleted.
TOKEN_RETENTION = timedelta(days=90)


def use_is_news(last_used_at: datetime | None, now: datetime) -> bool:
    """Whether a token's use at ``now`` is worth writing down (``LAST_USED_RESOLUTION``)."""
    return last_used_at is None or now - last_used_at > LAST_USED_RESOLUTION


def note_token_use(token: ApiToken) -> None:
    """Record that ``token`` was just used, to the minute (``LAST_USED_RESOLUTION``)."""
    now = timezone.now()
    if use_is_news(token.last_used_at, now):
        ApiToken.objects.filter(pk=token.pk).update(last_used_at=now)


def expire_tokens() -> int:
    """Delete tokens revoked or expired more than ``TOKEN_RETENTION`` ago; how many went."""
    cutoff = timezone.now() - TOKEN_RETENTION
    deleted, _ = ApiToken.objects.filter(Q(revoked_at__lt=cutoff) | Q(expires_at__lt=cutoff)).delete()
    return deleted
