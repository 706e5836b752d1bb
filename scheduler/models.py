"""Jobs and what governs them: cohorts, team queues, quotas and priority tiers, and the loop's own state.

A job's life is in ``lifecycle.py`` (its states and the moves between them); rows change only through
``scheduler/actions.py`` (people) and ``scheduler/loop.py`` / ``scheduler/dispatch.py`` (the placement
loop). Quotas are kept in the units people think in (accelerators, cores, GiB) and converted to the
engine's integer units (milli-accelerators, millicores, MiB) when the loop builds its snapshot.
"""

from __future__ import annotations

from collections.abc import Mapping
from decimal import Decimal
from typing import Any, ClassVar

from django.conf import settings
from django.core.validators import MaxValueValidator, MinValueValidator
from django.db import models
from django.db.models import F, Q

from clusters.models import AcceleratorType, Cluster, Node
from clusters.secrets import JOB_SECRET_ENV, CredentialsError, decrypt, encrypt
from portal.models import Organization, Project, Team
from portal.tenancy import ALL_ROLES, Action, Role, TenancyRules, TenantQuerySet


class OrgTenancy(TenancyRules):
    """Organization-wide settings: every member reads them, organization admins change them."""

    team_field = None
    org_field = "organization"
    policy = {Action.VIEW: ALL_ROLES, Action.CHANGE: frozenset({Role.ADMIN})}


class Cohort(models.Model):
    """A node of the quota tree: queues under one cohort lend each other unused quota (docs/scheduling.md
    §Quotas and borrowing)."""

    organization = models.ForeignKey(Organization, on_delete=models.PROTECT, related_name="cohorts")
    name = models.CharField(max_length=80)
    parent = models.ForeignKey("self", on_delete=models.PROTECT, null=True, blank=True, related_name="children")

    objects: ClassVar[TenantQuerySet] = TenantQuerySet.as_manager()  # type: ignore[assignment]
    Tenancy = OrgTenancy

    class Meta:
        ordering = ["organization__name", "name"]
        constraints = [models.UniqueConstraint(fields=["organization", "name"], name="cohort_name_unique_in_org")]

    def __str__(self) -> str:
        return self.name


class Queue(models.Model):
    """A team's queue, or a queue of one project inside a team (a sub-quota). Jobs of a project with its
    own queue go there; all other jobs of the team go to the team's queue (the one without a project)."""

    class WithinQueue(models.TextChoices):
        NEVER = "never", "Never"
        LOWER_PRIORITY = "lower_priority", "Lower priority"
        LOWER_OR_NEWER_EQUAL_PRIORITY = "lower_or_newer_equal_priority", "Lower, or newer of equal priority"

    class Reclaim(models.TextChoices):
        NEVER = "never", "Never"
        LOWER_PRIORITY = "lower_priority", "Borrowed work of lower priority"
        ANY = "any", "Any borrowed work"
        FAIR_SHARING = "fair_sharing", "Fair sharing"

    team = models.ForeignKey(Team, on_delete=models.PROTECT, related_name="queues")
    project = models.ForeignKey(Project, on_delete=models.PROTECT, null=True, blank=True, related_name="queues")
    #: Unique in the organization; pending reasons name it ("queue 'vision' is using its quota").
    name = models.CharField(max_length=80)
    cohort = models.ForeignKey(Cohort, on_delete=models.PROTECT, null=True, blank=True, related_name="queues")
    #: Accelerator type names in the order to try them (flavor fallback); empty: any, cheapest fit first.
    flavor_order = models.JSONField(default=list, blank=True)
    within_queue = models.CharField(max_length=40, choices=WithinQueue.choices, default=WithinQueue.LOWER_PRIORITY)
    reclaim = models.CharField(max_length=20, choices=Reclaim.choices, default=Reclaim.LOWER_PRIORITY)
    weight = models.FloatField(default=1.0, validators=[MinValueValidator(0.01)])

    objects: ClassVar[TenantQuerySet] = TenantQuerySet.as_manager()  # type: ignore[assignment]

    class Tenancy(TenancyRules):
        pass

    class Meta:
        ordering = ["team__name", "name"]
        constraints = [
            models.UniqueConstraint(fields=["team", "project"], name="queue_one_per_project"),
            models.UniqueConstraint(fields=["team"], condition=Q(project=None), name="queue_one_per_team"),
        ]

    def __str__(self) -> str:
        return self.name


