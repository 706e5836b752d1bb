"""Focused tests of each phase of the placement engine, on small hand-made fleets."""

from __future__ import annotations

from dataclasses import replace

import pytest

from scheduler.engine import schedule
from scheduler.engine.model import (
    Assignment,
    Budget,
    Cluster,
    Cohort,
    Config,
    Decisions,
    Job,
    Node,
    PendingReason,
    PreemptionReason,
    Queue,
    Quota,
    Reclaim,
    Snapshot,
    Tier,
    Topology,
    TopologyMode,
    WithinQueue,
    Workload,
)
from scheduler.engine.quota import Mode, QuotaTree

NOW = 1_000_000.0
TIERS = (Tier("low", 0), Tier("normal", 100), Tier("urgent", 1000, preemptible=False))


def gpus(n: int) -> Quota:
    return Quota(n * 1000)


def node(
    name: str,
    flavor: str = "h100",
    cluster: str = "c1",
    free: int = 8,
    count: int = 8,
    rack: str = "r1",
    block: str = "b1",
    price: float = 2.0,
    **kw: object,
) -> Node:
    accel = (1000,) * free + (0,) * (count - free)
    resources = (96_000, 1_000_000, 96_000, 1_000_000)
    return Node(name, cluster, flavor, accel, *resources, (block, rack), price_per_accel_hour=price, **kw)  # type: ignore[arg-type]


def job(id: str, queue: str = "a", tier: str = "normal", at: float = 0.0, **kw: object) -> Job:
    return Job(id, queue, tier, NOW - 1000 + at, **kw)  # type: ignore[arg-type]


def running(id: str, node_name: str, gpus_: int = 8, queue: str = "a", tier: str = "low", **kw: object) -> Workload:
    assignment = Assignment(node_name, 1, tuple((i, 1000) for i in range(gpus_)), 1000, 1024)
    defaults: dict[str, object] = {"admitted_at": NOW - 600, "time_limit": 3600}
    defaults.update(kw)
    return Workload(id, queue, tier, "c1", "h100", (assignment,), **defaults)  # type: ignore[arg-type]


def snapshot(
    nodes: tuple[Node, ...],
    queues: tuple[Queue, ...],
    pending: tuple[Job, ...],
    running_: tuple[Workload, ...] = (),
    cohorts: tuple[Cohort, ...] = (Cohort("org"),),
    clusters: tuple[Cluster, ...] = (Cluster("c1", "eu", ("block", "rack")),),
    **config: object,
) -> Snapshot:
    return Snapshot(NOW, clusters, nodes, TIERS, cohorts, queues, running_, pending, Config(**config))  # type: ignore[arg-type]


def queue(name: str, quota: int = 64, flavors: tuple[str, ...] = ("h100",), **kw: object) -> Queue:
    quotas = {(f, "accelerator"): gpus(quota) for f in flavors}
    return Queue(name, "org", quotas, flavors, **kw)  # type: ignore[arg-type]


def admitted(decisions: object) -> dict[str, object]:
    return {a.job: a for a in decisions.admissions}  # type: ignore[attr-defined]


def reasons(decisions: object) -> dict[str, PendingReason]:
    return {p.job: p.reason for p in decisions.pending}  # type: ignore[attr-defined]


# ----------------------------------------------------------------------------------------------- quota tree


