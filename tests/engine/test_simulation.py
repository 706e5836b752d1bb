"""Simulation: the trace readers (openb, Philly), the packing protocol, every packing policy, the command."""

from __future__ import annotations

import json
from dataclasses import replace
from io import StringIO
from pathlib import Path

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from scheduler.simulation import packing
from scheduler.simulation.traces import PackNode, Pod, TraceError, read_nodes, read_philly, read_pods

NODES = "sn,cpu_milli,memory_mib,gpu,model\n"
FULL = "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,deletion_time,scheduled_time\n"
SHORT = "name,cpu_milli,memory_mib,num_gpu,gpu_milli\n"


def write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def pod(name: str, gpus: int = 1, milli: int = 1000, cpu: int = 1000, models: tuple[str, ...] = ()) -> Pod:
    return Pod(name, cpu, 1024, gpus, milli if gpus else 1000, models)


# --------------------------------------------------------------------------------------------- readers


def test_reads_both_pod_list_formats(tmp_path: Path) -> None:
    full = write(
        tmp_path, "full.csv", FULL + "p0,4000,8192,1,460,V100M16|V100M32,LS,Running,0,10,0\np1,2000,4096,0,0,,BE,,,,\n"
    )
    short = write(tmp_path, "short.csv", SHORT + "p0,4000,8192,2,1000\n")
    assert read_pods(full) == [
        Pod("p0", 4000, 8192, 1, 460, ("V100M16", "V100M32")),
        Pod("p1", 2000, 4096, 0, 1000, ()),
    ]
    assert read_pods(short) == [Pod("p0", 4000, 8192, 2, 1000, ())]
    assert read_pods(full)[0].gpu_demand == pytest.approx(0.46)


def test_reads_a_node_list(tmp_path: Path) -> None:
    nodes = write(tmp_path, "nodes.csv", NODES + "n0,64000,262144,2,P100\nn1,32000,131072,0,\n")
    assert read_nodes(nodes) == [PackNode("n0", 64000, 262144, 2, "P100"), PackNode("n1", 32000, 131072, 0, "")]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (SHORT.replace(",gpu_milli", "") + "p0,1,1,1\n", "missing column(s) gpu_milli"),
        (SHORT + "p0,lots,1,1,1000\n", ":2: cpu_milli must be a number, not 'lots'"),
        (SHORT + "p0,1,1,-1,1000\n", ":2: num_gpu must be between 0 and 64, not -1"),
        (SHORT + "p0,1,1,2,500\n", ":2: a GPU share (gpu_milli < 1000) needs num_gpu 1, not 2"),
        (SHORT + "p0,1,1,1,0\n", ":2: gpu_milli must be between 1 and 1000"),
        (SHORT, "no pods"),
    ],
)
def test_a_bad_pod_list_names_the_line_and_the_problem(tmp_path: Path, text: str, message: str) -> None:
    path = write(tmp_path, "pods.csv", text)
    with pytest.raises(TraceError, match=message.replace("(", r"\(").replace(")", r"\)")) as raised:
        read_pods(path)
    assert str(path) in str(raised.value)


def test_a_missing_file_is_a_trace_error(tmp_path: Path) -> None:
    with pytest.raises(TraceError, match="cannot open"):
        read_nodes(tmp_path / "absent.csv")


# ------------------------------------------------------------------------------------------ the protocol


def test_arrivals_are_the_shuffled_list_then_draws_until_130_percent() -> None:
    pods = [pod(f"p{i}") for i in range(10)]  # 10 GPUs asked for
    arrivals = packing.arrival_order(pods, capacity=10.0, seed=7)
    assert sorted(p.name for p in arrivals[:10]) == sorted(p.name for p in pods)
    assert len(arrivals) == 13  # 13 GPUs: the first count reaching 130% of 10
    assert arrivals == packing.arrival_order(pods, capacity=10.0, seed=7)
    assert arrivals != packing.arrival_order(pods, capacity=10.0, seed=8)


def test_arrivals_stop_early_when_the_list_alone_passes_130_percent() -> None:
    pods = [pod(f"p{i}") for i in range(10)]
    assert len(packing.arrival_order(pods, capacity=5.0, seed=1)) == 7  # 7 GPUs >= 6.5


def test_the_curve_reads_allocation_when_demand_first_reaches_each_percent() -> None:
    arrivals = [pod("a", 2), pod("b", 2), pod("c", 1, 500)]  # 2, 4, 4.5 GPUs arrived of 4
    curve = packing.allocation_curve(arrivals, [True, False, True], capacity=4.0)
    assert len(curve) == 131
    assert curve[0] == 0.0
    assert curve[50] == 50.0  # 2 of 4 GPUs arrived: the first pod, placed
    assert curve[100] == 50.0  # 4 arrived: the second failed
    assert curve[112] == pytest.approx(62.5)  # 4.5 arrived: the share placed
    assert curve[130] == pytest.approx(62.5)  # never reached: the last value holds


# -------------------------------------------------------------------------------------- workload variants