class Quota(models.Model):
    """One (accelerator type, resource) entry of a queue or a cohort. Empty limits mean unlimited."""

    class Resource(models.TextChoices):
        ACCELERATORS = "accelerator", "Accelerators"
        CPU = "cpu", "CPU cores"
        MEMORY = "memory", "Memory (GiB)"

    #: Engine units per unit kept here: milli-accelerators, millicores, MiB.
    ENGINE_UNITS: ClassVar[dict[str, int]] = {"accelerator": 1000, "cpu": 1000, "memory": 1024}

    queue = models.ForeignKey(Queue, on_delete=models.CASCADE, null=True, blank=True, related_name="quotas")
    cohort = models.ForeignKey(Cohort, on_delete=models.CASCADE, null=True, blank=True, related_name="quotas")
    flavor = models.ForeignKey(AcceleratorType, on_delete=models.PROTECT, related_name="quotas")
    resource = models.CharField(max_length=20, choices=Resource.choices, default=Resource.ACCELERATORS)
    nominal = models.DecimalField(max_digits=12, decimal_places=3, validators=[MinValueValidator(Decimal(0))])
    borrowing_limit = models.DecimalField(
        max_digits=12, decimal_places=3, null=True, blank=True, validators=[MinValueValidator(Decimal(0))]
    )
    lending_limit = models.DecimalField(
        max_digits=12, decimal_places=3, null=True, blank=True, validators=[MinValueValidator(Decimal(0))]
    )

    objects: ClassVar[TenantQuerySet] = TenantQuerySet.as_manager()  # type: ignore[assignment]

    class Tenancy(TenancyRules):
        team_field = "queue__team"
        org_field = "flavor__organization"

    class Meta:
        ordering = ["pk"]
        constraints = [
            models.CheckConstraint(
                condition=Q(queue__isnull=False, cohort=None) | Q(queue=None, cohort__isnull=False),
                name="quota_of_queue_xor_cohort",
            ),
            models.UniqueConstraint(fields=["queue", "flavor", "resource"], name="quota_unique_in_queue"),
            models.UniqueConstraint(fields=["cohort", "flavor", "resource"], name="quota_unique_in_cohort"),
        ]

    def __str__(self) -> str:
        return f"{self.queue or self.cohort} {self.flavor} {self.resource}: {self.nominal}"


class MemberLimit(models.Model):
    """The most accelerators one member's running jobs in a team may hold at once, set by the team's lead
    (``quotas.set_member_limit``); the placement loop keeps that member's further jobs pending."""

    team = models.ForeignKey(Team, on_delete=models.CASCADE, related_name="member_limits")
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="member_limits")
    accelerators = models.DecimalField(max_digits=12, decimal_places=3, validators=[MinValueValidator(Decimal(0))])

    objects: ClassVar[TenantQuerySet] = TenantQuerySet.as_manager()  # type: ignore[assignment]

    class Tenancy(TenancyRules):
        pass

    class Meta:
        ordering = ["team__name", "user__username"]
        constraints = [models.UniqueConstraint(fields=["team", "user"], name="member_limit_one_per_member")]

    def __str__(self) -> str:
        return f"{self.user} in {self.team}: {self.accelerators} accelerators"


