"""The engine's shortcuts agree with the slow way of computing the same thing, on random snapshots.

Each shortcut exists for speed only (see ``bench_engine``): the flat arrays of running work, the quick
fit test on a (flavor, cluster)'s largest free node, and the backfill states kept between searches. Here
each is compared with a direct computation from the snapshot's objects, so that a shortcut that drifts
from what it stands for fails a test, not just a benchmark.
"""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from scheduler.engine.cycle import Cycle
from scheduler.engine.fgd import Shape
from scheduler.engine.model import Snapshot
from scheduler.engine.nodes import FreeState
from scheduler.engine.placement import can_spread, lacks_level, worker_fits
from tests.engine.strategies import snapshots


def _same(a: FreeState, b: FreeState) -> None:
    for name in ("accel", "cpu", "memory", "whole"):
        assert np.array_equal(getattr(a, name), getattr(b, name)), name


@settings(max_examples=150)
@given(snapshots(), st.randoms(use_true_random=False))
def test_running_work_arrays_match_the_workloads(snapshot: Snapshot, rnd: object) -> None:
    cycle = Cycle(snapshot)
    work, table = cycle.work, cycle.table
    assert [w.id for w in work.workloads] == sorted(w.id for w in snapshot.running)
    assert work.usage == [w.usage() for w in work.workloads]
    width = table.free.accel.shape[1]
    for f in range(len(table.flavors)):
        (ends, cells, milli), (host_ends, rows, cpu, memory) = work.releases(f)
        assert list(ends) == sorted(ends)
        assert list(host_ends) == sorted(host_ends)
        shares: Counter[tuple[float, int, int]] = Counter()
        hosts: Counter[tuple[float, int, int, int]] = Counter()
        for w in work.workloads:
            for a in w.assignments:
                row = table.index.get(a.node)
                if row is None or table.flavor[row] != f:
                    continue
                hosts[(w.expected_end, row, a.cpu, a.memory)] += 1
                for slot, share in a.accels:
                    shares[(w.expected_end, row * width + slot, share)] += 1
        assert Counter(zip(ends.tolist(), cells.tolist(), milli.tolist(), strict=True)) == shares
        assert Counter(zip(host_ends.tolist(), rows.tolist(), cpu.tolist(), memory.tolist(), strict=True)) == hosts
    # Stopping a random subset frees exactly what their assignments hold.
    chosen = [i for i in range(len(work.workloads)) if rnd.random() < 0.5]  # type: ignore[attr-defined]
    expected = table.free.copy()
    for i in chosen:
        table.take(expected, work.workloads[i].assignments, +1)
    _same(work.stopped(table.free, chosen), expected)


@settings(max_examples=150)
@given(snapshots())
def test_quick_fit_test_never_turns_away_a_job_that_fits(snapshot: Snapshot) -> None:
    cycle = Cycle(snapshot)
    table = cycle.table
    for state in (table.free, table.empty):
        for job in snapshot.pending:
            shape = Shape.of(job)
            for flavor in table.flavors:
                for c in cycle.router.allowed_clusters(job, flavor):
                    rows = cycle.router.rows(flavor, c)
                    levels = table.clusters[c].levels
                    if not len(rows) or lacks_level(levels, job.topology):
                        continue
                    fits = worker_fits(state, rows, shape)
                    room = (
                        bool((fits > 0).any())
                        if job.workers == 1
                        else can_spread(table, rows, fits, levels, job.topology, job.workers)
                    )
                    quick = cycle.router.may_fit(state, shape, job.workers, flavor, c)
                    assert quick or not room, (job, flavor, c)
                    if job.workers == 1 and not job.cpu and not job.memory:
                        assert quick == room, (job, flavor, c)  # the case where the quick test is exact


@settings(max_examples=150)
@given(snapshots(contended=True))
def test_backfill_states_kept_between_searches_match_fresh_ones(snapshot: Snapshot) -> None:
    cycle = Cycle(snapshot)
    timeline, table = cycle.timeline, cycle.table
    probes = [(f, t) for f in range(len(table.flavors)) for t in [cycle.now, *timeline.candidate_times(f)[:3]]]

    def fresh(f: int, t: float) -> FreeState:
        kept = dict(timeline._ended)
        timeline._ended.clear()
        try:
            return timeline.state_at(f, t, t + 3600)
        finally:
            timeline._ended.update(kept)

    for f, t in probes:
        kept = timeline.state_at(f, t, t + 3600)
        _same(timeline.state_at(f, t, t + 3600), kept)  # the second time from what was kept
        _same(fresh(f, t), kept)
    # The cycle admits jobs (new releases, less free) and reserves capacity (holds): what was kept before
    # must not be used as it was.
    cycle.run()
    for f, t in probes:
        _same(timeline.state_at(f, t, t + 3600), fresh(f, t))


@settings(max_examples=100)
@given(snapshots(), st.data())
def test_fragmentation_of_a_share_on_each_accelerator_matches_scoring_each_option(
    snapshot: Snapshot, data: st.DataObject
) -> None:
    cycle = Cycle(snapshot)
    frag, table = cycle.fragmentation, cycle.table
    if frag is None or not frag.mix or not len(table):
        return
    milli = data.draw(st.integers(1, 999))
    shape = Shape(1, milli, data.draw(st.integers(0, 4000)), data.draw(st.integers(0, 8192)))
    rows = np.arange(len(table))
    delta, _ = frag.score(table.free, rows, shape, None)
    free = table.free

    def frag_of(row: int, accel: np.ndarray, cpu: int, memory: int) -> float:
        one, total = np.array([row]), np.array([accel.sum()])
        return float(frag._combine(frag._frag(one, accel[None, :], total, np.array([cpu]), np.array([memory])))[0])

    for i, row in enumerate(rows.tolist()):
        g, cpu, memory = free.accel[row], int(free.cpu[row]), int(free.memory[row])
        before = frag_of(row, g, cpu, memory)
        options = []
        for j in np.flatnonzero(g >= milli).tolist():
            after = g.copy()
            after[j] -= milli
            options.append(frag_of(row, after, cpu - shape.cpu, memory - shape.memory) - before)
        if options:  # (the shortcut adds a best-fit nudge of at most 1e-6 between accelerators)
            assert delta[i] == pytest.approx(min(options), abs=1e-5), (row, g, options)
