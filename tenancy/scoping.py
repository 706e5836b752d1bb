"""The one scoping path for tenant data: `Model.objects.for_user(user, action)`.

Every tenant-owned model uses `TenantQuerySet` and says, in a nested `Tenancy(TenancyRules)` class, where
its team and organization are (`team_field`, `org_field`) and which roles may do what (`policy`). Views,
the API and exports all go through `for_user`; no other code filters tenant data by membership.

Roles come from `Membership`: researchers and leads belong to one team; finance and admins hold their role
over a whole organization. A superuser (the raw Django admin) sees everything.
"""

from __future__ import annotations

import enum
from typing import TYPE_CHECKING, Any, Self

from django.db import models
from django.db.models import Q

if TYPE_CHECKING:
    from common.types import AnyUser


class Action(enum.StrEnum):
    VIEW = "view"
    CHANGE = "change"


class Role(models.TextChoices):
    RESEARCHER = "researcher", "Researcher"
    LEAD = "lead", "Team lead"
    FINANCE = "finance", "Finance"
    ADMIN = "admin", "Organization admin"
    PROCUREMENT = "procurement", "Procurement"

    @property
    def is_team_role(self) -> bool:
        return self in TEAM_ROLES


TEAM_ROLES = frozenset({Role.RESEARCHER, Role.LEAD})
ORG_ROLES = frozenset({Role.FINANCE, Role.ADMIN, Role.PROCUREMENT})
ALL_ROLES = TEAM_ROLES | ORG_ROLES
#: The roles that see the teams' work (jobs, usage, services, quotas): every role but procurement, which plans
#: capacity from forecasts and what-ifs without seeing anyone's jobs.
WORK_ROLES = TEAM_ROLES | frozenset({Role.FINANCE, Role.ADMIN})

# Who may do what to an ordinary team-owned object. Models with other rules give their own `policy`.
DEFAULT_POLICY: dict[Action, frozenset[Role]] = {
    Action.VIEW: WORK_ROLES,
    Action.CHANGE: frozenset({Role.LEAD, Role.ADMIN}),
}


class TenancyRules:
    """Defaults for a model's nested `Tenancy` declaration."""

    team_field: str | None = "team"
    org_field: str = "team__organization"
    policy: dict[Action, frozenset[Role]] = DEFAULT_POLICY


class TenantQuerySet(models.QuerySet[Any]):
    def for_user(self, user: AnyUser, action: Action) -> Self:
        """The rows `user` may act on with `action`; empty for anonymous or inactive users."""
        if not user.is_authenticated or not user.is_active:
            return self.none()
        if getattr(user, "is_superuser", False):
            return self.all()
        tenancy: type[TenancyRules] = getattr(self.model, "Tenancy", TenancyRules)
        roles = tenancy.policy.get(action, frozenset())
        mine = user.memberships.all()  # (through the relation: the model module imports this one)
        # Organization-wide roles reach every object of the organization.
        org_roles = roles & ORG_ROLES
        scope = Q(**{f"{tenancy.org_field}__in": mine.filter(role__in=org_roles).values("organization")})
        team_roles = roles & TEAM_ROLES
        if tenancy.team_field is None:
            # An organization-level object: team roles reach it through their team's organization.
            scope |= Q(**{f"{tenancy.org_field}__in": mine.filter(role__in=team_roles).values("organization")})
        else:
            scope |= Q(**{f"{tenancy.team_field}__in": mine.filter(role__in=team_roles).values("team")})
        return self.filter(scope)


#: The manager of every tenant-owned model: ``objects = TenantManager()`` gives ``Model.objects.for_user(...)``.
TenantManager = models.Manager.from_queryset(TenantQuerySet)


def can(user: AnyUser, action: Action, obj: models.Model) -> bool:
    """Whether `user` may act on `obj`: the same rule as `for_user`, asked of one object."""
    manager = type(obj)._default_manager
    return bool(manager.all().for_user(user, action).filter(pk=obj.pk).exists())  # type: ignore[attr-defined]