class Budget(models.Model):
    """A monthly budget of a team, or of one project in a team: accelerator-hours, money, or both.

    Every budget alerts (by e-mail to the team's leads and the listed addresses, and by webhook) when its
    month's use reaches 50, 80 and 100% and when the forecast for the month passes it, each once
    (``BudgetAlert``). A hard budget also keeps jobs pending that could take it past its limit (``budgets.py``,
    the engine's ``budgets.py``). Periods are calendar months in UTC. Changed only through ``budgets.set_budget``.
    """

    team = models.ForeignKey(Team, on_delete=models.CASCADE, related_name="budgets")
    #: Empty: the whole team's budget; else the budget of this project's jobs (within the team's).
    project = models.ForeignKey(Project, on_delete=models.CASCADE, null=True, blank=True, related_name="budgets")
    accelerator_hours = models.DecimalField(
        max_digits=14, decimal_places=3, null=True, blank=True, validators=[MinValueValidator(Decimal(0))]
    )
    #: Money a month, in the currency of the clusters' prices.
    amount = models.DecimalField(
        max_digits=14, decimal_places=2, null=True, blank=True, validators=[MinValueValidator(Decimal(0))]
    )
    hard = models.BooleanField(default=False, help_text="Hard: jobs that would pass it wait. Soft: it only alerts.")
    #: Who else gets the alerts by e-mail, besides the team's leads.
    recipients: models.JSONField[Any, Any] = models.JSONField(default=list, blank=True)
    webhook_url = models.URLField(max_length=500, blank=True)
    updated_at = models.DateTimeField()

    objects: ClassVar[TenantQuerySet] = TenantQuerySet.as_manager()  # type: ignore[assignment]

    class Tenancy(TenancyRules):
        policy = {Action.VIEW: ALL_ROLES}

    class Meta:
        # The team's own budget first, then its projects' (PostgreSQL would put the empty project last).
        ordering = ["team__name", F("project__name").asc(nulls_first=True)]
        constraints = [
            models.UniqueConstraint(fields=["team", "project"], name="budget_one_per_project"),
            models.UniqueConstraint(fields=["team"], condition=Q(project=None), name="budget_one_per_team"),
            models.CheckConstraint(
                condition=Q(accelerator_hours__isnull=False) | Q(amount__isnull=False), name="budget_limits_something"
            ),
        ]

    def __str__(self) -> str:
        return f"project {self.team.slug}/{self.project.slug}" if self.project else f"team {self.team.slug}"


class BudgetAlert(models.Model):
    """One alert of a budget in one month: a threshold reached or a forecast over the limit. The unique
    constraint is what makes each alert be raised once; delivery (e-mail, webhook) is retried until done."""

    class Kind(models.TextChoices):
        HALF = "50", "50% used"
        MOST = "80", "80% used"
        ALL = "100", "100% used"
        FORECAST = "forecast", "Forecast over budget"

    class Measure(models.TextChoices):
        HOURS = "accelerator_hours", "Accelerator-hours"
        MONEY = "amount", "Money"

    budget = models.ForeignKey(Budget, on_delete=models.CASCADE, related_name="alerts")
    #: The first day of the month it is about.
    period = models.DateField()
    measure = models.CharField(max_length=20, choices=Measure.choices)
    kind = models.CharField(max_length=20, choices=Kind.choices)
    #: The budget's limit when it was raised: a changed limit arms the thresholds again.
    limit = models.DecimalField(max_digits=14, decimal_places=3)
    spent = models.DecimalField(max_digits=14, decimal_places=3)
    forecast = models.DecimalField(max_digits=14, decimal_places=3, null=True, blank=True)
    message = models.TextField()
    created_at = models.DateTimeField(db_index=True)
    emailed_at = models.DateTimeField(null=True, blank=True)
    #: Who it was mailed to (empty when the team has no lead with an address and none was listed).
    emailed_to = models.TextField(blank=True)
    webhook_sent_at = models.DateTimeField(null=True, blank=True)
    attempts = models.PositiveIntegerField(default=0)
    last_error = models.TextField(blank=True)

    objects: ClassVar[TenantQuerySet] = TenantQuerySet.as_manager()  # type: ignore[assignment]

    class Tenancy(TenancyRules):
        team_field = "budget__team"
        org_field = "budget__team__organization"
        policy = {Action.VIEW: ALL_ROLES}

    class Meta:
        ordering = ["-created_at", "-id"]
        constraints = [
            models.UniqueConstraint(
                fields=["budget", "period", "measure", "kind", "limit"], name="budget_alert_once_per_period"
            )
        ]

    def __str__(self) -> str:
        return f"{self.budget} {self.period:%Y-%m}: {self.get_kind_display()} of {self.get_measure_display()}"

    @property
    def delivered(self) -> bool:
        return self.emailed_at is not None and (self.webhook_sent_at is not None or not self.budget.webhook_url)


