"""Maintenance windows as the cycle sees them (docs/scheduling.md §Maintenance).

A window takes some nodes of a cluster (or all of them) out of service from its start to its end. The
cycle asks two questions of it: which of a group's nodes are closed to a job that would run from ``t`` to
``end`` (``closed``), and which window is the first to keep a job off a set of clusters (``first``, for the
pending message). A fleet without windows costs one falsy test per placement (``by_cluster`` is empty).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Sequence

import numpy as np

from .model import Maintenance as Window
from .nodes import BoolArray, IntArray, NodeTable


class Maintenance:
    def __init__(self, table: NodeTable, windows: Sequence[Window], now: float) -> None:
        #: Per cluster: (window, its node rows, or None for every node), for windows not yet ended.
        self.by_cluster: dict[int, list[tuple[Window, IntArray | None]]] = defaultdict(list)
        #: Per flavor: when windows on its nodes end (reservations are searched from these times too).
        self.ends: dict[int, list[float]] = defaultdict(list)
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

    def closed(self, cluster: int, rows: IntArray, t: float, end: float) -> BoolArray | None:
        """Which of ``rows`` (nodes of ``cluster``) are under maintenance at some time in ``[t, end)``;
        None when none are."""
        closed: BoolArray | None = None
        for window, window_rows in self.by_cluster.get(cluster, ()):
            if window.start < end and t < window.end:
                if window_rows is None:
                    return np.ones(len(rows), np.bool_)
                hit = np.isin(rows, window_rows)
                closed = hit if closed is None else closed | hit
        return closed if closed is not None and closed.any() else None

    def first(self, clusters: Iterable[int], t: float, end: float) -> Window | None:
        """The earliest-starting window on ``clusters`` that overlaps ``[t, end)``, or None."""
        found = [
            window
            for c in clusters
            for window, _ in self.by_cluster.get(c, ())
            if window.start < end and t < window.end
        ]
        return min(found, key=lambda w: (w.start, w.cluster)) if found else None
