"""The synthetic fleet of the engine benchmark: deterministic, self-consistent, and `advance` conserves resources.

Plain Python, no database: the snapshot is checked against recomputations that do not use the generator.
"""

from __future__ import annotations

from collections import defaultdict

import pytest

from benchmarks.engine import run_bench
from benchmarks.synthetic import advance, synthetic_snapshot
from scheduler.engine import schedule
from scheduler.engine.model import (
    RESOURCES,
    WHOLE,
    Admission,
    Assignment,
    Decisions,
    Job,
    Node,
    Preemption,
    PreemptionReason,
    Snapshot,
    Workload,
)

NODES, JOBS, SEED = 400, 2000, 7


@pytest.fixture(scope="module")
def snapshot() -> Snapshot:
    return synthetic_snapshot(NODES, JOBS, SEED)


def held(running: tuple[Workload, ...]) -> dict[str, tuple[list[int], int, int]]:
    """What the running workloads hold on each node: milli per accelerator index, CPU, memory."""
    holdings: dict[str, tuple[list[int], int, int]] = {}
    per_node: dict[str, list[Assignment]] = defaultdict(list)
    for w in running:
        for a in w.assignments:
            per_node[a.node].append(a)
    for node, assignments in per_node.items():
        accels: dict[int, int] = defaultdict(int)
        for a in assignments:
            for index, milli in a.accels:
                accels[index] += milli
        size = max(accels, default=-1) + 1
        holdings[node] = (
            [accels[i] for i in range(size)],
            sum(a.cpu for a in assignments),
            sum(a.memory for a in assignments),
        )
    return holdings


def assert_conserved(snapshot: Snapshot) -> None:
    """On every node, free + held == capacity, for each accelerator, CPU and memory."""
    holdings = held(snapshot.running)
    names = {n.name for n in snapshot.nodes}
    assert set(holdings) <= names, f"workloads on unknown nodes: {sorted(set(holdings) - names)[:5]}"
    for node in snapshot.nodes:
        accels, cpu, memory = holdings.get(node.name, ([], 0, 0))
        assert len(accels) <= node.accel_count, node.name
        accels = accels + [0] * (node.accel_count - len(accels))
        assert [free + used for free, used in zip(node.accel_free, accels, strict=True)] == [WHOLE] * len(accels), (
            node.name
        )
        assert node.cpu_free + cpu == node.cpu_capacity, node.name
        assert node.memory_free + memory == node.memory_capacity, node.name
        assert min(node.accel_free, default=0) >= 0, node.name
        assert node.cpu_free >= 0, node.name
        assert node.memory_free >= 0, node.name


def test_the_same_seed_gives_the_same_snapshot(snapshot: Snapshot) -> None:
    assert synthetic_snapshot(NODES, JOBS, SEED) == snapshot
    other = synthetic_snapshot(NODES, JOBS, SEED + 1)
    assert other.nodes != snapshot.nodes
    assert other.pending != snapshot.pending


def test_sizes_and_mix(snapshot: Snapshot) -> None:
    assert len(snapshot.nodes) == NODES
    assert len(snapshot.pending) == JOBS
    assert len({n.name for n in snapshot.nodes}) == NODES
    assert len({j.id for j in snapshot.pending} | {w.id for w in snapshot.running}) == JOBS + len(snapshot.running)
    capacity = sum(n.accel_count * WHOLE for n in snapshot.nodes)
    busy = capacity - sum(sum(n.accel_free) for n in snapshot.nodes)
    assert 0.75 <= busy / capacity <= 0.95
    assert {n.accel_count for n in snapshot.nodes} >= {1, 2, 4, 8}
    assert any(not n.healthy for n in snapshot.nodes)
    assert any(not n.schedulable for n in snapshot.nodes)
    assert any(j.accel_milli < WHOLE for j in snapshot.pending)
    assert any(j.workers > 1 and j.topology is not None for j in snapshot.pending)
    assert max(j.workers for j in snapshot.pending) <= 64
    assert any(len(w.assignments) > 1 for w in snapshot.running), "no running gang"
    tiers = {t.name: t for t in snapshot.tiers}
    assert sum(tiers[w.tier].preemptible for w in snapshot.running) > 0.8 * len(snapshot.running)
    assert all(w.expected_end > snapshot.now >= w.admitted_at for w in snapshot.running)


