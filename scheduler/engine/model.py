"""The engine's vocabulary: an immutable snapshot goes in, decisions come out.

Everything here is a frozen dataclass of plain values, so a snapshot can be built by the placement loop
(from the database), by the simulator (from a trace) or by a test (from Hypothesis) in the same way, and
the engine can never change its input.

Size: the whole vocabulary, each type with its fields' meanings, kept in one place so that the engine, the
placement loop, the simulator and the tests read one definition; it splits by noun (nodes, jobs, decisions)
if it grows further.

Units are integers so that quota arithmetic is exact:
- accelerators in **milli-accelerators** (1000 = one whole GPU or TPU chip; 250 = a quarter of a GPU);
- CPU in **millicores**;
- memory in **MiB**.
Times are seconds since the epoch (floats), money is currency units per hour (floats).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import NamedTuple

#: The resources that quotas are kept in, in this order wherever a vector of them appears.
RESOURCES = ("accelerator", "cpu", "memory")
ACCEL, CPU, MEMORY = range(3)
WHOLE = 1000  # milli-accelerators in one accelerator

#: What a job's program needs of a cluster (``Job.needs``) and what a cluster runs (``Cluster.runs``): the
#: same words as ``clusters/capabilities.py``, which derives them from a cluster's kind and options.
CONTAINERS = "containers"
BATCH = "batch_scripts"
TPU_VMS = "tpu_vms"
EVERYTHING = frozenset({CONTAINERS, BATCH, TPU_VMS})
#: How an exclusion's reason begins when the cluster refused the job for good (``Job.excluded``); any other
#: exclusion is for a while only (the cluster could not be reached).
REFUSED = "refused it"


class TopologyMode(StrEnum):
    REQUIRED = "required"  # all workers in one domain of the level, or do not start
    PREFERRED = "preferred"  # one domain if possible, else the next level up, else anywhere


class WithinQueue(StrEnum):
    """Which of its own queue's running jobs a pending job may preempt (Kueue's withinClusterQueue)."""

    NEVER = "never"
    LOWER_PRIORITY = "lower_priority"
    LOWER_OR_NEWER_EQUAL_PRIORITY = "lower_or_newer_equal_priority"


class Reclaim(StrEnum):
    """How a queue takes back capacity from other queues that are borrowing (over their nominal quota)."""

    NEVER = "never"
    LOWER_PRIORITY = "lower_priority"  # classical: only borrowed work of a lower priority
    ANY = "any"  # classical: any borrowed work, whatever its priority
    FAIR_SHARING = "fair_sharing"  # by dominant resource share (docs/scheduling.md §Fair sharing)


@dataclass(frozen=True, slots=True)
class Quota:
    """One (flavor, resource) entry of a queue or cohort. ``None`` limits mean unlimited."""

    nominal: int
    borrowing_limit: int | None = None
    lending_limit: int | None = None


#: Quotas of a queue or cohort: {(flavor, resource): Quota}. Where some queue or cohort names a (flavor,
#: resource) pair, a missing entry elsewhere is a nominal of 0; a pair nobody names is not governed (a fleet
#: that only rations accelerators need not write CPU and memory quotas).
Quotas = dict[tuple[str, str], Quota]


@dataclass(frozen=True, slots=True)
class Cluster:
    name: str
    region: str
    #: Topology level names from the widest to the narrowest, e.g. ("block", "rack", "nvlink").
    #: The node ("host") is always the implicit last level.
    levels: tuple[str, ...] = ()
    #: Admin preference for this cluster, 0-100 (e.g. prefer on-prem capacity that is already paid for).
    preference: int = 50
    #: What its jobs' programs may be (``CONTAINERS``, ``BATCH``, ``TPU_VMS``); a job needing anything else
    #: is never routed here.
    runs: frozenset[str] = EVERYTHING
    #: A level whose domains a gang must not straddle when one domain could hold it all (Slurm's
    #: topology/block refuses such a node list); "": any spread. Jobs bigger than every domain still span.
    gang_level: str = ""

    def refuses(self, needs: str) -> str:
        """Why a job needing ``needs`` cannot run here, in words ("" when it can)."""
        if not needs or needs in self.runs:
            return ""
        return "runs no containers" if needs == CONTAINERS else "needs a container image"


@dataclass(frozen=True, slots=True)
class Node:
    name: str
    cluster: str
    flavor: str
    #: Free milli-accelerators of each accelerator on the node; its length is the accelerator count.
    accel_free: tuple[int, ...]
    cpu_free: int
    memory_free: int
    cpu_capacity: int
    memory_capacity: int
    #: Domain name at each of the cluster's levels, widest first (same length as ``Cluster.levels``).
    topology: tuple[str, ...] = ()
    healthy: bool = True
    #: False while cordoned, draining or drained.
    schedulable: bool = True
    price_per_accel_hour: float = 0.0
    #: A TPU slice (or the capacity to provision one): ``"<type>/<topology>"`` (``"v5p-32/2x2x4"``), or the
    #: type alone where the topology is not known. Such a node is the unit: it runs one job that asks for
    #: its shape (``Job.shape``), whole. "" for every other node.
    shape: str = ""
    #: The one team whose jobs may use it (``Job.team``); "": any team. A slice or node its owner lends to
    #: one team (a TPU slice labelled ``quartermaster-team``, docs/backends.md) is placed for that team only.
    team: str = ""
    #: Spot capacity: the cloud may take it back at any time. Only jobs that accept spot (``Job.spot``) are
    #: placed on it.
    spot: bool = False
    #: The longest time limit, in seconds, of new work it may take now: an elastic pool's node whose monthly
    #: budget pays for only so much more of it (``elastic.horizons``); inf: any.
    horizon: float = math.inf

    @property
    def accel_count(self) -> int:
        return len(self.accel_free)


@dataclass(frozen=True, slots=True)
class Tier:
    """A priority tier: higher ``priority`` goes first; a non-preemptible tier is never a victim."""

    name: str
    priority: int
    preemptible: bool = True
    #: Seconds a victim of this tier gets between the stop signal and the kill, to checkpoint.
    grace_seconds: int = 300
    #: The longest a job of this tier should wait, in seconds (0: no bound). Past it the job is *overdue*: it
    #: goes ahead of every job of its priority that is not, oldest first, so that it is first to get a
    #: reservation of the capacity it waits for (docs/scheduling.md §A bound on waiting).
    max_wait: float = 0.0
    #: Seconds a job of this tier runs before anything may preempt it (0: no such protection). Work already told
    #: to stop is leaving whatever its age (docs/scheduling.md §Disruption).
    min_runtime: float = 0.0

    def overdue(self, submitted_at: float, now: float) -> bool:
        """Whether a job of this tier submitted at ``submitted_at`` has waited past its bound by ``now``."""
        return 0 < self.max_wait <= now - submitted_at


@dataclass(frozen=True, slots=True)
class Cohort:
    name: str
    parent: str | None = None
    quotas: Quotas = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Queue:
    """A team's (or a team project's) queue: its quota lives in a cohort tree."""

    name: str
    cohort: str | None
    quotas: Quotas = field(default_factory=dict)
    #: Flavors to try in order, e.g. ("h100-reserved", "h100-spot", "a100").
    flavors: tuple[str, ...] = ()
    within_queue: WithinQueue = WithinQueue.LOWER_PRIORITY
    reclaim: Reclaim = Reclaim.LOWER_PRIORITY
    #: Fair-sharing weight: a queue of weight 2 gets twice the share of one of weight 1.
    weight: float = 1.0


@dataclass(frozen=True, slots=True)
class Topology:
    level: str
    mode: TopologyMode = TopologyMode.REQUIRED


@dataclass(frozen=True, slots=True)
class Job:
    """A pending job: ``workers`` identical workers, placed all-or-nothing (a gang when more than one)."""

    id: str
    queue: str
    tier: str
    submitted_at: float
    workers: int = 1
    #: Accelerators per worker, and milli of each: (1, 250) is a quarter GPU, (8, 1000) eight whole GPUs.
    #: Fractions (< 1000) only with one accelerator per worker.
    accelerators: int = 1
    accel_milli: int = WHOLE
    cpu: int = 1000
    memory: int = 1024
    #: Acceptable flavors; empty means any flavor of the queue. The queue's order decides which is tried first.
    flavors: tuple[str, ...] = ()
    clusters: tuple[str, ...] = ()  # allowed clusters; empty = any
    regions: tuple[str, ...] = ()  # allowed regions; empty = any
    topology: Topology | None = None
    time_limit: int = 3600  # seconds
    max_price_per_hour: float | None = None
    #: Data-locality hint: a cluster or region name where the job's data lives.
    locality: str | None = None
    preemptible: bool = True
    #: What its program needs of a cluster (``CONTAINERS`` when it names an image, else ``BATCH``); "": anything.
    needs: str = ""
    #: Clusters it must not be routed to, with why: ("slurm-b", "refused it: invalid partition"). A reason
    #: beginning with ``REFUSED`` is for good; others last a while (the snapshot drops them when they expire).
    excluded: tuple[tuple[str, str], ...] = ()
    #: Who submitted it, for per-member limits (``Snapshot.member_limits``); empty: no limit applies.
    owner: str = ""
    #: The hard budgets it is charged to (names in ``Snapshot.budgets``: its team's, its project's).
    budgets: tuple[str, ...] = ()
    #: A Ray job's head, one more member of the gang with its own shape: (whole accelerators, millicores,
    #: MiB); (0, 0, 0): no head. It goes on a node of the workers' cluster, on a worker's node where it fits
    #: there (docs/scheduling.md §Ray heads); quotas and budgets count it.
    head: tuple[int, int, int] = (0, 0, 0)
    #: A TPU slice shape (``"v5p-32"``, or ``"v5p-32/2x2x4"`` for that topology only): each worker takes one
    #: whole node of that shape (``Node.shape``), and no other node. "": any node without a shape.
    shape: str = ""
    #: Its team, for the nodes lent to one team only (``Node.team``); "": it may use only nodes lent to none.
    team: str = ""
    #: Jobs of one spread group (a service's replicas) prefer nodes none of the group holds, and among clusters
    #: that score the same, the one holding fewest of the group (soft: docs/jobs.md, "Service replicas"); "": none.
    spread_group: str = ""
    #: It accepts spot capacity (``Node.spot``): cheaper, but the cloud may take it back. Jobs that do not are
    #: never placed on spot nodes.
    spot: bool = False

    def __post_init__(self) -> None:
        if self.workers < 1:
            raise ValueError(f"job {self.id}: workers must be at least 1")
        if self.accelerators < 0 or not 0 < self.accel_milli <= WHOLE:
            raise ValueError(f"job {self.id}: accelerators must be >= 0 and accel_milli in 1..1000")
        if self.accel_milli < WHOLE and self.accelerators != 1:
            raise ValueError(f"job {self.id}: a fractional accelerator share needs exactly one accelerator")
        if self.cpu < 0 or self.memory < 0 or self.time_limit <= 0:
            raise ValueError(f"job {self.id}: cpu and memory must be >= 0 and time_limit > 0")
        if len(self.head) != 3 or min(self.head) < 0:
            raise ValueError(f"job {self.id}: a head is (accelerators, millicores, MiB), none negative")

    @property
    def accel_per_worker(self) -> int:
        """Milli-accelerators one worker takes."""
        return self.accelerators * self.accel_milli

    @property
    def has_head(self) -> bool:
        return any(self.head)

    def request(self) -> tuple[int, int, int]:
        """What the whole job holds (milli-accelerators, millicores, MiB): every worker and the head."""
        accelerators, cpu, memory = self.head
        return (
            self.workers * self.accel_per_worker + accelerators * WHOLE,
            self.workers * self.cpu + cpu,
            self.workers * self.memory + memory,
        )


@dataclass(frozen=True, slots=True)
class Assignment:
    """What a job holds on one node: the accelerators (index, milli) and CPU/memory, for ``workers`` workers."""

    node: str
    workers: int
    accels: tuple[tuple[int, int], ...]
    cpu: int
    memory: int


@dataclass(frozen=True, slots=True)
class Workload:
    """A running (admitted) job as the engine sees it."""

    id: str
    queue: str
    tier: str
    cluster: str
    flavor: str
    assignments: tuple[Assignment, ...]
    admitted_at: float
    time_limit: int
    submitted_at: float = 0.0
    preemptible: bool = True
    last_checkpoint_at: float | None = None
    #: Already told to stop (preempted in an earlier cycle); its resources free up soon.
    evicting: bool = False
    owner: str = ""  # as ``Job.owner``
    spread_group: str = ""  # as ``Job.spread_group``
    team: str = ""  # as ``Job.team``

    @property
    def expected_end(self) -> float:
        return self.admitted_at + self.time_limit

    def usage(self) -> tuple[int, int, int]:
        """Quota usage (milli-accelerators, millicores, MiB)."""
        assignments = self.assignments
        return (
            sum([milli for a in assignments for _, milli in a.accels]),
            sum([a.cpu for a in assignments]),
            sum([a.memory for a in assignments]),
        )


@dataclass(frozen=True, slots=True)
class Budget:
    """What a hard budget has left of its period (a month): a job is admitted only if what it may use until
    the period ends, at most its time limit, fits what is left. ``None``: that measure is not limited."""

    #: Milli-accelerator-seconds left (1000 * 3600 is one accelerator-hour).
    accel_seconds: int | None = None
    #: Money left, in the price book's currency.
    money: float | None = None
    #: When the period ends (seconds since the epoch): a job is charged only for its time before then.
    until: float = float("inf")
    #: How people name it ("team vision"), for the pending message.
    label: str = ""
    #: Its limit is zero: what it limits no job charged to it can ever use, this month or the next.
    never: bool = False


@dataclass(frozen=True, slots=True)
class Config:
    fair_sharing: bool = True
    #: How much a queue's recent use beyond its fair part (``Snapshot.usage``) adds to its share, where shares
    #: are compared (``fairshare.py``): 1 weighs a queue that used a tenth more of its siblings' recent use than
    #: it is entitled to like one borrowing a tenth of its cohort's capacity now. 0: shares forget.
    usage_weight: float = 1.0
    #: Plan start times for blocked jobs and keep lower-priority jobs off their capacity (docs/scheduling.md
    #: §Backfill and reservations).
    backfill: bool = True
    #: How many blocked jobs get a reservation each cycle (Slurm's bf_max_job_test, much smaller).
    reservations: int = 16
    backfill_window: int = 24 * 3600
    time_quantum: int = 60
    #: Short jobs first, with aging, among the jobs of one tier in one queue: a job is ordered as if it had
    #: been submitted this many times its time limit later. Short jobs pass long ones that came a little
    #: earlier, which cuts the average completion time (SJF); a long job is never passed by one submitted
    #: more than ``short_first * time_limit`` after it, so it does not starve. 0 is first come, first served.
    short_first: float = 8.0
    #: Shortest remaining time first: a pending job may preempt its own queue's work of its priority with more
    #: than this many times its time limit left (0: never), if ``short_first``'s aging, applied to the work's
    #: time left, orders that work after the job: work that waited long is not preempted again and again.
    srpt: float = 0.0
    #: Jobs examined per cycle; the rest wait for the next cycle (kube-scheduler's queue lookback).
    max_jobs_per_cycle: int = 100_000
    #: Admissions per cycle; once reached, the rest wait for the next cycle. A burst of submissions is then
    #: admitted over several short cycles: the first jobs start sooner, and the placement loop writes and
    #: dispatches in batches instead of holding its lock through one long cycle.
    max_admissions_per_cycle: int = 100_000
    #: Fragmentation-aware packing of single-node jobs (FGD); best fit when off or when no mix is known.
    fgd: bool = True
    #: How many of the most common pending shapes make the FGD workload mix.
    fgd_shapes: int = 16
    #: FGD judges a node by the best-suited share of the workload mix, plus ``fgd_whole_mix`` times the
    #: mean over all of it (``Fragmentation._combine``; 1 and 0 are the published measure). On Alibaba's
    #: trace this keeps CPU-poor nodes for lean pods: 95.34% to 95.99% of GPUs allocated (``simulate packing``).
    fgd_suited: float = 0.25
    fgd_whole_mix: float = 0.3
    #: A fractional share also weighs the remainder it leaves on its accelerator (this much), judged by the
    #: ``fgd_remainder_suited`` share of the mix that suits that remainder best (``Fragmentation._remainders``;
    #: 0 is the published measure): 95.99% to 96.06% at 130% demand, held-out seeds alike.
    fgd_remainder: float = 1.0
    fgd_remainder_suited: float = 0.03
    #: Weights of the multi-cluster routing score.
    weight_fit: float = 1.0
    weight_availability: float = 1.0
    weight_price: float = 1.0
    weight_locality: float = 2.0
    weight_preference: float = 1.0
    #: Preemption searches per cycle (Kueue looks at one head per queue per cycle; Armada caps each round).
    preemption_attempts: int = 16
    #: A job that would need more victims than this waits instead: that much disruption for one job is
    #: rarely worth it, and the search stays bounded.
    max_victims: int = 64
    #: Pending jobs beyond the reservations that get an estimated start time (one search per job shape).
    estimates: int = 16
    #: A job that gets an estimated start whatever the two limits above (the form's preview of a new job).
    estimate_for: str = ""


@dataclass(frozen=True, slots=True)
class Maintenance:
    """Planned maintenance: ``nodes`` of ``cluster`` (engine node names; empty: all its nodes) are out of
    service from ``start`` to ``end``. A job that would still run at ``start`` does not start on them unless
    it is preemptible (the drain before the window stops it gracefully), and no reservation is planned on
    them across the window."""

    cluster: str
    nodes: tuple[str, ...]
    start: float
    end: float


@dataclass(frozen=True, slots=True)
class Booking:
    """Capacity a team reserved ahead for a window (a deadline): ``nodes`` of ``cluster`` (engine node names),
    from ``start`` to ``end`` (docs/scheduling.md §Bookings). To every other team's work the nodes are like a
    maintenance window: no run that would overlap it starts there unless it is preemptible, and no reservation
    is planned across it. The team's own work uses them as any nodes; from ``start`` (less the grace of what
    runs there) its pending jobs may preempt other teams' preemptible work on them, whatever its queue and
    tier: the nodes are lent to other teams' preemptible work only while the team does not need them."""

    name: str  # how people name it, for messages ("reservation 12")
    team: str  # ``Job.team``
    cluster: str
    nodes: tuple[str, ...]
    start: float
    end: float


