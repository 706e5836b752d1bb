"""Straggler and hang detection for a running job: pure functions over what its workers reported.

A **straggler** is a worker (a node of a gang) persistently slower than its peers. Its speed is what the job
reports per worker (steps per second of its own compute, ``qm progress``) or, without reports, a throughput
proxy from the node probe (GPU utilization times SM clock); higher is faster. Time is cut into windows
(``Config.window``); in each, every worker's speed is its median there, and the gang's reference is the median
over workers, its spread the median absolute deviation (MAD, scaled by 1.4826 to estimate a standard
deviation). A worker is slow in a window when it is both **far from its peers** by that robust z-score
(``z``) and **materially slower** (its speed below ``1 - min_slowdown`` of the median), so neither a tight gang
(MAD near 0) nor a noisy one flags on noise. It is flagged once it is slow in ``persistence`` windows in a
row: a transient hiccup (garbage collection, a checkpoint write, a slow batch) is not a straggler. With two
workers there are no peers to outvote: the slower is flagged only when it is twice ``min_slowdown`` slower.

A **hang** is a job whose progress (its step count) stopped: flagged when no step was made for longer than
``hang_factor`` times its usual step time (the median seconds per step so far), and longer than twice the
longest pause it made before and came back from (checkpoints, evaluations), and never sooner than
``hang_floor``. Without progress reports a job cannot be judged hung from steps; ``idle_hang`` judges it from
GPU utilization instead (every worker idle for ``hang_floor``), which misses hangs where the GPUs spin (an
NCCL collective waiting forever shows 100 % utilization): report progress for those.

The baseline the simulator measures against (``fixed_*``) is what clusters often run: a worker 20 % slower
than the gang's mean in a single window is a straggler; a job with no progress for 30 minutes (PyTorch's
default NCCL watchdog timeout) is hung.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from statistics import median

#: How many of its latest steps a job's usual pace is the median of.
PACE_WINDOW = 64
#: MAD times this estimates the standard deviation of normally distributed speeds.
MAD_SCALE = 1.4826


@dataclass(frozen=True, slots=True)
class Sample:
    """One reading of one worker: at ``t`` (seconds), its ``speed`` (higher is faster)."""

    t: float
    worker: str
    speed: float


@dataclass(frozen=True, slots=True)
class Config:
    window: float = 120.0  # seconds of samples per window
    z: float = 3.5  # robust z-score beyond which a worker is far from its peers
    min_slowdown: float = 0.10  # and at least this much slower than their median
    persistence: int = 3  # windows in a row
    hang_factor: float = 20.0  # times the usual step time without progress
    hang_floor: float = 600.0  # seconds: never a hang sooner
    fixed_slowdown: float = 0.20  # baseline: slower than the gang's mean by this much in one window
    fixed_hang: float = 1800.0  # baseline: seconds without progress


@dataclass(frozen=True, slots=True)
class Straggler:
    worker: str
    since: float  # start of its first slow window of the run that flagged it
    flagged_at: float  # end of the window that completed the run
    ratio: float  # its speed over its peers' median, in that window
    z: float  # its robust z-score there (inf where the peers did not vary)
    windows: int  # windows in the run


@dataclass(frozen=True, slots=True)
class Hang:
    last_progress: float  # when its step count last went up
    flagged_at: float
    usual_step: float  # median seconds per step before it stopped (0: unknown)
    longest_pause: float  # the longest pause it made before and came back from


def windows(samples: Iterable[Sample], width: float, until: float) -> list[tuple[float, dict[str, float]]]:
    """(end of window, median speed per worker) of every whole window ending by ``until``, in time order."""
    buckets: dict[int, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    for s in samples:
        buckets[int(s.t // width)][s.worker].append(s.speed)
    ends = sorted(b for b in buckets if (b + 1) * width <= until)
    return [((b + 1) * width, {w: median(v) for w, v in buckets[b].items()}) for b in ends]


def slow_in(speeds: dict[str, float], config: Config) -> dict[str, tuple[float, float]]:
    """The workers slow in one window, with (ratio to the peers' median, robust z-score)."""
    if len(speeds) < 2:
        return {}
    values = list(speeds.values())
    middle = median(values)
    if middle <= 0:
        return {}
    if len(speeds) == 2:
        slowest = min(speeds, key=speeds.__getitem__)
        ratio = speeds[slowest] / max(values)
        return {slowest: (ratio, float("inf"))} if ratio < 1 - 2 * config.min_slowdown else {}
    spread = MAD_SCALE * median(abs(v - middle) for v in values)
    found = {}
    for worker, speed in speeds.items():
        ratio = speed / middle
        z = (middle - speed) / spread if spread > 0 else (float("inf") if speed < middle else 0.0)
        if z > config.z and ratio < 1 - config.min_slowdown:
            found[worker] = (ratio, z)
    return found


def stragglers(samples: Sequence[Sample], now: float, config: Config = Config()) -> list[Straggler]:
    """The workers flagged as stragglers by ``now``: each at the first run of ``persistence`` slow windows."""
    runs: dict[str, list[float]] = {}  # worker -> start of its current run of slow windows
    counts: dict[str, int] = defaultdict(int)
    flagged: dict[str, Straggler] = {}
    for end, speeds in windows(samples, config.window, now):
        slow = slow_in(speeds, config)
        for worker in list(counts):
            if worker not in slow:
                counts.pop(worker)
                runs.pop(worker, None)
        for worker, (ratio, z) in slow.items():
            counts[worker] += 1
            runs.setdefault(worker, [end - config.window])
            if counts[worker] >= config.persistence and worker not in flagged:
                flagged[worker] = Straggler(worker, runs[worker][0], end, ratio, z, counts[worker])
    return sorted(flagged.values(), key=lambda s: (s.flagged_at, s.worker))


def fixed_stragglers(samples: Sequence[Sample], now: float, config: Config = Config()) -> list[Straggler]:
    """The baseline: a worker slower than the gang's mean by ``fixed_slowdown`` in any one window."""
    flagged: dict[str, Straggler] = {}
    for end, speeds in windows(samples, config.window, now):
        if len(speeds) < 2:
            continue
        mean = sum(speeds.values()) / len(speeds)
        for worker, speed in speeds.items():
            if mean > 0 and speed < (1 - config.fixed_slowdown) * mean and worker not in flagged:
                flagged[worker] = Straggler(worker, end - config.window, end, speed / mean, 0.0, 1)
    return sorted(flagged.values(), key=lambda s: (s.flagged_at, s.worker))


def hang(progress: Sequence[tuple[float, int]], now: float, config: Config = Config()) -> Hang | None:
    """Whether a job whose step count was ``progress`` ((t, step), in time order) is hung at ``now``."""
    rates: list[float] = []
    usual = 0.0  # the median of the last ``PACE_WINDOW`` seconds-per-step, refreshed as steps come
    longest = 0.0
    last_t, last_step = None, None
    for t, step in progress:
        if last_t is None or last_step is None:
            last_t, last_step = t, step
            continue
        if step > last_step:
            gap = t - last_t
            if usual and gap > 3 * usual * (step - last_step):  # a pause it came back from
                longest = max(longest, gap)
            else:
                rates.append(gap / (step - last_step))
                if len(rates) < PACE_WINDOW or len(rates) % 16 == 0:
                    usual = median(rates[-PACE_WINDOW:])
            last_t, last_step = t, step
    if last_t is None or len(rates) < 3:
        return None  # too little progress to know its pace
    usual = median(rates[-PACE_WINDOW:])
    limit = max(config.hang_factor * usual, 2 * longest, config.hang_floor)
    if now - last_t <= limit:
        return None
    return Hang(last_t, last_t + limit, usual, longest)


def fixed_hang(progress: Sequence[tuple[float, int]], now: float, config: Config = Config()) -> Hang | None:
    """The baseline: no progress for ``fixed_hang`` seconds."""
    last = None
    for t, step in progress:
        if last is None or step > last[1]:
            last = (t, step)
    if last is None or now - last[0] <= config.fixed_hang:
        return None
    return Hang(last[0], last[0] + config.fixed_hang, 0.0, 0.0)


def idle_hang(samples: Sequence[Sample], now: float, config: Config = Config(), idle: float = 5.0) -> Hang | None:
    """Without progress reports: every worker's GPU utilization (``speed`` in %) below ``idle`` since some time
    at least ``hang_floor`` ago, after it was busy before."""
    busy_until = None
    for s in sorted(samples, key=lambda s: s.t):
        if s.speed >= idle:
            busy_until = s.t
    if busy_until is None or now - busy_until <= config.hang_floor:
        return None
    return Hang(busy_until, busy_until + config.hang_floor, 0.0, 0.0)
