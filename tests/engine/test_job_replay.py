"""Job-level replay: the event simulator's mechanics, each policy on hand-made cases, the Philly adapters
and the ``simulate jobs`` command."""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from io import StringIO
from pathlib import Path

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from benchmarks.management.commands import simulate
from scheduler.engine import fairshare
from scheduler.engine.model import Assignment, Cluster, Node, Queue, Tier
from scheduler.simulation import jobs
from scheduler.simulation.events import JobRecord, Outage, Plan, Policy, SimJob, Simulation, SimulationError


def fleet(*gpus: int) -> tuple[tuple[Cluster, ...], tuple[Node, ...]]:
    clusters, _ = jobs.philly_fleet(1, [1])
    nodes = tuple(
        Node(f"n{i}", "philly", "gpu", (1000,) * count, 64_000, 1 << 19, 64_000, 1 << 19)
        for i, count in enumerate(gpus)
    )
    return clusters, nodes


def replay(
    nodes: tuple[tuple[Cluster, ...], tuple[Node, ...]],
    workload: Sequence[SimJob],
    policy: str | Policy,
    outages: Sequence[Outage] = (),
    checkpoint_seconds: float = 3600,
) -> dict[str, JobRecord]:
    clusters, fleet_ = nodes
    chosen = jobs.policies(clusters)[policy]() if isinstance(policy, str) else policy
    simulation = Simulation(
        clusters, fleet_, workload, chosen, outages=outages, cycle_seconds=0, checkpoint_seconds=checkpoint_seconds
    )
    outcome = simulation.run()
    assert not outcome.stuck
    return outcome.records


def start(records: dict[str, JobRecord]) -> dict[str, float | None]:
    return {name: r.first_start for name, r in records.items()}


# ------------------------------------------------------------------------------------- the simulator


def test_jobs_start_when_room_frees_and_finish_after_their_duration() -> None:
    workload = [
        SimJob("a", 0, 100, accelerators=2),
        SimJob("b", 1, 10),
        SimJob("c", 2, 10),
    ]
    records = replay(fleet(2), workload, "fifo")
    assert start(records) == {"a": 0, "b": 100, "c": 100}
    assert {n: r.finished for n, r in records.items()} == {"a": 100, "b": 110, "c": 110}
    assert records["b"].waited == 99


def test_cycles_are_no_closer_than_the_loop_interval() -> None:
    clusters, nodes = fleet(1)
    workload = [SimJob("a", 0, 100), SimJob("b", 1, 10)]
    simulation = Simulation(clusters, nodes, workload, jobs.fifo(), cycle_seconds=60)
    records = simulation.run().records
    # b waits for a (ends at 100) and then for the next cycle: 60 s after the one at 60.
    assert records["b"].first_start == 120


def test_a_preempted_job_resumes_where_it_stopped_after_its_grace_period() -> None:
    clusters, nodes = fleet(8)
    tiers = (Tier("low", 0, grace_seconds=30), Tier("high", 100))
    policy = jobs.Quartermaster(clusters, tiers=tiers, queues=(Queue("q", None, flavors=("gpu",)),))
    workload = [
        SimJob("low", 0, 1000, accelerators=8, queue="q", tier="low"),
        SimJob("high", 100, 100, accelerators=8, queue="q", tier="high"),
    ]
    records = replay((clusters, nodes), workload, policy)
    assert records["low"].preempted == 1
    assert records["high"].first_start == 130  # once the victim's 30 s of grace are over
    # It ran 130 s, waited while "high" ran (130..230), then ran its last 870 s.
    assert records["low"].finished == 230 + 870
    assert records["low"].waited == 100


def test_a_node_failure_loses_the_work_since_the_last_checkpoint() -> None:
    workload = [SimJob("a", 0, 1000)]
    outages = [Outage("n0", 250, 10_000)]
    records = replay(fleet(1, 1), workload, "fifo", outages, checkpoint_seconds=100)
    # 200 s were checkpointed; the job restarts at once on the other node with 800 s to go.
    assert records["a"].failed == 1
    assert records["a"].finished == 250 + 800
    assert records["a"].attained == 1000 + 50  # the 50 s lost ran twice


