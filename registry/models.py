"""A team's models and their versions (docs/models.md).

A ``ModelVersion`` is immutable once published: what its artifact is (``artifact_uri``: where it came from, a
checkpoint location or an upload), how big (``size_bytes``) and its SHA-256 (``sha256``), where the bytes are
kept in the portal's artifact store when they are (``stored``: ``registry.artifacts.path_for``), the training
job and checkpoint it came from, who published it and when, and its evaluation results (``metrics``, a JSON
object of names to numbers). Devices and service replicas only ever run a stored version whose bytes match
its checksum.
"""

from __future__ import annotations

from django.conf import settings
from django.db import models

from scheduler.models import Job
from tenancy.models import Team
from tenancy.scoping import TenancyRules, TenantManager


class ModelVersionTenancy(TenancyRules):
    """A version belongs to its model's team."""

    team_field = "model__team"
    org_field = "model__team__organization"


class Model(models.Model):
    """A named model of a team (``policy``-wise like a job: the team sees it, its members publish to it)."""

    team = models.ForeignKey(Team, on_delete=models.PROTECT, related_name="models")
    name = models.SlugField(max_length=100)
    description = models.TextField(blank=True)
    created_at = models.DateTimeField()
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, related_name="+")

    objects = TenantManager()

    class Tenancy(TenancyRules):
        pass

    class Meta:
        constraints = [models.UniqueConstraint(fields=["team", "name"], name="model_name_unique_in_team")]
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name


class ModelVersion(models.Model):
    """One published version of a model: immutable once made."""

    model = models.ForeignKey(Model, on_delete=models.CASCADE, related_name="versions")
    #: The version's name ("3", "2026-11-30", "v1.2.0"): unique within its model.
    version = models.CharField(max_length=64)
    #: Where the artifact came from: a checkpoint location, an object-store URI, or ``upload:<file name>``.
    artifact_uri = models.CharField(max_length=500)
    size_bytes = models.PositiveBigIntegerField()
    #: The artifact's SHA-256, 64 lower-case hex digits.
    sha256 = models.CharField(max_length=64)
    #: Whether the portal's artifact store holds the bytes (``registry.artifacts.path_for``): only a stored
    #: version can be sent to devices or loaded by service replicas.
    stored = models.BooleanField(default=False)
    source_job = models.ForeignKey(Job, on_delete=models.SET_NULL, null=True, blank=True, related_name="+")
    source_checkpoint = models.CharField(max_length=500, blank=True)
    published_by = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, related_name="+")
    published_at = models.DateTimeField()
    #: Evaluation results: names to numbers (``{"accuracy": 0.93, "success_rate": 0.81}``).
    metrics = models.JSONField(default=dict, blank=True)
    notes = models.TextField(blank=True)

    objects = TenantManager()

    Tenancy = ModelVersionTenancy

    class Meta:
        constraints = [models.UniqueConstraint(fields=["model", "version"], name="model_version_unique")]
        ordering = ["model", "-published_at"]

    def __str__(self) -> str:
        return f"{self.model.name}:{self.version}"
