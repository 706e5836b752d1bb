"""One scheduling cycle: order the pending jobs, then admit, preempt, reserve or explain each in turn.

The shape follows Kueue's cycle (docs/scheduling.md §The cycle) with Armada's and Slurm's ideas where they are better:

1. Build state from the snapshot: quota usage of the cohort tree, nodes as arrays, the backfill timeline.
   Then give back quota that was lowered below usage (``over_quota.py``): preempt, gracefully, what a queue
   or cohort holds beyond what it may, before any pending job is considered.
2. Order: each queue's jobs by (tier priority, aged submit time, id), where the aged submit time is
   the submit time plus ``Config.short_first`` times the time limit (short jobs first, with aging);
   across queues a heap over the queue heads by (tier priority, then the queue's weighted dominant
   resource share, then aged submit time, id).
   *Choice*: Kueue's fair-sharing tournament puts fairness before priority; we put the tier first, like
   Armada's priority classes, because tiers are the organisation's explicit statement of urgency and
   fair sharing is how equals divide what is left.
3. For each job, walk its queue's flavor fallbacks (§Flavors and routing): a flavor whose quota fits and
   whose capacity is free admits the job, preferring no borrowing; otherwise try preemption on the flavors
   in order (§Tiers and preemption); otherwise, if quota allows it but nodes are busy, reserve its future
   capacity (§Backfill and reservations); otherwise pending with the reason of the first flavor.
4. Failures are remembered (§Bounded work and speed; Armada's scheduling keys, with dominance): within a
   cycle capacity only shrinks, usage only grows and reservations only add up, so a job like one that
   failed, asking at least as much CPU, memory and time, fails too. Two levels: per (queue, tier, shape,
   constraints) for the whole verdict, and per (flavor, shape, constraints) for "no room", shared by every
   queue.
5. Bounded work: ``max_jobs_per_cycle`` jobs are examined, ``max_admissions_per_cycle`` admitted,
   ``preemption_attempts`` victim searches run,
   ``reservations`` and ``estimates`` backfill searches; the rest waits for the next cycle.
6. Spread groups (a service's replicas, ``Job.spread_group``): a one-worker job of a group is placed on a node
   none of its group holds (running, or admitted earlier in the cycle) where one has room, else where it fits
   (soft anti-affinity); among clusters whose routing scores tie, the one holding fewest of its group wins.

Speed (``manage.py bench_engine``: 10,000 nodes, 50,000 pending jobs, under a second a cycle). The
snapshot's objects are read once into arrays (``nodes.py``, ``running.py``) and every later question is
numpy over them; the cache-hit path in ``run`` is the only per-job Python, and is kept short; a
(flavor, cluster)'s largest free node turns most failing placements away before any node is scanned
(``_may_fit``); what-if checks (``fits``) skip routing and assignments; the collector is kept off the
snapshot (``_snapshot_frozen``). ``tests/engine/test_fast_paths.py`` holds each shortcut to the slow way.
"""

from __future__ import annotations

import gc
import heapq
from collections import defaultdict
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, replace
from typing import Generic, TypeVar

import numpy as np

from . import explain
from .backfill import Timeline
from .budgets import Ledger
from .fgd import Fragmentation, Shape, workload_mix
from .maintenance import Maintenance
from .model import (
    CPU,
    MEMORY,
    REFUSED,
    RESOURCES,
    WHOLE,
    Admission,
    Assignment,
    Decisions,
    Job,
    Pending,
    PendingReason,
    Preemption,
    Queue,
    Reservation,
    Snapshot,
    Tier,
    Topology,
    TopologyMode,
)
from .nodes import FreeState, IntArray, NodeTable
from .over_quota import reclaim_over_quota
from .placement import (
    Holds,
    accelerator_slots,
    can_spread,
    head_row,
    held_fits,
    lacks_level,
    pick_single,
    spread,
    with_head,
    worker_fits,
)
from .preemption import Preemptor
from .quota import Mode, QuotaTree
from .running import RunningWork

#: Reasons that mean "not now" for lack of nodes (as opposed to quota, or "never").
CAPACITY_REASONS = (PendingReason.CAPACITY, PendingReason.BACKFILL_BLOCKED, PendingReason.MAINTENANCE)
INF = float("inf")
#: The least a job must ask for to fail like one that failed: (CPU, memory, time limit, price limit).
Floor = tuple[int, int, int, float]
T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class Placement:
    cluster: int
    flavor: str
    assignments: tuple[Assignment, ...]
    cost_per_hour: float


#: A cluster's offer for a job: (cluster, [(row, workers)], first accelerator slot, fit 0-1, cost per hour,
#: fragmentation increase, the head's row or -1).
#: The increase in fragmentation (FGD) is there when it was scored; it then measures the fit across clusters.
Option = tuple[int, list[tuple[int, int]], int, float, float, float | None, int]


@dataclass(slots=True)
class Verdict:
    """Why a job could not start, per the first flavor that explains it best."""

    reason: PendingReason
    flavor: str | None
    facts: Mapping[str, object]
    reservable: str | None = None  # a flavor whose quota fits but whose nodes are busy
    message: str = ""  # filled on first use; identical jobs share it
    estimate: float | None = None
    estimated: bool = False
    settled: bool = False  # nothing left to do for jobs with this verdict but pend them (``run``)
    refused: bool = False  # ``Pending.refused``


class Failures(Generic[T]):
    """What failed this cycle, by job shape. Within a cycle free capacity only shrinks, usage only grows
    and reservations only add up, so a job that asks for at least as much CPU, memory and time as one that
    failed, with no higher price limit, fails the same way (Armada's scheduling keys, with dominance)."""

    def __init__(self) -> None:
        self.known: dict[tuple[object, ...], list[tuple[int, int, int, float, T]]] = {}

    @staticmethod
    def price(job: Job) -> float:
        return job.max_price_per_hour if job.max_price_per_hour is not None else INF

    @staticmethod
    def floor(job: Job) -> Floor:
        """The job itself as a failure: only jobs asking at least as much fail like it."""
        return (job.cpu, job.memory, job.time_limit, Failures.price(job))

    def get(self, key: tuple[object, ...], job: Job) -> T | None:
        known = self.known.get(key)
        if not known:
            return None
        price = self.price(job)
        for i, (cpu, memory, limit, max_price, value) in enumerate(known):
            if job.cpu >= cpu and job.memory >= memory and job.time_limit >= limit and price <= max_price:
                if i:  # the failure that matched is likely to match the next job too: try it first
                    known.insert(0, known.pop(i))
                return value
        return None

    def put(self, key: tuple[object, ...], floor: Floor, value: T) -> None:
        """Record a failure of every job asking at least ``floor``; it replaces the ones it covers (keeping
        the list short and most general)."""
        entry = (*floor, value)
        known = [
            k
            for k in self.known.get(key, [])
            if not (k[0] >= entry[0] and k[1] >= entry[1] and k[2] >= entry[2] and k[3] <= entry[3])
        ]
        if len(known) < 16:
            known.append(entry)
        self.known[key] = known


