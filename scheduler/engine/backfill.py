"""Backfill with reservations (Slurm's backfill scheduler, SCHEDULING.md §6).

When a job that its quota allows cannot start for lack of free nodes, we find the earliest time its
placement fits, assuming running work ends at its time limit, and *reserve* that capacity from then on.
Lower-priority jobs may still start on the reserved nodes now, but only if they end before the
reservation starts or leave it what it needs (``Holds``). Without this, a stream of small jobs keeps
the nodes a large gang is waiting for busy forever.

Only a few jobs get a reservation each cycle (``Config.reservations``), in priority order, as Slurm caps
``bf_max_job_test``. Free capacity at a future time is the free capacity now plus what ends by then,
minus what earlier reservations hold over the same window.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from .model import WHOLE, Assignment, Workload
from .nodes import FreeState, NodeTable
from .placement import Holds


@dataclass(slots=True)
class _Releases:
    ends: list[float]
    rows: list[int]
    slots: list[int]  # -1 for the CPU/memory entry of an assignment
    milli: list[int]
    cpu: list[int]
    memory: list[int]


@dataclass(frozen=True, slots=True)
class Held:
    """A reservation's resources as flat arrays, ready to subtract from a future state."""

    start: float
    end: float
    cells: np.ndarray  # row * width + accelerator slot, one per accelerator share
    milli: np.ndarray
    rows: np.ndarray  # one per assignment
    cpu: np.ndarray
    memory: np.ndarray


