"""The one small interface every cluster backend implements, and the plain values it speaks.

A backend talks to one cluster (a Slurm controller, a Kubernetes API server, a Google Cloud TPU project
and zone, or the embedded simulated fleet). It knows nothing of Django: it takes an endpoint, decrypted
credentials and options (and the outbound policy, whose default alone reads the settings), and returns
frozen dataclasses. The sync task, the health checks and the
placement loop turn those into rows.

Every backend:
- raises only ``BackendError`` subclasses, with a message a cluster admin can act on (``Unreachable``,
  ``AuthenticationFailed``, ``BadResponse`` for malformed or partial answers, ``Refused`` when the
  cluster says no, e.g. an eviction forbidden by a disruption budget, ``InvalidJob`` when it refuses a job
  for good, ``NotFound``, ``NotAllowed`` when the outbound policy refuses the address or a redirect).
  ``permanent(error)`` says which of them waiting will not mend (docs/backends.md §Failures). The message
  is shown on the cluster's pages to every member of the organization, so what the far end sent in its
  own words (an answer's body) is never in it: it is the error's ``detail``, which goes to the server's log;
- connects only through the outbound policy it is given (``common.outbound``; cluster endpoints' by
  default): to addresses it checked, without following redirects;
- has a **dry-run** mode: mutating calls (``submit``, ``cancel``, ``cordon``, ``drain``, ``resume``)
  check their arguments and return what they would have done, without calling the cluster; reads still
  read;
- makes ``submit`` idempotent on ``JobSpec.id`` (submitting the same id twice returns the first job);
- is imported lazily through ``kinds.load(kind)`` (its kind's descriptor names it), so a deployment without,
  say, the TPU client never imports it.

**A job's output** (``logs``): one page of one worker's output at a time, never a whole log. A page is asked
for from the start, from an ``offset`` (the ``next_offset`` of the page before, opaque to the caller: a byte
count where the output is a file, a position in the stream on Kubernetes), or as the last ``tail`` lines; at
most ``limit`` bytes come back, cut at a line's end where the page holds one. The ``LogChunk`` says where to
go on from, whether more is there already and whether the stream is complete (the worker ended: nothing
will be added). ``worker`` names the stream: "" the job's main output (a plain job's first worker, a Ray
job's entrypoint), a worker's index, or ``head`` for a Ray head. A backend raises ``NotFound`` for no such job
or worker and ``LogsUnavailable`` (a ``NotFound``) when its cluster keeps no output Quartermaster can read,
saying where the job's output may be instead. Where each backend reads from: docs/backends.md §Logs.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum
from typing import Any, ClassVar

from common import outbound

#: The label (``NodeInfo.labels``) of a node its owner lends to one team only: that team's slug. The placement
#: loop places only that team's jobs there (docs/scheduling.md §Nodes lent to a team).
LENT_TO = "qm/lent-to"
#: ``logs``: the bytes one page holds by default and at most, and the most lines ``tail`` may ask for.
LOG_LIMIT = 64 * 1024
LOG_LIMIT_MAX = 1024 * 1024
LOG_TAIL_MAX = 10_000
#: How much of an answer's body the server's log keeps.
DETAIL_LIMIT = 2000

log = logging.getLogger(__name__)


class BackendError(Exception):
    """A backend call failed; the message says why in words an admin can act on.

    ``detail`` is what the far end said in its own words (an answer's body, a token endpoint's reply): it is
    logged here, once, and is never part of the message, which every member of the organization may read.
    An endpoint that is not the cluster it claims to be (a metadata service, an internal page) therefore
    shows nothing of its answer on the portal."""

    def __init__(self, message: str = "", *, detail: str = "") -> None:
        super().__init__(message)
        self.detail = detail[:DETAIL_LIMIT]
        if detail:
            log.warning("%s: %s; the answer: %r", type(self).__name__, message, self.detail)


class Unreachable(BackendError):
    """The endpoint did not answer (connection refused, DNS, timeout, TLS)."""


class AuthenticationFailed(BackendError):
    """The endpoint answered but refused the credentials (401/403, an expired or wrong token)."""


class BadResponse(BackendError):
    """The endpoint answered something we cannot use: not JSON, missing fields, wrong types."""


class Refused(BackendError):
    """The cluster understood and said no (e.g. eviction refused by a PodDisruptionBudget: HTTP 429)."""


class InvalidJob(Refused):
    """The cluster refuses this job for good: an invalid spec, an image it cannot pull, a queue or partition
    that does not exist, a policy that forbids it, a program it cannot run. Submitting it again there will
    not help; the job may still run on another cluster. The message is the cluster's reason in its own
    words where it gave one (only the reason, never a whole answer: see ``BackendError``)."""


class NotFound(BackendError):
    """The node or job named does not exist on the cluster."""


class LogsUnavailable(NotFound):
    """The cluster keeps no output of this job (or worker) that Quartermaster can read; the message says why
    and where the job's output may be instead (its own bucket, a file on the cluster)."""