class QuotaChange(models.Model):
    """One change to how a team or the organization is governed (a quota, a queue's policy, a cohort), with
    who made it, why, and the values before and after: the history team leads and admins read. Written only
    by ``scheduler/quotas.py``, next to the audit log entry of the same change."""

    class Kind(models.TextChoices):
        QUOTA = "quota", "Quota"
        POLICY = "policy", "Queue policy"
        QUEUE = "queue", "Queue"
        COHORT = "cohort", "Cohort"
        MEMBER = "member", "Member limit"
        BUDGET = "budget", "Budget"
        TIER = "tier", "Priority tier"

    organization = models.ForeignKey(Organization, on_delete=models.CASCADE, related_name="quota_changes")
    #: The team whose queue changed; empty for organization-level changes (cohorts), which only
    #: organization-wide roles see.
    team = models.ForeignKey(Team, on_delete=models.CASCADE, null=True, blank=True, related_name="quota_changes")
    queue = models.ForeignKey(Queue, on_delete=models.SET_NULL, null=True, blank=True, related_name="changes")
    cohort = models.ForeignKey(Cohort, on_delete=models.SET_NULL, null=True, blank=True, related_name="changes")
    kind = models.CharField(max_length=20, choices=Kind.choices)
    #: What changed, in words ("queue vision: H100 accelerators").
    subject = models.CharField(max_length=200)
    before: models.JSONField[Any, Any] = models.JSONField(default=dict, blank=True)
    after: models.JSONField[Any, Any] = models.JSONField(default=dict, blank=True)
    reason = models.TextField()
    actor = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True)
    actor_name = models.CharField(max_length=150)
    created_at = models.DateTimeField(db_index=True)

    objects: ClassVar[TenantQuerySet] = TenantQuerySet.as_manager()  # type: ignore[assignment]

    class Tenancy(TenancyRules):
        team_field = "team"
        org_field = "organization"
        policy = {Action.VIEW: ALL_ROLES}

    class Meta:
        ordering = ["-created_at", "-id"]
        indexes = [models.Index(fields=["team", "-created_at"])]

    def __str__(self) -> str:
        return f"{self.created_at:%Y-%m-%d %H:%M} {self.actor_name}: {self.subject}"


class PriorityTier(models.Model):
    """A priority class jobs are submitted under. Higher values go first and may preempt lower ones."""

    organization = models.ForeignKey(Organization, on_delete=models.PROTECT, related_name="priority_tiers")
    name = models.CharField(max_length=40)
    value = models.IntegerField()
    preemptible = models.BooleanField(default=True, help_text="Whether jobs of this tier may be preempted.")
    grace_seconds = models.PositiveIntegerField(
        default=300, validators=[MaxValueValidator(24 * 3600)], help_text="Time a victim gets to checkpoint."
    )
    #: Teams that may use the tier; none named means every team.
    teams = models.ManyToManyField(Team, blank=True, related_name="priority_tiers")
    is_default = models.BooleanField(default=False)

    objects: ClassVar[TenantQuerySet] = TenantQuerySet.as_manager()  # type: ignore[assignment]
    Tenancy = OrgTenancy

    class Meta:
        ordering = ["organization__name", "-value"]
        constraints = [
            models.UniqueConstraint(fields=["organization", "name"], name="tier_name_unique_in_org"),
            models.UniqueConstraint(
                fields=["organization"], condition=Q(is_default=True), name="tier_one_default_per_org"
            ),
        ]

    def __str__(self) -> str:
        return self.name


