"""Capacity requests (``CapacityRequest``): a team lead asks for a reservation or more quota, an organization
admin approves or refuses it with a reason, the lead may withdraw it, and ``settle`` ends what is over and tells
the team's leads ahead when a temporary quota or a reservation ends (docs/scheduling.md §Bookings).

Every step asks the permission policy first (``capacity.request`` of the team, ``capacity.decide`` of the
organization), judges the whole input (``ValidationError`` naming each bad field; nothing written), and is in the
audit log. An approved reservation books whole nodes of one cluster, chosen here: the cluster where the fewest
nodes, with the least left over, hold the accelerators asked, among nodes in service that no other reservation
overlapping the window holds. More quota for good raises the queue's quota at once (``quotas.set_quota``, in the
quota history); a temporary one and a reservation add to it while they hold (``governance.capacity``).
"""

from __future__ import annotations

import logging
from collections import defaultdict
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from django.conf import settings
from django.core.exceptions import ValidationError
from django.core.mail import send_mail
from django.db import transaction
from django.utils import timezone

from clusters.models import Cluster, Node
from common import params
from governance.actions import changed, quotas
from governance.models import CapacityRequest, Queue, Quota
from tenancy import policy
from tenancy.actions import audit
from tenancy.models import Team
from tenancy.scoping import Role

if TYPE_CHECKING:
    from django.contrib.auth.models import User
    from django.http import HttpRequest

log = logging.getLogger(__name__)

Kind, State = CapacityRequest.Kind, CapacityRequest.State
#: The most accelerators one request may ask for, and the longest window it may span.
MOST = 100_000
LONGEST = timedelta(days=366)
#: How long before a temporary quota or a reservation ends its team's leads are told.
NOTICE = timedelta(days=2)
#: A window may start this far in the past (the time a form takes to send), no more.
SLACK = timedelta(minutes=10)


def ask(
    actor: User,
    team: Team,
    *,
    kind: Any,
    flavor: Any,
    accelerators: Any,
    starts_at: Any = None,
    ends_at: Any = None,
    reason: Any,
    http: HttpRequest | None = None,
    now: datetime | None = None,
) -> CapacityRequest:
    """A lead's request for ``team``: a reservation of ``accelerators`` of ``flavor`` from ``starts_at`` to
    ``ends_at``, or that much more quota from ``starts_at`` (default now) until ``ends_at`` (none: for good)."""
    policy.require(actor, "capacity.request", team)
    now = now or timezone.now()
    errors: dict[str, str] = {}
    if kind not in Kind.values:
        errors["kind"] = f"Unknown kind {kind!r}: {' or '.join(Kind.values)}."
    accelerator_type = quotas.find_flavor(team.organization_id, flavor, errors)
    count = _count(accelerators, errors)
    start = _when(starts_at, "starts_at", errors) if starts_at not in (None, "") else now
    end = _when(ends_at, "ends_at", errors) if ends_at not in (None, "") else None
    if start is not None and start < now - SLACK:
        errors["starts_at"] = "Must not be in the past."
    if kind == Kind.RESERVATION and end is None and "ends_at" not in errors:
        errors["ends_at"] = "A reservation needs an end."
    if start is not None and end is not None:
        if end <= start:
            errors["ends_at"] = "Must be after the start."
        elif end - start > LONGEST:
            errors["ends_at"] = f"A window may span at most {LONGEST.days} days."
    text = quotas.check_reason(str(reason or ""), errors)
    if kind == Kind.QUOTA and end is None and starts_at not in (None, "") and start is not None and start > now + SLACK:
        errors["starts_at"] = "More quota for good starts when it is approved; give an end for a window."
    if errors:
        raise ValidationError(errors)
    assert accelerator_type is not None
    assert start is not None
    assert count is not None
    with transaction.atomic():
        request = CapacityRequest.objects.create(
            team=team,
            kind=kind,
            flavor=accelerator_type,
            accelerators=count,
            starts_at=start,
            ends_at=end,
            reason=text,
            requested_by=actor,
            requested_by_name=actor.get_username(),
            created_at=now,
        )
        audit.record(
            "capacity.requested",
            actor=actor,
            target=request,
            organization=team.organization,
            changes=_values(request),
            reason=text,
            request=http,
        )
    return request


