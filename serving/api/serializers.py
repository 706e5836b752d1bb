"""The services API's representations, in people's units (cores, GiB) as the job API's, and the request
bodies as the schema documents them (``serving/submission.py`` reads them)."""

from __future__ import annotations

from typing import Any

from drf_spectacular.utils import extend_schema_field, inline_serializer
from rest_framework import serializers

from serving import figures, submission
from serving.models import Revision, Service

ERROR = inline_serializer(
    "ServiceError",
    {
        "error": inline_serializer(
            "ServiceErrorBody",
            {
                "status": serializers.IntegerField(),
                "code": serializers.CharField(),
                "message": serializers.CharField(),
                "fields": serializers.DictField(),
            },
        )
    },
)


class RevisionSerializer(serializers.ModelSerializer[Revision]):
    cpu = serializers.SerializerMethodField(help_text="Cores per replica.")
    memory_gib = serializers.SerializerMethodField(help_text="GiB per replica.")

    class Meta:
        model = Revision
        fields = [
            "number",
            "state",
            "reason",
            "image",
            "command",
            "env",
            "port",
            "health_path",
            "accelerators",
            "accelerator_types",
            "cpu",
            "memory_gib",
            "model_version",
            "created_at",
        ]
        read_only_fields = fields

    def get_cpu(self, revision: Revision) -> float:
        return submission.cores(revision.cpu)

    def get_memory_gib(self, revision: Revision) -> float:
        return submission.gib(revision.memory)


class ServiceSerializer(serializers.ModelSerializer[Service]):
    team = serializers.SlugRelatedField[Any](slug_field="slug", read_only=True)
    project = serializers.SlugRelatedField[Any](slug_field="slug", read_only=True)
    tier = serializers.SlugRelatedField[Any](slug_field="name", read_only=True)
    clusters = serializers.SlugRelatedField[Any](slug_field="slug", many=True, read_only=True)
    created_by = serializers.SlugRelatedField[Any](slug_field="username", read_only=True)
    revision = RevisionSerializer(read_only=True, help_text="What it runs now.")
    revisions = serializers.SerializerMethodField(help_text="Every revision, newest first.")
    endpoint = serializers.SerializerMethodField(help_text="The stable endpoint's URL.")
    replicas_ready = serializers.SerializerMethodField()
    rps = serializers.SerializerMethodField(help_text="Requests per second at the last control tick.")
    p95_ms = serializers.SerializerMethodField(help_text="Latency p95 at the last control tick (ms).")
    cost_per_hour = serializers.SerializerMethodField(help_text="Its running replicas' price per hour.")

    class Meta:
        model = Service
        fields = [
            "id",
            "team",
            "project",
            "name",
            "state",
            "public",
            "max_inflight",
            "max_rps",
            "endpoint",
            "created_by",
            "created_at",
            "tier",
            "clusters",
            "min_replicas",
            "max_replicas",
            "metric",
            "target",
            "scale_to_zero_after",
            "scale_up_window",
            "scale_down_window",
            "desired_replicas",
            "replicas_ready",
            "rps",
            "p95_ms",
            "cost_per_hour",
            "message",
            "revision",
            "revisions",
        ]
        read_only_fields = fields

    def _summary(self, service: Service) -> figures.Summary | None:
        found: dict[int, figures.Summary] = self.context.get("figures") or {}
        return found.get(service.pk)

    def get_endpoint(self, service: Service) -> str:
        return figures.endpoint(service)

    def get_replicas_ready(self, service: Service) -> int:
        summary = self._summary(service)
        return summary.ready if summary else 0

    def get_rps(self, service: Service) -> float | None:
        summary = self._summary(service)
        return summary.rps if summary else None

    def get_p95_ms(self, service: Service) -> float | None:
        summary = self._summary(service)
        return summary.p95_ms if summary else None

    @extend_schema_field(serializers.DecimalField(max_digits=12, decimal_places=2))
    def get_cost_per_hour(self, service: Service) -> str:
        summary = self._summary(service)
        return str(summary.cost_per_hour if summary else "0.00")

    @extend_schema_field(
        inline_serializer(
            "ServiceRevisionLine",
            {
                "number": serializers.IntegerField(),
                "state": serializers.CharField(),
                "reason": serializers.CharField(),
                "image": serializers.CharField(),
                "created_at": serializers.DateTimeField(),
            },
            many=True,
        )
    )
    def get_revisions(self, service: Service) -> list[dict[str, Any]]:
        return list(service.revisions.order_by("-number").values("number", "state", "reason", "image", "created_at"))


