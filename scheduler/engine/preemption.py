"""Choosing victims so that a pending job can start (docs/scheduling.md §Tiers and preemption).

Candidates, per the preemptor's queue policy:
- its own queue's running jobs that ``within_queue`` allows (lower priority; or also equal priority
  submitted later) — reason *priority*;
- other queues' jobs in the same cohort tree, only while that queue is over its nominal quota of the
  flavor (it is borrowing) — reason *reclaim* (classical: lower priority only, or any priority), or
  *fair sharing*, where a victim is taken only if the preemptor's queue, with the job, would still have
  no larger a share than the victim's queue without the victim (Kueue's LessThanOrEqualToFinalShare),
  each share with its queue's memory of recent use (``fairshare.py``).
- other teams' work on nodes the job's team booked (``Booking``), once the booking begins — reason *booked*,
  whatever their queue, tier or share: the nodes were only lent to them.
Never: non-preemptible tiers or jobs, jobs already chosen this cycle, other cohort trees (but for bookings).

Order (cheapest first): work already stopping; other queues before one's own; lower priority; *least
work lost* — time since the last checkpoint, or since the start if none — which is where we go beyond
Kueue (it uses "most recently admitted" as a proxy); newest; id.

Greedy then fill back: remove candidates in order until the job fits quota *and* nodes, then try putting
each victim back, from the second-to-last to the first; the set left is minimal (no victim can be spared).
Victims keep running through their grace period, so the preemptor waits; it is never admitted in the
cycle that preempts for it. The victims of the cycle's first phase, which gives back quota lowered below
usage (``over_quota.py``), are registered here as well (``victims``, ``leaving``).
"""

from __future__ import annotations

import weakref
from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass, field
from itertools import islice
from typing import TYPE_CHECKING, cast

import numpy as np

from . import explain
from .fgd import Shape
from .model import (
    Assignment,
    Job,
    PendingReason,
    Preemption,
    PreemptionReason,
    Queue,
    Reclaim,
    Tier,
    WithinQueue,
    Workload,
)
from .nodes import BoolArray, FloatArray, FreeState, IntArray
from .quota import Mode
from .running import Policy, RunningWork

if TYPE_CHECKING:
    from .routing import Placement
    from .state import CycleState


@dataclass(frozen=True, slots=True, eq=False)  # compared by identity
class Running:
    workload: Workload
    index: int  # in ``RunningWork``
    queue: int  # quota tree index, -1 for an unknown queue (never a candidate)
    priority: int
    grace: int
    usage: tuple[int, int, int]


@dataclass(slots=True)
class _Work:
    """A flavor's preemptible running work, cheapest to stop first, with its attributes as arrays (in the
    same order) so that a preemptor's candidates are chosen by masks."""

    work: RunningWork
    index: IntArray  # into ``work.workloads``
    queue: IntArray  # quota tree index, -1 for an unknown queue
    root: IntArray
    priority: IntArray
    grace: IntArray
    staying: BoolArray  # not already evicting
    cluster: IntArray
    submitted: FloatArray
    end: FloatArray
    admitted: FloatArray
    made: dict[int, Running] = field(default_factory=dict)

    def running(self, i: int) -> Running:
        """The record of entry ``i``, made once (a search reads only a few thousand entries)."""
        found = self.made.get(i)
        if found is None:
            k = int(self.index[i])
            found = self.made[i] = Running(
                self.work.workloads[k],
                k,
                int(self.queue[i]),
                int(self.priority[i]),
                int(self.grace[i]),
                self.work.usage[k],
            )
        return found