def test_a_failed_node_takes_no_work_until_it_recovers() -> None:
    workload = [SimJob("a", 0, 10), SimJob("b", 20, 10)]
    records = replay(fleet(1), workload, "quartermaster", [Outage("n0", 15, 500)])
    assert records["b"].first_start == 500


def test_the_simulator_refuses_a_plan_that_double_books_a_gpu() -> None:
    class Greedy:
        name = "greedy"

        def plan(self, sim: Simulation, arrived: Sequence[str]) -> Plan:
            return Plan(starts=[(job, (Assignment("n0", 1, ((0, 1000),), 0, 0),)) for job in arrived])

    clusters, nodes = fleet(1)
    simulation = Simulation(clusters, nodes, [SimJob("a", 0, 10), SimJob("b", 0, 10)], Greedy(), cycle_seconds=0)
    with pytest.raises(SimulationError, match="cannot start b: accelerator 0 of n0 is not free"):
        simulation.run()


def test_a_job_larger_than_the_fleet_is_reported_not_run() -> None:
    clusters, nodes = fleet(2, 2)
    workload = [SimJob("big", 0, 10, workers=3, accelerators=2), SimJob("ok", 0, 10, workers=2, accelerators=2)]
    outcome = Simulation(clusters, nodes, workload, jobs.fifo(), cycle_seconds=0).run()
    assert outcome.never_fits == ["big"]
    assert outcome.figures()["jobs"] == 1


def test_figures_are_the_same_on_every_run() -> None:
    workload = [SimJob(f"j{i}", i * 7.0, 50 + (i * 37) % 400, accelerators=1 + i % 2) for i in range(60)]
    clusters, nodes = fleet(2, 2, 4)
    for name in jobs.POLICY_NAMES:
        figures = [
            Simulation(clusters, nodes, workload, jobs.policies(clusters)[name]()).run().figures() for _ in range(2)
        ]
        assert figures[0] == figures[1]
        assert figures[0]["jobs"] == 60


# -------------------------------------------------------------------------------------- the policies


def test_fifo_blocks_behind_a_gang_where_backfill_lets_a_short_job_through() -> None:
    workload = [
        SimJob("long", 0, 1000),
        SimJob("gang", 1, 10, accelerators=2),
        SimJob("short", 2, 10),
    ]
    fifo, ours = replay(fleet(2), workload, "fifo"), replay(fleet(2), workload, "quartermaster")
    assert start(fifo) == {"long": 0, "gang": 1000, "short": 1010}
    # The gang holds a reservation from 1000; the short job ends long before, so it starts at once.
    assert start(ours) == {"long": 0, "gang": 1000, "short": 2}


def test_sjf_runs_the_shortest_waiting_job_first() -> None:
    workload = [SimJob("first", 0, 100), SimJob("slow", 1, 500), SimJob("quick", 2, 5)]
    assert start(replay(fleet(1), workload, "sjf")) == {"first": 0, "slow": 105, "quick": 100}
    assert start(replay(fleet(1), workload, "fifo")) == {"first": 0, "slow": 100, "quick": 600}


def test_tiresias_preempts_the_job_with_the_most_service_for_a_new_one() -> None:
    workload = [SimJob("old", 0, 10_000), SimJob("new", 5000, 10)]
    records = replay(fleet(1), workload, "tiresias")
    assert start(records) == {"old": 0, "new": 5000}
    assert records["old"].preempted == 1
    assert records["old"].finished == 10_010


def test_tiresias_promotes_a_starving_job() -> None:
    # "old" has had 1.5 GPU-hours when newcomers start to arrive, one every 10 minutes for 16 hours: each
    # ranks above it. The starvation guard brings it back before the stream ends; without it, it runs last.
    workload = [SimJob("old", 0, 10_000)] + [SimJob(f"new{i}", 5400 + 600 * i, 600) for i in range(100)]
    last_newcomer = 5400 + 600 * 100
    records = replay(fleet(1), workload, "tiresias")
    assert records["old"].preempted >= 1
    assert (records["old"].finished or math.inf) < last_newcomer

    class NoGuard(jobs.Tiresias):
        PROMOTE = math.inf

    records = replay(fleet(1), workload, NoGuard())
    assert records["old"].finished == last_newcomer + 10_000 - 5400


