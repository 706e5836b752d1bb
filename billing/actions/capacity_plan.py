"""The capacity plan: what finance and admins know of the fleet's future (orders with their lead times,
retirements, reserved cloud commitments), and the capacity it gives the forecast on each day ahead.

``set_change`` and ``delete_change`` (the policy's ``capacity.plan``; judged whole, every field again on a change;
audited) keep ``CapacityChange`` rows. ``daily_plan`` turns them into accelerators per day ahead, from today's
fleet:

- an **order** adds its accelerators from its arrival (``ordered_on`` + ``lead_days``) on; one that has arrived
  is in the fleet already and changes nothing;
- a **retirement** takes its accelerators away from its day on (one whose day has passed: the fleet says);
- a **commitment** adds its accelerators from its first day to its last; one running now is in the fleet (its
  nodes are present), so it is taken away after its last day.

A day's capacity is never below none. Flavors without a change have no plan: today's fleet carried forward.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from typing import Any

from django.contrib.auth.models import User
from django.core.cache import cache
from django.core.exceptions import PermissionDenied, ValidationError
from django.db import transaction
from django.db.models import QuerySet
from django.http import HttpRequest
from django.utils import timezone

from billing.actions.prices import _as_text, _date, _unknown
from billing.forecast import AHEAD_DAYS, HORIZONS, cache_key
from billing.models import CapacityChange
from clusters.models import AcceleratorType
from common import params
from common.validation import REQUIRED
from tenancy import policy
from tenancy.actions import audit
from tenancy.models import Organization
from tenancy.scoping import Action

FIELDS = ("flavor", "kind", "accelerators", "ordered_on", "lead_days", "starts_on", "ends_on", "note")
MOST_ACCELERATORS = 1_000_000
MOST_LEAD_DAYS = 3 * 365
Kind = CapacityChange.Kind


def changes(user: User, organization: Organization) -> QuerySet[CapacityChange]:
    """The plan's rows ``user`` may read, in the order they take effect."""
    return (
        CapacityChange.objects.for_user(user, Action.VIEW)
        .filter(organization=organization)
        .select_related("flavor", "updated_by")
    )


def _flavor(organization: Organization, value: Any, errors: dict[str, str]) -> AcceleratorType | None:
    if value is None or value == "":
        errors["flavor"] = REQUIRED
        return None
    rows = AcceleratorType.objects.filter(organization=organization)
    found = rows.filter(name=str(value)).first()
    if found is None and str(value).isdigit():
        found = rows.filter(pk=int(value)).first()
    if found is None:
        names = ", ".join(rows.order_by("name").values_list("name", flat=True)) or "none"
        errors["flavor"] = f"No accelerator type {value!r} in the organization; its types: {names}."
    return found


def _whole(value: Any, field: str, errors: dict[str, str], low: int, high: int) -> int | None:
    return params.whole(value, field, low, high, errors, REQUIRED)


def clean(organization: Organization, data: Mapping[str, Any]) -> dict[str, Any]:
    """The fields of a plan row from ``data``, or a ValidationError naming each field that is wrong."""
    errors: dict[str, str] = dict(_unknown(data, FIELDS))
    flavor = _flavor(organization, data.get("flavor"), errors)
    kind = str(data.get("kind") or "")
    if kind not in Kind.values:
        errors["kind"] = f"{kind!r} is not one of {', '.join(Kind.values)}." if kind else REQUIRED
    accelerators = _whole(data.get("accelerators"), "accelerators", errors, 1, MOST_ACCELERATORS)
    ordered_on = lead_days = ends_on = None
    starts_on = None
    if kind == Kind.ORDER:
        ordered_on = _date(data.get("ordered_on"), "ordered_on", errors)
        lead_days = _whole(data.get("lead_days"), "lead_days", errors, 0, MOST_LEAD_DAYS)
        if data.get("starts_on") not in (None, ""):
            errors["starts_on"] = "An order arrives its lead time after it is placed: give ordered_on and lead_days."
        if ordered_on is not None and lead_days is not None:
            starts_on = ordered_on + dt.timedelta(days=lead_days)
    elif kind in (Kind.RETIREMENT, Kind.COMMITMENT):
        for field in ("ordered_on", "lead_days"):
            if data.get(field) not in (None, ""):
                errors[field] = "Only an order has one."
        starts_on = _date(data.get("starts_on"), "starts_on", errors)
        if kind == Kind.COMMITMENT:
            ends_on = _date(data.get("ends_on"), "ends_on", errors)
            if starts_on and ends_on and ends_on < starts_on:
                errors["ends_on"] = "A commitment ends on or after the day it starts."
        elif data.get("ends_on") not in (None, ""):
            errors["ends_on"] = "Only a commitment has an end."
    note = str(data.get("note") or "").strip()
    if len(note) > 200:
        errors["note"] = "At most 200 characters."
    if errors:
        raise ValidationError(errors)
    return {
        "flavor": flavor,
        "kind": kind,
        "accelerators": accelerators,
        "ordered_on": ordered_on,
        "lead_days": lead_days,
        "starts_on": starts_on,
        "ends_on": ends_on,
        "note": note,
    }


