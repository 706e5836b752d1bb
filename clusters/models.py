"""The fleet as Quartermaster knows it: clusters, their nodes and accelerators, health and drains.

Rows here are written by the sync task (what the clusters report) and by admins' actions (drains,
maintenance windows); every write goes through ``clusters/actions/``.
Clusters belong to an organization: every member may view them, only organization admins change them.
"""

from __future__ import annotations

from datetime import datetime
from decimal import Decimal

from django.conf import settings
from django.core.validators import MaxValueValidator, MinValueValidator
from django.db import models

from clusters.backends import kinds
from clusters.secrets import decrypt, encrypt
from tenancy.models import Organization, new_token
from tenancy.scoping import WORK_ROLES, Action, Role, TenancyRules, TenantManager


class ClusterTenancy(TenancyRules):
    team_field = None
    org_field = "organization"
    policy = {Action.VIEW: WORK_ROLES, Action.CHANGE: frozenset({Role.ADMIN})}


class Cluster(models.Model):
    class Status(models.TextChoices):
        NEW = "new", "Not synced yet"
        HEALTHY = "healthy", "Healthy"
        DEGRADED = "degraded", "Degraded"  # the last sync failed; earlier data is kept
        UNREACHABLE = "unreachable", "Unreachable"  # several syncs in a row failed
        DISABLED = "disabled", "Disabled"

    organization = models.ForeignKey(Organization, on_delete=models.PROTECT, related_name="clusters")
    name = models.CharField(max_length=120)
    slug = models.SlugField(max_length=60)
    #: One of ``clusters.backends.kinds.KINDS``: each kind's descriptor says all that differs by kind.
    kind = models.CharField(max_length=20, choices=kinds.choices)
    endpoint = models.CharField(max_length=500, blank=True, help_text="API URL; empty for a simulated cluster.")
    region = models.CharField(max_length=60)
    #: Topology level names, widest first, e.g. ["block", "rack", "nvlink"]; the node is the implicit last.
    levels = models.JSONField(default=list, blank=True)
    #: Backend options (partition, project and zone, Kueue on/off, simulated fleet size, ...).
    options = models.JSONField(default=dict, blank=True)
    #: Admin preference for placing work here, 0-100 (e.g. prefer paid-for on-prem capacity).
    preference = models.PositiveSmallIntegerField(default=50, validators=[MaxValueValidator(100)])
    credentials_ciphertext = models.BinaryField(default=b"", blank=True, editable=False)
    status = models.CharField(max_length=20, choices=Status.choices, default=Status.NEW)
    last_sync_at = models.DateTimeField(null=True, blank=True)
    last_error = models.TextField(blank=True)
    #: Failed syncs in a row; sets the backoff and, past a threshold, the unreachable status.
    failures = models.PositiveIntegerField(default=0)
    next_sync_at = models.DateTimeField(null=True, blank=True)
    #: How long the cluster may stay silent before its running work is restarted elsewhere (a tier may say
    #: longer or shorter); until then a partition costs nothing.
    failover_after = models.PositiveIntegerField(
        default=15 * 60, validators=[MinValueValidator(60), MaxValueValidator(7 * 24 * 3600)], help_text="Seconds."
    )
    #: How long a submitted job may take to have every worker running before it is requeued whole (like
    #: Kueue's waitForPodsReady): a gang that starts in part holds its nodes and does nothing.
    start_timeout = models.PositiveIntegerField(
        default=15 * 60, validators=[MinValueValidator(60), MaxValueValidator(7 * 24 * 3600)], help_text="Seconds."
    )
    #: A sync in progress holds the cluster until then (a crashed worker's claim runs out by itself).
    sync_claimed_until = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    objects = TenantManager()
    Tenancy = ClusterTenancy

    class Meta:
        ordering = ["organization__name", "name"]
        constraints = [
            models.UniqueConstraint(fields=["organization", "slug"], name="cluster_slug_unique_in_org"),
        ]

    def __str__(self) -> str:
        return self.name

    # Credentials are encrypted at rest and never shown back: only the backend reads them.
    def set_credentials(self, credentials: dict[str, str]) -> None:
        self.credentials_ciphertext = encrypt(credentials) if credentials else b""

    def credentials(self) -> dict[str, str]:
        return decrypt(bytes(self.credentials_ciphertext)) if self.credentials_ciphertext else {}

    @property
    def has_credentials(self) -> bool:
        return bool(self.credentials_ciphertext)