class TestQuotaTree:
    """Kueue's arithmetic (docs/scheduling.md §Quotas and borrowing) on a two-queue cohort."""

    def tree(self, lend: int | None = None, borrow: int | None = None) -> QuotaTree:
        a = Queue("a", "org", {("h100", "accelerator"): Quota(8000, borrowing_limit=borrow)})
        b = Queue("b", "org", {("h100", "accelerator"): Quota(8000, lending_limit=lend)})
        return QuotaTree([Cohort("org")], [a, b], ["h100"])

    def test_borrow_from_an_idle_sibling(self):
        tree = self.tree()
        a = tree.index["a"]
        assert tree.classify(a, "h100", (16000, 0, 0)) is Mode.FIT
        assert tree.classify(a, "h100", (17000, 0, 0)) is Mode.NO_FIT
        assert tree.borrowing_level(a, "h100", (12000, 0, 0)) == 1
        assert tree.borrowing_level(a, "h100", (8000, 0, 0)) == 0

    def test_lending_limit_keeps_local_quota(self):
        tree = self.tree(lend=2000)  # b lends at most 2 of its 8 GPUs
        a = tree.index["a"]
        assert tree.potential(a, tree.fr("h100", 0)) == 10000
        assert tree.classify(a, "h100", (11000, 0, 0)) is Mode.NO_FIT

    def test_borrowing_limit_caps_a_queue(self):
        tree = self.tree(borrow=4000)
        a = tree.index["a"]
        assert tree.classify(a, "h100", (12000, 0, 0)) is Mode.FIT
        assert tree.classify(a, "h100", (13000, 0, 0)) is Mode.NO_FIT

    def test_usage_of_a_sibling_turns_fit_into_preempt(self):
        tree = self.tree()
        a, b = tree.index["a"], tree.index["b"]
        tree.charge(b, "h100", (6000, 0, 0))
        assert tree.classify(a, "h100", (10000, 0, 0)) is Mode.FIT
        assert tree.classify(a, "h100", (11000, 0, 0)) is Mode.PREEMPT
        tree.charge(b, "h100", (6000, 0, 0), -1)
        assert tree.usage[tree.index["org"]][tree.fr("h100", 0)] == 0

    def test_ungoverned_resources_are_not_limited(self):
        tree = self.tree()
        assert tree.classify(tree.index["a"], "h100", (1000, 10**9, 10**9)) is Mode.FIT


# ------------------------------------------------------------------------------------------ flavors, quota


def test_flavor_fallback_prefers_the_first_flavor_that_fits_without_borrowing():
    nodes = (node("h1", "h100-reserved", free=0), node("s1", "h100-spot"), node("a1", "a100"))
    order = ("h100-reserved", "h100-spot", "a100")
    d = schedule(snapshot(nodes, (queue("a", flavors=order),), (job("j", accelerators=8),)))
    assert admitted(d)["j"].flavor == "h100-spot"  # type: ignore[attr-defined]


def test_a_job_more_than_the_queue_could_ever_have_is_told_so():
    d = schedule(snapshot((node("n1"),), (queue("a", quota=4),), (job("big", accelerators=8),)))
    pending = d.pending[0]
    assert pending.reason is PendingReason.QUOTA_EXCEEDS_LIMIT
    assert "at most 4" in pending.message


def test_quota_exhausted_keeps_the_job_pending_even_with_free_nodes():
    nodes = (node("n1"), node("n2"))
    d = schedule(snapshot(nodes, (queue("a", quota=8),), (job("j1", accelerators=8), job("j2", at=1, accelerators=8))))
    assert set(admitted(d)) == {"j1"}
    assert reasons(d)["j2"] is PendingReason.QUOTA_EXCEEDS_LIMIT or reasons(d)["j2"] is PendingReason.QUOTA_EXHAUSTED


# --------------------------------------------------------------------------------------------- ordering


def test_fair_sharing_alternates_between_queues_of_equal_weight():
    nodes = tuple(node(f"n{i}", free=8) for i in range(2))
    queues = (queue("a", quota=0), queue("b", quota=0), Queue("pool", "org", {("h100", "accelerator"): gpus(16)}))
    # Both queues borrow everything from the pool; a submitted all its jobs first.
    pending = tuple(job(f"a{i}", "a", at=i, accelerators=2) for i in range(8)) + tuple(
        job(f"b{i}", "b", at=100 + i, accelerators=2) for i in range(8)
    )
    d = schedule(snapshot(nodes, queues, pending))
    got = admitted(d)
    assert sum(j.startswith("a") for j in got) == 4
    assert sum(j.startswith("b") for j in got) == 4


def test_higher_tier_goes_first():
    d = schedule(
        snapshot(
            (node("n1"),),
            (queue("a"),),
            (job("old", at=0, accelerators=8), job("vip", "a", "urgent", at=5, accelerators=8)),
        )
    )
    assert set(admitted(d)) == {"vip"}


# ------------------------------------------------------------------------------------------ gangs, topology


def test_a_gang_is_placed_whole_or_not_at_all():
    nodes = (node("n1"), node("n2", free=4))
    d = schedule(snapshot(nodes, (queue("a"),), (job("gang", workers=2, accelerators=8),)))
    assert not d.admissions
    assert reasons(d)["gang"] is PendingReason.CAPACITY


