"""Jobs: what a researcher asked for, its attempts on the clusters and the nodes each was given, its timeline,
and the placement loop's own state per organization.

A job's life is in ``actions/lifecycle.py`` (its states and the moves between them); rows change only through
``scheduler/actions/`` (people and the loops) and ``scheduler/placement/`` (the placement loop's commit). What
governs jobs (queues, quotas, tiers, budgets) is the ``governance`` app's.
"""

from __future__ import annotations

import json
import re
import secrets
from collections.abc import Mapping
from decimal import Decimal
from typing import Any, TypeAlias

from django.conf import settings
from django.core.validators import MaxValueValidator, MinValueValidator
from django.db import models
from django.db.models import Q

from clusters.models import Cluster, Node
from clusters.secrets import JOB_SECRET_ENV, CredentialsError, decrypt, encrypt
from governance.models import PriorityTier, Queue
from scheduler.states import ACTIVE, JobState
from tenancy.models import Organization, Project, Team
from tenancy.scoping import WORK_ROLES, Action, Role, TenancyRules, TenantManager


class JobChildTenancy(TenancyRules):
    """Rows that belong to a job (its attempts, checkpoints and events) are scoped by the job's team."""

    team_field = "job__team"
    org_field = "job__team__organization"


def key_suffix() -> str:
    """Six random letters for a new job's ``Job.key_suffix``."""
    return secrets.token_hex(3)


class DependencyFailure(models.TextChoices):
    """What becomes of a job whose dependency can no longer be met (``after_ok`` on a job that failed)."""

    CANCEL = "cancel", "Cancel it"
    #: It keeps waiting, held, until the dependency is requeued (and then may be met) or the job is cancelled.
    HOLD = "hold", "Hold it"


class JobArray(models.Model):
    """One submission of many tasks (an index range, a grid or a list of parameters): each task is a ``Job``
    of the same request, with its index and parameters in its environment. ``max_running`` caps how many of
    its tasks hold capacity at once; the placement loop gives the engine no more waiting tasks than that."""

    team = models.ForeignKey(Team, on_delete=models.PROTECT, related_name="job_arrays")
    project = models.ForeignKey(Project, on_delete=models.PROTECT, null=True, blank=True, related_name="+")
    submitted_by = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="+")
    name = models.CharField(max_length=120)
    #: How the tasks were given: {"range": "0-99:2"}, {"grid": {...}} or {"params": [...]}.
    spec: models.JSONField[Any, Any] = models.JSONField(default=dict)
    count = models.PositiveIntegerField()
    #: At most this many tasks placed or running at once; None: no limit.
    max_running = models.PositiveIntegerField(null=True, blank=True, validators=[MinValueValidator(1)])
    submitted_at = models.DateTimeField()
    idempotency_key = models.CharField(max_length=80, blank=True)

    objects = TenantManager()

    class Tenancy(TenancyRules):
        policy = {Action.VIEW: WORK_ROLES, Action.CHANGE: frozenset({Role.RESEARCHER, Role.LEAD, Role.ADMIN})}

    class Meta:
        ordering = ["-submitted_at", "-pk"]
        constraints = [
            models.UniqueConstraint(
                fields=["submitted_by", "idempotency_key"],
                condition=~Q(idempotency_key=""),
                name="array_idempotency_key_unique_per_user",
            ),
        ]

    def __str__(self) -> str:
        return f"array #{self.pk} {self.name}"

    def task_env(self, index: int, params: Mapping[str, Any]) -> dict[str, str]:
        """The variables task ``index`` with ``params`` is started with (docs/jobs.md §Arrays and sweeps)."""
        env = {"QM_ARRAY_ID": str(self.pk), "QM_ARRAY_INDEX": str(index), "QM_ARRAY_COUNT": str(self.count)}
        if params:
            env["QM_PARAMS"] = json.dumps(dict(params), sort_keys=True)
            env.update({param_env_name(name): param_text(value) for name, value in params.items()})
        return env


def param_env_name(name: str) -> str:
    """``lr`` -> ``QM_PARAM_LR``: upper case, anything but letters, digits and _ as _."""
    return "QM_PARAM_" + re.sub(r"[^A-Za-z0-9_]", "_", str(name)).upper()


def param_text(value: Any) -> str:
    """A parameter's value as its variable holds it: strings as they are, the rest as JSON (``true``, ``0.1``)."""
    return value if isinstance(value, str) else json.dumps(value)