class AcceleratorType(models.Model):
    """An accelerator model (a flavor of capacity): what the scheduler matches jobs against."""

    organization = models.ForeignKey(Organization, on_delete=models.PROTECT, related_name="accelerator_types")
    name = models.CharField(max_length=60, help_text="The model as clusters report it, e.g. H100-SXM-80GB or v5p.")
    memory_gib = models.PositiveIntegerField(default=0)
    generation = models.CharField(max_length=40, blank=True)
    interconnect = models.CharField(max_length=40, blank=True)

    objects = TenantManager()
    Tenancy = ClusterTenancy

    class Meta:
        ordering = ["name"]
        constraints = [models.UniqueConstraint(fields=["organization", "name"], name="accelerator_unique_in_org")]

    def __str__(self) -> str:
        return self.name


class NodeTenancy(ClusterTenancy):
    org_field = "cluster__organization"


class Node(models.Model):
    class State(models.TextChoices):
        SCHEDULABLE = "schedulable", "Schedulable"
        CORDONED = "cordoned", "Cordoned"  # no new work; running work stays
        DRAINING = "draining", "Draining"  # no new work; running work is being moved off
        DRAINED = "drained", "Drained"
        DOWN = "down", "Down"  # the cluster reports it down or not ready

    cluster = models.ForeignKey(Cluster, on_delete=models.CASCADE, related_name="nodes")
    name = models.CharField(max_length=200)
    accelerator = models.ForeignKey(AcceleratorType, on_delete=models.PROTECT, null=True, blank=True)
    accelerators = models.PositiveIntegerField(default=0)
    accelerators_allocatable = models.PositiveIntegerField(default=0)
    cpu = models.PositiveIntegerField(default=0, help_text="Millicores.")
    cpu_allocatable = models.PositiveIntegerField(default=0)
    memory = models.PositiveBigIntegerField(default=0, help_text="MiB.")
    memory_allocatable = models.PositiveBigIntegerField(default=0)
    #: What jobs hold now, as the cluster reports it.
    accelerators_used = models.PositiveIntegerField(default=0)
    cpu_used = models.PositiveIntegerField(default=0)
    memory_used = models.PositiveBigIntegerField(default=0)
    #: Domain per topology level of the cluster, e.g. {"block": "b1", "rack": "r07"}.
    topology = models.JSONField(default=dict, blank=True)
    labels = models.JSONField(default=dict, blank=True)
    #: Where the node is reached, as the cluster reports it (IP addresses and DNS names, ``NodeInfo.addresses``).
    addresses = models.JSONField(default=list, blank=True)
    state = models.CharField(max_length=20, choices=State.choices, default=State.SCHEDULABLE)
    ready = models.BooleanField(default=True)
    healthy = models.BooleanField(default=True)
    #: Passing health checks in a row since the last failure: auto-drained nodes resume after enough.
    passing_checks = models.PositiveIntegerField(default=0)
    heartbeat_at = models.DateTimeField(null=True, blank=True)
    #: When the node's health probe last reported (``deploy/node_probe.py``); None if it has no probe.
    probe_reported_at = models.DateTimeField(null=True, blank=True)
    #: For a node no longer present: the last sync that reported it (``seen_at`` covers present nodes).
    last_seen_at = models.DateTimeField(null=True, blank=True)
    #: False once a sync no longer finds the node on its cluster (kept for history and running jobs).
    present = models.BooleanField(default=True)

    objects = TenantManager()
    Tenancy = NodeTenancy

    class Meta:
        ordering = ["cluster", "name"]
        constraints = [models.UniqueConstraint(fields=["cluster", "name"], name="node_name_unique_in_cluster")]

    def __str__(self) -> str:
        return self.name

    @property
    def seen_at(self) -> datetime | None:
        """When a sync last reported the node: its cluster's last sync while it is present."""
        return self.cluster.last_sync_at if self.present else self.last_seen_at

    @property
    def takes_work(self) -> bool:
        return self.present and self.ready and self.healthy and self.state == Node.State.SCHEDULABLE


