"""Backfill with reservations (Slurm's backfill scheduler, docs/scheduling.md §Backfill and reservations).

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
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from .model import Assignment
from .nodes import FreeState, NodeTable
from .placement import Holds
from .running import RunningWork


class _Columns:
    """Release entries of one kind as parallel columns, the end time first."""

    def __init__(self, width: int) -> None:
        self.columns: list[list[float]] = [[] for _ in range(width)]

    def arrays(self) -> tuple[np.ndarray, ...]:
        return (np.asarray(self.columns[0], np.float64), *(np.asarray(c, np.int64) for c in self.columns[1:]))


Part = tuple[tuple[np.ndarray, ...], tuple[np.ndarray, ...]]  # (accelerator entries, host entries)


class _Releases:
    """What the nodes of one flavor get back as work ends, in two parts: the snapshot's running work,
    sorted by end time once, and what this cycle admits (a few hundred entries, kept apart so that an
    admission never re-sorts the rest). Accelerator shares are (end, cell = row * width + slot, milli);
    host resources are (end, row, cpu, memory)."""

    def __init__(self) -> None:
        self.accel, self.host = _Columns(3), _Columns(4)
        self.base: Part | None = None  # the snapshot's running work, once read
        self.added: Part | None = None
        self.base_times: np.ndarray | None = None
        self.times: list[float] | None = None

    def record(self, end: float, row: int, width: int, assignment: Assignment) -> None:
        ends, cells, milli = self.accel.columns
        shares = assignment.accels
        ends.extend([end] * len(shares))
        cells.extend([row * width + slot for slot, _ in shares])
        milli.extend([share for _, share in shares])
        for column, value in zip(self.host.columns, (end, row, assignment.cpu, assignment.memory), strict=True):
            column.append(value)
        self.added = None
        self.times = None

    def load(self, base: Part) -> None:
        """The snapshot's running work, sorted by end time."""
        self.base = base
        self.times = None

    def at(self, t: float) -> list[Part]:
        """The entries that have ended by ``t``: a prefix of the sorted base, and the admissions' that have."""
        assert self.base is not None
        if self.added is None:
            self.added = (self.accel.arrays(), self.host.arrays())
        (ends, *accel), (host_ends, *host) = self.base
        k, h = int(np.searchsorted(ends, t, side="right")), int(np.searchsorted(host_ends, t, side="right"))
        base = ((ends[:k], *(c[:k] for c in accel)), (host_ends[:h], *(c[:h] for c in host)))
        (ends, *accel), (host_ends, *host) = self.added
        ended, host_ended = ends <= t, host_ends <= t
        added = ((ends[ended], *(c[ended] for c in accel)), (host_ends[host_ended], *(c[host_ended] for c in host)))
        return [base, added]

    def later_times(self, now: float, window: int, quantum: int) -> list[float]:
        """When capacity frees up after the window, rounded up to the quantum (for estimates only)."""
        assert self.base is not None
        ends = np.concatenate([self.base[1][0], np.asarray(self.host.columns[0], np.float64)])
        return [float(t) for t in np.unique(np.ceil(ends[ends > now + window] / quantum) * quantum)]

    def candidate_times(self, now: float, window: int, quantum: int) -> list[float]:
        """When capacity frees up within the window, rounded up to the quantum (at most window / quantum)."""
        if self.times is None:
            assert self.base is not None

            def rounded(ends: np.ndarray) -> np.ndarray:
                return np.unique(np.ceil(ends[(ends > now) & (ends <= now + window)] / quantum) * quantum)

            if self.base_times is None:
                self.base_times = rounded(self.base[1][0])  # one host entry per assignment
            added = np.asarray(self.host.columns[0], np.float64)
            self.times = [float(t) for t in np.union1d(self.base_times, rounded(added))]
        return self.times


