"""A Ray job's head: one more member of the gang, with its own shape (docs/scheduling.md §Ray heads)."""

from __future__ import annotations

from dataclasses import replace

from scheduler.engine import schedule
from scheduler.engine.model import (
    Cluster,
    Cohort,
    Job,
    Maintenance,
    Node,
    PendingReason,
    Queue,
    Quota,
    Snapshot,
    Tier,
)
from tests.engine.invariants import check
from tests.engine.strategies import NOW

H100 = "h100"


def nodes(count: int, *, gpus: int = 8, cpu: int = 64_000, memory: int = 262_144) -> tuple[Node, ...]:
    return tuple(Node(f"n{i}", "c0", H100, (1000,) * gpus, cpu, memory, cpu, memory) for i in range(count))


def snapshot(*pending: Job, fleet: tuple[Node, ...], quota: int = 64_000, cpu_quota: int | None = None) -> Snapshot:
    quotas = {(H100, "accelerator"): Quota(quota)}
    if cpu_quota is not None:
        quotas[(H100, "cpu")] = Quota(cpu_quota)
    return Snapshot(
        now=NOW,
        clusters=(Cluster("c0", "eu-west"),),
        nodes=fleet,
        tiers=(Tier("normal", 10),),
        cohorts=(Cohort("org"),),
        queues=(Queue("q", "org", quotas, (H100,)),),
        running=(),
        pending=pending,
    )


def ray(name: str = "ray", *, workers: int = 2, head: tuple[int, int, int] = (0, 2000, 8192), **kw: object) -> Job:
    return Job(name, "q", "normal", NOW, workers=workers, accelerators=4, cpu=8000, memory=32_768, head=head, **kw)  # type: ignore[arg-type]


def test_the_head_rides_on_the_first_workers_node_when_it_fits_there() -> None:
    snap = snapshot(ray(head=(0, 2000, 8192)), fleet=nodes(2))
    decisions = schedule(snap)
    check(snap, decisions)
    (admission,) = decisions.admissions
    (only,) = admission.assignments  # two 4-GPU workers and the head on one 8-GPU node
    assert (only.workers, only.cpu, only.memory, len(only.accels)) == (2, 18_000, 73_728, 8)


def test_a_head_with_accelerators_that_the_workers_leave_no_room_for_goes_on_a_node_of_its_own() -> None:
    snap = snapshot(ray(head=(2, 4000, 16_384)), fleet=nodes(2))
    decisions = schedule(snap)
    check(snap, decisions)
    (admission,) = decisions.admissions
    by_node = {a.node: a for a in admission.assignments}
    head = next(a for a in by_node.values() if a.workers == 0)
    assert (head.cpu, head.memory, [m for _, m in head.accels]) == (4000, 16_384, [1000, 1000])
    assert sum(a.workers for a in by_node.values()) == 2


def test_a_gang_whose_head_fits_nowhere_waits_whole() -> None:
    """Two nodes: the workers fill both, and the head has nowhere to go: nothing starts (all or nothing)."""
    snap = snapshot(ray(workers=4, head=(1, 1000, 1024)), fleet=nodes(2))
    decisions = schedule(snap)
    check(snap, decisions)
    assert not decisions.admissions
    assert [p.job for p in decisions.pending] == ["ray"]


def test_a_head_larger_than_any_node_never_fits() -> None:
    snap = snapshot(ray(head=(0, 128_000, 1024)), fleet=nodes(2))
    decisions = schedule(snap)
    assert [p.reason for p in decisions.pending] == [PendingReason.CPU_NEVER_FITS]  # the head's CPU, not GPUs
    assert "has 64 CPU cores, and it asks for more than that for its Ray head" in decisions.pending[0].message


def test_quota_counts_the_head() -> None:
    """8 GPUs of quota: two 4-GPU workers fit it, and their head's 1 GPU does not."""
    snap = snapshot(ray(head=(1, 1000, 1024)), fleet=nodes(3), quota=8000)
    decisions = schedule(snap)
    check(snap, decisions)
    assert not decisions.admissions
    assert decisions.pending[0].reason in (PendingReason.QUOTA_EXCEEDS_LIMIT, PendingReason.QUOTA_EXHAUSTED)
    roomy = snapshot(ray(head=(1, 1000, 1024)), fleet=nodes(3), quota=9000)
    assert [a.job for a in schedule(roomy).admissions] == ["ray"]


def test_cpu_quota_counts_the_heads_cores() -> None:
    snap = snapshot(ray(head=(0, 2000, 1024)), fleet=nodes(2), cpu_quota=16_000)
    assert not schedule(snap).admissions
    snap = snapshot(ray(head=(0, 2000, 1024)), fleet=nodes(2), cpu_quota=18_000)
    assert [a.job for a in schedule(snap).admissions] == ["ray"]


def test_a_job_after_a_ray_job_sees_the_heads_capacity_taken() -> None:
    """One node of 8 GPUs: the Ray job (one 4-GPU worker and a 4-GPU head) takes it all; a 1-GPU job waits."""
    later = Job("later", "q", "normal", NOW + 1, accelerators=1, cpu=1000, memory=1024)
    snap = snapshot(ray(workers=1, head=(4, 1000, 1024)), later, fleet=nodes(1))
    decisions = schedule(snap)
    check(snap, decisions)
    assert [a.job for a in decisions.admissions] == ["ray"]
    assert [p.job for p in decisions.pending] == ["later"]


def test_a_head_beside_its_workers_on_a_held_node_fits_the_reservations_slack_with_them() -> None:
    """A found case: an urgent job must wait out a maintenance window, so a reservation holds 4 of a node's 8
    GPUs from the window's end; a later job whose 1/4-GPU worker and 4-GPU head would share that node was
    checked against the slack (4 GPUs) member by member, each fitting, and admitted across the reservation
    with 4.25 GPUs. Now the head counts what its workers already take of the slack there."""
    fleet = (Node("n0", "c0", H100, (1000,) * 8, 64_000, 262_144, 64_000, 262_144),)
    urgent = Job("urgent", "q", "urgent", NOW, accelerators=4, time_limit=60, preemptible=False)
    later = Job(
        "later", "q", "normal", NOW + 1, accelerators=1, accel_milli=250, time_limit=600, head=(4, 16_000, 65_536)
    )
    snap = replace(
        snapshot(urgent, later, fleet=fleet),
        tiers=(Tier("normal", 10), Tier("urgent", 100, preemptible=False)),
        maintenance=(Maintenance("c0", (), NOW, NOW + 60),),
    )
    decisions = schedule(snap)
    check(snap, decisions)  # no admission overlaps a reservation
    (reservation,) = [r for r in decisions.reservations if r.job == "urgent"]
    assert reservation.start >= NOW + 60  # after the window (rounded up to the planning quantum)
    assert "later" not in {a.job for a in decisions.admissions}
