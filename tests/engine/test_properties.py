"""Property tests of the engine against docs/scheduling.md §Guarantees, and proof that the checker can fail.

Every random snapshot is scheduled and the decisions replayed by ``invariants.check``, an independent
re-implementation of the guarantees. ``TestCheckerCatches`` corrupts a valid hand-built cycle in one way
at a time and expects ``check`` to name the broken guarantee: a checker that never fails proves nothing.
"""

from __future__ import annotations

import random
from dataclasses import replace

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from scheduler.engine import schedule
from scheduler.engine.model import (
    Admission,
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
    Reservation,
    Snapshot,
    Tier,
    Topology,
    TopologyMode,
    Workload,
)
from tests.engine.invariants import check
from tests.engine.strategies import NOW, shuffled, snapshots

#: 150 examples, or the loaded profile's count when it asks for more (``--hypothesis-profile=ci``).
PROPERTY = settings(
    max_examples=max(150, settings().max_examples),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


# ------------------------------------------------------------------------------------------ properties


@PROPERTY
@given(snapshots())
def test_decisions_keep_every_guarantee(snapshot: Snapshot) -> None:
    check(snapshot, schedule(snapshot))


@PROPERTY
@given(snapshots(contended=True))
def test_contended_fleet_keeps_every_guarantee(snapshot: Snapshot) -> None:
    """Few busy nodes, generous quotas: capacity preemption, reservations and backfill."""
    check(snapshot, schedule(snapshot))


@PROPERTY
@given(snapshots())
def test_overdue_jobs_are_considered_before_the_rest_of_their_priority(snapshot: Snapshot) -> None:
    # docs/scheduling.md §A bound on waiting: in the cycle's order, a job past its tier's max_wait comes after
    # no job of its priority that is not, and still after every job of a higher priority.
    decisions = schedule(snapshot)
    tiers, queues = {t.name: t for t in snapshot.tiers}, {q.name for q in snapshot.queues}
    jobs = {j.id: j for j in snapshot.pending}
    keys = []
    for job_id in decisions.order:
        job = jobs.get(job_id)
        if job is None or job.tier not in tiers or job.queue not in queues:
            continue
        tier = tiers[job.tier]
        keys.append((-tier.priority, not 0 < tier.max_wait <= snapshot.now - job.submitted_at))
    assert keys == sorted(keys)


@PROPERTY
@given(snapshots())
def test_only_the_parts_of_recent_use_count(snapshot: Snapshot) -> None:
    # docs/scheduling.md §Memory: recent use counts. Recent use is judged as parts of the siblings' use, so
    # decaying all of it alike (to the snapshot's moment: a factor, here an exact one) changes no decision; and a
    # weight of 0 is memory switched off.
    doubled = replace(snapshot, usage={name: 2 * hours for name, hours in snapshot.usage.items()})
    assert schedule(doubled) == schedule(snapshot)
    if snapshot.config.usage_weight == 0:
        assert schedule(replace(snapshot, usage={})) == schedule(snapshot)


@PROPERTY
@given(snapshots())
def test_same_snapshot_same_decisions(snapshot: Snapshot) -> None:
    assert schedule(snapshot) == schedule(snapshot)


@PROPERTY
@given(snapshots(), st.randoms(use_true_random=False))
def test_input_order_does_not_change_who_runs(snapshot: Snapshot, rnd: random.Random) -> None:
    """Ties are broken by id, never by the order the snapshot lists things in."""
    first, second = schedule(snapshot), schedule(shuffled(snapshot, rnd))
    assert {a.job for a in first.admissions} == {a.job for a in second.admissions}
    assert {p.workload for p in first.preemptions} == {p.workload for p in second.preemptions}
    assert {r.job for r in first.reservations} == {r.job for r in second.reservations}


@PROPERTY
@given(snapshots(), st.randoms(use_true_random=False))
def test_input_order_does_not_change_decisions(snapshot: Snapshot, rnd: random.Random) -> None:
    """Stronger: the very same decisions, down to nodes, accelerators and messages."""
    assert schedule(snapshot) == schedule(shuffled(snapshot, rnd))


def _over_quota(decisions: Decisions) -> list[Preemption]:
    return [p for p in decisions.preemptions if p.reason is PreemptionReason.OVER_QUOTA]


@PROPERTY
@given(snapshots())
def test_quota_is_given_back_whatever_is_pending(snapshot: Snapshot) -> None:
    """Giving back quota lowered below usage comes first: no pending job changes it."""
    assert _over_quota(schedule(snapshot)) == _over_quota(schedule(replace(snapshot, pending=())))


@PROPERTY
@given(snapshots())
def test_nothing_more_is_given_back_while_the_victims_stop(snapshot: Snapshot) -> None:
    """The next cycle, with this cycle's victims still in their grace period, preempts nothing for quota."""
    stopping = {p.workload for p in schedule(snapshot).preemptions}
    running = tuple(replace(w, evicting=w.evicting or w.id in stopping) for w in snapshot.running)
    assert not _over_quota(schedule(replace(snapshot, running=running, pending=())))


# --------------------------------------------------------------------------- small scenarios, by hand

H100 = "h100"
ACCEL = (H100, "accelerator")
TIERS = (
    Tier("low", 0, preemptible=True, grace_seconds=300),
    Tier("normal", 10, preemptible=True, grace_seconds=300),
    Tier("urgent", 100, preemptible=False, grace_seconds=300),
)


def node(name: str, rack: str, used: int = 0, price: float = 2.0) -> Node:
    """An 8-GPU node whose first ``used`` GPUs (and 8 cores, 32 GiB each) are taken."""
    return Node(
        name=name,
        cluster="c0",
        flavor=H100,
        accel_free=(0,) * used + (1000,) * (8 - used),
        cpu_free=64_000 - 8000 * used,
        memory_free=262_144 - 32_768 * used,
        cpu_capacity=64_000,
        memory_capacity=262_144,
        topology=(rack.split(".")[0], rack),
        price_per_accel_hour=price,
    )


def workload(wid: str, queue: str, tier: str, node_name: str, gpus: int, ends_in: int, **kw: object) -> Workload:
    return Workload(
        id=wid,
        queue=queue,
        tier=tier,
        cluster="c0",
        flavor=H100,
        assignments=(Assignment(node_name, 1, tuple((i, 1000) for i in range(gpus)), 8000 * gpus, 32_768 * gpus),),
        admitted_at=NOW - 600,
        time_limit=600 + ends_in,
        submitted_at=NOW - 900,
        **kw,  # type: ignore[arg-type]
    )


def world() -> Snapshot:
    """One cluster of 8-GPU nodes in two blocks of racks, two queues in one cohort."""
    big = {("h100", "cpu"): Quota(1_000_000), ("h100", "memory"): Quota(10_000_000)}
    return Snapshot(
        now=NOW,
        clusters=(Cluster("c0", "eu-west", levels=("block", "rack")),),
        nodes=(
            node("n0", "b0.r0"),
            node("n1", "b0.r0"),
            node("n2", "b0.r1", used=8),
            node("n3", "b0.r1", used=8),
            node("n4", "b1.r2", used=4),
            node("n5", "b1.r2", used=8),
            node("n6", "b1.r3", used=2),
            node("n7", "b1.r3", price=4.0),
        ),
        tiers=TIERS,
        cohorts=(Cohort("org"),),
        queues=(
            Queue("qa", "org", {ACCEL: Quota(64_000), **big}, (H100,)),
            Queue("qb", "org", {ACCEL: Quota(4000, borrowing_limit=0), **big}, (H100,)),
        ),
        running=(
            workload("w-norm", "qa", "normal", "n2", 8, ends_in=7200),
            workload("w-urgent", "qa", "urgent", "n3", 8, ends_in=7200),
            workload("w-low", "qa", "low", "n4", 4, ends_in=1800),
            workload("w-low2", "qa", "low", "n5", 8, ends_in=3600),
            workload("w-b", "qb", "normal", "n6", 2, ends_in=7200),
        ),
        pending=(
            Job("j-urgent", "qa", "urgent", NOW - 60, accelerators=8, cpu=8000, memory=32_768),
            Job(
                "j-gang",
                "qa",
                "normal",
                NOW - 500,
                workers=2,
                accelerators=8,
                cpu=8000,
                memory=32_768,
                topology=Topology("rack", TopologyMode.REQUIRED),
            ),
            Job("j-big", "qa", "normal", NOW - 400, accelerators=8, cpu=8000, memory=32_768, time_limit=7200),
            Job("j-fill", "qa", "low", NOW - 300, cpu=8000, memory=32_768, time_limit=600),
            Job("j-late", "qa", "low", NOW - 200, cpu=8000, memory=32_768, time_limit=7200),
            Job("j-b2", "qb", "normal", NOW - 100, accelerators=4, cpu=8000, memory=32_768),
        ),
    )


def gpus(node_name: str, indices: range) -> Assignment:
    """One worker of the hand-built jobs (8 cores, 32 GiB) on these GPUs of a node."""
    return Assignment(node_name, 1, tuple((i, 1000) for i in indices), 8000, 32_768)


def valid_cycle() -> Decisions:
    """What a correct engine may decide for ``world()``: by hand, so that these tests do not need one."""
    return Decisions(
        admissions=(
            Admission("j-gang", "c0", H100, (gpus("n0", range(8)), gpus("n1", range(8))), False, 32.0),
            Admission("j-fill", "c0", H100, (gpus("n4", range(4, 5)),), False, 2.0, backfilled=True),
        ),
        preemptions=(Preemption("w-low2", "j-urgent", PreemptionReason.PRIORITY, "", 300, 4800.0),),
        reservations=(Reservation("j-big", "c0", H100, NOW + 1800, NOW + 9000, (gpus("n4", range(8)),)),),
        pending=(
            Pending("j-urgent", PendingReason.WAITING_FOR_PREEMPTION, ""),
            Pending("j-big", PendingReason.RESERVED, ""),
            Pending("j-late", PendingReason.CAPACITY, ""),
            Pending("j-b2", PendingReason.QUOTA_EXHAUSTED, ""),
        ),
        order=("j-urgent", "j-gang", "j-big", "j-fill", "j-late", "j-b2"),
    )


def admit(d: Decisions, admission: Admission) -> Decisions:
    """``d`` with one more admission, for a job that was pending."""
    return replace(
        d, admissions=(*d.admissions, admission), pending=tuple(p for p in d.pending if p.job != admission.job)
    )


def job(snapshot: Snapshot, job_id: str, **changes: object) -> Snapshot:
    pending = tuple(replace(j, **changes) if j.id == job_id else j for j in snapshot.pending)  # type: ignore[arg-type]
    return replace(snapshot, pending=pending)


class TestCheckerCatches:
    """Each test breaks one guarantee in an otherwise valid cycle; ``check`` must say which."""

    def test_the_valid_cycle_passes(self) -> None:
        check(world(), valid_cycle())

    def test_a_victim_younger_than_its_tiers_minimum_runtime(self) -> None:
        snapshot = world()
        tiers = tuple(replace(t, min_runtime=10 * 86400) for t in snapshot.tiers)
        with pytest.raises(AssertionError, match="less than its tier's minimum runtime"):
            check(replace(snapshot, tiers=tiers), valid_cycle())

    def test_preemptions_past_the_cap_on_disruption_or_mispriced(self) -> None:
        with pytest.raises(AssertionError, match="tier 'low'; its cap leaves 100"):
            check(replace(world(), disruption_left={"low": 100.0}), valid_cycle())
        cheap = replace(valid_cycle(), preemptions=(replace(valid_cycle().preemptions[0], lost=1.0),))
        with pytest.raises(AssertionError, match=r"it costs 4800\.0 accelerator-seconds, not 1\.0"):
            check(world(), cheap)

    def test_an_over_allocated_node(self) -> None:
        # n0 is already full with j-gang.
        with pytest.raises(AssertionError, match="accelerator 0 of node 'n0' over-allocated"):
            check(world(), admit(valid_cycle(), Admission("j-late", "c0", H100, (gpus("n0", range(1)),), False, 2.0)))

    def test_over_allocated_cpu(self) -> None:
        bloated = Assignment("n4", 1, ((5, 1000),), 64_000, 32_768)
        snapshot = job(world(), "j-late", cpu=64_000, time_limit=600)
        with pytest.raises(AssertionError, match="node 'n4' over-allocated: cpu free"):
            check(snapshot, admit(valid_cycle(), Admission("j-late", "c0", H100, (bloated,), False, 2.0)))

    def test_a_queue_over_its_borrowing_limit(self) -> None:
        # qb: nominal 4 GPUs, borrowing limit 0, already uses 2.
        with pytest.raises(AssertionError, match=r"queue 'qb' uses 6000 of \('h100', 'accelerator'\).*limit 4000"):
            check(world(), admit(valid_cycle(), Admission("j-b2", "c0", H100, (gpus("n6", range(2, 6)),), True, 8.0)))

    def test_a_queue_using_anothers_unlendable_quota(self) -> None:
        # qa lends nothing, so the cohort holds only qb's 4 GPUs; qb may borrow without limit, but not qa's.
        snapshot = world()
        qa, qb = snapshot.queues
        snapshot = replace(
            snapshot,
            queues=(
                replace(qa, quotas={**qa.quotas, ACCEL: Quota(64_000, lending_limit=0)}),
                replace(qb, quotas={**qb.quotas, ACCEL: Quota(4000)}),
            ),
        )
        check(snapshot, valid_cycle())
        with pytest.raises(AssertionError, match=r"cohort 'org' uses 6000 .* over its limit 4000 \(root"):
            check(snapshot, admit(valid_cycle(), Admission("j-b2", "c0", H100, (gpus("n6", range(2, 6)),), True, 8.0)))

    def test_a_required_rack_split_across_racks(self) -> None:
        d = valid_cycle()
        split = Admission("j-gang", "c0", H100, (gpus("n0", range(8)), gpus("n7", range(8))), False, 48.0)
        with pytest.raises(AssertionError, match="topology requires one 'rack' domain"):
            check(world(), replace(d, admissions=(split, *d.admissions[1:])))

    def test_a_gang_placed_in_part(self) -> None:
        d = valid_cycle()
        half = Admission("j-gang", "c0", H100, (gpus("n0", range(8)),), False, 16.0)
        with pytest.raises(AssertionError, match="1 workers placed, the job has 2"):
            check(world(), replace(d, admissions=(half, *d.admissions[1:])))

    def test_a_worker_short_of_accelerators(self) -> None:
        d = valid_cycle()
        short = Admission("j-gang", "c0", H100, (gpus("n0", range(8)), gpus("n1", range(7))), False, 30.0)
        with pytest.raises(AssertionError, match="7000 milli-accelerators on node 'n1' for 1 workers, expected 8000"):
            check(world(), replace(d, admissions=(short, *d.admissions[1:])))

    def test_an_unhealthy_node(self) -> None:
        snapshot = world()
        snapshot = replace(snapshot, nodes=(replace(snapshot.nodes[0], healthy=False), *snapshot.nodes[1:]))
        with pytest.raises(AssertionError, match="node 'n0' is unhealthy"):
            check(snapshot, valid_cycle())

    def test_a_job_over_its_price_limit(self) -> None:
        with pytest.raises(AssertionError, match=r"costs 2.0 per hour, the job's maximum is 1.5"):
            check(job(world(), "j-fill", max_price_per_hour=1.5), valid_cycle())

    def test_a_wrong_cost(self) -> None:
        d = valid_cycle()
        with pytest.raises(AssertionError, match=r"cost_per_hour=0.0, the nodes' prices add up to 2.0"):
            check(world(), replace(d, admissions=(d.admissions[0], replace(d.admissions[1], cost_per_hour=0.0))))

    def test_a_wrong_borrowing_flag(self) -> None:
        d = valid_cycle()
        with pytest.raises(AssertionError, match=r"borrowing=True, but the queue uses .* of its nominal"):
            check(world(), replace(d, admissions=(d.admissions[0], replace(d.admissions[1], borrowing=True))))

    def test_a_flavor_the_job_refuses(self) -> None:
        with pytest.raises(AssertionError, match="flavor 'h100' is not one of the job's flavors"):
            check(job(world(), "j-fill", flavors=("a100",)), valid_cycle())

    def test_preempting_a_non_preemptible_tier(self) -> None:
        d = valid_cycle()
        victim = replace(d.preemptions[0], workload="w-urgent")
        with pytest.raises(AssertionError, match="the victim's tier 'urgent' is not preemptible"):
            check(world(), replace(d, preemptions=(victim,)))

    def test_preempting_a_non_preemptible_workload(self) -> None:
        snapshot = world()
        running = tuple(replace(w, preemptible=False) if w.id == "w-low2" else w for w in snapshot.running)
        with pytest.raises(AssertionError, match="the victim is not preemptible"):
            check(replace(snapshot, running=running), valid_cycle())

    def test_urgency_removing_a_higher_tier(self) -> None:
        # j-fill (low) may not take w-norm (normal) of its own queue.
        d = valid_cycle()
        extra = Preemption("w-norm", "j-fill", PreemptionReason.PRIORITY, "", 300)
        d = replace(
            d,
            admissions=d.admissions[:1],
            preemptions=(*d.preemptions, extra),
            pending=(*d.pending, Pending("j-fill", PendingReason.WAITING_FOR_PREEMPTION, "")),
        )
        with pytest.raises(AssertionError, match="within_queue=lower_priority forbids a victim of tier 'normal'"):
            check(world(), d)

    def test_a_victim_preempted_twice(self) -> None:
        d = valid_cycle()
        again = Preemption("w-low2", "j-late", PreemptionReason.PRIORITY, "", 300)
        pending = tuple(
            p._replace(reason=PendingReason.WAITING_FOR_PREEMPTION) if p.job == "j-late" else p for p in d.pending
        )
        snapshot = job(world(), "j-late", tier="normal")
        with pytest.raises(AssertionError, match="already preempted this cycle by 'j-urgent'"):
            check(snapshot, replace(d, preemptions=(*d.preemptions, again), pending=pending))

    def test_a_victim_that_is_already_evicting(self) -> None:
        snapshot = world()
        running = tuple(replace(w, evicting=True) if w.id == "w-low2" else w for w in snapshot.running)
        with pytest.raises(AssertionError, match="the workload is already evicting"):
            check(replace(snapshot, running=running), valid_cycle())

    def test_reclaiming_from_a_queue_within_its_nominal_quota(self) -> None:
        # qb uses 2 of its 4 GPUs: it borrows nothing, so nobody may reclaim from it.
        d = valid_cycle()
        victim = Preemption("w-b", "j-urgent", PreemptionReason.RECLAIM, "", 300)
        with pytest.raises(AssertionError, match=r"victims \['w-b'\] of queue 'qb', which is not over its nominal"):
            check(world(), replace(d, preemptions=(victim,)))

    def test_fair_sharing_taking_from_a_queue_with_a_smaller_share(self) -> None:
        # qa borrows 12 of the cohort's 17 GPUs even without its victim w-low2; qb, 1 GPU over its nominal,
        # has a share of 0 without w-b: taking w-b would make the share of the one that has more grow.
        snapshot = world()
        qa, qb = snapshot.queues
        snapshot = replace(
            snapshot,
            queues=(
                replace(qa, quotas={**qa.quotas, ACCEL: Quota(16_000)}, reclaim=Reclaim.FAIR_SHARING),
                replace(qb, quotas={**qb.quotas, ACCEL: Quota(1000)}),
            ),
        )
        d = valid_cycle()
        taken = Preemption("w-b", "j-urgent", PreemptionReason.FAIR_SHARING, "", 300)
        with pytest.raises(AssertionError, match=r"fair sharing: queue 'qa' with the job has share 705.9, more than"):
            check(snapshot, replace(d, preemptions=(*d.preemptions, taken)))

    def test_a_preemptor_that_did_not_need_its_victims(self) -> None:
        # Victims run on through their grace period: a preemptor admitted in the same cycle never needed them.
        d = valid_cycle()
        victim = Preemption("w-low", "j-gang", PreemptionReason.PRIORITY, "", 300)
        with pytest.raises(AssertionError, match="the preemptor is admitted, not waiting for its victims"):
            check(world(), replace(d, preemptions=(*d.preemptions, victim)))

    def test_a_job_taking_the_room_a_preemptor_made(self) -> None:
        # j-urgent needs a whole 8-GPU node: w-low frees 4 GPUs of n4, whose other 4 j-fill then takes one of.
        snapshot = world()
        nodes = tuple(replace(n, schedulable=False) if n.name == "n7" else n for n in snapshot.nodes)
        d = valid_cycle()
        victim = replace(d.preemptions[0], workload="w-low")
        with pytest.raises(
            AssertionError, match=r"preemption for 'j-urgent' \(victims \['w-low'\]\): the job does not fit"
        ):
            check(replace(snapshot, nodes=nodes), replace(d, preemptions=(victim,)))

    def test_a_backfilled_job_overlapping_a_reservation(self) -> None:
        # j-late runs 2 hours on n4, whose 8 GPUs are reserved for j-big from now + 30 min.
        late = Admission("j-late", "c0", H100, (gpus("n4", range(5, 6)),), False, 2.0, backfilled=True)
        check(job(world(), "j-late", time_limit=1800), admit(valid_cycle(), late))  # ends in time: fine
        with pytest.raises(AssertionError, match=r"admission \(ends .*\) overlaps the reservation for 'j-big'"):
            check(world(), admit(valid_cycle(), late))

    def test_a_reservation_that_cannot_hold(self) -> None:
        # n4's other 4 GPUs are busy until now + 30 min: a reservation from now + 10 min cannot hold 8.
        d = valid_cycle()
        early = replace(d.reservations[0], start=NOW + 600, end=NOW + 7800)
        with pytest.raises(AssertionError, match=r"reservation cannot hold: at .* node 'n4' has accel=4000"):
            check(world(), replace(d, reservations=(early,)))

    def test_a_job_admitted_twice(self) -> None:
        d = valid_cycle()
        twice = replace(d.admissions[1], assignments=(gpus("n6", range(2, 3)),))
        with pytest.raises(AssertionError, match="job 'j-fill' is decided twice"):
            check(world(), replace(d, admissions=(*d.admissions, twice)))

    def test_a_job_both_admitted_and_pending(self) -> None:
        d = valid_cycle()
        with pytest.raises(AssertionError, match="job 'j-gang' is decided twice: admission and pending"):
            check(world(), replace(d, pending=(*d.pending, Pending("j-gang", PendingReason.CAPACITY, ""))))

    def test_a_forgotten_job(self) -> None:
        d = valid_cycle()
        with pytest.raises(AssertionError, match="job 'j-late' is neither admitted nor pending"):
            check(world(), replace(d, pending=tuple(p for p in d.pending if p.job != "j-late")))


# ---------------------------------------------------------------------------------- engine, by hand


def test_the_engine_keeps_the_guarantees_on_the_hand_built_world() -> None:
    check(world(), schedule(world()))


def test_one_victim_is_enough() -> None:
    """Minimality of the victim set: two low-priority jobs share the only node; an urgent one-GPU job needs one gone."""
    snapshot = Snapshot(
        now=NOW,
        clusters=(Cluster("c0", "eu-west"),),
        nodes=(Node("n0", "c0", H100, (0, 0), cpu_free=0, memory_free=0, cpu_capacity=16_000, memory_capacity=65_536),),
        tiers=TIERS,
        cohorts=(Cohort("org"),),
        queues=(Queue("qa", "org", {ACCEL: Quota(8000)}, (H100,)),),
        running=tuple(
            Workload(
                f"w{i}",
                "qa",
                "low",
                "c0",
                H100,
                (Assignment("n0", 1, ((i, 1000),), 8000, 32_768),),
                admitted_at=NOW - 600 + i,
                time_limit=3600,
            )
            for i in range(2)
        ),
        pending=(Job("urgent", "qa", "urgent", NOW, cpu=8000, memory=32_768),),
    )
    decisions = schedule(snapshot)
    check(snapshot, decisions)
    assert [p.preemptor for p in decisions.preemptions] == ["urgent"]
    assert decisions.pending[0].reason == PendingReason.WAITING_FOR_PREEMPTION
