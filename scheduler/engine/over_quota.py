"""Giving back quota that was lowered below usage: the first phase of every cycle (docs/scheduling.md
§Quota lowered below usage).

Team leads and admins may lower a queue's or a cohort's quota while the queue uses more. A tree node then
holds more than it ever could: ``usage > potential`` in some governed (flavor, resource) column, where the
potential folds in the nominal quota, the borrowing limit and what the parent could give (at the root, the
subtree quota; §Quotas and borrowing). The preemptor only acts for a pending job, so with nobody waiting the node
would stay over for ever. Before any pending job is considered, this phase preempts, gracefully, until no
node is over.

Choices:
- *Over means over the potential, not over the nominal quota.* Lowering the nominal quota of a queue that
  may borrow makes it a borrower while its cohort has room: its work stays, and a queue whose quota it
  borrows takes it back the usual way (``preemption.py``) once it needs it.
- *Work already evicting is already leaving.* Detection and choice count usage without the workloads told
  to stop in an earlier cycle (still in their grace period), so that a cycle never preempts more while
  earlier victims are still stopping. The pending jobs then see the tree as it is: evicting work and this
  phase's victims hold their quota and their nodes until they stop, exactly like the preemptor's own
  victims. They are in ``Preemptor.victims`` (never chosen twice, never a candidate again) and in
  ``Preemptor.leaving`` (a later victim search counts on them being gone). A job of a queue that is over
  is not admitted meanwhile: ``available`` is 0 along its path.
- *Nodes deepest first*, then by name: a queue over its own limit gives back its own work before its
  cohort is judged, and the cohort then sees the queue's victims gone.
- *Victims* come from the over node's subtree, on the column's flavor, and use at least one column still
  over: preemptible work only (its tier and the job allow it, as the preemptor decides it), not evicting,
  not a victim yet. First the work of queues that are borrowing (over their own nominal quota in a column
  over at the node, re-checked at every pick), then the rest; within each, lower tier priority first, then
  newest admitted (the work that took the quota last, and the least work lost), then newest submitted
  (work admitted in one cycle), then the highest id. Each victim's usage leaves the tree as it is chosen,
  and the choice stops as soon as no column of the node is over.
  Then a fill back, as the preemptor's: from the second-to-last victim back, one is given back when the
  node and every node between it and the victim's queue stay within their potential; borrowed work is
  never given back while work within its nominal quota stays chosen.
  *Choice*: the tier comes before recency, as everywhere else in the engine (tiers are the organisation's
  statement of urgency); among the jobs of a tier, the newest borrowed work goes first.
- *Non-preemptible work is never chosen.* If only such work remains, the node stays over until that work
  ends; meanwhile nothing new is admitted there (``available`` is 0), so usage only falls.
- *Every queue*, whatever its ``reclaim`` policy, ``Reclaim.NEVER`` included: that policy says how a
  queue's pending jobs take capacity back from other queues; here the tree itself no longer has the
  capacity, and usage must never stay above quota once reclaim finishes.
- *No victim cap.* ``Config.max_victims`` bounds the disruption worth one pending job's start; here the
  lowered quota demands the disruption, and a cap would only spread the same preemptions over several
  cycles while the node stays over. The work is bounded by the running work of the over subtrees, a few
  list operations per victim.

Cost when nothing is over, every cycle but the few after a quota is lowered: one comparison per tree node
and governed column (``QuotaTree.over_potential``).
"""

from __future__ import annotations

from collections import defaultdict
from typing import TYPE_CHECKING

import numpy as np

from . import explain
from .model import ACCEL, CPU, Preemption, PreemptionReason
from .preemption import Preemptor, Running
from .running import Policy

if TYPE_CHECKING:
    from .state import CycleState

#: (resource, column) pairs of one flavor, as ``QuotaTree.frs`` gives them.
Columns = list[tuple[int, int]]