def test_required_topology_keeps_workers_in_one_rack_and_picks_the_tightest():
    nodes = (
        node("n1", rack="r1"),
        node("n2", rack="r1"),
        node("n3", rack="r1"),
        node("n4", rack="r2"),
        node("n5", rack="r2"),
    )
    d = schedule(snapshot(nodes, (queue("a"),), (job("g", workers=2, accelerators=8, topology=Topology("rack")),)))
    assert {a.node for a in admitted(d)["g"].assignments} == {"n4", "n5"}  # type: ignore[attr-defined]


def test_required_topology_that_no_rack_can_hold_is_explained():
    nodes = (node("n1", rack="r1"), node("n2", rack="r2"))
    d = schedule(snapshot(nodes, (queue("a"),), (job("g", workers=2, accelerators=8, topology=Topology("rack")),)))
    assert reasons(d)["g"] is PendingReason.TOPOLOGY


def test_preferred_topology_falls_back_a_level():
    nodes = (node("n1", rack="r1"), node("n2", rack="r2"))
    topology = Topology("rack", TopologyMode.PREFERRED)
    d = schedule(snapshot(nodes, (queue("a"),), (job("g", workers=2, accelerators=8, topology=topology),)))
    assert "g" in admitted(d)


# ------------------------------------------------------------------------------------------------ packing


def test_fractional_jobs_share_a_gpu_instead_of_breaking_a_whole_one():
    # n1 has one GPU half used; n2 is empty. A half-GPU job should fill n1's half, keeping n2 whole.
    half = Node("n1", "c1", "l4", (500, 1000), 32_000, 128_000, 32_000, 128_000, ("b1", "r1"))
    empty = Node("n2", "c1", "l4", (1000, 1000), 32_000, 128_000, 32_000, 128_000, ("b1", "r1"))
    d = schedule(snapshot((half, empty), (queue("a", flavors=("l4",)),), (job("half", accel_milli=500),)))
    assert admitted(d)["half"].assignments[0].node == "n1"  # type: ignore[attr-defined]
    assert admitted(d)["half"].assignments[0].accels == ((0, 500),)  # type: ignore[attr-defined]


# ------------------------------------------------------------------------------------------------ routing


def test_price_limit_is_a_hard_limit_and_routes_to_the_cheaper_cluster():
    clusters = (Cluster("cheap", "eu", ("block", "rack")), Cluster("dear", "us", ("block", "rack")))
    cheap, dear = node("c1", cluster="cheap", price=1.0), node("d1", cluster="dear", price=5.0)
    capped = (job("j", accelerators=8, max_price_per_hour=10.0),)
    d = schedule(snapshot((cheap, dear), (queue("a"),), capped, clusters=clusters))
    assert admitted(d)["j"].cluster == "cheap"  # type: ignore[attr-defined]
    d = schedule(snapshot((dear,), (queue("a"),), capped, clusters=clusters))
    assert reasons(d)["j"] is PendingReason.PRICE_LIMIT  # 8 GPUs x 5.0 = 40 an hour, over the limit


def test_locality_hint_wins_between_equal_clusters():
    clusters = (Cluster("east", "us-east", ("block", "rack")), Cluster("west", "us-west", ("block", "rack")))
    nodes = (node("e1", cluster="east"), node("w1", cluster="west"))
    d = schedule(snapshot(nodes, (queue("a"),), (job("j", accelerators=8, locality="us-west"),), clusters=clusters))
    assert admitted(d)["j"].cluster == "west"  # type: ignore[attr-defined]


# --------------------------------------------------------------------------------------------- preemption


def test_priority_preemption_picks_one_victim_the_one_that_checkpointed_last():
    nodes = (node("n1", free=0), node("n2", free=0))
    victims = (
        running("stale", "n1", last_checkpoint_at=NOW - 3000),
        running("fresh", "n2", last_checkpoint_at=NOW - 60),
    )
    d = schedule(
        snapshot(nodes, (queue("a", within_queue=WithinQueue.LOWER_PRIORITY),), (job("hi", accelerators=8),), victims)
    )
    assert [p.workload for p in d.preemptions] == ["fresh"]
    assert d.preemptions[0].reason is PreemptionReason.PRIORITY
    assert reasons(d)["hi"] is PendingReason.WAITING_FOR_PREEMPTION
    assert not d.admissions  # victims checkpoint first; the job starts in a later cycle


