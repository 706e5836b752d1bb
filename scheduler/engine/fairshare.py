"""Fair share with memory: how a queue's recent use counts in its share (docs/scheduling.md §Fair sharing).

The dominant resource share (``QuotaTree.share``) says what a queue borrows *now*; it forgets. A team that held
the whole fleet all last week ranks like one that held nothing. So each queue also brings its **recent use**:
accelerator-hours with a half-life, ``Snapshot.usage`` (kept by the product from the meter, decayed to the
snapshot's moment; the engine does no bookkeeping of its own).

Recent use is judged among **siblings**, the queues and cohorts under one cohort (and, at the top, the queues
and cohorts with no parent), as Slurm's fair tree judges accounts among their siblings:

- A node's recent use is its own (a queue) or its subtree's (a cohort).
- Its **portion** of its siblings' recent use is its use over theirs together.
- Its **entitlement** is its weight times its nominal accelerator quota (its subtree's, summed over flavors),
  over the siblings' together; where no sibling has an accelerator quota, its weight over theirs (cohorts
  weigh 1).
- Its **standing** is ``1000 * (portion - entitlement)``: positive when it used more than its fair part
  lately, negative when less, in the units of the dominant resource share (thousandths).

A queue's **memory term** is the sum of the standings of the queue and of each cohort above it: a queue whose
cohort used more than its fair part lately ranks after the queues of a cohort that used less. The cycle adds
``Config.usage_weight`` times it to the queue's weighted dominant resource share wherever it compares shares:
the order of the queue heads and fair-sharing reclaim (``cycle.Cycle.queue_share``,
``preemption.Preemptor._fair_to_take``). Siblings with no recent use at all have a standing of 0: with nothing
metered yet, the share is the dominant resource share alone.

The memory term stays the same through a cycle (what the cycle admits is not use yet), so the order's heap
keeps exact keys.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

from .model import ACCEL, Queue
from .quota import QuotaTree


@dataclass(frozen=True, slots=True)
class Standing:
    """One tree node among its siblings (the module's terms)."""

    #: Decayed accelerator-hours of the node (a cohort: of its queues).
    recent: float
    #: Of its siblings' recent use together, its part (0-1; 0 when none of them used anything).
    portion: float
    #: Of its siblings' entitlements together, its part (0-1).
    entitlement: float
    #: ``1000 * (portion - entitlement)``, or 0 when none of its siblings used anything.
    standing: float
    #: The sum of its standing and its ancestors': what the cycle adds (times the weight) to its share.
    term: float


def standings(quota: QuotaTree, queues: Mapping[str, Queue], usage: Mapping[str, float]) -> list[Standing]:
    """Each tree node's standing, indexed as ``quota.names``. Names in ``usage`` the tree does not know are
    ignored; negative amounts count as none."""
    n = len(quota.names)
    recent = [0.0] * n
    for i, name in enumerate(quota.names):
        if quota.is_queue[i]:
            amount = max(0.0, float(usage.get(name, 0.0)))
            node: int | None = i
            while node is not None:
                recent[node] += amount
                node = quota.parent[node]
    accel = [fr for fr in range(len(quota.covered)) if fr % 3 == ACCEL]
    nominal = [sum(quota.subtree[i][fr] for fr in accel) for i in range(n)]
    weight = [queues[name].weight if quota.is_queue[i] else 1.0 for i, name in enumerate(quota.names)]
    groups = [quota.children[p] for p in range(n) if not quota.is_queue[p]]
    groups.append([i for i in range(n) if quota.parent[i] is None])
    portion, entitled, own = [0.0] * n, [0.0] * n, [0.0] * n
    for siblings in groups:
        total = sum(recent[i] for i in siblings)
        with_quota = any(nominal[i] > 0 for i in siblings)
        claims = {i: max(0.0, weight[i]) * (nominal[i] if with_quota else 1) for i in siblings}
        claimed = sum(claims.values())
        for i in siblings:
            entitled[i] = claims[i] / claimed if claimed > 0 else 0.0
            if total > 0:
                portion[i] = recent[i] / total
                own[i] = 1000.0 * (portion[i] - entitled[i])
    out = []
    for i in range(n):
        term, node = 0.0, i
        while node is not None:
            term += own[node]
            node = quota.parent[node]
        out.append(Standing(recent[i], portion[i], entitled[i], own[i], term))
    return out


def hours(milli: float, start: float, end: float, at: float, half_life: float) -> float:
    """Recent use of a hold of ``milli`` thousandths of accelerators from ``start`` to ``end`` (seconds), valued at
    ``at``: the integral of ``milli / 1000 * 2 ** -((at - x) / half_life)`` over the hold, in hours. Linear in the
    holds, and every hold's value decays by the same factor: so a queue's recent use is kept exactly by adding
    what each metering run's records add and taking away what they replace, all valued at the run's moment
    (``billing.actions.metering``; the event simulator alike)."""
    if end <= start or milli <= 0:
        return 0.0
    rate = math.log(2) / half_life
    return milli / 1000.0 * (math.exp(-rate * (at - end)) - math.exp(-rate * (at - start))) / rate / 3600.0


def memory_terms(
    quota: QuotaTree, queues: Mapping[str, Queue], usage: Mapping[str, float], weight: float
) -> list[float]:
    """``weight`` times each node's memory term (all 0 when the weight is 0 or nothing was used)."""
    if weight <= 0 or not any(amount > 0 for amount in usage.values()):
        return [0.0] * len(quota.names)
    return [weight * s.term for s in standings(quota, queues, usage)]
