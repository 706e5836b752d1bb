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
6. Where a job may go and where it goes (allowed clusters, candidate nodes, offers, the routing score, spread
   groups) and why no placement exists now are the cycle's ``Router`` (``routing.py``); what the cycle
   remembers of failures is ``verdicts.py``; preemption (``preemption.py``) and the over-quota phase
   (``over_quota.py``) see the cycle through ``state.CycleState``.

Speed (``manage.py bench_engine``: 10,000 nodes, 50,000 pending jobs, under a second a cycle). The
snapshot's objects are read once into arrays (``nodes.py``, ``running.py``) and every later question is
numpy over them; the cache-hit path in ``run`` is the only per-job Python, and is kept short; a
(flavor, cluster)'s largest free node turns most failing placements away before any node is scanned
(``Router.may_fit``); what-if checks (``fits``) skip routing and assignments; the collector is kept off the
snapshot (``_snapshot_frozen``). ``tests/engine/test_fast_paths.py`` holds each shortcut to the slow way.
"""

from __future__ import annotations

import gc
from collections import defaultdict
from collections.abc import Iterator, Mapping
from contextlib import contextmanager

from . import elastic, explain
from .backfill import Timeline
from .budgets import Ledger
from .fairshare import memory_terms
from .fgd import Fragmentation, Shape, workload_mix
from .maintenance import Maintenance
from .model import (
    CPU,
    MEMORY,
    RESOURCES,
    Admission,
    Decisions,
    Job,
    Pending,
    PendingReason,
    Preemption,
    Queue,
    Reservation,
    Snapshot,
    Tier,
    Want,
)
from .nodes import NodeTable
from .ordering import in_order
from .over_quota import reclaim_over_quota
from .preemption import Preemptor
from .quota import Mode, QuotaTree
from .routing import Placement, Router
from .running import RunningWork
from .verdicts import CAPACITY_REASONS, INF, Failures, Floor, Verdict, all_flavors


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
        self.ledger = Ledger(snapshot.budgets, self.now)
        self.maintenance = Maintenance(self.table, (*snapshot.maintenance, *snapshot.bookings), self.now)
        self.timeline = Timeline(
            self.table,
            self.now,
            self.config.backfill_window,
            self.config.time_quantum,
            self.work,
            self.maintenance.ends,
        )
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
        self.router = Router(
            self.table, self.config, self.now, self.work, self.maintenance, self.timeline, self.fragmentation
        )
        self.preemptor = Preemptor(self)
        self._queue_flavors: dict[tuple[object, ...], list[str]] = {}
        self._failed: Failures[Verdict] = Failures()
        self._no_room: Failures[tuple[Verdict, Floor]] = Failures()
        self._share: dict[int, float] = {}
        #: Per tree node, what its recent use adds to its share (``fairshare.py``), fixed for the cycle.
        self.memory = memory_terms(self.quota, self.queues, snapshot.usage, self.config.usage_weight)
        #: Grows each time quota usage changes for good (``quota_changed``): what was derived from it is stale.
        self.quota_epoch = 0
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

    def queue_share(self, queue: int) -> float:
        share = self._share.get(queue)
        if share is None:
            weight = self.queues[self.quota.names[queue]].weight
            raw = self.quota.share(queue)
            share = raw / weight if weight > 0 else (float("inf") if raw > 0 else 0.0)
            share += self.memory[queue]
            self._share[queue] = share
        return share

    # --------------------------------------------------------------------------------------------- cycle

    def run(self) -> Decisions:
        """Give back quota lowered below usage, then consider every job in order. This loop runs once per
        pending job, tens of thousands of times a cycle, and nearly every time the failure cache already
        knows the verdict; so that case is kept inline and short."""
        reclaim_over_quota(self, self.preemptor)
        limit, attempts, considered = self.config.max_jobs_per_cycle, self.config.preemption_attempts, 0
        admit_limit, admissions = self.config.max_admissions_per_cycle, self.admissions
        limits, ledger, estimate_for = self.member_limits, self.ledger, self.config.estimate_for
        order, pending, failed, preemptor, make = self.order, self.pending, self._failed, self.preemptor, tuple.__new__
        for position, (job, tier, queue) in enumerate(in_order(self)):
            order.append(job.id)
            if position >= limit or len(admissions) >= admit_limit:
                self.pend(job, PendingReason.NOT_CONSIDERED, position=position)
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
                    self.pend(job, PendingReason.BUDGET, position=position, estimate=estimate, facts=over)
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
                self.router.reach(job),
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
                self.pend(job, PendingReason.BUDGET, position=position, facts=ledger.money_facts(job, capped_by))
            elif verdict.settled and job.id != estimate_for:  # (``tuple.__new__``: no Python-level __new__)
                made = (job.id, verdict.reason, verdict.message, verdict.estimate, position, verdict.refused)
                pending.append(make(Pending, made))
            else:
                self._reserve_or_pend(job, verdict, position)
        self.stats["considered"] = considered
        self.stats["cache_hits"] = considered - self.stats["tried"]
        wanted: tuple[Want, ...] = ()
        if self.snapshot.elastic:
            pending, wanted = elastic.demand(self, pending)
        return Decisions(
            admissions=tuple(self.admissions),
            preemptions=tuple(self.preemptions),
            reservations=tuple(self.reservations),
            pending=tuple(pending),
            order=tuple(order),
            stats=dict(self.stats),
            wanted=wanted,
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
        self.pend(job, PendingReason.MEMBER_LIMIT, position=position, estimate=start, facts=facts)
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
                    self.router.reach(job),
                )
                known = self._no_room.get(room_key, job)
                if known is None:
                    placement = self.router.place(job, shape, flavor, self.table.free, self.now, self.timeline.holds)
                    if placement is not None:
                        level = self.quota.borrowing_level(qi, flavor, request)
                        if best is None or level < best[0]:
                            best = (level, rank, placement)
                        if level == 0:
                            break
                        continue
                    known = self.router.why_no_room(job, flavor)
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
        facts = self.preemptor.held_back(job, first.facts if busy else all_flavors(first, verdicts))
        verdict = Verdict(first.reason, first.flavor, facts, reservable=busy[0].flavor if busy else None)
        return verdict, (int(floor[0]), int(floor[1]), int(floor[2]), floor[3])

    def _nowhere(self, job: Job, queue: Queue) -> Verdict:
        """Why a job with no flavor in any allowed cluster waits: the clusters that offer its flavors are
        ruled out (``NO_CLUSTER``, naming them), or none offers them (``NO_FLAVOR``)."""
        ruled_out = self.router.ruled_out(job, queue)
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
        if cached is None or cached[0] != self.quota_epoch:
            cached = self._modes[key] = (self.quota_epoch, self.quota.classify(qi, flavor, request))
        return cached[1]

    def quota_changed(self, qi: int) -> None:
        """Usage of queue ``qi`` changed for good: forget what was derived from it."""
        self.quota_epoch += 1
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
                    tier = self.tiers[job.tier]
                    if tier.overdue(job.submitted_at, self.snapshot.now):
                        facts["overdue"] = tier.max_wait  # it went first for it: say so
                    reason = PendingReason.RESERVED
                    if verdict.reason is PendingReason.MAINTENANCE:  # say why it waits, and until when
                        reason, facts = verdict.reason, {**verdict.facts, "reserved": reserved.start}
                    said = self.preemptor.held_back(job, facts)
                    self.pend(job, reason, position=position, estimate=reserved.start, facts=said)
                    return
                # No room within the backfill window: too far off to hold capacity for, but the running
                # jobs' time limits still say when it could start.
                start = self._earliest(job, flavor, beyond=True)
                facts = {**verdict.facts, "free_at": start, "unbounded": start is None}
                self.pend(job, verdict.reason, position=position, estimate=start, facts=facts)
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
                f
                for f in queue.flavors
                if (not job.flavors or f in job.flavors) and self.router.allowed_clusters(job, f)
            ]
        return flavors

    # ------------------------------------------------------------------------------------------ outcomes

    def _admit(self, job: Job, qi: int, request: tuple[int, int, int], placement: Placement, borrowing: bool) -> None:
        self.table.take(self.table.free, placement.assignments)
        if job.spread_group:
            self.router.spread_add(job.spread_group, placement.assignments)
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
            lambda state, t: self.router.fits(job, flavor, state, t),
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
        placement = self.router.place(job, Shape.of(job), flavor, state, start, None, pack=False)
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

    def pend(
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
