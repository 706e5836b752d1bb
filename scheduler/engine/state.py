"""What a cycle's phases see of it: ``CycleState``, the part of ``cycle.Cycle`` that the preemptor
(``preemption.py``), the over-quota phase (``over_quota.py``) and the order of the jobs (``ordering.py``) read
and change. They are given the cycle typed as this protocol, so none of them imports ``cycle.py`` (which
imports them): the engine's modules import one way, type-only imports included.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping
from typing import Protocol

from .backfill import Timeline
from .budgets import Ledger
from .model import Config, Job, PendingReason, Preemption, Queue, Snapshot, Tier
from .nodes import NodeTable
from .quota import QuotaTree
from .routing import Router
from .running import RunningWork


class CycleState(Protocol):
    snapshot: Snapshot
    config: Config
    now: float
    tiers: dict[str, Tier]
    queues: dict[str, Queue]
    table: NodeTable
    quota: QuotaTree
    #: Per tree node, what its recent use adds to its share this cycle (``fairshare.py``).
    memory: list[float]
    work: RunningWork
    #: Running work by flavor, as indexes into ``work``.
    running: defaultdict[str, list[int]]
    ledger: Ledger
    timeline: Timeline
    router: Router
    preemptions: list[Preemption]
    order: list[str]
    #: Grows each time quota usage changes for good (``quota_changed``).
    quota_epoch: int
    stats: defaultdict[str, int]

    def queue_share(self, queue: int) -> float:
        """Queue ``queue``'s weighted dominant resource share now, plus its memory term."""
        ...

    def quota_changed(self, qi: int) -> None:
        """Usage of queue ``qi`` changed for good: forget what was derived from it."""
        ...

    def pend(
        self,
        job: Job,
        reason: PendingReason,
        *,
        position: int | None = None,
        estimate: float | None = None,
        facts: Mapping[str, object] | None = None,
    ) -> None:
        """Leave ``job`` waiting this cycle, for ``reason``."""
        ...
