"""Where a job's workers go inside one cluster: fit, topology, packing (docs/scheduling.md §Gangs and
topology, §Fragmentation-aware packing).

- A single worker goes to the node where it raises fragmentation least (FGD), or to the tightest
  node (best fit) when no workload mix is known.
- Several workers (a gang) are placed all-or-nothing by descending the cluster's topology from its widest
  level (Kueue's topology-aware scheduling): at each level take the tightest domain that holds what
  remains, else the roomiest one whole, and so on down to the nodes. A required level first picks the
  tightest single domain at that level that holds every worker; a preferred one falls back a level up.
  Gangs without a topology request descend the same way, so they land as compactly as the fleet allows.
- A Ray job's head is one more member of the gang, with its own shape, placed after the workers: on the
  first worker's node that still has room for it, else on the tightest other node of the same cluster that
  does (``head_row``). Topology binds the workers, not the head (docs/scheduling.md §Ray heads).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .fgd import Fragmentation, Shape
from .model import WHOLE, Assignment, Topology, TopologyMode
from .nodes import FreeState, IntArray, NodeTable

BIG = np.iinfo(np.int64).max // 4


@dataclass(slots=True)
class Holds:
    """Capacity promised to reservations: from ``start`` on, a node keeps only ``slack`` for others."""

    start: np.ndarray
    slack_accel: IntArray
    slack_cpu: IntArray
    slack_memory: IntArray

    @classmethod
    def none(cls, size: int) -> Holds:
        return cls(np.full(size, np.inf), np.full(size, BIG), np.full(size, BIG), np.full(size, BIG))


def worker_fits(state: FreeState, rows: IntArray, shape: Shape) -> IntArray:
    """How many workers of ``shape`` each node in ``rows`` could take."""
    if shape.accelerators == 0:
        fits = np.full(len(rows), BIG)
    elif shape.milli == WHOLE:
        fits = state.whole[rows] // shape.accelerators
    else:
        fits = (state.accel[rows] // shape.milli).sum(axis=1)
    if shape.cpu:
        fits = np.minimum(fits, state.cpu[rows] // shape.cpu)
    if shape.memory:
        fits = np.minimum(fits, state.memory[rows] // shape.memory)
    return fits


def held_fits(holds: Holds, rows: IntArray, shape: Shape, end: float, fits: IntArray) -> IntArray:
    """Limit ``fits`` on nodes whose reservation starts before the job would end (docs/scheduling.md
    §Backfill and reservations)."""
    late = end > holds.start[rows]
    if not late.any():
        return fits
    per_worker = shape.accelerators * shape.milli
    limit = np.full(len(rows), BIG)
    if per_worker:
        limit = np.minimum(limit, holds.slack_accel[rows] // per_worker)
    if shape.cpu:
        limit = np.minimum(limit, holds.slack_cpu[rows] // shape.cpu)
    if shape.memory:
        limit = np.minimum(limit, holds.slack_memory[rows] // shape.memory)
    return np.where(late, np.minimum(fits, np.maximum(limit, 0)), fits)


def _choose(keys: IntArray, capacity: IntArray, need: int) -> list[tuple[int, int]]:
    """Split ``need`` over domains: tightest domain that holds the rest, else the roomiest one whole.

    Returns (position in ``keys``, workers) pairs, or [] when the domains cannot hold ``need``.
    """
    if capacity.sum() < need:
        return []
    left = capacity.astype(np.int64).copy()
    chosen: list[tuple[int, int]] = []
    while need > 0:
        holds_all = np.flatnonzero(left >= need)
        if len(holds_all):
            # Tightest first; among equals the first key (domains and nodes are in name order).
            pos = int(holds_all[np.lexsort((keys[holds_all], left[holds_all]))[0]])
            chosen.append((pos, need))
            break
        candidates = np.flatnonzero(left > 0)
        pos = int(candidates[np.lexsort((keys[candidates], -left[candidates]))[0]])
        chosen.append((pos, int(left[pos])))
        need -= int(left[pos])
        left[pos] = 0
    return chosen


def _descend(table: NodeTable, rows: IntArray, fits: IntArray, columns: list[int], need: int) -> list[tuple[int, int]]:
    """Spread ``need`` workers over ``rows`` level by level; (row, workers) pairs."""
    if not columns:
        return [(int(rows[pos]), count) for pos, count in _choose(rows, fits, need)]
    domains, inverse = np.unique(table.domain[rows, columns[0]], return_inverse=True)
    capacity = np.bincount(inverse, weights=fits, minlength=len(domains)).astype(np.int64)
    result: list[tuple[int, int]] = []
    for pos, count in _choose(domains, capacity, need):
        inside = inverse == pos
        result += _descend(table, rows[inside], fits[inside], columns[1:], count)
    return result


HOST = "host"  # the implicit narrowest level of every cluster: one node


def _domains(
    table: NodeTable, rows: IntArray, fits: IntArray, levels: tuple[str, ...], level: int
) -> tuple[IntArray, IntArray, IntArray]:
    """The domains of ``levels[level]`` (a node at ``len(levels)``, the host level) that ``rows`` fall in:
    (domain ids, each row's position among them, workers each domain can take)."""
    keys = rows if level == len(levels) else table.domain[rows, table.level_index[levels[level]]]
    domains, inverse = np.unique(keys, return_inverse=True)
    return domains, inverse, np.bincount(inverse, weights=fits, minlength=len(domains)).astype(np.int64)


def spread(
    table: NodeTable, rows: IntArray, fits: IntArray, levels: tuple[str, ...], topology: Topology | None, need: int
) -> list[tuple[int, int]] | None:
    """Place ``need`` workers on ``rows`` (one cluster, whose levels are ``levels``), or None."""
    has = fits > 0
    rows, fits = rows[has], np.minimum(fits[has], need)
    if fits.sum() < need:
        return None
    columns = [table.level_index[level] for level in levels]
    named = (*levels, HOST)
    if topology is not None and topology.level in named:
        depth = named.index(topology.level)
        # A required level must hold every worker in one domain; a preferred one tries wider levels next.
        tries = [depth] if topology.mode is TopologyMode.REQUIRED else list(range(depth, -1, -1))
        for level in tries:
            domains, inverse, capacity = _domains(table, rows, fits, levels, level)
            fitting = np.flatnonzero(capacity >= need)
            if len(fitting):
                pos = int(fitting[np.lexsort((domains[fitting], capacity[fitting]))[0]])
                inside = inverse == pos
                return _descend(table, rows[inside], fits[inside], columns[level + 1 :], need)
        if topology.mode is TopologyMode.REQUIRED:
            return None
    elif topology is not None and topology.mode is TopologyMode.REQUIRED:
        return None  # the cluster has no such level
    return _descend(table, rows, fits, columns, need) or None


def can_spread(
    table: NodeTable, rows: IntArray, fits: IntArray, levels: tuple[str, ...], topology: Topology | None, need: int
) -> bool:
    """Whether ``spread`` would place the workers, without choosing where: enough room in all, and in one
    domain of a required level (with room in all, the descent itself never fails)."""
    fits = np.clip(fits, 0, need)
    if fits.sum() < need:
        return False
    if topology is None or topology.mode is not TopologyMode.REQUIRED:
        return True
    named = (*levels, HOST)
    if topology.level not in named:
        return False
    return bool((_domains(table, rows, fits, levels, named.index(topology.level))[2] >= need).any())


def lacks_level(levels: tuple[str, ...], topology: Topology | None) -> bool:
    """True when a *required* topology names a level this cluster does not have: nothing may run there."""
    return (
        topology is not None
        and topology.mode is TopologyMode.REQUIRED
        and topology.level != HOST
        and topology.level not in levels
    )


def pick_single(
    state: FreeState,
    rows: IntArray,
    fits: IntArray,
    shape: Shape,
    fragmentation: Fragmentation | None,
    group: tuple[int, int],
) -> tuple[int, int, float | None] | None:
    """(row, accelerator slot for a fractional share, increase in fragmentation if scored) of the best node
    for one worker, or None."""
    ok = np.flatnonzero(fits > 0)
    if not len(ok):
        return None
    # Counting every worker, a job without accelerators fragments too: its CPU and memory strand them.
    if fragmentation is not None and fragmentation.mix and (shape.accelerators or fragmentation.every_worker):
        if len(ok) <= 512 and not fragmentation.cached(shape, group):  # few nodes have room: score just those
            delta, slots = fragmentation.score(state, rows[ok], shape, None)
        else:  # many: score the whole group through the per-node cache, then keep the ones with room
            all_delta, all_slots = fragmentation.score(state, rows, shape, group)
            delta, slots = all_delta[ok], all_slots[ok]
        # Least fragmentation; among equals the least free accelerators left; then node order.
        tied = np.flatnonzero(delta <= delta.min() + 1e-6)
        best = tied[np.argmin(state.accel[rows[ok[tied]]].sum(axis=1))]
        return int(rows[ok[best]]), int(slots[best]), float(delta[best])
    # Best fit: the node left with the least free accelerators, then CPU, then memory.
    sub = rows[ok]
    order = np.lexsort((sub, state.memory[sub], state.cpu[sub], state.accel[sub].sum(axis=1)))
    row = int(sub[order[0]])
    slot = _tightest_slot(state.accel[row], shape.milli) if shape.fractional else -1
    return row, slot, None


def _tightest_slot(g: IntArray, milli: int) -> int:
    room = np.where(g >= milli, g, BIG)
    return int(np.argmin(room))


def accelerator_slots(state: FreeState, row: int, shape: Shape, workers: int, first: int = -1) -> list[tuple[int, int]]:
    """Which accelerators ``workers`` workers of ``shape`` take on ``row``: (slot, milli) pairs."""
    if shape.accelerators == 0:
        return []
    g = state.accel[row].copy()
    taken: list[tuple[int, int]] = []
    if not shape.fractional:
        full = np.flatnonzero(g == WHOLE)[: workers * shape.accelerators]
        return [(int(slot), WHOLE) for slot in full]
    for n in range(workers):
        slot = first if n == 0 and first >= 0 else _tightest_slot(g, shape.milli)
        g[slot] -= shape.milli
        taken.append((slot, shape.milli))
    return taken


def _left_after(state: FreeState, row: int, shape: Shape, workers: int, first: int) -> tuple[IntArray, int, int]:
    """What ``row`` has left once ``workers`` workers of ``shape`` are on it: (accelerators, CPU, memory)."""
    accel = state.accel[row].copy()
    for slot, milli in accelerator_slots(state, row, shape, workers, first):
        accel[slot] -= milli
    return accel, int(state.cpu[row]) - workers * shape.cpu, int(state.memory[row]) - workers * shape.memory


def head_row(
    state: FreeState,
    rows: IntArray,
    room: IntArray,
    pairs: list[tuple[int, int]],
    worker: Shape,
    first: int,
    head: Shape,
) -> int:
    """The node row for a gang's head of shape ``head`` (whole accelerators), the workers being on
    ``pairs``: the first worker node with room left for it, else the tightest node of ``rows`` (where
    ``room``, the heads each could take, is positive) without workers; -1 where none has room."""
    placed = dict(pairs)
    for row, count in pairs:
        position = np.flatnonzero(rows == row)
        if not len(position) or room[position[0]] <= 0:
            continue  # closed, or held for a reservation, or too small for the head even when idle
        accel, cpu, memory = _left_after(state, row, worker, count, first)
        if int((accel == WHOLE).sum()) >= head.accelerators and cpu >= head.cpu and memory >= head.memory:
            return row
    free = (room > 0) & ~np.isin(rows, np.fromiter(placed, np.int64, len(placed)))
    if not free.any():
        return -1
    sub = rows[free]
    order = np.lexsort((sub, state.memory[sub], state.cpu[sub], state.accel[sub].sum(axis=1)))
    return int(sub[order[0]])


def with_head(
    node: str, assignments: tuple[Assignment, ...], head: tuple[int, int, int], free: IntArray
) -> tuple[Assignment, ...]:
    """``assignments`` with the head (accelerators, millicores, MiB) added on ``node``, whose free
    accelerators before the workers took theirs are ``free``: to its workers' assignment there (one row a
    node), else as an assignment of no workers."""
    accelerators, cpu, memory = head
    for i, a in enumerate(assignments):
        if a.node == node:
            left = free.copy()
            for slot, milli in a.accels:
                left[slot] -= milli
            slots = [(int(slot), WHOLE) for slot in np.flatnonzero(left == WHOLE)[:accelerators]]
            merged = Assignment(node, a.workers, a.accels + tuple(slots), a.cpu + cpu, a.memory + memory)
            return (*assignments[:i], merged, *assignments[i + 1 :])
    slots = [(int(slot), WHOLE) for slot in np.flatnonzero(free == WHOLE)[:accelerators]]
    return (*assignments, Assignment(node, 0, tuple(slots), cpu, memory))
