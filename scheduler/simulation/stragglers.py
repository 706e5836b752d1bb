"""Measure the straggler and hang detectors (``scheduler.watch.detector``) on multi-node jobs from the Philly
trace, with faults injected, against the fixed-threshold baseline.

Each Philly job of 16 GPUs or more becomes a gang of 8-GPU workers (``num_gpus / 8``), running for its trace
duration (capped at ``max_hours``; jobs shorter than 30 minutes are left out: nothing to watch). What its
workers report is synthesised, every ``period`` seconds, from what production training shows:
- a base step time per job (0.2-3 s), a small fixed offset per worker (healthy nodes differ by ~2 %), and
  noise per reading (log-normal, 4 %);
- hiccups: a worker 1.5-3x slower for one reading (garbage collection, a slow batch, a page cache miss),
  1 % of readings;
- pauses: every 30-90 minutes the whole gang stops stepping for 1-8 minutes (a checkpoint, an evaluation);
  its speed reads 0 on every worker then;
and the faults, drawn per job with a fixed seed:
- a **straggler** in ``straggler_share`` of the jobs: one worker slower by a factor of 1.15-2.0 from a random
  moment on (thermal throttling, a bad link, a noisy neighbour); the gang steps at its pace;
- a **hang** in ``hang_share`` of the jobs: from a random moment no step is made and every worker reads 0.

A detector is scored on what it would have said online: a straggler flagged is right when it names the
injected worker after it turned slow (else a false positive); a hang flagged is right when it comes after the
hang (else a false positive, e.g. during a checkpoint pause); time to detect runs from the fault's start.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from statistics import median

import numpy as np

from scheduler.simulation.traces import TraceJob
from scheduler.watch import detector
from scheduler.watch.detector import Config, Hang, Sample, Straggler

GPUS_PER_NODE = 8


@dataclass
class Fault:
    straggler: tuple[str, float] | None = None  # (worker, since)
    hang: float | None = None  # since


@dataclass
class Series:
    job: str
    workers: int
    duration: float
    samples: list[Sample]
    progress: list[tuple[float, int]]
    fault: Fault


@dataclass
class Score:
    """Counts and times to detect of one detector on one kind of fault."""

    positives: int = 0
    true: int = 0
    false: int = 0
    delays: list[float] = field(default_factory=list)

    @property
    def precision(self) -> float:
        return self.true / (self.true + self.false) if self.true + self.false else float("nan")

    @property
    def recall(self) -> float:
        return self.true / self.positives if self.positives else float("nan")

    def as_dict(self) -> dict[str, float]:
        delays = sorted(self.delays)
        return {
            "faults": self.positives,
            "detected": self.true,
            "false_alarms": self.false,
            "precision": round(self.precision, 4),
            "recall": round(self.recall, 4),
            "detect_median_s": round(median(delays), 1) if delays else float("nan"),
            "detect_p90_s": round(delays[int(0.9 * (len(delays) - 1))], 1) if delays else float("nan"),
        }


def synthesise(
    trace: Sequence[TraceJob],
    seed: int = 1,
    period: float = 30.0,
    max_hours: float = 6.0,
    straggler_share: float = 0.3,
    hang_share: float = 0.15,
) -> list[Series]:
    rng = np.random.default_rng(seed)
    out = []
    for tj in trace:
        if tj.gpus < 2 * GPUS_PER_NODE or tj.duration < 1800:
            continue
        workers = tj.gpus // GPUS_PER_NODE
        duration = min(tj.duration, max_hours * 3600)
        steps = int(duration // period)
        names = [f"node-{i:02d}" for i in range(workers)]
        base = float(rng.uniform(0.2, 3.0))
        offset = rng.normal(0.0, 0.02, workers)
        factor = np.exp(rng.normal(0.0, 0.04, (steps, workers))) * (1 + offset)
        hiccup = rng.random((steps, workers)) < 0.01
        factor[hiccup] *= rng.uniform(1.5, 3.0, int(hiccup.sum()))
        fault = Fault()
        if rng.random() < straggler_share:
            who = int(rng.integers(workers))
            since = float(rng.uniform(0.1, 0.8) * duration)
            factor[int(since // period) :, who] *= rng.uniform(1.15, 2.0)
            fault.straggler = (names[who], since)
        paused = np.zeros(steps, bool)
        t = float(rng.uniform(1800, 5400))
        while t < duration:
            length = float(rng.uniform(60, 480))
            paused[int(t // period) : int((t + length) // period) + 1] = True
            t += length + float(rng.uniform(1800, 5400))
        hung_from = steps
        if rng.random() < hang_share:
            fault.hang = float(rng.uniform(0.2, 0.9) * duration)
            hung_from = int(fault.hang // period) + 1
        step_time = base * factor  # seconds per step of each worker on its own
        samples: list[Sample] = []
        progress: list[tuple[float, int]] = []
        done = 0.0
        for i in range(steps):
            at = (i + 1) * period
            stopped = paused[i] or i >= hung_from
            for w, name in enumerate(names):
                samples.append(Sample(at, name, 0.0 if stopped else 1.0 / step_time[i, w]))
            if not stopped:
                done += period / float(step_time[i].max())  # the gang steps at its slowest worker's pace
            progress.append((at, int(done)))
        out.append(Series(tj.name, workers, duration, samples, progress, fault))
    return out


def score_stragglers(series: Sequence[Series], find: Callable[..., list[Straggler]], config: Config) -> Score:
    score = Score()
    for s in series:
        truth = s.fault.straggler
        score.positives += truth is not None
        for flag in find(s.samples, s.duration, config):
            if truth is not None and flag.worker == truth[0] and flag.flagged_at >= truth[1]:
                score.true += 1
                score.delays.append(flag.flagged_at - truth[1])
            else:
                score.false += 1
    return score


def first_hang(
    progress: Sequence[tuple[float, int]], end: float, judge: Callable[..., Hang | None], config: Config
) -> Hang | None:
    """The first moment ``judge`` would have called the job hung, watching it online until ``end``: during a
    long gap between two readings of its step count, or after the last."""
    last_move = 0
    for i in range(1, len(progress) + 1):
        upto = progress[i][0] if i < len(progress) else end
        if i < len(progress) and progress[i][1] == progress[last_move][1]:
            continue  # no step made: the gap goes on
        # the gap from the last step made to ``upto``: what did the judge say at its end?
        verdict = judge(progress[:i], upto, config)
        if verdict is not None:
            return verdict
        last_move = min(i, len(progress) - 1)
    return None


def score_hangs(series: Sequence[Series], judge: Callable[..., Hang | None], config: Config) -> Score:
    score = Score()
    for s in series:
        truth = s.fault.hang
        score.positives += truth is not None
        flag = first_hang(s.progress, s.duration, judge, config)
        if flag is None:
            continue
        if truth is not None and flag.flagged_at >= truth:
            score.true += 1
            score.delays.append(flag.flagged_at - truth)
        else:
            score.false += 1
    return score


def run(trace: Sequence[TraceJob], seeds: Sequence[int], config: Config = Config(), **kw: float) -> dict[str, object]:  # noqa: B008
    """Both detectors on the same synthesised series, for each seed; scores summed over the seeds."""
    totals = {name: {"stragglers": Score(), "hangs": Score()} for name in ("robust", "fixed threshold")}
    jobs = workers = 0
    hours = 0.0
    for seed in seeds:
        series = synthesise(trace, seed=seed, **kw)
        jobs += len(series)
        workers += sum(s.workers for s in series)
        hours += sum(s.duration for s in series) / 3600
        for name, find, judge in (
            ("robust", detector.stragglers, detector.hang),
            ("fixed threshold", detector.fixed_stragglers, detector.fixed_hang),
        ):
            for kind, score in (
                ("stragglers", score_stragglers(series, find, config)),
                ("hangs", score_hangs(series, judge, config)),
            ):
                total = totals[name][kind]
                total.positives += score.positives
                total.true += score.true
                total.false += score.false
                total.delays.extend(score.delays)
    return {
        "jobs": jobs,
        "workers": workers,
        "job_hours": round(hours, 1),
        "seeds": list(seeds),
        "detectors": {name: {k: v.as_dict() for k, v in kinds.items()} for name, kinds in totals.items()},
    }


def table(report: dict[str, object]) -> str:
    lines = [
        f"{report['jobs']} multi-node Philly jobs ({report['workers']} workers, {report['job_hours']} job-hours) "
        f"over seeds {report['seeds']}",
        f"{'detector':<16} {'fault':<11} {'faults':>6} {'found':>6} {'false':>6} {'precision':>9} {'recall':>7} "
        f"{'detect p50':>10} {'detect p90':>10}",
    ]
    detectors = report["detectors"]
    assert isinstance(detectors, dict)
    for name, kinds in detectors.items():
        for kind, f in kinds.items():
            lines.append(
                f"{name:<16} {kind:<11} {f['faults']:>6} {f['detected']:>6} {f['false_alarms']:>6} "
                f"{f['precision']:>9.3f} {f['recall']:>7.3f} {_minutes(f['detect_median_s']):>10} "
                f"{_minutes(f['detect_p90_s']):>10}"
            )
    return "\n".join(lines) + "\n"


def _minutes(seconds: float) -> str:
    return "-" if math.isnan(seconds) else f"{seconds / 60:.1f} min"