class BadOffset(BackendError):
    """``logs`` was given an offset the backend never gave (not a position in that output)."""


class NotAllowed(BackendError):
    """The outbound policy refused: the endpoint (or a name it resolves to) is an address cluster endpoints may
    not reach, or the endpoint answered with a redirect, which is not followed."""


def permanent(error: BaseException) -> bool:
    """Whether ``error`` from a job's submission will not mend by waiting: the cluster refused the job itself
    (``InvalidJob``, ``Refused``) or the outbound policy forbids the cluster (``NotAllowed``). Everything else
    (unreachable, timeouts, 5xx, a garbled answer, credentials being rotated) is transient: retried with
    backoff until the attempt's dispatch deadline."""
    return isinstance(error, Refused | NotAllowed)


def not_allowed(error: BaseException, where: str) -> NotAllowed | None:
    """``NotAllowed`` naming ``where`` when ``error`` came from the outbound policy; None for other failures."""
    words = outbound.explain(error)
    return None if words is None else NotAllowed(f"{where}: {words}")


@dataclass(frozen=True, slots=True)
class AcceleratorInfo:
    """An accelerator model the cluster offers."""

    model: str  # e.g. "H100-SXM-80GB", "A100-40GB", "v5p"
    memory_gib: int = 0
    generation: str = ""  # e.g. "hopper", "ampere", "tpu-v5"
    interconnect: str = ""  # e.g. "nvlink", "pcie", "ici"


@dataclass(frozen=True, slots=True)
class NodeInfo:
    """One node as the cluster reports it. CPU in millicores, memory in MiB.

    *Allocatable* is what the cluster lets jobs use at all (capacity less what the system reserves or
    what is broken), as Kubernetes means it; *used* is what jobs hold now (Slurm's ``gres_used``,
    ``alloc_cpus``, ``alloc_memory``; the sum of pod requests on Kubernetes), when the cluster says.
    """

    name: str
    accelerator: str  # model name, "" for a node without accelerators
    accelerators: int  # capacity
    accelerators_allocatable: int
    cpu: int
    cpu_allocatable: int
    memory: int
    memory_allocatable: int
    accelerators_used: int = 0
    cpu_used: int = 0
    memory_used: int = 0
    #: Topology domain per level, widest first, e.g. {"zone": "eu-1a", "block": "b1", "rack": "r07"}.
    topology: Mapping[str, str] = field(default_factory=dict)
    ready: bool = True  # the node is up and its agent reports in
    schedulable: bool = True  # False when cordoned or drained on the cluster itself
    #: Free-form facts from the cluster (Slurm state flags, Kubernetes labels), for display.
    labels: Mapping[str, str] = field(default_factory=dict)
    heartbeat: datetime | None = None  # when the node last reported, if the cluster says
    #: Where the node is reached, as the cluster knows it: IP addresses and DNS names (Kubernetes'
    #: ``status.addresses``, Slurm's NodeAddr and NodeHostname). A service replica's address must be one of its
    #: node's (``scheduler/actions/replicas.py``).
    addresses: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class Inventory:
    nodes: tuple[NodeInfo, ...]
    accelerators: tuple[AcceleratorInfo, ...] = ()


