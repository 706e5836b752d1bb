"""Elastic pools and spot in the event simulator (``scheduler/simulation/pools.py``): the production engine asks a
pool for nodes, they join the fleet after its lead time, run the work and leave once idle; a monthly budget bounds
what a pool's nodes cost in every month, however the work comes; a spot node taken back requeues its work without
losing it or counting a failure; and ``simulate jobs --elastic-budgets`` reports cost against waiting."""

from __future__ import annotations

import json
from io import StringIO
from pathlib import Path

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from hypothesis import given, settings
from hypothesis import strategies as st

from scheduler.simulation import jobs
from scheduler.simulation.events import Outcome, Plan, SimJob, Simulation, SimulationError
from scheduler.simulation.pools import MONTH, Pool

CLUSTERS, FLEET = jobs.philly_fleet(2, [2])  # four GPUs of our own


def cloud(**changes: object) -> Pool:
    """Two-GPU nodes at 2.00 a GPU-hour (4.00 a node-hour), up 10 minutes after an ask, gone after 10 idle."""
    values: dict[str, object] = {
        "name": "cloud",
        "cluster": "philly",
        "flavor": jobs.FLAVOR,
        "accelerators": 2,
        "cpu": 64_000,
        "memory": 512 * 1024,
        "price_per_accel_hour": 2.0,
        "lead_time": 600.0,
        "max_nodes": 4,
        "idle_release": 600.0,
        **changes,
    }
    return Pool(**values)  # type: ignore[arg-type]


def run(workload: list[SimJob], *pools: Pool, seed: int = 1) -> Outcome:
    policy = jobs.policies(CLUSTERS)[jobs.DEFAULT_POLICY]()
    outcome = Simulation(CLUSTERS, FLEET, workload, policy, pools=pools, seed=seed).run()
    assert not outcome.stuck
    return outcome


def burst(count: int, hours: float = 1.0, **fields: object) -> list[SimJob]:
    return [SimJob(f"j{i}", i * 10.0, hours * 3600, accelerators=2, **fields) for i in range(count)]  # type: ignore[arg-type]


def test_a_burst_grows_the_pool_the_work_runs_there_and_the_idle_nodes_go() -> None:
    outcome = run(burst(6), cloud())
    records = outcome.records
    # two jobs start on our nodes (the loop runs a minute apart); the four others on the pool's nodes, up 10 minutes
    # after the first ask
    assert sorted(r.first_start or 0.0 for r in records.values())[:2] == [0.0, 60.0]
    assert all(r.first_start is not None and r.first_start >= 600.0 for r in list(records.values())[2:])
    pool = outcome.pools["cloud"]
    assert (pool["asked"], pool["released"], pool["reclaimed"]) == (4, 4, 0)
    # each node is up from its ask's lead time until 10 idle minutes after its hour of work: 1 h 10 min, at 4.00
    assert pool["node_hours"] == pytest.approx(4 * 70 / 60, abs=0.1)
    assert pool["cost"] == pytest.approx(4 * 4.0 * 70 / 60, abs=0.2)
    assert outcome.figures()["elastic_cost"] == pool["cost"]
    # without the pool the same burst waits for our two nodes: three rounds
    plain = run(burst(6))
    assert max(r.waited for r in plain.records.values()) > 2 * 3600 > max(r.waited for r in records.values())


def test_the_budget_pays_for_what_it_can_and_the_rest_waits() -> None:
    # 12.00 a month: one node held for an hour of work and 10 idle minutes costs 4.67; two such fit, not three
    outcome = run(burst(6), cloud(monthly_budget=12.0))
    pool = outcome.pools["cloud"]
    assert pool["asked"] == 2
    assert pool["most_in_a_month"] <= 12.0
    none = run(burst(6), cloud(monthly_budget=0.0))
    assert none.pools["cloud"]["asked"] == 0