@dataclass(frozen=True, slots=True)
class Elastic:
    """An elastic pool: nodes a cloud can add to ``cluster``, all of one ``flavor`` and shape, each priced per
    accelerator-hour and up ``lead_time`` seconds after it is asked for; ``most``: how many more may be asked for
    now (its maximum less the nodes it has and those on the way, within its budget). Spot pools hold only
    preemptible work that accepts spot (docs/scheduling.md §Elastic pools)."""

    name: str
    cluster: str
    flavor: str
    accelerators: int  # per node
    cpu: int  # millicores per node
    memory: int  # MiB per node
    price_per_accel_hour: float
    lead_time: float
    most: int
    spot: bool = False
    #: Nodes asked for and not up yet, and when the last of them should be: jobs are packed onto them first.
    coming: int = 0
    coming_at: float = 0.0
    #: What new nodes may cost, over the time they will be held (``elastic.horizons``); None: no limit. A new
    #: node is held until the longest time limit of the jobs it is asked for ends, and then ``idle_release``.
    left: float | None = None
    idle_release: float = 0.0
    #: The TPU slice shape of its nodes (``Node.shape``; ``"v5p-32"``, ``"v5p-32/2x2x4"``): only jobs asking for
    #: it go there, each worker on a node of its own. "": nodes without a shape, for jobs without one.
    shape: str = ""


