"""Services, their revisions and replicas, and the load measured at each control tick (docs/services.md).

A ``Service`` is a team's program serving HTTP behind one stable endpoint
(``/serve/<organization>/<team>/<service>/``). What it runs is its current ``Revision`` (image, command, environment,
port, health path, resources, optionally a
registry model version); a change of any of those makes a new revision, rolled out one replica at a time.
Each ``Replica`` is one job of kind ``service`` (``scheduler.Job``): quotas, budgets, tiers and placement apply
to it as to any job. The control loop (``serving/actions/control.py``) measures, probes, scales and reconciles.
"""

from __future__ import annotations

from django.conf import settings
from django.core.validators import MinValueValidator
from django.db import models

from clusters.models import Cluster
from governance.models import PriorityTier
from registry.models import ModelVersion
from scheduler.models import Job
from tenancy.models import Project, Team
from tenancy.scoping import TenancyRules, TenantManager


class ServiceChildTenancy(TenancyRules):
    """Revisions, replicas and samples belong to their service's team."""

    team_field = "service__team"
    org_field = "service__team__organization"


class Service(models.Model):
    """A team's inference service: a program behind one endpoint, run as ``desired_replicas`` replicas."""

    class State(models.TextChoices):
        ACTIVE = "active", "Active"
        STOPPED = "stopped", "Stopped"

    class Metric(models.TextChoices):
        """What the autoscaler holds at ``target`` per replica (``serving/autoscale.py``)."""

        RPS = "rps", "Requests per second"
        INFLIGHT = "inflight", "Requests in flight"
        GPU = "gpu", "GPU utilization (%)"

    team = models.ForeignKey(Team, on_delete=models.PROTECT, related_name="services")
    project = models.ForeignKey(Project, on_delete=models.PROTECT, null=True, blank=True, related_name="services")
    name = models.SlugField(max_length=60)
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="+")
    created_at = models.DateTimeField()
    #: The replicas' priority tier: by default the team's highest non-preemptible tier, where there is one.
    tier = models.ForeignKey(PriorityTier, on_delete=models.PROTECT, null=True, blank=True, related_name="+")
    state = models.CharField(max_length=10, choices=State.choices, default=State.ACTIVE)
    min_replicas = models.PositiveIntegerField(default=1)
    max_replicas = models.PositiveIntegerField(default=1, validators=[MinValueValidator(1)])
    metric = models.CharField(max_length=10, choices=Metric.choices, default=Metric.RPS)
    #: The metric's value one replica should carry (requests per second, requests in flight, or percent).
    target = models.FloatField(default=10.0)
    #: With ``min_replicas`` 0: stop the last replica after this many seconds without a request (None: never).
    scale_to_zero_after = models.PositiveIntegerField(null=True, blank=True)
    scale_up_window = models.PositiveIntegerField(default=30, help_text="Seconds.")
    scale_down_window = models.PositiveIntegerField(default=300, help_text="Seconds.")
    #: Clusters the replicas may run on; none: any the team may use.
    clusters = models.ManyToManyField(Cluster, blank=True, related_name="+")
    #: What it runs now (the last revision rolled out in full; a rollout in progress is a newer one).
    revision = models.ForeignKey("Revision", on_delete=models.SET_NULL, null=True, blank=True, related_name="+")
    #: How many replicas the autoscaler last asked for.
    desired_replicas = models.PositiveIntegerField(default=0)
    #: Whether the endpoint answers without an API token.
    public = models.BooleanField(default=False)
    #: Its own limits at the data plane, within the operator's (None: the operator's, ``SERVE_MAX_INFLIGHT`` and
    #: ``SERVE_MAX_RPS``): requests at its replicas at once, and requests a second.
    max_inflight = models.PositiveIntegerField(null=True, blank=True)
    max_rps = models.PositiveIntegerField(null=True, blank=True)
    #: When the last request reached the endpoint (scale to zero counts from it).
    last_request_at = models.DateTimeField(null=True, blank=True)
    #: What the control loop could not do, in words (a replica refused by a quota, a rollout rolled back); ""
    #: when all is well.
    message = models.TextField(blank=True)

    objects = TenantManager()

    class Tenancy(TenancyRules):
        pass

    class Meta:
        constraints = [models.UniqueConstraint(fields=["team", "name"], name="service_name_unique_in_team")]
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name

    @property
    def spread_group(self) -> str:
        return f"service-{self.pk}"


