"""How well the demand forecast does on real history, from the repository root:

    .venv/bin/python tests/bench/bench_forecast.py [--trace ../shared/traces/philly-pollux] [--vcs 4]

Reads the Microsoft Philly job trace (``scheduler.simulation.traces.read_philly``; see the trace's README) and
builds daily GPU-hour demand: each job holds its GPUs from its submission for its duration (the trace has no
start times, so this is the load offered as it arrived; queueing would move hours later, not remove them),
cut at UTC midnights. The trace's edges are not demand: submissions start on 24 September 2017 and stop in
mid-December (the artifact dropped jobs without a usable end), and jobs running before the first submission
are missing. So the window is the longest run of days each with at least a tenth of the median day's
submissions, less its first 7 days (long jobs piling up from nothing).

On that window the product's forecast (``billing.forecast.forecast_values``) runs its rolling-origin backtest,
for the whole trace and for each of the ``--vcs`` largest virtual clusters as if each were a flavor, then on a
synthetic series with a known weekly pattern and trend (two years of days). Prints one JSON object: per series
and horizon (1, 4, 12 weeks) the WAPE of weekly totals over every origin and week of the horizon the window
holds (at 12 weeks, that is at most 8: the window is 74 days), the seasonal naive forecast's WAPE on the same
pairs, the 80 and 95% intervals' coverage (each origin calibrated on earlier backtests only), the daily WAPE,
today's weights and the seconds taken; then ``--table`` prints the same as a Markdown table. The model was
chosen on ``CHOSEN_ON``; the other two VCs are held out. No database is needed for that.

With ``--records N`` it also times reading an organization's history from the database: N usage records over
the last year (attempts of 10 days on 10 nodes each, 100 records an attempt, bulk-inserted into a throwaway
organization with 2 flavors and 20 nodes, with their jobs' waits and a day's capacity records per node), then
``forecast_history.read_history`` (the GROUP BY queries) and a whole ``forecast_organization`` without the
cache, ``--repeat`` times each; the organization is removed afterwards. On PostgreSQL:

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/qm_bench .venv/bin/python tests/bench/bench_forecast.py \\
        --records 1000000

Without ``DATABASE_URL`` that part runs on a fresh SQLite database in a temporary folder.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import random
import shutil
import statistics
import sys
import tempfile
import time
from collections import Counter, defaultdict
from datetime import UTC, date, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from billing.forecast import SCORED_WEEKS, forecast_values  # noqa: E402
from scheduler.simulation.traces import TraceJob, read_philly  # noqa: E402

TRACE = ROOT.parent / "shared" / "traces" / "philly-pollux"
WARM_UP_DAYS = 7


def first_submission(path: Path) -> datetime:
    """The trace's first submission: ``read_philly`` gives times after it."""
    with path.open(newline="") as rows:
        stamps = [row["timestamp"] for row in csv.DictReader(rows)]
    return datetime.fromisoformat(min(stamps)).replace(tzinfo=UTC)


def daily_hours(jobs: list[TraceJob], start: datetime) -> dict[str, dict[date, float]]:
    """GPU-hours per virtual cluster ("" for all) and UTC day, each job from its submission for its duration."""
    hours: dict[str, dict[date, float]] = defaultdict(lambda: defaultdict(float))
    for job in jobs:
        at = start + timedelta(seconds=job.submitted)
        end = at + timedelta(seconds=job.duration)
        while at < end:
            midnight = datetime.combine(at.date() + timedelta(days=1), datetime.min.time(), tzinfo=UTC)
            piece = min(end, midnight)
            gpu_hours = job.gpus * (piece - at).total_seconds() / 3600
            hours[""][at.date()] += gpu_hours
            hours[job.vc][at.date()] += gpu_hours
            at = piece
    return hours


