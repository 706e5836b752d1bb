"""Governing the fleet: who may change which quota or queue policy, what a valid change is, and its history.

Who may change what (docs/scheduling.md §Quotas and borrowing; the permissions are tenancy/policy.py's,
``quota_fields`` and ``policy_fields`` turn them into the fields one may change):
- organization admins shape cohorts (their quotas and tree) and the teams' quotas (nominal and borrowing
  limit of a team's queue), the queues' preemption policy and fair-sharing weight, and the priority tiers
  (``set_tier``: value, preemptible or not, grace period, which teams may use each);
- a team lead splits the team's quota among its projects (each project with a sub-quota gets a queue of
  its own), sets how much of the team's quota others may borrow (its lending limit), and chooses the
  flavor fallback order of the team's queues;
- researchers and finance only read.

A change is validated as a whole (``ValidationError`` naming each bad field, nothing written), takes effect
at the next placement cycle (the loop is woken), is recorded in the audit log and kept as a
``QuotaChange`` with who, why, and the values before and after.

How project sub-quotas reach the engine (``snapshot.governance``): a team with project queues becomes a
cohort holding the team's quota; the projects' queues and the team's own queue sit under it, the team's
queue holding what the projects were not given. Projects lend each other what they do not use, and the
team as a whole borrows and lends as its admin-set limits say.

Size: every change to the quota tree (quotas, project shares, queue policies, cohorts, tiers, member limits) with
its checks and its history row; the changes share ``record`` (the change with history) and the checks, and would
split by object (tiers, cohorts) next.
"""

from __future__ import annotations

from decimal import Decimal, InvalidOperation
from typing import TYPE_CHECKING, Any

from django.core.exceptions import PermissionDenied, ValidationError
from django.db import transaction
from django.db.models import Sum
from django.utils import timezone

from clusters.models import AcceleratorType
from common.validation import REQUIRED, check_max_length, message_of
from governance import placed
from governance.actions import changed
from governance.models import Cohort, MemberLimit, PriorityTier, Queue, Quota, QuotaChange, WatchAction
from tenancy import policy
from tenancy.actions import audit
from tenancy.models import Membership, Organization, Project, Team

if TYPE_CHECKING:
    from django.contrib.auth.models import User
    from django.http import HttpRequest

#: The largest quota anyone may set, in people's units (accelerators, cores, GiB).
MAX_QUOTA = Decimal(1_000_000)
#: The longest reason of a change (kept in the quota history).
MAX_REASON = 2000
LIMITS = ("nominal", "borrowing_limit", "lending_limit")
#: A limit not given to ``set_quota``: keep the current value (the partial updates of the pages and the API).
KEEP: Any = object()
PLACES_WORDS = {0: "zero", 1: "one", 2: "two", 3: "three"}
RESOURCE_WORDS = {r.value: r.label for r in Quota.Resource}


def check_reason(reason: str, errors: dict[str, str]) -> str:
    """The reason of a change, stripped; what is wrong with it in ``errors["reason"]``."""
    reason = (reason or "").strip()
    if not reason:
        errors["reason"] = "Say why: the reason is kept in the quota history."
    elif len(reason) > MAX_REASON:
        errors["reason"] = message_of(check_max_length, reason, MAX_REASON)
    return reason


def find_flavor(organization_id: int, name: Any, errors: dict[str, str]) -> AcceleratorType | None:
    """The organization's accelerator type ``name``; else None, with the known ones in ``errors["flavor"]``."""
    found: AcceleratorType | None = AcceleratorType.objects.filter(organization=organization_id, name=name).first()
    if found is None:
        known = AcceleratorType.objects.filter(organization=organization_id).values_list("name", flat=True)
        errors["flavor"] = f"Unknown accelerator type {name!r}. Known: {', '.join(known) or 'none'}."
    return found