class Job(models.Model):
    """A researcher's job: what it asks for, where it stands, and where it runs (its current attempt)."""

    State: TypeAlias = JobState

    class TopologyMode(models.TextChoices):
        REQUIRED = "required", "Required"
        PREFERRED = "preferred", "Preferred"

    class Kind(models.TextChoices):
        JOB = "job", "Job"  # a container (``image``/``command``) or a batch ``script``, ``workers`` alike
        RAY = "ray", "Ray job"  # a Ray cluster (a head and ``workers`` workers) that runs ``entrypoint``
        #: An interactive session (JupyterLab, or a shell in JupyterLab's terminal) its submitter opens from the portal.
        SESSION = "session", "Interactive session"
        #: One replica of a service (``serving``): a program serving HTTP on a port until it is stopped.
        SERVICE = "service", "Service replica"

    class SessionApp(models.TextChoices):
        """What an interactive session runs (docs/jobs.md, "Interactive sessions")."""

        JUPYTERLAB = "jupyterlab", "JupyterLab"
        SHELL = "shell", "Shell (a JupyterLab terminal)"

    team = models.ForeignKey(Team, on_delete=models.PROTECT, related_name="jobs")
    project = models.ForeignKey(Project, on_delete=models.PROTECT, null=True, blank=True, related_name="jobs")
    queue = models.ForeignKey(Queue, on_delete=models.PROTECT, related_name="jobs")
    submitted_by = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="jobs")
    name = models.CharField(max_length=120)
    #: A client-chosen key: submitting twice with the same key returns the first job (safe retries).
    idempotency_key = models.CharField(max_length=80, blank=True)
    cloned_from = models.ForeignKey("self", on_delete=models.SET_NULL, null=True, blank=True, related_name="+")
    #: Random letters in the names clusters know its attempts by (``Attempt.backend_key``), so that two
    #: Quartermasters sharing a cluster (production and staging; two test databases) never take each other's
    #: jobs for their own. Empty for jobs made before it existed: their names stay as they were.
    key_suffix = models.CharField(max_length=8, blank=True, default=key_suffix, editable=False)

    kind = models.CharField(max_length=10, choices=Kind.choices, default=Kind.JOB)

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
    #: It accepts spot capacity (``JobRequest.spot``): placed on spot nodes too, and sent as spot where a cluster
    #: tells spot work apart (a Slurm spot QOS, Cloud TPU's spot tier).
    spot = models.BooleanField(default=False)
    checkpoint_location = models.CharField(max_length=500, blank=True)
    #: Where the job's data lives, a cluster slug or a region: the engine prefers clusters there (a hint).
    data_locality = models.CharField(max_length=120, blank=True)
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

    # --- TPU slices: ``workers`` slices (more than one: multislice) of exactly this type and shape ----------
    tpu_type = models.CharField(max_length=40, blank=True, help_text="A Cloud TPU slice type, e.g. v5p-32.")
    tpu_topology = models.CharField(max_length=20, blank=True, help_text="The slice's shape, e.g. 2x2x4.")

    # --- Ray jobs (kind "ray"): the head's shape (the workers' is the fields above) and what it runs ----------
    entrypoint = models.TextField(blank=True, help_text="The shell command the Ray job runs, e.g. python train.py.")
    runtime_env = models.JSONField(default=dict, blank=True, help_text="Ray's runtime environment (pip, env_vars).")
    head_cpu = models.PositiveIntegerField(default=1000, help_text="Millicores of the Ray head.")
    head_memory = models.PositiveBigIntegerField(default=4096, help_text="MiB of the Ray head.")
    head_accelerators = models.PositiveIntegerField(default=0, help_text="Accelerators of the Ray head.")

    # --- interactive sessions (kind "session"): what it runs, and after how long idle it ends by itself ------
    session_app = models.CharField(max_length=20, choices=SessionApp.choices, blank=True)
    session_idle_minutes = models.PositiveIntegerField(
        null=True, blank=True, help_text="A session with no activity this long ends by itself (succeeded)."
    )
    #: A service replica (kind ``service``): the port its program serves HTTP on (0: the port the cluster gives
    #: it in ``$PORT``), and the path of its health check (answers 2xx when it is ready to serve).
    serve_port = models.PositiveIntegerField(default=0)
    serve_health_path = models.CharField(max_length=200, blank=True)
    #: Jobs sharing a spread group (the replicas of one service: ``service-<id>``) are placed on different
    #: nodes, and clusters, where the engine can; "": none.
    spread_group = models.CharField(max_length=100, blank=True)

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

    # --- arrays and pipelines (docs/jobs.md §Arrays and sweeps, §Pipelines) ---------------------------------
    #: The array this job is a task of, its index there and its parameters (``QM_ARRAY_INDEX``, ``QM_PARAM_*``).
    array = models.ForeignKey("JobArray", on_delete=models.CASCADE, null=True, blank=True, related_name="tasks")
    array_index = models.PositiveIntegerField(null=True, blank=True)
    array_params = models.JSONField(default=dict, blank=True)
    #: What happens to it when a job or array it depends on can no longer satisfy it.
    on_dependency_failure = models.CharField(
        max_length=10, choices=DependencyFailure.choices, default=DependencyFailure.CANCEL
    )

    objects = TenantManager()

    class Tenancy(TenancyRules):
        # Researchers may cancel and clone their team's jobs; the actions narrow cancel to their own.
        policy = {Action.VIEW: WORK_ROLES, Action.CHANGE: frozenset({Role.RESEARCHER, Role.LEAD, Role.ADMIN})}

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
            models.Index(fields=["array", "state"], name="job_array_state"),
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
        #: The cluster refused the job for good (invalid spec, missing image, no such queue, policy): the job
        #: is not placed on that cluster again (``Attempt.message`` has the cluster's words).
        REFUSED = "refused", "Refused"

    class Stop(models.TextChoices):
        """Why Quartermaster is stopping an active attempt (it was signalled; ``stop_deadline`` is set)."""

        PREEMPTED = "preempted", "Preempted"
        DRAIN = "drain", "Node drained"
        TIME_LIMIT = "time_limit", "Time limit reached"

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
    #: When the cluster accepted it (``backend_id`` set): the start timeout runs from here.
    submitted_at = models.DateTimeField(null=True, blank=True)
    #: Failed dispatches so far (transient errors), for the backoff between them.
    dispatch_tries = models.PositiveIntegerField(default=0)
    #: Why it is being stopped, once signalled (``Stop``); blank otherwise.
    stop_reason = models.CharField(max_length=20, choices=Stop.choices, blank=True)
    #: Since when its cluster has not answered about it: its fate is unknown, it is not lost (yet).
    unknown_since = models.DateTimeField(null=True, blank=True)
    #: How it ended: a short code (``refused``, ``image_pull``, ``oom_killed``, ``exit_code``, ``time_limit``,
    #: ``drain``, ``node_failed``, ``failover``, ``withdrawn``, ...), the words (the cluster's own, where it
    #: gave some) and the exit code when the cluster reported one.
    reason = models.CharField(max_length=40, blank=True)
    message = models.TextField(blank=True)
    exit_code = models.IntegerField(null=True, blank=True)
    #: What the workload itself reported through its job token (``POST .../report/``): its exit code and when.
    #: A backend that cannot tell a job's end (a TPU queued resource) learns it this way.
    reported_exit_code = models.IntegerField(null=True, blank=True)
    reported_at = models.DateTimeField(null=True, blank=True)
    #: Where to watch it, as the cluster says (a Ray dashboard); empty when it gives none.
    dashboard_url = models.URLField(max_length=500, blank=True)
    #: An interactive session's attempt: the secret its app was started with (generated for this attempt,
    #: encrypted like secret values, handed only to the cluster and to the submitter's open link), the address
    #: the session reported (``POST .../session/``) and whether it said it ended idle
    #: (``scheduler/actions/sessions.py``).
    session_secret_ciphertext = models.BinaryField(default=b"", blank=True, editable=False)
    session_url = models.URLField(max_length=500, blank=True)
    #: Where a service replica's program listens, as it reported with the job token (``http://node:port/``): an
    #: address of a node it was placed on, on the port it was handed (``serve_port``;
    #: ``scheduler/actions/replicas.py``).
    serve_url = models.URLField(max_length=500, blank=True)
    #: The port a service replica's attempt was handed at its first dispatch: its service's own, else one of
    #: ``SERVE_REPLICA_PORTS`` no other active replica holds. 0 until then, and for other jobs.
    serve_port = models.PositiveIntegerField(default=0)
    session_ended_idle = models.BooleanField(default=False)

    objects = TenantManager()

    Tenancy = JobChildTenancy

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
        key = f"{self.job_id}-{self.number}"
        return f"{key}-{self.job.key_suffix}" if self.job.key_suffix else key


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


