"""The snapshot's running work as flat arrays, built in one pass per cycle.

Three consumers need the same facts about every running workload: the quota tree (its usage), the
backfill timeline (what each node gets back, and when) and the preemptor (what stopping a set of
workloads frees). Reading the nested ``Workload -> Assignment -> (slot, milli)`` objects once, into
arrays, lets each of them select what it needs with numpy instead of walking the objects again.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from itertools import chain

import numpy as np

from .model import Tier, Workload
from .nodes import BoolArray, FloatArray, FreeState, IntArray, NodeTable


@dataclass(frozen=True, slots=True)
class Policy:
    """What preemption needs to know of every running workload, one array entry per workload."""

    queue: IntArray  # quota tree index, -1 for an unknown queue
    priority: IntArray
    grace: IntArray
    preemptible: BoolArray  # the workload and its tier allow it
    staying: BoolArray  # not already told to stop
    admitted: FloatArray
    saved: FloatArray  # last checkpoint, or the start
    submitted: FloatArray
    cluster: IntArray  # -1 for a cluster that left the fleet


class RunningWork:
    """Running workloads in id order; per assignment: workload, node row (-1 for a node that left the
    fleet), CPU and memory; per accelerator share: assignment, cell (row * width + slot) and milli."""

    def __init__(self, table: NodeTable, workloads: Sequence[Workload]) -> None:
        self.table = table
        self.workloads = sorted(workloads, key=lambda w: w.id)
        count = len(self.workloads)
        assignments = [a for w in self.workloads for a in w.assignments]
        n = len(assignments)
        self.workload = np.repeat(
            np.arange(count), np.fromiter((len(w.assignments) for w in self.workloads), np.int64, count)
        )
        self.row = np.fromiter((table.index.get(a.node, -1) for a in assignments), np.int64, n)
        self.cpu = np.fromiter((a.cpu for a in assignments), np.int64, n)
        self.memory = np.fromiter((a.memory for a in assignments), np.int64, n)
        shares = np.fromiter((len(a.accels) for a in assignments), np.int64, n)
        pairs = np.fromiter(
            chain.from_iterable(chain.from_iterable(a.accels for a in assignments)), np.int64, 2 * int(shares.sum())
        ).reshape(-1, 2)
        self.share_of = np.repeat(np.arange(n), shares)  # the assignment of each share
        self.cell = self.row[self.share_of] * table.free.accel.shape[1] + pairs[:, 0]
        self.milli = pairs[:, 1]
        self.end = np.fromiter((w.expected_end for w in self.workloads), np.float64, count)
        self.usage: list[tuple[int, int, int]] = list(
            zip(
                self._total(self.workload[self.share_of], self.milli, count),
                self._total(self.workload, self.cpu, count),
                self._total(self.workload, self.memory, count),
                strict=True,
            )
        )

    @staticmethod
    def _total(at: IntArray, values: IntArray, length: int) -> list[int]:
        return np.bincount(at, weights=values, minlength=length).astype(np.int64).tolist() if len(at) else [0] * length

    def policy(self, tiers: Mapping[str, Tier], queues: Mapping[str, int], now: float) -> Policy:
        """The workloads' queues, tiers and times as arrays (a workload of an unknown tier is never a victim, nor
        one that has run less than its tier's ``min_runtime`` by ``now`` and is not already leaving)."""
        columns: tuple[list[float], ...] = ([], [], [], [], [], [], [], [], [])
        queue, priority, grace, preemptible, staying, admitted, saved, submitted, cluster = columns
        clusters = self.table.cluster_index
        for w in self.workloads:
            tier = tiers.get(w.tier)
            queue.append(queues.get(w.queue, -1))
            priority.append(tier.priority if tier else 0)
            grace.append(tier.grace_seconds if tier else 0)
            young = tier is not None and not w.evicting and now - w.admitted_at < tier.min_runtime
            preemptible.append(w.preemptible and tier is not None and tier.preemptible and not young)
            staying.append(not w.evicting)
            admitted.append(w.admitted_at)
            saved.append(w.last_checkpoint_at or w.admitted_at)
            submitted.append(w.submitted_at)
            cluster.append(clusters.get(w.cluster, -1))
        ints, floats, flags = np.int64, np.float64, np.bool_
        return Policy(
            *(
                np.asarray(c, kind)
                for c, kind in zip(columns, (ints, ints, ints, flags, flags, floats, floats, floats, ints), strict=True)
            )
        )

    def releases(self, flavor: int) -> tuple[tuple[np.ndarray, ...], tuple[np.ndarray, ...]]:
        """What the nodes of ``flavor`` get back as their work ends: accelerator shares (end, cell, milli)
        and host resources (end, row, cpu, memory), each sorted by end."""
        on = np.flatnonzero((self.row >= 0) & (self.table.flavor[np.maximum(self.row, 0)] == flavor))
        ends = self.end[self.workload[on]]
        order = np.argsort(ends, kind="stable")
        on, host_ends = on[order], ends[order]
        shares = np.flatnonzero(np.isin(self.share_of, on))
        share_ends = self.end[self.workload[self.share_of[shares]]]
        share_order = np.argsort(share_ends, kind="stable")
        shares = shares[share_order]
        return (
            (share_ends[share_order], self.cell[shares], self.milli[shares]),
            (host_ends, self.row[on], self.cpu[on], self.memory[on]),
        )

    def stopped(self, state: FreeState, workloads: Sequence[int]) -> FreeState:
        """A copy of ``state`` with the resources of ``workloads`` (indices into ``self.workloads``) free."""
        stopped = state.copy()
        chosen = np.isin(self.workload, np.asarray(workloads, np.int64)) & (self.row >= 0)
        shares = chosen[self.share_of]
        np.add.at(stopped.accel.reshape(-1), self.cell[shares], self.milli[shares])
        rows = self.row[chosen]
        np.add.at(stopped.cpu, rows, self.cpu[chosen])
        np.add.at(stopped.memory, rows, self.memory[chosen])
        stopped.recount(rows)
        return stopped