def check_amount(
    value: Any, field: str, errors: dict[str, str], *, required: bool, most: Decimal = MAX_QUOTA, places: int = 3
) -> Decimal | None:
    """``value`` as an amount of at least zero, at most ``most``, with at most ``places`` decimals; else None,
    with what is wrong in ``errors[field]``."""
    if value is None or value == "":
        if required:
            errors[field] = REQUIRED
        return None
    try:
        amount = Decimal(str(value))
    except (InvalidOperation, ValueError):
        errors[field] = f"{value!r} is not a number."
        return None
    if not amount.is_finite() or amount < 0:
        errors[field] = "Must be zero or more."
    elif amount > most:
        errors[field] = f"Must be at most {most}."
    elif amount != amount.quantize(Decimal(1).scaleb(-places)):
        errors[field] = f"At most {PLACES_WORDS.get(places, places)} decimal places."
    else:
        return amount
    return None


def record(
    actor: User,
    *,
    organization: Organization,
    team: Team | None,
    queue: Queue | None,
    cohort: Cohort | None,
    kind: str,
    subject: str,
    before: dict[str, Any],
    after: dict[str, Any],
    reason: str,
    target: Any,
    action: str,
    http: HttpRequest | None,
) -> QuotaChange:
    """History and audit of one change, inside its transaction; the loop is woken after the commit."""
    change = QuotaChange.objects.create(
        organization=organization,
        team=team,
        queue=queue,
        cohort=cohort,
        kind=kind,
        subject=subject[:200],
        before=before,
        after=after,
        reason=reason,
        actor=actor,
        actor_name=actor.get_username(),
        created_at=timezone.now(),
    )
    changes = {k: [before.get(k), after.get(k)] for k in sorted(set(before) | set(after))}
    audit.record(
        action, actor=actor, target=target, organization=organization, changes=changes, reason=reason, request=http
    )
    changed.send(sender=QuotaChange, organization=organization)
    return change


def _text(value: Decimal | None) -> str | None:
    return None if value is None else format(value.normalize(), "f")


# ------------------------------------------------------------------------------------------------ quotas


def project_queue(actor: User, project: Project, *, reason: str, http: HttpRequest | None = None) -> Queue:
    """The queue of ``project`` for a sub-quota, made on first use by the team's lead or an admin."""
    team = project.team
    policy.require(actor, "queue.create", team)
    existing: Queue | None = Queue.objects.filter(team=team, project=project).first()
    if existing is not None:
        return existing
    errors: dict[str, str] = {}
    reason = check_reason(reason, errors)
    if project.archived:
        errors["project"] = f"Project {project.name} is archived."
    if errors:
        raise ValidationError(errors)
    with transaction.atomic():
        queue = Queue.objects.create(team=team, project=project, name=f"{team.slug}/{project.slug}")
        record(
            actor,
            organization=team.organization,
            team=team,
            queue=queue,
            cohort=None,
            kind=QuotaChange.Kind.QUEUE,
            subject=f"queue {queue.name} for project {project.name}",
            before={},
            after={"queue": queue.name},
            reason=reason,
            target=queue,
            action="queue.created",
            http=http,
        )
    return queue