def test_ours_lets_short_jobs_pass_a_long_one_but_only_for_a_bounded_time() -> None:
    # One GPU, overloaded by a stream of short jobs. Short jobs first, with aging (Config.short_first = 8):
    # the long job is passed only by short jobs submitted less than 8 x (1000 - 100) s after it.
    workload = [SimJob("block", 0, 100), SimJob("long", 1, 1000)]
    workload += [SimJob(f"s{i}", 2 + 50 * i, 100) for i in range(400)]
    records = replay(fleet(1), workload, "quartermaster")
    long = records["long"].first_start
    assert long is not None
    passed = [r.job.submitted for n, r in records.items() if n[0] == "s" and (r.first_start or 0) < long]
    assert len(passed) > 100
    assert max(passed) < 1 + 8 * (1000 - 100)
    assert all((r.first_start or 0) > long for r in records.values() if r.job.submitted > 1 + 8 * (1000 - 100))


# ----------------------------------------------------------------------------------- the Philly replay


def test_gangs_are_split_evenly_into_workers_that_fit_a_node() -> None:
    assert jobs.gang(1, [2]) == (1, 1)
    assert jobs.gang(8, [2]) == (4, 2)
    assert jobs.gang(8, [2, 8]) == (1, 8)
    assert jobs.gang(12, [8]) == (2, 6)


def test_declared_limits_round_up_to_the_presets() -> None:
    assert jobs.declared_limit(59.5, "exact") == 60
    assert jobs.declared_limit(0, "exact") == 1
    assert jobs.declared_limit(3601, "rounded") == 7200
    assert jobs.declared_limit(30 * 86400, "rounded") == 5 * 7 * 86400
    with pytest.raises(ValueError, match="limits must be"):
        jobs.declared_limit(1, "guess")


def test_the_fleet_takes_gpu_counts_in_turn() -> None:
    _, nodes = jobs.philly_fleet(5, [2, 8])
    assert [n.accel_count for n in nodes] == [2, 8, 2, 8, 2]


def test_random_outages_are_reproducible_and_within_the_span() -> None:
    _, nodes = jobs.philly_fleet(20, [2])
    first = jobs.random_outages(nodes, 30 * 86400, 10, 4, seed=3)
    assert first == jobs.random_outages(nodes, 30 * 86400, 10, 4, seed=3)
    assert first != jobs.random_outages(nodes, 30 * 86400, 10, 4, seed=4)
    assert 20 < len(first) < 120  # about 20 nodes x 3 failures
    assert all(o.at < 30 * 86400 and o.until == o.at + 4 * 3600 for o in first)


def test_the_jobs_command_prints_one_json_object(trace: Path) -> None:
    out = StringIO()
    call_command("simulate", "jobs", "--trace", str(trace), "--vc", "vc1", "--json", stdout=out)
    report = json.loads(out.getvalue())
    assert report["default_policy"] == jobs.DEFAULT_POLICY
    assert (report["nodes"], report["gpus"], report["jobs"]) == (4, 8, 60)
    assert set(report["policies"]) == set(jobs.POLICY_NAMES)
    for figures in report["policies"].values():
        assert figures["jobs"] == 60
        assert figures["avg_jct_s"] >= figures["avg_wait_s"] >= 0
        assert figures["max_wait_s"] >= figures["p99_wait_s"]
        assert 0 < figures["gpu_utilization"] <= 1
        assert figures["makespan_s"] > 0


