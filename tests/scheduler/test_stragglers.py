"""The straggler and hang detectors (``scheduler/watch/detector.py``) on series built to show each rule, and
the simulator that scores them on the Philly trace (``manage.py simulate stragglers``)."""

from __future__ import annotations

import json
from io import StringIO
from pathlib import Path

import pytest
from django.core.management import CommandError, call_command

from scheduler.simulation import stragglers as sim
from scheduler.simulation.traces import TraceJob
from scheduler.watch import detector
from scheduler.watch.detector import Config, Sample

CONFIG = Config(window=60, persistence=3)


def gang(minutes: int, speeds: dict[str, float], slow: dict[str, tuple[int, float]] | None = None) -> list[Sample]:
    """Readings every 30 s: each worker at its speed, with a little spread; ``slow`` slows a worker by a
    factor from a minute on."""
    samples = []
    for i in range(minutes * 2):
        t = 30.0 * (i + 1)
        for n, (worker, speed) in enumerate(speeds.items()):
            wobble = 1 + 0.01 * ((i + n) % 3 - 1)
            since, factor = (slow or {}).get(worker, (10**9, 1.0))
            samples.append(Sample(t, worker, speed * wobble / (factor if t > since * 60 else 1.0)))
    return samples


EIGHT = {f"n{i}": 10.0 for i in range(8)}


def test_a_persistently_slow_worker_is_flagged_after_persistence_windows() -> None:
    samples = gang(20, EIGHT, slow={"n3": (5, 1.3)})
    (flag,) = detector.stragglers(samples, 20 * 60, CONFIG)
    assert flag.worker == "n3"
    assert flag.windows == 3
    assert flag.since == pytest.approx(5 * 60, abs=60)
    assert flag.flagged_at == flag.since + 3 * 60
    assert flag.ratio == pytest.approx(1 / 1.3, rel=0.03)


def test_a_hiccup_or_a_slowdown_of_the_whole_gang_is_not_a_straggler() -> None:
    hiccup = [*gang(20, EIGHT), Sample(301, "n2", 3.0), Sample(302, "n2", 3.0)]  # one slow minute
    assert detector.stragglers(hiccup, 20 * 60, CONFIG) == []
    everyone = gang(20, EIGHT, slow=dict.fromkeys(EIGHT, (5, 2.0)))  # an evaluation phase: all slower
    assert detector.stragglers(everyone, 20 * 60, CONFIG) == []
    # A worker 5 % slower than a tight gang is far from it by z-score, but not materially slower.
    slightly = gang(20, EIGHT, slow={"n1": (0, 1.05)})
    assert detector.stragglers(slightly, 20 * 60, CONFIG) == []


def test_the_baseline_flags_a_hiccup_the_robust_detector_ignores() -> None:
    hiccup = [*gang(20, EIGHT), Sample(301, "n2", 3.0), Sample(302, "n2", 3.0)]
    assert [f.worker for f in detector.fixed_stragglers(hiccup, 20 * 60, CONFIG)] == ["n2"]


def test_two_workers_need_a_bigger_gap() -> None:
    pair = {"a": 10.0, "b": 10.0}
    assert detector.stragglers(gang(20, pair, slow={"b": (2, 1.15)}), 1200, CONFIG) == []
    (flag,) = detector.stragglers(gang(20, pair, slow={"b": (2, 1.5)}), 1200, CONFIG)
    assert flag.worker == "b"


def steps(
    until: float, pace: float, pauses: tuple[tuple[float, float], ...] = (), stop: float | None = None
) -> list[tuple[float, int]]:
    """(t, step) every 30 s of a job making one step every ``pace`` seconds, pausing and stopping as told."""
    out, done = [], 0.0
    t = 0.0
    while t < until:
        t += 30
        stopped = any(a <= t < b for a, b in pauses) or (stop is not None and t >= stop)
        if not stopped:
            done += 30 / pace
        out.append((t, int(done)))
    return out