@dataclass(frozen=True, slots=True)
class JobSpec:
    """What to run, where the scheduler placed it. ``id`` is Quartermaster's job id (the idempotency key)."""

    id: str
    name: str
    workers: int
    accelerators_per_worker: int
    cpu_per_worker: int  # millicores
    memory_per_worker: int  # MiB
    #: The node of each worker, in worker order (a node appears once per worker on it).
    nodes: tuple[str, ...]
    time_limit: int  # seconds
    image: str = ""
    command: tuple[str, ...] = ()
    script: str = ""  # a batch script, for Slurm
    env: Mapping[str, str] = field(default_factory=dict)
    #: Where the job is queued on the cluster: a Slurm partition, a Kueue LocalQueue, a TPU reservation.
    queue: str = ""
    spot: bool = False
    #: Who runs it, as slugs, for a cluster that maps them (Slurm accounts and QOS, Kueue LocalQueues).
    team: str = ""
    project: str = ""
    tier: str = ""
    team_queue: str = ""  # the name of the Quartermaster queue it was submitted to
    #: ``"job"`` or ``"ray"`` (a Ray cluster of a head and ``workers`` workers that runs ``entrypoint``).
    kind: str = "job"
    entrypoint: str = ""
    runtime_env: Mapping[str, Any] = field(default_factory=dict)
    #: The Ray head: (accelerators, millicores, MiB) and its node ("" where the backend chooses).
    head: tuple[int, int, int] = (0, 0, 0)
    head_node: str = ""
    #: TPU: every worker is one whole slice of this type and shape (``workers`` > 1: multislice).
    tpu_type: str = ""
    tpu_topology: str = ""
    #: An interactive session (``kind`` ``"session"``): its app (``jupyterlab``, ``shell``), the minutes without
    #: activity after which it ends by itself, and the secret its app is started with (this attempt's alone;
    #: shown to nobody but the submitter's open link). The program that starts it reports its address to
    #: ``POST /api/v1/jobs/{id}/session/`` with the job token (docs/jobs.md, "Interactive sessions").
    session_app: str = ""
    session_idle_minutes: int = 0
    session_secret: str = field(default="", repr=False)
    #: Thousandths of each accelerator a worker uses: below 1000, a share of one GPU that other jobs' shares
    #: sit beside (the simulated cluster counts a node's shares together).
    accelerator_milli: int = 1000
    #: A service replica (``kind`` ``"service"``): the port its program serves on (0: the backend picks a free
    #: one and passes it as ``$PORT``) and its health path. The backend reports where it listens to ``POST
    #: /api/v1/jobs/{id}/endpoint/`` with the job token; it runs until cancelled (no time limit of its own).
    serve_port: int = 0
    serve_health_path: str = ""


class JobState(StrEnum):
    PENDING = "pending"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELLED = "cancelled"
    UNKNOWN = "unknown"


class Failure(StrEnum):
    """Why a job is failing or not starting, as far as the cluster says (``JobStatus.reason``)."""

    IMAGE_PULL = "image_pull"  # the image cannot be pulled (no such image, no access): permanent
    INVALID = "invalid"  # the cluster rejected the job after accepting it (bad spec, admission policy)
    UNSCHEDULABLE = "unschedulable"  # workers wait for resources the cluster cannot give them now
    OOM_KILLED = "oom_killed"  # a worker ran out of memory
    EXIT_CODE = "exit_code"  # the program exited non-zero (``JobStatus.exit_code``)
    NODE_LOST = "node_lost"  # a worker's node failed under it
    TIME_LIMIT = "time_limit"  # the cluster's own time limit stopped it
    PREEMPTED = "preempted"  # the cluster (not Quartermaster) preempted or evicted it


@dataclass(frozen=True, slots=True)
class JobStatus:
    """What the cluster says of one job. ``message`` is in words for the job's timeline (the cluster's own
    reason where it gave one); ``reason`` a ``Failure`` code when the job failed or cannot start."""

    backend_id: str
    state: JobState
    message: str = ""
    nodes: tuple[str, ...] = ()
    reason: str = ""
    exit_code: int | None = None
    #: Workers running now, where the cluster says (a gang that started in part has fewer than all of them);
    #: None: the cluster does not count workers (a job RUNNING is then taken as wholly running).
    workers_running: int | None = None
    #: Where to watch it (a Ray dashboard), where the cluster says.
    dashboard_url: str = ""


#: The check of a reclaim notice: the cloud is about to take the node back (spot, preemptible, or a
#: provisioner's disruption). The node is drained at once within the notice (``clusters.actions.health``).
RECLAIM = "reclaim"


@dataclass(frozen=True, slots=True)
class HealthSignal:
    """One observation about one node: ``ok`` False means the check failed (the message says how)."""

    node: str
    check: str  # "ready", "heartbeat", "gpu_xid", "gpu_ecc", "gpu_temperature", "nvlink", RECLAIM, ...
    ok: bool
    message: str = ""
    observed_at: datetime | None = None


@dataclass(frozen=True, slots=True)
class LogChunk:
    """One page of one worker's output (``Backend.logs``).

    ``next_offset`` is where the next page starts: pass it back as ``offset`` to read on (to follow a running
    job, ask again with it until ``complete``). ``more``: output beyond this page is there already;
    ``complete``: the stream has ended and will not grow. ``source`` says where it was read from, in words
    (a file, a pod and container)."""

    text: str
    next_offset: str
    more: bool
    complete: bool
    worker: str = ""
    source: str = ""


