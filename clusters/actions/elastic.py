"""Admins' actions on elastic pools (docs/scheduling.md §Elastic pools): add a pool to a cluster, change any of its
settings, switch it off and on. One transaction each, authorized (``cluster.change``: the organization's admins),
audited (``elastic.pool.created``, ``elastic.pool.changed`` with each changed field as ``[old, new]``).

The fields, in the model's units: ``name`` (a slug, unique in the cluster), ``flavor`` (the name of one of the
organization's accelerator types), ``capacity_type`` (on_demand, spot or reserved), ``node_accelerators``,
``node_cpu`` (millicores) and ``node_memory`` (MiB) of each node, ``min_nodes`` and ``max_nodes``, ``lead_time`` and
``idle_release`` (seconds), ``monthly_budget`` (in the price book's currency; None: no budget) and ``enabled``.
A pool switched off is asked for nothing more; its nodes are still given back once idle, as usual.

Each action raises ``ValidationError`` naming the field for bad input and ``PermissionDenied`` when the actor may
see the cluster but not change it; both leave the database as it was.
"""

from __future__ import annotations

import re
from decimal import Decimal, InvalidOperation
from typing import TYPE_CHECKING, Any

from django.core.exceptions import ValidationError
from django.db import IntegrityError, transaction

from clusters.backends.tpu.accelerators import UnknownAcceleratorType, type_of_model
from clusters.capacity import CapacityType
from clusters.models import AcceleratorType, Cluster, ElasticPool
from common.validation import REQUIRED
from tenancy import policy
from tenancy.actions import audit

if TYPE_CHECKING:
    from django.contrib.auth.models import User
    from django.http import HttpRequest

#: What a pool's nodes may be paid as (on-prem capacity is not something a cloud adds).
CAPACITY_TYPES = (CapacityType.ON_DEMAND.value, CapacityType.SPOT.value, CapacityType.RESERVED.value)
NAME = re.compile(r"^[a-z0-9][a-z0-9_-]*$")
MAX_NAME = 60
#: The largest count of nodes, accelerators a node, and seconds a pool may be set to (well past any real one).
MOST = {"node_accelerators": 1024, "max_nodes": 100_000, "lead_time": 7 * 24 * 3600, "idle_release": 30 * 24 * 3600}
#: A node's largest CPU (millicores) and memory (MiB): the model's columns hold more, no machine does.
MOST_CPU, MOST_MEMORY = 100_000_000, 1 << 40
MOST_BUDGET = Decimal("1e11")
EDITABLE = (
    "name",
    "flavor",
    "capacity_type",
    "node_accelerators",
    "node_cpu",
    "node_memory",
    "min_nodes",
    "max_nodes",
    "lead_time",
    "idle_release",
    "monthly_budget",
    "enabled",
)
#: What a new pool gets for the fields left out; the others are required.
DEFAULTS: dict[str, Any] = {
    "capacity_type": CapacityType.ON_DEMAND.value,
    "min_nodes": 0,
    "lead_time": 600,
    "idle_release": 1800,
    "monthly_budget": None,
    "enabled": True,
}


def create_pool(actor: User, cluster: Cluster, *, http: HttpRequest | None = None, **fields: Any) -> ElasticPool:
    """Add an elastic pool to ``cluster``: ``fields`` as the module says (name, flavor, node_accelerators,
    node_cpu, node_memory and max_nodes required; the rest default to ``DEFAULTS``)."""
    _known(fields, "create_pool")
    policy.require(actor, "cluster.change", cluster, f"Only admins of {cluster.organization} add elastic pools.")
    values = _validated(cluster, {**DEFAULTS, **fields})
    pool = ElasticPool(cluster=cluster, **_model(values))
    with transaction.atomic():
        _check_name(cluster, values["name"], None)
        try:
            with transaction.atomic():
                pool.save()
        except IntegrityError:  # the same name taken at the same moment by someone else
            raise ValidationError({"name": _taken(cluster, values["name"])}) from None
        audit.record(
            "elastic.pool.created",
            actor=actor,
            target=pool,
            organization=cluster.organization,
            changes={name: [None, _shown(value)] for name, value in values.items()},
            request=http,
        )
    return pool


