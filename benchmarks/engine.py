"""Benchmark of the placement engine on a synthetic fleet (no Django, no database).

`run_bench` builds a snapshot with `benchmarks.synthetic`, runs consecutive cycles (applying each cycle's
decisions and moving the clock a minute between them) and reports cycle times, decision counts and peak
memory. `main` is the command line shared by `manage.py bench_engine` and `tests/bench/bench_engine.py`.
With `--scale` every size runs in a fresh process, so that each size's peak memory is its own.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import platform
import resource
import statistics
import time
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor
from typing import Any

import numpy as np

from benchmarks.synthetic import MIN_NODES, advance, synthetic_snapshot
from scheduler.engine import schedule

JOBS_PER_NODE = 5
DEFAULT_SCALE = (1000, 2000, 5000, 10000, 20000)


def peak_rss_mb() -> float:
    """This process's peak resident memory (Linux reports ru_maxrss in KiB)."""
    return round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)


def run_bench(nodes: int, jobs: int, seed: int, cycles: int = 5) -> dict[str, Any]:
    """Build a synthetic snapshot, run `cycles` scheduling cycles on it and report how they went."""
    if cycles < 1:
        raise ValueError("cycles must be at least 1")
    started = time.perf_counter()
    snapshot = synthetic_snapshot(nodes, jobs, seed)
    build_seconds = time.perf_counter() - started
    initial_pending, initial_running = len(snapshot.pending), len(snapshot.running)
    build_rss = peak_rss_mb()
    seconds: list[float] = []
    admitted = preempted = reservations = decisions = 0
    for _ in range(cycles):
        started = time.perf_counter()
        outcome = schedule(snapshot)
        seconds.append(time.perf_counter() - started)
        admitted += len(outcome.admissions)
        preempted += len(outcome.preemptions)
        reservations += len(outcome.reservations)
        decisions += len(outcome.admissions) + len(outcome.preemptions) + len(outcome.pending)
        snapshot = advance(snapshot, outcome, 60)  # untimed; after the last cycle too, for the *_after counts
    total = sum(seconds)
    return {
        "nodes": nodes,
        "pending": initial_pending,
        "running": initial_running,
        "seed": seed,
        "cycles": cycles,
        "build_seconds": round(build_seconds, 3),
        "cycle_seconds_p50": round(statistics.median(seconds), 3),
        "cycle_seconds_max": round(max(seconds), 3),
        "cycle_seconds": [round(s, 3) for s in seconds],
        "admitted": admitted,
        "preempted": preempted,
        "reservations": reservations,
        "decisions": decisions,
        "decisions_per_second": round(decisions / total) if total else None,
        "pending_after": len(snapshot.pending),
        "running_after": len(snapshot.running),
        "snapshot_rss_mb": build_rss,
        "peak_rss_mb": peak_rss_mb(),
        "python": platform.python_version(),
        "numpy": np.__version__,
    }


def bench_report(nodes: int, jobs: int | None, seed: int, cycles: int, scale: Sequence[int] = ()) -> dict[str, Any]:
    """One size's report; or, given `scale`, a report per node count (JOBS_PER_NODE jobs each, own process)."""
    if not scale:
        return run_bench(nodes, JOBS_PER_NODE * nodes if jobs is None else jobs, seed, cycles)
    report: dict[str, Any] = {}
    # A fresh interpreter per size: ru_maxrss only ever grows, so sizes sharing a process would share a peak.
    context = multiprocessing.get_context("spawn")
    for size in scale:
        with ProcessPoolExecutor(max_workers=1, mp_context=context) as pool:
            report[str(size)] = pool.submit(run_bench, size, JOBS_PER_NODE * size, seed, cycles).result()
    return report


def _whole(text: str, least: int, what: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < least:
        raise argparse.ArgumentTypeError(f"{what} at least {least}, not {value}")
    return value


def node_count(text: str) -> int:
    """An argparse type: a fleet size the generator can build (one node of each flavor at least)."""
    return _whole(text, MIN_NODES, "a fleet needs")


def parse_scale(text: str) -> list[int]:
    """An argparse type: node counts separated by commas."""
    sizes = [node_count(part.strip()) for part in text.split(",") if part.strip()]
    if not sizes:
        raise argparse.ArgumentTypeError("--scale needs at least one node count")
    return sizes


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of the benchmark, shared by the script and the management command."""
    parser.add_argument("--nodes", type=node_count, default=10000, help="Nodes in the synthetic fleet (default 10000).")
    parser.add_argument(
        "--jobs",
        type=lambda text: _whole(text, 0, "jobs must be"),
        default=None,
        help=f"Pending jobs (default {JOBS_PER_NODE} per node).",
    )
    parser.add_argument("--seed", type=int, default=1, help="Random seed of the fleet and the mix (default 1).")
    parser.add_argument(
        "--cycles",
        type=lambda text: _whole(text, 1, "cycles must be"),
        default=5,
        help="Scheduling cycles to run (default 5).",
    )
    parser.add_argument(
        "--scale",
        type=parse_scale,
        default=None,
        metavar="N,N,...",
        help=f"Run at each node count with {JOBS_PER_NODE} jobs per node, each in a fresh process, e.g. "
        + ",".join(map(str, DEFAULT_SCALE)),
    )


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    add_arguments(parser)
    args = parser.parse_args(argv)
    report = bench_report(args.nodes, args.jobs, args.seed, args.cycles, args.scale or ())
    print(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
