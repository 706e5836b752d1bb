"""API representations of clusters, nodes and maintenance windows, and the bodies of admins' changes to them.

Amounts are in people's units (CPU cores, GiB), as on the pages. A cluster never shows its credentials; its
options only to the organization's admins (they may name paths on the Quartermaster host). The bodies are
strict (an unknown field is refused by name) and check types only: what a valid change is, and who may make
it, is ``clusters.actions``'s.
"""

from __future__ import annotations

from datetime import timedelta
from decimal import Decimal
from typing import Any

from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from clusters import capabilities
from clusters.actions import MAX_GRACE, MAX_REASON, SECRET_OPTION
from clusters.models import Cluster, Drain, MaintenanceWindow, Node
from common import params
from common.api.serializers import RefField, StrictCharField, StrictSerializer

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