def schedule(snapshot: Snapshot) -> Decisions:
    """Run one placement cycle on ``snapshot`` and return its decisions. Pure: the snapshot is not changed."""
    with _snapshot_frozen():
        return Cycle(snapshot).run()


@contextmanager
def _snapshot_frozen() -> Iterator[None]:
    """Keep Python's cyclic garbage collector off the snapshot during the cycle. A cycle allocates tens of
    thousands of small objects beside a snapshot of hundreds of thousands, and every full collection would
    walk the whole snapshot again (a fifth of the cycle at 10,000 nodes). ``gc.freeze`` moves what exists
    now out of the collector's sight and ``gc.unfreeze`` gives it back afterwards; objects the cycle
    creates are still collected, in fewer, larger batches (almost all of them live to the end of the
    cycle, so frequent young collections would only scan them again). A process that froze objects
    itself (a pre-forking server) keeps its own freeze: we leave the permanent generation alone then."""
    threshold = gc.get_threshold()
    gc.set_threshold(max(threshold[0], 20_000), *threshold[1:])
    frozen = not gc.get_freeze_count()
    if frozen:
        gc.freeze()
    try:
        yield
    finally:
        if frozen:
            gc.unfreeze()
        gc.set_threshold(*threshold)


class Cycle:
    def __init__(self, snapshot: Snapshot) -> None:
        self.snapshot = snapshot
        self.config = snapshot.config
        self.now = snapshot.now
        self.tiers = {t.name: t for t in snapshot.tiers}
        self.queues = {q.name: q for q in snapshot.queues}
        self.table = NodeTable(snapshot.clusters, snapshot.nodes)
        self.quota = QuotaTree(snapshot.cohorts, snapshot.queues, self.table.flavors)
        # Running work, read once into arrays (``running.py``) and grouped by flavor for the preemptor.
        self.work = RunningWork(self.table, snapshot.running)
        self.running: defaultdict[str, list[int]] = defaultdict(list)
        usage: defaultdict[tuple[str, str], list[int]] = defaultdict(lambda: [0, 0, 0])
        for i, (w, used) in enumerate(zip(self.work.workloads, self.work.usage, strict=True)):
            self.running[w.flavor].append(i)
            total = usage[(w.queue, w.flavor)]
            total[0], total[1], total[2] = total[0] + used[0], total[1] + used[1], total[2] + used[2]
        self.quota.charge_running(usage)
        # Per-member limits: what each limited member's running work holds (milli-accelerators).
        self.member_limits = snapshot.member_limits
        self.member_used: defaultdict[str, int] = defaultdict(int)
        #: When each limited member's running work ends (its time limit) and what it gives back then.
        self.member_ends: defaultdict[str, list[tuple[float, int]]] = defaultdict(list)
        if self.member_limits:
            for w, used in zip(self.work.workloads, self.work.usage, strict=True):
                if w.owner in self.member_limits:
                    self.member_used[w.owner] += used[0]
                    self.member_ends[w.owner].append((w.expected_end, int(used[0])))
        #: Per spread group, the rows of the nodes its jobs hold and how many of them each cluster runs.
        self.spread_rows: defaultdict[str, set[int]] = defaultdict(set)
        self.spread_clusters: defaultdict[str, defaultdict[int, int]] = defaultdict(lambda: defaultdict(int))
        for w in self.work.workloads:
            if w.spread_group:
                self._spread_add(w.spread_group, w.assignments)
        self.ledger = Ledger(snapshot.budgets, self.now)
        self.maintenance = Maintenance(self.table, snapshot.maintenance, self.now)
        self.timeline = Timeline(
            self.table,
            self.now,
            self.config.backfill_window,
            self.config.time_quantum,
            self.work,
            self.maintenance.ends,
        )
        self.preemptor = Preemptor(self)
        self.fragmentation = (
            Fragmentation(
                self.table,
                workload_mix(self.table, snapshot.pending, self.config.fgd_shapes),
                suited=self.config.fgd_suited,
                whole_mix=self.config.fgd_whole_mix,
                remainder=self.config.fgd_remainder,
                remainder_suited=self.config.fgd_remainder_suited,
            )
            if self.config.fgd
            else None
        )
        self._usable_rows: dict[tuple[str, int, tuple[str, str]], IntArray] = {}
        self._allowed: dict[tuple[object, ...], list[int]] = {}
        self._queue_flavors: dict[tuple[object, ...], list[str]] = {}
        self._capacity: dict[tuple[int, int, tuple[str, str]], int] = {}
        self._largest_free: dict[tuple[int, int, int, tuple[str, str]], tuple[int, ...]] = {}
        self._failed: Failures[Verdict] = Failures()
        self._no_room: Failures[tuple[Verdict, Floor]] = Failures()
        self._share: dict[int, float] = {}
        self._ever: dict[tuple[object, ...], bool] = {}
        self._gang_fits: dict[tuple[object, ...], bool] = {}
        self._largest: dict[tuple[object, ...], tuple[int, int]] = {}
        self._quota_epoch = 0
        self._modes: dict[tuple[int, str, tuple[int, int, int]], tuple[int, Mode]] = {}
        self.admissions: list[Admission] = []
        #: What this cycle admitted holds of quota until its time limit: (end, queue, flavor, request).
        self._admitted_usage: list[tuple[float, int, str, tuple[int, int, int]]] = []
        self.preemptions: list[Preemption] = []
        self.reservations: list[Reservation] = []
        self.pending: list[Pending] = []
        self.order: list[str] = []
        self.stats: defaultdict[str, int] = defaultdict(int)

    # ------------------------------------------------------------------------------------------ ordering

    def _queue_share(self, queue: int) -> float:
        share = self._share.get(queue)
        if share is None:
            weight = self.queues[self.quota.names[queue]].weight
            raw = self.quota.share(queue)
            share = raw / weight if weight > 0 else (float("inf") if raw > 0 else 0.0)
            self._share[queue] = share
        return share

    def _in_order(self) -> Iterator[tuple[Job, Tier, Queue]]:
        """Valid jobs in the order the cycle considers them; invalid ones go straight to pending.

        Each queue's jobs are sorted once (one numpy sort for all queues). A heap then holds one head per
        queue; only the queue being taken from can change its share (by admitting), so the other heads'
        keys stay exact without being recomputed, and a queue is taken from while its next job still
        comes first.
        """
        tiers, queues = self.tiers, self.queues
        jobs: list[Job] = []
        invalid: list[Job] = []
        for job in self.snapshot.pending:
            (jobs if job.tier in tiers and job.queue in queues else invalid).append(job)
        for job in sorted(invalid, key=lambda j: j.id):
            self.order.append(job.id)
            reason = PendingReason.UNKNOWN_QUEUE if job.queue not in queues else PendingReason.UNKNOWN_TIER
            self._pend(job, reason)
        if not jobs:
            return
        n = len(jobs)
        names = sorted({job.queue for job in jobs})
        number = {name: i for i, name in enumerate(names)}
        tier_of = [tiers[job.tier] for job in jobs]
        neg_priority = [-tier.priority for tier in tier_of]
        aging = self.config.short_first
        submitted = (
            [job.submitted_at + aging * job.time_limit for job in jobs] if aging else [j.submitted_at for j in jobs]
        )
        ids = [job.id for job in jobs]
        queue_of = np.fromiter((number[job.queue] for job in jobs), np.int64, n)
        id_rank = np.empty(n, np.int64)
        id_rank[np.argsort(np.array(ids), kind="stable")] = np.arange(n)
        ordered = np.lexsort((id_rank, np.array(submitted), np.array(neg_priority), queue_of))
        bounds = np.searchsorted(queue_of[ordered], np.arange(len(names) + 1)).tolist()
        ordered_list = ordered.tolist()
        per_queue = {name: ordered_list[bounds[i] : bounds[i + 1]] for i, name in enumerate(names)}
        fair = self.config.fair_sharing
        index = self.quota.index

        def head(name: str, k: int, share: float) -> tuple[int, float, float, str, str]:
            return (neg_priority[k], share, submitted[k], ids[k], name)

        heads = [
            head(name, items[0], self._queue_share(index[name]) if fair else 0.0) for name, items in per_queue.items()
        ]
        heapq.heapify(heads)
        taken = dict.fromkeys(names, 0)
        while heads:
            name = heapq.heappop(heads)[4]
            items, queue, qi = per_queue[name], queues[name], index[name]
            share, epoch = 0.0, -1
            at = taken[name]
            while at < len(items):
                k = items[at]
                at += 1
                yield jobs[k], tier_of[k], queue
                if at < len(items):
                    if fair and epoch != self._quota_epoch:
                        share, epoch = self._queue_share(qi), self._quota_epoch
                    k = items[at]
                    following = (neg_priority[k], share, submitted[k], ids[k], name)
                    if heads and heads[0] < following:
                        heapq.heappush(heads, following)
                        break
            taken[name] = at

    # --------------------------------------------------------------------------------------------- cycle

    def run(self) -> Decisions:
        """Give back quota lowered below usage, then consider every job in order. This loop runs once per
        pending job, tens of thousands of times a cycle, and nearly every time the failure cache already
        knows the verdict; so that case is kept inline and short."""
        reclaim_over_quota(self)
        limit, attempts, considered = self.config.max_jobs_per_cycle, self.config.preemption_attempts, 0
        admit_limit, admissions = self.config.max_admissions_per_cycle, self.admissions
        limits, ledger, estimate_for = self.member_limits, self.ledger, self.config.estimate_for
        order, pending, failed, preemptor, make = self.order, self.pending, self._failed, self.preemptor, tuple.__new__
        for position, (job, tier, queue) in enumerate(self._in_order()):
            order.append(job.id)
            if position >= limit or len(admissions) >= admit_limit:
                self._pend(job, PendingReason.NOT_CONSIDERED, position=position)
                continue
            considered += 1
            if limits and job.owner in limits and self._over_member_limit(job, position):
                continue
            capped_by = None
            if ledger and job.budgets:
                over = ledger.over(job)
                if over is not None:
                    start = over.get("start")
                    estimate = float(str(start)) if start is not None else None
                    self._pend(job, PendingReason.BUDGET, position=position, estimate=estimate, facts=over)
                    continue
                job, capped_by = ledger.within_money(job)
            # Once this cycle's victim searches are spent, a verdict no longer depends on the job's tier.
            key = (
                queue.name,
                None if preemptor.attempts >= attempts else tier.name,
                job.workers,
                job.accelerators,
                job.accel_milli,
                job.head,
                job.flavors,
                job.clusters,
                job.regions,
                job.topology,
                job.needs,
                job.excluded,
                job.preemptible,
                self._reach(job),
            )
            known = failed.known.get(key)
            if not known:
                verdict = None
            else:  # the usual case, the first failure recorded for the key covers the job, tried inline
                cpu, memory, time_limit, max_price, verdict = known[0]
                price = job.max_price_per_hour
                if not (
                    job.cpu >= cpu
                    and job.memory >= memory
                    and job.time_limit >= time_limit
                    and (max_price == INF if price is None else price <= max_price)
                ):
                    verdict = failed.get(key, job)
            if verdict is None:
                self.stats["tried"] += 1
                outcome = self._try_now(job, tier, queue, Shape.of(job), position)
                if outcome is None:
                    continue  # admitted, or waiting for the preemptions it issued
                verdict, floor = outcome
                failed.put(key, floor, verdict)
            if capped_by is not None and verdict.reason is PendingReason.PRICE_LIMIT:  # the budget's price limit
                self._pend(job, PendingReason.BUDGET, position=position, facts=ledger.money_facts(job, capped_by))
            elif verdict.settled and job.id != estimate_for:  # (``tuple.__new__``: no Python-level __new__)
                made = (job.id, verdict.reason, verdict.message, verdict.estimate, position, verdict.refused)
                pending.append(make(Pending, made))
            else:
                self._reserve_or_pend(job, verdict, position)
        self.stats["considered"] = considered
        self.stats["cache_hits"] = considered - self.stats["tried"]
        return Decisions(
            admissions=tuple(self.admissions),
            preemptions=tuple(self.preemptions),
            reservations=tuple(self.reservations),
            pending=tuple(pending),
            order=tuple(order),
            stats=dict(self.stats),
        )

    def _over_member_limit(self, job: Job, position: int) -> bool:
        """Pend the job if its submitter's running (and just admitted) work would pass their per-member limit.
        Checked before the failure cache, whose verdicts do not depend on who submitted a job."""
        limit, used, needed = (
            self.member_limits[job.owner],
            self.member_used[job.owner],
            job.request()[0],
        )
        if used + needed <= limit:
            return False
        facts: dict[str, object] = {
            "used": explain.accel_words(used),
            "limit": explain.accel_words(limit),
            "needed": explain.accel_words(needed),
        }
        start = None
        if needed > limit:  # more than the limit itself: no amount of waiting helps
            facts["never"] = True
        else:  # the submitter's running work ends by its time limits: when enough of it has, it may start
            room = limit - used
            for end, held in sorted(self.member_ends[job.owner]):
                room += held
                if room >= needed:
                    start = facts["start"] = max(end, self.now)
                    break
        self._pend(job, PendingReason.MEMBER_LIMIT, position=position, estimate=start, facts=facts)
        return True

    def _try_now(self, job: Job, tier: Tier, queue: Queue, shape: Shape, position: int) -> tuple[Verdict, Floor] | None:
        """Admit the job or issue preemptions for it (None), or say why it cannot start now, with the
        least a job of its kind must ask for to fail for the same reasons."""
        qi = self.quota.index[queue.name]
        request = job.request()
        flavors = self._flavors(job, queue)
        if not flavors:
            return self._nowhere(job, queue), (0, 0, 1, Failures.price(job))
        # What the failures found so far depend on; each one raises the floor (see ``Failures``).
        floor = [0, 0, 1, INF]  # cpu, memory, time limit, price limit
        best: tuple[int, int, Placement] | None = None
        verdicts: list[Verdict] = []
        preemptable: list[str] = []
        for rank, flavor in enumerate(flavors):
            mode = self._quota_mode(qi, flavor, request)
            if mode is not Mode.FIT:  # quota depends on CPU and memory only where they are governed
                governed = {r for r, _ in self.quota.frs(flavor)}
                floor[0] = max(floor[0], job.cpu if CPU in governed else 0)
                floor[1] = max(floor[1], job.memory if MEMORY in governed else 0)
            if mode is Mode.NO_FIT:
                verdicts.append(self._quota_limit(qi, flavor, request))
                continue
            if mode is Mode.FIT:
                # Capacity does not depend on the queue: one failure serves every queue's jobs of this shape.
                room_key = (
                    flavor,
                    job.workers,
                    job.accelerators,
                    job.accel_milli,
                    job.head,
                    job.clusters,
                    job.regions,
                    job.topology,
                    job.needs,
                    job.excluded,
                    job.preemptible,
                    self._reach(job),
                )
                known = self._no_room.get(room_key, job)
                if known is None:
                    placement = self.place(job, shape, flavor, self.table.free, self.now, self.timeline.holds)
                    if placement is not None:
                        level = self.quota.borrowing_level(qi, flavor, request)
                        if best is None or level < best[0]:
                            best = (level, rank, placement)
                        if level == 0:
                            break
                        continue
                    known = self._why_no_room(job, flavor)
                    self._no_room.put(room_key, known[1], known)
                no_room, least = known
                floor = [
                    max(floor[0], least[0]),
                    max(floor[1], least[1]),
                    max(floor[2], least[2]),
                    min(floor[3], least[3]),
                ]
                verdicts.append(no_room)
                if no_room.reason in CAPACITY_REASONS:
                    preemptable.append(flavor)
            else:
                verdicts.append(Verdict(PendingReason.QUOTA_EXHAUSTED, flavor, {"flavors": flavor}))
                preemptable.append(flavor)
        if best is not None:
            self._admit(job, qi, request, best[2], borrowing=best[0] > 0)
            return None
        attempts = self.preemptor.attempts
        for flavor in preemptable:
            if self.preemptor.try_preempt(job, tier, queue, qi, shape, request, flavor, position):
                return None
        if self.preemptor.attempts != attempts:  # a victim search depends on the whole request
            floor = list(Failures.floor(job))
        # The first flavor's reason explains best, except that "busy now" beats "never" and "quota".
        busy = [v for v in verdicts if v.reason in CAPACITY_REASONS]
        first = busy[0] if busy else verdicts[0]
        facts = first.facts if busy else self._all_flavors(first, verdicts)
        verdict = Verdict(first.reason, first.flavor, facts, reservable=busy[0].flavor if busy else None)
        return verdict, (int(floor[0]), int(floor[1]), int(floor[2]), floor[3])

    @staticmethod
    def _all_flavors(first: Verdict, verdicts: list[Verdict]) -> Mapping[str, object]:
        """``first``'s facts, naming every flavor tried that failed for the same reason (the types the job
        chose, or all its queue may use), not the first alone: a job that picked no type is not told about
        one type it never picked. Where the largest node was measured, it is the largest of them all."""
        same = [v for v in verdicts if v.reason is first.reason and v.flavor]
        if len(same) < 2:
            return first.facts
        facts = {**first.facts, "flavors": " or ".join(dict.fromkeys(str(v.flavor) for v in same))}
        if "largest_raw" in first.facts:
            largest = max(same, key=lambda v: int(str(v.facts["largest_raw"])))
            facts.update(largest=largest.facts["largest"], largest_raw=largest.facts["largest_raw"])
        return facts

    def _nowhere(self, job: Job, queue: Queue) -> Verdict:
        """Why a job with no flavor in any allowed cluster waits: the clusters that offer its flavors are
        ruled out (``NO_CLUSTER``, naming them), or none offers them (``NO_FLAVOR``)."""
        ruled_out = self._ruled_out(job, queue)
        if not ruled_out:
            return Verdict(PendingReason.NO_FLAVOR, None, {})
        facts = {"ruled_out": ruled_out}
        refused = explain.refused_everywhere(ruled_out)
        verdict = Verdict(PendingReason.NO_CLUSTER, None, facts, settled=True, refused=refused)
        verdict.message = explain.message(PendingReason.NO_CLUSTER, job, facts)
        return verdict

    def _quota_mode(self, qi: int, flavor: str, request: tuple[int, int, int]) -> Mode:
        """``QuotaTree.classify``, remembered until the next admission changes usage."""
        key = (qi, flavor, request)
        cached = self._modes.get(key)
        if cached is None or cached[0] != self._quota_epoch:
            cached = self._modes[key] = (self._quota_epoch, self.quota.classify(qi, flavor, request))
        return cached[1]

    def quota_changed(self, qi: int) -> None:
        """Usage of queue ``qi`` changed for good: forget what was derived from it."""
        self._quota_epoch += 1
        self._share.pop(qi, None)

    def _reserve_or_pend(self, job: Job, verdict: Verdict, position: int) -> None:
        flavor = verdict.reservable
        wanted = job.id == self.config.estimate_for and not verdict.estimated
        if flavor is not None and self.config.backfill:
            if len(self.reservations) < self.config.reservations:
                reserved = self._reserve(job, flavor)
                if reserved is not None:
                    facts = {
                        "start": reserved.start,
                        "where": f"{flavor} in {reserved.cluster}",
                        "cluster": reserved.cluster,
                    }
                    reason = PendingReason.RESERVED
                    if verdict.reason is PendingReason.MAINTENANCE:  # say why it waits, and until when
                        reason, facts = verdict.reason, {**verdict.facts, "reserved": reserved.start}
                    self._pend(job, reason, position=position, estimate=reserved.start, facts=facts)
                    return
                # No room within the backfill window: too far off to hold capacity for, but the running
                # jobs' time limits still say when it could start.
                start = self._earliest(job, flavor, beyond=True)
                facts = {**verdict.facts, "free_at": start, "unbounded": start is None}
                self._pend(job, verdict.reason, position=position, estimate=start, facts=facts)
                return
            if wanted or (not verdict.estimated and self.stats["estimates"] < self.config.estimates):
                # One estimate per verdict: identical jobs behind it cannot start earlier.
                self.stats["estimates"] += 1
                verdict.estimated = True
                verdict.estimate = self._earliest(job, flavor)
                if verdict.estimate is None:
                    verdict.estimate = self._earliest(job, flavor, beyond=True)
                    verdict.facts = {**verdict.facts, "unbounded": verdict.estimate is None}
        elif (
            verdict.reason is PendingReason.QUOTA_EXHAUSTED
            and verdict.flavor is not None
            and (wanted or (not verdict.estimated and self.stats["estimates"] < self.config.estimates))
        ):  # when its queue's quota frees up, as running work reaches its time limits
            self.stats["estimates"] += 1
            verdict.estimated = True
            verdict.estimate = self._quota_frees(job, verdict.flavor)
        if not verdict.message:
            verdict.message = explain.message(verdict.reason, job, {**verdict.facts, "free_at": verdict.estimate})
        # Reservations and estimates only run out: once neither can change this verdict, later jobs
        # that share it are pended straight away.
        verdict.settled = (
            flavor is None
            or not self.config.backfill
            or (
                len(self.reservations) >= self.config.reservations
                and (verdict.estimated or self.stats["estimates"] >= self.config.estimates)
            )
        )
        made = Pending(job.id, verdict.reason, verdict.message, verdict.estimate, position, verdict.refused)
        self.pending.append(made)

    # ----------------------------------------------------------------------------------------- placement

    def _flavors(self, job: Job, queue: Queue) -> list[str]:
        """The queue's flavors, in its fallback order, that the job accepts and may run on somewhere."""
        key = (queue.name, job.flavors, job.clusters, job.regions, job.needs, job.excluded)
        flavors = self._queue_flavors.get(key)
        if flavors is None:
            flavors = self._queue_flavors[key] = [
                f for f in queue.flavors if (not job.flavors or f in job.flavors) and self._allowed_clusters(job, f)
            ]
        return flavors

    def _allowed_clusters(self, job: Job, flavor: str) -> list[int]:
        """The clusters with nodes of ``flavor`` that the job allows, that can run its program and that it is
        not excluded from. Every placement, estimate and victim search chooses among these."""
        key = (flavor, job.clusters, job.regions, job.needs, job.excluded)
        allowed = self._allowed.get(key)
        if allowed is None:
            excluded = {name for name, _ in job.excluded}
            allowed = [
                c
                for c in self._wanted_clusters(job, flavor)
                if not self.table.clusters[c].refuses(job.needs) and self.table.clusters[c].name not in excluded
            ]
            self._allowed[key] = allowed
        return allowed

    def _wanted_clusters(self, job: Job, flavor: str) -> list[int]:
        """The clusters with nodes of ``flavor`` in the job's clusters and regions, whatever they run."""
        return [
            c
            for c in self.table.clusters_of(flavor)
            if (not job.clusters or self.table.clusters[c].name in job.clusters)
            and (not job.regions or self.table.clusters[c].region in job.regions)
        ]

    def _ruled_out(self, job: Job, queue: Queue) -> list[explain.RuledOut]:
        """Each cluster that offers one of the job's flavors in its clusters and regions but cannot run its
        program or is excluded from it, by name; empty when there is no such cluster."""
        excluded = dict(job.excluded)
        ruled_out: dict[str, explain.RuledOut] = {}
        for flavor in queue.flavors:
            if job.flavors and flavor not in job.flavors:
                continue
            for c in self._wanted_clusters(job, flavor):
                cluster = self.table.clusters[c]
                why = excluded.get(cluster.name, "")
                if why.startswith(REFUSED):  # the cluster's own words explain best
                    ruled_out[cluster.name] = (cluster.name, why, True)
                elif cluster.refuses(job.needs):
                    ruled_out[cluster.name] = (cluster.name, cluster.refuses(job.needs), True)
                elif why:
                    ruled_out[cluster.name] = (cluster.name, why, False)
        return [ruled_out[name] for name in sorted(ruled_out)]

    def _may_fit(
        self,
        state: FreeState,
        shape: Shape,
        workers: int,
        flavor: str,
        cluster: int,
        reach: tuple[str, str] = ("", ""),
    ) -> bool:
        """A quick test from each (flavor, cluster)'s largest free node and total free accelerators, in
        the free state now or with every node idle: False means no placement exists there; True means
        look. Most jobs that fail now fail here, for a fraction of the cost of looking; and for one
        worker that asks only for accelerators, True is the answer."""
        f = self.table.flavor_index[flavor]
        version = int(self.table.group_version[f, cluster]) if state is self.table.free else -1
        known = self._largest_free.get((id(state), f, cluster, reach))
        if known is None or known[0] != version:
            rows = self._rows(flavor, cluster, reach)
            whole = state.whole[rows]
            known = self._largest_free[(id(state), f, cluster, reach)] = (
                version,
                int(whole.max()),
                int(state.accel[rows].max()),
                int(state.cpu[rows].max()),
                int(state.memory[rows].max()),
                int(whole.sum()),
            )
        _, whole_max, share_max, cpu_max, memory_max, whole_total = known
        if shape.cpu > cpu_max or shape.memory > memory_max:
            return False
        if shape.milli == WHOLE:
            return shape.accelerators <= whole_max and workers * shape.accelerators <= whole_total
        return shape.accelerators == 0 or shape.milli <= share_max

    def _reach(self, job: Job) -> tuple[str, str]:
        return self.table.reach(job.shape, job.team)

    def _rows(self, flavor: str, cluster: int, reach: tuple[str, str] = ("", "")) -> IntArray:
        """The candidate nodes of ``flavor`` in ``cluster`` for a job of that ``reach`` (``_reach``: its slice
        shape and, where nodes are lent to it, its team): the usable ones, of that shape, lent to no team or to
        the job's (``NodeTable.shaped``). Every placement, estimate and victim search chooses among these, so
        this is the one place where slices are kept to the jobs that ask for them, and lent nodes to their team."""
        key = (flavor, cluster, reach)
        rows = self._usable_rows.get(key)
        if rows is None:
            all_rows = self.table.rows(flavor, cluster)
            assert all_rows is not None
            rows = self.table.shaped(all_rows[self.table.usable[all_rows]], *reach)
            self._usable_rows[key] = rows
        return rows

    def place(
        self,
        job: Job,
        shape: Shape,
        flavor: str,
        state: FreeState,
        t: float,
        holds: Holds | None,
        *,
        pack: bool = True,
    ) -> Placement | None:
        """The best placement of ``job`` on ``flavor`` in ``state`` (now, or a future time ``t``), or None.

        Every allowed cluster that has room offers one placement; the routing score picks among them.
        """
        options = self._offers(job, shape, flavor, state, t, holds, pack=pack)
        if not options:
            return None
        c, pairs, first, _, cost, _, head = (
            options[0] if len(options) == 1 else self._route(job, flavor, state, options)
        )
        table = self.table
        assignments = tuple(
            Assignment(
                node=table.names[row],
                workers=count,
                accels=tuple(accelerator_slots(state, row, shape, count, first)),
                cpu=count * job.cpu,
                memory=count * job.memory,
            )
            for row, count in sorted(pairs)
        )
        if head >= 0:
            assignments = with_head(table.names[head], assignments, job.head, state.accel[head])
        return Placement(c, flavor, assignments, cost)

    def fits(self, job: Job, flavor: str, state: FreeState, t: float, holds: Holds | None = None) -> bool:
        """Whether ``job`` has a placement on ``flavor`` in ``state``: ``place`` for what-ifs, which need
        neither the best cluster nor the assignments."""
        return bool(self._offers(job, Shape.of(job), flavor, state, t, holds, pack=False, any_one=True))

    def _offers(
        self,
        job: Job,
        shape: Shape,
        flavor: str,
        state: FreeState,
        t: float,
        holds: Holds | None,
        *,
        pack: bool,
        any_one: bool = False,
    ) -> list[Option]:
        """One offer per allowed cluster with room for the job (only the first, given ``any_one``)."""
        end = t + job.time_limit
        total_accel = job.request()[0]
        options: list[Option] = []
        table = self.table
        windows = self._windows(job, state, t)
        for c in self._allowed_clusters(job, flavor):
            rows = self._rows(flavor, c, self._reach(job))
            levels = table.clusters[c].levels
            topology = self._topology_on(job, shape, flavor, c)
            if not len(rows) or lacks_level(levels, topology):
                continue
            closed = windows.closed(c, rows, t, end) if windows is not None else None
            if closed is not None and closed.all():
                continue
            if state is table.free or state is table.empty:
                if not self._may_fit(state, shape, job.workers, flavor, c, self._reach(job)):
                    continue
                bare = not (shape.cpu or shape.memory or holds or job.has_head) and job.max_price_per_hour is None
                if any_one and job.workers == 1 and bare and closed is None:
                    return [(c, [], -1, 0.0, 0.0, None, -1)]  # exact for this job (see ``_may_fit``)
            fits = worker_fits(state, rows, shape)
            if closed is not None:
                fits = np.where(closed, 0, fits)
            if holds is not None:
                fits = held_fits(holds, rows, shape, end, fits)
            if job.max_price_per_hour is not None and total_accel:
                fits = np.where(table.price[rows] * total_accel / WHOLE <= job.max_price_per_hour + 1e-9, fits, 0)
            if any_one and not job.has_head:  # a head is placed after the workers, below
                if (
                    (fits > 0).any()
                    if job.workers == 1
                    else can_spread(table, rows, fits, levels, topology, job.workers)
                ):
                    return [(c, [], -1, 0.0, 0.0, None, -1)]
                continue
            option = self._option(
                job,
                shape,
                flavor,
                state,
                c,
                rows,
                fits,
                pack=pack,
                closed=closed,
                holds=holds,
                end=end,
                topology=topology,
            )
            if option is None:
                continue
            if any_one:
                return [(c, [], -1, 0.0, 0.0, None, -1)]
            options.append(option)
        return options

    def _topology_on(self, job: Job, shape: Shape, flavor: str, c: int) -> Topology | None:
        """The job's topology on cluster ``c``: its own; else, on a cluster whose gangs must not straddle the
        domains of a level (``Cluster.gang_level``: Slurm's topology/block), that level, required, when one
        domain of the idle cluster could hold the whole gang (a bigger gang spans, as Slurm lets it)."""
        level = self.table.clusters[c].gang_level
        if job.topology is not None or job.workers == 1 or not level:
            return job.topology
        levels = self.table.clusters[c].levels
        key = (c, flavor, self._reach(job), shape, job.workers)
        if key not in self._gang_fits:
            rows = self._rows(flavor, c, self._reach(job))
            fits = worker_fits(self.table.empty, rows, shape)
            one = Topology(level, TopologyMode.REQUIRED)
            self._gang_fits[key] = level in levels and can_spread(self.table, rows, fits, levels, one, job.workers)
        return Topology(level, TopologyMode.REQUIRED) if self._gang_fits[key] else None

    def _option(
        self,
        job: Job,
        shape: Shape,
        flavor: str,
        state: FreeState,
        c: int,
        rows: IntArray,
        fits: IntArray,
        *,
        pack: bool,
        closed: np.ndarray | None,
        holds: Holds | None,
        end: float,
        topology: Topology | None,
    ) -> Option | None:
        """Cluster ``c``'s offer for the job, its nodes ``rows`` taking ``fits`` workers each; None: no room."""
        table = self.table
        first, waste = -1, None
        if job.workers == 1:
            taken = self.spread_rows.get(job.spread_group) if job.spread_group else None
            if taken:  # a node none of its group holds, where one has room (soft)
                apart = np.where(np.isin(rows, np.fromiter(taken, np.int64, len(taken))), 0, fits)
                fits = apart if (apart > 0).any() else fits
            frag = self.fragmentation if pack and state is table.free else None
            picked = pick_single(state, rows, fits, shape, frag, (table.flavor_index[flavor], c))
            if picked is None:
                return None
            pairs, first, waste = [(picked[0], 1)], picked[1], picked[2]
        else:
            spread_pairs = spread(table, rows, fits, table.clusters[c].levels, topology, job.workers)
            if spread_pairs is None:
                return None
            pairs = spread_pairs
        used = np.array([row for row, _ in pairs])
        counts = np.array([count for _, count in pairs])
        cost = float((table.price[used] * counts).sum()) * job.accel_per_worker / WHOLE
        head = -1
        if job.has_head:  # one more member of the gang, with its own shape
            head = self._head(job, state, rows, pairs, shape, first, closed, holds, end)
            if head < 0:
                return None
            cost += float(table.price[head]) * job.head[0]
            if job.max_price_per_hour is not None and cost > job.max_price_per_hour + 1e-9:
                return None
            used = np.append(used, head)
        capacity = int(table.accel_count[used].sum()) * WHOLE
        left = int(state.accel[used].sum()) - job.request()[0]
        fit = 1.0 - left / capacity if capacity else 1.0
        return (c, pairs, first, fit, cost, waste, head)

    def _head(
        self,
        job: Job,
        state: FreeState,
        rows: IntArray,
        pairs: list[tuple[int, int]],
        shape: Shape,
        first: int,
        closed: np.ndarray | None,
        holds: Holds | None,
        end: float,
    ) -> int:
        """The row for the job's head, its workers being on ``pairs`` (``head_row``), on nodes open to it as
        to the workers (maintenance, reservations); -1 if none has room."""
        head_shape = Shape(job.head[0], WHOLE, job.head[1], job.head[2])
        room = worker_fits(state, rows, head_shape)
        if closed is not None:
            room = np.where(closed, 0, room)
        if holds is not None:
            room = held_fits(holds, rows, head_shape, end, room)
            # Beside its own workers on a held node, the head has the slack they leave: both are checked
            # against a reservation's slack together, never each against all of it.
            for row, count in pairs:
                position = np.flatnonzero(rows == row)
                if len(position) and end > holds.start[row]:
                    left = (
                        int(holds.slack_accel[row]) - count * shape.accelerators * shape.milli,
                        int(holds.slack_cpu[row]) - count * shape.cpu,
                        int(holds.slack_memory[row]) - count * shape.memory,
                    )
                    needs = (head_shape.accelerators * WHOLE, head_shape.cpu, head_shape.memory)
                    if any(have < need for have, need in zip(left, needs, strict=True)):
                        room[position[0]] = 0
        return head_row(state, rows, room, pairs, shape, first, head_shape)

    def _windows(self, job: Job, state: FreeState, t: float) -> Maintenance | None:
        """The maintenance windows that may keep ``job`` off nodes if it starts at ``t`` (None: none do). A
        job does not start on nodes it would still run on when a window starts, unless it is preemptible
        and starts now (the drain before the window stops it gracefully); no reservation is planned across
        a window. An idle fleet (``table.empty``) has no windows: maintenance never makes a job impossible."""
        if not self.maintenance.by_cluster or state is self.table.empty or (job.preemptible and t <= self.now):
            return None
        return self.maintenance

    def _route(self, job: Job, flavor: str, state: FreeState, options: list[Option]) -> Option:
        """Pick a cluster among those that fit: hardware fit, availability, price, locality, preference."""
        config = self.config
        costs = [option[4] for option in options]
        low, high = min(costs), max(costs)
        # Where fragmentation was scored in every cluster, it is the measure of fit: the cluster whose best
        # node fragments least fits best (FGD across clusters as within one).
        wastes = [option[5] for option in options]
        scored = [w for w in wastes if w is not None]
        least, most = (min(scored), max(scored)) if len(scored) == len(wastes) else (0.0, 0.0)
        best: tuple[float, int, int, Option] | None = None
        for option in options:
            c, _, _, fit, cost, waste, _ = option
            if waste is not None and most > least:
                fit = (most - waste) / (most - least)
            cluster = self.table.clusters[c]
            reach = self._reach(job)
            capacity = self._group_capacity(flavor, c, reach)
            available = float(state.accel[self._rows(flavor, c, reach)].sum()) / capacity if capacity else 0.0
            cheap = 1.0 - (cost - low) / (high - low) if high > low else 1.0
            local = 1.0 if job.locality in (cluster.name, cluster.region) else 0.0
            score = (
                config.weight_fit * fit
                + config.weight_availability * available
                + config.weight_price * cheap
                + config.weight_locality * local
                + config.weight_preference * cluster.preference / 100
            )
            # equal scores: the cluster holding fewest of the job's spread group (none without a group)
            together = self.spread_clusters[job.spread_group].get(c, 0) if job.spread_group else 0
            if best is None or (-score, together, c) < best[:3]:
                best = (-score, together, c, option)
        assert best is not None
        return best[3]

    def _group_capacity(self, flavor: str, cluster: int, reach: tuple[str, str] = ("", "")) -> int:
        key = (self.table.flavor_index[flavor], cluster, reach)
        if key not in self._capacity:
            self._capacity[key] = int(self.table.accel_count[self._rows(flavor, cluster, reach)].sum()) * WHOLE
        return self._capacity[key]

    # ------------------------------------------------------------------------------------------ outcomes

    def _spread_add(self, group: str, assignments: tuple[Assignment, ...]) -> None:
        rows = [self.table.index[a.node] for a in assignments if a.node in self.table.index]
        self.spread_rows[group].update(rows)
        for c in {int(self.table.cluster[row]) for row in rows}:
            self.spread_clusters[group][c] += 1

    def _admit(self, job: Job, qi: int, request: tuple[int, int, int], placement: Placement, borrowing: bool) -> None:
        self.table.take(self.table.free, placement.assignments)
        if job.spread_group:
            self._spread_add(job.spread_group, placement.assignments)
        self.quota.charge(qi, placement.flavor, request)
        self.quota_changed(qi)
        self._admitted_usage.append((self.now + job.time_limit, qi, placement.flavor, request))
        if job.owner in self.member_limits:
            self.member_used[job.owner] += request[0]
            self.member_ends[job.owner].append((self.now + job.time_limit, request[0]))
        if job.budgets and self.ledger:
            self.ledger.charge(job, placement.cost_per_hour)
        backfilled = self.timeline.consume(placement.assignments, self.now + job.time_limit)
        self.admissions.append(
            Admission(
                job=job.id,
                cluster=self.table.clusters[placement.cluster].name,
                flavor=placement.flavor,
                assignments=placement.assignments,
                borrowing=borrowing,
                cost_per_hour=round(placement.cost_per_hour, 6),
                backfilled=backfilled,
            )
        )
        self.stats["admitted"] += 1

    def _earliest(self, job: Job, flavor: str, *, beyond: bool = False) -> float | None:
        """When the job could start on ``flavor``, within the backfill window (or, ``beyond``, after it, as
        running work reaches its time limits), or None."""
        return self.timeline.earliest(
            self.table.flavor_index[flavor],
            job.time_limit,
            lambda state, t: self.fits(job, flavor, state, t),
            beyond=beyond,
        )

    def _quota_frees(self, job: Job, flavor: str) -> float | None:
        """When enough of the running work on ``flavor`` (this cycle's admissions too) reaches its time limit
        for the job to fit its queue's quota, borrowing included; None if even all of it ending would not do.
        Usage is taken off a copy's worth of the tree and put back: nothing of the cycle changes."""
        qi, request = self.quota.index[job.queue], job.request()
        ends = [
            (w.expected_end, self.quota.index.get(w.queue), used)
            for w, used in zip(self.work.workloads, self.work.usage, strict=True)
            if w.flavor == flavor
        ]
        ends += [(end, queue, used) for end, queue, admitted, used in self._admitted_usage if admitted == flavor]
        saved = [row[:] for row in self.quota.usage]
        try:
            for end, queue, used in sorted(ends, key=lambda e: e[0]):
                if queue is None:
                    continue
                self.quota.charge(queue, flavor, [int(x) for x in used], sign=-1)
                if self.quota.classify(qi, flavor, request) is Mode.FIT:
                    return max(end, self.now)
            return None
        finally:
            for row, before in zip(self.quota.usage, saved, strict=True):
                row[:] = before

    def _reserve(self, job: Job, flavor: str) -> Reservation | None:
        start = self._earliest(job, flavor)
        if start is None:
            return None
        state = self.timeline.state_at(self.table.flavor_index[flavor], start, start + job.time_limit)
        placement = self.place(job, Shape.of(job), flavor, state, start, None, pack=False)
        assert placement is not None
        self.timeline.reserve(state, start, start + job.time_limit, placement.assignments)
        reservation = Reservation(
            job=job.id,
            cluster=self.table.clusters[placement.cluster].name,
            flavor=flavor,
            start=start,
            end=start + job.time_limit,
            assignments=placement.assignments,
        )
        self.reservations.append(reservation)
        return reservation

    def _pend(
        self,
        job: Job,
        reason: PendingReason,
        *,
        position: int | None = None,
        estimate: float | None = None,
        facts: Mapping[str, object] | None = None,
    ) -> None:
        self.pending.append(Pending(job.id, reason, explain.message(reason, job, facts or {}), estimate, position))

    # ------------------------------------------------------------------------------------------- reasons

    def _quota_limit(self, qi: int, flavor: str, request: tuple[int, int, int]) -> Verdict:
        for r, fr in self.quota.frs(flavor):
            limit = self.quota.potential(qi, fr)
            if request[r] > limit:
                if r == 0:
                    needed, most, unit = explain.accel_words(request[r]), explain.accel_words(limit), "accelerators"
                elif r == 1:
                    needed, most, unit = f"{request[r] / 1000:g}", f"{limit / 1000:g}", "CPUs"
                else:
                    needed, most, unit = f"{request[r] / 1024:g}", f"{limit / 1024:g}", "GiB of memory"
                facts = {"flavors": flavor, "needed": needed, "limit": most, "resource": unit}
                return Verdict(PendingReason.QUOTA_EXCEEDS_LIMIT, flavor, facts)
        return Verdict(PendingReason.QUOTA_EXCEEDS_LIMIT, flavor, {"flavors": flavor, "resource": RESOURCES[0]})

    def _why_no_room(self, job: Job, flavor: str) -> tuple[Verdict, Floor]:
        """Quota allows the job but no placement exists now: say why (busy, held for a reservation, or
        never), and the least a job of its kind must ask for to fail the same way (``Failures``)."""
        facts: dict[str, object] = {"flavors": flavor}
        free = self.table.free
        if self.maintenance.by_cluster and not job.preemptible:
            window = self.maintenance.first(self._allowed_clusters(job, flavor), self.now, self.now + job.time_limit)
            if window is not None and self.fits(
                replace(job, preemptible=True), flavor, free, self.now, self.timeline.holds
            ):
                facts.update(cluster=window.cluster, start=window.start)
                return Verdict(PendingReason.MAINTENANCE, flavor, facts), Failures.floor(job)
        if self.timeline.held and self.fits(job, flavor, free, self.now):
            return Verdict(PendingReason.BACKFILL_BLOCKED, flavor, facts), Failures.floor(job)
        # Not the reservations' doing, so the time limit does not matter; if the accelerators alone do not
        # fit, neither CPU, memory nor price matter either.
        bare = replace(job, cpu=0, memory=0, time_limit=1, max_price_per_hour=None, head=(job.head[0], 0, 0))
        anything: Floor = (0, 0, 1, INF)
        room = self.fits(bare, flavor, free, self.now)  # for the accelerators alone
        least = (job.cpu, job.memory, 1, Failures.price(job)) if room else anything
        if not self._ever_fits(bare, flavor):
            reason = PendingReason.TOPOLOGY if job.topology is not None else PendingReason.NEVER_FITS
            return Verdict(reason, flavor, facts), anything
        cpu, memory = self._largest_node(job, flavor)
        if max(job.cpu, job.head[1]) > cpu or max(job.memory, job.head[2]) > memory:
            return self._host_never_fits(job, flavor, cpu, memory), (job.cpu, job.memory, 1, least[3])
        priced = room and job.max_price_per_hour is not None
        if priced and not self.fits(replace(job, time_limit=1), flavor, self.table.empty, self.now):
            return Verdict(PendingReason.PRICE_LIMIT, flavor, facts), least
        return Verdict(PendingReason.CAPACITY, flavor, facts), least

    @staticmethod
    def _host_never_fits(job: Job, flavor: str, cpu: int, memory: int) -> Verdict:
        """No node of ``flavor`` has the memory (first) or CPU that a worker or the head asks for: which, and
        how much the largest node has, for the field the request got wrong."""
        if job.memory > memory or job.head[2] > memory:
            reason, worker = PendingReason.MEMORY_NEVER_FITS, job.memory > memory
            facts: dict[str, object] = {"largest": f"{memory / 1024:g}", "largest_raw": memory}
        else:
            reason, worker = PendingReason.CPU_NEVER_FITS, job.cpu > cpu
            facts = {"largest": f"{cpu / 1000:g}", "largest_raw": cpu}
        facts.update(flavors=flavor, who="per worker" if worker else "for its Ray head")
        return Verdict(reason, flavor, facts)

    def _ever_fits(self, bare: Job, flavor: str) -> bool:
        """Whether the job's accelerators fit the allowed part of the fleet with every node idle."""
        key = (
            flavor,
            bare.workers,
            bare.accelerators,
            bare.accel_milli,
            bare.head,
            bare.clusters,
            bare.regions,
            bare.topology,
            bare.needs,
            bare.excluded,
            bare.shape,
        )
        if key not in self._ever:
            empty = self.table.empty
            self._ever[key] = self.fits(bare, flavor, empty, self.now)
        return self._ever[key]

    def _largest_node(self, job: Job, flavor: str) -> tuple[int, int]:
        """The most CPU and memory any allowed node of the flavor has."""
        key = (flavor, job.clusters, job.regions, job.needs, job.excluded, self._reach(job))
        if key not in self._largest:
            rows = [self._rows(flavor, c, self._reach(job)) for c in self._allowed_clusters(job, flavor)]
            every = np.concatenate(rows) if rows else np.zeros(0, np.int64)
            empty = self.table.empty
            self._largest[key] = (int(empty.cpu[every].max()), int(empty.memory[every].max())) if len(every) else (0, 0)
        return self._largest[key]
