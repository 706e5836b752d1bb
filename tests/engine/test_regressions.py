"""Engine bugs that the property tests found, each as the smallest snapshot that shows it."""

from __future__ import annotations

from dataclasses import replace

import pytest

from scheduler.engine import schedule
from scheduler.engine.model import (
    Assignment,
    Cluster,
    Cohort,
    Decisions,
    Job,
    Node,
    Pending,
    PendingReason,
    Preemption,
    PreemptionReason,
    Queue,
    Quota,
    Reclaim,
    Snapshot,
    Tier,
    Topology,
    TopologyMode,
    Workload,
)
from tests.engine.invariants import check
from tests.engine.strategies import NOW

H100 = "h100"


def idle_nodes(count: int, topology: tuple[str, ...] = ()) -> tuple[Node, ...]:
    return tuple(
        Node(f"n{i}", "c0", H100, (1000,) * 8, 64_000, 262_144, 64_000, 262_144, topology) for i in range(count)
    )


def one_queue(*pending: Job, nodes: tuple[Node, ...], levels: tuple[str, ...] = ()) -> Snapshot:
    return Snapshot(
        now=NOW,
        clusters=(Cluster("c0", "eu-west", levels=levels),),
        nodes=nodes,
        tiers=(Tier("normal", 10),),
        cohorts=(Cohort("org"),),
        queues=(Queue("q", "org", {(H100, "accelerator"): Quota(64_000)}, (H100,)),),
        running=(),
        pending=pending,
    )


def test_a_required_level_the_cluster_lacks_refuses_a_single_worker_as_it_refuses_a_gang() -> None:
    """A required rack in a cluster without racks: the gang is refused (TOPOLOGY), the single worker was admitted.

    ``placement.spread`` returns None for a required level the cluster lacks, but single workers never go
    through ``spread``. Either both may run or neither; the checker takes the reading of docs/scheduling.md
    §Gangs and topology (no domain at the required level, so the requirement cannot be met).
    """
    rack = Topology("rack", TopologyMode.REQUIRED)
    snapshot = one_queue(
        Job("single", "q", "normal", NOW, topology=rack),
        Job("gang", "q", "normal", NOW, workers=2, topology=rack),
        nodes=idle_nodes(2),
    )
    decisions = schedule(snapshot)
    assert {p.job: p.reason for p in decisions.pending}.get("gang") == PendingReason.TOPOLOGY
    check(snapshot, decisions)


def test_a_required_host_holds_a_gang_that_fits_one_node() -> None:
    """model.py: the node ("host") is always the implicit last level. Two 4-GPU workers fit one idle 8-GPU node.

    The engine refused the gang as TOPOLOGY, "No single host of h100 has room for 2 workers x 4 accelerators,
    even with the whole fleet idle": ``spread`` only knows the cluster's named levels.
    """
    snapshot = one_queue(
        Job("gang", "q", "normal", NOW, workers=2, accelerators=4, topology=Topology("host", TopologyMode.REQUIRED)),
        nodes=idle_nodes(2, topology=("r0",)),
        levels=("rack",),
    )
    decisions = schedule(snapshot)
    check(snapshot, decisions)
    assert [a.job for a in decisions.admissions] == ["gang"]
    assert len(decisions.admissions[0].assignments) == 1


def test_reclaim_stops_once_the_victim_queue_is_back_within_nominal() -> None:
    """Three one-GPU jobs of qa reclaim from qb, which runs 4 GPUs on a nominal of 2: only 2 may be taken.

    Each preemptor checks "qb is over nominal" against usage that still counts the earlier preemptors'
    victims (they run on through their grace period), so the third preemptor takes a third workload and qb
    ends at 1 GPU of its guaranteed 2 while qa borrows that GPU.
    """
    snapshot = reclaimable()
    decisions = schedule(snapshot)
    check(snapshot, decisions)
    assert len(decisions.preemptions) == 2


def reclaimable() -> Snapshot:
    """qb runs four one-GPU workloads on a nominal of 2 GPUs; three one-GPU jobs of qa need a GPU each."""
    return Snapshot(
        now=NOW,
        clusters=(Cluster("c0", "eu-west"),),
        nodes=(Node("n0", "c0", H100, (0, 0, 0, 0), 0, 0, 64_000, 262_144),),
        tiers=(Tier("low", 0), Tier("normal", 10)),
        cohorts=(Cohort("org"),),
        queues=tuple(
            Queue(name, "org", {(H100, "accelerator"): Quota(2000)}, (H100,), reclaim=Reclaim.ANY)
            for name in ("qa", "qb")
        ),
        running=tuple(
            Workload(f"w{i}", "qb", "low", "c0", H100, (Assignment("n0", 1, ((i, 1000),), 16_000, 65_536),), NOW, 3600)
            for i in range(4)
        ),
        pending=tuple(Job(f"a{i}", "qa", "normal", NOW + i, cpu=16_000, memory=65_536) for i in range(3)),
    )


