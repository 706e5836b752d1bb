"""Billing: the price book, shared overhead, and the meter's records of usage and capacity.

- ``Price``: what an accelerator-hour of one flavor on one cluster costs, by capacity type (on-demand,
  reserved, spot for cloud capacity; on-prem, derived from purchase price, depreciation, power and hosting),
  from an effective day on. Changed only through ``billing/actions/prices.py`` (audited).
- ``Overhead``: shared monthly cost that no accelerator-hour carries (staff, storage, network, support).
- ``UsageRecord``: one attempt's hold on one node during one UTC day, exact to the second, written by the
  meter (``billing/actions/metering.py``) from the jobs' placements; unique per (attempt, node, day), so metering
  again never counts anything twice.
- ``CapacityRecord``: one node's presence in the fleet during (part of) one UTC day, sampled by the meter.
- ``Period``, ``Statement``, ``Adjustment``: months finance closed, with their attribution frozen and their
  statements kept as issued, and the corrections of a closed month booked in a later open one
  (``billing/actions/periods.py``).

Costs are not stored on the records: a report of an open month applies the price book as it stands
(``attribution.py``), so a corrected price corrects every open month that reads it; a closed month reads its
frozen attribution, and the correction shows as an adjustment in the next open month.
"""

from __future__ import annotations

from decimal import Decimal

from django.conf import settings
from django.core.validators import MinValueValidator
from django.db import models

from clusters.capacity import CapacityType
from clusters.models import AcceleratorType, Cluster, ElasticPool, Node
from scheduler.models import Attempt, Job
from tenancy.models import Organization, Project, Team
from tenancy.scoping import WORK_ROLES, Action, Role, TenancyRules, TenantManager

FINANCE_ROLES = frozenset({Role.FINANCE, Role.ADMIN})
#: Who plans capacity: forecasts, the capacity plan and what-ifs (procurement sees no one's jobs or costs).
PLANNING_ROLES = FINANCE_ROLES | {Role.PROCUREMENT}


class PriceBookTenancy(TenancyRules):
    """The price book and overhead: finance and admins read and change them (purchase prices stay there)."""

    team_field = None
    org_field = "organization"
    policy = {Action.VIEW: FINANCE_ROLES, Action.CHANGE: FINANCE_ROLES}


class Price(models.Model):
    """The price of an accelerator-hour of ``flavor`` on ``cluster`` for one capacity type, from the UTC day
    ``effective_from`` until the next row of the same (cluster, flavor, capacity type) takes over.

    Cloud capacity gives ``hourly_rate`` directly. On-prem capacity gives what a node costs; its rate is
    (purchase price / depreciation hours + power x energy price + hosting a month / hours a month) /
    accelerators per node, with 730.5 hours a month (a year of 365.25 days)."""

    organization = models.ForeignKey(Organization, on_delete=models.PROTECT, related_name="prices")
    cluster = models.ForeignKey(Cluster, on_delete=models.PROTECT, related_name="prices")
    flavor = models.ForeignKey(AcceleratorType, on_delete=models.PROTECT, related_name="prices")
    capacity_type = models.CharField(max_length=20, choices=CapacityType.choices)
    effective_from = models.DateField(help_text="The first UTC day the price applies.")
    #: Cloud: the price of one accelerator-hour.
    hourly_rate = models.DecimalField(
        max_digits=12, decimal_places=4, null=True, blank=True, validators=[MinValueValidator(Decimal(0))]
    )
    #: On-prem, per node: what it cost, over how many months it is written off, what it draws and what
    #: hosting it (space, cooling, support) costs a month.
    purchase_price = models.DecimalField(max_digits=14, decimal_places=2, null=True, blank=True)
    accelerators_per_node = models.PositiveIntegerField(null=True, blank=True)
    depreciation_months = models.PositiveIntegerField(null=True, blank=True)
    power_kw = models.DecimalField(max_digits=8, decimal_places=3, null=True, blank=True)
    energy_price = models.DecimalField(max_digits=8, decimal_places=4, null=True, blank=True, help_text="Per kWh.")
    hosting_per_month = models.DecimalField(max_digits=12, decimal_places=2, null=True, blank=True)
    #: The price of one accelerator-hour that reports apply: ``hourly_rate``, or the on-prem formula.
    rate = models.DecimalField(max_digits=16, decimal_places=6)
    note = models.CharField(max_length=200, blank=True)
    updated_at = models.DateTimeField()
    updated_by = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True)

    objects = TenantManager()
    Tenancy = PriceBookTenancy

    class Meta:
        ordering = ["cluster__name", "flavor__name", "capacity_type", "-effective_from"]
        constraints = [
            models.UniqueConstraint(
                fields=["cluster", "flavor", "capacity_type", "effective_from"], name="price_once_per_day"
            )
        ]

    def __str__(self) -> str:
        kind = self.get_capacity_type_display()
        return f"{self.cluster} {self.flavor} {kind} from {self.effective_from}: {self.rate}"


