"""Spread groups (a service's replicas): jobs of one group prefer nodes none of the group holds, softly, and
among clusters that score the same the one holding fewest of the group (scheduler/engine/cycle.py, step 6)."""

from __future__ import annotations

from scheduler.engine import schedule
from scheduler.engine.model import (
    Assignment,
    Cluster,
    Cohort,
    Job,
    Node,
    Queue,
    Quota,
    Snapshot,
    Tier,
    Workload,
)
from tests.engine.invariants import check
from tests.engine.strategies import NOW

H100 = "h100"


def fleet(clusters: tuple[str, ...] = ("c0",), per_cluster: int = 3) -> tuple[Node, ...]:
    return tuple(
        Node(f"{c}-n{i}", c, H100, (1000,) * 8, 64_000, 262_144, 64_000, 262_144)
        for c in clusters
        for i in range(per_cluster)
    )


def snapshot(*pending: Job, nodes: tuple[Node, ...], running: tuple[Workload, ...] = ()) -> Snapshot:
    names = sorted({n.cluster for n in nodes})
    return Snapshot(
        now=NOW,
        clusters=tuple(Cluster(name, "eu-west") for name in names),
        nodes=nodes,
        tiers=(Tier("normal", 10),),
        cohorts=(Cohort("org"),),
        queues=(Queue("q", "org", {(H100, "accelerator"): Quota(64_000)}, (H100,)),),
        running=running,
        pending=pending,
    )


def replica(name: str, group: str = "service-1", **kw: object) -> Job:
    return Job(name, "q", "normal", NOW, accelerators=1, cpu=1000, memory=1024, spread_group=group, **kw)  # type: ignore[arg-type]


def nodes_of(decisions: object) -> dict[str, str]:
    return {a.job: a.assignments[0].node for a in decisions.admissions}  # type: ignore[attr-defined]


def test_replicas_of_one_group_land_on_distinct_nodes_where_plain_jobs_pack() -> None:
    snap = snapshot(*(replica(f"r{i}") for i in range(3)), nodes=fleet())
    decisions = schedule(snap)
    check(snap, decisions)
    assert len(set(nodes_of(decisions).values())) == 3
    plain = snapshot(*(replica(f"p{i}", group="") for i in range(3)), nodes=fleet())
    assert len(set(nodes_of(schedule(plain)).values())) == 1  # best fit packs them: the spread is the group's


def test_the_spread_is_soft_a_fourth_replica_shares_a_node_when_none_is_left() -> None:
    snap = snapshot(*(replica(f"r{i}") for i in range(4)), nodes=fleet())
    decisions = schedule(snap)
    check(snap, decisions)
    placed = nodes_of(decisions)
    assert len(placed) == 4
    assert len(set(placed.values())) == 3


def test_running_replicas_count_and_other_groups_do_not() -> None:
    running = Workload(
        "old",
        "q",
        "normal",
        "c0",
        H100,
        (Assignment("c0-n0", 1, ((0, 1000),), 1000, 1024),),
        NOW,
        3600,
        spread_group="service-1",
    )
    snap = snapshot(replica("new"), replica("other", group="service-2"), nodes=fleet(), running=(running,))
    decisions = schedule(snap)
    check(snap, decisions)
    placed = nodes_of(decisions)
    assert placed["new"] != "c0-n0"
    # best fit beside what runs: another group's replicas are no reason to keep apart
    assert placed["other"] in {"c0-n0", placed["new"]}


def test_between_equal_clusters_replicas_alternate() -> None:
    snap = snapshot(*(replica(f"r{i}") for i in range(4)), nodes=fleet(("a", "b"), per_cluster=4))
    decisions = schedule(snap)
    check(snap, decisions)
    clusters = sorted(a.cluster for a in decisions.admissions)
    assert clusters == ["a", "a", "b", "b"], clusters
