"""FGD's fragmentation measure: the published mean over the mix, and ours, which judges a node by the part
of the workload that suits it best (``Fragmentation._combine``)."""

from __future__ import annotations

import numpy as np
import pytest

from scheduler.engine.fgd import Fragmentation, MixEntry, Shape
from scheduler.engine.model import WHOLE, Cluster, Node
from scheduler.engine.nodes import NodeTable

LEAN = Shape(1, WHOLE, 4000, 1024)  # a whole GPU and 4 cores
HUNGRY = Shape(1, WHOLE, 11000, 1024)  # a whole GPU and 11 cores
HALF = Shape(1, 500, 2000, 1024)  # half a GPU and 2 cores


def _table() -> NodeTable:
    """A CPU-poor node left with one GPU and 5 cores (a hungry pod took the other), and an idle 8-GPU node
    with 12 cores per GPU."""
    poor = Node("poor", "c", "gpu", (0, WHOLE), 5000, 65536, 16000, 65536)
    rich = Node("rich", "c", "gpu", (WHOLE,) * 8, 96000, 393216, 96000, 393216)
    return NodeTable([Cluster("c", "r")], [poor, rich])


def _fragmentation(table: NodeTable, suited: float = 1.0, whole_mix: float = 0.0) -> Fragmentation:
    everywhere = np.ones(len(table), np.bool_)
    mix = [MixEntry(LEAN, 0.3, everywhere), MixEntry(HUNGRY, 0.5, everywhere), MixEntry(HALF, 0.2, everywhere)]
    return Fragmentation(table, mix, suited=suited, whole_mix=whole_mix)


def test_the_published_measure_is_the_mean_over_the_mix() -> None:
    frag = _fragmentation(_table())
    left = np.array([[0.0, 1000.0, 0.0], [770.0, 770.0, 270.0]])
    assert frag._combine(left) == pytest.approx([500.0, 670.0])


def test_ours_is_the_mean_over_the_best_suited_part_plus_some_of_the_whole_mix() -> None:
    frag = _fragmentation(_table(), suited=0.25, whole_mix=0.3)
    left = np.array([[0.0, 1000.0, 0.0], [770.0, 770.0, 270.0]])
    # Best-suited quarter: HALF (0.2) then LEAN (0.05 of its 0.3); plus 0.3 times the mean.
    assert frag._combine(left) == pytest.approx([0.0 + 0.3 * 500, (0.2 * 270 + 0.05 * 770) / 0.25 + 0.3 * 670])


def test_a_lean_share_leaves_a_cpu_poor_node_to_the_lean_pods_that_can_fill_it() -> None:
    """A share asking 4 cores, placed on the CPU-poor node, leaves its last GPU with one core: stranded for
    every shape. The published mean counts that GPU as mostly lost already (hungry pods could not use it)
    and sends the share there; ours sees that lean pods would have used all of it, and breaks a GPU of the
    roomy node instead, whose remainder half-GPU pods still fill."""
    table = _table()
    share = Shape(1, 230, 4000, 1024)
    rows = np.arange(len(table))
    published, _ = _fragmentation(table).score(table.free, rows, share, None)
    ours, _ = _fragmentation(table, suited=0.25, whole_mix=0.3).score(table.free, rows, share, None)
    assert table.names[int(np.argmin(published))] == "poor"
    assert table.names[int(np.argmin(ours))] == "rich"