class Overhead(models.Model):
    """A shared cost of every month from ``starts`` to ``ends`` (both first days of months; open-ended when
    ``ends`` is empty), allocated to teams in proportion to their usage cost (``attribution.py``)."""

    organization = models.ForeignKey(Organization, on_delete=models.PROTECT, related_name="overheads")
    name = models.CharField(max_length=120)
    amount = models.DecimalField(
        max_digits=14, decimal_places=2, validators=[MinValueValidator(Decimal(0))], help_text="A month."
    )
    starts = models.DateField()
    ends = models.DateField(null=True, blank=True)
    updated_at = models.DateTimeField()
    updated_by = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True)

    objects = TenantManager()
    Tenancy = PriceBookTenancy

    class Meta:
        ordering = ["name", "-starts"]

    def __str__(self) -> str:
        return f"{self.name}: {self.amount} a month from {self.starts:%Y-%m}"


class GridIntensity(models.Model):
    """How much CO2e a kWh drawn in ``region`` (a cluster's ``region``) emits, in grams, from the UTC day
    ``effective_from`` until the next row of the region: what turns a statement's energy into emissions."""

    organization = models.ForeignKey(Organization, on_delete=models.PROTECT, related_name="+")
    region = models.CharField(max_length=60)
    effective_from = models.DateField()
    grams_per_kwh = models.DecimalField(
        max_digits=8, decimal_places=2, validators=[MinValueValidator(Decimal(0))], help_text="g CO2e per kWh."
    )
    note = models.CharField(max_length=200, blank=True)
    updated_at = models.DateTimeField()
    updated_by = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True)

    objects = TenantManager()
    Tenancy = PriceBookTenancy

    class Meta:
        ordering = ["region", "-effective_from"]
        constraints = [
            models.UniqueConstraint(
                fields=["organization", "region", "effective_from"], name="grid_intensity_once_per_day"
            )
        ]

    def __str__(self) -> str:
        return f"{self.region} from {self.effective_from}: {self.grams_per_kwh} g/kWh"


class PlanningTenancy(TenancyRules):
    """The capacity plan and what-ifs: those who plan capacity (finance, procurement, admins) read and change them."""

    team_field = None
    org_field = "organization"
    policy = {Action.VIEW: PLANNING_ROLES, Action.CHANGE: PLANNING_ROLES}


class CapacityChange(models.Model):
    """A planned change of the fleet's accelerators of ``flavor``: an order arriving ``lead_days`` after
    ``ordered_on`` (``starts_on``), a retirement from ``starts_on``, or a reserved cloud commitment from
    ``starts_on`` to ``ends_on`` (both included). The forecast's capacity ahead follows the plan
    (``billing/actions/capacity_plan.py`` says how)."""

    class Kind(models.TextChoices):
        ORDER = "order", "Order"
        RETIREMENT = "retirement", "Retirement"
        COMMITMENT = "commitment", "Reserved cloud commitment"

    organization = models.ForeignKey(Organization, on_delete=models.PROTECT, related_name="+")
    flavor = models.ForeignKey(AcceleratorType, on_delete=models.PROTECT, related_name="+")
    kind = models.CharField(max_length=20, choices=Kind.choices)
    accelerators = models.PositiveIntegerField()
    ordered_on = models.DateField(null=True, blank=True)
    lead_days = models.PositiveIntegerField(null=True, blank=True)
    starts_on = models.DateField()
    ends_on = models.DateField(null=True, blank=True)
    note = models.CharField(max_length=200, blank=True)
    updated_at = models.DateTimeField()
    updated_by = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True)

    objects = TenantManager()
    Tenancy = PlanningTenancy

    class Meta:
        ordering = ["starts_on", "pk"]

    def __str__(self) -> str:
        return f"{self.get_kind_display()} of {self.accelerators} {self.flavor} from {self.starts_on}"


