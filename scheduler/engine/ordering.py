"""The order in which a cycle considers the pending jobs (docs/scheduling.md §The cycle, step 2).

Each queue's jobs by (tier priority, overdue first, aged submit time, id), where the aged submit time is the submit
time plus ``Config.short_first`` times the time limit (short jobs first, with aging) and an overdue job (one that
has waited its tier's ``max_wait``) keeps its own submit time; across queues a heap over the queue heads by (tier
priority, overdue first, then the queue's weighted dominant resource share plus its memory of recent use
(``fairshare.py``), then aged submit time, id). An overdue
job thus passes fair sharing and short-first alike, but never a higher tier.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterator
from typing import TYPE_CHECKING

import numpy as np

from .model import Job, PendingReason, Queue, Tier

if TYPE_CHECKING:
    from .state import CycleState


def in_order(cycle: CycleState) -> Iterator[tuple[Job, Tier, Queue]]:
    """Valid jobs in the order the cycle considers them; invalid ones go straight to pending.

    Each queue's jobs are sorted once (one numpy sort for all queues). A heap then holds one head per
    queue; only the queue being taken from can change its share (by admitting), so the other heads'
    keys stay exact without being recomputed, and a queue is taken from while its next job still
    comes first.
    """
    tiers, queues = cycle.tiers, cycle.queues
    jobs: list[Job] = []
    invalid: list[Job] = []
    for job in cycle.snapshot.pending:
        (jobs if job.tier in tiers and job.queue in queues else invalid).append(job)
    for job in sorted(invalid, key=lambda j: j.id):
        cycle.order.append(job.id)
        reason = PendingReason.UNKNOWN_QUEUE if job.queue not in queues else PendingReason.UNKNOWN_TIER
        cycle.pend(job, reason)
    if not jobs:
        return
    n = len(jobs)
    names = sorted({job.queue for job in jobs})
    number = {name: i for i, name in enumerate(names)}
    tier_of = [tiers[job.tier] for job in jobs]
    neg_priority = [-tier.priority for tier in tier_of]
    now, aging = cycle.snapshot.now, cycle.config.short_first
    late = [0 if tier.overdue(job.submitted_at, now) else 1 for job, tier in zip(jobs, tier_of, strict=True)]
    submitted = [
        job.submitted_at + aging * job.time_limit if aging and late[k] else job.submitted_at
        for k, job in enumerate(jobs)
    ]
    ids = [job.id for job in jobs]
    queue_of = np.fromiter((number[job.queue] for job in jobs), np.int64, n)
    id_rank = np.empty(n, np.int64)
    id_rank[np.argsort(np.array(ids), kind="stable")] = np.arange(n)
    ordered = np.lexsort((id_rank, np.array(submitted), np.array(late), np.array(neg_priority), queue_of))
    bounds = np.searchsorted(queue_of[ordered], np.arange(len(names) + 1)).tolist()
    ordered_list = ordered.tolist()
    per_queue = {name: ordered_list[bounds[i] : bounds[i + 1]] for i, name in enumerate(names)}
    fair = cycle.config.fair_sharing
    index = cycle.quota.index

    def head(name: str, k: int, share: float) -> tuple[int, int, float, float, str, str]:
        return (neg_priority[k], late[k], share, submitted[k], ids[k], name)

    heads = [head(name, items[0], cycle.queue_share(index[name]) if fair else 0.0) for name, items in per_queue.items()]
    heapq.heapify(heads)
    taken = dict.fromkeys(names, 0)
    while heads:
        name = heapq.heappop(heads)[5]
        items, queue, qi = per_queue[name], queues[name], index[name]
        share, epoch = 0.0, -1
        at = taken[name]
        while at < len(items):
            k = items[at]
            at += 1
            yield jobs[k], tier_of[k], queue
            if at < len(items):
                if fair and epoch != cycle.quota_epoch:
                    share, epoch = cycle.queue_share(qi), cycle.quota_epoch
                k = items[at]
                following = (neg_priority[k], late[k], share, submitted[k], ids[k], name)
                if heads and heads[0] < following:
                    heapq.heappush(heads, following)
                    break
        taken[name] = at
