"""Honest answers: every reason the engine gives for a wait says which limit holds the job and, where running
jobs' time limits bound it, until when; a job that can never start as things stand is told so
(docs/scheduling.md §Pending reasons and estimates)."""

from __future__ import annotations

import math
from dataclasses import replace

from scheduler.engine import schedule
from scheduler.engine.explain import when
from scheduler.engine.model import (
    Assignment,
    Budget,
    Cluster,
    Cohort,
    Config,
    Job,
    Node,
    Pending,
    PendingReason,
    Queue,
    Quota,
    Snapshot,
    Tier,
    Workload,
)
from tests.engine.strategies import NOW

H100, A100 = "h100", "a100"
HOUR = 3600


def nodes(count: int, flavor: str = H100, *, prefix: str = "n", memory: int = 262_144) -> tuple[Node, ...]:
    return tuple(Node(f"{prefix}{i}", "c0", flavor, (1000,) * 8, 64_000, memory, 64_000, memory) for i in range(count))


def busy(node: Node) -> Node:
    return replace(node, accel_free=(0,) * 8, cpu_free=0, memory_free=0)


def held(job_id: str, node: str, *, hours: float, owner: str = "", accels: int = 8) -> Workload:
    assignment = Assignment(node, 1, tuple((i, 1000) for i in range(accels)), 64_000 if accels == 8 else 1000, 1024)
    return Workload(job_id, "q", "normal", "c0", H100, (assignment,), NOW, int(hours * HOUR), owner=owner)


def snapshot(
    *pending: Job,
    fleet: tuple[Node, ...],
    running: tuple[Workload, ...] = (),
    flavors: tuple[str, ...] = (H100,),
    **kw: object,
) -> Snapshot:
    quotas = {(f, "accelerator"): Quota(1_000_000) for f in flavors}
    return Snapshot(
        now=NOW,
        clusters=(Cluster("c0", "eu-west"),),
        nodes=fleet,
        tiers=(Tier("normal", 10),),
        cohorts=(Cohort("org"),),
        queues=(Queue("q", "org", quotas, flavors),),
        running=running,
        pending=pending,
        **kw,  # type: ignore[arg-type]
    )


def job(name: str, accelerators: int = 8, *, submitted_at: float = NOW, **kw: object) -> Job:
    kw = {"cpu": 1000, "memory": 1024, **kw}
    return Job(name, "q", "normal", submitted_at, accelerators=accelerators, **kw)  # type: ignore[arg-type]


def quantum(t: float) -> float:
    """``t`` rounded up to the engine's time quantum (a minute), as its release times are."""
    return math.ceil(t / 60) * 60


def pending(snap: Snapshot) -> dict[str, Pending]:
    return {p.job: p for p in schedule(snap).pending}


# ------------------------------------------------------------------------------------------ member limits


def test_a_job_larger_than_its_submitters_limit_is_told_it_can_never_start() -> None:
    """Not "it starts when enough of them have finished": nothing of alice's runs, and it still cannot."""
    snap = snapshot(job("big", owner="alice"), fleet=nodes(2), member_limits={"alice": 4000})
    (why,) = pending(snap).values()
    assert why.reason is PendingReason.MEMBER_LIMIT
    assert "can never start as things stand" in why.message
    assert "It needs 8 accelerators at once, more than the 4 its team lead allows each member" in why.message
    assert why.estimated_start is None


def test_a_job_held_by_its_submitters_limit_starts_when_their_running_work_reaches_its_time_limit() -> None:
    fleet = nodes(3)
    running = (held("r1", "n0", hours=2, owner="alice"), held("r2", "n1", hours=5, owner="alice"))
    snap = snapshot(
        job("next", owner="alice"),
        fleet=(busy(fleet[0]), busy(fleet[1]), fleet[2]),
        running=running,
        member_limits={"alice": 16_000},
    )
    why = pending(snap)["next"]
    assert why.reason is PendingReason.MEMBER_LIMIT
    assert why.estimated_start == NOW + 2 * HOUR  # the first of her jobs to end gives back enough
    assert f"It can start from about {when(NOW + 2 * HOUR)}" in why.message


# ---------------------------------------------------------------------------------------------- estimates


def test_a_job_waiting_for_capacity_held_beyond_the_backfill_window_still_gets_a_start_time() -> None:
    """Every node is held by a job with 48 hours left, past the 24-hour window: its end still bounds the wait."""
    fleet = nodes(2)
    running = (held("r1", "n0", hours=48), held("r2", "n1", hours=60))
    snap = snapshot(job("waits"), fleet=tuple(busy(n) for n in fleet), running=running)
    why = pending(snap)["waits"]
    assert why.reason is PendingReason.CAPACITY
    assert why.estimated_start == quantum(NOW + 48 * HOUR)
    assert f"room frees up by about {when(quantum(NOW + 48 * HOUR))}" in why.message


def test_a_previewed_job_gets_an_estimate_however_many_shapes_wait_ahead_of_it() -> None:
    """Reservations and estimates are capped per cycle; the job the form asks about is estimated anyway."""
    fleet = nodes(4)
    running = tuple(held(f"r{i}", f"n{i}", hours=1 + i) for i in range(4))
    ahead = tuple(job(f"ahead{k}", accelerators=1 + k % 8, time_limit=HOUR + k) for k in range(6))
    mine = job("mine", accelerators=8, submitted_at=NOW + 1, time_limit=2 * HOUR)  # ordered after them all
    config = Config(reservations=1, estimates=1)
    snap = snapshot(*ahead, mine, fleet=tuple(busy(n) for n in fleet), running=running, config=config)
    assert pending(snap)["mine"].estimated_start is None  # the caps were spent on the jobs ahead
    asked = replace(snap, config=replace(config, estimate_for="mine"))
    assert pending(asked)["mine"].estimated_start is not None
    assert pending(asked)["mine"].estimated_start >= NOW + HOUR  # type: ignore[operator]


