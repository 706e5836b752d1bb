"""Capacity a team booked ahead for a deadline (``Booking``, docs/scheduling.md §Bookings): closed to other teams'
work that could not be stopped in time, lent to their preemptible work while unused, taken back when the team
needs it, and open to the team's own work whatever its queue's place in the cohort."""

from __future__ import annotations

from dataclasses import replace

from scheduler.engine import schedule
from scheduler.engine.model import Booking, PendingReason, PreemptionReason, Reclaim, Snapshot

from .test_phases import NOW, admitted, job, node, queue, reasons, running, snapshot

# Queues "a" (team alpha) and "b" (team beta), each with 8 GPUs of quota in one cohort.
QUEUES = (queue("a", quota=8), queue("b", quota=8))


def booked(s: Snapshot, start: float, end: float, nodes: tuple[str, ...] = ("n1",), team: str = "alpha") -> Snapshot:
    return replace(s, bookings=(Booking("reservation 7", team, "c1", nodes, start, end),))


def test_another_teams_work_that_cannot_be_stopped_does_not_start_into_a_booking():
    jobs = (job("j", queue="b", team="beta", preemptible=False),)
    d = schedule(booked(snapshot((node("n1"),), QUEUES, jobs), NOW + 1800, NOW + 7200))
    (p,) = d.pending
    assert p.reason is PendingReason.MAINTENANCE
    assert "would run into capacity team alpha reserved ahead (reservation 7) on c1" in p.message
    # It may start on nodes nobody booked.
    d = schedule(booked(snapshot((node("n1"), node("n2")), QUEUES, jobs), NOW + 1800, NOW + 7200))
    assert [a.node for a in admitted(d)["j"].assignments] == ["n2"]  # type: ignore[attr-defined]


def test_the_booking_teams_own_work_and_other_teams_preemptible_work_may_use_the_nodes():
    mine = job("mine", queue="a", team="alpha", preemptible=False)
    assert "mine" in admitted(schedule(booked(snapshot((node("n1"),), QUEUES, (mine,)), NOW + 1800, NOW + 7200)))
    lent = job("lent", queue="b", team="beta")  # preemptible: lent the nodes until alpha needs them
    assert "lent" in admitted(schedule(booked(snapshot((node("n1"),), QUEUES, (lent,)), NOW - 60, NOW + 7200)))


def test_the_team_takes_its_booked_nodes_back_from_other_teams_preemptible_work():
    # beta's job runs on n1 within beta's own quota (no borrowing: reclaim would not take it), at the same tier.
    work = (running("theirs", "n1", queue="b", tier="normal", team="beta"),)
    mine = (job("mine", queue="a", team="alpha", accelerators=8),)
    s = snapshot((node("n1", free=0),), QUEUES, mine, work)
    assert not schedule(s).preemptions  # without the booking, beta's work is beyond reach
    d = schedule(booked(s, NOW - 60, NOW + 7200))
    (p,) = d.preemptions
    assert (p.workload, p.preemptor, p.reason) == ("theirs", "mine", PreemptionReason.BOOKED)
    assert "capacity team alpha reserved ahead" in p.message
    assert reasons(d)["mine"] is PendingReason.WAITING_FOR_PREEMPTION


def test_the_nodes_are_taken_back_ahead_of_the_booking_by_the_victims_grace():
    work = (running("theirs", "n1", queue="b", tier="normal", team="beta"),)  # the tier's grace: 300 s
    mine = (job("mine", queue="a", team="alpha", accelerators=8),)
    s = snapshot((node("n1", free=0),), QUEUES, mine, work)
    grace = schedule(booked(s, NOW - 60, NOW + 7200)).preemptions[0].grace_seconds
    assert schedule(booked(s, NOW + grace, NOW + 7200)).preemptions  # it will have stopped at the start
    assert not schedule(booked(s, NOW + grace + 60, NOW + 7200)).preemptions  # too early yet


def test_a_booking_takes_back_only_its_own_nodes_and_never_the_teams_own_work():
    nodes = (node("n1", free=0), node("n2", free=0))
    work = (
        running("elsewhere", "n2", queue="b", tier="normal", team="beta"),
        running("ours", "n1", queue="a", tier="low", team="alpha"),
    )
    mine = (job("mine", queue="a", team="alpha", accelerators=8, tier="low"),)
    d = schedule(booked(snapshot(nodes, QUEUES, mine, work), NOW - 60, NOW + 7200))
    assert not d.preemptions


def test_other_teams_are_not_told_their_reach_changed_when_nobody_booked():
    s = snapshot((node("n1"),), QUEUES, (job("j", queue="b", team="beta", preemptible=False),))
    assert schedule(s) == schedule(booked(s, NOW - 7200, NOW - 60))  # an ended booking changes nothing


def test_a_booking_lends_its_right_to_take_nodes_back_to_its_own_team_only():
    # alpha's 16-GPU job looks at beta's work on alpha's booked n1 but cannot start (n2 holds work that cannot
    # be stopped); gamma's job, next, must not take beta's work as if the booking were gamma's.
    nodes = (node("n1", free=0), node("n2", free=0))
    work = (
        running("theirs", "n1", queue="b", tier="normal", team="beta"),
        running("fixed", "n2", queue="z", tier="urgent", team="zeta"),
    )
    queues = (
        queue("a", quota=16),
        queue("b", quota=8),
        queue("c", quota=8, reclaim=Reclaim.FAIR_SHARING),
        queue("z", quota=8),
    )
    jobs = (
        job("alpha-big", queue="a", team="alpha", accelerators=8, workers=2),
        job("gamma", queue="c", team="gamma", accelerators=8, time_limit=600, tier="low", at=1),
    )
    d = schedule(booked(snapshot(nodes, queues, jobs, work), NOW - 60, NOW + 7200))
    assert not d.preemptions