class TopologyDomain(models.Model):
    """A domain at one topology level of a cluster (a block, a rack, an NVLink domain, a TPU slice), with
    its parent at the level above: derived from the nodes at each sync."""

    cluster = models.ForeignKey(Cluster, on_delete=models.CASCADE, related_name="domains")
    level = models.CharField(max_length=40)
    name = models.CharField(max_length=200)
    parent = models.ForeignKey("self", on_delete=models.CASCADE, null=True, blank=True, related_name="children")

    objects = TenantManager()
    Tenancy = NodeTenancy

    class Meta:
        ordering = ["cluster", "level", "name"]
        constraints = [
            models.UniqueConstraint(fields=["cluster", "level", "name"], name="domain_unique_in_cluster_level")
        ]

    def __str__(self) -> str:
        return f"{self.level} {self.name}"


class NodeChildTenancy(ClusterTenancy):
    org_field = "node__cluster__organization"


class HealthCheckResult(models.Model):
    class Source(models.TextChoices):
        CLUSTER = "cluster", "Cluster"  # what the backend reports (not ready, stale heartbeat)
        PROBE = "probe", "Node probe"  # what the probe on the node reads through NVML

    node = models.ForeignKey(Node, on_delete=models.CASCADE, related_name="health_results")
    name = models.CharField(max_length=40, help_text="What was checked: ready, heartbeat, gpu_xid, gpu_ecc, ...")
    ok = models.BooleanField()
    message = models.TextField(blank=True)
    source = models.CharField(max_length=20, choices=Source.choices)
    observed_at = models.DateTimeField()

    objects = TenantManager()
    Tenancy = NodeChildTenancy

    class Meta:
        ordering = ["-observed_at", "-pk"]
        indexes = [models.Index(fields=["node", "-observed_at"], name="health_node_recent")]

    def __str__(self) -> str:
        return f"{self.node} {self.name} {'ok' if self.ok else 'failed'}"


class GpuSample(models.Model):
    """One GPU of a node during one UTC minute, as its probe read it: the readings of every report in that
    minute averaged (``readings`` of them), the throttle reasons OR-ed. Absent readings (NVML says "not
    supported") stay NULL. Kept ``GPU_SAMPLE_DAYS`` (``prune_gpu_samples``). A job's utilization is read
    from these through its assignments (``scheduler/utilization.py``); docs/operations.md has the fields."""

    node = models.ForeignKey(Node, on_delete=models.CASCADE, related_name="+", db_index=False)
    gpu = models.PositiveSmallIntegerField()
    #: The minute (UTC, seconds zero) the readings fall in.
    at = models.DateTimeField()
    readings = models.PositiveSmallIntegerField(default=1)
    #: Percent of the minute a kernel ran (NVML's GPU utilization), and the memory controller's.
    utilization = models.FloatField(null=True, blank=True)
    memory_utilization = models.FloatField(null=True, blank=True)
    memory_used = models.BigIntegerField(null=True, blank=True, help_text="Bytes.")
    memory_total = models.BigIntegerField(null=True, blank=True, help_text="Bytes.")
    power_w = models.FloatField(null=True, blank=True)
    power_limit_w = models.FloatField(null=True, blank=True)
    sm_clock_mhz = models.FloatField(null=True, blank=True)
    memory_clock_mhz = models.FloatField(null=True, blank=True)
    #: NVML's clocks-event (throttle) reasons bitmask; names in ``clusters.actions.probe.THROTTLE_REASONS``.
    throttle_reasons = models.BigIntegerField(null=True, blank=True)

    objects = TenantManager()
    Tenancy = NodeChildTenancy

    class Meta:
        ordering = ["node", "at", "gpu"]
        constraints = [models.UniqueConstraint(fields=["node", "at", "gpu"], name="gpu_sample_once_per_minute")]
        indexes = [models.Index(fields=["at"], name="gpu_sample_at")]

    def __str__(self) -> str:
        return f"{self.node_id} GPU {self.gpu} at {self.at:%Y-%m-%d %H:%M}"