def set_quota(
    actor: User,
    owner: Queue | Cohort,
    *,
    flavor: str,
    resource: str = Quota.Resource.ACCELERATORS,
    nominal: Any,
    borrowing_limit: Any = None,
    lending_limit: Any = None,
    reason: str,
    http: HttpRequest | None = None,
) -> QuotaChange | None:
    """Set (or, with ``nominal=None``, remove) the quota of ``owner`` for one (flavor, resource). Amounts are in
    people's units: accelerators, CPU cores, GiB of memory. Limits left empty mean unlimited; ``KEEP`` keeps
    the current value. Returns the history entry, or None when nothing changed."""
    organization = owner.organization if isinstance(owner, Cohort) else owner.team.organization
    _refuse_fields(actor, owner, set())
    given = (nominal, borrowing_limit, lending_limit)
    if any(value is KEEP for value in given):
        owned: dict[str, Any] = {"cohort" if isinstance(owner, Cohort) else "queue": owner}
        current = Quota.objects.filter(**owned, flavor__name=flavor, resource=resource).first()
        nominal, borrowing_limit, lending_limit = (
            getattr(current, name, None) if value is KEEP else value for name, value in zip(LIMITS, given, strict=True)
        )
    errors: dict[str, str] = {}
    reason = check_reason(reason, errors)
    if resource not in Quota.Resource.values:
        errors["resource"] = f"Unknown resource {resource!r}. Known: {', '.join(Quota.Resource.values)}."
    accelerator_type = find_flavor(organization.pk, flavor, errors)
    removing = nominal is None or nominal == ""
    new = {
        "nominal": check_amount(nominal, "nominal", errors, required=False),
        "borrowing_limit": None
        if removing
        else check_amount(borrowing_limit, "borrowing_limit", errors, required=False),
        "lending_limit": None if removing else check_amount(lending_limit, "lending_limit", errors, required=False),
    }
    lend, nominal_amount = new["lending_limit"], new["nominal"]
    if lend is not None and nominal_amount is not None and lend > nominal_amount:
        errors["lending_limit"] = "A queue cannot lend more than its nominal quota."
    if errors:
        raise ValidationError(errors)
    assert accelerator_type is not None

    where: dict[str, Any] = {"flavor": accelerator_type, "resource": resource}
    where["cohort" if isinstance(owner, Cohort) else "queue"] = owner
    with transaction.atomic():
        row: Quota | None = Quota.objects.select_for_update().filter(**where).first()
        old: dict[str, Decimal | None] = {k: getattr(row, k) if row else None for k in LIMITS}
        changed = {k for k in LIMITS if old[k] != new[k]}
        if not changed:
            return None
        _refuse_fields(actor, owner, changed)
        if isinstance(owner, Queue):
            _check_split(owner, accelerator_type, resource, new["nominal"] or Decimal(0))
        if removing:
            if row is not None:
                row.delete()
        elif row is None:
            row = Quota.objects.create(**where, **new)
        else:
            for k, v in new.items():
                setattr(row, k, v)
            row.save(update_fields=list(LIMITS))
        words = RESOURCE_WORDS.get(resource, resource)
        subject = f"{'cohort' if isinstance(owner, Cohort) else 'queue'} {owner}: {accelerator_type.name} {words}"
        team = owner.team if isinstance(owner, Queue) else None
        return record(
            actor,
            organization=organization,
            team=team,
            queue=owner if isinstance(owner, Queue) else None,
            cohort=owner if isinstance(owner, Cohort) else None,
            kind=QuotaChange.Kind.QUOTA,
            subject=subject,
            before={k: _text(old[k]) for k in sorted(changed)},
            after={k: _text(new[k]) for k in sorted(changed)},
            reason=reason,
            target=owner,
            action="quota.changed",
            http=http,
        )


def quota_fields(actor: User, owner: Queue | Cohort) -> frozenset[str]:
    """The limits of ``owner``'s quotas that ``actor`` may change: all of them for an admin (and for the lead
    of a project's queue), the lending limit alone for the lead of a team's own queue, none otherwise. The
    one rule: ``set_quota`` refuses by it, and pages ask it which cells to offer."""
    if isinstance(owner, Cohort):
        return frozenset(LIMITS) if policy.can(actor, "cohort.quota.set", owner) else frozenset()
    held = policy.granted(actor, owner, "quota.set", "quota.project.set", "quota.lend")
    if "quota.set" in held or (owner.project_id is not None and "quota.project.set" in held):
        return frozenset(LIMITS)
    return frozenset({"lending_limit"}) if "quota.lend" in held else frozenset()


def _refuse_fields(actor: User, owner: Queue | Cohort, changed: set[str]) -> None:
    allowed = quota_fields(actor, owner)
    if not allowed:
        if isinstance(owner, Cohort):
            raise PermissionDenied("Only an organization admin may change a cohort's quota.")
        raise PermissionDenied(f"Only a lead of {owner.team} or an admin may change its quotas.")
    if changed - allowed:
        assert isinstance(owner, Queue)  # a cohort's quota is all or nothing
        raise PermissionDenied(
            f"Team {owner.team}'s own quota and borrowing limit are set by an organization admin; its lead sets how "
            "much of it others may borrow (the lending limit) and splits it among the team's projects."
        )


