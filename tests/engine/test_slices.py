"""TPU slices as the unit: a job asking for a slice shape runs only on nodes of that shape, each worker on one
whole slice (multislice: a gang of slices), and slices run nothing else (``NodeTable.shaped``)."""

from __future__ import annotations

from dataclasses import replace

from hypothesis import given, settings
from hypothesis import strategies as st

from scheduler.engine import schedule
from scheduler.engine.model import Cluster, PendingReason

from .test_phases import admitted, job, node, queue, reasons, running, snapshot

TPU = (Cluster("tpu", "us-east5", ()),)


def slice_(name: str, shape: str, chips: int, free: int | None = None) -> object:
    made = node(name, "v5p", "tpu", free=chips if free is None else free, count=chips)
    return replace(made, topology=(), shape=shape)  # type: ignore[type-var]


def tpu_queue() -> object:
    return queue("a", quota=256, flavors=("v5p",))


def nodes_of(decisions: object, job_id: str) -> list[str]:
    return [a.node for a in admitted(decisions)[job_id].assignments]  # type: ignore[attr-defined]


def test_a_job_asking_for_a_type_runs_on_a_slice_of_that_type_whatever_its_topology():
    fleet = (slice_("big", "v5p-64/4x4x2", 32), slice_("mine", "v5p-32/2x2x4", 16), slice_("small", "v5p-8", 4))
    d = schedule(snapshot(fleet, (tpu_queue(),), (job("j", accelerators=16, shape="v5p-32"),), clusters=TPU))  # type: ignore[arg-type]
    assert nodes_of(d, "j") == ["mine"]
    assignment = admitted(d)["j"].assignments[0]  # type: ignore[attr-defined]
    assert len(assignment.accels) == 16  # the whole slice


def test_a_topology_is_matched_exactly():
    fleet = (slice_("wide", "v5p-32/4x2x2", 16), slice_("tall", "v5p-32/2x2x4", 16), slice_("bare", "v5p-32", 16))
    asks = (job("j", accelerators=16, shape="v5p-32/2x2x4"),)
    d = schedule(snapshot(fleet, (tpu_queue(),), asks, clusters=TPU))  # type: ignore[arg-type]
    assert nodes_of(d, "j") == ["tall"]


def test_multislice_is_a_gang_of_whole_slices():
    fleet = (*(slice_(f"s{i}", "v5p-32/2x2x4", 16) for i in range(3)), slice_("odd", "v5p-16/2x2x2", 8))
    asks = (
        job("multi", workers=2, accelerators=16, shape="v5p-32"),
        job("too-many", workers=2, accelerators=16, shape="v5p-32", at=1),
    )
    d = schedule(snapshot(fleet, (tpu_queue(),), asks, clusters=TPU))  # type: ignore[arg-type]
    placed = admitted(d)["multi"].assignments  # type: ignore[attr-defined]
    assert len(placed) == 2
    assert all(a.workers == 1 and len(a.accels) == 16 for a in placed)
    assert {a.node for a in placed} <= {"s0", "s1", "s2"}
    assert reasons(d)["too-many"] in (PendingReason.CAPACITY, PendingReason.RESERVED)  # one v5p-32 left
    assert "too-many" not in admitted(d)


def test_a_shape_no_node_has_never_fits():
    fleet = (slice_("s0", "v5p-32/2x2x4", 16),)
    d = schedule(snapshot(fleet, (tpu_queue(),), (job("j", accelerators=64, shape="v5p-128"),), clusters=TPU))  # type: ignore[arg-type]
    assert reasons(d)["j"] is PendingReason.NEVER_FITS


def test_slices_run_only_jobs_that_ask_for_them_and_shaped_jobs_only_slices():
    fleet = (slice_("s0", "v5p-8/2x2x1", 4), node("plain", "v5p", "tpu", free=4, count=4))
    fleet = (fleet[0], replace(fleet[1], topology=()))  # type: ignore[type-var]
    asks = (job("chips", accelerators=4), job("slice", accelerators=4, shape="v5p-8", at=1))
    d = schedule(snapshot(fleet, (tpu_queue(),), asks, clusters=TPU))  # type: ignore[arg-type]
    assert nodes_of(d, "chips") == ["plain"]
    assert nodes_of(d, "slice") == ["s0"]


def test_a_busy_slice_is_waited_for_and_a_running_job_can_be_preempted_from_it():
    fleet = (slice_("s0", "v5p-32/2x2x4", 16, free=0), slice_("other", "v5p-8", 4))
    holder = replace(running("holder", "s0", gpus_=16), cluster="tpu", flavor="v5p")
    asks = (job("j", tier="urgent", accelerators=16, shape="v5p-32"),)
    d = schedule(snapshot(fleet, (tpu_queue(),), asks, (holder,), clusters=TPU))  # type: ignore[arg-type]
    assert [p.workload for p in d.preemptions] == ["holder"]


SHAPES = ("v5p-8/2x2x1", "v5p-32/2x2x4", "v5p-32/4x2x2", "v5p-32", "")
CHIPS = {"v5p-8": 4, "v5p-32": 16, "": 4}


@settings(deadline=None, max_examples=60)
@given(
    st.lists(st.sampled_from(SHAPES), min_size=1, max_size=8),
    st.lists(st.tuples(st.sampled_from((*SHAPES, "v5p-8")), st.integers(1, 3)), min_size=1, max_size=8),
)
def test_every_admission_keeps_to_its_shape_and_takes_whole_slices(
    node_shapes: list[str], asks: list[tuple[str, int]]
) -> None:
    fleet = tuple(slice_(f"n{i}", shape, CHIPS[shape.partition("/")[0]]) for i, shape in enumerate(node_shapes))
    jobs = tuple(
        job(f"j{i}", at=i, workers=workers, accelerators=CHIPS[shape.partition("/")[0]], shape=shape)
        for i, (shape, workers) in enumerate(asks)
    )
    d = schedule(snapshot(fleet, (tpu_queue(),), jobs, clusters=TPU))  # type: ignore[arg-type]
    shape_of = {f"n{i}": shape for i, shape in enumerate(node_shapes)}
    wanted = {j.id: j.shape for j in jobs}
    held: set[str] = set()
    for admission in d.admissions:
        ask = wanted[admission.job]
        for a in admission.assignments:
            node_shape = shape_of[a.node]
            if not ask:
                assert node_shape == ""
                continue
            assert node_shape == ask or ("/" not in ask and node_shape.startswith(ask + "/")), (ask, node_shape)
            assert a.workers == 1
            assert len(a.accels) == CHIPS[ask.partition("/")[0]]  # the whole slice
            assert a.node not in held  # one job a slice
            held.add(a.node)
