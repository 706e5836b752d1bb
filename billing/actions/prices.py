"""The price book: finance's rows of what an accelerator-hour costs, and the rates reports and placement read.

Every change goes through ``set_price`` / ``delete_price`` (and ``set_overhead`` / ``delete_overhead``):
they check who may change the book (finance and organization admins), validate every field at once (a
``ValidationError`` naming each bad one; nothing is written), and write the audit log with the values
before and after.

A price applies from its ``effective_from`` day (UTC) until the next row of the same cluster, flavor and
capacity type. Cloud rows give the hourly rate; on-prem rows give a node's costs, from which the rate is
derived (``on_prem_rate``).
"""

from __future__ import annotations

import bisect
import datetime as dt
import logging
from collections import defaultdict
from collections.abc import Iterable, Mapping
from decimal import ROUND_HALF_UP, Decimal
from typing import Any

from django.contrib.auth.models import User
from django.core.cache import cache
from django.core.exceptions import PermissionDenied, ValidationError
from django.db import IntegrityError, transaction
from django.http import HttpRequest
from django.utils import timezone

from billing.models import GridIntensity, Overhead, Price
from clusters.capacity import CapacityType, capacity_type
from clusters.models import AcceleratorType, Cluster
from common import enqueue, params
from common.validation import REQUIRED, unknown_fields
from governance.actions import quotas
from tenancy import policy
from tenancy.actions import audit
from tenancy.models import Organization

log = logging.getLogger(__name__)

#: Hours in a month: a year of 365.25 days over twelve.
HOURS_PER_MONTH = Decimal("730.5")
RATE_PLACES = Decimal("0.000001")
MOST_MONEY = Decimal("1e11")
#: Django's "This field is required." of a field an on-prem price needs.
ON_PREM_REQUIRED = f"{REQUIRED[:-1]} for an on-prem price."
ON_PREM_FIELDS = (
    "purchase_price",
    "accelerators_per_node",
    "depreciation_months",
    "power_kw",
    "energy_price",
    "hosting_per_month",
)
PRICE_FIELDS = ("cluster", "flavor", "capacity_type", "effective_from", "hourly_rate", *ON_PREM_FIELDS, "note")
OVERHEAD_FIELDS = ("name", "amount", "starts", "ends")


def on_prem_rate(
    purchase_price: Decimal,
    accelerators_per_node: int,
    depreciation_months: int,
    power_kw: Decimal,
    energy_price: Decimal,
    hosting_per_month: Decimal,
) -> Decimal:
    """What an accelerator-hour of an owned node costs: its purchase written off evenly over its
    depreciation period, the power it draws at the energy price, and its hosting, per accelerator."""
    per_node_hour = (
        purchase_price / (depreciation_months * HOURS_PER_MONTH)
        + power_kw * energy_price
        + hosting_per_month / HOURS_PER_MONTH
    )
    return (per_node_hour / accelerators_per_node).quantize(RATE_PLACES, rounding=ROUND_HALF_UP)


def version(organization_id: int) -> int:
    """A number that changes whenever the organization's price book or overhead does, or a month is closed,
    reopened or corrected (what keeps reports)."""
    return int(cache.get(f"billing:book:{organization_id}", 0))


def changed(organization_id: int, *, recheck_closed: bool = False) -> None:
    """After the transaction commits: kept reports are stale; with ``recheck_closed`` (the price book or overhead
    changed), the closed months are compared with their inputs again soon, so a correction of one shows as an
    adjustment within a minute (the hourly check would find it anyway)."""

    def bump() -> None:
        try:
            try:
                cache.incr(f"billing:book:{organization_id}")
            except ValueError:
                cache.set(f"billing:book:{organization_id}", 1, None)
        except Exception as error:  # noqa: BLE001 - a cache that is down keeps nothing to go stale
            log.warning("could not mark the reports of organization %s stale: %s", organization_id, error)

    def after() -> None:
        bump()  # again: a reader between the first bump and the commit kept what it read under the new number
        if recheck_closed:
            enqueue.send("billing.tasks.adjust_periods", organization_id)

    bump()  # this transaction's own reads see the change at once
    transaction.on_commit(after)


