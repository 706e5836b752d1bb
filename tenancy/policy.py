"""The one permission policy for changes: who may do what to which object, declared in one table.

Reads have one scoping path (`Model.objects.for_user(user, Action.VIEW)`, `tenancy.scoping`); changes have
this one. Each permission (``"quota.set"``, ``"job.cancel"``, …) names, in `PERMISSIONS`, the roles that grant
it and where they must be held, relative to the object asked about:

- ``team``: roles held in the object's team (a researcher or lead of it). An object with no team (an
  organization, a cluster, an organization-wide role) is reached by none of them;
- ``org``: organization-wide roles (finance, admin) held over the object's organization;
- ``owner``: the object's owner (the user id in that attribute, e.g. a job's submitter), while they hold
  one of ``owner_team`` in its team (an owner who has left the team keeps nothing);
- ``superuser``: whether the installation's administrators may (they may, unless the entry says not).

Where an object's team and organization are is read from its model's nested ``Tenancy`` declaration (the
same ``team_field`` and ``org_field`` paths `for_user` filters by). Ask with `can` (a bool), `require`
(raises ``PermissionDenied`` with the entry's message, or the caller's), `granted` (which of several
permissions, for a page that offers some controls and not others) and `permitted` (a queryset narrowed to
the objects the user may change). Each call reads the user's memberships in the object's organization once.

No role is compared anywhere else (``tests/tenancy/test_policy.py`` checks the code for role queries outside this
module), and the authorization matrix (``tests/authz``) computes its expected answers from this table.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

from django.core.exceptions import PermissionDenied
from django.db import models
from django.db.models import Q

from tenancy.models import Membership
from tenancy.scoping import Role, TenancyRules

if TYPE_CHECKING:
    from django.http import HttpRequest

    from common.types import AnyUser

QS = TypeVar("QS", bound=models.QuerySet[Any])

R, L, F, A, P = Role.RESEARCHER, Role.LEAD, Role.FINANCE, Role.ADMIN, Role.PROCUREMENT
NOBODY: frozenset[Role] = frozenset()


@dataclass(frozen=True)
class Grant:
    """Who holds one permission (see the module's docstring); ``denied`` is `require`'s message, formatted
    with the object as ``obj``."""

    team: frozenset[Role] = NOBODY
    org: frozenset[Role] = NOBODY
    owner: str | None = None
    owner_team: frozenset[Role] = NOBODY
    superuser: bool = True
    denied: str = "You may not do this."

    def decide(self, team_roles: Iterable[Role], org_roles: Iterable[Role], *, owns: bool = False) -> bool:
        """The answer for someone holding ``team_roles`` in the object's team and ``org_roles`` over its
        organization, who ``owns`` it or not (the authorization matrix asks this of its columns)."""
        team_roles = set(team_roles)
        if self.team & team_roles or self.org & set(org_roles):
            return True
        if self.owner is None or not owns:
            return False
        return not self.owner_team or bool(self.owner_team & team_roles)


def grant(*roles: Role, team: Iterable[Role] = (), denied: str = "You may not do this.", **rest: Any) -> Grant:
    """``grant(A, team=[L])``: organization roles first, then the team roles."""
    return Grant(team=frozenset(team), org=frozenset(roles), denied=denied, **rest)


# --- the table ---------------------------------------------------------------------------------------------
# Objects named in the comments are what the permission is asked of.

PERMISSIONS: dict[str, Grant] = {
    # Tenancy: teams, projects, memberships, service accounts, the provider's groups, tokens
    "team.create": grant(A, denied="You may not create teams (organization admins only)."),  # an Organization
    "project.create": grant(A, team=[L], denied="You may not create projects in {obj.name}."),  # a Team
    # A Team (a team role), or an Organization (an organization-wide role: admins only).
    "member.add": grant(A, team=[L], denied="You may not add members to {obj.name}."),
    # An Organization: add accounts that belong to no organization yet (a lead adds the organization's people).
    "member.add_newcomer": grant(A),
    "member.role.set": grant(A, team=[L], denied="You may not change roles in this team."),  # a Membership
    "member.remove": grant(A, team=[L], denied="You may not remove this role."),  # a Membership
    # An Organization or a GroupMapping: the installation's administrators only (GroupMapping.Tenancy says why).
    "group_mapping.set": grant(),
    "identity.view": grant(A),  # an Organization: its mappings, and where each role comes from
    "service_account.create": grant(  # a Team
        A, team=[L], denied="You may not create service accounts of {obj.name} (its leads and admins only)."
    ),
    "service_account.revoke": grant(  # a ServiceAccount
        A, team=[L], denied="You may not revoke service accounts of {obj.team.name}."
    ),
    "token.revoke": Grant(owner="user_id", superuser=False, denied="You may revoke only your own tokens."),
    "audit.read": grant(A, denied="Only organization admins read the audit log."),  # an Organization
    # An Organization: its teams' work (teams, jobs, clusters, costs): every role but procurement's.
    "work.read": grant(A, F, team=[R, L], denied="Procurement plans capacity without seeing the teams' work."),
    "workers.view": grant(A),
    # An Organization: its service level objectives and error budgets (the SLO page).
    "slo.view": grant(
        A, denied="Only organization admins see the service level objectives."
    ),  # an Organization: whether the background workers report (the home page)
    # Governance: quotas, queue policies, cohorts, tiers, member limits, budgets
    "queue.create": grant(A, team=[L], denied="Only a lead of {obj} or an admin may give its projects a queue."),
    # A Queue (or its Team, or an Organization's teams): a team's own quota and borrowing limit (the admin), ...
    "quota.set": grant(A, denied="Only a lead of {obj.team} or an admin may change its quotas."),
    # ... a project queue's sub-quota, and how much of the team's quota others may borrow (its lead too).
    "quota.project.set": grant(A, team=[L], denied="Only a lead of {obj.team} or an admin may change its quotas."),
    "quota.lend": grant(A, team=[L], denied="Only a lead of {obj.team} or an admin may change its quotas."),
    "queue.policy.set": grant(A, denied="Only a lead of {obj.team} or an admin may change its queues."),  # a Queue
    "queue.flavor_order.set": grant(A, team=[L], denied="Only a lead of {obj.team} or an admin may change its queues."),
    "cohort.set": grant(A, denied="Only an organization admin may shape the cohort tree."),  # Organization, Cohort
    "cohort.quota.set": grant(A, denied="Only an organization admin may change a cohort's quota."),  # a Cohort
    "tier.set": grant(A, denied="Only an organization admin may change priority tiers."),  # an Organization
    "fair_share.set": grant(A, denied="Only an organization admin may change how fair sharing remembers."),  # an Org
    # A Team: ask for a reservation or more quota, withdraw a request (ColdFront's allocation requests) ...
    "capacity.request": grant(A, team=[L], denied="Only a lead of {obj} or an admin may ask for capacity for it."),
    # ... an Organization: approve or refuse them.
    "capacity.decide": grant(A, denied="Only an organization admin may approve or refuse capacity requests."),
    "member_limit.set": grant(A, team=[L], denied="Only a lead of {obj} or an admin may set its members' limits."),
    "budget.set": grant(A, denied="Team {obj}'s budget is set by an organization admin."),  # a Team
    "budget.project.set": grant(  # a Team
        A, team=[L], denied="Only a lead of {obj} or an admin may set its projects' budgets."
    ),
    "quota.org.view": grant(A, F),  # an Organization: its quotas and budgets page
    # A Team: the notification defaults of its members (each user's own choices need no permission).
    "notification.defaults.set": grant(
        A, team=[L], denied="Only a lead of {obj} or an admin may set its notification defaults."
    ),
    # Jobs
    "job.submit": grant(A, team=[R, L], superuser=False, denied="You may not submit jobs to team {obj}."),  # a Team
    "job.change": grant(A, team=[R, L], denied="You may not cancel this job."),  # a Job: cancel, clone
    "job.cancel": grant(  # a Job: its owner, a lead of its team, an admin
        A,
        team=[L],
        owner="submitted_by_id",
        owner_team=frozenset({R, L}),
        denied="Only the job's owner, the team's lead or an admin may cancel it.",
    ),
    # A JobArray: cancel its tasks, requeue its failed ones (its owner, a lead of its team, an admin).
    "array.cancel": grant(
        A,
        team=[L],
        owner="submitted_by_id",
        owner_team=frozenset({R, L}),
        denied="Only the array's owner, the team's lead or an admin may cancel it.",
    ),
    "array.requeue": grant(
        A,
        team=[L],
        owner="submitted_by_id",
        owner_team=frozenset({R, L}),
        denied="Only the array's owner, the team's lead or an admin may requeue its tasks.",
    ),
    # A Job (an interactive session): only its submitter, while in its team: a notebook is a shell as them.
    "job.session.open": Grant(
        owner="submitted_by_id",
        owner_team=frozenset({R, L}),
        superuser=False,
        denied="Only the person who started session #{obj.pk} may open it: it runs as them.",
    ),
    "job.preempt": grant(A, denied="Only an admin of {obj.team.organization} may preempt a job."),
    "job.requeue": grant(A, denied="Only an admin of {obj.team.organization} may requeue a job."),
    # Services (serving): a team's members create them (their replicas are jobs submitted as the creator); the
    # creator, a lead of the team or an admin changes, scales, stops, starts and rolls one back.
    "service.create": grant(A, team=[R, L], superuser=False, denied="You may not create services in team {obj}."),
    "service.change": grant(  # a Service
        A,
        team=[L],
        owner="created_by_id",
        owner_team=frozenset({R, L}),
        denied="Only the service's creator, the team's lead or an admin may change {obj.name}.",
    ),
    # The model registry: a team's models and their versions (docs/models.md)
    "model.create": grant(A, team=[R, L], denied="You may not create models of team {obj}."),  # a Team
    "model.publish": grant(  # a Model: publish a version of it
        A, team=[R, L], denied="You may not publish versions of model {obj.name}."
    ),
    "model.delete": grant(  # a Model, with all its versions
        A, team=[L], denied="Only a lead of {obj.team} or an admin may delete model {obj.name}."
    ),
    # Clusters and nodes
    "cluster.create": grant(A, denied="Only organization admins register clusters."),  # an Organization
    "cluster.change": grant(A, denied="Only admins of {obj.organization} change its clusters."),  # a Cluster
    # An Organization or a Cluster: a simulated cluster runs its replicas' programs on this host, so only the
    # installation's operators register or change one (clusters/backends/simulated/sandbox.py).
    "cluster.simulated.set": grant(
        denied="Only the installation's operators (superusers) register or change a simulated cluster: its service "
        "replicas run programs on the Quartermaster host."
    ),
    "node.drain": grant(A, denied="You may not drain nodes of {obj.cluster}."),  # a Node: drain and resume
    "maintenance.plan": grant(A, denied="You may not plan maintenance on {obj}."),  # a Cluster
    "probe_token.issue": grant(A, denied="You may not issue probe tokens for {obj}."),  # a Cluster
    "probe_token.revoke": grant(  # a ProbeToken
        A, denied="Only organization admins revoke the probe tokens of {obj.cluster}."
    ),
    # Edge devices and rollouts (edge/): a team's leads and the organization's admins manage its fleet
    "device.group.create": grant(A, team=[L], denied="Only a lead of {obj} or an admin may add device groups."),
    "device.token.issue": grant(  # a DeviceGroup
        A, team=[L], denied="Only a lead of {obj.team} or an admin may issue enrolment tokens."
    ),
    "device.revoke": grant(A, team=[L], denied="Only a lead of {obj.team} or an admin may revoke devices."),
    "rollout.start": grant(  # a DeviceGroup
        A, team=[L], denied="Only a lead of {obj.team} or an admin may roll out to its devices."
    ),
    "rollout.control": grant(  # a Rollout: pause, resume, cancel, roll back
        A, team=[L], denied="Only a lead of {obj.team} or an admin may change this rollout."
    ),
    # Billing
    "efficiency.read": grant(  # a Team: its least efficient jobs (GPU utilization)
        A, F, team=[L], denied="Only a lead of {obj}, finance or an admin sees its jobs' efficiency."
    ),
    "finance.read": grant(A, F),  # an Organization: every team's costs, the fleet, the meter
    "forecast.read": grant(  # an Organization: demand forecasts, the capacity plan (procurement sees no jobs)
        A, F, P, denied="Capacity forecasts are for finance, procurement and organization admins."
    ),
    "price.set": grant(  # an Organization, a Price or an Overhead
        A, F, denied="Only finance or an organization admin may change the price book."
    ),
    "period.close": grant(  # an Organization: close a month of costs, or reopen one with a reason
        A, F, denied="Only finance or an organization admin may close or reopen a month."
    ),
    "capacity.plan": grant(  # an Organization, a CapacityChange: orders, retirements, reserved commitments
        A, F, P, denied="Only finance, procurement or an organization admin may change the capacity plan."
    ),
    "whatif.run": grant(  # an Organization
        A, F, P, denied="Capacity what-ifs are for the organization's finance staff, procurement and admins."
    ),
}


# --- asking ------------------------------------------------------------------------------------------------


def _rules(model: type[models.Model]) -> type[TenancyRules]:
    rules: type[TenancyRules] = getattr(model, "Tenancy", TenancyRules)
    return rules


def _id_at(obj: Any, path: str | None) -> int | None:
    """The id at the end of a ``Tenancy`` path (``"team__organization"``: ``obj.team.organization_id``)."""
    if path is None:
        return None
    *hops, last = path.split("__")
    for hop in hops:
        obj = getattr(obj, hop)
        if obj is None:
            return None
    if last == "pk":
        return int(obj.pk)
    value = getattr(obj, f"{last}_id")
    return None if value is None else int(value)


def scope_of(obj: models.Model) -> tuple[int | None, int | None]:
    """The organization and team (None for none) of ``obj``, by its model's ``Tenancy`` declaration."""
    rules = _rules(type(obj))
    return _id_at(obj, rules.org_field), _id_at(obj, rules.team_field)


def _active(user: AnyUser | None) -> bool:
    return user is not None and bool(user.is_authenticated) and bool(user.is_active)


def granted(user: AnyUser | None, obj: models.Model, *permissions: str) -> frozenset[str]:
    """Which of ``permissions`` ``user`` holds on ``obj``, from one read of their memberships."""
    grants = {name: PERMISSIONS[name] for name in permissions}  # an unknown name is a KeyError, not a "no"
    if not _active(user):
        return frozenset()
    assert user is not None
    superuser = bool(getattr(user, "is_superuser", False))
    by_role = any(g.team or g.org or g.owner_team for g in grants.values())
    held: list[tuple[str, int | None]] = []
    org_id, team_id = scope_of(obj) if by_role else (None, None)
    if org_id is not None and not (superuser and all(g.superuser for g in grants.values())):
        held = list(Membership.objects.filter(user=user.pk, organization=org_id).values_list("role", "team_id"))
    team_roles = {Role(role) for role, team in held if team is not None and team == team_id}
    org_roles = {Role(role) for role, team in held if team is None}
    answer = set()
    for name, rule in grants.items():
        owns = rule.owner is not None and getattr(obj, rule.owner) == user.pk
        if (superuser and rule.superuser) or rule.decide(team_roles, org_roles, owns=owns):
            answer.add(name)
    return frozenset(answer)


def can(user: AnyUser | None, permission: str, obj: models.Model) -> bool:
    """Whether ``user`` may ``permission`` on ``obj``."""
    return permission in granted(user, obj, permission)


def require(user: AnyUser | None, permission: str, obj: models.Model, message: str | None = None) -> None:
    """``PermissionDenied`` (with ``message``, else the table's) unless ``user`` may ``permission`` on ``obj``."""
    if not can(user, permission, obj):
        raise refusal(permission, obj, message)


def refusal(permission: str, obj: models.Model, message: str | None = None) -> PermissionDenied:
    """The ``PermissionDenied`` that `require` raises: ``message``, else the table's for ``obj``."""
    return PermissionDenied(message if message is not None else PERMISSIONS[permission].denied.format(obj=obj))


def permitted(user: AnyUser | None, permission: str, queryset: QS) -> QS:
    """The rows of ``queryset`` on which ``user`` may ``permission`` (for pages listing what one may change)."""
    rule = PERMISSIONS[permission]
    if not _active(user):
        return queryset.none()
    assert user is not None
    if getattr(user, "is_superuser", False) and rule.superuser:
        return queryset
    rules = _rules(queryset.model)
    mine = Membership.objects.filter(user=user.pk)
    scope = Q(**{f"{rules.org_field}__in": mine.filter(team=None, role__in=sorted(rule.org)).values("organization")})
    if rules.team_field is not None:
        scope |= Q(**{f"{rules.team_field}__in": mine.filter(role__in=sorted(rule.team)).values("team")})
        if rule.owner is not None:
            owned = mine.filter(role__in=sorted(rule.owner_team)).values("team")
            scope |= Q(**{rule.owner: user.pk, f"{rules.team_field}__in": owned})
    if rule.owner is not None and not rule.owner_team:
        scope |= Q(**{rule.owner: user.pk})
    return queryset.filter(scope)


def anywhere(user: AnyUser | None, permission: str, roles: set[Role] | None = None) -> bool:
    """Whether ``user`` holds ``permission`` over some object at all (which links the navigation shows): a
    role that grants it, in any team or organization (``roles``: theirs, if known already); a superuser,
    always."""
    if not _active(user):
        return False
    assert user is not None
    if getattr(user, "is_superuser", False):
        return True
    rule = PERMISSIONS[permission]
    return bool((roles_of(user) if roles is None else roles) & (rule.team | rule.org | rule.owner_team))


def roles_of(user: AnyUser | None) -> set[Role]:
    """Every role ``user`` holds, anywhere (the badges beside their name)."""
    if user is None or not user.is_authenticated:
        return set()
    return {Role(role) for role in Membership.objects.filter(user=user.pk).values_list("role", flat=True)}


def members(team: models.Model, *roles: Role) -> models.QuerySet[Membership]:
    """The memberships of ``team`` with one of ``roles`` (whom a team's news goes to: its leads, for budget
    alerts)."""
    return Membership.objects.filter(team=team.pk, role__in=sorted(roles))


def request_roles(request: HttpRequest) -> set[Role]:
    """The signed-in user's roles, computed once per request."""
    if not hasattr(request, "_qm_roles"):
        request._qm_roles = roles_of(request.user)  # type: ignore[attr-defined]
    roles: set[Role] = request._qm_roles  # type: ignore[attr-defined]
    return roles