def reclaim_over_quota(cycle: CycleState, preemptor: Preemptor) -> None:
    """Preempt what the tree nodes hold beyond their potential; a no-op (one scan) when none does."""
    quota = cycle.quota
    if not quota.over_potential():
        return
    policy = preemptor.policy()
    work = cycle.work
    evicting: defaultdict[tuple[int, str], list[int]] = defaultdict(lambda: [0, 0, 0])
    for k in np.flatnonzero(~policy.staying & (policy.queue >= 0)).tolist():
        flavor = work.workloads[k].flavor
        if flavor in quota.flavor_index:
            total = evicting[(int(policy.queue[k]), flavor)]
            for r, amount in enumerate(work.usage[k]):
                total[r] += amount
    for (q, flavor), total in evicting.items():
        quota.charge(q, flavor, total, -1)
    phase = _Reclaim(cycle, policy, preemptor.victims)
    try:
        if not evicting or quota.over_potential():
            phase.run()
    finally:
        # Victims and evicting work run on through their grace: for the pending jobs they still count.
        for victim in phase.chosen:
            quota.charge(victim.queue, victim.workload.flavor, victim.usage)
        for (q, flavor), total in evicting.items():
            quota.charge(q, flavor, total)
    for victim, why in zip(phase.chosen, phase.why, strict=True):
        preemptor.victims.add(victim.workload.id)
        preemptor.leaving.append(victim)
        lost = explain.lost_work(victim.workload, victim.usage[0], cycle.now)
        message = explain.preempted(why, victim.workload, lost)
        cycle.preemptions.append(
            Preemption(victim.workload.id, "", PreemptionReason.OVER_QUOTA, message, victim.grace, lost)
        )
    cycle.stats["preempted"] += len(phase.chosen)
    cycle.stats["over_quota"] += len(phase.chosen)


