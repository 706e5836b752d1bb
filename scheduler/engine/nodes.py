"""The fleet as numpy arrays (struct of arrays, docs/scheduling.md §Bounded work and speed), mutated as the
cycle places jobs.

One row per node, sorted by (cluster, name) so that ties between equal nodes always break the same way.
Accelerators are a 2-D array of free milli per accelerator, padded with 0 for nodes with fewer of them
(a padded slot never fits anything, because every request asks for at least 1 milli).
"""

from __future__ import annotations

import bisect
import math
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from .model import WHOLE, Assignment, Cluster, Node

IntArray = npt.NDArray[np.int64]
BoolArray = npt.NDArray[np.bool_]
FloatArray = npt.NDArray[np.float64]


@dataclass(slots=True)
class FreeState:
    """Free resources per node; the placement functions read one of these (now, or at a future time)."""

    accel: IntArray  # (nodes, max accelerators) free milli
    cpu: IntArray
    memory: IntArray
    #: Whole free accelerators per node, kept up to date by ``NodeTable.take`` (most jobs ask for whole ones).
    whole: IntArray = field(init=False)

    def __post_init__(self) -> None:
        self.whole = (self.accel == WHOLE).sum(axis=1)

    def copy(self) -> FreeState:
        state = FreeState.__new__(FreeState)  # skips counting ``whole`` again
        state.accel, state.cpu, state.memory, state.whole = (
            self.accel.copy(),
            self.cpu.copy(),
            self.memory.copy(),
            self.whole.copy(),
        )
        return state

    def recount(self, rows: IntArray) -> None:
        """Bring ``whole`` up to date on ``rows`` after changing their accelerators directly."""
        self.whole[rows] = (self.accel[rows] == WHOLE).sum(axis=1)


#: What decides the nodes a job may use beyond its flavor and cluster (``NodeTable.reach``).
Reach = tuple[str, str, bool, int]
#: A job that asks for nothing of the kind: no slice shape, no lent nodes, no spot, no time limit past a horizon.
ANY_REACH: Reach = ("", "", False, 0)