@dataclass(frozen=True, slots=True)
class Snapshot:
    now: float
    clusters: tuple[Cluster, ...]
    nodes: tuple[Node, ...]
    tiers: tuple[Tier, ...]
    cohorts: tuple[Cohort, ...]
    queues: tuple[Queue, ...]
    running: tuple[Workload, ...]
    pending: tuple[Job, ...]
    config: Config = Config()
    #: Per-member limits: owner -> the most milli-accelerators that owner's running jobs may hold at once.
    member_limits: Mapping[str, int] = field(default_factory=dict)
    #: Hard budgets by name (``Job.budgets``), with what is left of each after the work already running.
    budgets: Mapping[str, Budget] = field(default_factory=dict)
    #: Maintenance windows that have not ended and start within the backfill window.
    maintenance: tuple[Maintenance, ...] = ()
    #: Recent use per queue: accelerator-hours decayed with the organization's half-life to ``now``
    #: (``fairshare.py``). Queues left out used nothing lately.
    usage: Mapping[str, float] = field(default_factory=dict)
    #: Per tier with a cap on disruption: accelerator-seconds of its jobs' work that this cycle's preemptions for
    #: pending jobs may still lose (its cap per hour less what the last hour's preemptions of its jobs lost).
    #: Tiers left out have no cap (docs/scheduling.md §Disruption).
    disruption_left: Mapping[str, float] = field(default_factory=dict)
    #: Capacity teams reserved ahead that has not ended and starts within the backfill window.
    bookings: tuple[Booking, ...] = ()
    #: Pools that could add nodes for work waiting for capacity (``elastic.py``).
    elastic: tuple[Elastic, ...] = ()