class UsageRecord(models.Model):
    """An attempt's accelerators on one node during one UTC day: ``milli`` thousandths of accelerators
    (1000 per whole accelerator) held from ``start`` to ``end`` (whole seconds). ``closed`` once the
    attempt has ended; an open record is extended by every metering run."""

    organization = models.ForeignKey(Organization, on_delete=models.PROTECT, related_name="+", db_index=False)
    team = models.ForeignKey(Team, on_delete=models.PROTECT, related_name="+", db_index=False)
    project = models.ForeignKey(
        Project, on_delete=models.PROTECT, null=True, blank=True, related_name="+", db_index=False
    )
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="+", db_index=False)
    job = models.ForeignKey(Job, on_delete=models.PROTECT, related_name="usage")
    attempt = models.ForeignKey(Attempt, on_delete=models.PROTECT, related_name="usage", db_index=False)
    cluster = models.ForeignKey(Cluster, on_delete=models.PROTECT, related_name="+", db_index=False)
    node = models.ForeignKey(Node, on_delete=models.PROTECT, related_name="+", db_index=False)
    flavor = models.ForeignKey(AcceleratorType, on_delete=models.PROTECT, related_name="+", db_index=False)
    capacity_type = models.CharField(max_length=20, choices=CapacityType.choices)
    day = models.DateField()
    start = models.DateTimeField()
    end = models.DateTimeField()
    seconds = models.PositiveIntegerField()
    milli = models.PositiveIntegerField()
    closed = models.BooleanField(default=False)

    objects = TenantManager()

    class Tenancy(TenancyRules):
        org_field = "organization"
        policy = {Action.VIEW: WORK_ROLES}

    class Meta:
        ordering = ["day", "start", "pk"]
        constraints = [
            models.UniqueConstraint(fields=["attempt", "node", "day"], name="usage_once_per_attempt_node_day"),
            models.CheckConstraint(condition=models.Q(end__gte=models.F("start")), name="usage_ends_after_start"),
        ]
        indexes = [
            models.Index(fields=["organization", "day"], name="usage_org_day"),
            models.Index(fields=["team", "day"], name="usage_team_day"),
            models.Index(fields=["closed"], condition=models.Q(closed=False), name="usage_open"),
        ]

    def __str__(self) -> str:
        return f"{self.attempt_id} on node {self.node_id} {self.day}: {self.seconds}s x {self.milli}m"


class CapacityRecord(models.Model):
    """A node's accelerators in the fleet from ``start`` to ``end`` within one UTC day, as the meter saw it
    (it extends the open record of each present node at every run, so the error is one metering interval).
    A new record starts when the node's flavor, accelerator count or capacity type changes."""

    organization = models.ForeignKey(Organization, on_delete=models.PROTECT, related_name="+", db_index=False)
    cluster = models.ForeignKey(Cluster, on_delete=models.PROTECT, related_name="+", db_index=False)
    node = models.ForeignKey(Node, on_delete=models.PROTECT, related_name="+")
    flavor = models.ForeignKey(AcceleratorType, on_delete=models.PROTECT, related_name="+", db_index=False)
    capacity_type = models.CharField(max_length=20, choices=CapacityType.choices)
    accelerators = models.PositiveIntegerField()
    day = models.DateField()
    start = models.DateTimeField()
    end = models.DateTimeField()
    seconds = models.PositiveIntegerField()
    closed = models.BooleanField(default=False)

    objects = TenantManager()

    class Tenancy(TenancyRules):
        team_field = None
        org_field = "organization"
        policy = {Action.VIEW: FINANCE_ROLES}

    class Meta:
        ordering = ["day", "node", "start"]
        constraints = [
            models.UniqueConstraint(fields=["node", "day", "start"], name="capacity_once_per_node_start"),
            models.CheckConstraint(condition=models.Q(end__gte=models.F("start")), name="capacity_ends_after_start"),
        ]
        indexes = [
            models.Index(fields=["organization", "day"], name="capacity_org_day"),
            models.Index(fields=["closed"], condition=models.Q(closed=False), name="capacity_open"),
        ]

    def __str__(self) -> str:
        return f"node {self.node_id} {self.day}: {self.accelerators} x {self.seconds}s"


class MeterState(models.Model):
    """The meter's own row per organization: when its last run began (attempts admitted since are metered
    by the next run even if they already ended) and what the last reconciliation found."""

    organization = models.OneToOneField(Organization, on_delete=models.CASCADE, related_name="meter_state")
    last_run_started_at = models.DateTimeField(null=True, blank=True)
    last_run_finished_at = models.DateTimeField(null=True, blank=True)
    last_reconciled_at = models.DateTimeField(null=True, blank=True)
    #: The last reconciliation: attempts checked, discrepancies found and repaired, metered and placed seconds.
    last_reconciliation = models.JSONField(default=dict, blank=True)

    def __str__(self) -> str:
        return f"meter of {self.organization}"