class NodeTable:
    def __init__(self, clusters: Sequence[Cluster], nodes: Sequence[Node]) -> None:
        self.clusters = sorted(clusters, key=lambda c: c.name)
        self.cluster_index = {c.name: i for i, c in enumerate(self.clusters)}
        ordered = sorted(nodes, key=lambda n: (self.cluster_index.get(n.cluster, -1), n.name))
        unknown = {n.cluster for n in ordered} - set(self.cluster_index)
        if unknown:
            raise ValueError(f"nodes refer to unknown clusters: {sorted(unknown)}")
        self.names = [n.name for n in ordered]
        self.index = {name: i for i, name in enumerate(self.names)}
        if len(self.index) != len(self.names):
            raise ValueError("node names must be unique")
        self.flavors = sorted({n.flavor for n in ordered})
        self.flavor_index = {f: i for i, f in enumerate(self.flavors)}
        count = len(ordered)
        self.accel_count = np.fromiter((len(n.accel_free) for n in ordered), np.int64, count)
        width = int(self.accel_count.max(initial=0)) or 1
        self.cluster = np.fromiter((self.cluster_index[n.cluster] for n in ordered), np.int64, count)
        self.flavor = np.fromiter((self.flavor_index[n.flavor] for n in ordered), np.int64, count)
        self.usable = np.fromiter((n.healthy and n.schedulable for n in ordered), np.bool_, count)
        self.price = np.fromiter((n.price_per_accel_hour for n in ordered), np.float64, count)
        #: Each node's slice shape ("" for nodes that are not TPU slices), for ``shaped``.
        self.shape = np.array([n.shape for n in ordered], dtype=np.str_) if count else np.zeros(0, np.str_)
        #: The team each node is lent to ("" for every team), and the teams that have any, for ``shaped``.
        self.team = np.array([n.team for n in ordered], dtype=np.str_) if count else np.zeros(0, np.str_)
        self.lent_to = frozenset(n.team for n in ordered if n.team)
        #: Which nodes are spot capacity, for ``shaped``; whether any is.
        self.spot = np.fromiter((n.spot for n in ordered), np.bool_, count)
        self.has_spot = bool(self.spot.any())
        #: The longest time limit each node takes now (``Node.horizon``), and the finite ones, sorted.
        self.horizon = np.fromiter((n.horizon for n in ordered), np.float64, count)
        self.horizons = sorted({float(h) for h in self.horizon if math.isfinite(h)})
        padding = (0,) * width
        accel = np.array([(n.accel_free + padding)[:width] for n in ordered], np.int64).reshape(count, width)
        self.free = FreeState(
            accel,
            np.fromiter((n.cpu_free for n in ordered), np.int64, count),
            np.fromiter((n.memory_free for n in ordered), np.int64, count),
        )
        #: What an empty node would offer: used to tell "not now" from "never".
        self.empty = FreeState(
            np.where(np.arange(width)[None, :] < self.accel_count[:, None], WHOLE, 0).astype(np.int64),
            np.fromiter((n.cpu_capacity for n in ordered), np.int64, count),
            np.fromiter((n.memory_capacity for n in ordered), np.int64, count),
        )
        # Topology: one column per distinct level name; a domain id is unique per (cluster, path to it).
        self.level_names = sorted({level for c in self.clusters for level in c.levels})
        self.level_index = {name: i for i, name in enumerate(self.level_names)}
        self.domain = np.full((count, max(1, len(self.level_names))), -1, np.int64)
        columns = {c.name: [self.level_index[level] for level in c.levels] for c in self.clusters}
        paths: defaultdict[tuple[str, ...], list[int]] = defaultdict(list)  # path to a domain: its rows
        for i, n in enumerate(ordered):
            if len(n.topology) != len(columns[n.cluster]):
                raise ValueError(f"node {n.name}: topology {n.topology} does not match its cluster's levels")
            for depth in range(len(n.topology)):
                paths[(n.cluster, *n.topology[: depth + 1])].append(i)
        for domain, path in enumerate(sorted(paths)):
            self.domain[paths[path], columns[path[0]][len(path) - 2]] = domain
        # Node rows of each (flavor, cluster), the unit of routing.
        self.groups: dict[tuple[int, int], IntArray] = {}
        keys = self.flavor * len(self.clusters) + self.cluster
        for key in np.unique(keys):
            rows = np.flatnonzero(keys == key)
            self.groups[(int(key) // len(self.clusters), int(key) % len(self.clusters))] = rows
        self._flavor_rows: dict[int, IntArray] = {}
        #: Bumped whenever a node's free resources change, so per-node caches know what to recompute;
        #: ``group_version`` likewise per (flavor, cluster).
        self.version = np.zeros(count, np.int64)
        self.group_version = np.zeros((len(self.flavors), len(self.clusters)), np.int64)

    def __len__(self) -> int:
        return len(self.names)

    def rows(self, flavor: str, cluster: int) -> IntArray | None:
        f = self.flavor_index.get(flavor)
        return None if f is None else self.groups.get((f, cluster))

    def shaped(self, rows: IntArray, shape: str, team: str = "", spot: bool = False, beyond: int = 0) -> IntArray:
        """Those of ``rows`` a job asking for slice ``shape`` may use: nodes of exactly that shape, or of that
        type with any topology when ``shape`` names no topology (``"v5p-32"`` takes ``"v5p-32/2x2x4"``);
        for a job with no shape, the nodes without one. A slice is the unit: it runs only jobs asking for it.
        Of those, the nodes lent to no team, and those lent to ``team``; spot nodes only if ``spot``; and none
        of the ``beyond`` shortest horizons (its time limit is past them)."""
        shapes = self.shape[rows]
        if not shape:
            keep = shapes == ""
        elif "/" in shape:
            keep = shapes == shape
        else:
            keep = (shapes == shape) | np.char.startswith(shapes, shape + "/")
        if self.lent_to:
            teams = self.team[rows]
            keep &= (teams == "") | (teams == team)
        if self.has_spot and not spot:
            keep &= ~self.spot[rows]
        if beyond:
            keep &= self.horizon[rows] >= (self.horizons[beyond] if beyond < len(self.horizons) else math.inf)
        kept: IntArray = rows[keep]
        return kept

    def reach(self, shape: str, team: str, spot: bool = False, time_limit: float = 0.0) -> Reach:
        """What decides the nodes a job may use beyond its flavor and cluster: its slice shape, its team where
        some node is lent to that team ("" otherwise, so that jobs of other teams share every cache keyed by it),
        whether it accepts spot where some node is spot, and how many nodes' horizons its time limit is past
        (jobs past the same ones may use the same nodes)."""
        beyond = bisect.bisect_left(self.horizons, time_limit) if self.horizons else 0
        return shape, team if team in self.lent_to else "", spot and self.has_spot, beyond

    def rows_of_flavor(self, flavor: int) -> IntArray:
        """Every node row of a flavor, in every cluster."""
        rows = self._flavor_rows.get(flavor)
        if rows is None:
            rows = self._flavor_rows[flavor] = np.flatnonzero(self.flavor == flavor)
        return rows

    def clusters_of(self, flavor: str) -> list[int]:
        f = self.flavor_index.get(flavor)
        return [] if f is None else sorted(c for (fl, c) in self.groups if fl == f)

    def take(self, state: FreeState, assignments: Sequence[Assignment], sign: int = -1) -> None:
        """Subtract (sign -1) or give back (+1) what ``assignments`` hold, in ``state``."""
        for a in assignments:
            row = self.index.get(a.node)
            if row is None:
                continue  # a node that left the fleet: nothing to give back here
            for slot, milli in a.accels:
                state.accel[row, slot] += sign * milli
            state.whole[row] = int((state.accel[row] == WHOLE).sum())
            state.cpu[row] += sign * a.cpu
            state.memory[row] += sign * a.memory
            if state is self.free:
                self.version[row] += 1
                self.group_version[self.flavor[row], self.cluster[row]] += 1
