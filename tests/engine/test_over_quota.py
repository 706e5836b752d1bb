"""Quota lowered below usage is given back (docs/scheduling.md §Quota lowered below usage), on hand-made fleets.

Every cycle here is also replayed by the independent checker (``invariants.check``), whose over-quota rules
(``over_quota_rules.py``) hold on random snapshots in ``test_properties.py``.
"""

from __future__ import annotations

import copy
from dataclasses import replace

import pytest

from scheduler.engine import schedule
from scheduler.engine.cycle import Cycle
from scheduler.engine.model import (
    Assignment,
    Cluster,
    Cohort,
    Decisions,
    Job,
    Node,
    PendingReason,
    Preemption,
    PreemptionReason,
    Queue,
    Quota,
    Reclaim,
    Snapshot,
    Tier,
    Workload,
)
from tests.engine.invariants import check

NOW = 1_000_000.0
H100 = "h100"
ACCEL = (H100, "accelerator")
TIERS = (Tier("low", 0, grace_seconds=120), Tier("normal", 100, grace_seconds=600), Tier("urgent", 1000, False))


def nodes(count: int, free: int = 0) -> tuple[Node, ...]:
    """``count`` 8-GPU nodes with ``free`` GPUs free (the rest held by the running work of the test)."""
    accel = (0,) * (8 - free) + (1000,) * free
    return tuple(Node(f"n{i}", "c1", H100, accel, 64_000, 512_000, 96_000, 1_000_000) for i in range(count))


def work(
    wid: str, node: str, gpus: int, queue: str = "a", tier: str = "low", age: float = 600, **kw: object
) -> Workload:
    """A workload on the first ``gpus`` GPUs of ``node`` (use each node's GPUs once), admitted ``age`` s ago."""
    assignment = Assignment(node, 1, tuple((i, 1000) for i in range(gpus)), 1000, 1024)
    return Workload(wid, queue, tier, "c1", H100, (assignment,), NOW - age, 7200, **kw)  # type: ignore[arg-type]


def spare() -> Node:
    """An idle 8-GPU node."""
    return Node("spare", "c1", H100, (1000,) * 8, 64_000, 512_000, 64_000, 512_000)


def split(node: str, *sizes: int) -> list[Assignment]:
    """Consecutive GPUs of one node for several workloads: ``split("n0", 4, 4)`` is GPUs 0-3 and 4-7."""
    out, first = [], 0
    for size in sizes:
        out.append(Assignment(node, 1, tuple((i, 1000) for i in range(first, first + size)), 1000, 1024))
        first += size
    return out


def on(w: Workload, assignment: Assignment) -> Workload:
    return replace(w, assignments=(assignment,))


def queue(name: str, nominal: int, borrowing: int | None = None, cohort: str | None = "org", **kw: object) -> Queue:
    return Queue(name, cohort, {ACCEL: Quota(nominal * 1000, borrowing)}, (H100,), **kw)  # type: ignore[arg-type]


def world(
    queues: tuple[Queue, ...],
    running: tuple[Workload, ...],
    pending: tuple[Job, ...] = (),
    cohorts: tuple[Cohort, ...] = (Cohort("org"),),
    fleet: tuple[Node, ...] | None = None,
) -> Snapshot:
    fleet = nodes(4) if fleet is None else fleet
    return Snapshot(NOW, (Cluster("c1", "eu"),), fleet, TIERS, cohorts, queues, running, pending)


def decide(snapshot: Snapshot) -> Decisions:
    decisions = schedule(snapshot)
    check(snapshot, decisions)
    return decisions


def victims(d: Decisions) -> list[str]:
    return [p.workload for p in d.preemptions]


def three_jobs_of_queue_a() -> tuple[Workload, ...]:
    """Queue a runs three 4-GPU jobs, old, mid and new, on n0 and n1."""
    old, mid, new = work("old", "n0", 4, age=3000), work("mid", "n0", 4, age=2000), work("new", "n1", 4, age=100)
    first, second = split("n0", 4, 4)
    return on(old, first), on(mid, second), new


# ---------------------------------------------------------------------------------------------- queues