# ----------------------------------------------------------------------------------------------- decisions


class PendingReason(StrEnum):
    """Why a job is still pending; each has a plain-words message in the decision."""

    UNKNOWN_QUEUE = "unknown_queue"
    UNKNOWN_TIER = "unknown_tier"
    NO_FLAVOR = "no_flavor"  # none of the job's flavors is offered to its queue / exists in an allowed cluster
    NEVER_FITS = "never_fits"  # no node or domain could hold it even on an empty fleet
    #: No node it may use has the memory (or the CPU cores) that one worker, or its Ray head, asks for.
    MEMORY_NEVER_FITS = "memory_never_fits"
    CPU_NEVER_FITS = "cpu_never_fits"
    TOPOLOGY = "topology"  # no domain at the required level can ever hold all workers
    PRICE_LIMIT = "price_limit"  # every placement that fits costs more than the job's maximum
    QUOTA_EXCEEDS_LIMIT = "quota_exceeds_limit"  # more than the queue could ever get, even borrowing
    QUOTA_EXHAUSTED = "quota_exhausted"  # the queue's quota (with borrowing) is in use now
    CAPACITY = "capacity"  # quota allows it, but no free nodes fit it now
    RESERVED = "reserved"  # capacity is being held for it from an estimated start time
    WAITING_FOR_PREEMPTION = "waiting_for_preemption"  # victims were told to stop; it starts when they have
    BACKFILL_BLOCKED = "backfill_blocked"  # would delay a higher-priority job's reservation
    NOT_CONSIDERED = "not_considered"  # the cycle's work limit was reached before this job
    MEMBER_LIMIT = "member_limit"  # its submitter's running jobs already hold the team lead's per-member limit
    BUDGET = "budget"  # it could use more accelerator-hours or money than a hard budget has left this month
    #: Every cluster that offers its accelerators is ruled out: it cannot run the job's program, or the
    #: job is excluded from it (``Job.excluded``). ``Pending.refused`` says whether that is for good.
    NO_CLUSTER = "no_cluster"
    #: It would still be running when maintenance starts on the nodes that could take it, and it is not
    #: preemptible.
    MAINTENANCE = "maintenance"
    #: It waits for jobs or arrays it depends on (or is held: one of them can no longer satisfy it). The
    #: placement loop gives the engine no such job; it writes this reason itself (``placement/gates.py``).
    DEPENDENCY = "dependency"
    #: Its array already has as many tasks placed as its limit allows; the loop does not give it to the engine.
    ARRAY_LIMIT = "array_limit"