def _date(value: Any, field: str, errors: dict[str, str], *, required: bool = True) -> dt.date | None:
    if value is None or value == "":
        if required:
            errors[field] = REQUIRED
        return None
    if isinstance(value, dt.datetime):
        errors[field] = "A date (YYYY-MM-DD), not a time."
        return None
    if isinstance(value, dt.date):
        return value
    try:
        return dt.date.fromisoformat(str(value))
    except ValueError:
        errors[field] = f"{value!r} is not a date (YYYY-MM-DD)."
        return None


def _count(value: Any, field: str, errors: dict[str, str], *, most: int) -> int | None:
    if value is None or value == "":
        errors[field] = ON_PREM_REQUIRED
        return None
    try:
        return params.integer(value, field, low=1, high=most)
    except params.BadParameter as bad:
        errors[field] = bad.reason
        return None


def _of_org(
    model: type[Cluster] | type[AcceleratorType],
    value: Any,
    field: str,
    organization: Organization,
    errors: dict[str, str],
) -> Any:
    """A cluster (by id or slug) or a flavor (by id or name) of ``organization``; another's is unknown."""
    if value is None or value == "":
        errors[field] = REQUIRED
        return None
    if isinstance(value, model):
        value = value.pk
    rows = model.objects.filter(organization=organization)
    key = "slug" if model is Cluster else "name"
    pk = params.as_id(value if isinstance(value, int) else str(value))
    found = rows.filter(pk=pk).first() if pk is not None else rows.filter(**{key: str(value)}).first()
    if found is None:
        errors[field] = f"No {'cluster' if model is Cluster else 'accelerator type'} {value!r} in this organization."
    return found


def _unknown(data: Mapping[str, Any], known: Iterable[str]) -> dict[str, str]:
    """Fields nobody defines, each with the closest known name if one is close."""
    return {name: " ".join(messages) for name, messages in unknown_fields(data, known).items()}


def _as_text(values: Mapping[str, Any]) -> dict[str, Any]:
    """Values as the audit log keeps them: dates and amounts as text."""
    return {k: (str(v) if v is not None and not isinstance(v, int | str) else v) for k, v in values.items()}


def _snapshot(price: Price | None) -> dict[str, Any]:
    if price is None:
        return {}
    values = {k: getattr(price, k) for k in PRICE_FIELDS if k not in ("cluster", "flavor")}
    values.update(cluster=price.cluster.slug, flavor=price.flavor.name, rate=price.rate)
    return _as_text(values)


def _audit(
    actor: User,
    row: Price | Overhead | GridIntensity,
    organization: Organization,
    before: dict[str, Any],
    after: dict[str, Any],
    http: HttpRequest | None,
) -> None:
    """The audit entry of a price-book row created, changed or deleted (none when nothing changed)."""
    if before == after:
        return
    kind = "price" if isinstance(row, Price) else "grid_intensity" if isinstance(row, GridIntensity) else "overhead"
    action = f"{kind}.deleted" if not after else f"{kind}.changed" if before else f"{kind}.created"
    changes = {k: [before.get(k), after.get(k)] for k in sorted(set(before) | set(after))}
    audit.record(action, actor=actor, target=row, organization=organization, changes=changes, request=http)