class Revision(models.Model):
    """One version of what a service runs. Immutable once made; a change makes the next number."""

    class State(models.TextChoices):
        PENDING = "pending", "Pending"
        ROLLING_OUT = "rolling_out", "Rolling out"
        ACTIVE = "active", "Active"
        FAILED = "failed", "Failed"
        SUPERSEDED = "superseded", "Superseded"

    service = models.ForeignKey(Service, on_delete=models.CASCADE, related_name="revisions")
    number = models.PositiveIntegerField()
    image = models.CharField(max_length=500, blank=True)
    command = models.JSONField(default=list, blank=True)
    env = models.JSONField(default=dict, blank=True)
    #: The port the program serves on (0: the port the cluster gives it in ``$PORT``).
    port = models.PositiveIntegerField(default=0)
    health_path = models.CharField(max_length=200, default="/")
    accelerators = models.PositiveIntegerField(default=0)
    accelerator_types = models.JSONField(default=list, blank=True)
    cpu = models.PositiveIntegerField(default=1000, help_text="Millicores per replica.")
    memory = models.PositiveBigIntegerField(default=2048, help_text="MiB per replica.")
    model_version = models.ForeignKey(
        ModelVersion, on_delete=models.PROTECT, null=True, blank=True, related_name="service_revisions"
    )
    state = models.CharField(max_length=20, choices=State.choices, default=State.PENDING)
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, related_name="+")
    created_at = models.DateTimeField()
    #: Why it is in its state, in words (a failed rollout's cause, a rollback's origin).
    reason = models.TextField(blank=True)

    objects = TenantManager()

    Tenancy = ServiceChildTenancy

    class Meta:
        constraints = [models.UniqueConstraint(fields=["service", "number"], name="revision_number_unique")]
        ordering = ["service", "-number"]

    def __str__(self) -> str:
        return f"{self.service.name} r{self.number}"


class Replica(models.Model):
    """One running copy of a revision: a job of kind ``service``, followed by the control loop's probes."""

    class State(models.TextChoices):
        STARTING = "starting", "Starting"
        READY = "ready", "Ready"
        UNHEALTHY = "unhealthy", "Unhealthy"
        DRAINING = "draining", "Draining"
        GONE = "gone", "Gone"

    service = models.ForeignKey(Service, on_delete=models.CASCADE, related_name="replicas")
    revision = models.ForeignKey(Revision, on_delete=models.CASCADE, related_name="replicas")
    job = models.OneToOneField(Job, on_delete=models.CASCADE, related_name="replica")
    state = models.CharField(max_length=20, choices=State.choices, default=State.STARTING)
    created_at = models.DateTimeField()
    ready_at = models.DateTimeField(null=True, blank=True)
    last_probe_at = models.DateTimeField(null=True, blank=True)
    #: Health checks failed in a row (``control.UNHEALTHY_AFTER`` of them: unhealthy, then replaced).
    probe_failures = models.PositiveIntegerField(default=0)
    #: Since when it is draining: the endpoint sends it nothing new; it is stopped once idle or past the drain time.
    drain_started_at = models.DateTimeField(null=True, blank=True)
    #: Where the endpoint sends requests (the job's running attempt's ``serve_url``, copied at each probe).
    url = models.URLField(max_length=500, blank=True)

    objects = TenantManager()

    Tenancy = ServiceChildTenancy

    class Meta:
        ordering = ["service", "pk"]
        indexes = [models.Index(fields=["service", "state"], name="replica_service_state")]

    def __str__(self) -> str:
        return f"{self.service.name} replica {self.pk}"


class ServiceSample(models.Model):
    """What a service carried over one control tick (kept ``SERVICE_SAMPLE_DAYS``)."""

    service = models.ForeignKey(Service, on_delete=models.CASCADE, related_name="samples")
    at = models.DateTimeField()
    requests = models.PositiveIntegerField(default=0)
    rps = models.FloatField(default=0.0)
    inflight = models.PositiveIntegerField(default=0)
    p50_ms = models.FloatField(null=True, blank=True)
    p95_ms = models.FloatField(null=True, blank=True)
    errors = models.PositiveIntegerField(default=0)
    replicas_ready = models.PositiveIntegerField(default=0)
    replicas_desired = models.PositiveIntegerField(default=0)
    #: What the metric alone asked for this tick, before the windows and bounds (``autoscale.recommend``):
    #: the stabilisation windows look back over these.
    recommended = models.PositiveIntegerField(default=0)

    objects = TenantManager()

    Tenancy = ServiceChildTenancy

    class Meta:
        ordering = ["service", "-at"]
        indexes = [models.Index(fields=["service", "-at"], name="sample_service_at")]

    def __str__(self) -> str:
        return f"{self.service.name} @ {self.at:%H:%M:%S}"
