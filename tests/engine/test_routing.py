"""Routing by what clusters run, exclusions and maintenance windows, on small hand-made fleets."""

from __future__ import annotations

import math
from dataclasses import replace

from scheduler.engine import explain, schedule
from scheduler.engine.model import BATCH, CONTAINERS, Cluster, Maintenance, PendingReason, Snapshot

from .test_phases import NOW, admitted, job, node, queue, reasons, running, snapshot

LEVELS = ("block", "rack")
K8S = Cluster("k8s-a", "eu", LEVELS, runs=frozenset({CONTAINERS}))
SLURM = Cluster("slurm-b", "eu", LEVELS, runs=frozenset({BATCH}))
FLEET = (K8S, SLURM)
NODES = (node("k1", cluster="k8s-a", price=1.0), node("s1", cluster="slurm-b", price=5.0))


def pending(decisions: object, job_id: str) -> object:
    return next(p for p in decisions.pending if p.job == job_id)  # type: ignore[attr-defined]


# ----------------------------------------------------------------------------------------------- capabilities


def test_a_job_goes_only_where_its_program_can_run():
    jobs = (job("script", accelerators=8, needs=BATCH), job("image", accelerators=8, needs=CONTAINERS, at=1))
    d = schedule(snapshot(NODES, (queue("a"),), jobs, clusters=FLEET))
    assert admitted(d)["script"].cluster == "slurm-b"  # type: ignore[attr-defined]
    assert admitted(d)["image"].cluster == "k8s-a"  # type: ignore[attr-defined]


def test_a_job_no_cluster_can_run_says_which_were_ruled_out_and_why():
    d = schedule(snapshot(NODES[:1], (queue("a"),), (job("j", needs=BATCH),), clusters=FLEET))
    p = pending(d, "j")
    assert p.reason is PendingReason.NO_CLUSTER  # type: ignore[attr-defined]
    assert p.message == "No cluster here runs batch scripts without a container image: k8s-a needs a container image."  # type: ignore[attr-defined]
    assert not p.refused  # type: ignore[attr-defined]


def test_a_job_waits_for_capacity_rather_than_going_where_it_cannot_run():
    busy = (node("k1", cluster="k8s-a"), node("s1", cluster="slurm-b", free=0))
    d = schedule(snapshot(busy, (queue("a"),), (job("j", accelerators=8, needs=BATCH),), clusters=FLEET))
    assert reasons(d)["j"] is PendingReason.CAPACITY
    assert not d.reservations or d.reservations[0].cluster == "slurm-b"


def test_preemption_looks_only_where_the_job_can_run():
    full = (node("k1", cluster="k8s-a", free=0), node("s1", cluster="slurm-b", free=0))
    victims = (
        replace(running("on-k8s", "k1"), cluster="k8s-a"),
        replace(running("on-slurm", "s1"), cluster="slurm-b", admitted_at=NOW - 60),
    )
    d = schedule(snapshot(full, (queue("a"),), (job("j", accelerators=8, needs=BATCH),), victims, clusters=FLEET))
    assert [p.workload for p in d.preemptions] == ["on-slurm"]


def test_an_old_cluster_runs_everything():
    d = schedule(snapshot((node("n1"),), (queue("a"),), (job("j", needs=BATCH), job("i", needs=CONTAINERS, at=1))))
    assert set(admitted(d)) == {"j", "i"}


# ----------------------------------------------------------------------------------------------- exclusions


def test_an_excluded_cluster_is_not_offered():
    excluded = (("k8s-a", "refused it: no such LocalQueue"),)
    d = schedule(snapshot(NODES, (queue("a"),), (job("j", accelerators=8, excluded=excluded),), clusters=FLEET))
    assert admitted(d)["j"].cluster == "slurm-b"  # type: ignore[attr-defined]


def test_refused_everywhere_fails_the_job_with_the_clusters_words():
    excluded = (("slurm-b", "refused it: invalid partition 'gpuz'"),)
    d = schedule(snapshot(NODES, (queue("a"),), (job("j", needs=BATCH, excluded=excluded),), clusters=FLEET))
    p = pending(d, "j")
    assert p.reason is PendingReason.NO_CLUSTER  # type: ignore[attr-defined]
    assert p.message == (  # type: ignore[attr-defined]
        "No cluster can run it: k8s-a needs a container image; slurm-b refused it: invalid partition 'gpuz'."
    )
    assert p.refused  # type: ignore[attr-defined]