def _check_split(queue: Queue, flavor: AcceleratorType, resource: str, nominal: Decimal) -> None:
    """A project's sub-quotas together stay within the team's quota; the team's cannot drop below them."""
    projects = Quota.objects.filter(
        queue__team=queue.team_id, queue__project__isnull=False, flavor=flavor, resource=resource
    )
    words = f"{flavor.name} {RESOURCE_WORDS.get(resource, resource).lower()}"
    if queue.project_id is None:
        given = projects.aggregate(total=Sum("nominal"))["total"] or Decimal(0)
        if nominal < given:
            raise ValidationError(
                {"nominal": f"The team's projects hold {_text(given)} {words} of it; lower theirs first."}
            )
        return
    team_row = Quota.objects.filter(
        queue__team=queue.team_id, queue__project=None, flavor=flavor, resource=resource
    ).first()
    team_nominal = team_row.nominal if team_row is not None else Decimal(0)
    others = projects.exclude(queue=queue).aggregate(total=Sum("nominal"))["total"] or Decimal(0)
    if others + nominal > team_nominal:
        left = max(Decimal(0), team_nominal - others)
        raise ValidationError(
            {
                "nominal": f"Team {queue.team} has {_text(team_nominal)} {words}; its other projects hold "
                f"{_text(others)}, so at most {_text(left)} is left for this one."
            }
        )


def give_project_quota(
    actor: User,
    project: Project,
    *,
    flavor: str,
    resource: str = Quota.Resource.ACCELERATORS,
    nominal: Any,
    borrowing_limit: Any = None,
    lending_limit: Any = None,
    reason: str,
    http: HttpRequest | None = None,
) -> tuple[Queue, QuotaChange | None]:
    """Give ``project`` a sub-quota of its team's: its queue (made on first use, ``project_queue``) and the
    quota (``set_quota``), in one transaction, so a refused quota leaves no new queue behind."""
    with transaction.atomic():
        queue = project_queue(actor, project, reason=reason, http=http)
        change = set_quota(
            actor,
            queue,
            flavor=flavor,
            resource=resource,
            nominal=nominal,
            borrowing_limit=borrowing_limit,
            lending_limit=lending_limit,
            reason=reason,
            http=http,
        )
    return queue, change


# --------------------------------------------------------------------------------------- queue policies

#: Policy fields and who sets them: the lead the flavor order, an admin everything.
LEAD_POLICY = frozenset({"flavor_order"})
POLICY = ("flavor_order", "within_queue", "reclaim", "weight", "cohort")


def policy_fields(actor: User, queue: Queue) -> frozenset[str]:
    """The policy fields of ``queue`` that ``actor`` may change (``set_policy``'s rule): all for an admin, the
    flavor order for the team's lead, none otherwise."""
    held = policy.granted(actor, queue, "queue.policy.set", "queue.flavor_order.set")
    if "queue.policy.set" in held:
        return frozenset(POLICY)
    return LEAD_POLICY if "queue.flavor_order.set" in held else frozenset()


