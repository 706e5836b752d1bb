"""What the model registry's API reads and takes: models, their versions, and a publication (an upload or a
job's checkpoint). The checks of what is taken are the actions' (``registry/actions.py``), shared with the
pages and ``qm model``; these only parse."""

from __future__ import annotations

import json
from typing import Any

from django.urls import reverse
from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from common.api.serializers import RefField, StrictCharField, StrictSerializer
from registry import queries
from registry.models import Model, ModelVersion


class VersionSerializer(serializers.ModelSerializer[ModelVersion]):
    model_name = serializers.CharField(source="model.name", read_only=True)
    published_by = serializers.CharField(source="published_by.username", default=None, read_only=True)
    download_url = serializers.SerializerMethodField(
        help_text="Where its bytes are served (HTTP ranges honoured); null when the portal does not hold them."
    )

    class Meta:
        model = ModelVersion
        fields = [
            "id",
            "model",
            "model_name",
            "version",
            "artifact_uri",
            "size_bytes",
            "sha256",
            "stored",
            "source_job",
            "source_checkpoint",
            "published_by",
            "published_at",
            "metrics",
            "notes",
            "download_url",
        ]
        read_only_fields = fields

    def get_download_url(self, version: ModelVersion) -> str | None:
        if not version.stored:
            return None
        return reverse("api:model-version-artifact", kwargs={"model_pk": version.model_id, "pk": version.pk})


class LatestSerializer(serializers.Serializer[Any]):
    id = serializers.IntegerField()
    version = serializers.CharField()
    size_bytes = serializers.IntegerField()
    sha256 = serializers.CharField()
    stored = serializers.BooleanField()
    published_at = serializers.DateTimeField()


class ModelSerializer(serializers.ModelSerializer[Model]):
    team = serializers.CharField(source="team.slug", read_only=True)
    team_id = serializers.IntegerField(read_only=True)
    created_by = serializers.CharField(source="created_by.username", default=None, read_only=True)
    versions = serializers.IntegerField(source="version_count", read_only=True, default=0)
    latest = serializers.SerializerMethodField(help_text="The version published last; null before the first.")

    class Meta:
        model = Model
        fields = ["id", "team", "team_id", "name", "description", "created_at", "created_by", "versions", "latest"]
        read_only_fields = fields

    @extend_schema_field(LatestSerializer(allow_null=True))
    def get_latest(self, model: Model) -> dict[str, Any] | None:
        latest = queries.latest(model)
        if latest is None:
            return None
        return dict(LatestSerializer(latest).data)


class ModelCreateSerializer(StrictSerializer):
    team = RefField(required=False, help_text="Slug or id; optional if you may create models in one team only.")
    name = StrictCharField(max_length=200, help_text="Lower-case letters, digits, - and _; unique in its team.")
    description = StrictCharField(max_length=5000, required=False, allow_blank=True, default="")


@extend_schema_field({"type": "object", "additionalProperties": {"type": "number"}})
class MetricsField(serializers.Field):  # type: ignore[type-arg]
    """A JSON object of names to numbers: as an object in a JSON body, as JSON text in a form (an upload)."""

    def to_internal_value(self, data: Any) -> Any:
        if isinstance(data, str):
            if not data.strip():
                return {}
            try:
                return json.loads(data)
            except ValueError:
                raise serializers.ValidationError('Not JSON: give an object such as {"accuracy": 0.93}.') from None
        return data

    def to_representation(self, value: Any) -> Any:
        return value


class PublishSerializer(StrictSerializer):
    """A new version: ``file`` (a multipart upload; ``job``, if given too, is recorded as its source) or ``job``
    alone (its latest checkpoint is the artifact)."""

    file = serializers.FileField(required=False, help_text="The artifact's bytes (multipart/form-data).")
    job = serializers.IntegerField(
        required=False,
        min_value=1,
        help_text="A job of the model's team: without file, an ended one, whose latest checkpoint is "
        "published; with file, the job the upload came from.",
    )
    version = StrictCharField(
        max_length=200, required=False, allow_blank=True, default="", help_text="Default: the next integer."
    )
    metrics = MetricsField(required=False, default=dict, help_text='Names to numbers: {"accuracy": 0.93}.')
    notes = StrictCharField(max_length=20_000, required=False, allow_blank=True, default="")
    sha256 = StrictCharField(
        max_length=200,
        required=False,
        allow_blank=True,
        default="",
        help_text="The SHA-256 expected: an upload that does not match is refused (400 naming sha256); for a "
        "checkpoint the portal cannot read, the one recorded.",
    )
    size_bytes = serializers.IntegerField(
        required=False, allow_null=True, default=None, min_value=0, help_text="The size expected (or recorded)."
    )

    def validate(self, data: dict[str, Any]) -> dict[str, Any]:
        if "file" not in data and "job" not in data:
            message = "Give file (an upload) or job (publish its latest checkpoint)."
            raise serializers.ValidationError({"file": message, "job": message})
        return data


class PublishNamedSerializer(PublishSerializer):
    """A new version of a team's model named ``name``, made with it when the team has none by that name."""

    team = RefField(required=False, help_text="Slug or id; optional if you may publish in one team only.")
    name = StrictCharField(max_length=200, help_text="The model's name: an existing one, or a new model.")
