"""Disruption control (docs/scheduling.md §Disruption): a tier's minimum runtime before preemption, a cap on the
work preemptions may lose per hour, and the cost of each preemption in its victim's timeline."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace

from scheduler.engine import schedule
from scheduler.engine.model import PendingReason, Snapshot, Tier

from .test_phases import NOW, job, node, queue, reasons, running, snapshot

TIERS = (Tier("low", 0, grace_seconds=60), Tier("normal", 100))


def two_busy_nodes(min_runtime: float = 0.0, disruption_left: Mapping[str, float] | None = None) -> Snapshot:
    """Two nodes held by low-tier work (one started 10 min ago, one 2 h ago, that checkpointed 5 min ago); two
    normal-tier jobs that each need a whole node."""
    work = (
        running("young", "n1", tier="low", admitted_at=NOW - 600),
        running("old", "n2", tier="low", admitted_at=NOW - 7200, last_checkpoint_at=NOW - 300),
    )
    pending = (job("first", tier="normal", accelerators=8, at=0), job("second", tier="normal", accelerators=8, at=10))
    snap = snapshot((node("n1", free=0), node("n2", free=0)), (queue("a"),), pending, work, backfill=False)
    tiers = (replace(TIERS[0], min_runtime=min_runtime), TIERS[1])
    return replace(snap, tiers=tiers, disruption_left=disruption_left or {})


def test_a_job_younger_than_its_tiers_minimum_runtime_is_not_preempted() -> None:
    free_for_all = schedule(two_busy_nodes())
    assert sorted(p.workload for p in free_for_all.preemptions) == ["old", "young"]
    protected = schedule(two_busy_nodes(min_runtime=3600))
    assert [p.workload for p in protected.preemptions] == ["old"]
    assert reasons(protected)["second"] is PendingReason.CAPACITY


def test_each_preemption_says_what_it_costs_its_victim() -> None:
    decisions = schedule(two_busy_nodes())
    cost = {p.workload: (p.lost, p.message) for p in decisions.preemptions}
    # The old one checkpointed 5 minutes ago: 8 GPUs x 300 s; the young one never did: 8 GPUs x 600 s.
    assert cost["old"][0] == 8 * 300
    assert "the work since its last checkpoint, about 0.67 accelerator-hours, is done again" in cost["old"][1]
    assert cost["young"][0] == 8 * 600
    assert "the work since its start (it has no checkpoint), about 1.33 accelerator-hours" in cost["young"][1]


def test_a_cap_on_disruption_holds_back_preemptions_that_would_lose_more() -> None:
    # Room for one preemption's loss of the low tier's work (the cheapest victim's 2,400 accelerator-seconds), not
    # two; a cap on another tier changes nothing.
    decisions = schedule(two_busy_nodes(disruption_left={"low": 3000.0}))
    assert [p.workload for p in decisions.preemptions] == ["old"]
    (waiting,) = [p for p in decisions.pending if p.job == "second"]
    assert "cap on disruption" in waiting.message
    assert not schedule(two_busy_nodes(disruption_left={"low": 1000.0})).preemptions
    assert len(schedule(two_busy_nodes(disruption_left={"normal": 0.0})).preemptions) == 2


def test_only_jobs_that_accept_spot_go_on_spot_nodes() -> None:
    nodes = (node("spot", spot=True), node("on-demand", free=4))
    pending = (job("careful", accelerators=8), job("thrifty", accelerators=8, spot=True, at=10))
    decisions = schedule(snapshot(nodes, (queue("a"),), pending, backfill=False))
    placed = {a.job: a.assignments[0].node for a in decisions.admissions}
    assert placed == {"thrifty": "spot"}  # the careful one waits for on-demand room
    assert reasons(decisions)["careful"] is PendingReason.CAPACITY
    either = schedule(snapshot((node("on-demand"),), (queue("a"),), pending[1:], backfill=False))
    assert [a.assignments[0].node for a in either.admissions] == ["on-demand"]  # spot is allowed, not required


def test_a_job_only_spot_nodes_could_hold_is_told_to_accept_spot() -> None:
    nodes = (node("spot", spot=True), node("small", count=4, free=4))
    pending = (job("careful", accelerators=8), job("thrifty", accelerators=8, spot=True, at=10))
    decisions = schedule(snapshot(nodes, (queue("a"),), pending, backfill=False))
    (careful,) = [p for p in decisions.pending if p.job == "careful"]
    assert careful.reason is PendingReason.NEVER_FITS
    assert careful.message.startswith("Only spot nodes of h100 could hold")
    assert [a.job for a in decisions.admissions] == ["thrifty"]  # the same shape, judged apart


def long_and_short(srpt: float, max_wait: float = 0.0, long_submitted: float = NOW - 7200) -> Snapshot:
    """Two nodes held by work of the pending job's own tier: one with 10 h left, one with 30 min; a 1-hour job
    that needs a whole node waits."""
    work = (
        running("long", "n1", tier="normal", admitted_at=NOW - 3600, time_limit=11 * 3600, submitted_at=long_submitted),
        running("nearly-done", "n2", tier="normal", admitted_at=NOW - 3600, time_limit=5400, submitted_at=NOW - 3600),
    )
    pending = (job("short", tier="normal", accelerators=8, time_limit=3600),)
    snap = snapshot((node("n1", free=0), node("n2", free=0)), (queue("a"),), pending, work, backfill=False, srpt=srpt)
    return replace(snap, tiers=(TIERS[0], replace(TIERS[1], max_wait=max_wait)))


def test_shortest_remaining_time_first_preempts_work_with_far_more_left_of_the_same_tier() -> None:
    assert not schedule(long_and_short(srpt=0)).preemptions  # off by default: equal tiers never preempt
    decisions = schedule(long_and_short(srpt=4))
    assert [p.workload for p in decisions.preemptions] == ["long"]  # 10 h left > 4 x 1 h; 30 min is not
    assert not schedule(long_and_short(srpt=12)).preemptions  # 10 h left is not 12 x 1 h
    # work that started past its tier's bound on waiting (it waited an hour, the bound is 30 min) is left alone
    assert not schedule(long_and_short(srpt=4, max_wait=1800)).preemptions
    # nor work that its own aging puts ahead of the job (short_first 8): submitted 73 h ago with 10 h left, it is
    # ordered as if submitted 73 - 8 x 10 = 7 h from now, before the short job (17 min ago, 1 h: 7.7 h from now)
    assert not schedule(long_and_short(srpt=4, long_submitted=NOW - 73 * 3600)).preemptions
    assert schedule(long_and_short(srpt=4, long_submitted=NOW - 71 * 3600)).preemptions  # 9 h from now: after it
