"""An independent checker of the engine's guarantees (docs/scheduling.md §Guarantees).

``check(snapshot, decisions)`` replays a cycle's decisions step by step, in ``decisions.order``: for each
job, its preemptions (those it is the preemptor of), then its admission, then its reservation; it raises
``AssertionError`` with a precise message at the first broken guarantee. It imports nothing from the
engine but its data model, so it cannot share the engine's mistakes.

What the replay assumes (docs/scheduling.md §Tiers and preemption, §Backfill and reservations):
- a victim keeps running through its grace period, so a preemption frees neither quota nor capacity in
  the cycle that issues it: only admissions change usage and free capacity;
- every (flavor, resource) that an admission touches must keep its limits. The input may already break a
  limit (a quota was lowered); then the admission must not add usage to the tree node that is over;
- preemptions with no preemptor (reason ``over_quota``) give back quota lowered below usage: they come
  before every job, and once they play out no node stays over while preemptible work could give it back
  (``over_quota_rules.py``).
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import NoReturn

from scheduler.engine.model import (
    RESOURCES,
    WHOLE,
    Admission,
    Assignment,
    Cluster,
    Decisions,
    Job,
    Node,
    PendingReason,
    Preemption,
    PreemptionReason,
    Queue,
    Reservation,
    Snapshot,
    Tier,
    TopologyMode,
    Workload,
)
from tests.engine.over_quota_rules import check_reclaim, check_reclaimed
from tests.engine.quota_tree import Key, QuotaTree, describe, usage_by_key
from tests.engine.victims import check_victims_suffice, preempt

#: The implicit last topology level: all workers on one node.
HOST = "host"
#: Money and times are floats: compare them with this much slack.
TOLERANCE = 1e-6


def check(snapshot: Snapshot, decisions: Decisions, *, reclaim_now: bool = False, literal_quota: bool = False) -> None:
    """Raise ``AssertionError`` at the first decision of the cycle that breaks one of the guarantees.

    Checked: every pending job decided exactly once, in one cluster; shapes (workers, accelerators per
    worker, CPU, memory), node health, nodes lent to a team holding only its jobs, spot nodes only jobs that
    accept spot, flavor, cluster, region,
    price and cost; capacity of every accelerator and node; quota of the queue and each cohort up to the
    root; required topology; victims' policy, tiers and queues; reservations held against later admissions;
    and that each preemptor fits once its victims are gone.

    ``reclaim_now``: a cross-queue victim's queue must be over nominal at decision time, counting every
    running workload (this cycle's earlier victims too). By default it must be over nominal as it will be
    once this cycle's preemptions have played out (earlier victims gone, waiting jobs started): otherwise
    several preemptors could each take a "borrowed" workload and together push that queue below its nominal
    quota, while a queue that only its own waiting job takes over nominal could not be reclaimed from.

    Per-member limits: no admission takes a member's running work and admissions past their limit.

    ``literal_quota``: a (flavor, resource) that no queue or cohort names is limited to 0 too, as model.py's
    "a missing entry is a nominal of 0" reads; by default such a pair is not rationed, as the engine does.
    """
    Replay(snapshot, decisions, reclaim_now=reclaim_now, literal_quota=literal_quota).run()
    _check_disruption(snapshot, decisions)


def _check_disruption(snapshot: Snapshot, decisions: Decisions) -> None:
    """docs/scheduling.md §Disruption: nothing preempted younger than its tier's minimum runtime, each preemption
    priced by the work it loses, and the preemptions for jobs losing no more than the cap leaves."""
    tiers = {t.name: t for t in snapshot.tiers}
    running = {w.id: w for w in snapshot.running}
    for p in decisions.preemptions:
        victim = running.get(p.workload)
        if victim is None:
            continue  # the replay has said so
        tier = tiers.get(victim.tier)
        if tier is not None and snapshot.now - victim.admitted_at < tier.min_runtime:
            _fail(f"preemption of {p.workload!r}: it has run less than its tier's minimum runtime")
        saved = max(victim.admitted_at, victim.last_checkpoint_at or victim.admitted_at)
        lost = victim.usage()[0] / 1000 * max(0.0, snapshot.now - saved)
        if abs(p.lost - lost) > 1e-6 * max(1.0, lost):
            _fail(f"preemption of {p.workload!r}: it costs {lost} accelerator-seconds, not {p.lost}")
    by_tier: dict[str, float] = {}
    for p in decisions.preemptions:
        if p.preemptor and p.workload in running:
            name = running[p.workload].tier
            by_tier[name] = by_tier.get(name, 0.0) + p.lost
    for name, left in snapshot.disruption_left.items():
        if by_tier.get(name, 0.0) > left + 1e-6:
            _fail(
                f"preemptions for jobs lose {by_tier[name]} accelerator-seconds of tier {name!r}; its cap leaves {left}"
            )


def _fail(message: str) -> NoReturn:
    raise AssertionError(message)


@dataclass(slots=True)
class _Need:
    """What a placement takes on one node."""

    accels: dict[int, int] = field(default_factory=lambda: defaultdict(int))
    cpu: int = 0
    memory: int = 0

    @property
    def accel_total(self) -> int:
        return sum(self.accels.values())


@dataclass(frozen=True, slots=True)
class _Hold:
    """Resources that something running holds on a node until ``until``."""

    until: float
    accel: int
    cpu: int
    memory: int


def _unique(kind: str, ids: Iterable[str]) -> None:
    seen: set[str] = set()
    for i in ids:
        if i in seen:
            _fail(f"snapshot: two {kind} are named {i!r}")
        seen.add(i)


class Replay:
    """The cycle's state as its decisions are replayed in order."""

    def __init__(self, snapshot: Snapshot, decisions: Decisions, *, reclaim_now: bool, literal_quota: bool) -> None:
        self.snapshot = snapshot
        self.decisions = decisions
        self.reclaim_now = reclaim_now
        self.literal_quota = literal_quota
        for kind, ids in (
            ("clusters", (c.name for c in snapshot.clusters)),
            ("nodes", (n.name for n in snapshot.nodes)),
            ("tiers", (t.name for t in snapshot.tiers)),
            ("queues", (q.name for q in snapshot.queues)),
            ("cohorts", (c.name for c in snapshot.cohorts)),
            ("running workloads", (w.id for w in snapshot.running)),
            ("pending jobs", (j.id for j in snapshot.pending)),
        ):
            _unique(kind, ids)
        self.jobs: dict[str, Job] = {j.id: j for j in snapshot.pending}
        self.nodes: dict[str, Node] = {n.name: n for n in snapshot.nodes}
        self.clusters: dict[str, Cluster] = {c.name: c for c in snapshot.clusters}
        self.tiers: dict[str, Tier] = {t.name: t for t in snapshot.tiers}
        self.queues: dict[str, Queue] = {q.name: q for q in snapshot.queues}
        self.running: dict[str, Workload] = {w.id: w for w in snapshot.running}

        #: Per-member limits: what each limited member's running work and admissions hold.
        self.member_used: dict[str, int] = defaultdict(int)
        for w in snapshot.running:
            if w.owner in snapshot.member_limits:
                self.member_used[w.owner] += sum(milli for a in w.assignments for _, milli in a.accels)

        #: Hard budgets: what each has left as the admissions are charged to it.
        self.budget_left: dict[str, list[float | None]] = {
            name: [b.accel_seconds, b.money] for name, b in snapshot.budgets.items()
        }

        self.quota = QuotaTree(snapshot)
        for w in snapshot.running:
            if w.queue in self.queues:
                for key, amount in usage_by_key(w.flavor, w.assignments).items():
                    self.quota.queue_usage[(w.queue, key)] += amount

        self.accel_free: dict[str, list[int]] = {n.name: list(n.accel_free) for n in snapshot.nodes}
        self.cpu_free: dict[str, int] = {n.name: n.cpu_free for n in snapshot.nodes}
        self.memory_free: dict[str, int] = {n.name: n.memory_free for n in snapshot.nodes}
        # What frees up on each node, and when: running workloads at their expected end (evicting ones
        # at once: they were told to stop in an earlier cycle), this cycle's admissions at now + time limit.
        self.holds: dict[str, dict[str, _Hold]] = defaultdict(dict)
        for w in snapshot.running:
            until = -math.inf if w.evicting else w.expected_end
            for a in w.assignments:
                self._hold(a.node, f"workload {w.id}", until, a)

        self.admissions: dict[str, Admission] = {}
        self.reservations: dict[str, Reservation] = {}
        self.active_reservations: list[tuple[Reservation, dict[str, _Need]]] = []
        self.preempted: dict[str, Preemption] = {}
        self.pending_reasons: dict[str, PendingReason] = {p.job: p.reason for p in decisions.pending}
        #: Jobs waiting for victims so far: (queue, flavors they may start in, request per resource).
        self.waiting: list[tuple[str, set[str], tuple[int, int, int]]] = []

    # ------------------------------------------------------------------------------------------ driver

    def run(self) -> None:
        self._check_bookkeeping()
        by_preemptor: dict[str, list[Preemption]] = defaultdict(list)
        for p in self.decisions.preemptions:
            by_preemptor[p.preemptor].append(p)
        admissions = {a.job: a for a in self.decisions.admissions}
        reservations = {r.job: r for r in self.decisions.reservations}
        check_reclaim(self, by_preemptor.pop("", []))
        for step, job_id in enumerate(self.decisions.order):
            where = f"step {step} (job {job_id!r})"
            if by_preemptor[job_id]:
                preempt(self, where, self.jobs[job_id], by_preemptor[job_id])
            elif self.pending_reasons.get(job_id) == PendingReason.WAITING_FOR_PREEMPTION:
                self._waits_for_evicting(self.jobs[job_id])
            if job_id in admissions:
                self._admit(where, self.jobs[job_id], admissions[job_id])
            if job_id in reservations:
                self._reserve(where, self.jobs[job_id], reservations[job_id])
        check_victims_suffice(self)
        check_reclaimed(self)

    def _waits_for_evicting(self, job: Job) -> None:
        """A job waiting on workloads told to stop in an earlier cycle will use its queue's quota, like a
        preemptor of this cycle, in whichever of its flavors they free."""
        queue = self.queues.get(job.queue)
        if queue is not None:
            flavors = {f for f in queue.flavors if not job.flavors or f in job.flavors}
            self.waiting.append((job.queue, flavors, job.request()))

    def _check_bookkeeping(self) -> None:  # noqa: C901
        """Every job is decided once, and every decision names a job the cycle considered."""
        d = self.decisions
        considered: set[str] = set()
        for job_id in d.order:
            if job_id not in self.jobs:
                _fail(f"order: {job_id!r} is not a pending job of the snapshot")
            if job_id in considered:
                _fail(f"order: job {job_id!r} is considered twice")
            considered.add(job_id)
        decided: dict[str, str] = {}
        for kind, job_ids in (("admission", (a.job for a in d.admissions)), ("pending", (p.job for p in d.pending))):
            for job_id in job_ids:
                if job_id not in self.jobs:
                    _fail(f"{kind}: {job_id!r} is not a pending job of the snapshot")
                if job_id in decided:
                    _fail(f"job {job_id!r} is decided twice: {decided[job_id]} and {kind}")
                decided[job_id] = kind
        for job_id in self.jobs:
            if job_id not in decided:
                _fail(f"job {job_id!r} is neither admitted nor pending")
        for a in d.admissions:
            if a.job not in considered:
                _fail(f"admission of {a.job!r}: the job is not in the cycle's order")
        for p in d.preemptions:
            if (p.preemptor == "") != (p.reason == PreemptionReason.OVER_QUOTA):
                _fail(f"preemption of {p.workload!r}: reason {p.reason} with preemptor {p.preemptor!r}")
            if p.preemptor and p.preemptor not in considered:
                _fail(f"preemption of {p.workload!r}: its preemptor {p.preemptor!r} is not in the cycle's order")
        reserved: set[str] = set()
        for r in d.reservations:
            if r.job not in considered:
                _fail(f"reservation for {r.job!r}: the job is not in the cycle's order")
            if r.job in reserved:
                _fail(f"reservation for {r.job!r}: the job has two reservations")
            if decided[r.job] != "pending":
                _fail(f"reservation for {r.job!r}: the job is admitted, yet capacity is reserved for it")
            reserved.add(r.job)
        if d.reservations and not self.snapshot.config.backfill:
            _fail(f"{len(d.reservations)} reservations although backfill is off")
        if len(d.reservations) > self.snapshot.config.reservations:
            _fail(
                f"{len(d.reservations)} reservations, more than config.reservations={self.snapshot.config.reservations}"
            )

    # ---------------------------------------------------------------------------------------- placement

    def _hold(self, node: str, holder: str, until: float, a: Assignment) -> None:
        previous = self.holds[node].get(holder)
        accel = sum(m for _, m in a.accels) + (previous.accel if previous else 0)
        cpu = a.cpu + (previous.cpu if previous else 0)
        memory = a.memory + (previous.memory if previous else 0)
        self.holds[node][holder] = _Hold(until, accel, cpu, memory)

    def job_allows(self, job: Job, queue: Queue, cluster_name: str, flavor: str) -> str | None:
        """Why the job may not run in this cluster and flavor, or None when it may."""
        cluster = self.clusters.get(cluster_name)
        if cluster is None:
            return f"cluster {cluster_name!r} does not exist"
        if job.clusters and cluster_name not in job.clusters:
            return f"cluster {cluster_name!r} is not one of the job's clusters {job.clusters}"
        if job.regions and cluster.region not in job.regions:
            return f"cluster {cluster_name!r} is in region {cluster.region!r}, not one of {job.regions}"
        if flavor not in queue.flavors:
            return f"flavor {flavor!r} is not offered to queue {queue.name!r} (flavors {queue.flavors})"
        if job.flavors and flavor not in job.flavors:
            return f"flavor {flavor!r} is not one of the job's flavors {job.flavors}"
        return None

    def _placement(  # noqa: C901
        self, what: str, job: Job, cluster_name: str, flavor: str, assignments: tuple[Assignment, ...]
    ) -> dict[str, _Need]:
        """Check a placement's shape against the job and its nodes; return what it takes on each node."""
        if not assignments:
            _fail(f"{what}: no assignments")
        needs: dict[str, _Need] = defaultdict(_Need)
        workers = 0
        heads = [a for a in assignments if a.workers == 0 or a.cpu > a.workers * job.cpu]
        if len(heads) != (1 if job.has_head else 0):
            _fail(f"{what}: {len(heads)} nodes hold a head, the job has {1 if job.has_head else 0}")
        worker_nodes = []
        for a in assignments:
            node = self.nodes.get(a.node)
            if node is None:
                _fail(f"{what}: node {a.node!r} does not exist")
            if node.cluster != cluster_name:
                _fail(f"{what}: node {a.node!r} is in cluster {node.cluster!r}, not {cluster_name!r}")
            if node.flavor != flavor:
                _fail(f"{what}: node {a.node!r} has flavor {node.flavor!r}, not {flavor!r}")
            if not node.healthy:
                _fail(f"{what}: node {a.node!r} is unhealthy")
            if not node.schedulable:
                _fail(f"{what}: node {a.node!r} is not schedulable (cordoned or draining)")
            if node.team and node.team != job.team:
                _fail(f"{what}: node {a.node!r} is lent to team {node.team!r}, the job is team {job.team!r}'s")
            if node.spot and not job.spot:
                _fail(f"{what}: node {a.node!r} is spot capacity, and the job does not accept spot")
            need = needs[a.node]
            need.cpu += a.cpu
            need.memory += a.memory
            for index, milli in a.accels:
                need.accels[index] += milli
            if heads and a is heads[0]:  # the head's share is added last (``placement.with_head``)
                a = self._without_head(what, job, a)
                if not a.workers:
                    continue
            if a.workers < 1:
                _fail(f"{what}: {a.workers} workers on node {a.node!r}")
            workers += a.workers
            worker_nodes.append(a.node)
            if a.cpu != a.workers * job.cpu or a.memory != a.workers * job.memory:
                _fail(
                    f"{what}: node {a.node!r} holds cpu={a.cpu} memory={a.memory} for {a.workers} workers, "
                    f"expected cpu={a.workers * job.cpu} memory={a.workers * job.memory}"
                )
            self._check_accels(what, job, node, a)
        if workers != job.workers:
            _fail(f"{what}: {workers} workers placed, the job has {job.workers} (a gang is all or nothing)")
        for node_name, need in needs.items():
            for index, milli in need.accels.items():
                if milli > WHOLE:
                    _fail(f"{what}: {milli} milli on accelerator {index} of node {node_name!r}, more than one")
                if job.accel_milli == WHOLE and milli != WHOLE:
                    _fail(f"{what}: accelerator {index} of node {node_name!r} is given twice to whole workers")
        self._check_topology(what, job, cluster_name, worker_nodes)
        return needs

    @staticmethod
    def _without_head(what: str, job: Job, a: Assignment) -> Assignment:
        """The workers' part of the assignment that also holds the job's head (its whole accelerators last)."""
        accelerators, cpu, memory = job.head
        kept = a.accels[: len(a.accels) - accelerators]
        head = a.accels[len(a.accels) - accelerators :]
        if len(head) != accelerators or any(milli != WHOLE for _, milli in head):
            _fail(f"{what}: the head on {a.node!r} holds {head}, not {accelerators} whole accelerators")
        if a.cpu - cpu != a.workers * job.cpu or a.memory - memory != a.workers * job.memory:
            _fail(f"{what}: node {a.node!r} holds cpu={a.cpu} memory={a.memory} for the head and {a.workers} workers")
        return Assignment(a.node, a.workers, kept, a.cpu - cpu, a.memory - memory)

    def _check_accels(self, what: str, job: Job, node: Node, a: Assignment) -> None:
        expected = a.workers * job.accel_per_worker
        total = 0
        for index, milli in a.accels:
            if not 0 <= index < node.accel_count:
                _fail(f"{what}: accelerator index {index} on node {node.name!r} with {node.accel_count}")
            if milli <= 0:
                _fail(f"{what}: {milli} milli on accelerator {index} of node {node.name!r}")
            # Each worker takes ``accel_milli`` of one accelerator per accelerator it asks for; entries for
            # fractional workers sharing an accelerator may be merged, so an entry is a multiple of it.
            if milli % job.accel_milli:
                _fail(f"{what}: {milli} milli on accelerator {index} of {node.name!r}, not shares of {job.accel_milli}")
            total += milli
        if total != expected:
            _fail(
                f"{what}: {total} milli-accelerators on node {node.name!r} for {a.workers} workers, "
                f"expected {expected} ({job.accelerators} x {job.accel_milli} per worker)"
            )

    def _check_topology(self, what: str, job: Job, cluster_name: str, node_names: list[str]) -> None:
        if job.topology is None or job.topology.mode != TopologyMode.REQUIRED:
            return
        level = job.topology.level
        if level == HOST:
            if len(node_names) != 1:
                _fail(f"{what}: topology requires one {HOST}, the workers are on {sorted(node_names)}")
            return
        levels = self.clusters[cluster_name].levels
        if level not in levels:
            _fail(f"{what}: topology requires level {level!r}, cluster {cluster_name!r} has levels {levels}")
        i = levels.index(level)
        domains: dict[str, list[str]] = defaultdict(list)
        for name in node_names:
            topology = self.nodes[name].topology
            if len(topology) <= i:
                _fail(f"{what}: node {name!r} has no domain at level {level!r} (topology {topology})")
            domains[topology[i]].append(name)
        if len(domains) > 1:
            _fail(f"{what}: topology requires one {level!r} domain, the gang spans {dict(sorted(domains.items()))}")

    def _free_at(self, node: str, t: float) -> tuple[int, int, int]:
        """Free accel milli (summed), cpu and memory of a node at time t: free now plus what is released by t."""
        released = [h for h in self.holds[node].values() if h.until <= t]
        return (
            sum(self.accel_free[node]) + sum(h.accel for h in released),
            self.cpu_free[node] + sum(h.cpu for h in released),
            self.memory_free[node] + sum(h.memory for h in released),
        )

    def _reservation_fits(self, what: str, reservation: Reservation, node: str, need: _Need) -> None:
        """At the reservation's start, the node holds what it reserves and what overlapping reservations do."""
        accel, cpu, memory = self._free_at(node, reservation.start)
        others = []
        for other, other_needs in self.active_reservations:
            if other is not reservation and node in other_needs and other.start <= reservation.start < other.end:
                accel -= other_needs[node].accel_total
                cpu -= other_needs[node].cpu
                memory -= other_needs[node].memory
                others.append(other.job)
        if need.accel_total > accel or need.cpu > cpu or need.memory > memory:
            _fail(
                f"{what}: at {reservation.start} node {node!r} has accel={accel} cpu={cpu} memory={memory} left "
                f"(after reservations {others}), the reservation for {reservation.job!r} needs "
                f"accel={need.accel_total} cpu={need.cpu} memory={need.memory}"
            )

    # ------------------------------------------------------------------------------------------- admit

    def _admit(self, where: str, job: Job, admission: Admission) -> None:  # noqa: C901
        what = f"{where}: admission"
        queue = self.queues.get(job.queue)
        if queue is None:
            _fail(f"{what}: the job's queue {job.queue!r} does not exist")
        if job.tier not in self.tiers:
            _fail(f"{what}: the job's tier {job.tier!r} does not exist")
        reason = self.job_allows(job, queue, admission.cluster, admission.flavor)
        if reason is not None:
            _fail(f"{what}: {reason}")
        needs = self._placement(what, job, admission.cluster, admission.flavor, admission.assignments)

        cost = sum(
            milli / WHOLE * self.nodes[a.node].price_per_accel_hour
            for a in admission.assignments
            for _, milli in a.accels
        )
        if abs(cost - admission.cost_per_hour) > TOLERANCE * max(1.0, cost):
            _fail(f"{what}: cost_per_hour={admission.cost_per_hour}, the nodes' prices add up to {cost}")
        if job.max_price_per_hour is not None and cost > job.max_price_per_hour + TOLERANCE:
            _fail(f"{what}: costs {cost} per hour, the job's maximum is {job.max_price_per_hour}")

        # Capacity: every accelerator, cpu and memory stays at or above zero.
        for node_name, need in needs.items():
            free = self.accel_free[node_name]
            for index, milli in need.accels.items():
                free[index] -= milli
                if free[index] < 0:
                    _fail(f"{what}: accelerator {index} of node {node_name!r} over-allocated by {-free[index]} milli")
            self.cpu_free[node_name] -= need.cpu
            self.memory_free[node_name] -= need.memory
            if self.cpu_free[node_name] < 0 or self.memory_free[node_name] < 0:
                _fail(
                    f"{what}: node {node_name!r} over-allocated: cpu free {self.cpu_free[node_name]}, "
                    f"memory free {self.memory_free[node_name]}"
                )

        self._admit_quota(what, job, admission)
        limit = self.snapshot.member_limits.get(job.owner)
        if limit is not None:
            self.member_used[job.owner] += job.request()[0]
            if self.member_used[job.owner] > limit:
                _fail(f"{what}: member {job.owner!r} would hold {self.member_used[job.owner]} milli, limit {limit}")
        self._charge_budgets(what, job, admission)
        self.admissions[job.id] = admission

        end = self.snapshot.now + job.time_limit
        for a in admission.assignments:
            self._hold(a.node, f"job {job.id}", end, a)
        # Backfill: a job started after a reservation's job must leave it room, or be gone by its start.
        for reservation, reserved in self.active_reservations:
            if end <= reservation.start:
                continue
            for node_name in needs:
                if node_name in reserved:
                    self._reservation_fits(
                        f"{what} (ends {end}) overlaps the reservation for {reservation.job!r}",
                        reservation,
                        node_name,
                        reserved[node_name],
                    )

    def _charge_budgets(self, what: str, job: Job, admission: Admission) -> None:
        """No hard budget pays for more than it has left: accelerator-hours and money until its period ends."""
        for name in job.budgets:
            budget = self.snapshot.budgets.get(name)
            if budget is None:
                continue
            seconds = min(job.time_limit, max(0.0, budget.until - self.snapshot.now))
            left = self.budget_left[name]
            if left[0] is not None:
                left[0] -= job.request()[0] * seconds
                if left[0] < 0:
                    _fail(f"{what}: budget {name!r} would pay {-left[0]} milli-accelerator-seconds beyond its limit")
            if left[1] is not None:
                left[1] -= admission.cost_per_hour * seconds / 3600
                if left[1] < -1e-3:  # cost_per_hour is rounded to 6 decimals
                    _fail(f"{what}: budget {name!r} would pay {-left[1]} beyond its money")

    def _admit_quota(self, what: str, job: Job, admission: Admission) -> None:
        added = {
            key: amount
            for key, amount in usage_by_key(admission.flavor, admission.assignments).items()
            if self.literal_quota or self.quota.governed(key)
        }
        before = {key: self.quota.path_usage(job.queue, key) for key in added}
        for key, amount in added.items():
            self.quota.queue_usage[(job.queue, key)] += amount
        for key in added:
            after = self.quota.path_usage(job.queue, key)
            for node, usage in after.items():
                bound = self.quota.bound(node, key)
                # Only what this admission makes worse: the input may already be over a lowered quota.
                if bound is not None and usage > bound.limit and usage > before[key][node]:
                    _fail(
                        f"{what}: {describe(node)} uses {usage} of {key} (was {before[key][node]}), "
                        f"over its limit {bound.limit} ({bound.why})"
                    )
        # Borrowing: over nominal now, or once this cycle's preemptions have played out (the queue's victims
        # gone, its waiting preemptors started); the flag may follow either reading.
        now, later = self._queue_usage_now_and_later(job.queue, admission.flavor)
        nominal = {key: self.quota.quota(("queue", job.queue), key).nominal for key in added}
        readings = {any(now[key] > nominal[key] for key in added), any(later[key] > nominal[key] for key in added)}
        if admission.borrowing not in readings:
            _fail(
                f"{what}: borrowing={admission.borrowing}, but the queue uses {now} of its nominal {nominal} "
                f"(and {later} once this cycle's preemptions have played out)"
            )

    def _queue_usage_now_and_later(self, queue: str, flavor: str) -> tuple[dict[Key, int], dict[Key, int]]:
        now = {(flavor, res): self.quota.queue_usage[(queue, (flavor, res))] for res in RESOURCES}
        later = dict(now)
        for p in self.preempted.values():
            w = self.running[p.workload]
            if w.queue == queue:
                for key, amount in usage_by_key(w.flavor, w.assignments).items():
                    if key in later:
                        later[key] -= amount
        for waiting_queue, flavors, request in self.waiting:
            if waiting_queue == queue and flavor in flavors:
                for res, amount in zip(RESOURCES, request, strict=True):
                    later[(flavor, res)] += amount
        return now, later

    # ----------------------------------------------------------------------------------------- reserve

    def _reserve(self, where: str, job: Job, reservation: Reservation) -> None:
        what = f"{where}: reservation"
        queue = self.queues.get(job.queue)
        if queue is None:
            _fail(f"{what}: the job's queue {job.queue!r} does not exist")
        reason = self.job_allows(job, queue, reservation.cluster, reservation.flavor)
        if reason is not None:
            _fail(f"{what}: {reason}")
        if reservation.start < self.snapshot.now:
            _fail(f"{what}: starts at {reservation.start}, before now ({self.snapshot.now})")
        if abs(reservation.end - (reservation.start + job.time_limit)) > TOLERANCE:
            _fail(f"{what}: ends at {reservation.end}, not start + time limit ({reservation.start + job.time_limit})")
        needs = self._placement(what, job, reservation.cluster, reservation.flavor, reservation.assignments)
        self.active_reservations.append((reservation, needs))
        self.reservations[job.id] = reservation
        for node_name, need in needs.items():
            self._reservation_fits(f"{what} cannot hold", reservation, node_name, need)