def _snapshot(row: CapacityChange | None) -> dict[str, Any]:
    if row is None:
        return {}
    values = {k: getattr(row, k) for k in FIELDS if k != "flavor"}
    return _as_text({**values, "flavor": row.flavor.name})


def _changed(organization_id: int) -> None:
    """The organization's cached forecasts are stale once the plan changes (today's, of every view): forgotten
    now, and again at the commit (a reader in between kept what it read)."""

    def forget() -> None:
        today = timezone.now().astimezone(dt.UTC).date()
        cache.delete_many([cache_key(organization_id, h, today) for h in HORIZONS])

    forget()
    transaction.on_commit(forget)


def set_change(
    actor: User,
    organization: Organization,
    data: Mapping[str, Any],
    row: CapacityChange | None = None,
    http: HttpRequest | None = None,
) -> CapacityChange:
    """Add or change a row of the plan. Every field is given again."""
    policy.require(actor, "capacity.plan", organization)
    if row is not None and row.organization_id != organization.pk:
        raise PermissionDenied("That row belongs to another organization.")
    fields = clean(organization, data)
    before = _snapshot(row)
    found = row or CapacityChange(organization=organization)
    for name, value in fields.items():
        setattr(found, name, value)
    found.updated_at, found.updated_by = timezone.now(), actor
    with transaction.atomic():
        found.save()
        after = _snapshot(found)
        if before != after:
            action = "capacity_change.changed" if before else "capacity_change.created"
            changes = {k: [before.get(k), after.get(k)] for k in sorted(set(before) | set(after))}
            audit.record(action, actor=actor, target=found, organization=organization, changes=changes, request=http)
        _changed(organization.pk)
    return found


def delete_change(actor: User, row: CapacityChange, http: HttpRequest | None = None) -> None:
    policy.require(actor, "capacity.plan", row.organization)
    before = _snapshot(row)
    with transaction.atomic():
        changes = {k: [v, None] for k, v in sorted(before.items())}
        audit.record(
            "capacity_change.deleted",
            actor=actor,
            target=row,
            organization=row.organization,
            changes=changes,
            request=http,
        )
        _changed(row.organization_id)
        row.delete()


def daily_plan(
    rows: list[tuple[str, str, int, dt.date, dt.date | None]], today: dt.date, fleet: Mapping[str, int]
) -> dict[str, list[float]]:
    """Accelerators per day ahead (``AHEAD_DAYS`` from ``today``) per flavor with a change, from the plan's
    (flavor, kind, accelerators, starts_on, ends_on) rows and today's fleet (pure: see the module's notes)."""
    plans: dict[str, list[float]] = {}
    for flavor, kind, accelerators, starts_on, ends_on in rows:
        days = plans.setdefault(flavor, [float(fleet.get(flavor, 0))] * AHEAD_DAYS)
        first = (starts_on - today).days
        if kind == Kind.ORDER:
            span, sign = (first, AHEAD_DAYS) if first > 0 else (0, 0), 1
        elif kind == Kind.RETIREMENT:
            span, sign = (first, AHEAD_DAYS) if first > 0 else (0, 0), -1
        else:
            assert ends_on is not None
            after = (ends_on - today).days + 1
            if first > 0:
                span, sign = (first, after), 1
            else:
                span, sign = (max(after, 0), AHEAD_DAYS), -1  # running now: in the fleet until it ends
        for i in range(max(span[0], 0), min(span[1], AHEAD_DAYS)):
            days[i] += sign * accelerators
    return {flavor: [max(0.0, v) for v in days] for flavor, days in plans.items()}


def plan_of(organization: Organization, today: dt.date, fleet: Mapping[str, int]) -> dict[str, list[float]]:
    """``daily_plan`` of the organization's plan rows that reach past today."""
    rows = (
        CapacityChange.objects.filter(organization=organization)
        .values_list("flavor__name", "kind", "accelerators", "starts_on", "ends_on")
        .order_by("starts_on", "pk")
    )
    return daily_plan(list(rows), today, fleet)