class Timeline:
    def __init__(
        self,
        table: NodeTable,
        now: float,
        window: int,
        quantum: int,
        running: Mapping[str, Sequence[tuple[Workload, object]]],
    ) -> None:
        self.table = table
        self._running = running  # read per flavor on first use
        self.now = now
        self.window = window
        self.quantum = quantum
        self.holds = Holds.none(len(table))
        self.held: list[Held] = []
        self._releases: dict[int, _Releases] = defaultdict(lambda: _Releases([], [], [], [], [], []))
        self._arrays: dict[int, tuple[np.ndarray, ...]] = {}
        self._loaded: set[int] = set()

    def release(self, assignments: Sequence[Assignment], end: float) -> None:
        """Record that ``assignments`` give their resources back at ``end``."""
        for a in assignments:
            row = self.table.index.get(a.node)
            if row is None:
                continue
            group = int(self.table.flavor[row])
            rel = self._releases[group]
            entries = [(slot, milli, 0, 0) for slot, milli in a.accels] + [(-1, 0, a.cpu, a.memory)]
            for slot, milli, cpu, memory in entries:
                rel.ends.append(end)
                rel.rows.append(row)
                rel.slots.append(slot)
                rel.milli.append(milli)
                rel.cpu.append(cpu)
                rel.memory.append(memory)
            self._arrays.pop(group, None)

    def _sorted(self, flavor: int) -> tuple[np.ndarray, ...]:
        if flavor not in self._loaded:
            self._loaded.add(flavor)
            for w, _ in self._running.get(self.table.flavors[flavor], ()):
                self.release(w.assignments, w.expected_end)
        if flavor not in self._arrays:
            rel = self._releases[flavor]
            ends = np.asarray(rel.ends, np.float64)
            order = np.argsort(ends, kind="stable")
            self._arrays[flavor] = (
                ends[order],
                *(
                    np.asarray(values, np.int64)[order]
                    for values in (rel.rows, rel.slots, rel.milli, rel.cpu, rel.memory)
                ),
            )
        return self._arrays[flavor]

    def state_at(self, flavor: int, t: float, end: float) -> FreeState:
        """Free resources of every node at time ``t`` for a job running until ``end``."""
        free = self.table.free
        size, width = free.accel.shape
        ends, rows, slots, milli, cpu, memory = self._sorted(flavor)
        k = int(np.searchsorted(ends, t, side="right"))
        rows, slots = rows[:k], slots[:k]
        cells = np.where(slots >= 0, rows * width + slots, 0)  # CPU/memory entries add 0 milli to cell 0
        accel = np.bincount(cells, weights=milli[:k], minlength=size * width).astype(np.int64).reshape(size, width)
        state = FreeState(
            free.accel + accel,
            free.cpu + np.bincount(rows, weights=cpu[:k], minlength=size).astype(np.int64),
            free.memory + np.bincount(rows, weights=memory[:k], minlength=size).astype(np.int64),
        )
        overlapping = [held for held in self.held if held.start < end and t < held.end]
        if overlapping:
            cells = np.concatenate([h.cells for h in overlapping])
            flat = state.accel.reshape(-1)
            np.subtract.at(flat, cells, np.concatenate([h.milli for h in overlapping]))
            rows = np.concatenate([h.rows for h in overlapping])
            np.subtract.at(state.cpu, rows, np.concatenate([h.cpu for h in overlapping]))
            np.subtract.at(state.memory, rows, np.concatenate([h.memory for h in overlapping]))
            _settle(state, np.unique(rows))
        return state

    def candidate_times(self, flavor: int) -> list[float]:
        """When capacity of a flavor frees up within the window, rounded up to the quantum."""
        ends = self._sorted(flavor)[0]
        soon = ends[(ends > self.now) & (ends <= self.now + self.window)]
        return [float(t) for t in np.unique(np.ceil(soon / self.quantum) * self.quantum)]

    def earliest(self, flavor: int, duration: int, place: Callable[[FreeState, float], object | None]) -> float | None:
        """Earliest time in the window at which ``place`` finds room for a job of ``duration`` seconds.

        Capacity only grows as work ends, so we binary-search the release times (at most ``probes`` of
        them, evenly spaced, when there are more), then step forward past any time that an earlier
        reservation spoils.
        """
        times = self.candidate_times(flavor)
        probes = 32
        if len(times) > probes:
            times = [times[round(i * (len(times) - 1) / (probes - 1))] for i in range(probes)]
        known: dict[int, bool] = {}

        def fits(i: int) -> bool:
            if i not in known:
                t = times[i]
                known[i] = place(self.state_at(flavor, t, t + duration), t) is not None
            return known[i]

        lo, hi = 0, len(times)
        while lo < hi:
            mid = (lo + hi) // 2
            if fits(mid):
                hi = mid
            else:
                lo = mid + 1
        return next((times[i] for i in range(lo, min(lo + 8, len(times))) if fits(i)), None)

    def reserve(self, state: FreeState, start: float, end: float, assignments: tuple[Assignment, ...]) -> None:
        """Hold ``assignments`` from ``start``: jobs ending later may only use what is left beside it."""
        width = self.table.free.accel.shape[1]
        rows = [self.table.index[a.node] for a in assignments]
        self.held.append(
            Held(
                start,
                end,
                np.array(
                    [row * width + slot for row, a in zip(rows, assignments, strict=True) for slot, _ in a.accels],
                    np.int64,
                ),
                np.array([milli for a in assignments for _, milli in a.accels], np.int64),
                np.array(rows, np.int64),
                np.array([a.cpu for a in assignments], np.int64),
                np.array([a.memory for a in assignments], np.int64),
            )
        )
        holds = self.holds
        for a in assignments:
            row = self.table.index[a.node]
            milli = sum(m for _, m in a.accels)
            slack = (
                int(state.accel[row].sum()) - milli,
                int(state.cpu[row]) - a.cpu,
                int(state.memory[row]) - a.memory,
            )
            holds.start[row] = min(holds.start[row], start)
            holds.slack_accel[row] = min(int(holds.slack_accel[row]), slack[0])
            holds.slack_cpu[row] = min(int(holds.slack_cpu[row]), slack[1])
            holds.slack_memory[row] = min(int(holds.slack_memory[row]), slack[2])

    def consume(self, assignments: Sequence[Assignment], end: float) -> bool:
        """Charge a job placed now against the holds it overlaps; True if it uses reserved nodes (backfill)."""
        holds = self.holds
        backfilled = False
        for a in assignments:
            row = self.table.index[a.node]
            if holds.start[row] == np.inf:
                continue
            backfilled = True
            if end > holds.start[row]:
                holds.slack_accel[row] -= sum(m for _, m in a.accels)
                holds.slack_cpu[row] -= a.cpu
                holds.slack_memory[row] -= a.memory
        self.release(assignments, end)
        return backfilled


def _settle(state: FreeState, rows: np.ndarray) -> None:
    """After taking reservations off their recorded accelerators, move any shortfall (an accelerator that a
    job backfilled onto since) to the node's other accelerators, fullest first: a reservation holds so
    many accelerators of a node, not those exact ones."""
    accel = state.accel
    for row in rows[(accel[rows] < 0).any(axis=1)]:
        g = accel[row]
        short = int(-g[g < 0].sum())
        g[g < 0] = 0
        for slot in np.argsort(-g, kind="stable"):
            take = min(short, int(g[slot]))
            g[slot] -= take
            short -= take
            if not short:
                break
        # Anything still short means the node is over-promised: leave it at 0 free (never negative).
    state.whole[rows] = (accel[rows] == WHOLE).sum(axis=1)