class Drain(models.Model):
    """A request to take a node out of service: by an admin (with a reason) or by the auto-drain policy.

    A *cordon* stops new work landing on the node and lets running work finish; a *drain* also signals the
    running work, gives it its grace period to checkpoint, then requeues it elsewhere (no retry spent)."""

    class Kind(models.TextChoices):
        CORDON = "cordon", "Cordon"
        DRAIN = "drain", "Drain"

    class State(models.TextChoices):
        CORDONED = "cordoned", "Cordoned"
        DRAINING = "draining", "Draining"
        DRAINED = "drained", "Drained"
        RESUMED = "resumed", "Resumed"
        FAILED = "failed", "Failed"

    node = models.ForeignKey(Node, on_delete=models.CASCADE, related_name="drains")
    requested_by = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True)
    automatic = models.BooleanField(default=False)
    reason = models.TextField()
    kind = models.CharField(max_length=20, choices=Kind.choices, default=Kind.DRAIN)
    #: Seconds running work gets to checkpoint before it is stopped; None: each job's tier grace.
    grace_seconds = models.PositiveIntegerField(null=True, blank=True, validators=[MaxValueValidator(24 * 3600)])
    state = models.CharField(max_length=20, choices=State.choices, default=State.DRAINING)
    created_at = models.DateTimeField(auto_now_add=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    message = models.TextField(blank=True, help_text="What the cluster said, when it refused.")
    #: The maintenance window this drain is for: it ends with the window, not with good health.
    window = models.ForeignKey(
        "MaintenanceWindow", on_delete=models.SET_NULL, null=True, blank=True, related_name="drains"
    )

    objects = TenantManager()
    Tenancy = NodeChildTenancy

    class Meta:
        ordering = ["-created_at", "-pk"]

    def __str__(self) -> str:
        return f"drain of {self.node} ({self.state})"


#: A drain (or cordon) not over yet: the node stays out of service until it is resumed.
OPEN_DRAINS = (Drain.State.CORDONED, Drain.State.DRAINING, Drain.State.DRAINED)


class ProbeToken(models.Model):
    """A token the node probes of one cluster post health reports with. Only its SHA-256 is stored."""

    PREFIX = "qmp_"

    cluster = models.ForeignKey(Cluster, on_delete=models.CASCADE, related_name="probe_tokens")
    name = models.CharField(max_length=80)
    key_hash = models.CharField(max_length=64, unique=True, editable=False)
    hint = models.CharField(max_length=12, editable=False)
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    last_used_at = models.DateTimeField(null=True, blank=True)
    revoked_at = models.DateTimeField(null=True, blank=True)

    objects = TenantManager()

    class Tenancy(ClusterTenancy):
        org_field = "cluster__organization"
        policy = {Action.VIEW: frozenset({Role.ADMIN}), Action.CHANGE: frozenset({Role.ADMIN})}

    class Meta:
        ordering = ["-created_at"]

    def __str__(self) -> str:
        return f"{self.name} ({self.hint}…)"

    @classmethod
    def generate(cls) -> tuple[str, str, str]:
        return new_token(cls.PREFIX)


class MaintenanceWindow(models.Model):
    """Planned work on some nodes of a cluster (all of them when none are named); they are drained
    ``drain_ahead`` before the window starts."""

    cluster = models.ForeignKey(Cluster, on_delete=models.CASCADE, related_name="maintenance_windows")
    nodes = models.ManyToManyField(Node, blank=True, related_name="maintenance_windows")
    starts_at = models.DateTimeField()
    ends_at = models.DateTimeField()
    drain_ahead_minutes = models.PositiveIntegerField(default=60, validators=[MinValueValidator(0)])
    reason = models.TextField()
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    objects = TenantManager()

    class Tenancy(ClusterTenancy):
        org_field = "cluster__organization"

    class Meta:
        ordering = ["starts_at"]
        constraints = [
            models.CheckConstraint(
                condition=models.Q(ends_at__gt=models.F("starts_at")), name="window_ends_after_start"
            )
        ]

    def __str__(self) -> str:
        return f"{self.cluster} {self.starts_at:%Y-%m-%d %H:%M}"


class ElasticPool(models.Model):
    """Nodes a cloud can add to a cluster for work that waits for capacity (docs/scheduling.md §Elastic pools): all
    of one accelerator type and capacity type, between ``min_nodes`` and ``max_nodes``, up ``lead_time`` seconds
    after they are asked for, released after ``idle_release`` seconds without work, within a monthly budget (in the
    price book's currency; none: no budget). Its nodes carry the label ``qm/elastic-pool`` with its name."""

    cluster = models.ForeignKey(Cluster, on_delete=models.CASCADE, related_name="elastic_pools")
    name = models.SlugField(max_length=60)
    accelerator = models.ForeignKey(AcceleratorType, on_delete=models.PROTECT, related_name="elastic_pools")
    capacity_type = models.CharField(max_length=20, default="on_demand")
    #: The shape of its nodes: accelerators, millicores and MiB each (an instance type's, a node pool's machine).
    node_accelerators = models.PositiveIntegerField(validators=[MinValueValidator(1)])
    node_cpu = models.PositiveIntegerField(help_text="Millicores a node offers to jobs.")
    node_memory = models.PositiveBigIntegerField(help_text="MiB a node offers to jobs.")
    min_nodes = models.PositiveIntegerField(default=0)
    max_nodes = models.PositiveIntegerField(validators=[MinValueValidator(1)])
    lead_time = models.PositiveIntegerField(default=600, help_text="Seconds from asking to a node in service.")
    idle_release = models.PositiveIntegerField(default=1800, help_text="Seconds a node stays without work, then goes.")
    monthly_budget = models.DecimalField(
        max_digits=14, decimal_places=2, null=True, blank=True, validators=[MinValueValidator(Decimal(0))]
    )
    enabled = models.BooleanField(default=True)

    objects = TenantManager()

    class Tenancy(ClusterTenancy):
        org_field = "cluster__organization"

    class Meta:
        ordering = ["cluster__name", "name"]
        constraints = [
            models.UniqueConstraint(fields=["cluster", "name"], name="elastic_pool_name_unique_in_cluster"),
            models.CheckConstraint(
                condition=models.Q(max_nodes__gte=models.F("min_nodes")), name="elastic_pool_max_at_least_min"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.cluster.slug}/{self.name}"


class ElasticGrant(models.Model):
    """One ask of a pool's cloud for nodes, and what became of it: asked (in the placement loop's transaction),
    on its way (the cloud took it; ``nodes`` named, up around ``up_at``), up, refused (a stock-out, a quota of the
    cloud's: ``message``), or released (``released_at``). ``cost_per_hour``: what its nodes cost at the price
    book's rate when asked."""

    class State(models.TextChoices):
        ASKED = "asked", "asked"
        COMING = "coming", "on its way"
        UP = "up", "in service"
        REFUSED = "refused", "refused by the cloud"
        RELEASED = "released", "released"

    pool = models.ForeignKey(ElasticPool, on_delete=models.CASCADE, related_name="grants")
    count = models.PositiveIntegerField()
    state = models.CharField(max_length=20, choices=State.choices, default=State.ASKED)
    #: Why: the jobs it was asked for ("12, 13, 15").
    jobs = models.JSONField(default=list, blank=True)
    cost_per_hour = models.DecimalField(max_digits=14, decimal_places=4, default=Decimal(0))
    #: Seconds each node is expected to be held once up (the longest time limit of its jobs, then the pool's
    #: ``idle_release``): what it will cost is committed against the pool's budget until it is up.
    hold = models.PositiveIntegerField(default=0, help_text="Seconds each node is expected to be held once up.")
    asked_at = models.DateTimeField()
    up_at = models.DateTimeField()
    nodes = models.JSONField(default=list, blank=True)
    message = models.TextField(blank=True)
    released_at = models.DateTimeField(null=True, blank=True)

    objects = TenantManager()

    class Tenancy(ClusterTenancy):
        org_field = "pool__cluster__organization"

    class Meta:
        ordering = ["-asked_at", "-pk"]
        indexes = [models.Index(fields=["state"])]

    def __str__(self) -> str:
        return f"{self.pool}: {self.count} node(s) {self.state}"


__all__ = [
    "AcceleratorType",
    "Cluster",
    "Drain",
    "ElasticGrant",
    "ElasticPool",
    "GpuSample",
    "HealthCheckResult",
    "MaintenanceWindow",
    "Node",
    "ProbeToken",
    "TopologyDomain",
]