def decide(
    actor: User,
    request: CapacityRequest,
    *,
    approve: bool,
    reason: Any,
    cluster: Any = None,
    http: HttpRequest | None = None,
    now: datetime | None = None,
) -> CapacityRequest:
    """An organization admin approves or refuses a pending request, with a reason. Approving a reservation books
    its nodes (on ``cluster``, a slug, or where they fit best); ``ValidationError`` when they cannot be found."""
    organization = request.team.organization
    policy.require(actor, "capacity.decide", organization)
    now = now or timezone.now()
    errors: dict[str, str] = {}
    text = quotas.check_reason(str(reason or ""), errors)
    if errors:
        raise ValidationError(errors)
    with transaction.atomic():
        locked: CapacityRequest = CapacityRequest.objects.select_for_update().get(pk=request.pk)
        if locked.state != State.PENDING:
            raise ValidationError({"state": f"It was already {locked.get_state_display()}."})
        if approve and locked.ends_at is not None and locked.ends_at <= now:
            raise ValidationError({"ends_at": "Its window is over: it can only be refused."})
        nodes: list[Node] = []
        if approve and locked.kind == Kind.RESERVATION:
            # Reservations are approved one at a time per organization: two must not book the same nodes.
            list(Cluster.objects.select_for_update().filter(organization=organization).order_by("pk"))
            nodes = _choose(locked, cluster)
            locked.cluster = nodes[0].cluster
        locked.state = State.APPROVED if approve else State.REFUSED
        locked.decided_by, locked.decided_by_name = actor, actor.get_username()
        locked.decided_at, locked.decision = now, text
        locked.save()
        if nodes:
            locked.nodes.set(nodes)
        if approve and locked.kind == Kind.QUOTA and locked.ends_at is None:
            _raise_quota(actor, locked, text, http)
        audit.record(
            "capacity.approved" if approve else "capacity.refused",
            actor=actor,
            target=locked,
            organization=organization,
            changes={"state": [State.PENDING.value, locked.state], **_booked(nodes)},
            reason=text,
            request=http,
        )
        if approve:
            changed.send(sender=CapacityRequest, organization=organization)
    return locked


def withdraw(
    actor: User, request: CapacityRequest, *, reason: Any, http: HttpRequest | None = None, now: datetime | None = None
) -> CapacityRequest:
    """The team's lead (or an admin) withdraws a request still pending or an approved window not begun yet, or
    ends a window that has begun early: it ends now (its nodes and quota are given back, and a reservation is
    billed up to now). More quota for good, once approved, is the quota itself: change that."""
    now = now or timezone.now()
    policy.require(actor, "capacity.request", request.team)
    errors: dict[str, str] = {}
    text = quotas.check_reason(str(reason or ""), errors)
    if errors:
        raise ValidationError(errors)
    with transaction.atomic():
        locked: CapacityRequest = CapacityRequest.objects.select_for_update().get(pk=request.pk)
        if locked.state not in (State.PENDING, State.APPROVED) or (
            locked.state == State.APPROVED and locked.ends_at is None
        ):
            raise ValidationError({"state": f"It is {locked.get_state_display()}: there is nothing to withdraw."})
        before, ends = locked.state, locked.ends_at
        if before == State.APPROVED and ends is not None and ends <= now:
            raise ValidationError({"state": "Its window is over: there is nothing to withdraw."})
        begun = before == State.APPROVED and locked.starts_at <= now
        if begun:  # ended early: what was held until now stays held (and billed)
            locked.state, locked.ends_at = State.ENDED, now
            locked.decision = f"{locked.decision} — ended early: {text}"
        else:
            locked.state = State.WITHDRAWN
            locked.decision = text if before == State.PENDING else f"{locked.decision} — withdrawn: {text}"
        if before == State.PENDING:
            locked.decided_by, locked.decided_by_name, locked.decided_at = actor, actor.get_username(), now
        locked.save()
        changes: dict[str, Any] = {"state": [before, locked.state]}
        if begun:
            changes["ends_at"] = [ends.isoformat() if ends else None, now.isoformat()]
        audit.record(
            "capacity.withdrawn",
            actor=actor,
            target=locked,
            organization=locked.team.organization,
            changes=changes,
            reason=text,
            request=http,
        )
        if before == State.APPROVED:
            changed.send(sender=CapacityRequest, organization=locked.team.organization)
    return locked