def set_policy(  # noqa: C901
    actor: User, queue: Queue, *, reason: str, http: HttpRequest | None = None, **fields: Any
) -> QuotaChange | None:
    """Change a queue's policy: ``flavor_order`` (accelerator type names), ``within_queue`` and ``reclaim``
    (preemption), ``weight`` (fair sharing), ``cohort`` (a Cohort or None). Returns None if nothing changed."""
    team, organization = queue.team, queue.team.organization
    allowed = policy_fields(actor, queue)
    if not allowed:
        policy.require(actor, "queue.flavor_order.set", queue)
    errors: dict[str, str] = {}
    reason = check_reason(reason, errors)
    if unknown := sorted(set(fields) - set(POLICY)):
        errors["__all__"] = f"Unknown policy field(s): {', '.join(unknown)}."
    new: dict[str, Any] = {}
    if "flavor_order" in fields:
        order = fields["flavor_order"]
        known = set(AcceleratorType.objects.filter(organization=organization).values_list("name", flat=True))
        if not isinstance(order, list | tuple) or not all(isinstance(x, str) for x in order):
            errors["flavor_order"] = "A list of accelerator type names."
        elif bad := [x for x in order if x not in known]:
            errors["flavor_order"] = (
                f"Unknown accelerator type(s): {', '.join(bad)}. Known: {', '.join(sorted(known))}."
            )
        elif len(set(order)) != len(order):
            errors["flavor_order"] = "Name each accelerator type once."
        else:
            new["flavor_order"] = list(order)
    for name, choices in (("within_queue", Queue.WithinQueue), ("reclaim", Queue.Reclaim)):
        if name in fields:
            if fields[name] not in choices.values:
                errors[name] = f"Choose one of: {', '.join(choices.values)}."
            else:
                new[name] = fields[name]
    if "weight" in fields:
        try:
            weight = float(fields["weight"])
        except (TypeError, ValueError):
            weight = float("nan")
        if not 0.01 <= weight <= 1000:
            errors["weight"] = "A fair-sharing weight between 0.01 and 1000."
        else:
            new["weight"] = weight
    if "cohort" in fields:
        cohort = fields["cohort"]
        if cohort is not None and (not isinstance(cohort, Cohort) or cohort.organization_id != organization.pk):
            errors["cohort"] = f"Not a cohort of {organization}."
        else:
            new["cohort"] = cohort
    if errors:
        raise ValidationError(errors)

    with transaction.atomic():
        locked = Queue.objects.select_for_update().get(pk=queue.pk)
        changed = {k for k, v in new.items() if getattr(locked, k) != v}
        if not changed:
            return None
        if changed - allowed:
            raise PermissionDenied(
                f"A team lead sets the flavor order; {', '.join(sorted(changed - LEAD_POLICY))} "
                "are set by an organization admin."
            )
        before = {k: _policy_value(getattr(locked, k)) for k in sorted(changed)}
        for k in changed:
            setattr(locked, k, new[k])
        locked.save(update_fields=sorted(changed))
        after = {k: _policy_value(getattr(locked, k)) for k in sorted(changed)}
        change = record(
            actor,
            organization=organization,
            team=team,
            queue=locked,
            cohort=None,
            kind=QuotaChange.Kind.POLICY,
            subject=f"queue {locked}: policy",
            before=before,
            after=after,
            reason=reason,
            target=locked,
            action="queue.policy_changed",
            http=http,
        )
    queue.refresh_from_db()
    return change


def _policy_value(value: Any) -> Any:
    return str(value) if isinstance(value, Cohort) else value


# ----------------------------------------------------------------------------------------------- cohorts


def create_cohort(
    actor: User,
    organization: Organization,
    *,
    name: str,
    parent: Cohort | None = None,
    reason: str,
    http: HttpRequest | None = None,
) -> Cohort:
    """A new node of the organization's cohort tree (admins)."""
    policy.require(actor, "cohort.set", organization)
    errors: dict[str, str] = {}
    reason = check_reason(reason, errors)
    name = (name or "").strip()
    if not name or len(name) > 80:
        errors["name"] = "A name of 1 to 80 characters."
    elif (
        Cohort.objects.filter(organization=organization, name=name).exists()
        or Queue.objects.filter(team__organization=organization, name=name).exists()
    ):
        errors["name"] = f"{organization} already has a cohort or queue named {name!r}."
    if parent is not None and parent.organization_id != organization.pk:
        errors["parent"] = f"Not a cohort of {organization}."
    if errors:
        raise ValidationError(errors)
    with transaction.atomic():
        cohort = Cohort.objects.create(organization=organization, name=name, parent=parent)
        record(
            actor,
            organization=organization,
            team=None,
            queue=None,
            cohort=cohort,
            kind=QuotaChange.Kind.COHORT,
            subject=f"cohort {name}",
            before={},
            after={"name": name, "parent": str(parent) if parent else None},
            reason=reason,
            target=cohort,
            action="cohort.created",
            http=http,
        )
    return cohort