def test_the_jobs_command_prints_a_table(trace: Path) -> None:
    out = StringIO()
    call_command(
        "simulate",
        "jobs",
        "--trace",
        str(trace),
        "--vc",
        "vc1",
        "--nodes",
        "2",
        "--gpus-per-node",
        "8",
        "--policy",
        "fifo",
        "--policy",
        jobs.DEFAULT_POLICY,
        "--mtbf-days",
        "0.1",
        stdout=out,
    )
    lines = out.getvalue().splitlines()
    assert lines[0].split()[:3] == ["policy", "avg", "JCT"]
    assert lines[1].startswith("fifo")
    assert lines[2].startswith(f"{jobs.DEFAULT_POLICY} *")
    assert "2 nodes, 16 GPUs, 60 jobs" in lines[-1]


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        (["--vc", "zz"], "no jobs in virtual cluster 'zz'; it has other, vc1"),
        (["--vc", "other"], "does not give the node count of other"),
        (["--gpus-per-node", "2,x"], "is not a number or a list"),
        (["--gpus-per-node", "0"], "at least one GPU"),
        (["--nodes", "0"], "at least one node"),
        (["--mtbf-days", "-1"], "must be positive"),
    ],
)
def test_the_jobs_command_refuses_bad_input_with_the_reason(trace: Path, arguments: list[str], message: str) -> None:
    base = {"--trace": str(trace), "--vc": "vc1"}
    base.update(dict(zip(arguments[::2], arguments[1::2], strict=True)))
    with pytest.raises(CommandError, match=message):
        call_command("simulate", "jobs", *[x for pair in base.items() for x in pair])


# ------------------------------------------------------------------------------- memory in the replay


def test_with_memory_the_queue_that_used_less_lately_goes_first() -> None:
    # Team a held the node for 1000 s; then both teams want it, a first. Without memory first come, first served;
    # with it (docs/scheduling.md §Memory: recent use counts), b, which used nothing.
    clusters, nodes = fleet(8)
    queues = (Queue("a", None, flavors=("gpu",)), Queue("b", None, flavors=("gpu",)))
    workload = [
        SimJob("a-long", 0, 1000, accelerators=8, queue="a"),
        SimJob("a-next", 900, 100, accelerators=8, queue="a"),
        SimJob("b-next", 950, 100, accelerators=8, queue="b"),
    ]
    forgets = replay((clusters, nodes), workload, jobs.Quartermaster(clusters, queues=queues))
    assert forgets["a-next"].first_start == 1000
    remembers = replay((clusters, nodes), workload, jobs.Quartermaster(clusters, queues=queues, half_life=3600))
    assert remembers["b-next"].first_start == 1000
    assert remembers["a-next"].first_start == 1100


def test_the_replays_recent_use_is_every_run_valued_as_the_meter_values_records() -> None:
    clusters, nodes = fleet(4, 4)
    workload = [SimJob(f"j{i}", 37 * i, 200 + 13 * i, accelerators=1 + i % 4, queue="ab"[i % 2]) for i in range(40)]
    policy = jobs.Quartermaster(clusters, half_life=900)
    simulation = Simulation(clusters, nodes, workload, policy, cycle_seconds=60)
    simulation.run()
    kept = policy.recent_use(simulation)  # folded in a run at a time, cycle after cycle
    direct: dict[str, float] = {}
    for queue, gpus, begun, ended in simulation.ended:
        direct[queue] = direct.get(queue, 0.0) + fairshare.hours(gpus * 1000, begun, ended, simulation.now, 900)
    assert kept.keys() == direct.keys() == {"a", "b"}
    for queue, value in direct.items():
        assert kept[queue] == pytest.approx(value, rel=1e-9)


def test_the_jobs_command_replays_several_virtual_clusters_on_one_fleet_with_memory(trace: Path) -> None:
    (trace.parent / "philly_vc_node_count.csv").write_text("vc,node num\nvc1,4\nother,1\n")
    out = StringIO()
    arguments = ["--trace", str(trace), "--vc", "vc1,other", "--policy", jobs.DEFAULT_POLICY, "--half-life-hours", "24"]
    call_command("simulate", "jobs", *arguments, "--json", stdout=out)
    report = json.loads(out.getvalue())
    assert (report["nodes"], report["jobs"]) == (5, 61)
    assert set(report["policies"][jobs.DEFAULT_POLICY]["by_queue"]) == {"vc1", "other"}
    out = StringIO()
    call_command("simulate", "jobs", *arguments, stdout=out)
    assert "JCT / wait" in out.getvalue()
    # Each virtual cluster's quota: its part of the shared fleet's GPUs, in proportion to its own nodes.
    assert simulate.shares(10, {"vc1": 1, "other": 2}) == {"vc1": 3, "other": 7}
    assert simulate.shares(8, {"vc1": 4, "other": 1}) == {"vc1": 6, "other": 2}
