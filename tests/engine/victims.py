"""The preemption rules of the invariant checker (docs/scheduling.md §Tiers and preemption, §Guarantees).

Checked as the replay reaches each preemptor: every victim passes its queue's policy, cross-queue victims
come only from queues over their nominal quota, nobody is a victim twice. Checked at the end of the cycle:
each preemptor fits once the victims are gone, so nothing admitted after it took the room it made.
"""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import replace
from typing import TYPE_CHECKING, NoReturn

from scheduler.engine.model import (
    RESOURCES,
    WHOLE,
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
from tests.engine.quota_tree import Key, TreeNode, describe, queue_node, usage_by_key

if TYPE_CHECKING:
    from tests.engine.invariants import Replay

CROSS_QUEUE_REASONS = (PreemptionReason.RECLAIM, PreemptionReason.FAIR_SHARING)
#: Workers a node could take when the job asks for nothing the node counts.
UNBOUNDED = 1 << 40


def _fail(message: str) -> NoReturn:
    raise AssertionError(message)


def preempt(r: Replay, where: str, job: Job, preemptions: list[Preemption]) -> None:
    """Check and apply one preemptor's preemptions."""
    what = f"{where}: preemption"
    queue = r.queues.get(job.queue)
    job_tier = r.tiers.get(job.tier)
    if queue is None or job_tier is None:
        _fail(f"{what}: the preemptor's queue {job.queue!r} or tier {job.tier!r} does not exist")
    if job.id in r.admissions or r.pending_reasons.get(job.id) != PendingReason.WAITING_FOR_PREEMPTION:
        # Victims run on through their grace period: a preemptor admitted in the same cycle did not need them.
        state = r.pending_reasons.get(job.id, "admitted")
        _fail(f"{what}: the preemptor is {state}, not waiting for its victims")
    cross_queue: dict[tuple[str, str], list[Workload]] = defaultdict(list)
    # Stopped together: when the engine weighs one victim, it may already have stopped the others.
    together = [r.running[p.workload] for p in preemptions if p.workload in r.running]
    for p in preemptions:
        victim = _check_victim(r, f"{what} of {p.workload!r}", job, queue, job_tier, p, together)
        if victim.queue != job.queue:
            cross_queue[(victim.queue, victim.flavor)].append(victim)
    for (victim_queue, flavor), victims in sorted(cross_queue.items()):
        _check_over_nominal(r, what, victim_queue, flavor, victims)
    flavors = {r.running[p.workload].flavor for p in preemptions}
    request = (job.workers * job.accel_per_worker, job.workers * job.cpu, job.workers * job.memory)
    r.waiting.append((job.queue, flavors, request))
    for p in preemptions:
        r.preempted[p.workload] = p
        victim = r.running[p.workload]
        # It frees its nodes by the end of its grace period at the latest.
        until = min(r.snapshot.now + p.grace_seconds, victim.expected_end)
        for node_name in {a.node for a in victim.assignments}:
            hold = r.holds[node_name][f"workload {victim.id}"]
            r.holds[node_name][f"workload {victim.id}"] = replace(hold, until=until)


def _check_victim(  # noqa: C901
    r: Replay, what: str, job: Job, queue: Queue, job_tier: Tier, p: Preemption, together: list[Workload]
) -> Workload:
    victim = r.running.get(p.workload)
    if victim is None:
        _fail(f"{what}: no such running workload")
    if p.workload in r.preempted:
        _fail(f"{what}: already preempted this cycle by {r.preempted[p.workload].preemptor!r}")
    if victim.evicting:
        _fail(f"{what}: the workload is already evicting")
    if p.grace_seconds < 0:
        _fail(f"{what}: negative grace period {p.grace_seconds}")
    tier = r.tiers.get(victim.tier)
    if tier is None or not tier.preemptible:
        _fail(f"{what}: the victim's tier {victim.tier!r} is not preemptible")
    if not victim.preemptible:
        _fail(f"{what}: the victim is not preemptible")
    # A victim must free something the preemptor can use.
    reason = r.job_allows(job, queue, victim.cluster, victim.flavor)
    if reason is not None:
        _fail(f"{what}: the victim cannot make room for the preemptor: {reason}")
    lower = tier.priority < job_tier.priority
    if victim.queue == job.queue:
        if p.reason != PreemptionReason.PRIORITY:
            _fail(f"{what}: a victim of the preemptor's own queue with reason {p.reason}, not priority")
        newer_equal = tier.priority == job_tier.priority and victim.submitted_at > job.submitted_at
        allowed = {
            WithinQueue.NEVER: False,
            WithinQueue.LOWER_PRIORITY: lower,
            WithinQueue.LOWER_OR_NEWER_EQUAL_PRIORITY: lower or newer_equal,
        }[queue.within_queue]
        if not allowed:
            _fail(
                f"{what}: queue {queue.name!r} within_queue={queue.within_queue} forbids a victim of tier "
                f"{tier.name!r} (priority {tier.priority}, submitted {victim.submitted_at}) for a job of tier "
                f"{job_tier.name!r} (priority {job_tier.priority}, submitted {job.submitted_at})"
            )
        return victim
    if p.reason not in CROSS_QUEUE_REASONS:
        _fail(f"{what}: a victim of another queue ({victim.queue!r}) with reason {p.reason}")
    if victim.queue not in r.queues or r.quota.root(victim.queue) != r.quota.root(job.queue):
        _fail(f"{what}: victim queue {victim.queue!r} is not in the cohort tree of {job.queue!r}")
    if queue.reclaim == Reclaim.NEVER:
        _fail(f"{what}: queue {queue.name!r} has reclaim=never, yet takes a workload of {victim.queue!r}")
    if queue.reclaim == Reclaim.LOWER_PRIORITY and not lower:
        _fail(
            f"{what}: reclaim=lower_priority, the victim's tier {tier.name!r} ({tier.priority}) is not lower "
            f"than {job_tier.name!r} ({job_tier.priority})"
        )
    if p.reason == PreemptionReason.FAIR_SHARING:
        _check_fair_share(r, what, job, queue, victim, together)
    return victim


def _check_fair_share(r: Replay, what: str, job: Job, queue: Queue, victim: Workload, together: list[Workload]) -> None:
    """Fair-sharing preemption: take z only if DRS(preemptor's side with the job) <= DRS(z's side without z).

    Checked where the two queues are siblings, so that each side is the queue itself whichever way one reads
    "side" (Kueue compares the children of the lowest common cohort). Generous on both sides: the preemptor's
    queue counts this cycle's victims (this preemptor's included) and evicting workloads of its own as gone;
    the victim's queue loses only ``z`` and gains what its waiting preemptors will use.
    """
    parent = r.quota.parent[queue_node(job.queue)]
    if parent is None or r.quota.parent[queue_node(victim.queue)] != parent:
        return
    mine: dict[Key, int] = defaultdict(int)
    gone = [r.running[w] for w in r.preempted] + [w for w in r.snapshot.running if w.evicting] + together
    for w in gone:
        if w.queue == job.queue:
            for key, amount in usage_by_key(w.flavor, w.assignments).items():
                mine[key] -= amount
    request = (job.workers * job.accel_per_worker, job.workers * job.cpu, job.workers * job.memory)
    for res, amount in zip(RESOURCES, request, strict=True):
        mine[(victim.flavor, res)] += amount
    theirs: dict[Key, int] = defaultdict(int)
    for key, amount in usage_by_key(victim.flavor, victim.assignments).items():
        theirs[key] -= amount
    for waiting_queue, flavors, waiting_request in r.waiting:
        if waiting_queue == victim.queue:
            for flavor in flavors:
                for res, amount in zip(RESOURCES, waiting_request, strict=True):
                    theirs[(flavor, res)] += amount
    my_share = _share(r, job.queue, mine) / (queue.weight or 1e-9) + _memory(r, job.queue)
    their_share = _share(r, victim.queue, theirs) / (r.queues[victim.queue].weight or 1e-9) + _memory(r, victim.queue)
    if my_share > their_share + 1e-9 * max(1.0, abs(their_share)):
        _fail(
            f"{what}: fair sharing: queue {job.queue!r} with the job has share {my_share:.1f}, more than queue "
            f"{victim.queue!r} without {victim.id!r} ({their_share:.1f})"
        )


def _memory(r: Replay, queue: str) -> float:
    """What the queue's recent use adds to its share (docs/scheduling.md §Memory: recent use counts), worked out
    here from the snapshot alone: along the queue's path, each node's 1000 x (its part of its siblings' recent
    use - its fair part: weight x nominal accelerators of the offered flavors, or weight alone where no sibling
    has any), times the weight of recent use."""
    snapshot = r.snapshot
    used = {name: max(0.0, amount) for name, amount in snapshot.usage.items() if name in r.queues}
    if snapshot.config.usage_weight <= 0 or not any(used.values()):
        return 0.0
    offered = {n.flavor for n in snapshot.nodes}
    accel = [key for key in r.quota.covered if key[1] == "accelerator" and key[0] in offered]

    def recent(node: TreeNode) -> float:
        if node[0] == "queue":
            return used.get(node[1], 0.0)
        return sum(recent(child) for child in r.quota.children[node])

    def claim(node: TreeNode, by_quota: bool) -> float:
        weight = r.queues[node[1]].weight if node[0] == "queue" else 1.0
        return max(0.0, weight) * (sum(r.quota.subtree_quota(node, key) for key in accel) if by_quota else 1)

    term = 0.0
    for node in r.quota.path(queue):
        parent = r.quota.parent.get(node)
        siblings = (
            r.quota.children[parent] if parent is not None else [n for n, p in r.quota.parent.items() if p is None]
        )
        total = sum(recent(n) for n in siblings)
        if total <= 0:
            continue
        by_quota = any(sum(r.quota.subtree_quota(n, key) for key in accel) > 0 for n in siblings)
        claims = sum(claim(n, by_quota) for n in siblings)
        fair = claim(node, by_quota) / claims if claims > 0 else 0.0
        term += 1000.0 * (recent(node) / total - fair)
    return snapshot.config.usage_weight * term


def _share(r: Replay, queue: str, delta: dict[Key, int]) -> float:
    """Dominant resource share (§Fair sharing) of a queue whose usage changes by ``delta``: the largest, over resources,
    of 1000 x what it borrows (beyond its subtree quota, summed over flavors) / what its parent could lend."""
    node = queue_node(queue)
    parent = r.quota.parent[node]
    assert parent is not None
    offered = {n.flavor for n in r.snapshot.nodes}
    borrowed = dict.fromkeys(RESOURCES, 0)
    lendable = dict.fromkeys(RESOURCES, 0)
    for key in sorted(r.quota.covered):
        if key[0] not in offered:
            continue  # quota for a flavor no node has: nothing can use or lend it
        usage = r.quota.queue_usage[(queue, key)] + delta.get(key, 0)
        borrowed[key[1]] += max(0, usage - r.quota.subtree_quota(node, key))
        lendable[key[1]] += r.quota.potential(parent, key)
    share = 0.0
    for res in RESOURCES:
        if borrowed[res]:
            share = max(share, 1000.0 * borrowed[res] / lendable[res] if lendable[res] else math.inf)
    return share


def _check_over_nominal(r: Replay, what: str, queue: str, flavor: str, victims: list[Workload]) -> None:  # noqa: C901
    """Cross-queue victims come only from a queue over its nominal quota (Kueue: a borrowing queue).

    "Over" as the queue will be once this cycle's decisions so far have played out: this cycle's earlier
    victims gone, and the jobs *of that queue* already found waiting for victims started (they take their
    victims' place). Evicting workloads still count: whoever preempted them may be waiting for them further
    down the order. Then some order of this preemptor's victims from the queue must find it over nominal
    before each removal; it suffices that one victim, taken last, still does (the others see more usage).
    With ``reclaim_now``: over nominal at decision time instead, counting every running workload.
    """
    keys = [(flavor, res) for res in RESOURCES if r.literal_quota or r.quota.governed((flavor, res))]
    usage = {key: r.quota.queue_usage[(queue, key)] for key in keys}
    nominal = {key: r.quota.quota(queue_node(queue), key).nominal for key in keys}
    if r.reclaim_now:
        if any(usage[key] > nominal[key] for key in keys):
            return
        _fail(
            f"{what}: victims {[v.id for v in victims]} of queue {queue!r}, which is not over its nominal "
            f"quota in flavor {flavor!r}: usage {usage}, nominal {nominal}"
        )
    for p in r.preempted.values():
        w = r.running[p.workload]
        if w.queue == queue and w.flavor == flavor:
            for key, amount in usage_by_key(flavor, w.assignments).items():
                if key in usage:
                    usage[key] -= amount
    for preemptor_queue, flavors, request in r.waiting:
        if preemptor_queue == queue and flavor in flavors:
            for res, amount in zip(RESOURCES, request, strict=True):
                if (flavor, res) in usage:
                    usage[(flavor, res)] += amount
    taken = dict.fromkeys(keys, 0)
    for v in victims:
        for key, amount in usage_by_key(flavor, v.assignments).items():
            if key in taken:
                taken[key] += amount
    for v in victims:
        own = usage_by_key(flavor, v.assignments)
        if any(usage[key] - taken[key] + own.get(key, 0) > nominal[key] for key in keys):
            return
    _fail(
        f"{what}: victims {[v.id for v in victims]} of queue {queue!r}, which is not over its nominal quota "
        f"in flavor {flavor!r} once this cycle's earlier victims are gone and its waiting preemptors have "
        f"started: usage {usage}, nominal {nominal}, these victims take {taken}"
    )


def check_victims_suffice(r: Replay) -> None:
    """At the end of the cycle, each preemptor fits once the victims are gone (the victims suffice).

    A generous test, so that it never blames a sound cycle: every victim of the cycle and every evicting
    workload counts as gone (for quota and capacity), topology and price are ignored, and each preemptor is
    tested alone. What it catches: victims that cannot make room, and a job admitted after a preemptor that
    takes the room the victims make (the victims would stop for nothing and the preemptor wait on).
    """
    by_preemptor: dict[str, list[Workload]] = defaultdict(list)
    for p in r.decisions.preemptions:
        if p.preemptor:  # over-quota victims make room for nobody (``over_quota_rules.py``)
            by_preemptor[p.preemptor].append(r.running[p.workload])
    if not by_preemptor:
        return
    gone = [r.running[w] for w in r.preempted] + [w for w in r.snapshot.running if w.evicting]
    accel: dict[str, list[int]] = {name: list(free) for name, free in r.accel_free.items()}
    cpu = dict(r.cpu_free)
    memory = dict(r.memory_free)
    freed_quota: dict[tuple[str, tuple[str, str]], int] = defaultdict(int)
    for w in gone:
        for a in w.assignments:
            if a.node in accel:
                for index, milli in a.accels:
                    accel[a.node][index] += milli
                cpu[a.node] += a.cpu
                memory[a.node] += a.memory
        for key, amount in usage_by_key(w.flavor, w.assignments).items():
            freed_quota[(w.queue, key)] += amount
    for preemptor, victims in sorted(by_preemptor.items()):
        job = r.jobs[preemptor]
        queue = r.queues[job.queue]
        reasons = []
        for flavor in sorted({v.flavor for v in victims}):
            reason = _quota_refuses(r, job, flavor, freed_quota) or _no_room(r, job, queue, flavor, accel, cpu, memory)
            if reason is None:
                break
            reasons.append(f"{flavor}: {reason}")
        else:
            _fail(
                f"preemption for {preemptor!r} (victims {sorted(v.id for v in victims)}): the job does not fit even "
                f"once every victim of the cycle and every evicting workload is gone: {'; '.join(reasons)}"
            )


def _quota_refuses(r: Replay, job: Job, flavor: str, freed: dict[tuple[str, tuple[str, str]], int]) -> str | None:
    request = (job.workers * job.accel_per_worker, job.workers * job.cpu, job.workers * job.memory)
    saved = dict(r.quota.queue_usage)
    try:
        for (queue, key), amount in freed.items():
            r.quota.queue_usage[(queue, key)] -= amount
        for res, amount in zip(RESOURCES, request, strict=True):
            key = (flavor, res)
            if not amount or not (r.literal_quota or r.quota.governed(key)):
                continue
            before = r.quota.path_usage(job.queue, key)
            r.quota.queue_usage[(job.queue, key)] += amount
            for node, usage in r.quota.path_usage(job.queue, key).items():
                bound = r.quota.bound(node, key)
                # As for admissions: a node the input already has over its limit only must not get worse.
                if bound is not None and usage > bound.limit and usage > before[node]:
                    return f"{describe(node)} would use {usage} of {key}, over {bound.limit} ({bound.why})"
        return None
    finally:
        r.quota.queue_usage.clear()
        r.quota.queue_usage.update(saved)


def _no_room(
    r: Replay,
    job: Job,
    queue: Queue,
    flavor: str,
    accel: dict[str, list[int]],
    cpu: dict[str, int],
    memory: dict[str, int],
) -> str | None:
    """Why no allowed cluster has room for all the workers (topology ignored), or None."""
    room: dict[str, int] = defaultdict(int)
    for node in r.snapshot.nodes:
        if node.flavor != flavor or not node.healthy or not node.schedulable:
            continue
        if r.job_allows(job, queue, node.cluster, flavor) is not None:
            continue
        free = accel[node.name]
        if job.accelerators == 0:
            workers = UNBOUNDED
        elif job.accel_milli == WHOLE:
            workers = sum(1 for g in free if g >= WHOLE) // job.accelerators
        else:
            workers = sum(g // job.accel_milli for g in free)
        if job.cpu:
            workers = min(workers, cpu[node.name] // job.cpu)
        if job.memory:
            workers = min(workers, memory[node.name] // job.memory)
        room[node.cluster] += workers
    if any(workers >= job.workers for workers in room.values()):
        return None
    return f"room for {dict(sorted(room.items()))} workers per cluster, the job has {job.workers}"