def test_the_checker_catches_a_third_reclaim() -> None:
    """What the engine did before the fix, by hand: the checker must refuse the third victim, not the second."""
    waiting = tuple(Pending(f"a{i}", PendingReason.WAITING_FOR_PREEMPTION, "") for i in range(3))
    victims = tuple(Preemption(f"w{i}", f"a{i}", PreemptionReason.RECLAIM, "", 300) for i in range(3))
    two = Decisions((), victims[:2], (), waiting, order=("a0", "a1", "a2"))
    check(reclaimable(), replace(two, pending=(*waiting[:2], Pending("a2", PendingReason.QUOTA_EXHAUSTED, ""))))
    with pytest.raises(AssertionError, match=r"step 2 \(job 'a2'\): preemption: victims \['w2'\] of queue 'qb'"):
        check(reclaimable(), replace(two, preemptions=victims))
    check(reclaimable(), replace(two, preemptions=victims), reclaim_now=True)  # the reading that missed it


def test_a_later_job_does_not_take_the_room_a_preemptor_made() -> None:
    """The urgent job needs 2 GPUs: the free one and one a victim frees. The engine preempted w0 for it, then
    admitted a lower-priority job on the free GPU, so when w0 has stopped the urgent job still does not fit:
    w0 was stopped for nothing and the next cycle preempts again. (Kueue keeps the usage of a cycle's
    preemptors in the cohort so that later entries cannot take it; the same holds for nodes.)
    """
    snapshot = Snapshot(
        now=NOW,
        clusters=(Cluster("c0", "eu-west"),),
        nodes=(Node("n0", "c0", H100, (0, 0, 0, 1000), 16_000, 65_536, 64_000, 262_144),),
        tiers=(Tier("low", 0), Tier("normal", 10), Tier("urgent", 100, preemptible=False)),
        cohorts=(Cohort("org"),),
        queues=(Queue("q", "org", {(H100, "accelerator"): Quota(8000)}, (H100,)),),
        running=tuple(
            Workload(f"w{i}", "q", "low", "c0", H100, (Assignment("n0", 1, ((i, 1000),), 16_000, 65_536),), NOW, 3600)
            for i in range(3)
        ),
        pending=(
            Job("urgent", "q", "urgent", NOW, accelerators=2, cpu=16_000, memory=65_536),
            Job("later", "q", "normal", NOW, cpu=16_000, memory=65_536),
        ),
    )
    decisions = schedule(snapshot)
    check(snapshot, decisions)
    assert len([p for p in decisions.preemptions if p.preemptor == "urgent"]) == 1
    assert decisions.admissions == ()  # not on the free GPU: it is the urgent job's (the later job may preempt)


def test_two_reservations_do_not_claim_the_same_accelerator() -> None:
    """One node, GPU 1 busy until now + 100 s and all memory with it. ``a`` (needs memory) reserves GPU 0
    from now + 100; ``b`` backfills onto GPU 0 for 300 s, which is fine by the slack (``a`` can take GPU 1
    then); but ``c`` then reserved GPU 1 from now + 100 as well: at that time one GPU is free for two
    reservations. ``Timeline.state_at`` takes a held reservation off its recorded accelerator (GPU 0, where
    ``b`` runs, going negative) instead of off what is left, so GPU 1 looked free.
    """
    snapshot = Snapshot(
        now=NOW,
        clusters=(Cluster("c0", "eu-west"),),
        nodes=(Node("n0", "c0", H100, (1000, 0), 16_000, 0, 16_000, 65_536),),
        tiers=(Tier("low", 0),),
        cohorts=(Cohort("org"),),
        queues=(Queue("q", "org", {(H100, "accelerator"): Quota(8000)}, (H100,)),),
        running=(
            Workload("w", "q", "low", "c0", H100, (Assignment("n0", 1, ((1, 1000),), 0, 65_536),), NOW - 200, 300),
        ),
        pending=(
            Job("a", "q", "low", NOW - 3, cpu=0, memory=1024, time_limit=60),
            Job("b", "q", "low", NOW - 2, cpu=0, memory=0, time_limit=300),
            Job("c", "q", "low", NOW - 1, cpu=0, memory=0, time_limit=60),
        ),
    )
    check(snapshot, schedule(snapshot))