def settle(now: datetime | None = None) -> dict[str, int]:
    """End the approved windows that are over, and tell the team's leads of those that end within ``NOTICE``
    (once each). Idempotent: what it did is on each request (``state``, ``notified_at``)."""
    now = now or timezone.now()
    ended = 0
    for request in CapacityRequest.objects.filter(state=State.APPROVED, ends_at__lte=now).select_related(
        "team__organization"
    ):
        with transaction.atomic():
            done = CapacityRequest.objects.filter(pk=request.pk, state=State.APPROVED).update(state=State.ENDED)
            if done:
                ended += 1
                audit.record(
                    "capacity.ended",
                    actor=None,
                    target=request,
                    organization=request.team.organization,
                    changes={"state": [State.APPROVED.value, State.ENDED.value]},
                    reason=f"its window ended at {request.ends_at:%Y-%m-%d %H:%M} UTC",
                )
                changed.send(sender=CapacityRequest, organization=request.team.organization)
    told = 0
    soon = CapacityRequest.objects.filter(
        state=State.APPROVED, notified_at=None, ends_at__gt=now, ends_at__lte=now + NOTICE
    ).select_related("team", "flavor")
    for request in soon:
        if CapacityRequest.objects.filter(pk=request.pk, notified_at=None).update(notified_at=now):
            told += _tell_leads(request)
    return {"ended": ended, "told": told}


def ends_words(request: CapacityRequest) -> str:
    """What a lead is told ahead of the end of an approved window."""
    what = (
        f"The reservation of {request.accelerators} {request.flavor.name} for team {request.team.name}"
        if request.kind == Kind.RESERVATION
        else f"The {request.accelerators} {request.flavor.name} of quota team {request.team.name} was given"
    )
    assert request.ends_at is not None
    return (
        f"{what} (request {request.pk}) ends at {request.ends_at:%Y-%m-%d %H:%M} UTC. Jobs that then pass the "
        "team's quota wait, and preemptible ones may be preempted; ask for more before then if you need it."
    )


# --- helpers ------------------------------------------------------------------------------------------------


def _count(raw: Any, errors: dict[str, str]) -> int | None:
    try:
        value = params.integer(raw, "accelerators", low=1, high=MOST)
    except params.BadParameter as bad:
        errors["accelerators"] = bad.reason
        return None
    return value


def _when(raw: Any, field: str, errors: dict[str, str]) -> datetime | None:
    try:
        return params.datetime_(raw, field)
    except params.BadParameter as bad:
        errors[field] = bad.reason
        return None


def _values(request: CapacityRequest) -> dict[str, Any]:
    return {
        "kind": [None, request.kind],
        "flavor": [None, request.flavor.name],
        "accelerators": [None, request.accelerators],
        "starts_at": [None, request.starts_at.isoformat()],
        "ends_at": [None, request.ends_at.isoformat() if request.ends_at else None],
    }


def _booked(nodes: list[Node]) -> dict[str, Any]:
    if not nodes:
        return {}
    return {"cluster": [None, nodes[0].cluster.slug], "nodes": [None, sorted(n.name for n in nodes)]}