def set_parent(
    actor: User, cohort: Cohort, parent: Cohort | None, *, reason: str, http: HttpRequest | None = None
) -> QuotaChange | None:
    """Move ``cohort`` under ``parent`` (None: a root), refusing cycles (admins)."""
    organization = cohort.organization
    policy.require(actor, "cohort.set", organization)
    errors: dict[str, str] = {}
    reason = check_reason(reason, errors)
    if parent is not None:
        if parent.organization_id != organization.pk:
            errors["parent"] = f"Not a cohort of {organization}."
        else:
            node: Cohort | None = parent
            while node is not None:
                if node.pk == cohort.pk:
                    errors["parent"] = f"{parent} is inside {cohort}: the tree would have a cycle."
                    break
                node = node.parent
    if errors:
        raise ValidationError(errors)
    if cohort.parent_id == (parent.pk if parent else None):
        return None
    with transaction.atomic():
        before = {"parent": str(cohort.parent) if cohort.parent else None}
        cohort.parent = parent
        cohort.save(update_fields=["parent"])
        return record(
            actor,
            organization=organization,
            team=None,
            queue=None,
            cohort=cohort,
            kind=QuotaChange.Kind.COHORT,
            subject=f"cohort {cohort}: parent",
            before=before,
            after={"parent": str(parent) if parent else None},
            reason=reason,
            target=cohort,
            action="cohort.moved",
            http=http,
        )


# ------------------------------------------------------------------------------------------ priority tiers

TIER_FIELDS = (
    "value",
    "preemptible",
    "grace_seconds",
    "failover_after",
    "on_straggler",
    "on_hang",
    "max_wait",
    "min_runtime",
    "max_disruption",
    "accepts_spot",
    "is_default",
    "teams",
)
#: The range of a tier's failover delay, in seconds (a minute to a week), as ``Cluster.failover_after``.
FAILOVER_RANGE = (60, 7 * 24 * 3600)
#: The range of a tier's bound on waiting, in seconds (ten minutes to thirty days).
MAX_WAIT_RANGE = (600, 30 * 24 * 3600)
#: The range of a tier's minimum runtime before preemption, in seconds (a minute to a week).
MIN_RUNTIME_RANGE = (60, 7 * 24 * 3600)
MAX_TIER_VALUE = 1_000_000