class Job(models.Model):
    """A researcher's job: what it asks for, where it stands, and where it runs (its current attempt)."""

    class State(models.TextChoices):
        PENDING = "pending", "Pending"
        ADMITTED = "admitted", "Admitted"  # the engine placed it; not yet handed to the cluster
        PLACING = "placing", "Placing"  # handed to the cluster, not running yet
        RUNNING = "running", "Running"
        PREEMPTING = "preempting", "Preempting"  # told to checkpoint and stop, within its grace period
        REQUEUED = "requeued", "Requeued"  # waiting to run again (after preemption or a failure)
        SUCCEEDED = "succeeded", "Succeeded"
        FAILED = "failed", "Failed"
        CANCELLED = "cancelled", "Cancelled"

    class TopologyMode(models.TextChoices):
        REQUIRED = "required", "Required"
        PREFERRED = "preferred", "Preferred"

    team = models.ForeignKey(Team, on_delete=models.PROTECT, related_name="jobs")
    project = models.ForeignKey(Project, on_delete=models.PROTECT, null=True, blank=True, related_name="jobs")
    queue = models.ForeignKey(Queue, on_delete=models.PROTECT, related_name="jobs")
    submitted_by = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="jobs")
    name = models.CharField(max_length=120)
    #: A client-chosen key: submitting twice with the same key returns the first job (safe retries).
    idempotency_key = models.CharField(max_length=80, blank=True)
    cloned_from = models.ForeignKey("self", on_delete=models.SET_NULL, null=True, blank=True, related_name="+")

    # --- what it asks for (per worker) ---------------------------------------------------------------
    #: Accepted accelerator type names, any of them; empty: any type (or none when accelerators is 0).
    accelerator_types = models.JSONField(default=list, blank=True)
    accelerators = models.PositiveIntegerField(default=1, help_text="Accelerators per worker.")
    #: Milli of each accelerator: 1000 a whole one, 250 a quarter of a GPU (with one accelerator per worker).
    accelerator_milli = models.PositiveIntegerField(default=1000, validators=[MinValueValidator(1)])
    workers = models.PositiveIntegerField(default=1, validators=[MinValueValidator(1)])
    cpu = models.PositiveIntegerField(default=1000, help_text="Millicores per worker.")
    memory = models.PositiveBigIntegerField(default=4096, help_text="MiB per worker.")
    topology_level = models.CharField(max_length=40, blank=True)
    topology_mode = models.CharField(max_length=20, choices=TopologyMode.choices, default=TopologyMode.REQUIRED)
    time_limit = models.PositiveIntegerField(help_text="Seconds.")
    tier = models.ForeignKey(PriorityTier, on_delete=models.PROTECT, related_name="jobs")
    preemptible = models.BooleanField(default=True)
    checkpoint_location = models.CharField(max_length=500, blank=True)
    clusters = models.ManyToManyField(Cluster, blank=True, related_name="+")
    regions = models.JSONField(default=list, blank=True)
    max_price_per_hour = models.DecimalField(max_digits=12, decimal_places=2, null=True, blank=True)
    image = models.CharField(max_length=500, blank=True)
    command = models.JSONField(default=list, blank=True)
    script = models.TextField(blank=True)
    env = models.JSONField(default=dict, blank=True)
    #: Environment values shown to nobody (tokens, passwords): encrypted at rest (``clusters.secrets``) and
    #: decrypted only to hand them to the cluster when an attempt is dispatched. Their names are not secret.
    secret_env_ciphertext = models.BinaryField(default=b"", blank=True, editable=False)
    secret_env_names = models.JSONField(default=list, blank=True, editable=False)
    #: How many times a failed attempt is retried (a node or cluster failure) before the job fails.
    max_retries = models.PositiveIntegerField(default=3, validators=[MaxValueValidator(20)])

    # --- where it stands -------------------------------------------------------------------------------
    state = models.CharField(max_length=20, choices=State.choices, default=State.PENDING)
    state_changed_at = models.DateTimeField()
    submitted_at = models.DateTimeField()
    #: Attempts started so far; the current attempt is number ``attempt`` (0 before the first placement).
    attempt = models.PositiveIntegerField(default=0)
    #: Failed attempts so far (preemptions do not count against ``max_retries``).
    retries = models.PositiveIntegerField(default=0)
    #: A requeued job waits until then before it is considered again (retry backoff).
    not_before = models.DateTimeField(null=True, blank=True)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    #: Why it is waiting, as of the last cycle (``PendingReason`` code and plain words).
    pending_reason = models.CharField(max_length=40, blank=True)
    pending_message = models.TextField(blank=True)
    queue_position = models.PositiveIntegerField(null=True, blank=True)
    estimated_start = models.DateTimeField(null=True, blank=True)
    #: What ended it, in words (the last event's message, for a failed or cancelled job).
    message = models.TextField(blank=True)

    objects: ClassVar[TenantQuerySet] = TenantQuerySet.as_manager()  # type: ignore[assignment]

    class Tenancy(TenancyRules):
        # Researchers may cancel and clone their team's jobs; the actions narrow cancel to their own.
        policy = {Action.VIEW: ALL_ROLES, Action.CHANGE: frozenset({Role.RESEARCHER, Role.LEAD, Role.ADMIN})}

    class Meta:
        ordering = ["-submitted_at", "-pk"]
        constraints = [
            models.UniqueConstraint(
                fields=["submitted_by", "idempotency_key"],
                condition=~Q(idempotency_key=""),
                name="job_idempotency_key_unique_per_user",
            ),
            models.CheckConstraint(
                condition=Q(accelerator_milli__gte=1, accelerator_milli__lte=1000), name="job_milli_in_range"
            ),
        ]
        indexes = [
            models.Index(fields=["state", "submitted_at"], name="job_state_submitted"),
            models.Index(fields=["team", "-submitted_at"], name="job_team_recent"),
        ]

    def __str__(self) -> str:
        return f"#{self.pk} {self.name}"

    def set_secret_env(self, values: Mapping[str, str]) -> None:
        self.secret_env_ciphertext = encrypt(values, purpose=JOB_SECRET_ENV) if values else b""
        self.secret_env_names = sorted(values)

    def secret_env(self) -> dict[str, str]:
        """The secret values, for the cluster only (never for a page or an answer)."""
        if not self.secret_env_ciphertext:
            return {}
        try:
            return decrypt(bytes(self.secret_env_ciphertext), purpose=JOB_SECRET_ENV)
        except CredentialsError:
            raise CredentialsError(
                f"the secret environment values of job #{self.pk} cannot be decrypted with the current key; "
                "submit it again with them"
            ) from None

    @property
    def is_active(self) -> bool:
        from scheduler.lifecycle import ACTIVE

        return self.state in ACTIVE


