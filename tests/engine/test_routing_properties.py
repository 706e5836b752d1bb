"""Properties of routing on random fleets whose clusters run different programs and have maintenance
windows and bookings: a job never goes where it cannot run or is excluded, a non-preemptible job never starts
into a window (a booking of another team's), and no reservation is planned across one; work is taken for a
booking only from other teams, on its nodes, once it begins; every other guarantee still holds
(``invariants.check``)."""

from __future__ import annotations

from dataclasses import replace

from hypothesis import given
from hypothesis import strategies as st

from scheduler.engine import schedule
from scheduler.engine.model import BATCH, CONTAINERS, Booking, Maintenance, PreemptionReason, Snapshot
from tests.engine.invariants import check
from tests.engine.strategies import TEAMS, snapshots

from .test_properties import PROPERTY

RUNS = st.sampled_from([frozenset({CONTAINERS}), frozenset({BATCH}), frozenset({CONTAINERS, BATCH})])


def _varied(snapshot: Snapshot, data: st.DataObject) -> Snapshot:
    clusters = tuple(replace(c, runs=data.draw(RUNS)) for c in snapshot.clusters)
    names = [c.name for c in clusters]
    pending = tuple(
        replace(
            j,
            needs=data.draw(st.sampled_from(["", CONTAINERS, BATCH])),
            excluded=tuple((n, "refused it: no") for n in data.draw(st.lists(st.sampled_from(names), max_size=1))),
        )
        for j in snapshot.pending
    )
    windows: list[Maintenance] = []
    bookings: list[Booking] = []
    for k in range(data.draw(st.integers(0, 3))):
        cluster = data.draw(st.sampled_from(names))
        nodes = [n.name for n in snapshot.nodes if n.cluster == cluster]
        chosen: tuple[str, ...] = (
            tuple(data.draw(st.lists(st.sampled_from(nodes), max_size=3, unique=True))) if nodes else ()
        )
        start = snapshot.now + data.draw(st.integers(-3600, 12 * 3600))
        end = start + data.draw(st.integers(60, 8 * 3600))
        booking: bool = data.draw(st.booleans())
        if chosen and booking:  # capacity a team booked
            bookings.append(Booking(f"b{k}", data.draw(st.sampled_from(TEAMS)), cluster, chosen, start, end))
        else:
            windows.append(Maintenance(cluster, chosen, start, end))
    return replace(snapshot, clusters=clusters, pending=pending, maintenance=tuple(windows), bookings=tuple(bookings))


def _closed(snapshot: Snapshot, node: str, start: float, end: float, team: str = "") -> bool:
    """Whether ``node`` is closed to a job of ``team`` at some time in ``[start, end)``."""
    cluster = node.split("/")[0] if "/" in node else next(n.cluster for n in snapshot.nodes if n.name == node)
    windows: list[Maintenance | Booking] = [*snapshot.maintenance, *(b for b in snapshot.bookings if b.team != team)]
    return any(
        w.cluster == cluster and (not w.nodes or node in w.nodes) and w.start < end and start < w.end for w in windows
    )


@PROPERTY
@given(snapshots(), st.data())
def test_routing_respects_programs_exclusions_and_maintenance(snapshot: Snapshot, data: st.DataObject) -> None:
    snapshot = _varied(snapshot, data)
    decisions = schedule(snapshot)
    check(snapshot, decisions)
    jobs = {j.id: j for j in snapshot.pending}
    clusters = {c.name: c for c in snapshot.clusters}
    for admission in decisions.admissions:
        job = jobs[admission.job]
        assert not clusters[admission.cluster].refuses(job.needs), (job.id, job.needs, admission.cluster)
        assert admission.cluster not in dict(job.excluded)
        if not job.preemptible:
            end = snapshot.now + job.time_limit
            assert not any(_closed(snapshot, a.node, snapshot.now, end, job.team) for a in admission.assignments), (
                job.id
            )
    for reservation in decisions.reservations:
        job = jobs[reservation.job]
        assert not clusters[reservation.cluster].refuses(job.needs)
        assert reservation.cluster not in dict(job.excluded)
        assert not any(
            _closed(snapshot, a.node, reservation.start, reservation.end, job.team) for a in reservation.assignments
        )
    work = {w.id: w for w in snapshot.running}
    for preemption in decisions.preemptions:
        if preemption.reason is not PreemptionReason.BOOKED:
            continue
        victim, team = work[preemption.workload], jobs[preemption.preemptor].team
        assert victim.team != team, preemption
        assert victim.preemptible, preemption
        assert any(
            b.team == team
            and b.cluster == victim.cluster
            and b.start <= snapshot.now + preemption.grace_seconds
            and snapshot.now < b.end
            and any(a.node in b.nodes for a in victim.assignments)
            for b in snapshot.bookings
        ), preemption