@settings(max_examples=25, deadline=None)
@given(
    st.lists(
        st.tuples(st.integers(0, 40 * 86400), st.integers(60, 3 * 86400), st.sampled_from([1, 2, 4])),
        min_size=1,
        max_size=40,
    ),
    st.sampled_from([0.0, 10.0, 150.0, 1000.0]),
)
def test_no_month_costs_more_than_the_budget_however_the_work_comes(
    shape: list[tuple[int, int, int]], budget: float
) -> None:
    workload = [
        SimJob(f"j{i}", float(at), float(seconds), workers=max(1, gpus // 2), accelerators=min(gpus, 2))
        for i, (at, seconds, gpus) in enumerate(sorted(shape))
    ]
    outcome = run(workload, cloud(monthly_budget=budget, max_nodes=8))
    account = outcome.pools["cloud"]
    assert account["most_in_a_month"] <= budget + 0.01
    assert all(r.finished is not None for r in outcome.records.values())


def test_a_spot_node_taken_back_requeues_its_work_without_losing_it_or_counting_a_failure() -> None:
    spot = cloud(name="spot", price_per_accel_hour=0.5, spot=True, reclaims_per_day=48.0, notice=120.0)
    workload = burst(4, hours=3.0, spot=True)
    outcome = run(workload, spot, seed=2)
    reclaimed = [r for r in outcome.records.values() if r.reclaimed]
    assert reclaimed  # about one reclaim per node every half hour: three-hour jobs are hit
    assert all(r.failed == 0 and r.preempted == 0 for r in outcome.records.values())
    assert outcome.pools["spot"]["reclaimed"] >= len(reclaimed)
    for r in reclaimed:  # the work done before each notice is kept: it ran three hours in all, no more
        assert r.attained == pytest.approx(3 * 3600 * 2, rel=1e-6)
    # work that does not accept spot never goes there
    plain = run(burst(4, hours=3.0), spot)
    assert plain.pools["spot"]["asked"] == 0


@pytest.mark.parametrize("seed", [1, 2, 3, 4])
def test_a_spot_node_taken_back_while_idle_leaves_once_and_every_node_is_accounted_for(seed: int) -> None:
    # short jobs, a notice longer than the release delay: nodes are often idle when the notice comes
    spot = cloud(name="spot", spot=True, reclaims_per_day=96.0, notice=900.0, idle_release=60.0)
    workload = [SimJob(f"j{i}", i * 60.0, 600.0, accelerators=2, spot=True) for i in range(40)]
    outcome = run(workload, spot, seed=seed)
    account = outcome.pools["spot"]
    assert account["asked"] == account["released"] + account["reclaimed"]
    assert all(r.finished is not None for r in outcome.records.values())


def test_a_policy_cannot_ask_a_pool_for_more_than_its_room() -> None:
    class Greedy:
        name = "greedy"

        def plan(self, sim: Simulation, arrived: object) -> Plan:
            return Plan(asks=[("cloud", 5, 3600.0)])

    with pytest.raises(SimulationError, match="may be asked for 4 nodes now, not 5"):
        Simulation(CLUSTERS, FLEET, burst(1), Greedy(), pools=[cloud()]).run()
    with pytest.raises(SimulationError, match="a name of its own and a cluster of the fleet"):
        Simulation(CLUSTERS, FLEET, burst(1), Greedy(), pools=[cloud(cluster="elsewhere")])
    with pytest.raises(ValueError, match="only a spot pool's nodes are reclaimed"):
        cloud(reclaims_per_day=1.0)
    assert MONTH == 30 * 86400


def test_the_jobs_command_replays_an_elastic_pool_at_each_budget(trace: Path) -> None:
    base = ["simulate", "jobs", "--trace", str(trace), "--vc", "vc1", "--gpus-per-node", "8", "--nodes", "1"]
    out = StringIO()
    call_command(
        *base, "--elastic-budgets", "0,50,none", "--elastic-nodes", "4", "--spot-nodes", "2", "--json", stdout=out
    )
    report = json.loads(out.getvalue())
    assert [r["budget"] for r in report["runs"]] == ["fixed fleet", "0", "50", "no limit"]
    fixed, nothing, fifty, unlimited = report["runs"]
    assert "pools" not in fixed
    assert nothing["pools"]["cloud"]["asked"] == 0
    assert fifty["pools"]["cloud"]["most_in_a_month"] <= 50
    assert unlimited["pools"]["cloud"]["asked"] >= fifty["pools"]["cloud"]["asked"]
    assert unlimited["avg_wait_s"] <= fixed["avg_wait_s"]
    assert [p["name"] for p in report["pools"]] == ["cloud", "spot"]
    table = StringIO()
    call_command(*base, "--elastic-budgets", "50", stdout=table)
    lines = table.getvalue().splitlines()
    assert lines[0].split()[:5] == ["budget", "cost", "worst", "month", "node-h"]
    assert lines[1].startswith("fixed fleet")
    assert lines[2].startswith("50")
    assert "cloud: up to 16 nodes of 8 GPUs at 2/GPU-h" in lines[-2]
    with pytest.raises(CommandError, match="'lots' is not an amount"):
        call_command(*base, "--elastic-budgets", "lots")
    with pytest.raises(CommandError, match="--spot-jobs is a share"):
        call_command(*base, "--elastic-budgets", "5", "--spot-nodes", "1", "--spot-jobs", "2")