def clean_price(organization: Organization, data: Mapping[str, Any]) -> dict[str, Any]:
    """The fields of a price row from ``data`` (form or JSON values), with the rate worked out; a
    ``ValidationError`` names every bad field. Unknown fields are refused too. Cloud rows give the hourly
    rate; on-prem rows give the node's costs (or, when finance knows it, an hourly rate)."""
    errors: dict[str, str] = {}
    errors.update(_unknown(data, PRICE_FIELDS))
    kind = data.get("capacity_type")
    if kind not in CapacityType.values:
        errors["capacity_type"] = f"{kind!r} is not one of {', '.join(CapacityType.values)}."
    values: dict[str, Any] = {
        "cluster": _of_org(Cluster, data.get("cluster"), "cluster", organization, errors),
        "flavor": _of_org(AcceleratorType, data.get("flavor"), "flavor", organization, errors),
        "capacity_type": kind,
        "effective_from": _date(data.get("effective_from"), "effective_from", errors),
        "note": str(data.get("note") or "").strip(),
    }
    if len(values["note"]) > 200:
        errors["note"] = "At most 200 characters."
    node_costs = any(data.get(name) not in (None, "") for name in ON_PREM_FIELDS)
    on_prem = kind == CapacityType.ON_PREM and (node_costs or data.get("hourly_rate") in (None, ""))
    if on_prem:
        # An owned node's costs, from which the rate is derived (or, instead, an hourly rate finance knows).
        if data.get("hourly_rate") not in (None, ""):
            errors["hourly_rate"] = "Give either the node's costs or an hourly rate, not both."
        money = {"purchase_price": 2, "power_kw": 3, "energy_price": 4, "hosting_per_month": 2}
        for name, places in money.items():
            if data.get(name) in (None, ""):
                errors[name] = f"{ON_PREM_REQUIRED[:-1]} (or give an hourly rate)."
            else:
                values[name] = quotas.check_amount(
                    data.get(name), name, errors, required=True, most=MOST_MONEY, places=places
                )
        values["accelerators_per_node"] = _count(
            data.get("accelerators_per_node"), "accelerators_per_node", errors, most=1024
        )
        values["depreciation_months"] = _count(data.get("depreciation_months"), "depreciation_months", errors, most=240)
        values["hourly_rate"] = None
    else:
        values["hourly_rate"] = quotas.check_amount(
            data.get("hourly_rate"), "hourly_rate", errors, required=True, most=MOST_MONEY, places=4
        )
        for name in ON_PREM_FIELDS:
            if data.get(name) not in (None, ""):
                errors[name] = "Only an on-prem price has node costs."
            values[name] = None
    if errors:
        raise ValidationError(errors)
    values["rate"] = (
        on_prem_rate(*(values[name] for name in ON_PREM_FIELDS))
        if on_prem
        else Decimal(values["hourly_rate"]).quantize(RATE_PLACES)
    )
    return values


def set_price(
    actor: User,
    organization: Organization,
    data: Mapping[str, Any],
    price: Price | None = None,
    http: HttpRequest | None = None,
) -> Price:
    """Add a row to the price book, or change ``price`` (every field is given again). Audited."""
    policy.require(actor, "price.set", organization)
    if price is not None and price.organization_id != organization.pk:
        raise PermissionDenied("That price belongs to another organization.")
    values = clean_price(organization, data)
    before = _snapshot(price)
    row = price or Price(organization=organization)
    for name, value in values.items():
        setattr(row, name, value)
    row.updated_at, row.updated_by = timezone.now(), actor
    try:
        with transaction.atomic():
            row.save()
            changed(organization.pk, recheck_closed=True)
            _audit(actor, row, organization, before, _snapshot(row), http)
    except IntegrityError:
        raise ValidationError(
            {"effective_from": "The book already has a price of this cluster, flavor and capacity type from that day."}
        ) from None
    return row


def delete_price(actor: User, price: Price, http: HttpRequest | None = None) -> None:
    policy.require(actor, "price.set", price.organization)
    before = _snapshot(price)
    with transaction.atomic():
        changed(price.organization_id, recheck_closed=True)
        _audit(actor, price, price.organization, before, {}, http)
        price.delete()


def _overhead_snapshot(row: Overhead | None) -> dict[str, Any]:
    if row is None:
        return {}
    return _as_text({k: getattr(row, k) for k in OVERHEAD_FIELDS})