def source_pods() -> list[Pod]:
    """A small list shaped like openb's: mostly whole GPUs, some shares, few multi-GPU pods, some CPU-only."""
    kinds = [(1, 1000, 8000)] * 10 + [(1, 500, 4000), (1, 810, 3000)] * 3 + [(2, 1000, 16000)]
    kinds += [(0, 1000, 12000)] * 2
    return [pod(f"p{i}", g, m, cpu + 100 * i) for i, (g, m, cpu) in enumerate(kinds * 20)]


def demand_share(pods: list[Pod], kind: str) -> float:
    chosen = {"fractional": lambda p: p.gpus == 1 and p.milli < 1000, "multi-gpu": lambda p: p.gpus >= 2}[kind]
    return sum(p.gpu_demand for p in pods if chosen(p)) / sum(p.gpu_demand for p in pods)


@pytest.mark.parametrize(("kind", "target"), [("fractional", 0.6), ("multi-gpu", 0.3)])
def test_a_variant_raises_its_kind_of_pod_with_real_rows_the_same_for_a_seed(kind: str, target: float) -> None:
    pods = source_pods()
    variant = packing.workload(pods, kind, 7)
    assert demand_share(variant, kind) > demand_share(pods, kind) + 0.1
    assert demand_share(variant, kind) == pytest.approx(target, abs=0.1)
    assert len(variant) == len(pods)
    assert all(p in pods for p in variant)  # every pod a row of the source, unchanged
    assert any(not p.gpus for p in variant)  # the rest keep their places, CPU-only pods among them
    assert variant == packing.workload(pods, kind, 7)
    assert variant != packing.workload(pods, kind, 8)


def test_the_gpu_spec_variant_asks_a_third_of_gpu_pods_for_a_model_that_can_hold_them() -> None:
    nodes = [PackNode("a", 96000, 393216, 8, "A"), PackNode("b", 16000, 65536, 2, "B"), PackNode("c", 64000, 1, 0, "")]
    pods = source_pods()
    variant = packing.workload(pods, "gpu-spec", 3, nodes)
    assert [replace(p, models=()) for p in variant] == pods  # the same pods, in the same order
    with_gpus = [p for p in variant if p.gpus]
    assert sum(1 for p in with_gpus if p.models) / len(with_gpus) == pytest.approx(1 / 3, abs=0.08)
    assert not any(p.models for p in variant if not p.gpus)
    for p in variant:
        for model in p.models:
            assert any(n.model == model and n.gpus >= p.gpus and n.cpu >= p.cpu for n in nodes), p
    assert {m for p in variant for m in p.models} == {"A", "B"}
    assert variant == packing.workload(pods, "gpu-spec", 3, nodes)


def test_the_default_workload_is_the_list_and_an_unknown_one_is_refused() -> None:
    pods = source_pods()
    assert packing.workload(pods, "default", 1) == pods
    with pytest.raises(ValueError, match="unknown workload"):
        packing.workload(pods, "huge", 1)
    with pytest.raises(ValueError, match="no pods of the kind"):
        packing.workload([pod("p0")], "multi-gpu", 1)


# ---------------------------------------------------------------------------------------- the policies


@pytest.mark.parametrize("policy", list(packing.POLICIES))
def test_every_policy_places_what_fits_and_skips_what_does_not(policy: str) -> None:
    nodes = [PackNode("n-a", 8000, 65536, 2, "A"), PackNode("n-b", 8000, 65536, 1, "B")]
    arrivals = [
        pod("whole-1", 1, models=("A",)),
        pod("on-b", 1, models=("B",)),  # the one GPU of model B
        pod("on-b-again", 1, models=("B",)),  # B is full now
        pod("share-1", 1, 600),
        pod("share-2", 1, 400),  # fills the same GPU exactly, or the last free one
        pod("two", 2),  # no node has two free GPUs any more
        pod("cpu-only", 0, cpu=6000),
        pod("too-much-cpu", 0, cpu=9000),
    ]
    placed = packing.POLICIES[policy](nodes, arrivals, 42)
    assert dict(zip([p.name for p in arrivals], placed, strict=True)) == {
        "whole-1": True,
        "on-b": True,
        "on-b-again": False,
        "share-1": True,
        "share-2": True,
        "two": False,
        "cpu-only": True,
        "too-much-cpu": False,
    }


def test_fgd_keeps_whole_gpus_whole_where_dot_product_does_not() -> None:
    """Two one-GPU nodes. A second half-GPU share should go beside the first, so that a whole-GPU pod
    arriving next still fits; dot-product spreads the shares and turns it away."""
    nodes = [PackNode("n0", 64000, 262144, 1, "G"), PackNode("n1", 64000, 262144, 1, "G")]
    arrivals = [pod("share", 1, 500), pod("share-2", 1, 500), pod("whole", 1)]
    for policy in ("fgd", "best-fit", packing.DEFAULT_POLICY):
        assert packing.POLICIES[policy](nodes, arrivals, 1) == [True, True, True], policy
    assert packing.POLICIES["dot-product"](nodes, arrivals, 1) == [True, True, False]


# ------------------------------------------------------------------------------------------ the command