class Preemptor:
    def __init__(self, cycle: CycleState) -> None:
        # A weak reference: the cycle owns its preemptor, and a cycle of references would leave the whole
        # cycle's state to the garbage collector instead of freeing it when ``schedule`` returns.
        self.cycle: CycleState = cast("CycleState", weakref.proxy(cycle))
        self.victims: set[str] = set()
        self.attempts = 0
        self._candidate_lists: dict[tuple[object, ...], list[int]] = {}  # positions in ``_Work``
        self._sorted: dict[str, _Work] = {}
        self._policy: Policy | None = None
        #: Per (queue, flavor): what this cycle's preemptors asked, what their own-queue victims free, and
        #: the quota held for them meanwhile (see ``_hold``).
        self._holds: defaultdict[tuple[int, str], tuple[list[int], list[int], list[int]]] = defaultdict(
            lambda: ([0, 0, 0], [0, 0, 0], [0, 0, 0])
        )
        #: Victims chosen this cycle: they still run (and count) until their grace period ends.
        self.leaving: list[Running] = []
        #: Per capped tier, accelerator-seconds of its work this cycle's preemptions for jobs may still lose, and
        #: the last job for which a cap held preempting back (its reason says so).
        self.disruption_left = dict(cycle.snapshot.disruption_left)
        self.capped = ""
        #: Per (team, flavor): which preemptible work runs on nodes booked for the team (``_booked``); and per
        #: team, the ids of all such work found: the team's to take back, whatever its queue's quota or share.
        self._booked_work: dict[tuple[str, str], BoolArray | None] = {}
        self.booked: defaultdict[str, set[str]] = defaultdict(set)

    def held_back(self, job: Job, facts: Mapping[str, object]) -> Mapping[str, object]:
        """``facts`` of why ``job`` waits, saying so when a cap on disruption held its preemptions back."""
        return {**facts, "disruption_capped": True} if self.capped == job.id else facts

    def policy(self) -> Policy:
        """The running work's queues, tiers and times as arrays, read once per cycle (``RunningWork.policy``)."""
        if self._policy is None:
            cycle = self.cycle
            self._policy = cycle.work.policy(cycle.tiers, cycle.quota.index, cycle.now)
        return self._policy

    def _candidates(self, job: Job, tier: Tier, queue: Queue, qi: int, flavor: str) -> list[Running]:
        """Workloads the policy lets ``job`` preempt, cheapest first (cached for identical preemptors)."""
        newer_matters = queue.within_queue is WithinQueue.LOWER_OR_NEWER_EQUAL_PRIORITY
        key = (
            qi,
            tier.priority,
            flavor,
            job.clusters,
            job.regions,
            job.needs,
            job.excluded,
            job.submitted_at if newer_matters else None,
            job.time_limit if self.cycle.config.srpt else None,
            job.submitted_at if self.cycle.config.srpt else None,
        )
        cached = self._candidate_lists.get(key)
        if cached is None:
            cached = self._candidate_lists[key] = self._find_candidates(job, tier, queue, qi, flavor).tolist()
        # The cheapest few are plenty: a job needing more than max_victims victims waits anyway.
        limit = 8 * self.cycle.config.max_victims
        work = self._by_cost(flavor)
        every = (work.running(i) for i in cached)
        return list(islice((r for r in every if r.workload.id not in self.victims), limit))

    def _by_cost(self, flavor: str) -> _Work:
        """A flavor's preemptible running work by cost of preemption: already stopping, lower priority,
        least work lost since the last checkpoint (or the start), newest, id. Sorted once per cycle."""
        found = self._sorted.get(flavor)
        if found is None:
            cycle = self.cycle
            p = self.policy()
            index = np.asarray(cycle.running.get(flavor, []), np.int64)  # in id order, the last tie-break
            index = index[p.preemptible[index]]
            lost = cycle.now - np.maximum(p.admitted[index], p.saved[index])
            index = index[np.lexsort((index, -p.admitted[index], lost, p.priority[index], p.staying[index]))]
            queue = p.queue[index]
            roots = np.array([cycle.quota.root(q) if q >= 0 else -1 for q in range(len(cycle.quota.names))] + [-1])
            found = self._sorted[flavor] = _Work(
                cycle.work,
                index,
                queue,
                roots[queue],  # (-1 picks the last entry, -1)
                p.priority[index],
                p.grace[index],
                p.staying[index],
                p.cluster[index],
                p.submitted[index],
                cycle.work.end[index],
                p.admitted[index],
            )
        return found

    def _find_candidates(self, job: Job, tier: Tier, queue: Queue, qi: int, flavor: str) -> IntArray:
        """Positions in the flavor's ``_Work`` of what the policy lets ``job`` preempt, in the order to try."""
        cycle = self.cycle
        work = self._by_cost(flavor)
        enough = 16 * cycle.config.max_victims  # _candidates keeps half of these after dropping victims
        mine = np.isin(work.cluster, cycle.router.allowed_clusters(job, flavor)) & (work.queue >= 0)
        own = mine & (work.queue == qi)
        if queue.within_queue is WithinQueue.NEVER:
            own[:] = False
        else:
            lower = work.priority < tier.priority
            if queue.within_queue is WithinQueue.LOWER_OR_NEWER_EQUAL_PRIORITY:
                lower |= (work.priority == tier.priority) & (work.submitted > job.submitted_at)
            if cycle.config.srpt:  # shortest remaining time first (model.Config.srpt)
                left, aging = work.end - cycle.now, cycle.config.short_first
                longer = left > cycle.config.srpt * job.time_limit
                # only work that the aging orders after the job, its time left standing for its limit
                longer &= work.submitted + aging * left > job.submitted_at + aging * job.time_limit
                if tier.max_wait > 0:  # never work that started past its bound
                    longer &= work.admitted - work.submitted < tier.max_wait
                lower |= (work.priority == tier.priority) & longer
            own &= lower
        # Other teams' work on nodes booked for the job's team, once the booking begins: whatever its queue.
        booked = self._booked(job.team, flavor)
        on_booked = mine & booked if booked is not None else np.zeros(len(work.index), np.bool_)
        own &= ~on_booked
        # Whether another queue is still over nominal is checked when its work is chosen.
        others = mine & ~on_booked & (work.queue != qi) & (work.root == cycle.quota.root(qi))
        if queue.reclaim is Reclaim.NEVER:
            others[:] = False
        elif queue.reclaim is Reclaim.LOWER_PRIORITY:
            others &= work.priority < tier.priority
        chosen_others = np.flatnonzero(others)
        if queue.reclaim is Reclaim.FAIR_SHARING:  # among equals, the queue with the largest share first
            share = {q: cycle.queue_share(q) for q in np.unique(work.queue[chosen_others]).tolist()}
            shares = np.array([share[q] for q in work.queue[chosen_others].tolist()], np.float64)
            chosen_others = chosen_others[
                np.lexsort((chosen_others, -shares, work.priority[chosen_others], work.staying[chosen_others]))
            ]
        # Work already stopping costs nothing; then work on the team's booked nodes, other queues' borrowed
        # work, and one's own last.
        parts = [np.flatnonzero(on_booked)[:enough], chosen_others[:enough], np.flatnonzero(own)[:enough]]
        chosen = np.concatenate(parts)
        group = np.repeat(np.arange(3), [len(part) for part in parts])
        return chosen[np.lexsort((np.arange(len(chosen)), group, work.staying[chosen]))]

    def _booked(self, team: str, flavor: str) -> BoolArray | None:
        """Which of the flavor's preemptible work (``_Work`` order) is another team's, on nodes booked for
        ``team`` whose booking will have begun when that work has stopped (its grace); None when ``team``
        has no booking. Once per team and flavor a cycle."""
        key = (team, flavor)
        if key in self._booked_work:
            return self._booked_work[key]
        cycle = self.cycle
        bookings = [b for b in cycle.snapshot.bookings if team and b.team == team and b.end > cycle.now]
        found: BoolArray | None = None
        if bookings:
            work = self._by_cost(flavor)
            nodes = [(b, frozenset(b.nodes)) for b in bookings]
            found = np.zeros(len(work.index), np.bool_)
            for i, k in enumerate(work.index.tolist()):
                w = work.work.workloads[k]
                if w.team == team:
                    continue
                begun_by = cycle.now + int(work.grace[i])
                found[i] = any(
                    b.cluster == w.cluster
                    and b.start <= begun_by
                    and (not held or any(a.node in held for a in w.assignments))
                    for b, held in nodes
                )
            self.booked[team].update(work.work.workloads[k].id for k in work.index[found].tolist())
        self._booked_work[key] = found
        return found

    def try_preempt(
        self,
        job: Job,
        tier: Tier,
        queue: Queue,
        qi: int,
        shape: Shape,
        request: tuple[int, int, int],
        flavor: str,
        position: int,
    ) -> bool:
        """Issue the preemptions that let ``job`` start on ``flavor``; True if it now only waits for them."""
        cycle = self.cycle
        if self.attempts >= cycle.config.preemption_attempts:
            return False
        candidates = self._candidates(job, tier, queue, qi, flavor)
        if not candidates:
            return False
        self.attempts += 1
        # Search in the cohort as it will be once this cycle's earlier preemptions have finished: their
        # victims gone, their preemptors holding what they need (``_hold``).
        quota = cycle.quota
        for r in self.leaving:
            quota.charge(r.queue, r.workload.flavor, r.usage, -1)
        try:
            found = self._search(job, queue, qi, shape, request, flavor, candidates)
        finally:
            for r in self.leaving:
                quota.charge(r.queue, r.workload.flavor, r.usage)
        if found is None:
            return False
        needed, placement = found
        if self.disruption_left:
            lost: defaultdict[str, float] = defaultdict(float)
            for r in needed:
                if not r.workload.evicting:
                    lost[r.workload.tier] += explain.lost_work(r.workload, r.usage[0], cycle.now)
            left = self.disruption_left
            if any(amount > left[name] for name, amount in lost.items() if name in left):
                self.capped = job.id
                return False
            for name, amount in lost.items():
                if name in left:
                    left[name] -= amount
        self._hold(qi, flavor, request, needed, placement)
        if job.budgets and cycle.ledger:
            cycle.ledger.charge(job, placement.cost_per_hour)
        self._issue(job, tier, queue, qi, flavor, needed, position)
        return True

    def _search(  # noqa: C901
        self,
        job: Job,
        queue: Queue,
        qi: int,
        shape: Shape,
        request: tuple[int, int, int],
        flavor: str,
        candidates: list[Running],
    ) -> tuple[list[Running], Placement] | None:
        """A minimal set of victims after which ``job`` fits quota and nodes, and the placement it gets."""
        cycle = self.cycle

        def quota_fits() -> bool:
            return cycle.quota.classify(qi, flavor, request) is Mode.FIT

        # Fail fast: if stopping every candidate would not be enough, stopping some will not be either.
        # Done in bulk: quota per queue (removals add up exactly), node resources with one bincount.
        totals: defaultdict[int, list[int]] = defaultdict(lambda: [0, 0, 0])
        for r in candidates:
            for i, amount in enumerate(r.usage):
                totals[r.queue][i] += amount
        for q, amounts in totals.items():
            cycle.quota.charge(q, flavor, amounts, -1)
        enough = quota_fits()
        for q, amounts in totals.items():
            cycle.quota.charge(q, flavor, amounts)
        if not enough:
            return None
        everyone = cycle.work.stopped(cycle.table.free, [r.index for r in candidates])
        target = cycle.router.place(job, shape, flavor, everyone, cycle.now, cycle.timeline.holds, pack=False)
        if target is None:
            return None
        # Victims are stopped in a scratch copy of the free state, so that the cycle's own state and its
        # packing caches never see a what-if.
        work = cycle.table.free.copy()

        def placement() -> Placement | None:
            return cycle.router.place(job, shape, flavor, work, cycle.now, cycle.timeline.holds, pack=False)

        def greedy(order: list[Running]) -> tuple[list[Running], Placement | None]:
            """Stop candidates in ``order`` until the job fits. Quota is cheap to check after every step;
            placement only when the number stopped has doubled since the last try (the fill back below
            gives back any victim the overshoot took)."""
            chosen: list[Running] = []
            next_check = 1
            spared: set[int] = set()  # queues back within nominal stay so: stopping only lowers usage
            booked = self.booked.get(job.team, ())
            for r in order:
                if r.workload.id in booked:
                    pass  # on the nodes the job's team booked: theirs to take back, whatever the quota
                elif r.queue in spared:
                    continue
                elif r.queue != qi:
                    if not cycle.quota.over_nominal(r.queue, flavor):
                        spared.add(r.queue)
                        continue
                    if queue.reclaim is Reclaim.FAIR_SHARING and not self._fair_to_take(r, queue, qi, flavor, request):
                        continue
                self._stop(r, flavor, work)
                chosen.append(r)
                if len(chosen) > 2 * cycle.config.max_victims:
                    break  # the fill back rarely halves a set; give up rather than disrupt that much
                if len(chosen) >= next_check and quota_fits():
                    next_check = 2 * len(chosen)
                    if (found := placement()) is not None:
                        return chosen, found
            found = placement() if chosen and quota_fits() else None
            if found is None:
                for r in chosen:
                    self._restart(r, flavor, work)
            return chosen, found

        # Cheapest first. When that scatters victims over many nodes without freeing one, try again with
        # the candidates on the nodes of the all-stopped placement first (kube-scheduler, too, picks a node
        # and then its victims).
        chosen, found = greedy(candidates)
        if found is None:
            target_nodes = {a.node for a in target.assignments}
            on_target = [r for r in candidates if any(a.node in target_nodes for a in r.workload.assignments)]
            chosen, found = greedy(on_target + [r for r in candidates if r not in on_target])
        if found is None:
            return None
        # Fill back, last chosen first: give back every victim the job can do without. A victim with nothing
        # on the nodes of the placement found only matters to quota, so that is all we need to re-check.
        needed: list[Running] = []
        for r in reversed(chosen):
            self._restart(r, flavor, work)
            if quota_fits():
                nodes = {a.node for a in found.assignments}
                if all(a.node not in nodes for a in r.workload.assignments):
                    continue
                again = placement()
                if again is not None:
                    found = again
                    continue
            self._stop(r, flavor, work)
            needed.append(r)
        needed.reverse()
        for r in needed:
            self._restart(r, flavor, work)  # they run on through their grace period
        if len(needed) > cycle.config.max_victims:
            return None
        return needed, found

    def _hold(
        self, qi: int, flavor: str, request: tuple[int, int, int], victims: list[Running], placement: Placement
    ) -> None:
        """Keep what a waiting preemptor counts on from being taken by later jobs of this cycle: its quota,
        and the free part of its placement (the rest is its victims', which run on for their grace)."""
        cycle, table = self.cycle, self.cycle.table
        # Victims of a queue's own work still count there until they stop: per queue and flavor, hold only
        # what this cycle's preemptors ask beyond what their own-queue victims give back.
        asked, freed, held = self._holds[(qi, flavor)]
        for i in range(3):
            asked[i] += request[i]
            freed[i] += sum(r.usage[i] for r in victims if r.queue == qi)
        now_held = [max(0, a - f) for a, f in zip(asked, freed, strict=True)]
        more = [n - h for n, h in zip(now_held, held, strict=True)]
        cycle.quota.charge(qi, flavor, [max(0, m) for m in more])
        cycle.quota.charge(qi, flavor, [max(0, -m) for m in more], -1)
        held[:] = now_held
        cycle.quota_changed(qi)
        from_victims: defaultdict[tuple[str, int], int] = defaultdict(int)
        for r in victims:
            for a in r.workload.assignments:
                for slot, milli in a.accels:
                    from_victims[(a.node, slot)] += milli
                from_victims[(a.node, -1)] += a.cpu
                from_victims[(a.node, -2)] += a.memory
        free_part = []
        for a in placement.assignments:
            accels: dict[int, int] = {}
            for slot, milli in a.accels:
                accels[slot] = accels.get(slot, 0) + milli
            net = tuple(
                (slot, milli - from_victims[(a.node, slot)])
                for slot, milli in sorted(accels.items())
                if milli > from_victims[(a.node, slot)]
            )
            cpu = max(0, a.cpu - from_victims[(a.node, -1)])
            memory = max(0, a.memory - from_victims[(a.node, -2)])
            free_part.append(Assignment(a.node, a.workers, net, cpu, memory))
        table.take(table.free, free_part)
        self.leaving.extend(r for r in victims if not r.workload.evicting)

    def _fair_to_take(self, r: Running, queue: Queue, qi: int, flavor: str, request: tuple[int, int, int]) -> bool:
        """Kueue's rule: take ``r`` only if our share with the job stays at most theirs without ``r`` (each
        share with its queue's memory term, ``fairshare.py``)."""
        quota, memory = self.cycle.quota, self.cycle.memory
        mine = quota.share(qi, flavor, request) / (queue.weight or 1e-9) + memory[qi]
        quota.charge(r.queue, flavor, r.usage, -1)
        victim_queue = self.cycle.queues[quota.names[r.queue]]
        theirs = quota.share(r.queue) / (victim_queue.weight or 1e-9) + memory[r.queue]
        quota.charge(r.queue, flavor, r.usage)
        return mine <= theirs

    def _stop(self, r: Running, flavor: str, work: FreeState) -> None:
        self.cycle.quota.charge(r.queue, flavor, r.usage, -1)
        self.cycle.table.take(work, r.workload.assignments, +1)

    def _restart(self, r: Running, flavor: str, work: FreeState) -> None:
        self.cycle.quota.charge(r.queue, flavor, r.usage)
        self.cycle.table.take(work, r.workload.assignments, -1)

    def _issue(
        self, job: Job, tier: Tier, queue: Queue, qi: int, flavor: str, chosen: list[Running], position: int
    ) -> None:
        cycle = self.cycle
        fresh = [r for r in chosen if not r.workload.evicting]
        booked = self.booked.get(job.team, ())
        for r in fresh:
            w = r.workload
            self.victims.add(w.id)
            if w.id in booked:
                reason = PreemptionReason.BOOKED
                why = f"it ran on capacity team {job.team} reserved ahead, lent while unused, and job {job.id} needs it"
            elif r.queue == qi:
                reason = PreemptionReason.PRIORITY
                why = f"job {job.id} of the same queue has a higher priority tier ({tier.name})"
            elif queue.reclaim is Reclaim.FAIR_SHARING:
                reason = PreemptionReason.FAIR_SHARING
                why = f"queue {w.queue!r} was using more than its fair share, and queue {queue.name!r} needs it back"
            else:
                reason = PreemptionReason.RECLAIM
                why = f"queue {w.queue!r} was borrowing quota that queue {queue.name!r} now needs"
            lost = explain.lost_work(w, r.usage[0], cycle.now)
            cycle.preemptions.append(Preemption(w.id, job.id, reason, explain.preempted(why, w, lost), r.grace, lost))
        cycle.stats["preempted"] += len(fresh)
        # With no victims of its own, the job waits for this cycle's earlier victims in its cohort tree (the
        # search counted them gone; their nodes stay taken, so it is their quota that it waits for).
        root, tree = cycle.quota.root(qi), cycle.quota.root
        waited = chosen or [r for r in self.leaving if r.workload.flavor == flavor and tree(r.queue) == root]
        start = cycle.now + max((r.grace for r in waited), default=0)
        cycle.pend(
            job, PendingReason.WAITING_FOR_PREEMPTION, position=position, estimate=start, facts={"victims": len(waited)}
        )