def test_a_hang_is_a_pause_longer_than_its_usual_pace_and_its_longest_pause_allow() -> None:
    assert detector.hang(steps(3600, 2.0), 3600, CONFIG) is None
    hung = detector.hang(steps(7200, 2.0, stop=3000), 7200, CONFIG)
    assert hung is not None
    assert hung.last_progress == pytest.approx(2970, abs=30)
    assert hung.flagged_at == hung.last_progress + CONFIG.hang_floor  # 20 x 2 s is less than the floor
    assert hung.usual_step == pytest.approx(2.0, rel=0.1)
    # A job that once paused 15 minutes for a checkpoint is not hung 11 minutes into its next pause...
    pauses = ((1200.0, 2100.0), (4000.0, 4660.0))
    assert detector.hang(steps(4660, 2.0, pauses=pauses), 4660, CONFIG) is None
    # ... but is once twice that pause has passed.
    long = detector.hang(steps(7000, 2.0, pauses=pauses[:1], stop=4000), 7000, CONFIG)
    assert long is not None
    assert long.longest_pause == pytest.approx(900, abs=60)
    assert long.flagged_at == pytest.approx(long.last_progress + 2 * long.longest_pause)


def test_a_job_with_too_little_progress_or_none_is_not_judged() -> None:
    assert detector.hang([], 10_000, CONFIG) is None
    assert detector.hang([(30, 1), (60, 2)], 10_000, CONFIG) is None
    assert detector.fixed_hang([(30, 1), (60, 2)], 10_000, CONFIG) is not None


def test_idle_gpus_are_a_hang_without_progress_reports() -> None:
    busy = [Sample(t, "n0", 90.0) for t in range(0, 1200, 30)]
    idle = [Sample(t, "n0", 0.0) for t in range(1200, 2400, 30)]
    assert detector.idle_hang(busy + idle, 1500, CONFIG) is None
    hung = detector.idle_hang(busy + idle, 2400, CONFIG)
    assert hung is not None
    assert hung.last_progress == 1170


def test_the_simulator_scores_what_it_injected() -> None:
    trace = [TraceJob(f"job-{i}", 0.0, 4 * 3600, 32, "vc") for i in range(30)] + [
        TraceJob("single", 0.0, 4 * 3600, 8, "vc"),  # one node: left out
        TraceJob("short", 0.0, 600, 32, "vc"),  # too short to watch: left out
    ]
    series = sim.synthesise(trace, seed=5, straggler_share=0.5, hang_share=0.3)
    assert len(series) == 30
    assert {s.workers for s in series} == {4}
    report = sim.run(trace, [5], straggler_share=0.5, hang_share=0.3)
    robust = report["detectors"]["robust"]  # type: ignore[index]
    injected = sum(s.fault.straggler is not None for s in series)
    assert robust["stragglers"]["faults"] == injected
    assert robust["hangs"]["faults"] == sum(s.fault.hang is not None for s in series)
    assert 0 < robust["stragglers"]["detected"] <= injected  # found only what was injected, and some of it


def test_the_command_prints_a_table_and_json(tmp_path: Path) -> None:
    trace = tmp_path / "philly.csv"
    rows = ["timestamp,duration,num_gpus,gpu_time,cluster"]
    rows += [f"2017-10-09 0{i}:00:00,7200.0,16,115200.0,vc1" for i in range(6)]
    trace.write_text("\n".join(rows) + "\n")
    out = StringIO()
    call_command("simulate", "stragglers", "--trace", str(trace), "--seeds", "1", stdout=out)
    assert "6 multi-node Philly jobs (12 workers" in out.getvalue()
    assert "robust" in out.getvalue()
    assert "fixed threshold" in out.getvalue()
    out = StringIO()
    call_command("simulate", "stragglers", "--trace", str(trace), "--seeds", "1", "--json", stdout=out)
    assert set(json.loads(out.getvalue())["detectors"]) == {"robust", "fixed threshold"}
    with pytest.raises(CommandError, match="--max-hours"):
        call_command("simulate", "stragglers", "--trace", str(trace), "--max-hours", "0")