def test_non_preemptible_work_is_never_a_victim():
    nodes = (node("n1", free=0),)
    d = schedule(
        snapshot(
            nodes, (queue("a"),), (job("hi", "a", "urgent", accelerators=8),), (running("prod", "n1", tier="urgent"),)
        )
    )
    assert not d.preemptions


def test_reclaim_takes_back_lent_quota_only_from_a_borrowing_queue():
    nodes = (node("n1", free=0), node("n2", free=0))
    queues = (queue("a", quota=8, reclaim=Reclaim.ANY), queue("b", quota=8))
    work = (
        running("b-own", "n1", queue="b", tier="normal", admitted_at=NOW - 100),
        running("b-borrowed", "n2", queue="b", tier="normal", admitted_at=NOW - 50),
    )
    d = schedule(snapshot(nodes, queues, (job("a1", accelerators=8),), work))
    assert len(d.preemptions) == 1
    assert d.preemptions[0].reason is PreemptionReason.RECLAIM


def test_within_nominal_work_of_another_queue_is_not_taken():
    nodes = (node("n1", free=0),)
    queues = (queue("a", quota=8, reclaim=Reclaim.ANY), queue("b", quota=8))
    d = schedule(snapshot(nodes, queues, (job("a1", accelerators=8),), (running("b1", "n1", queue="b"),)))
    assert not d.preemptions
    assert reasons(d)["a1"] is PendingReason.RESERVED  # it waits for b1 to reach its time limit


# ------------------------------------------------------------------------------------------------ order


def first_of_two(long_at: float, short_at: float, short_first: float) -> str:
    """Which of a 2-hour and a 10-minute job, each wanting the only free node, starts."""
    nodes = (node("n1"),)
    pending = (
        job("long", at=long_at, accelerators=8, time_limit=7200),
        job("short", at=short_at, accelerators=8, time_limit=600),
    )
    d = schedule(snapshot(nodes, (queue("a"),), pending, backfill=False, short_first=short_first))
    (started,) = admitted(d)
    return started


def test_a_short_job_passes_a_long_one_submitted_a_little_earlier():
    assert first_of_two(long_at=0, short_at=60, short_first=8.0) == "short"
    assert first_of_two(long_at=0, short_at=60, short_first=0.0) == "long"  # first come, first served


def test_aging_bounds_how_far_a_long_job_is_passed():
    # The long job is ordered as if submitted 8 x 2 h later, the short one 8 x 10 min later: a short job
    # submitted more than 16 h - 80 min after the long one comes after it.
    assert first_of_two(long_at=0, short_at=8 * 7200 - 8 * 600 - 60, short_first=8.0) == "short"
    assert first_of_two(long_at=0, short_at=8 * 7200 - 8 * 600 + 60, short_first=8.0) == "long"


def test_a_higher_tier_still_comes_before_a_shorter_job():
    nodes = (node("n1"),)
    pending = (
        job("long-urgent", tier="urgent", accelerators=8, time_limit=7200),
        job("short", at=-500, accelerators=8, time_limit=60),
    )
    d = schedule(snapshot(nodes, (queue("a"),), pending, backfill=False))
    assert set(admitted(d)) == {"long-urgent"}


def bounded(snap: Snapshot, max_wait: float) -> Snapshot:
    """``snap`` with the normal tier's bound on waiting set to ``max_wait`` seconds."""
    tiers = tuple(replace(t, max_wait=max_wait) if t.name == "normal" else t for t in snap.tiers)
    return replace(snap, tiers=tiers)


def test_a_job_past_its_tiers_bound_on_waiting_goes_before_shorter_ones():
    # The long job has waited 1,000 s; the short one (submitted a minute later) would pass it (short first).
    nodes = (node("n1"),)
    pending = (
        job("long", at=0, accelerators=8, time_limit=7200),
        job("short", at=60, accelerators=8, time_limit=600),
    )
    snap = snapshot(nodes, (queue("a"),), pending, backfill=False)
    assert set(admitted(schedule(snap))) == {"short"}
    assert set(admitted(schedule(bounded(snap, max_wait=1200)))) == {"short"}  # not yet overdue
    assert set(admitted(schedule(bounded(snap, max_wait=900)))) == {"long"}