class PreemptionReason(StrEnum):
    PRIORITY = "priority"  # a higher-priority job of the same queue
    RECLAIM = "reclaim"  # the victim's queue was borrowing quota that its owner now needs
    FAIR_SHARING = "fair_sharing"  # the victim's queue had more than its fair share
    #: Its queue or a cohort above it uses more than its quota now allows (a quota was lowered below
    #: usage); no pending job asked for it, so the preemptor is "" (``over_quota.py``).
    OVER_QUOTA = "over_quota"
    #: It ran on nodes another team reserved (``Booking``), lent to it while unused; that team needs them now.
    BOOKED = "booked"


@dataclass(frozen=True, slots=True)
class Admission:
    job: str
    cluster: str
    flavor: str
    assignments: tuple[Assignment, ...]
    #: True when the queue borrows quota from its cohort for this job.
    borrowing: bool
    cost_per_hour: float
    #: True when the job started on capacity that a reservation holds later (it ends before then).
    backfilled: bool = False


@dataclass(frozen=True, slots=True)
class Preemption:
    workload: str
    #: The pending job the victim makes room for; "" when none does (reason ``OVER_QUOTA``).
    preemptor: str
    reason: PreemptionReason
    message: str
    grace_seconds: int
    #: Its cost: accelerator-seconds of work since its last checkpoint (or its start), which a restart redoes.
    lost: float = 0.0