def test_a_queue_lowered_below_its_usage_gives_back_its_newest_work_until_within_quota() -> None:
    running = three_jobs_of_queue_a()  # 12 GPUs
    d = decide(world((queue("a", 8, borrowing=0),), running))
    assert victims(d) == ["new"]
    (p,) = d.preemptions
    assert p == Preemption(
        "new",
        "",
        PreemptionReason.OVER_QUOTA,
        "Preempted: queue 'a' uses more h100 than its quota now allows (12 in use, at most 8). It is requeued and "
        "resumes from its last checkpoint; the work since its start (it has no checkpoint), about 0.11 "
        "accelerator-hours, is done again.",
        120,  # the tier's grace period
        400.0,  # its cost: 4 GPUs for the 100 s it has run
    )
    assert victims(decide(world((queue("a", 4, borrowing=0),), running))) == ["new", "mid"]
    assert victims(decide(world((queue("a", 0, borrowing=0),), running))) == ["new", "mid", "old"]


def test_a_queue_of_no_cohort_is_limited_by_its_nominal_quota() -> None:
    d = decide(world((queue("a", 8, cohort=None),), three_jobs_of_queue_a(), cohorts=()))
    assert victims(d) == ["new"]


def test_a_lowered_nominal_quota_with_room_to_borrow_only_makes_a_borrower() -> None:
    """Over its nominal quota but within what it may borrow: nothing is over, nothing is preempted."""
    d = decide(world((queue("a", 4), queue("b", 16)), three_jobs_of_queue_a()))
    assert not d.preemptions


def test_nothing_happens_within_quota() -> None:
    d = decide(world((queue("a", 12, borrowing=0),), three_jobs_of_queue_a()))
    assert not d.preemptions
    assert "over_quota" not in d.stats


def test_the_tier_comes_before_recency() -> None:
    old, new = split("n0", 4, 4)
    running = (on(work("old-low", "n0", 4, age=3000), old), on(work("new-normal", "n0", 4, tier="normal", age=60), new))
    assert victims(decide(world((queue("a", 4, borrowing=0),), running))) == ["old-low"]


def test_a_victim_the_node_turns_out_not_to_need_is_given_back() -> None:
    """Over by 4: the newest (1 GPU) and the next (4 GPUs) are taken, then the first is given back."""
    big, small, rest = split("n0", 4, 1, 3)
    running = (
        on(work("base", "n0", 3, age=5000), rest),
        on(work("four", "n0", 4, age=1000), big),
        on(work("one", "n0", 1, age=10), small),
    )
    assert victims(decide(world((queue("a", 4, borrowing=0),), running))) == ["four"]


def test_work_that_uses_none_of_the_column_is_not_taken() -> None:
    cpu_only = Workload("cpu", "a", "low", "c1", H100, (Assignment("n1", 1, (), 4000, 1024),), NOW - 1, 7200)
    running = (*three_jobs_of_queue_a(), cpu_only)
    assert victims(decide(world((queue("a", 8, borrowing=0),), running))) == ["new"]


def test_a_queue_that_never_reclaims_still_gives_back() -> None:
    d = decide(world((queue("a", 8, borrowing=0, reclaim=Reclaim.NEVER),), three_jobs_of_queue_a()))
    assert victims(d) == ["new"]


# --------------------------------------------------------------------------------------------- cohorts


def test_borrowed_work_goes_before_work_within_nominal_quota() -> None:
    """The cohort holds 16 GPUs (8 + 8) and runs 20: b borrows 4 of them, so b gives back, although a's work
    is newer."""
    b_old, b_new = split("n1", 4, 4)
    running = (
        work("a-new", "n0", 8, age=10),
        on(work("b-old", "n1", 4, queue="b", age=5000), b_old),
        on(work("b-new", "n1", 4, queue="b", age=3000), b_new),
        work("b-more", "n2", 4, queue="b", age=4000),
    )
    d = decide(world((queue("a", 8), queue("b", 8)), running))
    assert victims(d) == ["b-new"]
    assert d.preemptions[0].message == (
        "Preempted: cohort 'org' uses more h100 than its quota now allows (20 in use, at most 16); its queue 'b' "
        "was borrowing beyond its own quota. It is requeued and resumes from its last checkpoint; the work since its "
        "start (it has no checkpoint), about 3.33 accelerator-hours, is done again."
    )


