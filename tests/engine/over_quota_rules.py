"""The over-quota rules of the invariant checker (docs/scheduling.md §Quota lowered below usage).

A preemption with no preemptor (reason ``over_quota``) gives back what a queue or cohort holds beyond its
potential (docs/scheduling.md §Quotas and borrowing: the most the node could ever use). Checked as the replay
starts, before any job, in the order the victims are listed:
- each victim is running, not evicting, not preempted twice, preemptible (tier and job), and gets its
  tier's grace period;
- each is needed: with the evicting work and the victims listed before it gone, some tree node on its
  queue's path uses more than its potential in a governed column that the victim uses (no spurious
  preemptions; the engine lists its victims in the order it chose them).
Checked when the replay ends: every tree node that still uses more than its potential in a column, once
the evicting work and all of this cycle's victims are gone, has no preemptible work left in its subtree
that uses that column. That is, if the running work's preemptible part could bring a node within its
quota, the decisions do.

The checker's own quota tree (``quota_tree.py``) computes usage and potential; only columns of flavors that
some node offers count, as in the engine (a quota for a flavor nobody has limits nothing).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import replace
from typing import TYPE_CHECKING, NoReturn

from scheduler.engine.model import Preemption, PreemptionReason, Workload
from tests.engine.quota_tree import Key, TreeNode, describe, usage_by_key

if TYPE_CHECKING:
    from tests.engine.invariants import Replay


def _fail(message: str) -> NoReturn:
    raise AssertionError(message)


def _charge(r: Replay, workloads: Iterable[Workload], sign: int) -> None:
    for w in workloads:
        if w.queue in r.queues:
            for key, amount in usage_by_key(w.flavor, w.assignments).items():
                r.quota.queue_usage[(w.queue, key)] += sign * amount


def _columns(r: Replay) -> list[Key]:
    offered = {n.flavor for n in r.snapshot.nodes}
    return sorted(key for key in r.quota.covered if key[0] in offered)


def preemptible(r: Replay, w: Workload) -> bool:
    """The tier and the job allow it, and it has run its tier's minimum runtime (docs/scheduling.md §Disruption)."""
    tier = r.tiers.get(w.tier)
    old_enough = tier is not None and (w.evicting or r.snapshot.now - w.admitted_at >= tier.min_runtime)
    return tier is not None and tier.preemptible and w.preemptible and old_enough


def check_reclaim(r: Replay, preemptions: list[Preemption]) -> None:
    """Check and apply the over-quota preemptions, before any job of the cycle."""
    evicting = [w for w in r.snapshot.running if w.evicting]
    columns = set(_columns(r))
    gone: list[Workload] = []
    _charge(r, evicting, -1)
    try:
        for p in preemptions:
            what = f"over-quota preemption of {p.workload!r}"
            if p.preemptor or p.reason != PreemptionReason.OVER_QUOTA:
                _fail(f"{what}: preemptor {p.preemptor!r} with reason {p.reason}; expected none and over_quota")
            w = r.running.get(p.workload)
            if w is None:
                _fail(f"{what}: no such running workload")
            if p.workload in r.preempted:
                _fail(f"{what}: already preempted this cycle")
            if w.evicting:
                _fail(f"{what}: the workload is already evicting")
            if not preemptible(r, w):
                _fail(f"{what}: the victim (tier {w.tier!r}) is not preemptible")
            tier = r.tiers[w.tier]
            if p.grace_seconds != tier.grace_seconds:
                _fail(f"{what}: grace {p.grace_seconds} s, its tier {tier.name!r} gives {tier.grace_seconds} s")
            if w.queue not in r.queues:
                _fail(f"{what}: its queue {w.queue!r} does not exist")
            used = [key for key in usage_by_key(w.flavor, w.assignments) if key in columns]
            over = [
                (node, key)
                for node in r.quota.path(w.queue)
                for key in used
                if r.quota.usage(node, key) > r.quota.potential(node, key)
            ]
            if not over:
                usage = {describe(n): {k: r.quota.usage(n, k) for k in used} for n in r.quota.path(w.queue)}
                _fail(
                    f"{what}: no node on the path of queue {w.queue!r} is over its potential in a column the "
                    f"victim uses {used}, with evicting work and earlier victims gone: usage {usage}"
                )
            _charge(r, [w], -1)
            gone.append(w)
            r.preempted[p.workload] = p
    finally:
        _charge(r, evicting + gone, +1)  # they run on through their grace period
    for p in preemptions:
        victim = r.running[p.workload]
        until = min(r.snapshot.now + p.grace_seconds, victim.expected_end)
        for node_name in {a.node for a in victim.assignments}:
            hold = r.holds[node_name][f"workload {victim.id}"]
            r.holds[node_name][f"workload {victim.id}"] = replace(hold, until=until)


def _subtree_queues(r: Replay, node: TreeNode) -> set[str]:
    return {q for q in r.queues if node in r.quota.path(q)}


def _depth(r: Replay, node: TreeNode) -> int:
    depth, parent = 0, r.quota.parent[node]
    while parent is not None:
        depth, parent = depth + 1, r.quota.parent[parent]
    return depth


def check_reclaimed(r: Replay) -> None:
    """At the end of the cycle: no node stays over its potential while preemptible work could give it back."""
    staying = [w for w in r.snapshot.running if not w.evicting and w.id not in r.preempted]
    remaining = [w for w in staying if preemptible(r, w)]
    saved = dict(r.quota.queue_usage)
    r.quota.queue_usage.clear()
    _charge(r, staying, +1)  # the running work that stays, without this cycle's admissions
    try:
        for node in sorted(r.quota.parent, key=lambda n: (-_depth(r, n), n)):  # queues first: the precise message
            under = _subtree_queues(r, node)
            for key in _columns(r):
                usage, potential = r.quota.usage(node, key), r.quota.potential(node, key)
                if usage <= potential:
                    continue
                left = [w.id for w in remaining if w.queue in under and usage_by_key(w.flavor, w.assignments).get(key)]
                if left:
                    _fail(
                        f"over quota: {describe(node)} still uses {usage} of {key}, over its potential {potential}, "
                        f"once evicting work and this cycle's victims are gone; preemptible work {sorted(left)} of "
                        f"its queues could give it back"
                    )
    finally:
        r.quota.queue_usage.clear()
        r.quota.queue_usage.update(saved)