def set_overhead(
    actor: User,
    organization: Organization,
    data: Mapping[str, Any],
    overhead: Overhead | None = None,
    http: HttpRequest | None = None,
) -> Overhead:
    """Add or change a shared monthly cost. Months are given by any day in them (stored as the first)."""
    policy.require(actor, "price.set", organization)
    if overhead is not None and overhead.organization_id != organization.pk:
        raise PermissionDenied("That cost belongs to another organization.")
    errors: dict[str, str] = {}
    errors.update(_unknown(data, OVERHEAD_FIELDS))
    name = str(data.get("name") or "").strip()
    if not name:
        errors["name"] = REQUIRED
    elif len(name) > 120:
        errors["name"] = "At most 120 characters."
    amount = quotas.check_amount(data.get("amount"), "amount", errors, required=True, most=MOST_MONEY, places=2)
    starts = _date(data.get("starts"), "starts", errors)
    ends = _date(data.get("ends"), "ends", errors, required=False)
    starts, ends = (d.replace(day=1) if d else None for d in (starts, ends))
    if starts and ends and ends < starts:
        errors["ends"] = "Must not be before the first month."
    if errors:
        raise ValidationError(errors)
    before = _overhead_snapshot(overhead)
    row = overhead or Overhead(organization=organization)
    row.name, row.amount, row.starts, row.ends = name, amount, starts, ends  # type: ignore[assignment]
    row.updated_at, row.updated_by = timezone.now(), actor
    with transaction.atomic():
        row.save()
        changed(organization.pk, recheck_closed=True)
        _audit(actor, row, organization, before, _overhead_snapshot(row), http)
    return row


INTENSITY_FIELDS = ("region", "effective_from", "grams_per_kwh", "note")
#: The most a kWh can emit: about twice coal's.
MOST_GRAMS = Decimal(2000)


def _intensity_snapshot(row: GridIntensity | None) -> dict[str, Any]:
    return {} if row is None else _as_text({k: getattr(row, k) for k in INTENSITY_FIELDS})


def set_grid_intensity(
    actor: User,
    organization: Organization,
    data: Mapping[str, Any],
    row: GridIntensity | None = None,
    http: HttpRequest | None = None,
) -> GridIntensity:
    """Add or change a region's grid intensity (g CO2e per kWh from a day on). Every field is given again."""
    policy.require(actor, "price.set", organization)
    if row is not None and row.organization_id != organization.pk:
        raise PermissionDenied("That row belongs to another organization.")
    errors: dict[str, str] = dict(_unknown(data, INTENSITY_FIELDS))
    region = str(data.get("region") or "").strip()
    if not region:
        errors["region"] = REQUIRED
    elif len(region) > 60:
        errors["region"] = "At most 60 characters."
    effective = _date(data.get("effective_from"), "effective_from", errors)
    grams = quotas.check_amount(
        data.get("grams_per_kwh"), "grams_per_kwh", errors, required=True, most=MOST_GRAMS, places=2
    )
    note = str(data.get("note") or "").strip()
    if len(note) > 200:
        errors["note"] = "At most 200 characters."
    if errors:
        raise ValidationError(errors)
    before = _intensity_snapshot(row)
    found = row or GridIntensity(organization=organization)
    found.region, found.effective_from, found.grams_per_kwh, found.note = region, effective, grams, note  # type: ignore[assignment]
    found.updated_at, found.updated_by = timezone.now(), actor
    try:
        with transaction.atomic():
            found.save()
            changed(organization.pk, recheck_closed=True)
            _audit(actor, found, organization, before, _intensity_snapshot(found), http)
    except IntegrityError:
        raise ValidationError({"effective_from": "The region already has an intensity from that day."}) from None
    return found


def delete_grid_intensity(actor: User, row: GridIntensity, http: HttpRequest | None = None) -> None:
    policy.require(actor, "price.set", row.organization)
    before = _intensity_snapshot(row)
    with transaction.atomic():
        changed(row.organization_id, recheck_closed=True)
        _audit(actor, row, row.organization, before, {}, http)
        row.delete()