def test_free_is_capacity_minus_what_runs(snapshot: Snapshot) -> None:
    assert_conserved(snapshot)
    for node in snapshot.nodes:
        if not node.healthy:
            assert node.accel_free == (WHOLE,) * node.accel_count


def test_every_reference_resolves(snapshot: Snapshot) -> None:
    clusters = {c.name: c for c in snapshot.clusters}
    regions = {c.region for c in snapshot.clusters}
    nodes: dict[str, Node] = {n.name: n for n in snapshot.nodes}
    flavors = {n.flavor for n in snapshot.nodes}
    cohorts = {c.name: c for c in snapshot.cohorts}
    queues = {q.name: q for q in snapshot.queues}
    tiers = {t.name for t in snapshot.tiers}
    levels = {level for c in snapshot.clusters for level in c.levels}
    for node in snapshot.nodes:
        assert len(node.topology) == len(clusters[node.cluster].levels), node.name
    for cohort in snapshot.cohorts:
        assert cohort.parent is None or cohort.parent in cohorts
        assert {flavor for flavor, _ in cohort.quotas} <= flavors
    for queue in snapshot.queues:
        assert queue.cohort in cohorts
        assert set(queue.flavors) <= flavors
        assert {flavor for flavor, _ in queue.quotas} <= set(queue.flavors)
        assert {resource for _, resource in queue.quotas} <= set(RESOURCES)
    for w in snapshot.running:
        assert w.queue in queues
        assert w.tier in tiers
        assert w.flavor in queues[w.queue].flavors
        for a in w.assignments:
            assert (nodes[a.node].cluster, nodes[a.node].flavor) == (w.cluster, w.flavor)
    for job in snapshot.pending:
        assert job.queue in queues
        assert job.tier in tiers
        assert set(job.flavors) <= set(queues[job.queue].flavors)
        assert set(job.clusters) <= set(clusters)
        assert set(job.regions) <= regions
        assert job.locality is None or job.locality in set(clusters) | regions
        assert job.topology is None or job.topology.level in levels


def test_running_workloads_keep_to_quota(snapshot: Snapshot) -> None:
    """Each queue within nominal + borrowing limit; each (flavor, resource) within the fleet's total quota."""
    usage: dict[tuple[str, str, str], int] = defaultdict(int)
    fleet_usage: dict[tuple[str, str], int] = defaultdict(int)
    for w in snapshot.running:
        for resource, amount in zip(RESOURCES, w.usage(), strict=True):
            usage[w.queue, w.flavor, resource] += amount
            fleet_usage[w.flavor, resource] += amount
    fleet_quota: dict[tuple[str, str], int] = defaultdict(int)
    for quotas in [q.quotas for q in snapshot.queues] + [c.quotas for c in snapshot.cohorts]:
        for key, quota in quotas.items():
            fleet_quota[key] += quota.nominal
    borrowing = []
    for queue in snapshot.queues:
        for (flavor, resource), quota in queue.quotas.items():
            used = usage[queue.name, flavor, resource]
            if quota.borrowing_limit is not None:
                assert used <= quota.nominal + quota.borrowing_limit
            if used > quota.nominal:
                borrowing.append((queue.name, flavor, resource))
    for key, used in fleet_usage.items():
        assert used <= fleet_quota[key], key
    assert borrowing, "some queue should be borrowing, so that there is something to reclaim"


