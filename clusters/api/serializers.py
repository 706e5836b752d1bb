"""API representations of clusters, nodes, maintenance windows and elastic pools, and the bodies of admins'
changes to them.

Amounts are in people's units (CPU cores, GiB), as on the pages. A cluster never shows its credentials; its
options only to the organization's admins (they may name paths on the Quartermaster host). The bodies are
strict (an unknown field is refused by name) and check types only: what a valid change is, and who may make
it, is ``clusters.actions``'s.
"""

from __future__ import annotations

from datetime import timedelta
from decimal import ROUND_HALF_UP, Decimal
from typing import Any

from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from clusters import capabilities
from clusters.actions import MAX_GRACE, MAX_REASON, SECRET_OPTION
from clusters.actions.elastic import CAPACITY_TYPES
from clusters.actions.elastic import MAX_NAME as MAX_POOL_NAME
from clusters.models import Cluster, Drain, ElasticGrant, ElasticPool, MaintenanceWindow, Node
from common import params
from common.api.serializers import MONEY, RefField, StrictCharField, StrictIntegerField, StrictSerializer

CORES = Decimal(1000)
GIB = Decimal(1024)


def _cores(millicores: int) -> Decimal:
    return (Decimal(millicores) / CORES).quantize(Decimal("0.001"))


def _gib(mib: int) -> Decimal:
    return (Decimal(mib) / GIB).quantize(Decimal("0.001"))


def _amount(**kwargs: Any) -> serializers.DecimalField:
    return serializers.DecimalField(max_digits=14, decimal_places=3, coerce_to_string=False, **kwargs)


class CapabilitiesSerializer(serializers.Serializer[Any]):
    runs = serializers.ListField(
        child=serializers.CharField(), help_text="Codes: containers, batch_scripts, tpu_vms (clusters/capabilities)."
    )
    described = serializers.ListField(
        child=serializers.CharField(), help_text='In words, as its page says: "container images (pyxis)".'
    )
    container_runtime = serializers.CharField(help_text="How containers run there; empty when they do not.")


class AcceleratorTotalsSerializer(serializers.Serializer[Any]):
    total = serializers.IntegerField()
    allocatable = serializers.IntegerField()
    used = serializers.IntegerField()


class ClusterSerializer(serializers.ModelSerializer[Cluster]):
    """A cluster as its members see it; ``nodes`` and ``accelerators`` count the nodes its last sync found."""

    organization = serializers.SlugRelatedField[Any](slug_field="slug", read_only=True)
    capabilities = serializers.SerializerMethodField()
    nodes = serializers.SerializerMethodField(help_text="Nodes present, by state, and in all.")
    accelerators = serializers.SerializerMethodField()
    options = serializers.SerializerMethodField(help_text="Its backend options: for its admins only, else null.")

    class Meta:
        model = Cluster
        fields = [
            "id",
            "organization",
            "name",
            "slug",
            "kind",
            "region",
            "status",
            "last_sync_at",
            "last_error",
            "preference",
            "levels",
            "capabilities",
            "failover_after",
            "start_timeout",
            "nodes",
            "accelerators",
            "options",
        ]
        read_only_fields = fields

    @extend_schema_field(CapabilitiesSerializer)
    def get_capabilities(self, cluster: Cluster) -> dict[str, Any]:
        found = capabilities.of(cluster.kind, cluster.options)
        return {
            "runs": sorted(found.runs),
            "described": found.describe(),
            "container_runtime": found.container_runtime,
        }

    @extend_schema_field(
        {
            "type": "object",
            "properties": {
                "total": {"type": "integer"},
                "by_state": {"type": "object", "additionalProperties": {"type": "integer"}},
            },
        }
    )
    def get_nodes(self, cluster: Cluster) -> dict[str, Any]:
        by_state: dict[str, int] = self.context.get("by_state", {}).get(cluster.pk, {})
        return {"total": sum(by_state.values()), "by_state": by_state}

    @extend_schema_field(AcceleratorTotalsSerializer)
    def get_accelerators(self, cluster: Cluster) -> dict[str, int]:
        totals: dict[str, int] = self.context.get("accelerators", {}).get(cluster.pk, {})
        return {key: totals.get(key, 0) for key in ("total", "allocatable", "used")}

    @extend_schema_field({"type": "object", "nullable": True, "additionalProperties": True})
    def get_options(self, cluster: Cluster) -> dict[str, Any] | None:
        if cluster.pk not in self.context.get("administered", set()):
            return None
        options = cluster.options if isinstance(cluster.options, dict) else {}
        # A secret put in the options by mistake (older rows; the actions refuse new ones) is not shown.
        return {key: "(hidden)" if SECRET_OPTION.search(str(key)) else value for key, value in options.items()}