def _choose(request: CapacityRequest, cluster: Any) -> list[Node]:
    """Whole nodes of the request's flavor in one cluster, in service and booked by no other reservation whose
    window overlaps this one's, holding at least the accelerators asked: on the fewest nodes with the least left
    over (then the cluster first by name)."""
    organization = request.team.organization_id
    candidates = Node.objects.filter(
        cluster__organization=organization,
        accelerator=request.flavor,
        present=True,
        healthy=True,
        state=Node.State.SCHEDULABLE,
        accelerators__gt=0,
    ).exclude(cluster__status=Cluster.Status.DISABLED)
    if cluster not in (None, ""):
        if not Cluster.objects.filter(organization=organization, slug=cluster).exists():
            raise ValidationError({"cluster": f"No cluster {cluster!r} here."})
        candidates = candidates.filter(cluster__slug=cluster)
    taken = CapacityRequest.nodes.through.objects.filter(
        capacityrequest__state=State.APPROVED,
        capacityrequest__starts_at__lt=request.ends_at,
        capacityrequest__ends_at__gt=request.starts_at,
    ).values_list("node_id", flat=True)
    by_cluster: dict[int, list[Node]] = defaultdict(list)
    for node in candidates.exclude(pk__in=taken).select_related("cluster").order_by("-accelerators", "name"):
        by_cluster[node.cluster_id].append(node)
    best: tuple[int, int, str, list[Node]] | None = None
    for nodes in by_cluster.values():
        chosen, total = [], 0
        for node in nodes:  # the largest first: the fewest nodes
            if total >= request.accelerators:
                break
            chosen.append(node)
            total += node.accelerators
        if total < request.accelerators:
            continue
        key = (len(chosen), total - request.accelerators, nodes[0].cluster.slug, chosen)
        if best is None or key[:3] < best[:3]:
            best = key
    if best is None:
        free = max((sum(n.accelerators for n in nodes) for nodes in by_cluster.values()), default=0)
        where = f" on {cluster}" if cluster not in (None, "") else " in one cluster"
        raise ValidationError(
            {
                "accelerators": f"Only {free} {request.flavor.name} can be booked{where} for that window (whole "
                f"nodes in service that no other reservation holds); {request.accelerators} were asked."
            }
        )
    return best[3]


def _raise_quota(actor: User, request: CapacityRequest, reason: str, http: HttpRequest | None) -> None:
    """More quota for good: the team's own queue's nominal quota of the flavor, raised by what was asked."""
    queue = Queue.objects.get(team=request.team, project=None)
    current = (
        Quota.objects.filter(queue=queue, flavor=request.flavor, resource=Quota.Resource.ACCELERATORS)
        .values_list("nominal", flat=True)
        .first()
    )
    quotas.set_quota(
        actor,
        queue,
        flavor=request.flavor.name,
        nominal=(current or 0) + request.accelerators,
        borrowing_limit=quotas.KEEP,
        lending_limit=quotas.KEEP,
        reason=f"capacity request {request.pk}: {reason}",
        http=http,
    )


def _tell_leads(request: CapacityRequest) -> int:
    """E-mail the team's leads that ``request`` ends soon; how many were written to (0 if sending failed: it is
    in the log, and the request keeps its end)."""
    to = sorted(
        {email for email in policy.members(request.team, Role.LEAD).values_list("user__email", flat=True) if email}
    )
    if not to:
        return 0
    subject = f"[Quartermaster] Team {request.team.name}: capacity request {request.pk} ends soon"
    try:
        send_mail(subject, ends_words(request), settings.DEFAULT_FROM_EMAIL, to)
    except Exception:  # a mail server down must not stop the settling of every other request
        log.exception("capacity request %s: telling its team's leads failed", request.pk)
        return 0
    return len(to)


__all__ = ["NOTICE", "ask", "decide", "ends_words", "settle", "withdraw"]