def change_pool(actor: User, pool: ElasticPool, *, http: HttpRequest | None = None, **changes: Any) -> ElasticPool:
    """Change any of a pool's fields (those not given stay); ``enabled=False`` switches it off. Nothing changed:
    nothing is written."""
    _known(changes, "change_pool")
    cluster = pool.cluster
    policy.require(actor, "cluster.change", cluster, f"Only admins of {cluster.organization} change elastic pools.")
    with transaction.atomic():
        locked: ElasticPool = ElasticPool.objects.select_for_update().select_related("accelerator").get(pk=pool.pk)
        current = _values_of(locked)
        values = _validated(cluster, {**current, **changes})
        diff = {
            name: [_shown(current[name]), _shown(value)] for name, value in values.items() if value != current[name]
        }
        if not diff:
            return locked
        if "name" in diff:
            _check_name(cluster, values["name"], locked.pk)
        for name, value in _model(values).items():
            setattr(locked, name, value)
        try:
            with transaction.atomic():
                locked.save()
        except IntegrityError:
            raise ValidationError({"name": _taken(cluster, values["name"])}) from None
        audit.record(
            "elastic.pool.changed",
            actor=actor,
            target=locked,
            organization=cluster.organization,
            changes=diff,
            request=http,
        )
    pool.refresh_from_db()
    return locked


# --- the checks ---------------------------------------------------------------------------------------------


def _known(fields: dict[str, Any], action: str) -> None:
    unknown = set(fields) - set(EDITABLE)
    if unknown:
        raise TypeError(f"{action}() got unexpected fields {', '.join(sorted(unknown))}")


def _values_of(pool: ElasticPool) -> dict[str, Any]:
    """A pool's fields as the actions take them (its accelerator type by name)."""
    values = {name: getattr(pool, name) for name in EDITABLE if name != "flavor"}
    return {**values, "flavor": pool.accelerator}


def _model(values: dict[str, Any]) -> dict[str, Any]:
    """Validated values as the model's fields."""
    fields = dict(values)
    fields["accelerator"] = fields.pop("flavor")
    return fields


def _shown(value: Any) -> Any:
    """A value as the audit log keeps it (JSON: an accelerator type by name, money as a string)."""
    if isinstance(value, AcceleratorType):
        return value.name
    if isinstance(value, Decimal):
        return str(value)
    return value


def _taken(cluster: Cluster, name: str) -> str:
    return f"{cluster.name} already has an elastic pool called {name!r}."


def _check_name(cluster: Cluster, name: str, pk: int | None) -> None:
    if ElasticPool.objects.filter(cluster=cluster, name=name).exclude(pk=pk).exists():
        raise ValidationError({"name": _taken(cluster, name)})