@dataclass(frozen=True, slots=True)
class Reservation:
    """Capacity held for a blocked job from ``start`` until ``start + time_limit`` (backfill)."""

    job: str
    cluster: str
    flavor: str
    start: float
    end: float
    assignments: tuple[Assignment, ...]


class Pending(NamedTuple):
    """A job left waiting, and why. A named tuple rather than a dataclass: a cycle makes one per waiting
    job, tens of thousands, and a tuple is made three times faster."""

    job: str
    reason: PendingReason
    message: str
    estimated_start: float | None = None
    #: Position among this cycle's valid jobs in the order considered (0 = first), for "N jobs ahead of you";
    #: None for jobs refused before ordering (unknown queue or tier).
    position: int | None = None
    #: True when the job can never start as things stand and the placement loop should fail it: the reason
    #: is ``NO_CLUSTER``, at least one cluster refused it, and every other cluster is ruled out for good
    #: too (it cannot run the program), none only for a while (``refused_everywhere``).
    refused: bool = False


@dataclass(frozen=True, slots=True)
class Want:
    """Nodes to ask of an elastic pool for work waiting for capacity: how many, for which jobs, what they cost an
    hour together, and when they would be up."""

    pool: str
    cluster: str
    flavor: str
    nodes: int
    jobs: tuple[str, ...]
    cost_per_hour: float
    up_at: float
    #: Seconds each node is held once up: its jobs' longest time limit, then the pool's ``idle_release``.
    hold: float = 0.0


@dataclass(frozen=True, slots=True)
class Decisions:
    """A cycle's outcome, in the order the decisions were taken."""

    admissions: tuple[Admission, ...]
    preemptions: tuple[Preemption, ...]
    reservations: tuple[Reservation, ...]
    pending: tuple[Pending, ...]
    #: Every job id in the order the cycle considered it (admissions and preemptions interleave in it).
    order: tuple[str, ...] = ()
    stats: dict[str, int] = field(default_factory=dict)
    #: Nodes to ask of elastic pools (``elastic.py``).
    wanted: tuple[Want, ...] = ()