class _Reclaim:
    """One pass over the tree, with evicting work out of it; victims leave the tree as they are chosen."""

    def __init__(self, cycle: CycleState, policy: Policy, victims: set[str]) -> None:
        self.cycle = cycle
        #: Work already asked to stop, by earlier cycles' preemptors or this phase.
        self.victims = victims
        self.quota = cycle.quota
        self.policy = policy
        self.usage = cycle.work.usage
        self.queue_of: list[int] = policy.queue.tolist()
        self.taken: set[int] = set()  # indices in ``RunningWork`` of the victims so far
        self.chosen: list[Running] = []
        self.why: list[str] = []
        quota = self.quota
        #: Per tree node, its own and its descendants' queues, as a mask over queue indices (and -1).
        self.under = np.zeros((len(quota.names), len(quota.names) + 1), np.bool_)
        for q in range(len(quota.names)):
            if quota.is_queue[q]:
                node: int | None = q
                while node is not None:
                    self.under[node, q] = True
                    node = quota.parent[node]

    def run(self) -> None:
        quota = self.quota
        for n in sorted(range(len(quota.names)), key=lambda i: (-quota.depth[i], quota.names[i])):
            for flavor in quota.flavors:
                columns = quota.frs(flavor)
                if self._over(n, columns):
                    self._reclaim(n, flavor, columns)

    def _over(self, n: int, columns: Columns) -> Columns:
        usage, potential = self.quota.usage[n], self.quota.potential_of[n]
        return [(r, fr) for r, fr in columns if usage[fr] > potential[fr]]

    def _candidates(self, n: int, flavor: str) -> list[int]:
        """The preemptible work of ``n``'s subtree on ``flavor`` in the order to take it, classes aside."""
        p = self.policy
        index = np.asarray(self.cycle.running.get(flavor, []), np.int64)  # in id order, the last tie-break
        index = index[p.preemptible[index] & p.staying[index] & self.under[n][p.queue[index]]]
        # Lower tier first, then the newest: admitted last, then (for work admitted in the same cycle) submitted last.
        index = index[np.lexsort((-index, -p.submitted[index], -p.admitted[index], p.priority[index]))]
        victims = self.victims
        workloads = self.cycle.work.workloads
        return [k for k in index.tolist() if k not in self.taken and workloads[k].id not in victims]

    def _reclaim(self, n: int, flavor: str, columns: Columns) -> None:
        quota, usage_of, queue_of = self.quota, self.usage, self.queue_of
        over = self._over(n, columns)
        where = self._words(n, flavor, over[0])
        candidates = self._candidates(n, flavor)
        chosen: list[tuple[int, bool]] = []  # (index in ``RunningWork``, borrowed)
        for borrowed in (True, False):
            for k in candidates:
                used = usage_of[k]
                if k in self.taken or not any(used[r] for r, _ in over):
                    continue
                q = queue_of[k]
                if borrowed and not any(quota.usage[q][fr] > quota.nominal[q][fr] for _, fr in over):
                    continue
                quota.charge(q, flavor, used, -1)
                self.taken.add(k)
                chosen.append((k, borrowed))
                over = self._over(n, over)
                if not over:
                    break
            if not over:
                break
        # Fill back, second-to-last first (the last one was needed: the node was over without it).
        kept = [True] * len(chosen)
        nominal_kept = bool(chosen) and not chosen[-1][1]
        for i in range(len(chosen) - 2, -1, -1):
            k, borrowed = chosen[i]
            if not (borrowed and nominal_kept) and self._give_back(k, n, flavor, columns):
                kept[i] = False
                self.taken.discard(k)
            elif not borrowed:
                nominal_kept = True
        p = self.policy
        for (k, borrowed), keep in zip(chosen, kept, strict=True):
            if not keep:
                continue
            q = queue_of[k]
            workload = self.cycle.work.workloads[k]
            self.chosen.append(Running(workload, k, q, int(p.priority[k]), int(p.grace[k]), usage_of[k]))
            if quota.is_queue[n]:
                self.why.append(where)
            elif borrowed:
                self.why.append(f"{where}; its queue {workload.queue!r} was borrowing beyond its own quota")
            else:
                self.why.append(
                    f"{where}; its queue {workload.queue!r} is within its own quota, but no borrowed work was left "
                    "to give back"
                )

    def _give_back(self, k: int, n: int, flavor: str, columns: Columns) -> bool:
        """Put victim ``k`` back if every node from its queue up to ``n`` stays within its potential in the
        columns it uses; True if it was put back."""
        quota, used, q = self.quota, self.usage[k], self.queue_of[k]
        quota.charge(q, flavor, used)
        node: int | None = q
        while node is not None:
            usage, potential = quota.usage[node], quota.potential_of[node]
            if any(used[r] and usage[fr] > potential[fr] for r, fr in columns):
                quota.charge(q, flavor, used, -1)
                return False
            node = None if node == n else quota.parent[node]
        return True

    def _words(self, n: int, flavor: str, column: tuple[int, int]) -> str:
        """What is over, in words, with the amounts as the node is judged (evicting work and the victims of
        nodes below it gone): "queue 'vision' uses more h100 than its quota now allows (12 in use, at most 8)"."""
        quota = self.quota
        r, fr = column
        used, limit = quota.usage[n][fr], quota.potential_of[n][fr]
        if r == ACCEL:
            what, amounts = flavor, (explain.accel_words(used), explain.accel_words(limit))
        elif r == CPU:
            what, amounts = f"CPU on {flavor} nodes", (f"{used / 1000:g} cores", f"{limit / 1000:g}")
        else:
            what, amounts = f"memory on {flavor} nodes", (f"{used / 1024:g} GiB", f"{limit / 1024:g}")
        kind = "queue" if quota.is_queue[n] else "cohort"
        return (
            f"{kind} {quota.names[n]!r} uses more {what} than its quota now allows "
            f"({amounts[0]} in use, at most {amounts[1]})"
        )