def _validated(cluster: Cluster, fields: dict[str, Any]) -> dict[str, Any]:
    """Every field checked; all that is wrong, each by its name, in one ``ValidationError``."""
    errors: dict[str, str] = {}
    values: dict[str, Any] = {
        "name": _name(fields.get("name"), errors),
        "flavor": _flavor(cluster, fields.get("flavor"), errors),
        "capacity_type": _capacity_type(fields.get("capacity_type"), errors),
        "node_accelerators": _whole(fields, "node_accelerators", 1, MOST["node_accelerators"], errors),
        "node_cpu": _whole(fields, "node_cpu", 1, MOST_CPU, errors),
        "node_memory": _whole(fields, "node_memory", 1, MOST_MEMORY, errors),
        "min_nodes": _whole(fields, "min_nodes", 0, MOST["max_nodes"], errors),
        "max_nodes": _whole(fields, "max_nodes", 1, MOST["max_nodes"], errors),
        "lead_time": _whole(fields, "lead_time", 0, MOST["lead_time"], errors),
        "idle_release": _whole(fields, "idle_release", 0, MOST["idle_release"], errors),
        "monthly_budget": _budget(fields.get("monthly_budget"), errors),
        "enabled": fields.get("enabled"),
    }
    if not isinstance(values["enabled"], bool):
        errors["enabled"] = "True (the pool may be asked for nodes) or false (switched off)."
    if cluster.kind == "tpu" and values["flavor"] is not None and values["node_accelerators"] is not None:
        try:  # a TPU pool's nodes are slices: its flavor and chips must name a slice type
            type_of_model(values["flavor"].name, values["node_accelerators"])
        except UnknownAcceleratorType as error:
            errors["node_accelerators"] = f"On a TPU cluster a node is a slice: {error}."
    low, high = values["min_nodes"], values["max_nodes"]
    if low is not None and high is not None and low > high and "min_nodes" not in errors:
        errors["min_nodes"] = f"At most the pool's maximum ({high} nodes)."
    if errors:
        raise ValidationError(errors)
    return values


def _name(given: Any, errors: dict[str, str]) -> str:
    name = given.strip() if isinstance(given, str) else given
    if name is None or name == "":
        errors["name"] = REQUIRED
    elif not isinstance(name, str) or not NAME.match(name) or len(name) > MAX_NAME:
        errors["name"] = (
            f"A short name of lowercase letters, digits, - and _ (at most {MAX_NAME} characters), e.g. h100-spot."
        )
    else:
        return name
    return ""


def _flavor(cluster: Cluster, given: Any, errors: dict[str, str]) -> AcceleratorType | None:
    """The organization's accelerator type ``given`` (a name, or the type itself when unchanged)."""
    if isinstance(given, AcceleratorType) and given.organization_id == cluster.organization_id:
        return given
    if given is None or given == "":
        errors["flavor"] = REQUIRED
        return None
    found: AcceleratorType | None = None
    if isinstance(given, str):
        found = AcceleratorType.objects.filter(organization=cluster.organization_id, name=given.strip()).first()
    if found is None:
        known = AcceleratorType.objects.filter(organization=cluster.organization_id).values_list("name", flat=True)
        errors["flavor"] = f"Unknown accelerator type {str(given)[:60]!r}. Known: {', '.join(known) or 'none'}."
    return found


def _capacity_type(given: Any, errors: dict[str, str]) -> str:
    if given not in CAPACITY_TYPES:
        errors["capacity_type"] = f"One of {', '.join(CAPACITY_TYPES)}."
        return ""
    return str(given)


def _whole(fields: dict[str, Any], name: str, low: int, high: int, errors: dict[str, str]) -> int | None:
    given = fields.get(name)
    if given is None or given == "":
        errors[name] = REQUIRED
    elif isinstance(given, bool) or not isinstance(given, int):
        errors[name] = "A whole number."
    elif not low <= given <= high:
        errors[name] = f"A whole number from {low} to {high}."
    else:
        return int(given)
    return None


def _budget(given: Any, errors: dict[str, str]) -> Decimal | None:
    if given is None or given == "":
        return None
    try:
        amount = Decimal("NaN") if isinstance(given, bool) else Decimal(str(given))
    except (InvalidOperation, ValueError):
        amount = Decimal("NaN")
    if not amount.is_finite():
        errors["monthly_budget"] = "An amount of money (e.g. 2000.00), or none for no budget."
    elif amount < 0:
        errors["monthly_budget"] = "Zero or more, or none for no budget."
    elif amount > MOST_BUDGET:
        errors["monthly_budget"] = f"At most {MOST_BUDGET:f}."
    elif amount != amount.quantize(Decimal("0.01")):
        errors["monthly_budget"] = "At most two decimal places (cents)."
    else:
        return amount.quantize(Decimal("0.01"))
    return None