class WhatIfStudy(models.Model):
    """Several what-ifs over one window compared side by side (a sweep): each scenario and seed is a ``WhatIf`` of
    its own, run by its own task, so that workers run them at once (``billing/actions/whatif.py``)."""

    organization = models.ForeignKey(Organization, on_delete=models.CASCADE, related_name="what_if_studies")
    requested_by = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True)
    name = models.CharField(max_length=120)
    days = models.PositiveIntegerField(default=30)
    #: Each scenario is replayed on the history as it was (seed 0) and on ``seeds - 1`` resamplings of its days.
    seeds = models.PositiveSmallIntegerField(default=1)
    created_at = models.DateTimeField()

    objects = TenantManager()
    Tenancy = PlanningTenancy

    class Meta:
        ordering = ["-created_at", "-pk"]

    def __str__(self) -> str:
        return self.name


class WhatIf(models.Model):
    """A capacity what-if for procurement: the last ``days`` days of the organization's job history replayed
    through the simulator on today's fleet and on the fleet with ``nodes`` more (or fewer, when negative)
    nodes of ``flavor`` in ``cluster``. Run by a Celery task (``billing/actions/whatif.py``) that reports progress."""

    class Status(models.TextChoices):
        QUEUED = "queued", "Queued"
        RUNNING = "running", "Running"
        DONE = "done", "Done"
        FAILED = "failed", "Failed"

    organization = models.ForeignKey(Organization, on_delete=models.CASCADE, related_name="what_ifs")
    requested_by = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True)
    cluster = models.ForeignKey(Cluster, on_delete=models.CASCADE, related_name="+")
    flavor = models.ForeignKey(AcceleratorType, on_delete=models.CASCADE, related_name="+")

    class Kind(models.TextChoices):
        NODES = "nodes", "Buy (or retire) nodes"
        RESERVE = "reserve", "Reserve cloud nodes"
        BURST = "burst", "Burst into an elastic pool"

    #: Nodes to add (positive) or remove (negative).
    nodes = models.IntegerField()
    #: How the nodes come and what they cost: bought, at the price book's rate of the cluster's nodes of the type
    #: (on-prem: purchase written off, power and hosting), arriving ``lead_days`` into the window; or reserved
    #: cloud capacity at the book's reserved rate, there from the start.
    kind = models.CharField(max_length=20, choices=Kind.choices, default=Kind.NODES)
    lead_days = models.PositiveIntegerField(default=0)
    #: Burst: the elastic pool the replay may ask for nodes, up to ``nodes`` of them (its maximum at most).
    pool = models.ForeignKey(ElasticPool, on_delete=models.CASCADE, null=True, blank=True, related_name="+")
    #: Whether the queues' and cohorts' quotas of the type grow (or shrink) with the fleet, in proportion: nodes
    #: bought beside quotas left as they are help only as far as borrowing reaches them.
    grow_quotas = models.BooleanField(default=False)
    #: A study's scenario (its place in the study) and seed: 0 replays the history as it was, another resamples
    #: its days with that seed.
    study = models.ForeignKey(WhatIfStudy, on_delete=models.CASCADE, null=True, blank=True, related_name="what_ifs")
    position = models.PositiveSmallIntegerField(default=0)
    seed = models.PositiveSmallIntegerField(default=0)
    days = models.PositiveIntegerField(default=30)
    status = models.CharField(max_length=20, choices=Status.choices, default=Status.QUEUED)
    #: 0 to 1, updated while it runs.
    progress = models.FloatField(default=0.0)
    #: Today's fleet and the changed one side by side: queue wait and utilisation (see ``whatif.py``).
    result = models.JSONField(default=dict, blank=True)
    error = models.TextField(blank=True)
    created_at = models.DateTimeField()
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    #: A run in progress holds the row until then (a crashed worker's claim runs out by itself).
    claimed_until = models.DateTimeField(null=True, blank=True)

    objects = TenantManager()
    Tenancy = PlanningTenancy

    class Meta:
        ordering = ["-created_at", "-pk"]

    def __str__(self) -> str:
        return f"{self.nodes:+d} {self.flavor} nodes in {self.cluster} ({self.get_status_display()})"