class OpenDrainSerializer(serializers.ModelSerializer[Drain]):
    requested_by = serializers.SlugRelatedField[Any](slug_field="username", read_only=True, allow_null=True)

    class Meta:
        model = Drain
        fields = ["id", "kind", "state", "reason", "grace_seconds", "requested_by", "automatic", "created_at"]
        read_only_fields = fields


class NodeSerializer(serializers.ModelSerializer[Node]):
    """A node as its last sync found it, with the drain or cordon that keeps it out of service (if any)."""

    cluster = serializers.SlugRelatedField[Any](slug_field="slug", read_only=True)
    accelerator = serializers.SlugRelatedField[Any](slug_field="name", read_only=True, allow_null=True)
    cpu = serializers.SerializerMethodField(help_text="Cores.")
    cpu_allocatable = serializers.SerializerMethodField(help_text="Cores.")
    cpu_used = serializers.SerializerMethodField(help_text="Cores.")
    memory_gib = serializers.SerializerMethodField()
    memory_allocatable_gib = serializers.SerializerMethodField()
    memory_used_gib = serializers.SerializerMethodField()
    open_drain = serializers.SerializerMethodField(help_text="What keeps it out of service; null when nothing does.")

    class Meta:
        model = Node
        fields = [
            "id",
            "name",
            "cluster",
            "state",
            "ready",
            "healthy",
            "present",
            "accelerator",
            "accelerators",
            "accelerators_allocatable",
            "accelerators_used",
            "cpu",
            "cpu_allocatable",
            "cpu_used",
            "memory_gib",
            "memory_allocatable_gib",
            "memory_used_gib",
            "topology",
            "heartbeat_at",
            "probe_reported_at",
            "open_drain",
        ]
        read_only_fields = fields

    @extend_schema_field(_amount())
    def get_cpu(self, node: Node) -> Decimal:
        return _cores(node.cpu)

    @extend_schema_field(_amount())
    def get_cpu_allocatable(self, node: Node) -> Decimal:
        return _cores(node.cpu_allocatable)

    @extend_schema_field(_amount())
    def get_cpu_used(self, node: Node) -> Decimal:
        return _cores(node.cpu_used)

    @extend_schema_field(_amount())
    def get_memory_gib(self, node: Node) -> Decimal:
        return _gib(node.memory)

    @extend_schema_field(_amount())
    def get_memory_allocatable_gib(self, node: Node) -> Decimal:
        return _gib(node.memory_allocatable)

    @extend_schema_field(_amount())
    def get_memory_used_gib(self, node: Node) -> Decimal:
        return _gib(node.memory_used)

    @extend_schema_field(OpenDrainSerializer(allow_null=True))
    def get_open_drain(self, node: Node) -> dict[str, Any] | None:
        drains: list[Drain] = getattr(node, "open_drains", [])  # prefetched newest first (NodeViewSet)
        return dict(OpenDrainSerializer(drains[0]).data) if drains else None


class ReasonSerializer(StrictSerializer):
    reason = StrictCharField(
        max_length=MAX_REASON,
        allow_blank=True,
        default="",
        help_text="Why: kept in the audit log and shown to the people whose jobs this moves.",
    )


class DrainSerializer(ReasonSerializer):
    grace_seconds = serializers.IntegerField(
        required=False,
        allow_null=True,
        help_text=f"0 to {MAX_GRACE}: seconds each running job gets to checkpoint before it is stopped and requeued; "
        "left out or null: each job's tier grace.",
    )