def set_tier(
    actor: User,
    organization: Organization,
    *,
    name: str,
    value: Any,
    preemptible: Any = True,
    grace_seconds: Any = 300,
    failover_after: Any = None,
    on_straggler: Any = WatchAction.NOTIFY,
    on_hang: Any = WatchAction.NOTIFY,
    max_wait: Any = None,
    min_runtime: Any = None,
    max_disruption: Any = None,
    accepts_spot: Any = False,
    teams: Any = (),
    is_default: Any = False,
    reason: str,
    http: HttpRequest | None = None,
) -> QuotaChange | None:
    """Create the priority tier ``name`` of ``organization``, or change it (admins). ``teams``: the teams that
    may use it (none: every team). ``failover_after``: seconds its jobs on a silent cluster wait before they
    are restarted elsewhere (None: each cluster's own delay). ``on_straggler``, ``on_hang``: what follows when
    one of its jobs is flagged (``WatchAction``). ``max_wait``: seconds its jobs should wait at most before they go
    ahead of its others and get a reservation first (None: no bound). ``min_runtime``: seconds its jobs run before
    they may be preempted; ``max_disruption``: accelerator-hours of its jobs' work preemptions may lose per hour
    (None: neither). ``accepts_spot``: its jobs run on spot capacity unless they say otherwise (a preemptible tier
    only). A new default tier takes over from the old one.
    Jobs already submitted keep their tier; the change orders them from the next placement cycle. Returns
    None if nothing changed."""
    policy.require(actor, "tier.set", organization)
    errors: dict[str, str] = {}
    reason = check_reason(reason, errors)
    name = (name or "").strip() if isinstance(name, str) else ""
    if not name or len(name) > 40:
        errors["name"] = "A name of 1 to 40 characters."
    new: dict[str, Any] = {}
    for field, low, high in (("value", -MAX_TIER_VALUE, MAX_TIER_VALUE), ("grace_seconds", 0, 24 * 3600)):
        raw = value if field == "value" else grace_seconds
        number = raw if isinstance(raw, int) and not isinstance(raw, bool) else _whole(raw)
        if number is None or not low <= number <= high:
            errors[field] = f"A whole number from {low} to {high}."
        new[field] = number
    new |= _tier_policy(failover_after, on_straggler, on_hang, errors)
    new["max_wait"] = _seconds_or_none(max_wait, MAX_WAIT_RANGE, "no bound", "max_wait", errors)
    new["min_runtime"] = _seconds_or_none(min_runtime, MIN_RUNTIME_RANGE, "no protection", "min_runtime", errors)
    cap = check_amount(max_disruption, "max_disruption", errors, required=False)
    new["max_disruption"] = _text(cap)
    for field, flag in (("preemptible", preemptible), ("is_default", is_default), ("accepts_spot", accepts_spot)):
        if not isinstance(flag, bool):
            errors[field] = "true or false."
        new[field] = flag
    if accepts_spot is True and preemptible is False:
        errors["accepts_spot"] = "Only a preemptible tier's jobs may run on spot capacity (the cloud may take it back)."
    chosen = list(teams or ())
    if not all(isinstance(t, Team) and t.organization_id == organization.pk for t in chosen):
        errors["teams"] = f"Teams of {organization} only."
    new["teams"] = sorted({t.slug for t in chosen if isinstance(t, Team)})
    if errors:
        raise ValidationError(errors)
    with transaction.atomic():
        tier = PriorityTier.objects.select_for_update().filter(organization=organization, name=name).first()
        before = _tier_values(tier) if tier is not None else {}
        changed = {k for k in TIER_FIELDS if before.get(k) != new[k]}
        if tier is not None and not changed:
            return None
        if new["is_default"]:
            PriorityTier.objects.filter(organization=organization, is_default=True).exclude(name=name).update(
                is_default=False
            )
        fields = {k: new[k] for k in TIER_FIELDS if k != "teams"} | {"max_disruption": cap}
        if tier is None:
            tier = PriorityTier.objects.create(organization=organization, name=name, **fields)
        else:
            for k, v in fields.items():
                setattr(tier, k, v)
            tier.save(update_fields=list(fields))
        tier.teams.set(chosen)
        keys = sorted(changed) if before else list(TIER_FIELDS)
        return record(
            actor,
            organization=organization,
            team=None,
            queue=None,
            cohort=None,
            kind=QuotaChange.Kind.TIER,
            subject=f"priority tier {name}",
            before={k: before[k] for k in keys if k in before},
            after={k: new[k] for k in keys},
            reason=reason,
            target=tier,
            action="tier.changed" if before else "tier.created",
            http=http,
        )


def _tier_policy(failover_after: Any, on_straggler: Any, on_hang: Any, errors: dict[str, str]) -> dict[str, Any]:
    """A tier's failover delay and what follows a straggler or a hang, checked (``errors`` by field)."""
    new: dict[str, Any] = {
        "failover_after": _seconds_or_none(
            failover_after, FAILOVER_RANGE, "each cluster's own", "failover_after", errors
        )
    }
    for field, action in (("on_straggler", on_straggler), ("on_hang", on_hang)):
        if action not in WatchAction.values:
            errors[field] = f"One of {', '.join(WatchAction.values)}."
        new[field] = action
    return new