class Attempt(models.Model):
    """One placement of a job on one cluster, from admission to its end. Retries and requeues make new
    attempts; the cluster knows each under its own key (``backend_key``), so a retried dispatch of the same
    attempt never starts it twice, and an attempt left behind on a cluster that was cut off is cancelled
    there once the cluster answers again (``cleanup_pending``)."""

    class Outcome(models.TextChoices):
        ACTIVE = "active", "Active"
        SUCCEEDED = "succeeded", "Succeeded"
        FAILED = "failed", "Failed"
        PREEMPTED = "preempted", "Preempted"
        CANCELLED = "cancelled", "Cancelled"
        LOST = "lost", "Lost"  # its node or cluster failed under it

    job = models.ForeignKey(Job, on_delete=models.CASCADE, related_name="attempts")
    number = models.PositiveIntegerField()
    cluster = models.ForeignKey(Cluster, on_delete=models.PROTECT, related_name="attempts")
    flavor = models.CharField(max_length=60, blank=True)
    cost_per_hour = models.DecimalField(max_digits=12, decimal_places=4, default=Decimal(0))
    borrowing = models.BooleanField(default=False)
    backfilled = models.BooleanField(default=False)
    admitted_at = models.DateTimeField()
    #: When the cluster reported it running; None while placing.
    started_at = models.DateTimeField(null=True, blank=True)
    ended_at = models.DateTimeField(null=True, blank=True)
    outcome = models.CharField(max_length=20, choices=Outcome.choices, default=Outcome.ACTIVE)
    #: The cluster's id for it, once submitted.
    backend_id = models.CharField(max_length=200, blank=True)
    #: A dispatch in progress holds the attempt until then (a crashed worker's claim runs out by itself).
    dispatch_claimed_until = models.DateTimeField(null=True, blank=True)
    dispatch_error = models.TextField(blank=True)
    #: Preempting: the stop signal was sent; past this the attempt is stopped for good.
    stop_deadline = models.DateTimeField(null=True, blank=True)
    #: The attempt ended here but may still run on its cluster: cancel it there when the cluster answers.
    cleanup_pending = models.BooleanField(default=False)

    objects: ClassVar[TenantQuerySet] = TenantQuerySet.as_manager()  # type: ignore[assignment]

    class Tenancy(TenancyRules):
        team_field = "job__team"
        org_field = "job__team__organization"

    class Meta:
        ordering = ["job", "number"]
        constraints = [models.UniqueConstraint(fields=["job", "number"], name="attempt_number_unique_in_job")]
        indexes = [models.Index(fields=["outcome", "cluster"], name="attempt_outcome_cluster")]

    def __str__(self) -> str:
        return f"job {self.job_id} attempt {self.number}"

    @property
    def may_run_on_cluster(self) -> bool:
        """Whether the cluster may have been handed the attempt (submitted, or a dispatch was under way)."""
        return bool(self.backend_id) or self.dispatch_claimed_until is not None

    @property
    def backend_key(self) -> str:
        """What the cluster knows the attempt by: idempotent submission is keyed on it."""
        return f"{self.job_id}-{self.number}"