def test_an_overdue_job_passes_fair_sharing_but_not_a_higher_tier():
    # Queue a borrows 8 GPUs from b (its share is above b's): b's job comes first, unless a's is overdue.
    nodes = (node("n1"), node("n2", free=0), node("n3", free=0))
    work = (running("a-1", "n2", queue="a", tier="normal"), running("a-2", "n3", queue="a", tier="normal"))
    queues = (queue("a", quota=8), queue("b", quota=24))
    pending = (job("a-late", queue="a", at=0, accelerators=8), job("b-new", queue="b", at=500, accelerators=8))
    snap = snapshot(nodes, queues, pending, work, backfill=False, short_first=0.0)
    assert "b-new" in admitted(schedule(snap))
    assert "a-late" not in admitted(schedule(snap))
    assert "a-late" in admitted(schedule(bounded(snap, max_wait=900)))
    urgent = replace(snap, pending=(*pending, job("urgent", tier="urgent", at=900, accelerators=8)))
    assert set(admitted(schedule(bounded(urgent, max_wait=900)))) >= {"urgent"}
    assert "a-late" not in admitted(schedule(bounded(urgent, max_wait=900)))


def test_an_overdue_job_is_first_to_get_a_reservation():
    # Both gangs wait for n2; one reservation a cycle. Short first gives it to the short gang, the bound to the
    # long one that has waited past it.
    nodes = (node("n1", free=0), node("n2", free=0))
    work = (
        running("busy-1", "n1", tier="normal", admitted_at=NOW - 1800, time_limit=3600),
        running("busy-2", "n2", tier="normal", admitted_at=NOW - 1800, time_limit=3600),
    )
    pending = (
        job("long-gang", at=0, workers=2, accelerators=8, time_limit=4 * 3600),
        job("short-gang", at=300, workers=2, accelerators=8, time_limit=600),
    )
    snap = snapshot(nodes, (queue("a"),), pending, work, reservations=1)
    assert reasons(schedule(snap))["short-gang"] is PendingReason.RESERVED
    assert reasons(schedule(snap))["long-gang"] is not PendingReason.RESERVED
    d = schedule(bounded(snap, max_wait=900))
    assert reasons(d)["long-gang"] is PendingReason.RESERVED
    assert reasons(d)["short-gang"] is not PendingReason.RESERVED
    (said,) = (p.message for p in d.pending if p.job == "long-gang")
    assert "longer than its tier's bound of 15 min" in said


# ---------------------------------------------------------------------------------------------- backfill


def one_node_free_one_busy(*pending: Job, backfill: bool = True) -> Decisions:
    """Two nodes: n1 free now, n2 busy (same tier, so not a victim) until NOW+1800. First come, first
    served, so that the order is the submission order."""
    nodes = (node("n1"), node("n2", free=0))
    work = (running("busy", "n2", tier="normal", admitted_at=NOW - 1800, time_limit=3600),)
    return schedule(snapshot(nodes, (queue("a"),), pending, work, backfill=backfill, short_first=0.0))


def test_a_reservation_keeps_small_jobs_from_starving_a_gang():
    # A 2-node gang is first in line; a long small job behind it must not take n1 (it would delay the gang);
    # a short one that ends in time may.
    d = one_node_free_one_busy(
        job("gang", at=0, workers=2, accelerators=8, time_limit=7200),
        job("long", at=1, accelerators=8, time_limit=7200),
        job("short", at=2, accelerators=8, time_limit=600),
    )
    assert reasons(d)["gang"] is PendingReason.RESERVED
    gang = next(p for p in d.pending if p.job == "gang")
    assert gang.estimated_start == pytest.approx(NOW + 1800, abs=60)
    assert reasons(d)["long"] is PendingReason.BACKFILL_BLOCKED
    assert admitted(d)["short"].backfilled  # type: ignore[attr-defined]


def test_without_backfill_the_long_job_takes_the_node():
    d = one_node_free_one_busy(
        job("gang", workers=2, accelerators=8), job("long", at=1, accelerators=8, time_limit=7200), backfill=False
    )
    assert "long" in admitted(d)


def test_backfilled_jobs_share_a_reservations_slack_and_no_more():
    # The gang reserves 6 GPUs on each node from when n2 frees up; n1 keeps 2 spare GPUs (its slack). A long
    # 2-GPU job may use them now; a second one may not, or the gang could not start on time.
    d = one_node_free_one_busy(
        job("gang", at=0, workers=2, accelerators=6, time_limit=7200),
        job("first", at=1, accelerators=2, time_limit=7200),
        job("second", at=2, accelerators=2, time_limit=7200),
    )
    assert reasons(d)["gang"] is PendingReason.RESERVED
    assert admitted(d)["first"].backfilled  # type: ignore[attr-defined]
    assert "second" not in admitted(d)  # it gets a reservation of its own, after the gang's start