def steady_window(jobs: list[TraceJob], start: datetime) -> tuple[date, date]:
    """The longest run of days each with at least a tenth of the median day's submissions, less a warm-up."""
    submitted = Counter((start + timedelta(seconds=job.submitted)).date() for job in jobs)
    first, last = min(submitted), max(submitted)
    days = [first + timedelta(days=i) for i in range((last - first).days + 1)]
    floor = statistics.median(submitted[d] for d in days) / 10
    best: tuple[int, date, date] = (0, first, first)
    run_start: date | None = None
    for day in [*days, last + timedelta(days=1)]:
        if submitted.get(day, 0) >= floor:
            run_start = run_start or day
        elif run_start is not None:
            length = (day - run_start).days
            if length > best[0]:
                best = (length, run_start, day - timedelta(days=1))
            run_start = None
    return best[1] + timedelta(days=WARM_UP_DAYS), best[2]


def _round(value: float | None, digits: int = 1) -> float | None:
    return None if value is None else round(value, digits)


#: The model (its methods, weights and calibration) was chosen on these two virtual clusters; the other two of
#: the four largest are held out: their figures say how it does on series it was not tuned on.
CHOSEN_ON = ("6214e9", "6c71a0")


def evaluate(values: list[float]) -> dict[str, Any]:
    """The rolling-origin backtest of a daily series (``billing.forecast``), with the seconds it takes."""
    started = time.perf_counter()
    result = forecast_values(values)
    seconds = time.perf_counter() - started
    out: dict[str, Any] = {"days": len(values), "mean_per_day": round(float(np.mean(values)), 1)}
    if isinstance(result, str):
        return {**out, "message": result}
    test = result.backtest
    out.update(
        origins=test.origins,
        stride_days=test.stride,
        seconds=round(seconds, 3),
        daily_wape_12w=_round(test.daily_wape),
        daily_coverage_12w={"80": _round(test.daily_coverage_80), "95": _round(test.daily_coverage_95)},
        weights_today=[{k: round(v, 2) for k, v in row.items()} for row in result.weights],
    )
    for score in test.scores:
        out[f"{score.weeks}w"] = {
            "pairs": score.pairs,
            "calibrated": score.calibrated,
            "wape": _round(score.wape),
            "seasonal_naive_wape": _round(score.baseline_wape),
            "coverage_80": _round(score.coverage_80),
            "coverage_95": _round(score.coverage_95),
        }
    return out