class MaintenanceWindowSerializer(serializers.ModelSerializer[MaintenanceWindow]):
    cluster = serializers.SlugRelatedField[Any](slug_field="slug", read_only=True)
    nodes = serializers.SlugRelatedField[Any](
        slug_field="name", many=True, read_only=True, help_text="Node names; none: every node of the cluster."
    )
    created_by = serializers.SlugRelatedField[Any](slug_field="username", read_only=True, allow_null=True)
    drains_from = serializers.SerializerMethodField(help_text="When its nodes are drained: drain_ahead before start.")

    class Meta:
        model = MaintenanceWindow
        fields = [
            "id",
            "cluster",
            "starts_at",
            "ends_at",
            "drain_ahead_minutes",
            "drains_from",
            "reason",
            "nodes",
            "created_by",
            "created_at",
        ]
        read_only_fields = fields

    @extend_schema_field(serializers.DateTimeField())
    def get_drains_from(self, window: MaintenanceWindow) -> Any:
        return serializers.DateTimeField().to_representation(
            window.starts_at - timedelta(minutes=window.drain_ahead_minutes)
        )


class InstantField(serializers.Field):  # type: ignore[type-arg]
    """A date and time through ``common.params.datetime_``: ISO 8601, as UTC (UTC when no offset is given),
    within what the database stores."""

    def to_internal_value(self, data: Any) -> Any:
        if not isinstance(data, str):
            raise serializers.ValidationError("A date and time (ISO 8601, e.g. 2026-05-01T09:00:00Z).")
        try:
            return params.datetime_(data, self.field_name or "datetime")
        except params.BadParameter as bad:
            raise serializers.ValidationError(bad.reason) from None

    def to_representation(self, value: Any) -> Any:
        return value


extend_schema_field({"type": "string", "format": "date-time"})(InstantField)


class MaintenancePlanSerializer(StrictSerializer):
    cluster = RefField(help_text="The cluster's slug or id.")
    starts_at = InstantField(help_text="ISO 8601; UTC when no offset is given.")
    ends_at = InstantField(help_text="ISO 8601; UTC when no offset is given.")
    reason = StrictCharField(max_length=MAX_REASON, allow_blank=True, help_text="Shown to the people affected.")
    nodes = serializers.ListField(
        child=RefField(), required=False, default=list, help_text="Node names or ids; none: every node."
    )
    drain_ahead_minutes = serializers.IntegerField(default=60, help_text="0 to 10080 (a week).")


# --- Elastic pools ------------------------------------------------------------------------------------------


def _money(value: Decimal | None) -> str | None:
    return None if value is None else f"{value:.2f}"


class ElasticPoolSerializer(serializers.ModelSerializer[ElasticPool]):
    """A pool as its cluster's members see it, with this month's spend (``context["spend"]``:
    ``clusters.elastic.spend``). Money is in the price book's currency, a decimal string to the cent."""

    cluster = serializers.SlugRelatedField[Any](slug_field="slug", read_only=True)
    flavor = serializers.SlugRelatedField[Any](source="accelerator", slug_field="name", read_only=True)
    node_cpu = serializers.SerializerMethodField(help_text="Cores each node offers to jobs.")
    node_memory_gib = serializers.SerializerMethodField(help_text="GiB each node offers to jobs.")
    monthly_budget = serializers.SerializerMethodField(help_text="A month's budget; null: no budget.")
    spent_this_month = serializers.SerializerMethodField(
        help_text="What its nodes have cost since the start of the month (UTC), at the rates they were asked at."
    )
    budget_left = serializers.SerializerMethodField(
        help_text="The monthly budget less this month's spend (below zero once past it); null without a budget."
    )

    class Meta:
        model = ElasticPool
        fields = [
            "id",
            "cluster",
            "name",
            "enabled",
            "flavor",
            "capacity_type",
            "node_accelerators",
            "node_cpu",
            "node_memory_gib",
            "min_nodes",
            "max_nodes",
            "lead_time",
            "idle_release",
            "monthly_budget",
            "spent_this_month",
            "budget_left",
        ]
        read_only_fields = fields
        extra_kwargs = {
            "lead_time": {"help_text": "Seconds from asking the cloud to a node in service."},
            "idle_release": {"help_text": "Seconds a node stays without work, then is given back."},
        }

    def _spend(self, pool: ElasticPool) -> Any:
        return self.context.get("spend", {}).get(pool.pk)

    @extend_schema_field(_amount())
    def get_node_cpu(self, pool: ElasticPool) -> Decimal:
        return _cores(pool.node_cpu)

    @extend_schema_field(_amount())
    def get_node_memory_gib(self, pool: ElasticPool) -> Decimal:
        return _gib(pool.node_memory)

    @extend_schema_field({**MONEY, "nullable": True})
    def get_monthly_budget(self, pool: ElasticPool) -> str | None:
        return _money(pool.monthly_budget)

    @extend_schema_field(MONEY)
    def get_spent_this_month(self, pool: ElasticPool) -> str | None:
        found = self._spend(pool)
        return _money(found.spent if found is not None else Decimal(0))

    @extend_schema_field({**MONEY, "nullable": True})
    def get_budget_left(self, pool: ElasticPool) -> str | None:
        found = self._spend(pool)
        if found is None:
            return _money(pool.monthly_budget)
        return _money(found.left)