@dataclass(frozen=True, slots=True)
class Held:
    """A reservation's resources as flat arrays, ready to subtract from a future state."""

    flavor: int
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
        running: RunningWork,
        maintenance_ends: dict[int, list[float]] | None = None,
    ) -> None:
        self.table = table
        self._running = running  # its releases are read per flavor on first use
        self.now = now
        self.window = window
        self.quantum = quantum
        self.holds = Holds.none(len(table))
        self.held: list[Held] = []
        self._releases: dict[int, _Releases] = defaultdict(_Releases)
        self._width = table.free.accel.shape[1]
        self._ended: dict[tuple[int, float], tuple[int, np.ndarray, np.ndarray, np.ndarray, np.ndarray]] = {}
        #: Per flavor, when maintenance windows on its nodes end (``maintenance.py``).
        self._maintenance_ends = maintenance_ends or {}

    def release(self, assignments: Sequence[Assignment], end: float) -> None:
        """Record that ``assignments`` give their resources back at ``end``."""
        for a in assignments:
            row = self.table.index.get(a.node)
            if row is not None:
                self._releases[int(self.table.flavor[row])].record(end, row, self._width, a)

    def _of(self, flavor: int) -> _Releases:
        releases = self._releases[flavor]
        if releases.base is None:
            releases.load(self._running.releases(flavor))
        return releases

    def state_at(self, flavor: int, t: float, end: float) -> FreeState:
        """Free resources of the flavor's nodes at time ``t`` for a job running until ``end`` (other rows
        are left as they are now: nothing placed on this flavor reads them).

        Searches for different jobs probe the same release times, so what has ended by ``t`` is kept
        per (flavor, t) until an admission on the flavor changes the free state or the releases."""
        state = self.table.free.copy()
        rows = self.table.rows_of_flavor(flavor)
        version = int(self.table.group_version[flavor].sum())  # bumped by every admission on the flavor
        known = self._ended.get((flavor, t))
        if known is not None and known[0] == version:
            _, state.accel[rows], state.cpu[rows], state.memory[rows], state.whole[rows] = known
        else:
            flat = state.accel.reshape(-1)
            for (_, cells, milli), (_, ended, cpu, memory) in self._of(flavor).at(t):
                np.add.at(flat, cells, milli)
                np.add.at(state.cpu, ended, cpu)
                np.add.at(state.memory, ended, memory)
            state.recount(rows)
            self._ended[(flavor, t)] = (
                version,
                state.accel[rows],
                state.cpu[rows],
                state.memory[rows],
                state.whole[rows],
            )  # (copies: fancy indexing)
        overlapping = [h for h in self.held if h.flavor == flavor and h.start < end and t < h.end]
        if overlapping:
            flat = state.accel.reshape(-1)
            np.subtract.at(
                flat, np.concatenate([h.cells for h in overlapping]), np.concatenate([h.milli for h in overlapping])
            )
            held = np.concatenate([h.rows for h in overlapping])
            np.subtract.at(state.cpu, held, np.concatenate([h.cpu for h in overlapping]))
            np.subtract.at(state.memory, held, np.concatenate([h.memory for h in overlapping]))
            _settle(state, held)
            state.recount(held)
        return state

    def candidate_times(self, flavor: int) -> list[float]:
        """When capacity of a flavor frees up within the window, rounded up to the quantum."""
        return self._of(flavor).candidate_times(self.now, self.window, self.quantum)

    def earliest(
        self, flavor: int, duration: int, room: Callable[[FreeState, float], bool], *, beyond: bool = False
    ) -> float | None:
        """Earliest time in the window at which ``room`` says a job of ``duration`` seconds fits; ``beyond``:
        the earliest after the window, for an estimate (no reservation is planned that far ahead).

        Capacity only grows as work ends, so we binary-search the release times (at most ``probes`` of
        them, evenly spaced, when there are more), then step forward past any time that an earlier
        reservation spoils.
        """
        if beyond:  # after the window: as running work ends, and as the reservations planned here end
            later = self._of(flavor).later_times(self.now, self.window, self.quantum)
            held = {float(np.ceil(h.end / self.quantum) * self.quantum) for h in self.held if h.flavor == flavor}
            times = sorted({*later, *(t for t in held if t > self.now + self.window)})
        else:
            times = self.candidate_times(flavor)
        probes = 32
        if len(times) > probes:
            times = [times[round(i * (len(times) - 1) / (probes - 1))] for i in range(probes)]
        ends = self._maintenance_ends.get(flavor)
        if ends:
            # Maintenance makes room come and go (a job may fit before a window, not across it, and again
            # after it), so a binary search could miss it: try every time in order, the windows' ends too.
            quantum, horizon = self.quantum, self.now + self.window
            after = {float(np.ceil(e / quantum) * quantum) for e in ends}
            times = sorted({*times, *(t for t in after if self.now < t and (beyond or t <= horizon))})
            return next((t for t in times if room(self.state_at(flavor, t, t + duration), t)), None)
        known: dict[int, bool] = {}

        def fits(i: int) -> bool:
            if i not in known:
                t = times[i]
                known[i] = room(self.state_at(flavor, t, t + duration), t)
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
        width = self._width
        rows = [self.table.index[a.node] for a in assignments]
        self.held.append(
            Held(
                int(self.table.flavor[rows[0]]),
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
    many accelerators of a node, not those exact ones. A node still short is over-promised: it is left
    at 0 free (never negative)."""
    short_rows = np.unique(rows[(state.accel[rows] < 0).any(axis=1)])
    if not len(short_rows):
        return
    g = state.accel[short_rows]
    short = -np.minimum(g, 0).sum(axis=1)
    g = np.maximum(g, 0)
    order = np.argsort(-g, axis=1, kind="stable")
    fullest = np.take_along_axis(g, order, axis=1)
    before = np.cumsum(fullest, axis=1) - fullest  # what the fuller accelerators already gave
    taken = np.clip(short[:, None] - before, 0, fullest)
    np.put_along_axis(g, order, fullest - taken, axis=1)
    state.accel[short_rows] = g