# ---------------------------------------------------------------------------------------------- explanations


def test_every_pending_job_gets_a_reason_in_words_and_its_place_in_line():
    nodes = (node("n1", free=0),)
    pending = (*(job(f"j{i}", at=i, accelerators=8) for i in range(3)), job("lost", "nope"))
    d = schedule(snapshot(nodes, (queue("a"),), pending))
    by_job = {p.job: p for p in d.pending}
    assert set(by_job) == {"j0", "j1", "j2", "lost"}
    assert by_job["lost"].reason is PendingReason.UNKNOWN_QUEUE
    assert [by_job[f"j{i}"].position for i in range(3)] == [0, 1, 2]
    assert all(p.message and not p.message.startswith("{") for p in d.pending)


def test_the_cycle_stops_after_its_work_limit_and_says_so():
    pending = tuple(job(f"j{i}", at=i, accelerators=1) for i in range(5))
    d = schedule(snapshot((node("n1"),), (queue("a"),), pending, max_jobs_per_cycle=2))
    assert len(d.admissions) == 2
    assert sum(p.reason is PendingReason.NOT_CONSIDERED for p in d.pending) == 3


def test_the_cycle_stops_after_its_admission_limit_and_the_next_one_goes_on():
    pending = tuple(job(f"j{i}", at=i, accelerators=1) for i in range(5))
    snap = snapshot((node("n1"),), (queue("a"),), pending, max_admissions_per_cycle=2)
    d = schedule(snap)
    assert [a.job for a in d.admissions] == ["j0", "j1"]
    assert [(p.job, p.reason, p.position) for p in d.pending] == [
        (f"j{i}", PendingReason.NOT_CONSIDERED, i) for i in range(2, 5)
    ]
    # The next cycle sees the two running and goes on in the same order.
    now_running = (running("j0", "n1", 1, tier="normal"), running("j1", "n1", 1, tier="normal"))
    later = schedule(replace(snap, nodes=(node("n1", free=6),), running=now_running, pending=pending[2:]))
    assert [a.job for a in later.admissions] == ["j2", "j3"]
    assert [(p.job, p.reason) for p in later.pending] == [("j4", PendingReason.NOT_CONSIDERED)]


def test_a_member_limit_holds_that_members_jobs_but_not_their_teammates():
    pending = (
        job("a1", at=1, accelerators=4, owner="ann"),
        job("a2", at=2, accelerators=4, owner="ann"),
        job("b1", at=3, accelerators=4, owner="ben"),
    )
    held = running("a0", "n1", 2, queue="a", owner="ann")
    snap = snapshot((node("n1", free=6), node("n2")), (queue("a"),), pending, (held,))
    unlimited = schedule(snap)
    assert {a.job for a in unlimited.admissions} == {"a1", "a2", "b1"}

    limited = schedule(replace(snap, member_limits={"ann": 6000}))
    assert {a.job for a in limited.admissions} == {"a1", "b1"}  # ann: 2 running + 4 = 6, the limit
    (waiting,) = limited.pending
    assert (waiting.job, waiting.reason) == ("a2", PendingReason.MEMBER_LIMIT)
    assert "hold 6 accelerators" in waiting.message
    assert "allows each member 6" in waiting.message


def test_same_snapshot_same_decisions():
    nodes = tuple(node(f"n{i}", free=i % 9, rack=f"r{i % 3}") for i in range(12))
    pending = tuple(job(f"j{i}", at=i % 5, accelerators=1 + i % 4, workers=1 + i % 2) for i in range(30))
    snap = snapshot(nodes, (queue("a", quota=40), queue("b", quota=40)), pending)
    assert schedule(snap) == schedule(snap)


