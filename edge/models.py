"""Edge devices and phased rollouts (docs/devices.md).

A ``Device`` (a robot, a lab machine) belongs to a team and one of its ``DeviceGroup``s; it joins with a
single-use ``EnrolmentToken`` and from then on speaks with its own credential (only a hash kept). Its desired
state is a model version (``desired_version``) with a revision counter that moves whenever the desired state
does, which the device's long poll watches. A ``Rollout`` sends one version to a group in phases (a canary,
then waves by cumulative percentage) and keeps one ``DeviceDeployment`` per device it targeted: the version
the device ran before (for the rollback) and how its update went. ``DeviceEvent`` is a device's history
(what it reported, when), ``RolloutEvent`` a rollout's timeline.
"""

from __future__ import annotations

from django.conf import settings
from django.db import models

from registry.models import ModelVersion
from tenancy.models import Team, new_token
from tenancy.scoping import Action, Role, TenancyRules, TenantManager

LEADS_AND_ADMINS = frozenset({Role.LEAD, Role.ADMIN})


class DeviceGroup(models.Model):
    """A set of a team's devices that rollouts target: a lab, a site, a robot type."""

    class Kind(models.TextChoices):
        LAB = "lab", "Lab"
        SITE = "site", "Site"
        ROBOT_TYPE = "robot_type", "Robot type"

    team = models.ForeignKey(Team, on_delete=models.PROTECT, related_name="device_groups")
    name = models.CharField(max_length=100)
    kind = models.CharField(max_length=16, choices=Kind.choices, default=Kind.SITE)
    description = models.TextField(blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    objects = TenantManager()

    class Tenancy(TenancyRules):
        pass

    class Meta:
        constraints = [models.UniqueConstraint(fields=["team", "name"], name="device_group_name_unique_in_team")]
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name


class EnrolmentToken(models.Model):
    """A single-use token that lets one device join ``group``; only its SHA-256 is kept, the token is shown
    once, when it is issued."""

    PREFIX = "qmenrol_"

    team = models.ForeignKey(Team, on_delete=models.CASCADE, related_name="enrolment_tokens")
    group = models.ForeignKey(DeviceGroup, on_delete=models.CASCADE, related_name="enrolment_tokens")
    key_hash = models.CharField(max_length=64, unique=True, editable=False)
    hint = models.CharField(max_length=16, editable=False)
    expires_at = models.DateTimeField()
    used_at = models.DateTimeField(null=True, blank=True)
    used_by = models.ForeignKey("Device", on_delete=models.SET_NULL, null=True, blank=True, related_name="+")
    #: The device this token re-enrols (a re-imaged robot, or a revoked one its lead restores); none: a new device
    #: of ``group``, or one already in it.
    device = models.ForeignKey(
        "Device", on_delete=models.CASCADE, null=True, blank=True, related_name="enrolment_tokens"
    )
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, related_name="+")
    created_at = models.DateTimeField(auto_now_add=True)

    objects = TenantManager()

    class Tenancy(TenancyRules):
        policy = {
            Action.VIEW: LEADS_AND_ADMINS,
            Action.CHANGE: LEADS_AND_ADMINS,
        }

    class Meta:
        ordering = ["-created_at"]

    def __str__(self) -> str:
        return f"{self.hint}… ({self.group})"

    @classmethod
    def generate(cls) -> tuple[str, str, str]:
        return new_token(cls.PREFIX)


class Health(models.TextChoices):
    UNKNOWN = "unknown", "Unknown"
    OK = "ok", "OK"
    FAILING = "failing", "Failing"


class Status(models.TextChoices):
    """What a device reports (the protocol's ``status``)."""

    IDLE = "idle", "Idle"
    DOWNLOADING = "downloading", "Downloading"
    VERIFYING = "verifying", "Verifying"
    SWITCHED = "switched", "Switched"
    HEALTHY = "healthy", "Healthy"
    UNHEALTHY = "unhealthy", "Unhealthy"
    DOWNLOAD_FAILED = "download_failed", "Download failed"
    CHECKSUM_MISMATCH = "checksum_mismatch", "Checksum mismatch"
    ROLLED_BACK = "rolled_back", "Rolled back"

    @property
    def failing(self) -> bool:
        return self in (Status.UNHEALTHY, Status.DOWNLOAD_FAILED, Status.CHECKSUM_MISMATCH)