class ElasticPoolBodySerializer(StrictSerializer):
    """A new pool, or (PATCH) the fields to change: shape only; ``clusters.actions.elastic`` judges the values."""

    name = StrictCharField(max_length=MAX_POOL_NAME, help_text="A slug, unique in the cluster (e.g. h100-spot).")
    flavor = StrictCharField(max_length=100, help_text="The name of one of the organization's accelerator types.")
    capacity_type = StrictCharField(
        required=False, max_length=20, help_text=f"One of {', '.join(CAPACITY_TYPES)} (default on_demand)."
    )
    node_accelerators = StrictIntegerField(help_text="Accelerators each node has (1 or more).")
    node_cpu = serializers.DecimalField(
        max_digits=12, decimal_places=3, help_text="Cores each node offers to jobs (more than 0)."
    )
    node_memory_gib = serializers.DecimalField(
        max_digits=14, decimal_places=3, help_text="GiB each node offers to jobs (more than 0)."
    )
    min_nodes = StrictIntegerField(required=False, help_text="Nodes it keeps once up (default 0).")
    max_nodes = StrictIntegerField(help_text="The most nodes it may have (1 or more, at least min_nodes).")
    lead_time = StrictIntegerField(
        required=False, help_text="Seconds from asking the cloud to a node in service (default 600)."
    )
    idle_release = StrictIntegerField(
        required=False, help_text="Seconds a node stays without work before it is given back (default 1800)."
    )
    monthly_budget = serializers.DecimalField(
        max_digits=14,
        decimal_places=2,
        required=False,
        allow_null=True,
        help_text="A month's budget in the price book's currency (0 or more); null: no budget.",
    )
    enabled = serializers.BooleanField(
        required=False, help_text="False switches it off: nothing more is asked of it (its nodes still go back)."
    )

    def to_action(self) -> dict[str, Any]:
        """The validated body in the action's fields and units (millicores, MiB)."""
        values = dict(self.validated_data)
        if "node_cpu" in values:
            values["node_cpu"] = int((values["node_cpu"] * CORES).to_integral_value(ROUND_HALF_UP))
        if "node_memory_gib" in values:
            values["node_memory"] = int((values.pop("node_memory_gib") * GIB).to_integral_value(ROUND_HALF_UP))
        return values


class ElasticGrantSerializer(serializers.ModelSerializer[ElasticGrant]):
    """One ask of a pool's cloud and what became of it. ``jobs`` (the jobs it was asked for) only to the cluster's
    admins (``context["administered"]``), as on the cluster's page; null for the others."""

    pool = serializers.SlugRelatedField[Any](slug_field="name", read_only=True)
    cost_per_hour = serializers.DecimalField(
        max_digits=14, decimal_places=4, read_only=True, help_text="What its nodes cost an hour, at the asked rate."
    )
    jobs = serializers.SerializerMethodField(help_text="Ids of the jobs it was asked for; null but to admins.")

    class Meta:
        model = ElasticGrant
        fields = [
            "id",
            "pool",
            "state",
            "count",
            "nodes",
            "jobs",
            "cost_per_hour",
            "hold",
            "asked_at",
            "up_at",
            "released_at",
            "message",
        ]
        read_only_fields = fields

    @extend_schema_field(serializers.ListField(child=serializers.IntegerField(), allow_null=True))
    def get_jobs(self, grant: ElasticGrant) -> list[int] | None:
        return list(grant.jobs) if self.context.get("administered") else None