class Period(models.Model):
    """A month of an organization's costs, once finance has closed it (a month with no row is open).

    Closing freezes the month's attribution (``snapshot``: the lines, pools and jobs' costs as they stood,
    compressed JSON) and issues its statements (``Statement``); every page, export and API answer of the month
    reads the snapshot from then on. Reopening (audited, with a reason) keeps the row, open, so the next close
    is the next ``revision``."""

    organization = models.ForeignKey(Organization, on_delete=models.PROTECT, related_name="+")
    #: The first day of the month.
    month = models.DateField()
    closed = models.BooleanField(default=True)
    closed_at = models.DateTimeField()
    closed_by = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, related_name="+")
    #: How many times the month has been closed.
    revision = models.PositiveIntegerField(default=1)
    snapshot = models.BinaryField(default=bytes)
    #: A digest of what the month's attribution is computed from (usage, capacity, the price book, overhead,
    #: reservations) when it was last compared with the snapshot: unchanged inputs need no recomputation.
    inputs = models.JSONField(default=dict, blank=True)

    objects = TenantManager()
    Tenancy = PriceBookTenancy

    class Meta:
        ordering = ["-month"]
        constraints = [models.UniqueConstraint(fields=["organization", "month"], name="period_once_per_month")]

    def __str__(self) -> str:
        return f"{self.month:%Y-%m} ({'closed' if self.closed else 'reopened'})"


class Statement(models.Model):
    """A statement as issued when its month closed: the file's bytes, kept as they were sent, under a number
    unique in the organization (one document in two formats, CSV and XLSX, shares it). A team's (``team``) or
    the fleet summary (no team); a reopened month's statements are ``superseded`` and the next close issues new
    ones."""

    class Format(models.TextChoices):
        CSV = "csv", "CSV"
        XLSX = "xlsx", "XLSX"

    organization = models.ForeignKey(Organization, on_delete=models.PROTECT, related_name="+")
    period = models.ForeignKey(Period, on_delete=models.PROTECT, related_name="statements")
    team = models.ForeignKey(Team, on_delete=models.PROTECT, null=True, blank=True, related_name="+")
    format = models.CharField(max_length=4, choices=Format.choices)
    #: ``<YYYY-MM>-<serial>``: the serial counts the organization's statements, so numbers never repeat.
    number = models.CharField(max_length=40)
    serial = models.PositiveIntegerField()
    revision = models.PositiveIntegerField()
    content = models.BinaryField()
    sha256 = models.CharField(max_length=64)
    issued_at = models.DateTimeField()
    superseded_at = models.DateTimeField(null=True, blank=True)

    objects = TenantManager()

    class Tenancy(TenancyRules):
        team_field = "team"
        org_field = "organization"
        policy = {Action.VIEW: FINANCE_ROLES}

    class Meta:
        ordering = ["period", "team__name", "format"]
        constraints = [
            models.UniqueConstraint(fields=["organization", "number", "format"], name="statement_number_once"),
        ]

    def __str__(self) -> str:
        return f"statement {self.number}"

    @property
    def filename(self) -> str:
        who = self.team.slug if self.team else "fleet"
        kind = "statement" if self.team else "fleet"
        return f"{kind}-{who}-{self.period.month:%Y-%m}-{self.number}.{self.format}"


class Adjustment(models.Model):
    """A correction of a closed month (``corrects``), booked on ``day`` of a later open month (``month``): what
    the closed month's attribution would now be, less what it was closed with and the corrections booked
    before, at the grain of a statement's lines (team, project, user, cluster, flavor, capacity type; amounts
    in signed cents). No team: what stayed unallocated changed."""

    organization = models.ForeignKey(Organization, on_delete=models.PROTECT, related_name="+")
    corrects = models.DateField()
    month = models.DateField()
    day = models.DateField()
    team = models.ForeignKey(Team, on_delete=models.PROTECT, null=True, blank=True, related_name="+")
    project = models.ForeignKey(Project, on_delete=models.PROTECT, null=True, blank=True, related_name="+")
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.PROTECT, null=True, blank=True, related_name="+"
    )
    cluster = models.ForeignKey(Cluster, on_delete=models.PROTECT, null=True, blank=True, related_name="+")
    flavor = models.ForeignKey(AcceleratorType, on_delete=models.PROTECT, null=True, blank=True, related_name="+")
    capacity_type = models.CharField(max_length=20, blank=True)
    milli_seconds = models.BigIntegerField(default=0)
    usage = models.BigIntegerField(default=0)
    idle = models.BigIntegerField(default=0)
    overhead = models.BigIntegerField(default=0)
    #: What changed in the closed month's inputs, in words ("the price book", "usage metered late").
    reason = models.CharField(max_length=200)
    created_at = models.DateTimeField()

    objects = TenantManager()

    class Tenancy(TenancyRules):
        team_field = "team"
        org_field = "organization"
        policy = {Action.VIEW: WORK_ROLES}

    class Meta:
        ordering = ["month", "corrects", "pk"]
        indexes = [models.Index(fields=["organization", "month"], name="adjustment_org_month")]

    def __str__(self) -> str:
        return f"correction of {self.corrects:%Y-%m} in {self.month:%Y-%m}"