@pytest.fixture
def trace(tmp_path: Path) -> tuple[Path, Path]:
    nodes = write(
        tmp_path, "nodes.csv", NODES + "".join(f"n{i},32000,131072,{(1, 2, 4, 8)[i % 4]},G{i % 2}\n" for i in range(8))
    )
    pods = write(
        tmp_path,
        "pods.csv",
        SHORT
        + "".join(
            f"p{i},{1000 + 500 * (i % 5)},2048,{(0, 1, 1, 2)[i % 4]},{(1000, 500, 1000, 1000)[i % 4]}\n"
            for i in range(40)
        ),
    )
    return nodes, pods


def test_the_command_prints_one_json_object(trace: tuple[Path, Path]) -> None:
    out = StringIO()
    call_command(
        "simulate",
        "packing",
        "--nodes",
        str(trace[0]),
        "--pods",
        str(trace[1]),
        "--seeds",
        "1-2,5",
        "--json",
        stdout=out,
    )
    report = json.loads(out.getvalue())
    assert report["default_policy"] == packing.DEFAULT_POLICY
    assert set(report["policies"]) == set(packing.POLICIES)
    for figures in report["policies"].values():
        assert figures["seeds"] == 3
        assert len(figures["curve"]) == 131
        assert 0 < figures["alloc_pct_at_100"] <= figures["alloc_pct_at_130"] <= 100
        assert figures["curve"][100] == figures["alloc_pct_at_100"]


def test_the_command_replays_a_workload_variant(trace: tuple[Path, Path]) -> None:
    out = StringIO()
    call_command(
        "simulate",
        "packing",
        "--nodes",
        str(trace[0]),
        "--pods",
        str(trace[1]),
        "--seeds",
        "1",
        "--policy",
        "fgd",
        "--workload",
        "multi-gpu",
        "--json",
        stdout=out,
    )
    report = json.loads(out.getvalue())
    assert report["workload"] == "multi-gpu"
    assert report["policies"]["fgd"]["seeds"] == 1


def test_the_command_prints_a_table(trace: tuple[Path, Path]) -> None:
    out = StringIO()
    call_command(
        "simulate",
        "packing",
        "--nodes",
        str(trace[0]),
        "--pods",
        str(trace[1]),
        "--seeds",
        "3",
        "--policy",
        "best-fit",
        "--policy",
        packing.DEFAULT_POLICY,
        stdout=out,
    )
    lines = out.getvalue().splitlines()
    assert lines[0].split()[:2] == ["policy", "alloc"]
    assert lines[1].startswith("best-fit")
    assert lines[2].startswith(f"{packing.DEFAULT_POLICY} *")


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        (["--seeds", "9-3"], "runs backwards"),
        (["--seeds", "x"], "is not a seed"),
        (["--pods", "/nonexistent.csv"], "cannot open"),
    ],
)
def test_the_command_refuses_bad_input_with_the_reason(
    trace: tuple[Path, Path], arguments: list[str], message: str
) -> None:
    base = {"--nodes": str(trace[0]), "--pods": str(trace[1]), "--seeds": "1"}
    base.update(dict(zip(arguments[::2], arguments[1::2], strict=True)))
    with pytest.raises(CommandError, match=message):
        call_command("simulate", "packing", *[x for pair in base.items() for x in pair])


# --------------------------------------------------------------------------------- the Philly job trace

PHILLY = "timestamp,duration,num_gpus,gpu_time,cluster\n"


def test_reads_the_philly_trace_in_submission_order(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        "philly.csv",
        PHILLY + "2017-10-09 07:01:55,66.0,1,66.0,aa\n2017-10-09 06:13:03,2951.0,8,23608.0,bb\n"
        "2017-10-09 07:00:00,10,2,20,bb\n",
    )
    jobs = read_philly(path)
    assert [(j.submitted, j.duration, j.gpus, j.vc) for j in jobs] == [
        (0.0, 2951.0, 8, "bb"),
        (2817.0, 10.0, 2, "bb"),
        (2932.0, 66.0, 1, "aa"),
    ]
    assert [(j.submitted, j.vc) for j in read_philly(path, "bb")] == [(0.0, "bb"), (2817.0, "bb")]


@pytest.mark.parametrize(
    ("text", "vc", "message"),
    [
        ("2017-13-09 07:01:55,66,1,66,aa\n", None, ":2: timestamp must be YYYY-MM-DD HH:MM:SS"),
        ("2017-10-09 07:01:55,-5,1,66,aa\n", None, ":2: duration must be at least 0"),
        ("2017-10-09 07:01:55,66,0,66,aa\n", None, ":2: num_gpus must be at least 1, not 0"),
        ("2017-10-09 07:01:55,66,1,66,aa\n", "zz", "no jobs in virtual cluster 'zz'; it has aa"),
    ],
)
def test_a_bad_philly_trace_names_the_problem(tmp_path: Path, text: str, vc: str | None, message: str) -> None:
    with pytest.raises(TraceError, match=message):
        read_philly(write(tmp_path, "philly.csv", PHILLY + text), vc)
