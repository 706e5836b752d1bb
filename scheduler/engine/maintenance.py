"""Maintenance windows and bookings as the cycle sees them (docs/scheduling.md §Maintenance, §Bookings).

A window takes some nodes of a cluster (or all of them) out of service from its start to its end; a booking
is a window for every team but the one that booked it. The cycle asks two questions of them: which of a
group's nodes are closed to a job of a team that would run from ``t`` to ``end`` (``closed``), and which
window is the first to keep a job off a set of clusters (``first``, for the pending message). A fleet
without windows costs one falsy test per placement (``by_cluster`` is empty).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Sequence

import numpy as np

from .model import Booking
from .model import Maintenance as Planned
from .nodes import BoolArray, IntArray, NodeTable

Window = Planned | Booking


def _open_to(window: Window, team: str) -> bool:
    """Whether ``window`` leaves its nodes to jobs of ``team`` (a booking, to the team that booked it)."""
    return bool(team) and isinstance(window, Booking) and window.team == team


class Maintenance:
    def __init__(self, table: NodeTable, windows: Sequence[Window], now: float) -> None:
        #: Per cluster: (window, its node rows, or None for every node), for windows not yet ended.
        self.by_cluster: dict[int, list[tuple[Window, IntArray | None]]] = defaultdict(list)
        #: Per flavor: when windows on its nodes end (reservations are searched from these times too).
        self.ends: dict[int, list[float]] = defaultdict(list)
        #: The teams with bookings: a job's team matters to where it may go (``Router.reach``).
        self.booked_for = frozenset(w.team for w in windows if isinstance(w, Booking) and w.end > now)
        for window in windows:
            c = table.cluster_index.get(window.cluster)
            if c is None or window.end <= now or window.end <= window.start:
                continue
            if window.nodes:
                rows = np.array(sorted({table.index[n] for n in window.nodes if n in table.index}), np.int64)
                if not len(rows):
                    continue
                self.by_cluster[c].append((window, rows))
                touched = rows
            else:
                self.by_cluster[c].append((window, None))
                touched = np.flatnonzero(table.cluster == c)
            for flavor in np.unique(table.flavor[touched]).tolist():
                self.ends[int(flavor)].append(window.end)
        self.by_cluster = dict(self.by_cluster)
        self.ends = dict(self.ends)

    def closed(self, cluster: int, rows: IntArray, t: float, end: float, team: str = "") -> BoolArray | None:
        """Which of ``rows`` (nodes of ``cluster``) are closed at some time in ``[t, end)`` to a job of
        ``team``; None when none are."""
        closed: BoolArray | None = None
        for window, window_rows in self.by_cluster.get(cluster, ()):
            if window.start < end and t < window.end and not _open_to(window, team):
                if window_rows is None:
                    return np.ones(len(rows), np.bool_)
                hit = np.isin(rows, window_rows)
                closed = hit if closed is None else closed | hit
        return closed if closed is not None and closed.any() else None

    def first(self, clusters: Iterable[int], t: float, end: float, team: str = "") -> Window | None:
        """The earliest-starting window on ``clusters`` closed to ``team`` that overlaps ``[t, end)``, or None."""
        found = [
            window
            for c in clusters
            for window, _ in self.by_cluster.get(c, ())
            if window.start < end and t < window.end and not _open_to(window, team)
        ]
        return min(found, key=lambda w: (w.start, w.cluster)) if found else None
