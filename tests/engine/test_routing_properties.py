"""Properties of routing on random fleets whose clusters run different programs and have maintenance
windows: a job never goes where it cannot run or is excluded, a non-preemptible job never starts into a
window, and no reservation is planned across one; every other guarantee still holds (``invariants.check``)."""

from __future__ import annotations

from dataclasses import replace

from hypothesis import given
from hypothesis import strategies as st

from scheduler.engine import schedule
from scheduler.engine.model import BATCH, CONTAINERS, Maintenance, Snapshot
from tests.engine.invariants import check
from tests.engine.strategies import snapshots

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
    windows = []
    for _ in range(data.draw(st.integers(0, 3))):
        cluster = data.draw(st.sampled_from(names))
        nodes = [n.name for n in snapshot.nodes if n.cluster == cluster]
        chosen = tuple(data.draw(st.lists(st.sampled_from(nodes), max_size=3, unique=True))) if nodes else ()
        start = snapshot.now + data.draw(st.integers(-3600, 12 * 3600))
        windows.append(Maintenance(cluster, chosen, start, start + data.draw(st.integers(60, 8 * 3600))))
    return replace(snapshot, clusters=clusters, pending=pending, maintenance=tuple(windows))


def _closed(snapshot: Snapshot, node: str, start: float, end: float) -> bool:
    cluster = node.split("/")[0] if "/" in node else next(n.cluster for n in snapshot.nodes if n.name == node)
    return any(
        w.cluster == cluster and (not w.nodes or node in w.nodes) and w.start < end and start < w.end
        for w in snapshot.maintenance
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
            assert not any(_closed(snapshot, a.node, snapshot.now, end) for a in admission.assignments), job.id
    for reservation in decisions.reservations:
        job = jobs[reservation.job]
        assert not clusters[reservation.cluster].refuses(job.needs)
        assert reservation.cluster not in dict(job.excluded)
        assert not any(_closed(snapshot, a.node, reservation.start, reservation.end) for a in reservation.assignments)