def table(series: dict[str, Any]) -> str:
    """The figures as a Markdown table."""
    rows = [
        "| series | role | horizon | WAPE | seasonal naive | 80% held | 95% held | pairs |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for name, found in series.items():
        role = "chosen on" if name in CHOSEN_ON else ("held out" if name != "all" else "all VCs")
        for weeks in SCORED_WEEKS:
            score = found.get(f"{weeks}w")
            if score:
                rows.append(
                    f"| {name} | {role} | {weeks} w | {score['wape']}% | {score['seasonal_naive_wape']}% "
                    f"| {score['coverage_80']}% | {score['coverage_95']}% | {score['calibrated']}/{score['pairs']} |"
                )
    return "\n".join(rows)


def synthetic(days: int = 730, seed: int = 1) -> list[float]:
    """A working week (a quiet weekend), 1,000 accelerator-hours a day growing by 2 a day, normal noise of 40."""
    rng = np.random.default_rng(seed)
    t = np.arange(days)
    pattern = np.array([1.0, 1.1, 1.15, 1.1, 1.0, 0.6, 0.5])
    return [float(v) for v in (1000 + 2 * t) * pattern[t % 7] + rng.normal(0, 40, days)]


def bench(trace: Path, vcs: int) -> dict[str, Any]:
    started = time.perf_counter()
    jobs = read_philly(trace / "philly.csv")
    start = first_submission(trace / "philly.csv")
    hours = daily_hours(jobs, start)
    first, last = steady_window(jobs, start)
    days = [first + timedelta(days=i) for i in range((last - first).days + 1)]
    read_seconds = time.perf_counter() - started
    largest = [vc for vc, _ in Counter(job.vc for job in jobs).most_common(vcs)]
    series: dict[str, Any] = {}
    for name in ["", *largest]:
        values = [hours[name].get(d, 0.0) for d in days]
        series[name or "all"] = evaluate(values)
    return {
        "trace": str(trace.relative_to(ROOT.parent)) if trace.is_relative_to(ROOT.parent) else str(trace),
        "jobs": len(jobs),
        "window": {
            "first": first.isoformat(),
            "last": last.isoformat(),
            "days": len(days),
            "rule": "longest run of days with >= 1/10 of the median day's submissions, less 7 warm-up days",
        },
        "read_seconds": round(read_seconds, 2),
        "philly": series,
        "synthetic_weekly_pattern_and_trend": evaluate(synthetic()),
    }


def _node_of(flavor_index: int, k: int) -> int:
    """The ``k``-th node (of 10) of the flavor: nodes alternate flavors."""
    return 2 * k + flavor_index


def _insert_usage(
    made: list[Any], flavors: list[Any], nodes: list[Any], org: Any, team: Any, user: Any, cluster: Any
) -> None:
    """Each attempt's 100 records (10 nodes of its flavor, 10 days) through the ORM."""
    from billing.models import UsageRecord
    from clusters.capacity import CapacityType

    batch: list[UsageRecord] = []
    for attempt in made:
        index = 0 if attempt.flavor == "A100" else 1
        for k in range(10):
            for d in range(10):
                day = (attempt.admitted_at + timedelta(days=d)).date()
                start = datetime.combine(day, datetime.min.time(), tzinfo=UTC)
                batch.append(
                    UsageRecord(
                        organization=org,
                        team=team,
                        user=user,
                        job_id=attempt.job_id,
                        attempt=attempt,
                        cluster=cluster,
                        node=nodes[_node_of(index, k)],
                        flavor=flavors[index],
                        capacity_type=CapacityType.ON_PREM,
                        day=day,
                        start=start,
                        end=start + timedelta(hours=20),
                        seconds=72_000,
                        milli=8000,
                        closed=True,
                    )
                )
                if len(batch) >= 20_000:
                    UsageRecord.objects.bulk_create(batch, ignore_conflicts=True)
                    batch = []
    UsageRecord.objects.bulk_create(batch, ignore_conflicts=True)


def _insert_usage_postgresql(org: int, team: int, user: int, cluster: int, nodes: list[tuple[int, int]]) -> None:
    """The same records in one INSERT ... SELECT (bulk-creating millions of rows through the ORM takes minutes)."""
    from django.db import connection

    from billing.models import UsageRecord
    from scheduler.models import Attempt, Job

    flavor_of = {0: "A100", 1: "H100"}
    values = ", ".join(
        f"('{flavor_of[index]}', {nodes[_node_of(index, k)][0]}, {nodes[_node_of(index, k)][1]})"
        for index in (0, 1)
        for k in range(10)
    )
    day = "((a.admitted_at AT TIME ZONE 'UTC')::date + d)"
    sql = f"""
        INSERT INTO {UsageRecord._meta.db_table} (organization_id, team_id, project_id, user_id, job_id, attempt_id,
            cluster_id, node_id, flavor_id, capacity_type, day, start, "end", seconds, milli, closed)
        SELECT %s, %s, NULL, %s, a.job_id, a.id, %s, n.node_id, n.flavor_id, 'on_prem', {day},
            {day}::timestamp AT TIME ZONE 'UTC', ({day}::timestamp + interval '20 hours') AT TIME ZONE 'UTC',
            72000, 8000, true
        FROM {Attempt._meta.db_table} a
        JOIN {Job._meta.db_table} j ON j.id = a.job_id
        JOIN (VALUES {values}) AS n (flavor, node_id, flavor_id) ON n.flavor = a.flavor
        CROSS JOIN generate_series(0, 9) AS d
        WHERE j.team_id = %s
        ON CONFLICT DO NOTHING
    """  # noqa: S608 - numbers and table names of our own
    with connection.cursor() as cursor:
        cursor.execute(sql, [org, team, user, cluster, team])
        # Fresh statistics, as autovacuum keeps them: without, the planner expects a few rows and sorts a
        # million on disk instead of hashing 700 groups.
        for model in (UsageRecord, Attempt, Job):
            cursor.execute(f"ANALYZE {model._meta.db_table}")


def bench_database(records: int, repeat: int) -> dict[str, Any]:
    """Times ``read_history`` and an uncached ``forecast_organization`` over ``records`` usage records."""
    from django.contrib.auth.models import User
    from django.db import connection
    from django.utils import timezone

    from billing.forecast_history import (
        HISTORY_DAYS,
        capacity_hours,
        forecast_organization,
        queued_hours,
        read_history,
        used_hours,
    )
    from billing.models import CapacityRecord, UsageRecord
    from clusters.capacity import CapacityType
    from clusters.models import AcceleratorType, Cluster, Node
    from governance.models import PriorityTier, Queue
    from scheduler.models import Attempt, Job
    from tenancy.models import Organization, Team

    rnd = random.Random(1)
    stamp = f"{time.time():.0f}"
    org = Organization.objects.create(name=f"Bench forecast {stamp}", slug=f"bench-forecast-{stamp}")
    user = User.objects.create_user(f"bench-forecast-{stamp}")
    now = timezone.now()
    today = now.date()
    try:
        flavors = [AcceleratorType.objects.create(organization=org, name=name) for name in ("A100", "H100")]
        cluster = Cluster.objects.create(
            organization=org,
            name="bench",
            slug="bench",
            kind="simulated",
            endpoint=f"sim://bench-forecast-{stamp}",
            region="bench",
        )
        nodes = Node.objects.bulk_create(
            [Node(cluster=cluster, name=f"n{i}", accelerator=flavors[i % 2], accelerators=8) for i in range(20)]
        )
        tier = PriorityTier.objects.create(organization=org, name="normal", value=0, is_default=True)
        team = Team.objects.create(organization=org, name="bench", slug="bench")
        queue = Queue.objects.get(team=team, project=None)
        attempts = max(1, records // 100)
        jobs, starts = [], []
        for _ in range(attempts):
            admitted = now - timedelta(days=rnd.uniform(11, 365))
            starts.append(admitted)
            jobs.append(
                Job(
                    team=team,
                    queue=queue,
                    submitted_by=user,
                    name="bench",
                    accelerators=8,
                    time_limit=864_000,
                    tier=tier,
                    state=Job.State.SUCCEEDED,
                    state_changed_at=admitted,
                    accelerator_types=[flavors[rnd.randrange(2)].name],
                    submitted_at=admitted - timedelta(hours=rnd.expovariate(1 / 6)),
                )
            )
        jobs = Job.objects.bulk_create(jobs, batch_size=5000)
        made = Attempt.objects.bulk_create(
            [
                Attempt(
                    job=j,
                    number=1,
                    cluster=cluster,
                    flavor=j.accelerator_types[0],
                    admitted_at=a,
                    started_at=a,
                    ended_at=a + timedelta(days=10),
                    outcome=Attempt.Outcome.SUCCEEDED,
                )
                for j, a in zip(jobs, starts, strict=True)
            ],
            batch_size=5000,
        )
        if connection.vendor == "postgresql":
            _insert_usage_postgresql(
                org.pk, team.pk, user.pk, cluster.pk, [(n.pk, flavors[i % 2].pk) for i, n in enumerate(nodes)]
            )
        else:
            _insert_usage(made, flavors, nodes, org, team, user, cluster)
        CapacityRecord.objects.bulk_create(
            [
                CapacityRecord(
                    organization=org,
                    cluster=cluster,
                    node=n,
                    flavor=n.accelerator,
                    accelerators=8,
                    capacity_type=CapacityType.ON_PREM,
                    day=today - timedelta(days=i),
                    start=datetime.combine(today - timedelta(days=i), datetime.min.time(), tzinfo=UTC),
                    end=datetime.combine(today - timedelta(days=i - 1), datetime.min.time(), tzinfo=UTC),
                    seconds=86_400,
                    closed=True,
                )
                for n in nodes
                for i in range(1, 366)
            ],
            batch_size=5000,
        )
        read_times, histories = [], []
        for _ in range(repeat):
            started = time.perf_counter()
            histories = read_history(org, now)
            read_times.append(time.perf_counter() - started)
        parts: dict[str, list[float]] = {"used_hours": [], "capacity_hours": [], "queued_hours": []}
        since = datetime.combine(today - timedelta(days=HISTORY_DAYS), datetime.min.time(), tzinfo=UTC)
        for _ in range(repeat):
            for name, read in (
                ("used_hours", lambda: used_hours(org, since.date(), today)),
                ("capacity_hours", lambda: capacity_hours(org, since.date(), today)),
                ("queued_hours", lambda: queued_hours(org, since, now)),
            ):
                started = time.perf_counter()
                read()
                parts[name].append(time.perf_counter() - started)
        forecast_times = []
        for _ in range(repeat):
            started = time.perf_counter()
            forecast_organization(org, "12w", now, use_cache=False)
            forecast_times.append(time.perf_counter() - started)
        return {
            "database": connection.vendor,
            "usage_records": UsageRecord.objects.filter(organization=org).count(),
            "attempts": len(made),
            "flavors": [h.flavor for h in histories],
            "days": max(len(h.days) for h in histories),
            "read_history_seconds": {
                "p50": round(statistics.median(read_times), 3),
                "min": round(min(read_times), 3),
                "max": round(max(read_times), 3),
            },
            "query_seconds_p50": {name: round(statistics.median(times), 3) for name, times in parts.items()},
            "forecast_12w_uncached_seconds": {
                "p50": round(statistics.median(forecast_times), 3),
                "min": round(min(forecast_times), 3),
            },
        }
    finally:
        UsageRecord.objects.filter(organization=org).delete()
        CapacityRecord.objects.filter(organization=org).delete()
        Attempt.objects.filter(job__team__organization=org).delete()
        Job.objects.filter(team__organization=org).delete()
        Queue.objects.filter(team__organization=org).delete()
        Team.objects.filter(organization=org).delete()
        PriorityTier.objects.filter(organization=org).delete()
        Node.objects.filter(cluster__organization=org).delete()
        Cluster.objects.filter(organization=org).delete()
        AcceleratorType.objects.filter(organization=org).delete()
        org.delete()
        user.delete()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--trace", type=Path, default=TRACE, help="the philly-pollux folder")
    parser.add_argument("--vcs", type=int, default=4, help="the largest virtual clusters also forecast alone")
    parser.add_argument("--records", type=int, default=0, help="also time reading this many usage records")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--table", action="store_true", help="print a Markdown table of the backtests instead")
    args = parser.parse_args(argv)
    result = bench(args.trace, args.vcs)
    if args.table:
        print(table(result["philly"]))
        return 0
    if args.records:
        result["database"] = _with_database(lambda: bench_database(args.records, args.repeat))
    print(json.dumps(result, indent=2))
    return 0


def _with_database(run: Any) -> Any:
    """``run()`` with Django set up: on ``DATABASE_URL``, else on a fresh SQLite database (migrated)."""
    scratch = None
    if not os.environ.get("DATABASE_URL"):
        scratch = tempfile.mkdtemp(prefix="qm-bench-forecast-")
        os.environ["DATABASE_URL"] = f"sqlite:///{scratch}/bench.sqlite3"
        os.environ["QM_VAR_DIR"] = scratch
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "portal.settings")
    try:
        import django
        from django.core.management import call_command

        django.setup()
        if scratch:
            call_command("migrate", verbosity=0)
        return run()
    finally:
        if scratch:
            shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    raise SystemExit(main())