class Assignment(models.Model):
    """What an attempt holds on one node: accelerators [[index, milli], ...], CPU and memory, for N workers."""

    attempt = models.ForeignKey(Attempt, on_delete=models.CASCADE, related_name="assignments")
    node = models.ForeignKey(Node, on_delete=models.PROTECT, related_name="+")
    workers = models.PositiveIntegerField()
    accelerators = models.JSONField(default=list)
    cpu = models.PositiveIntegerField()
    memory = models.PositiveBigIntegerField()

    class Meta:
        ordering = ["attempt", "pk"]

    def __str__(self) -> str:
        return f"{self.attempt} on {self.node_id}"


class JobEvent(models.Model):
    """One transition of a job, with its reason: the job's timeline."""

    job = models.ForeignKey(Job, on_delete=models.CASCADE, related_name="events")
    created_at = models.DateTimeField(db_index=True)
    from_state = models.CharField(max_length=20, blank=True)
    to_state = models.CharField(max_length=20)
    #: A short machine-readable code: submitted, admitted, dispatched, started, node_failed, preempted, ...
    reason = models.CharField(max_length=40)
    message = models.TextField(blank=True)
    attempt = models.PositiveIntegerField(default=0)
    actor = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True)
    detail: models.JSONField[Any, Any] = models.JSONField(default=dict, blank=True)

    objects: ClassVar[TenantQuerySet] = TenantQuerySet.as_manager()  # type: ignore[assignment]

    class Tenancy(TenancyRules):
        team_field = "job__team"
        org_field = "job__team__organization"

    class Meta:
        ordering = ["created_at", "pk"]

    def __str__(self) -> str:
        return f"job {self.job_id}: {self.from_state or '-'} -> {self.to_state} ({self.reason})"


class LoopState(models.Model):
    """The placement loop's own row, one per organization. ``generation`` grows with every applied cycle: a
    cycle applies its decisions only if no other cycle applied since it read the fleet (compare-and-set), so
    two loops that both believe they lead can never place onto the same free capacity."""

    organization = models.OneToOneField(Organization, on_delete=models.CASCADE, related_name="loop_state")
    generation = models.PositiveBigIntegerField(default=0)
    last_cycle_at = models.DateTimeField(null=True, blank=True)
    last_cycle: models.JSONField[Any, Any] = models.JSONField(default=dict, blank=True)

    def __str__(self) -> str:
        return f"loop of {self.organization} at generation {self.generation}"


__all__ = [
    "Assignment",
    "Attempt",
    "Budget",
    "BudgetAlert",
    "Cohort",
    "Job",
    "JobEvent",
    "LoopState",
    "PriorityTier",
    "Queue",
    "Quota",
]