def test_work_within_nominal_quota_goes_when_the_borrowed_work_cannot() -> None:
    """b borrows 4 of the cohort's 16 GPUs with non-preemptible work: a, within its nominal quota, gives back
    (the cohort must come within its quota, and only a's work can go)."""
    running = (
        work("a1", "n0", 8, age=100),
        work("b-prod", "n1", 8, queue="b", tier="urgent"),
        work("b-pinned", "n2", 4, queue="b", preemptible=False),
    )
    d = decide(world((queue("a", 8), queue("b", 8)), running))
    assert victims(d) == ["a1"]
    assert d.preemptions[0].message == (
        "Preempted: cohort 'org' uses more h100 than its quota now allows (20 in use, at most 16); its queue 'a' "
        "is within its own quota, but no borrowed work was left to give back. It is requeued and resumes from "
        "its last checkpoint; the work since its start (it has no checkpoint), about 0.22 accelerator-hours, is "
        "done again."
    )


def test_a_cohort_lowered_below_its_childrens_total() -> None:
    """Cohort 'research' may no longer borrow from 'org': its queues use 12 of its 8 GPUs, and a, the one
    borrowing, gives back; queue c elsewhere in 'org' is not touched."""
    cohorts = (Cohort("org"), Cohort("research", "org", {ACCEL: Quota(0, borrowing_limit=0)}))
    queues = (queue("a", 4, cohort="research"), queue("b", 4, cohort="research"), queue("c", 16))
    a1, a2 = split("n0", 4, 4)
    running = (
        on(work("a1", "n0", 4, age=900), a1),
        on(work("a2", "n0", 4, age=800), a2),
        work("b1", "n1", 4, queue="b", age=10),
        work("c1", "n2", 8, queue="c", age=5),
    )
    d = decide(world(queues, running, cohorts=cohorts))
    assert victims(d) == ["a2"]
    assert d.preemptions[0].message.startswith("Preempted: cohort 'research' uses more h100")


def test_a_queue_over_its_own_limit_gives_back_before_its_cohort_is_judged() -> None:
    """a may borrow at most 4 but runs 16: it gives back 4 for itself; the cohort (12 GPUs: 8 + 4) then still
    runs 16 with b's 4, and a, still borrowing, gives back again before b does."""
    running = (
        work("a1", "n0", 8, age=900),
        work("a2", "n1", 4, age=100),
        work("a3", "n2", 4, age=50),
        work("b1", "n3", 4, queue="b", age=10),
    )
    queues = (queue("a", 8, borrowing=4), queue("b", 4))
    d = decide(world(queues, running))
    assert victims(d) == ["a3", "a2"]


# ------------------------------------------------------------------------------------ what stays, and why


def test_non_preemptible_work_is_left_alone() -> None:
    running = (work("prod", "n0", 8, tier="urgent", age=10), work("batch", "n1", 4, age=900))
    assert victims(decide(world((queue("a", 8, borrowing=0),), running))) == ["batch"]
    pinned = (work("prod", "n0", 8, tier="urgent", age=10), work("pinned", "n1", 4, age=5, preemptible=False))
    fleet = (*nodes(2), spare())
    d = decide(world((queue("a", 8, borrowing=0),), pinned, pending=(Job("j", "a", "low", NOW - 5),), fleet=fleet))
    assert not d.preemptions  # only non-preemptible work is left: the queue stays over until it ends
    assert not d.admissions  # and nothing new starts meanwhile, though the nodes are free
    assert d.pending[0].reason is PendingReason.QUOTA_EXHAUSTED


def test_evicting_work_counts_as_already_leaving() -> None:
    snapshot = world((queue("a", 4, borrowing=0),), three_jobs_of_queue_a())
    first = decide(snapshot)
    assert victims(first) == ["new", "mid"]
    # The next cycle: the victims are still in their grace period.
    stopping = tuple(replace(w, evicting=w.id in victims(first)) for w in snapshot.running)
    assert not decide(replace(snapshot, running=stopping)).preemptions
    # Work told to stop earlier is not preempted again, and counts as leaving from the start.
    one_stopping = tuple(replace(w, evicting=w.id == "old") for w in snapshot.running)
    assert victims(decide(replace(snapshot, running=one_stopping))) == ["new"]