class Device(models.Model):
    """One enrolled device: what it is, what it runs, what it should run."""

    PREFIX = "qmdev_"

    team = models.ForeignKey(Team, on_delete=models.PROTECT, related_name="devices")
    group = models.ForeignKey(DeviceGroup, on_delete=models.PROTECT, related_name="devices")
    name = models.CharField(max_length=100)
    credential_hash = models.CharField(max_length=64, unique=True, editable=False)
    credential_prefix = models.CharField(max_length=16, editable=False)
    hardware = models.JSONField(default=dict, blank=True)
    software = models.JSONField(default=dict, blank=True)
    connectivity = models.JSONField(default=dict, blank=True)
    running_version = models.ForeignKey(
        ModelVersion, on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )
    previous_version = models.ForeignKey(
        ModelVersion, on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )
    desired_version = models.ForeignKey(
        ModelVersion, on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )
    #: The rollout that set the desired state (null: set by hand, or never).
    desired_rollout = models.ForeignKey("Rollout", on_delete=models.SET_NULL, null=True, blank=True, related_name="+")
    #: Moves by one whenever the desired state does: the protocol's opaque ``revision`` is made from it.
    revision = models.PositiveIntegerField(default=1)
    last_seen_at = models.DateTimeField(null=True, blank=True)
    last_status = models.CharField(max_length=24, choices=Status.choices, blank=True)
    last_detail = models.CharField(max_length=500, blank=True)
    health = models.CharField(max_length=8, choices=Health.choices, default=Health.UNKNOWN)
    enrolled_at = models.DateTimeField()
    revoked_at = models.DateTimeField(null=True, blank=True)

    objects = TenantManager()

    class Tenancy(TenancyRules):
        pass

    class Meta:
        constraints = [models.UniqueConstraint(fields=["team", "name"], name="device_name_unique_in_team")]
        indexes = [models.Index(fields=["credential_prefix"])]
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name

    @classmethod
    def generate(cls) -> tuple[str, str, str]:
        return new_token(cls.PREFIX)

    @property
    def revision_tag(self) -> str:
        """The protocol's opaque revision: changes whenever the desired state does (a re-enrolled device's
        counter goes on, so it never repeats one)."""
        return f"{self.pk}-{self.revision}"


class RolloutState(models.TextChoices):
    RUNNING = "running", "Running"
    PAUSED = "paused", "Paused"
    COMPLETED = "completed", "Completed"
    ROLLED_BACK = "rolled_back", "Rolled back"
    CANCELLED = "cancelled", "Cancelled"

    @property
    def active(self) -> bool:
        return self in (RolloutState.RUNNING, RolloutState.PAUSED)

    def can_become(self, other: RolloutState) -> bool:
        """The transitions a rollout may make (``edge/actions/rollouts.py`` makes them)."""
        return other in TRANSITIONS[self]


TRANSITIONS: dict[RolloutState, frozenset[RolloutState]] = {
    RolloutState.RUNNING: frozenset(
        {RolloutState.PAUSED, RolloutState.COMPLETED, RolloutState.ROLLED_BACK, RolloutState.CANCELLED}
    ),
    RolloutState.PAUSED: frozenset({RolloutState.RUNNING, RolloutState.ROLLED_BACK, RolloutState.CANCELLED}),
    RolloutState.COMPLETED: frozenset({RolloutState.ROLLED_BACK}),
    RolloutState.ROLLED_BACK: frozenset(),
    RolloutState.CANCELLED: frozenset(),
}