def test_victims_are_minimal_even_when_the_search_overshoots():
    # Eight 1-GPU low-priority jobs fill the node; a 3-GPU job needs exactly three of them. The search checks
    # placement after 1, 2 and 4 victims, so it finds four; the fill back must give one back.
    work = tuple(running(f"w{i}", "n1", gpus_=1, admitted_at=NOW - 600 + i) for i in range(8))
    work = tuple(replace(w, assignments=(replace(w.assignments[0], accels=((i, 1000),)),)) for i, w in enumerate(work))
    d = schedule(snapshot((node("n1", free=0),), (queue("a"),), (job("three", accelerators=3),), work))
    assert len(d.preemptions) == 3


# ------------------------------------------------------------------------------------------------ budgets

HOUR = 3600


def test_a_hard_budget_of_accelerator_hours_admits_what_fits_and_charges_each_admission():
    # 20 accelerator-hours left: the first 8-GPU two-hour job (16) fits, the second does not.
    pending = (
        job("j1", at=1, accelerators=8, time_limit=2 * HOUR, budgets=("team a",)),
        job("j2", at=2, accelerators=8, time_limit=2 * HOUR, budgets=("team a",)),
        job("free", at=3, accelerators=8, time_limit=2 * HOUR),  # charged to no budget
    )
    budget = Budget(accel_seconds=20 * 1000 * HOUR, label="team a, this month")
    d = schedule(
        replace(snapshot((node("n1"), node("n2"), node("n3")), (queue("a"),), pending), budgets={"team a": budget})
    )
    assert set(admitted(d)) == {"j1", "free"}
    (waiting,) = d.pending
    assert (waiting.job, waiting.reason) == ("j2", PendingReason.BUDGET)
    assert "team a, this month has 4 accelerator-hours left" in waiting.message
    assert "may use 16" in waiting.message


def test_a_job_is_charged_only_until_its_budget_period_ends():
    # Ten minutes of the month are left: a 10-hour job of 8 GPUs uses 8 * 1/6 accelerator-hours of it.
    budget = Budget(accel_seconds=2 * 1000 * HOUR, until=NOW + 600)
    pending = (job("j", accelerators=8, time_limit=10 * HOUR, budgets=("b",)),)
    d = schedule(replace(snapshot((node("n1"),), (queue("a"),), pending), budgets={"b": budget}))
    assert set(admitted(d)) == {"j"}


def test_a_money_budget_routes_to_what_it_can_pay_for_and_then_holds_the_job():
    cheap, dear = node("c1", cluster="cheap", price=1.0), node("d1", cluster="dear", price=5.0)
    clusters = (Cluster("cheap", "eu", ("block", "rack")), Cluster("dear", "eu", ("block", "rack")))
    # 8 GPUs for an hour: 8 on the cheap cluster, 40 on the dear one, where its data is (routing prefers it).
    pending = (job("j", accelerators=8, time_limit=HOUR, budgets=("b",), locality="dear"),)
    snap = snapshot((cheap, dear), (queue("a"),), pending, clusters=clusters)
    assert admitted(schedule(snap))["j"].cluster == "dear"  # type: ignore[attr-defined]
    assert admitted(schedule(replace(snap, budgets={"b": Budget(money=10.0)})))["j"].cluster == "cheap"  # type: ignore[attr-defined]

    d = schedule(replace(snap, budgets={"b": Budget(money=7.5, label="project x")}))
    assert not d.admissions
    (waiting,) = d.pending
    assert waiting.reason is PendingReason.BUDGET
    assert "project x has 7.50 left" in waiting.message


def test_money_spent_by_one_admission_is_not_spent_again_in_the_same_cycle():
    pending = tuple(job(f"j{i}", at=i, accelerators=4, time_limit=HOUR, budgets=("b",)) for i in range(3))
    # 4 GPUs for an hour at 2.0 cost 8: a budget of 20 pays for two of them.
    d = schedule(replace(snapshot((node("n1"), node("n2")), (queue("a"),), pending), budgets={"b": Budget(money=20.0)}))
    assert set(admitted(d)) == {"j0", "j1"}
    assert reasons(d) == {"j2": PendingReason.BUDGET}


def test_a_budget_that_does_not_bind_changes_nothing():
    pending = tuple(job(f"j{i}", at=i, accelerators=1 + i % 4, budgets=("b",)) for i in range(12))
    snap = snapshot(tuple(node(f"n{i}") for i in range(3)), (queue("a"),), pending)
    plenty = Budget(accel_seconds=10**12, money=10.0**9)
    assert schedule(replace(snap, budgets={"b": plenty})).admissions == schedule(snap).admissions