def _seconds_or_none(raw: Any, bounds: tuple[int, int], none: str, field: str, errors: dict[str, str]) -> int | None:
    """A tier's optional number of seconds within ``bounds`` (None or "": not set; ``none`` says what that means)."""
    if raw is None or raw == "":
        return None
    number = _whole(raw) if not isinstance(raw, bool) else None
    low, high = bounds
    if number is None or not low <= number <= high:
        errors[field] = f"A whole number of seconds from {low} to {high}, or null for {none}."
    return number


def _whole(raw: Any) -> int | None:
    try:
        number = Decimal(str(raw).strip())
    except (InvalidOperation, ValueError):
        return None
    return int(number) if number.is_finite() and number == number.to_integral_value() else None


def _tier_values(tier: PriorityTier) -> dict[str, Any]:
    return {
        "value": tier.value,
        "preemptible": tier.preemptible,
        "grace_seconds": tier.grace_seconds,
        "failover_after": tier.failover_after,
        "on_straggler": tier.on_straggler,
        "on_hang": tier.on_hang,
        "max_wait": tier.max_wait,
        "min_runtime": tier.min_runtime,
        "max_disruption": _text(tier.max_disruption),
        "accepts_spot": tier.accepts_spot,
        "is_default": tier.is_default,
        "teams": sorted(tier.teams.values_list("slug", flat=True)),
    }


# ------------------------------------------------------------------------------------------ member limits


#: The code of the refusal of a limit below what is held (the API's ``confirm=true`` sets it anyway).
BELOW_USE = "below_use"


def set_member_limit(
    actor: User,
    team: Team,
    member: User,
    accelerators: Any,
    *,
    reason: str,
    confirm: bool = True,
    http: HttpRequest | None = None,
) -> QuotaChange | None:
    """Limit how many accelerators ``member``'s running jobs in ``team`` may hold at once (``accelerators``
    None or empty: no limit). The team's lead or an admin; the member must belong to the team. Jobs beyond
    it wait with reason ``member_limit``; running jobs are never stopped for it. Without ``confirm`` (the pages
    and the API ask for it), a limit below what the member's jobs hold now is refused with what they hold."""
    policy.require(actor, "member_limit.set", team)
    errors: dict[str, str] = {}
    reason = check_reason(reason, errors)
    amount = check_amount(accelerators, "accelerators", errors, required=False)
    if not Membership.objects.filter(user=member, team=team).exists():
        errors["member"] = f"{member.get_username()} is not a member of team {team}."
    if errors:
        raise ValidationError(errors)
    with transaction.atomic():
        row: MemberLimit | None = MemberLimit.objects.select_for_update().filter(team=team, user=member).first()
        old = row.accelerators if row is not None else None
        if old == amount:
            return None
        held = placed.member_holds(team, member)
        if not confirm and amount is not None and amount < held:
            raise ValidationError(
                {
                    "accelerators": ValidationError(
                        f"{member.get_username()}'s jobs hold {_text(held)} accelerators now, more than "
                        f"{_text(amount)}; they keep running, but no new job of theirs starts until they are under "
                        "it. Confirm to set it anyway.",
                        code=BELOW_USE,
                    )
                }
            )
        if amount is None:
            assert row is not None
            row.delete()
        elif row is None:
            MemberLimit.objects.create(team=team, user=member, accelerators=amount)
        else:
            row.accelerators = amount
            row.save(update_fields=["accelerators"])
        return record(
            actor,
            organization=team.organization,
            team=team,
            queue=None,
            cohort=None,
            kind=QuotaChange.Kind.MEMBER,
            subject=f"team {team}: limit of {member.get_username()}",
            before={"accelerators": _text(old)},
            after={"accelerators": _text(amount)},
            reason=reason,
            target=team,
            action="member_limit.changed",
            http=http,
        )


__all__ = [
    "KEEP",
    "check_amount",
    "check_reason",
    "create_cohort",
    "give_project_quota",
    "policy_fields",
    "project_queue",
    "quota_fields",
    "record",
    "set_member_limit",
    "set_parent",
    "set_policy",
    "set_quota",
    "set_tier",
]