def test_a_start_is_not_known_only_when_nothing_bounds_it() -> None:
    """Capacity held by work the engine does not know (a cluster's own), with no end: truly unbounded."""
    snap = snapshot(job("waits"), fleet=tuple(busy(n) for n in nodes(2)))
    why = pending(snap)["waits"]
    assert why.reason is PendingReason.CAPACITY
    assert why.estimated_start is None
    assert "frees up" not in why.message
    assert "in use by work started outside Quartermaster, whose end is not known" in why.message


def test_a_job_held_by_its_queues_quota_is_told_when_running_work_frees_enough_of_it() -> None:
    """Quota of 16 GPUs, no borrowing: two 8-GPU jobs of the queue hold it, ending in 3 and 1 hours."""
    fleet = nodes(4)
    running = (held("r1", "n0", hours=3), held("r2", "n1", hours=1))
    snap = snapshot(job("next"), fleet=(busy(fleet[0]), busy(fleet[1]), *fleet[2:]), running=running)
    snap = replace(
        snap, queues=(Queue("q", "org", {(H100, "accelerator"): Quota(16_000, borrowing_limit=0)}, (H100,)),)
    )
    why = pending(snap)["next"]
    assert why.reason is PendingReason.QUOTA_EXHAUSTED
    assert why.estimated_start == NOW + HOUR  # the first to end frees enough
    assert f"free enough of it by about {when(NOW + HOUR)}" in why.message


# ------------------------------------------------------------------------------------------------ budgets


def test_a_job_over_a_hard_budget_is_told_when_it_fits_what_is_left() -> None:
    """A job is charged only for its time before the month ends: 8 GPUs fit 16 accelerator-hours once two
    hours of the month are left."""
    budget = Budget(accel_seconds=16 * HOUR * 1000, until=NOW + 10 * 24 * HOUR, label="team vision")
    snap = snapshot(job("j", time_limit=24 * HOUR, budgets=("b",)), fleet=nodes(2), budgets={"b": budget})
    why = pending(snap)["j"]
    assert why.reason is PendingReason.BUDGET
    assert why.estimated_start == budget.until - 2 * HOUR
    assert f"It can start from about {when(budget.until - 2 * HOUR)}" in why.message


def test_a_budget_whose_limit_is_zero_says_the_job_can_never_start_not_next_month() -> None:
    budget = Budget(accel_seconds=0, until=NOW + 24 * HOUR, label="team vision", never=True)
    snap = snapshot(job("j", budgets=("b",)), fleet=nodes(1), budgets={"b": budget})
    why = pending(snap)["j"]
    assert why.reason is PendingReason.BUDGET
    assert "allows no accelerator-hours a month" in why.message
    assert "next month" not in why.message
    assert why.estimated_start is None


# --------------------------------------------------------------------------------------- what was chosen


def test_too_much_memory_is_a_memory_reason_naming_the_types_tried_not_one_the_user_never_picked() -> None:
    fleet = (*nodes(1, H100, memory=262_144), *nodes(1, A100, prefix="a", memory=524_288))
    snap = snapshot(job("j", memory=1_048_576), fleet=fleet, flavors=(A100, H100))
    why = pending(snap)["j"]
    assert why.reason is PendingReason.MEMORY_NEVER_FITS
    assert "The largest node of a100 or h100 it may use has 512 GiB of memory" in why.message
    picked = snapshot(job("j", memory=1_048_576, flavors=(H100,)), fleet=fleet, flavors=(A100, H100))
    message = pending(picked)["j"].message
    assert "of h100 it may use has 256 GiB" in message
    assert "a100" not in message


def test_a_tpu_job_is_told_about_the_slice_it_asked_for_not_accelerators() -> None:
    tpu = Node("s0", "c0", "v5p", (1000,) * 16, 0, 0, 0, 0, shape="v5p-32/2x2x4")
    snap = snapshot(
        Job("j", "q", "normal", NOW, accelerators=16, cpu=0, memory=0, shape="v5p-32/4x4x2"),
        fleet=(tpu,),
        flavors=("v5p",),
    )
    why = pending(snap)["j"]
    assert why.reason is PendingReason.NEVER_FITS
    assert why.message.startswith("No v5p-32 slice of shape 4x4x2 exists")
    assert "accelerator" not in why.message
    busy_slice = replace(tpu, accel_free=(0,) * 16)
    taken = Workload(
        "r", "q", "normal", "c0", "v5p", (Assignment("s0", 1, tuple((i, 1000) for i in range(16)), 0, 0),), NOW, HOUR
    )
    waits = snapshot(
        Job("j", "q", "normal", NOW, accelerators=16, cpu=0, memory=0, shape="v5p-32/2x2x4", time_limit=HOUR),
        fleet=(busy_slice,),
        running=(taken,),
        flavors=("v5p",),
        config=Config(backfill=False),
    )
    why = pending(waits)["j"]
    assert why.reason is PendingReason.CAPACITY
    assert "no v5p-32 slice of shape 2x2x4 is free for it right now" in why.message