@dataclass(frozen=True, slots=True)
class DryRun:
    """What a mutating call would have done, returned instead of doing it in dry-run mode."""

    action: str
    target: str
    detail: Mapping[str, Any] = field(default_factory=dict)


#: The label the nodes of an elastic pool carry: the pool's name (``clusters.models.ElasticPool``).
ELASTIC_POOL = "qm/elastic-pool"


@dataclass(frozen=True, slots=True)
class Provisioned:
    """What a cloud took of an ask for nodes: their names, and when they should be in service (Unix time);
    ``unnamed``: nodes on their way that it did not name (a Kubernetes autoscaler's), known once they join."""

    nodes: tuple[str, ...]
    up_at: float
    unnamed: int = 0


class Backend:
    """Base class of the backends; each lives in ``clusters/backends/<kind>/`` and sets ``kind``."""

    kind: ClassVar[str] = ""

    def __init__(
        self,
        endpoint: str,
        credentials: Mapping[str, str] | None = None,
        options: Mapping[str, Any] | None = None,
        *,
        dry_run: bool = False,
        timeout: float = 10.0,
        destinations: outbound.Policy | None = None,
    ) -> None:
        self.endpoint = endpoint
        self.credentials = dict(credentials or {})
        self.options = dict(options or {})
        self.dry_run = dry_run
        self.timeout = timeout
        #: Where the backend may connect: the cluster endpoints' policy unless told otherwise.
        self.destinations = destinations or outbound.for_clusters()

    # reads
    def inventory(self) -> Inventory:
        raise NotImplementedError

    def status(self, backend_id: str) -> JobStatus:
        raise NotImplementedError

    def health(self) -> tuple[HealthSignal, ...]:
        """Health signals the cluster itself gives (node not ready, stale heartbeat, ...). GPU-level signals
        come from the node probe (``deploy/node_probe.py``) through the API instead."""
        raise NotImplementedError

    def find(self, job_id: str) -> str | None:
        """The cluster's id of the job submitted under ``job_id`` (``JobSpec.id``), or None if it has none: how a
        job whose submission may or may not have gone through before a crash is found again."""
        raise NotImplementedError

    def logs(
        self, backend_id: str, worker: str = "", *, offset: str = "", tail: int | None = None, limit: int = LOG_LIMIT
    ) -> LogChunk:
        """A page of the output of ``worker`` of the job (the module docstring's **A job's output**): from
        ``offset`` when given, else the last ``tail`` lines when given, else from the start; at most ``limit``
        bytes. ``NotFound`` for no such job or worker; ``BadOffset`` for an offset this backend never gave."""
        raise LogsUnavailable(f"{self.kind} clusters keep no job output Quartermaster can read")

    # writes (dry-run aware)
    def submit(self, spec: JobSpec) -> str | DryRun:
        """Start the job; returns the cluster's id for it. Idempotent on ``spec.id``."""
        raise NotImplementedError

    def cancel(self, backend_id: str) -> DryRun | None:
        raise NotImplementedError

    def signal(self, backend_id: str, grace_seconds: int) -> DryRun | None:
        """Ask the job to checkpoint and exit (SIGTERM to its processes); whoever asked cancels it for good if
        it still runs ``grace_seconds`` later. A cluster with no way to signal a job does nothing here."""
        return None

    def cordon(self, node: str, reason: str) -> DryRun | None:
        """Stop new work landing on the node; running work stays."""
        raise NotImplementedError

    def drain(self, node: str, reason: str) -> DryRun | None:
        """Cordon, then move running work off (evict, or let the cluster requeue it)."""
        raise NotImplementedError

    def resume(self, node: str) -> DryRun | None:
        """Undo cordon or drain."""
        raise NotImplementedError

    # elastic pools (docs/scheduling.md §Elastic pools)
    def provision(
        self, pool: str, count: int, capacity_type: str, lead_time: int, accelerators: int = 0, flavor: str = ""
    ) -> Provisioned:
        """Ask the cloud for ``count`` nodes of the pool ``pool`` (its nodes labelled ``ELASTIC_POOL``), of
        ``accelerators`` of model ``flavor`` each; ``Refused`` when it will not give them (a stock-out, a quota of
        its own)."""
        raise Refused(f"{self.kind} clusters cannot add nodes from Quartermaster yet")

    def release(self, nodes: Sequence[str]) -> None:
        """Give ``nodes`` of an elastic pool back to the cloud (they hold no work); with none, tidy away what the
        cloud keeps of asks that ended (a failed Kubernetes ProvisioningRequest)."""
        raise Refused(f"{self.kind} clusters cannot release nodes from Quartermaster yet")