class ReplicaSerializer(serializers.Serializer[Any]):
    id = serializers.IntegerField(source="replica.pk")
    revision = serializers.IntegerField(source="replica.revision.number")
    state = serializers.CharField(source="replica.state")
    job = serializers.IntegerField(source="replica.job_id")
    url = serializers.CharField(source="replica.url")
    cluster = serializers.CharField()
    nodes = serializers.ListField(child=serializers.CharField())
    since = serializers.DateTimeField()
    ready_at = serializers.DateTimeField(source="replica.ready_at", allow_null=True)
    probe_failures = serializers.IntegerField(source="replica.probe_failures")
    cost_per_hour = serializers.DecimalField(max_digits=12, decimal_places=4)


#: A sample as ``figures.sample_dict`` gives it (a schema only: a serializer's field may not be named errors).
SAMPLE = inline_serializer(
    "ServiceSample",
    {
        "at": serializers.DateTimeField(),
        "requests": serializers.IntegerField(),
        "rps": serializers.FloatField(),
        "inflight": serializers.IntegerField(),
        "p50_ms": serializers.FloatField(allow_null=True),
        "p95_ms": serializers.FloatField(allow_null=True),
        "errors": serializers.IntegerField(),
        "replicas_ready": serializers.IntegerField(),
        "replicas_desired": serializers.IntegerField(),
    },
    many=True,
)


class ScaleSerializer(serializers.Serializer[Any]):
    """How a service scales (``scale``; also part of a change)."""

    min_replicas = serializers.IntegerField(required=False, help_text="0 allows scaling to zero.")
    max_replicas = serializers.IntegerField(required=False)
    metric = serializers.ChoiceField(choices=Service.Metric.choices, required=False)
    target = serializers.FloatField(required=False, help_text="The metric's value per replica.")
    scale_to_zero_after = serializers.IntegerField(
        required=False, allow_null=True, help_text="Seconds without a request before the last replica stops."
    )
    scale_up_window = serializers.IntegerField(required=False, help_text="Seconds.")
    scale_down_window = serializers.IntegerField(required=False, help_text="Seconds.")


class ServiceChangeSerializer(ScaleSerializer):
    """A change of a service: any of its program (rolled out as a new revision), scaling and the rest."""

    image = serializers.CharField(required=False, help_text="The container image (empty: the cluster's).")
    command = serializers.ListField(
        child=serializers.CharField(), required=False, help_text="A list of strings, or one command line."
    )
    env = serializers.DictField(child=serializers.CharField(), required=False)
    port = serializers.IntegerField(required=False, help_text="0: the program takes $PORT.")
    health_path = serializers.CharField(required=False, help_text="Probed for a 200; default /.")
    accelerators = serializers.IntegerField(required=False, help_text="Per replica.")
    accelerator_types = serializers.ListField(child=serializers.CharField(), required=False)
    cpu = serializers.FloatField(required=False, help_text="Cores per replica.")
    memory_gib = serializers.FloatField(required=False, help_text="GiB per replica.")
    model_version = serializers.IntegerField(
        required=False, allow_null=True, help_text="A registry model version's id: its artifact is QM_MODEL_PATH."
    )
    tier = serializers.CharField(required=False, allow_null=True, help_text="A priority tier's name.")
    clusters = serializers.ListField(child=serializers.CharField(), required=False, help_text="Slugs; none: any.")
    public = serializers.BooleanField(required=False, help_text="The endpoint answers without a token.")
    max_inflight = serializers.IntegerField(
        required=False,
        allow_null=True,
        help_text="Its requests at its replicas at once, at most the data plane's SERVE_MAX_INFLIGHT (null: that).",
    )
    max_rps = serializers.IntegerField(
        required=False,
        allow_null=True,
        help_text="Its requests a second, at most the data plane's SERVE_MAX_RPS where set (null: that, or none).",
    )


class ServiceCreateSerializer(ServiceChangeSerializer):
    team = serializers.CharField(required=False, help_text="Slug or id; optional if you may use one team only.")
    project = serializers.CharField(required=False, allow_null=True, help_text="Slug or id.")
    name = serializers.SlugField(help_text="Lower-case letters, digits and dashes; unique in the team.")
