"""What governs jobs: cohorts, team queues, quotas, member limits, budgets and their alerts, the history of
quota changes and priority tiers.

Quotas are kept in the units people think in (accelerators, cores, GiB) and converted to the engine's integer
units (milli-accelerators, millicores, MiB) when the placement loop builds its snapshot. These models lived in
the ``scheduler`` app until the re-layout: each keeps its table (``Meta.db_table``), so moving them touched no
data (governance/migrations/0001_initial.py, docs/operations.md).
"""

from __future__ import annotations

from decimal import Decimal
from typing import Any, ClassVar

from django.conf import settings
from django.core.validators import MaxValueValidator, MinValueValidator
from django.db import models
from django.db.models import F, Q

from clusters.models import AcceleratorType
from tenancy.models import Organization, Project, Team
from tenancy.scoping import WORK_ROLES, Action, Role, TenancyRules, TenantManager


class OrgTenancy(TenancyRules):
    """Organization-wide settings: every member reads them, organization admins change them."""

    team_field = None
    org_field = "organization"
    policy = {Action.VIEW: WORK_ROLES, Action.CHANGE: frozenset({Role.ADMIN})}


class Cohort(models.Model):
    """A node of the quota tree: queues under one cohort lend each other unused quota (docs/scheduling.md
    §Quotas and borrowing)."""

    organization = models.ForeignKey(Organization, on_delete=models.PROTECT, related_name="cohorts")
    name = models.CharField(max_length=80)
    parent = models.ForeignKey("self", on_delete=models.PROTECT, null=True, blank=True, related_name="children")

    objects = TenantManager()
    Tenancy = OrgTenancy

    class Meta:
        db_table = "scheduler_cohort"
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

    objects = TenantManager()

    class Tenancy(TenancyRules):
        pass

    class Meta:
        db_table = "scheduler_queue"
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

    objects = TenantManager()

    class Tenancy(TenancyRules):
        team_field = "queue__team"
        org_field = "flavor__organization"

    class Meta:
        db_table = "scheduler_quota"
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

    objects = TenantManager()

    class Tenancy(TenancyRules):
        pass

    class Meta:
        db_table = "scheduler_memberlimit"
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

    class Counts(models.TextChoices):
        USAGE = "usage", "Usage"
        CHARGE = "charge", "Full charge"

    #: What the money limit counts: the jobs' usage at their prices, or the full charge (usage with its shares of
    #: idle capacity and overhead: the team's, or the project's, statement so far).
    counts = models.CharField(max_length=10, choices=Counts.choices, default=Counts.USAGE)
    hard = models.BooleanField(default=False, help_text="Hard: jobs that would pass it wait. Soft: it only alerts.")
    #: Who else gets the alerts by e-mail, besides the team's leads.
    recipients: models.JSONField[Any, Any] = models.JSONField(default=list, blank=True)
    webhook_url = models.URLField(max_length=500, blank=True)
    updated_at = models.DateTimeField()

    objects = TenantManager()

    class Tenancy(TenancyRules):
        policy = {Action.VIEW: WORK_ROLES}

    class Meta:
        db_table = "scheduler_budget"
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

    objects = TenantManager()

    class Tenancy(TenancyRules):
        team_field = "budget__team"
        org_field = "budget__team__organization"
        policy = {Action.VIEW: WORK_ROLES}

    class Meta:
        db_table = "scheduler_budgetalert"
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
    by ``governance/actions/quotas.py``, next to the audit log entry of the same change."""

    class Kind(models.TextChoices):
        QUOTA = "quota", "Quota"
        POLICY = "policy", "Queue policy"
        QUEUE = "queue", "Queue"
        COHORT = "cohort", "Cohort"
        MEMBER = "member", "Member limit"
        BUDGET = "budget", "Budget"
        TIER = "tier", "Priority tier"
        FAIR_SHARE = "fair_share", "Fair share"

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

    objects = TenantManager()

    class Tenancy(TenancyRules):
        team_field = "team"
        org_field = "organization"
        policy = {Action.VIEW: WORK_ROLES}

    class Meta:
        db_table = "scheduler_quotachange"
        ordering = ["-created_at", "-id"]
        indexes = [models.Index(fields=["team", "-created_at"])]

    def __str__(self) -> str:
        return f"{self.created_at:%Y-%m-%d %H:%M} {self.actor_name}: {self.subject}"


class WatchAction(models.TextChoices):
    """What follows a straggler or a hang (``PriorityTier.on_straggler``, ``on_hang``)."""

    NOTIFY = "notify", "tell the owner"
    RESTART = "restart", "restart from the last checkpoint"
    BOTH = "both", "tell the owner and restart"


class PriorityTier(models.Model):
    """A priority class jobs are submitted under. Higher values go first and may preempt lower ones."""

    organization = models.ForeignKey(Organization, on_delete=models.PROTECT, related_name="priority_tiers")
    name = models.CharField(max_length=40)
    value = models.IntegerField()
    preemptible = models.BooleanField(default=True, help_text="Whether jobs of this tier may be preempted.")
    grace_seconds = models.PositiveIntegerField(
        default=300, validators=[MaxValueValidator(24 * 3600)], help_text="Time a victim gets to checkpoint."
    )
    #: Seconds a silent cluster's jobs of this tier wait before they are restarted elsewhere; None: the
    #: cluster's own ``failover_after``.
    failover_after = models.PositiveIntegerField(
        null=True, blank=True, validators=[MinValueValidator(60), MaxValueValidator(7 * 24 * 3600)]
    )
    #: What follows when a running job of this tier is flagged as a straggler (one node persistently slower
    #: than its gang's) or as hung (``scheduler/watch``): its owner is told, or the job is restarted from its
    #: last checkpoint (a straggler's node drained, so the gang restarts without it), or both.
    on_straggler = models.CharField(max_length=10, choices=WatchAction.choices, default=WatchAction.NOTIFY)
    on_hang = models.CharField(max_length=10, choices=WatchAction.choices, default=WatchAction.NOTIFY)
    #: The longest its jobs should wait, in seconds; past it a job goes ahead of its tier's others and is first to
    #: get a reservation (docs/scheduling.md §A bound on waiting). None: no bound.
    max_wait = models.PositiveIntegerField(
        null=True, blank=True, validators=[MinValueValidator(600), MaxValueValidator(30 * 24 * 3600)]
    )
    #: Disruption control (docs/scheduling.md §Disruption): seconds its jobs run before anything may preempt them,
    #: and the most accelerator-hours of its jobs' work that preemptions for other jobs may lose in any hour.
    #: None: no protection, no cap.
    min_runtime = models.PositiveIntegerField(
        null=True, blank=True, validators=[MinValueValidator(60), MaxValueValidator(7 * 24 * 3600)]
    )
    max_disruption = models.DecimalField(
        max_digits=12, decimal_places=3, null=True, blank=True, validators=[MinValueValidator(Decimal(0))]
    )
    #: Its jobs run on spot capacity unless they say otherwise (a preemptible tier only): cheaper, and the cloud may
    #: take it back (they are requeued from their checkpoints, no retry spent).
    accepts_spot = models.BooleanField(default=False)
    #: Teams that may use the tier; none named means every team.
    teams = models.ManyToManyField(Team, blank=True, related_name="priority_tiers")
    is_default = models.BooleanField(default=False)

    objects = TenantManager()
    Tenancy = OrgTenancy

    class Meta:
        db_table = "scheduler_prioritytier"
        ordering = ["organization__name", "-value"]
        constraints = [
            models.UniqueConstraint(fields=["organization", "name"], name="tier_name_unique_in_org"),
            models.UniqueConstraint(
                fields=["organization"], condition=Q(is_default=True), name="tier_one_default_per_org"
            ),
        ]

    def __str__(self) -> str:
        return self.name


class FairShare(models.Model):
    """How an organization's fair sharing remembers use (docs/scheduling.md §Fair sharing): its half-life, and
    how much recent use beyond a queue's fair part weighs in its share. No row: the defaults. ``kept_with`` is
    the half-life the queues' ``QueueUsage`` were kept with; the meter rebuilds them from the usage records
    when it differs (a new half-life, or the first run)."""

    DEFAULT_HALF_LIFE = 7 * 24 * 3600
    HALF_LIFE_RANGE = (3600, 365 * 24 * 3600)
    DEFAULT_USAGE_WEIGHT = 1.0
    USAGE_WEIGHT_RANGE = (0.0, 10.0)

    organization = models.OneToOneField(Organization, on_delete=models.CASCADE, related_name="fair_share")
    half_life = models.PositiveIntegerField(
        default=DEFAULT_HALF_LIFE,
        validators=[MinValueValidator(HALF_LIFE_RANGE[0]), MaxValueValidator(HALF_LIFE_RANGE[1])],
        help_text="Seconds after which an hour of use counts half.",
    )
    usage_weight = models.FloatField(
        default=DEFAULT_USAGE_WEIGHT,
        validators=[MinValueValidator(USAGE_WEIGHT_RANGE[0]), MaxValueValidator(USAGE_WEIGHT_RANGE[1])],
        help_text="How much recent use beyond a queue's fair part adds to its share; 0: shares forget.",
    )
    kept_with = models.PositiveIntegerField(null=True, blank=True)

    objects = TenantManager()
    Tenancy = OrgTenancy

    def __str__(self) -> str:
        return f"{self.organization}: half-life {self.half_life} s, weight {self.usage_weight}"


class QueueUsage(models.Model):
    """A queue's recent use: accelerator-hours, each weighted by ``2 ** -(age / half-life)``, as of ``as_of``.
    Kept by the meter from its usage records, in the same transaction (``billing.actions.metering``); decayed to
    the moment a snapshot is taken (``scheduler.placement.snapshot``)."""

    queue = models.OneToOneField(Queue, on_delete=models.CASCADE, primary_key=True, related_name="recent_use")
    accelerator_hours = models.FloatField(default=0.0)
    as_of = models.DateTimeField()

    objects = TenantManager()

    class Tenancy(TenancyRules):
        team_field = "queue__team"
        org_field = "queue__team__organization"

    def __str__(self) -> str:
        return f"{self.queue}: {self.accelerator_hours:.1f} accelerator-hours as of {self.as_of:%Y-%m-%d %H:%M}"


class CapacityRequest(models.Model):
    """A team lead's request for capacity, decided by an organization admin (ColdFront's allocation requests):

    - a *reservation*: ``accelerators`` of ``flavor`` from ``starts_at`` to ``ends_at`` (a deadline). Approved, it
      books whole nodes of one cluster (``cluster``, ``nodes``) for the team over the window (the engine's
      ``Booking``: kept from other teams' work that could not be stopped in time, lent to their preemptible work
      while unused) and raises the team's quota of the flavor by as much over the window;
    - more *quota*: ``accelerators`` of ``flavor`` more for the team's queue from ``starts_at``, for good
      (``ends_at`` empty: the quota itself is raised when it is approved) or until ``ends_at``, when it lapses
      (the team's leads are told ahead).

    Changed only through ``governance.actions.capacity``; every step is in the audit log."""

    class Kind(models.TextChoices):
        RESERVATION = "reservation", "reservation"
        QUOTA = "quota", "more quota"

    class State(models.TextChoices):
        PENDING = "pending", "waiting for a decision"
        APPROVED = "approved", "approved"
        REFUSED = "refused", "refused"
        WITHDRAWN = "withdrawn", "withdrawn"
        ENDED = "ended", "ended"  # approved, and past its end (a temporary quota lapsed, a reservation over)

    team = models.ForeignKey(Team, on_delete=models.CASCADE, related_name="capacity_requests")
    kind = models.CharField(max_length=20, choices=Kind.choices)
    flavor = models.ForeignKey(AcceleratorType, on_delete=models.PROTECT, related_name="capacity_requests")
    accelerators = models.PositiveIntegerField(validators=[MinValueValidator(1)])
    starts_at = models.DateTimeField()
    ends_at = models.DateTimeField(null=True, blank=True)
    reason = models.TextField()
    requested_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )
    requested_by_name = models.CharField(max_length=150)
    created_at = models.DateTimeField(db_index=True)
    state = models.CharField(max_length=20, choices=State.choices, default=State.PENDING)
    decided_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )
    decided_by_name = models.CharField(max_length=150, blank=True)
    decided_at = models.DateTimeField(null=True, blank=True)
    decision = models.TextField(blank=True, help_text="Why it was approved, refused or withdrawn.")
    #: A reservation's booked nodes, chosen when it is approved.
    cluster = models.ForeignKey(
        "clusters.Cluster", on_delete=models.SET_NULL, null=True, blank=True, related_name="capacity_requests"
    )
    nodes = models.ManyToManyField("clusters.Node", blank=True, related_name="bookings")
    #: When the team's leads were told that it ends soon (once).
    notified_at = models.DateTimeField(null=True, blank=True)

    objects = TenantManager()

    class Tenancy(TenancyRules):
        policy = {Action.VIEW: WORK_ROLES}

    class Meta:
        ordering = ["-created_at", "-pk"]
        indexes = [models.Index(fields=["state", "ends_at"])]
        constraints = [
            models.CheckConstraint(
                condition=Q(ends_at__isnull=True) | Q(ends_at__gt=F("starts_at")), name="capacity_request_ends_after"
            ),
            models.CheckConstraint(
                condition=~Q(kind="reservation") | Q(ends_at__isnull=False), name="capacity_reservation_has_an_end"
            ),
        ]

    def __str__(self) -> str:
        until = f" until {self.ends_at:%Y-%m-%d %H:%M}" if self.ends_at else " for good"
        what = "reservation of" if self.kind == self.Kind.RESERVATION else "more quota:"
        return f"request {self.pk}: {self.team} {what} {self.accelerators} {self.flavor}{until}"


__all__ = [
    "Budget",
    "BudgetAlert",
    "CapacityRequest",
    "Cohort",
    "FairShare",
    "MemberLimit",
    "OrgTenancy",
    "PriorityTier",
    "Queue",
    "QueueUsage",
    "Quota",
    "QuotaChange",
]