class Rollout(models.Model):
    """One model version sent to one group in phases (``edge/actions/rollouts.py`` drives it)."""

    State = RolloutState

    team = models.ForeignKey(Team, on_delete=models.PROTECT, related_name="rollouts")
    group = models.ForeignKey(DeviceGroup, on_delete=models.PROTECT, related_name="rollouts")
    version = models.ForeignKey(ModelVersion, on_delete=models.PROTECT, related_name="+")
    state = models.CharField(max_length=16, choices=RolloutState.choices, default=RolloutState.RUNNING)
    #: ``[{"canary": 2}, {"percent": 50}, {"percent": 100}]``: a canary of N devices, then cumulative waves.
    phases = models.JSONField()
    #: The phase under way (an index into ``phases``).
    current_phase = models.PositiveIntegerField(default=0)
    phase_started_at = models.DateTimeField()
    #: Pause when this many targeted devices failed (a count), or this percentage of those targeted.
    failure_threshold = models.PositiveIntegerField(null=True, blank=True)
    failure_percent = models.PositiveIntegerField(null=True, blank=True)
    failures = models.PositiveIntegerField(default=0)
    auto_rollback = models.BooleanField(default=True)
    #: How long a device offline when targeted may hold the next phase back.
    offline_grace = models.PositiveIntegerField(default=600)
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, related_name="+")
    created_at = models.DateTimeField()
    ended_at = models.DateTimeField(null=True, blank=True)
    reason = models.TextField(blank=True)

    objects = TenantManager()

    class Tenancy(TenancyRules):
        pass

    class Meta:
        ordering = ["-created_at"]
        constraints = [
            # One rollout under way (running or paused) per group.
            models.UniqueConstraint(
                fields=["group"],
                condition=models.Q(state__in=["running", "paused"]),
                name="one_active_rollout_per_group",
            )
        ]

    def __str__(self) -> str:
        return f"rollout #{self.pk} of {self.version} to {self.group}"

    @property
    def state_value(self) -> RolloutState:
        return RolloutState(self.state)


class DeploymentState(models.TextChoices):
    PENDING = "pending", "Pending"
    UPDATING = "updating", "Updating"
    OFFLINE = "offline", "Offline"
    HEALTHY = "healthy", "Healthy"
    FAILED = "failed", "Failed"
    ROLLED_BACK = "rolled_back", "Rolled back"


class DeviceDeployment(models.Model):
    """One device targeted by one rollout: in which phase, what it ran before, how its update goes."""

    State = DeploymentState

    rollout = models.ForeignKey(Rollout, on_delete=models.CASCADE, related_name="deployments")
    device = models.ForeignKey(Device, on_delete=models.CASCADE, related_name="deployments")
    phase = models.PositiveIntegerField()
    #: What the device ran before the rollout (null: nothing): its desired state again on a rollback.
    from_version = models.ForeignKey(ModelVersion, on_delete=models.SET_NULL, null=True, blank=True, related_name="+")
    state = models.CharField(max_length=16, choices=DeploymentState.choices, default=DeploymentState.PENDING)
    #: Failed downloads so far (three make the deployment fail).
    failures = models.PositiveIntegerField(default=0)
    targeted_at = models.DateTimeField()
    updated_at = models.DateTimeField()

    class Meta:
        constraints = [models.UniqueConstraint(fields=["rollout", "device"], name="one_deployment_per_device")]
        ordering = ["phase", "device__name"]

    def __str__(self) -> str:
        return f"{self.device} in rollout #{self.rollout_id}: {self.state}"


class DeviceEvent(models.Model):
    """One line of a device's history: what it reported (or what was done to it), when."""

    device = models.ForeignKey(Device, on_delete=models.CASCADE, related_name="events")
    at = models.DateTimeField()
    status = models.CharField(max_length=24)
    version = models.ForeignKey(ModelVersion, on_delete=models.SET_NULL, null=True, blank=True, related_name="+")
    detail = models.CharField(max_length=500, blank=True)

    class Meta:
        ordering = ["-at", "-pk"]

    def __str__(self) -> str:
        return f"{self.device} {self.status} at {self.at:%Y-%m-%d %H:%M:%S}"


class RolloutEvent(models.Model):
    """One line of a rollout's timeline: started, a phase begun, a failure, paused, rolled back, …"""

    rollout = models.ForeignKey(Rollout, on_delete=models.CASCADE, related_name="events")
    at = models.DateTimeField()
    kind = models.CharField(max_length=24)
    message = models.CharField(max_length=500)
    actor = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, related_name="+")

    class Meta:
        ordering = ["at", "pk"]

    def __str__(self) -> str:
        return f"rollout #{self.rollout_id} {self.kind}: {self.message}"