def test_a_cluster_out_of_reach_for_a_while_does_not_fail_the_job():
    excluded = (("slurm-b", "refused it: bad spec"), ("k8s-a", "could not be reached for it: timeout"))
    d = schedule(snapshot(NODES, (queue("a"),), (job("j", excluded=excluded),), clusters=FLEET))
    p = pending(d, "j")
    assert p.reason is PendingReason.NO_CLUSTER  # type: ignore[attr-defined]
    assert not p.refused  # type: ignore[attr-defined]
    assert explain.refused_everywhere([("slurm-b", "refused it: bad spec", True)])
    assert not explain.refused_everywhere([("k8s-a", "needs a container image", True)])


def test_many_ruled_out_clusters_are_named_briefly():
    clusters = tuple(Cluster(f"k{i}", "eu", LEVELS, runs=frozenset({CONTAINERS})) for i in range(7))
    nodes = tuple(node(f"n{i}", cluster=f"k{i}") for i in range(7))
    d = schedule(snapshot(nodes, (queue("a"),), (job("j", needs=BATCH),), clusters=clusters))
    message = pending(d, "j").message  # type: ignore[attr-defined]
    assert message.endswith("k3 needs a container image; and 3 more.")
    assert "k4" not in message


# ----------------------------------------------------------------------------------------------- maintenance


def minute(t: float) -> float:
    """``t`` rounded up to the backfill's time quantum, as reservations start."""
    return float(math.ceil(t / 60) * 60)


def with_window(s: Snapshot, start: float, end: float, nodes: tuple[str, ...] = ()) -> Snapshot:
    return replace(s, maintenance=(Maintenance("c1", nodes, start, end),))


def test_a_non_preemptible_job_does_not_start_into_maintenance():
    s = with_window(snapshot((node("n1"),), (queue("a"),), (job("j", preemptible=False),)), NOW + 1800, NOW + 7200)
    d = schedule(s)
    p = pending(d, "j")
    assert p.reason is PendingReason.MAINTENANCE  # type: ignore[attr-defined]
    assert "would run into maintenance on c1 at 1970-01-12 14:16 UTC" in p.message  # type: ignore[attr-defined]
    # A reservation after the window: the job starts when it ends (rounded up to the minute).
    after = minute(NOW + 7200)
    assert [(r.job, r.start) for r in d.reservations] == [("j", after)]
    assert p.estimated_start == after  # type: ignore[attr-defined]


def test_a_preemptible_job_may_start_into_maintenance():
    s = with_window(snapshot((node("n1"),), (queue("a"),), (job("j"),)), NOW + 1800, NOW + 7200)
    assert "j" in admitted(schedule(s))


def test_a_job_that_ends_before_the_window_starts():
    s = snapshot((node("n1"),), (queue("a"),), (job("j", preemptible=False, time_limit=1200),))
    assert "j" in admitted(schedule(with_window(s, NOW + 1800, NOW + 7200)))


def test_maintenance_on_some_nodes_sends_the_job_to_the_others():
    s = snapshot((node("n1"), node("n2")), (queue("a"),), (job("j", accelerators=8, preemptible=False),))
    d = schedule(with_window(s, NOW + 600, NOW + 7200, nodes=("n1",)))
    assert [a.node for a in admitted(d)["j"].assignments] == ["n2"]  # type: ignore[attr-defined]


def test_a_reservation_is_not_planned_across_a_window():
    # n1 frees up in 10 minutes (its work ends), n2 in 50; n1 is under maintenance from 20 to 120 minutes.
    nodes = (node("n1", free=0), node("n2", free=0))
    work = (
        running("w1", "n1", admitted_at=NOW - 3000, time_limit=3600, tier="urgent"),
        running("w2", "n2", admitted_at=NOW - 600, time_limit=3600, tier="urgent"),
    )
    s = snapshot(nodes, (queue("a"),), (job("j", accelerators=8),), work)
    d = schedule(with_window(s, NOW + 1200, NOW + 7200, nodes=("n1",)))
    (reservation,) = d.reservations
    assert [a.node for a in reservation.assignments] == ["n2"]
    assert reservation.start == minute(NOW + 3000)
    # A job short enough to finish before the window is reserved on n1 as soon as it frees up.
    short = replace(s, pending=(job("j", accelerators=8, time_limit=540),))
    d = schedule(with_window(short, NOW + 1200, NOW + 7200, nodes=("n1",)))
    (reservation,) = d.reservations
    assert [a.node for a in reservation.assignments] == ["n1"]
    assert reservation.start == minute(NOW + 600)


def test_with_no_windows_nothing_changes():
    s = snapshot((node("n1"),), (queue("a"),), (job("j", preemptible=False),))
    assert schedule(s) == schedule(replace(s, maintenance=()))
