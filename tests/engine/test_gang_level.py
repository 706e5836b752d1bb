"""A cluster whose gangs may not straddle a level's domains (``Cluster.gang_level``, Slurm's topology/block):
a gang one domain could hold is placed in one or waits; a bigger one spans, as Slurm lets it."""

from __future__ import annotations

from scheduler.engine import schedule
from scheduler.engine.model import Cluster, PendingReason

from .test_phases import admitted, job, node, queue, reasons, snapshot

BLOCKS = (Cluster("c1", "eu", ("block", "rack"), gang_level="block"),)
ANY_SPREAD = (Cluster("c1", "eu", ("block", "rack")),)


def blocks_of(decisions: object, job_id: str, fleet: tuple[object, ...]) -> set[str]:
    block = {n.name: n.topology[0] for n in fleet}  # type: ignore[attr-defined]
    return {block[a.node] for a in admitted(decisions)[job_id].assignments}  # type: ignore[attr-defined]


def two_blocks_of_two(free: tuple[int, int, int, int]) -> tuple[object, ...]:
    """Nodes n1, n2 in block b1 and n3, n4 in b2, with ``free`` GPUs each."""
    names = (("n1", "b1"), ("n2", "b1"), ("n3", "b2"), ("n4", "b2"))
    return tuple(node(n, free=f, block=b, rack=f"r-{n}") for (n, b), f in zip(names, free, strict=True))


def test_it_waits_rather_than_straddle_two_blocks_when_one_could_hold_it():
    # Where one block has room the engine's compact descent already keeps a gang in it; the rule matters when
    # no block has room now: without it the gang would straddle two (and Slurm would refuse the node list).
    fleet = two_blocks_of_two((0, 8, 8, 0))  # room for two workers, but one in each block
    asks = (job("j", workers=2, accelerators=8),)
    d = schedule(snapshot(fleet, (queue("a"),), asks, clusters=BLOCKS))  # type: ignore[arg-type]
    assert "j" not in admitted(d)
    assert reasons(d)["j"] is not PendingReason.NEVER_FITS  # it waits for room in one block
    # The same fleet without the rule spreads it over both blocks.
    spread = schedule(snapshot(fleet, (queue("a"),), asks, clusters=ANY_SPREAD))  # type: ignore[arg-type]
    assert blocks_of(spread, "j", fleet) == {"b1", "b2"}


def test_a_gang_bigger_than_every_block_spans_blocks():
    fleet = two_blocks_of_two((8, 8, 8, 8))
    asks = (job("j", workers=3, accelerators=8),)
    d = schedule(snapshot(fleet, (queue("a"),), asks, clusters=BLOCKS))  # type: ignore[arg-type]
    assert blocks_of(d, "j", fleet) == {"b1", "b2"}


def test_the_snapshot_sets_the_rule_for_slurm_block_topology_only():
    from clusters.capabilities import gang_level

    assert gang_level("slurm", ["block"]) == "block"
    assert gang_level("slurm", ["spine", "leaf"]) == ""  # topology/tree places across switches
    assert gang_level("kubernetes", ["block", "rack"]) == ""  # an admin's levels: no such rule
