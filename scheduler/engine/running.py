"""The snapshot's running work as flat arrays, built in one pass per cycle.

Three consumers need the same facts about every running workload: the quota tree (its usage), the
backfill timeline (what each node gets back, and when) and the preemptor (what stopping a set of
workloads frees). Reading the nested ``Workload -> Assignment -> (slot, milli)`` objects once, into
arrays, lets each of them select what it needs with numpy instead of walking the objects again.
"""

from __future__ import annotations

from collections.abc import Sequence
from itertools import chain

import numpy as np

from .model import Workload
from .nodes import FreeState, IntArray, NodeTable


class RunningWork:
    """Running workloads in id order; per assignment: workload, node row (-1 for a node that left the
    fleet), CPU and memory; per accelerator share: assignment, cell (row * width + slot) and milli."""

    def __init__(self, table: NodeTable, workloads: Sequence[Workload]) -> None:
        self.table = table
        self.workloads = sorted(workloads, key=lambda w: w.id)
        assignments = [a for w in self.workloads for a in w.assignments]
        n = len(assignments)
        self.workload = np.repeat(
            np.arange(len(self.workloads)),
            np.fromiter((len(w.assignments) for w in self.workloads), np.int64, len(self.workloads)),
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
        self.end = np.fromiter((w.admitted_at + w.time_limit for w in self.workloads), np.float64, len(self.workloads))
        count = len(self.workloads)
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
