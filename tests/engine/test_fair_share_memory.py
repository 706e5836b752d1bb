"""Fair share with memory (``scheduler/engine/fairshare.py``): recent use counts where shares are compared."""

from __future__ import annotations

from dataclasses import replace

import pytest

from scheduler.engine import schedule
from scheduler.engine.fairshare import memory_terms, standings
from scheduler.engine.model import Cohort, PreemptionReason, Queue, Reclaim, Snapshot
from scheduler.engine.quota import QuotaTree

from .test_phases import admitted, gpus, job, node, running, snapshot


def tree(cohorts: list[Cohort], queues: list[Queue]) -> QuotaTree:
    return QuotaTree(cohorts, queues, ["h100"])


def q(name: str, cohort: str | None, quota: int = 0, weight: float = 1.0) -> Queue:
    return Queue(name, cohort, {("h100", "accelerator"): gpus(quota)} if quota else {}, ("h100",), weight=weight)


def test_a_queue_stands_by_its_part_of_its_siblings_recent_use_against_its_part_of_their_quota():
    queues = [q("a", "org", 8), q("b", "org", 24)]
    t = tree([Cohort("org")], queues)
    got = {t.names[i]: s for i, s in enumerate(standings(t, {x.name: x for x in queues}, {"a": 30.0, "b": 10.0}))}
    assert got["a"].portion == pytest.approx(0.75)
    assert got["a"].entitlement == pytest.approx(0.25)
    assert got["a"].standing == pytest.approx(500.0)
    assert got["b"].standing == pytest.approx(-500.0)
    assert got["org"].recent == pytest.approx(40.0)
    assert got["org"].standing == 0.0


def test_without_quotas_the_weights_say_the_fair_part():
    queues = [q("a", None, weight=3.0), q("b", None, weight=1.0)]
    t = tree([], queues)
    got = standings(t, {x.name: x for x in queues}, {"a": 50.0, "b": 50.0})
    assert [s.entitlement for s in got] == [pytest.approx(0.75), pytest.approx(0.25)]
    assert [s.standing for s in got] == [pytest.approx(-250.0), pytest.approx(250.0)]


def test_a_queue_carries_the_standing_of_every_cohort_above_it():
    # Two departments of equal quota; research used three times what product did, all of it through "vision".
    cohorts = [Cohort("org"), Cohort("research", "org"), Cohort("product", "org")]
    queues = [q("vision", "research", 8), q("speech", "research", 8), q("ads", "product", 16)]
    t = tree(cohorts, queues)
    got = {
        t.names[i]: s for i, s in enumerate(standings(t, {x.name: x for x in queues}, {"vision": 30.0, "ads": 10.0}))
    }
    assert got["research"].standing == pytest.approx(250.0)
    assert got["vision"].standing == pytest.approx(500.0)
    assert got["vision"].term == pytest.approx(750.0)
    assert got["speech"].term == pytest.approx(-500.0 + 250.0)
    assert got["ads"].term == pytest.approx(-250.0)  # alone in its cohort: only its cohort's standing


def test_nothing_used_or_no_weight_adds_nothing():
    queues = [q("a", "org", 8), q("b", "org", 8)]
    t = tree([Cohort("org")], queues)
    by_name = {x.name: x for x in queues}
    assert memory_terms(t, by_name, {}, 1.0) == [0.0, 0.0, 0.0]
    assert memory_terms(t, by_name, {"a": 5.0}, 0.0) == [0.0, 0.0, 0.0]
    assert memory_terms(t, by_name, {"a": 5.0}, 2.0)[1] == pytest.approx(1000.0)


def one_free_node_two_queues(usage_weight: float = 1.0) -> Snapshot:
    # Both queues are within their quota (no one borrows now); b's job came later.
    nodes = (node("n1", free=8), node("n2", free=0))
    work = (running("a-old", "n2", queue="a", tier="normal"),)
    queues = (q("a", "org", 16), q("b", "org", 16))
    pending = (job("a-next", "a", at=0, accelerators=8), job("b-next", "b", at=300, accelerators=8))
    return snapshot(nodes, queues, pending, work, backfill=False, short_first=0.0, usage_weight=usage_weight)


def test_the_queue_that_used_less_lately_goes_first():
    snap = one_free_node_two_queues()
    assert set(admitted(schedule(snap))) == {"a-next"}  # no memory: first come, first served
    remembered = replace(snap, usage={"a": 400.0, "b": 40.0})
    assert set(admitted(schedule(remembered))) == {"b-next"}
    assert set(admitted(schedule(replace(remembered, usage={"a": 40.0, "b": 400.0})))) == {"a-next"}


def test_a_usage_weight_of_zero_forgets():
    snap = replace(one_free_node_two_queues(usage_weight=0.0), usage={"a": 400.0, "b": 40.0})
    assert set(admitted(schedule(snap))) == {"a-next"}


def test_fair_sharing_reclaim_takes_from_the_queue_that_used_more_than_its_part_lately():
    # The cohort has 16 GPUs and the queues none of their own: a and b borrow 8 each now. b asks for 4 more; by
    # the share of the moment that is unfair to a (b would borrow 12 against a's 0), so b waits. A week in which
    # a used nine tenths of the cohort's hours tips it: taking a's job is fair.
    nodes = (node("n1", free=0), node("n2", free=0))
    work = (running("a-1", "n1", queue="a", tier="normal"), running("b-1", "n2", queue="b", tier="normal"))
    queues = (q("a", "org"), replace(q("b", "org"), reclaim=Reclaim.FAIR_SHARING))
    cohorts = (Cohort("org", quotas={("h100", "accelerator"): gpus(16)}),)
    pending = (job("b-more", "b", accelerators=4),)
    snap = snapshot(nodes, queues, pending, work, cohorts=cohorts, backfill=False)
    assert not schedule(snap).preemptions
    d = schedule(replace(snap, usage={"a": 90.0, "b": 10.0}))
    assert [(p.workload, p.preemptor, p.reason) for p in d.preemptions] == [
        ("a-1", "b-more", PreemptionReason.FAIR_SHARING)
    ]