def test_a_waiting_preemptor_and_its_victims_are_not_both_counted_as_borrowing() -> None:
    """Queue q (nominal 4 GPUs) runs w (2 GPUs), which the urgent job (2 GPUs, only cluster c0) preempts.
    ``later`` (1 GPU) starts on c1: q uses 3 GPUs now and 3 once w has made way for the urgent job, never
    more than its nominal 4, yet the admission said borrowing=True: the quota held for the waiting urgent
    job was counted on top of the victim it replaces (2 + 2 + 1 = 5).
    """
    queues = tuple(Queue(name, "org", {(H100, "accelerator"): Quota(4000)}, (H100,)) for name in ("q", "idle"))
    snapshot = Snapshot(
        now=NOW,
        clusters=(Cluster("c0", "eu-west"), Cluster("c1", "eu-west")),
        nodes=(
            Node("n0", "c0", H100, (0, 0), 16_000, 65_536, 16_000, 65_536),
            Node("n1", "c1", H100, (1000,) * 4, 16_000, 65_536, 16_000, 65_536),
        ),
        tiers=(Tier("low", 0), Tier("normal", 10), Tier("urgent", 100)),
        cohorts=(Cohort("org"),),
        queues=queues,
        running=(
            Workload("w", "q", "low", "c0", H100, (Assignment("n0", 1, ((0, 1000), (1, 1000)), 0, 0),), NOW, 3600),
        ),
        pending=(
            Job("urgent", "q", "urgent", NOW, accelerators=2, cpu=0, memory=0, clusters=("c0",)),
            Job("later", "q", "normal", NOW, cpu=0, memory=0),
        ),
    )
    decisions = schedule(snapshot)
    check(snapshot, decisions)
    assert [(a.job, a.borrowing) for a in decisions.admissions] == [("later", False)]


def test_a_preemptor_freeing_more_than_it_needs_is_credited_in_the_borrowing_flag() -> None:
    """Queue q (nominal 10 cores) runs wa (8 cores) and wb (1 core); p1 (1 core) preempts wa, p2 (2 cores)
    preempts wb, then the CPU-only job j (1 core) starts. q uses 10 cores now and 4 once the preemptions have
    played out, never more than its nominal, yet j was admitted with borrowing=True: each preemptor holds
    what its own victims do not cover, p2's missing core is held while p1's 7 spare cores are not credited
    (9 + 1 + 1 = 11 cores). The same over-count can refuse a job that fits, in a cohort with no room to lend.
    """
    quotas = {(H100, "accelerator"): Quota(8000), (H100, "cpu"): Quota(10_000), (H100, "memory"): Quota(10_000_000)}
    spare = {**quotas, (H100, "cpu"): Quota(100_000)}
    snapshot = Snapshot(
        now=NOW,
        clusters=(Cluster("c0", "eu-west"),),
        nodes=(
            Node("n0", "c0", H100, (0,), 8000, 65_536, 16_000, 65_536),
            Node("n1", "c0", H100, (0,), 15_000, 65_536, 16_000, 65_536),
        ),
        tiers=(Tier("low", 0), Tier("normal", 10), Tier("urgent", 100)),
        cohorts=(Cohort("org"),),
        queues=(Queue("q", "org", quotas, (H100,)), Queue("idle", "org", spare, (H100,))),
        running=(
            Workload("wa", "q", "low", "c0", H100, (Assignment("n0", 1, ((0, 1000),), 8000, 0),), NOW - 10, 3600),
            Workload("wb", "q", "low", "c0", H100, (Assignment("n1", 1, ((0, 1000),), 1000, 0),), NOW - 3000, 3600),
        ),
        pending=(
            Job("p1", "q", "urgent", NOW - 2, cpu=1000, memory=0),
            Job("p2", "q", "urgent", NOW - 1, cpu=2000, memory=0),
            Job("j", "q", "normal", NOW, accelerators=0, cpu=1000, memory=0),
        ),
    )
    decisions = schedule(snapshot)
    assert {p.workload: p.preemptor for p in decisions.preemptions} == {"wa": "p1", "wb": "p2"}
    check(snapshot, decisions)
    assert [(a.job, a.borrowing) for a in decisions.admissions] == [("j", False)]