class Checkpoint(models.Model):
    """A checkpoint a job reported (``QM_JOB_TOKEN``; ``qm checkpoint``): where it is and how far it got.
    A restarted attempt resumes from the last one, and the engine preempts the job that loses least."""

    job = models.ForeignKey(Job, on_delete=models.CASCADE, related_name="checkpoints")
    #: The attempt that wrote it.
    attempt = models.PositiveIntegerField()
    location = models.CharField(max_length=500)
    step = models.PositiveBigIntegerField(null=True, blank=True)
    reported_at = models.DateTimeField()

    objects = TenantManager()

    Tenancy = JobChildTenancy

    class Meta:
        ordering = ["-reported_at", "-pk"]
        indexes = [models.Index(fields=["job", "-reported_at"], name="checkpoint_job_recent")]

    def __str__(self) -> str:
        return f"job {self.job_id} checkpoint {self.location}"


class Progress(models.Model):
    """How far one worker of a running job got (``QM_JOB_TOKEN``; ``qm progress``): its step count and, where
    it measured it, its own seconds per step (compute, not the wait for its peers). The straggler and hang
    detectors (``scheduler/watch``) read the recent ones; older ones are deleted as they go."""

    job = models.ForeignKey(Job, on_delete=models.CASCADE, related_name="progress")
    attempt = models.PositiveIntegerField()
    #: The worker's index, in the order of the job's nodes (``QM_WORKER``; 0 for a single worker).
    worker = models.PositiveIntegerField(default=0)
    step = models.PositiveBigIntegerField()
    step_seconds = models.FloatField(null=True, blank=True)
    reported_at = models.DateTimeField()

    objects = TenantManager()

    Tenancy = JobChildTenancy

    class Meta:
        ordering = ["reported_at", "pk"]
        indexes = [models.Index(fields=["job", "attempt", "reported_at"], name="progress_job_attempt_time")]

    def __str__(self) -> str:
        return f"job {self.job_id} worker {self.worker} at step {self.step}"


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

    objects = TenantManager()

    Tenancy = JobChildTenancy

    class Meta:
        ordering = ["created_at", "pk"]

    def __str__(self) -> str:
        return f"job {self.job_id}: {self.from_state or '-'} -> {self.to_state} ({self.reason})"