class IntensityBook:
    """The organization's grid intensities as a lookup: grams of CO2e per kWh in a region on a day (None: none set)."""

    def __init__(self, rows: Iterable[tuple[str, dt.date, Decimal]]) -> None:
        steps: dict[str, list[tuple[dt.date, Decimal]]] = defaultdict(list)
        for region, day, grams in rows:
            steps[region].append((day, grams))
        self._steps = {region: sorted(s) for region, s in steps.items()}

    @classmethod
    def of(cls, organization_id: int) -> IntensityBook:
        return cls(
            GridIntensity.objects.filter(organization_id=organization_id).values_list(
                "region", "effective_from", "grams_per_kwh"
            )
        )

    def grams(self, region: str, day: dt.date) -> Decimal | None:
        steps = self._steps.get(region)
        if not steps:
            return None
        at = bisect.bisect_right([d for d, _ in steps], day) - 1
        return steps[at][1] if at >= 0 else None


def delete_overhead(actor: User, overhead: Overhead, http: HttpRequest | None = None) -> None:
    policy.require(actor, "price.set", overhead.organization)
    before = _overhead_snapshot(overhead)
    with transaction.atomic():
        changed(overhead.organization_id, recheck_closed=True)
        _audit(actor, overhead, overhead.organization, before, {}, http)
        overhead.delete()


Key = tuple[int, int, str]  # cluster id, flavor id, capacity type


class RateBook:
    """The price book of one organization as a lookup: the rate of (cluster, flavor, capacity type) on a day."""

    def __init__(self, rows: Iterable[tuple[int, int, str, dt.date, Decimal]]) -> None:
        steps: dict[Key, list[tuple[dt.date, Decimal]]] = defaultdict(list)
        for cluster_id, flavor_id, kind, effective_from, rate in rows:
            steps[(cluster_id, flavor_id, kind)].append((effective_from, rate))
        self._days = {key: [day for day, _ in sorted(s)] for key, s in steps.items()}
        self._rates = {key: [rate for _, rate in sorted(s)] for key, s in steps.items()}

    @classmethod
    def of(cls, organization: Organization | int) -> RateBook:
        org_id = organization if isinstance(organization, int) else organization.pk
        return cls(
            Price.objects.filter(organization_id=org_id).values_list(
                "cluster_id", "flavor_id", "capacity_type", "effective_from", "rate"
            )
        )

    def rate(self, key: Key, day: dt.date) -> Decimal | None:
        """The rate in effect on ``day``; None when the book has none (yet) for that key."""
        days = self._days.get(key)
        if not days:
            return None
        at = bisect.bisect_right(days, day) - 1
        return self._rates[key][at] if at >= 0 else None

    def priced_keys(self) -> Iterable[Key]:
        return self._days.keys()


class PlacementPrices:
    """The organization's rates on ``day`` as placement asks for them, node by node (``scheduler.placement.prices``):
    a node is priced as the capacity type its labels or its cluster say (``clusters.capacity.capacity_type``); a
    node the book has no rate for costs 0 to the engine."""

    def __init__(self, organization_id: int, day: dt.date) -> None:
        self.book = RateBook.of(organization_id)
        self.day = day

    def of(
        self, cluster_id: int, flavor_id: int | None, labels: Mapping[str, Any], kind: str, options: Mapping[str, Any]
    ) -> float:
        """Currency units per accelerator-hour of that node (0 if the book has no rate for it)."""
        if flavor_id is None:
            return 0.0
        rate = self.book.rate((cluster_id, flavor_id, capacity_type(labels, kind, options)), self.day)
        return float(rate) if rate is not None else 0.0


def placement_prices(organization_id: int, day: dt.date) -> PlacementPrices:
    """What ``PLACEMENT_PRICES`` names: the price book as placement reads it."""
    return PlacementPrices(organization_id, day)
