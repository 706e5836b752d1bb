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


def _fragmentation(
    table: NodeTable, suited: float = 1.0, whole_mix: float = 0.0, remainder: float | None = None
) -> Fragmentation:
    everywhere = np.ones(len(table), np.bool_)
    mix = [MixEntry(LEAN, 0.3, everywhere), MixEntry(HUNGRY, 0.5, everywhere), MixEntry(HALF, 0.2, everywhere)]
    return Fragmentation(table, mix, suited=suited, whole_mix=whole_mix, remainder=remainder)


def test_the_published_measure_is_the_mean_over_the_mix() -> None:
    frag = _fragmentation(_table())
    left = np.array([[0.0, 1000.0, 0.0], [770.0, 770.0, 270.0]])
    assert frag._combine(left) == pytest.approx([500.0, 670.0])


def test_ours_is_the_mean_over_the_best_suited_part_plus_some_of_the_whole_mix() -> None:
    frag = _fragmentation(_table(), suited=0.25, whole_mix=0.3, remainder=0.0)
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


def test_a_share_keeps_a_remainder_for_the_common_pod_that_fills_it() -> None:
    """One node's last GPU has 530 milli free beside a 470 pod; the other node has a whole GPU free. A 320
    share in the remainder would leave 210, which no shape of the mix uses, while a 470 pod would fill it
    (60 left). Counting a partly used GPU as lost to whole-GPU pods, both node-level measures score
    shrinking it as the cheaper move and put the share there; judging the GPU by the work that suits it (a
    470 pod), ours starts the whole GPU instead (680 left: two more 320 shares fit it)."""
    rows = np.arange(2)
    table = NodeTable(
        [Cluster("c", "r")],
        [
            Node("used", "c", "gpu", (530, 0), 64000, 262144, 64000, 262144),
            Node("fresh", "c", "gpu", (WHOLE, 0), 64000, 262144, 64000, 262144),
        ],
    )
    everywhere = np.ones(len(table), np.bool_)
    shapes = (Shape(1, WHOLE, 4000, 1024), Shape(1, 470, 2000, 1024), Shape(1, 320, 2000, 1024))
    mix = [MixEntry(shape, p, everywhere) for shape, p in zip(shapes, (0.5, 0.3, 0.2), strict=True)]
    share = shapes[2]

    def chosen(frag: Fragmentation) -> str:
        delta, _ = frag.score(table.free, rows, share, None)
        return table.names[int(np.argmin(delta))]

    published = Fragmentation(table, mix)
    assert published.remainder == 0.0
    assert chosen(published) == "used"
    assert chosen(Fragmentation(table, mix, suited=0.25, whole_mix=0.3, remainder=0.0)) == "used"
    ours = Fragmentation(table, mix, suited=0.25, whole_mix=0.3)
    # What a GPU's free milli is worth to the work that suits it best: the 470 pod leaves 60 of 530;
    # nothing fits 210; two 320 shares leave 40 of 680; a whole GPU takes a whole-GPU pod.
    assert ours._remainder_left[[530, 210, 680, WHOLE]] == pytest.approx([60, 210, 40, 0])
    assert chosen(ours) == "fresh"