def test_victims_hold_their_quota_until_they_stop() -> None:
    """A job of the over queue, or of another queue of its cohort, is not admitted on capacity a victim still
    holds, though the nodes have room."""
    running = (work("a1", "n0", 8, age=900), work("a2", "n1", 8, age=100))
    pending = (Job("a-job", "a", "low", NOW - 5, accelerators=4), Job("b-job", "b", "low", NOW - 5, accelerators=4))
    d = decide(world((queue("a", 8), queue("b", 0)), running, pending, fleet=(*nodes(2), spare())))
    assert victims(d) == ["a2"]
    assert not d.admissions
    assert {p.job for p in d.pending} == {"a-job", "b-job"}


def test_a_job_that_fits_once_the_victims_are_gone_waits_for_them() -> None:
    """A higher-tier job of the over queue fits its quota once the victim has stopped: it waits for that
    victim (no victim of its own), and is told when it may start."""
    running = (work("a1", "n0", 4, age=900), work("a2", "n1", 8, age=100))
    pending = (Job("hi", "a", "normal", NOW - 5, accelerators=4),)
    d = decide(world((queue("a", 8, borrowing=0),), running, pending, fleet=(*nodes(2), spare())))
    assert victims(d) == ["a2"]
    (waiting,) = d.pending
    assert waiting.reason is PendingReason.WAITING_FOR_PREEMPTION
    assert waiting.message.startswith("1 lower-priority or borrowed job(s) were asked to stop")
    assert waiting.estimated_start == NOW + 120  # the victim's grace period


def test_the_phase_leaves_the_quota_tree_as_it_found_it() -> None:
    """Victims and evicting work run on through their grace: for admissions their usage is still there."""
    running = (*three_jobs_of_queue_a()[:2], replace(three_jobs_of_queue_a()[2], evicting=True))
    snapshot = world((queue("a", 0, borrowing=0), queue("b", 8)), running)
    cycle = Cycle(snapshot)
    before = copy.deepcopy(cycle.quota.usage)
    decisions = cycle.run()
    assert victims(decisions) == ["mid", "old"]
    assert cycle.quota.usage == before
    assert cycle.preemptor.victims == {"mid", "old"}


# ----------------------------------------------------------------------------------- the checker can fail


class TestCheckerCatches:
    """Each test breaks one over-quota rule in the engine's own (valid) cycle; ``check`` must say which."""

    snapshot = world((queue("a", 8, borrowing=0),), three_jobs_of_queue_a())

    def valid(self) -> Decisions:
        decisions = schedule(self.snapshot)
        assert victims(decisions) == ["new"]
        return decisions

    def test_a_node_left_over_quota(self) -> None:
        with pytest.raises(AssertionError, match=r"over quota: queue 'a' still uses 12000 .* \['mid', 'new', 'old'\]"):
            check(self.snapshot, replace(self.valid(), preemptions=()))

    def test_a_needless_victim(self) -> None:
        d = self.valid()
        extra = replace(d.preemptions[0], workload="mid")
        with pytest.raises(AssertionError, match="no node on the path of queue 'a' is over its potential"):
            check(self.snapshot, replace(d, preemptions=(*d.preemptions, extra)))

    def test_a_victim_that_is_not_preemptible(self) -> None:
        running = tuple(replace(w, preemptible=w.id != "new") for w in self.snapshot.running)
        with pytest.raises(AssertionError, match=r"the victim .* is not preemptible"):
            check(replace(self.snapshot, running=running), self.valid())

    def test_a_victim_already_evicting(self) -> None:
        running = tuple(replace(w, evicting=w.id == "new") for w in self.snapshot.running)
        with pytest.raises(AssertionError, match="the workload is already evicting"):
            check(replace(self.snapshot, running=running), self.valid())

    def test_the_wrong_grace_period(self) -> None:
        d = self.valid()
        with pytest.raises(AssertionError, match="grace 600 s, its tier 'low' gives 120 s"):
            check(self.snapshot, replace(d, preemptions=(replace(d.preemptions[0], grace_seconds=600),)))

    def test_an_over_quota_reason_for_a_pending_job(self) -> None:
        d = self.valid()
        with pytest.raises(AssertionError, match="reason over_quota with preemptor 'j'"):
            check(self.snapshot, replace(d, preemptions=(replace(d.preemptions[0], preemptor="j"),)))

    def test_a_victim_of_nobody_for_another_reason(self) -> None:
        d = self.valid()
        with pytest.raises(AssertionError, match="reason reclaim with preemptor ''"):
            check(
                self.snapshot,
                replace(d, preemptions=(replace(d.preemptions[0], reason=PreemptionReason.RECLAIM),)),
            )