class Dependency(models.Model):
    """``job`` may start only once ``on_job`` (or every task of ``on_array``) has ended as ``kind`` asks:
    succeeded (``after_ok``), ended at all (``after_any``), failed or cancelled (``after_not_ok``). The
    placement loop checks them each cycle (``placement/gates.py``)."""

    class Kind(models.TextChoices):
        AFTER_OK = "after_ok", "after it succeeds"
        AFTER_ANY = "after_any", "after it ends"
        AFTER_NOT_OK = "after_not_ok", "after it fails"

    job = models.ForeignKey(Job, on_delete=models.CASCADE, related_name="dependencies")
    on_job = models.ForeignKey(Job, on_delete=models.CASCADE, null=True, blank=True, related_name="dependents")
    on_array = models.ForeignKey(JobArray, on_delete=models.CASCADE, null=True, blank=True, related_name="dependents")
    kind = models.CharField(max_length=20, choices=Kind.choices, default=Kind.AFTER_OK)

    objects = TenantManager()

    Tenancy = JobChildTenancy

    class Meta:
        ordering = ["job", "pk"]
        constraints = [
            models.CheckConstraint(
                condition=Q(on_job__isnull=False, on_array__isnull=True)
                | Q(on_job__isnull=True, on_array__isnull=False),
                name="dependency_on_job_or_array",
            ),
        ]

    def __str__(self) -> str:
        target = f"job {self.on_job_id}" if self.on_job_id else f"array {self.on_array_id}"
        return f"job {self.job_id} {self.kind} {target}"


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
    "Checkpoint",
    "Dependency",
    "DependencyFailure",
    "Job",
    "JobArray",
    "JobEvent",
    "LoopState",
]