def first_fit(snapshot: Snapshot, job: Job) -> Admission:
    """A hand-made admission of a one-worker job on the first node with room for it."""
    queue = next(q for q in snapshot.queues if q.name == job.queue)
    allowed = job.flavors or queue.flavors
    for node in snapshot.nodes:
        free = [i for i, milli in enumerate(node.accel_free) if milli >= job.accel_milli]
        if (
            node.flavor in allowed
            and len(free) >= job.accelerators
            and node.cpu_free >= job.cpu
            and node.memory_free >= job.memory
        ):
            accels = tuple((i, job.accel_milli) for i in free[: job.accelerators])
            assignment = Assignment(node.name, 1, accels, job.cpu, job.memory)
            return Admission(job.id, node.cluster, node.flavor, (assignment,), borrowing=False, cost_per_hour=0.0)
    raise AssertionError(f"no node has room for {job.id}")


def test_advance_conserves_resources(snapshot: Snapshot) -> None:
    jobs = [j for j in snapshot.pending if j.workers == 1][:3]
    admissions: list[Admission] = []
    state = snapshot
    for job in jobs:  # one at a time, so that two admissions never take the same free space
        admission = first_fit(state, job)
        admissions.append(admission)
        state = advance(state, Decisions((admission,), (), (), ()), 0)
    victims = [w for w in snapshot.running if not w.evicting][:2]
    preemptions = tuple(
        Preemption(w.id, jobs[0].id, PreemptionReason.PRIORITY, "test", grace_seconds=60) for w in victims
    )
    after = advance(snapshot, Decisions(tuple(admissions), preemptions, (), ()), 60)
    assert after.now == snapshot.now + 60
    assert_conserved(after)
    running = {w.id: w for w in after.running}
    assert not {w.id for w in victims} & set(running)
    assert not any(w.evicting for w in after.running)
    for job in jobs:
        assert job.id in running
        assert running[job.id].admitted_at == snapshot.now
        assert job.id not in {j.id for j in after.pending}
    assert len(after.pending) == len(snapshot.pending) - len(jobs)
    finished = {w.id for w in snapshot.running if w.expected_end <= after.now}
    assert not finished & set(running)

    everything_done = advance(after, Decisions((), (), (), ()), 4 * 24 * 3600)
    assert everything_done.running == ()
    assert_conserved(everything_done)
    for node in everything_done.nodes:
        assert node.cpu_free == node.cpu_capacity
        assert node.memory_free == node.memory_capacity


def test_advance_refuses_an_overcommit(snapshot: Snapshot) -> None:
    job = next(j for j in snapshot.pending if j.workers == 1 and j.accel_milli == WHOLE)
    full = next(n for n in snapshot.nodes if n.healthy and max(n.accel_free) == 0)
    assignment = Assignment(full.name, 1, ((0, WHOLE),), job.cpu, job.memory)
    admission = Admission(job.id, full.cluster, full.flavor, (assignment,), borrowing=False, cost_per_hour=0.0)
    with pytest.raises(ValueError, match="overcommit"):
        advance(snapshot, Decisions((admission,), (), (), ()), 60)


def test_a_tiny_fleet_still_has_every_flavor() -> None:
    small = synthetic_snapshot(8, 10, 1)
    assert len({n.flavor for n in small.nodes}) == 8
    assert_conserved(small)
    with pytest.raises(ValueError, match="at least"):
        synthetic_snapshot(3, 10, 1)


def test_cycles_of_the_real_engine_conserve_resources() -> None:
    """The benchmark's loop on a small fleet: every cycle's decisions apply cleanly and keep the books."""
    state = synthetic_snapshot(60, 300, 3)
    admitted = 0
    for _ in range(3):
        decisions = schedule(state)
        admitted += len(decisions.admissions)
        state = advance(state, decisions, 60)
        assert_conserved(state)
    assert admitted > 0

    report = run_bench(30, 100, 1, cycles=2)
    assert report["nodes"] == 30
    assert report["pending"] == 100
    assert len(report["cycle_seconds"]) == 2
    assert report["cycle_seconds_max"] >= report["cycle_seconds_p50"] > 0
    assert report["peak_rss_mb"] > 0
