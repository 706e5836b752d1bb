"""What budgets cost the placement loop and the alert check, from the repository root:

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/qm_bench .venv/bin/python tests/bench/bench_budgets.py \\
        --attempts 100000 --teams 20 --projects 5

Creates a throwaway organization with ``--teams`` teams of ``--projects`` projects each, a hard budget on every
team and project, and ``--attempts`` attempts this month (a tenth still running, the rest ended), bulk-inserted.
Then times, ``--repeat`` times each: ``placement_budgets.snapshot_budgets`` (what every placement cycle adds to its
snapshot: one read of the month's attempts of budgeted teams) and ``budgets.raise_alerts`` (the beat's check,
every five minutes). Prints one JSON object with p50/min/max in milliseconds. The organization is removed
afterwards. Without ``DATABASE_URL`` it runs on a fresh SQLite database in a temporary folder.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import statistics
import sys
import tempfile
import time
from datetime import timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))


def _figures(times: list[float]) -> dict[str, float]:
    return {
        "p50_ms": round(statistics.median(times), 1),
        "min_ms": round(min(times), 1),
        "max_ms": round(max(times), 1),
    }


def _timed(function: Any, repeat: int) -> tuple[list[float], Any]:
    times, result = [], None
    for _ in range(repeat):
        started = time.perf_counter()
        result = function()
        times.append((time.perf_counter() - started) * 1000)
    return times, result


def bench(attempts: int, teams: int, projects: int, repeat: int) -> dict[str, Any]:
    from django.contrib.auth.models import User
    from django.db import connection
    from django.utils import timezone

    from clusters.models import Cluster
    from governance.actions import budgets
    from governance.models import Budget, BudgetAlert, PriorityTier, Queue
    from scheduler.models import Attempt, Job
    from scheduler.placement import budgets as placement_budgets
    from tenancy.models import Organization, Project, Team

    rnd = random.Random(1)
    stamp = f"{time.time():.0f}"
    org = Organization.objects.create(name=f"Bench budgets {stamp}", slug=f"bench-budgets-{stamp}")
    user = User.objects.create_user(f"bench-budgets-{stamp}")
    now = timezone.now()
    start = budgets.month_of(now)[0]
    try:
        cluster = Cluster.objects.create(
            organization=org,
            name="bench",
            slug="bench",
            kind="simulated",
            endpoint=f"sim://bench-budgets-{stamp}",
            region="bench",
        )
        tier = PriorityTier.objects.create(organization=org, name="normal", value=0, is_default=True)
        team_rows = [Team.objects.create(organization=org, name=f"team {i}", slug=f"team-{i}") for i in range(teams)]
        project_rows = {
            t.pk: [Project.objects.create(team=t, name=f"p{k}", slug=f"p{k}") for k in range(projects)]
            for t in team_rows
        }
        queues = {t.pk: Queue.objects.get(team=t, project=None) for t in team_rows}
        for t in team_rows:
            Budget.objects.create(team=t, accelerator_hours=10**6, amount=10**7, hard=True, updated_at=now)
            for p in project_rows[t.pk]:
                Budget.objects.create(
                    team=t, project=p, accelerator_hours=10**3, amount=10**4, hard=True, updated_at=now
                )
        elapsed = (now - start).total_seconds()
        jobs, spans = [], []
        for _ in range(attempts):
            t = rnd.choice(team_rows)
            admitted = start + timedelta(seconds=rnd.uniform(0, elapsed))
            running = rnd.random() < 0.1
            ended = None if running else min(now, admitted + timedelta(hours=rnd.uniform(0.1, 12)))
            jobs.append(
                Job(
                    team=t,
                    project=rnd.choice(project_rows[t.pk]),
                    queue=queues[t.pk],
                    submitted_by=user,
                    name="bench",
                    accelerators=rnd.choice((1, 2, 4, 8)),
                    time_limit=86_400,
                    tier=tier,
                    state=Job.State.RUNNING if running else Job.State.SUCCEEDED,
                    state_changed_at=now,
                    submitted_at=admitted,
                )
            )
            spans.append((admitted, ended))
        jobs = Job.objects.bulk_create(jobs, batch_size=5000)
        Attempt.objects.bulk_create(
            [
                Attempt(
                    job=j,
                    number=1,
                    cluster=cluster,
                    flavor="H100",
                    cost_per_hour=Decimal("4.0") * j.accelerators,
                    admitted_at=admitted,
                    started_at=admitted,
                    ended_at=ended,
                    outcome=Attempt.Outcome.ACTIVE if ended is None else Attempt.Outcome.SUCCEEDED,
                )
                for j, (admitted, ended) in zip(jobs, spans, strict=True)
            ],
            batch_size=5000,
        )
        snapshot_times, left = _timed(lambda: placement_budgets.snapshot_budgets(org.pk, now), repeat)
        alert_times, _ = _timed(lambda: budgets.raise_alerts(now), repeat)
        return {
            "attempts": attempts,
            "budgets": len(left),
            "database": connection.vendor,
            "snapshot_budgets": _figures(snapshot_times),
            "raise_alerts": _figures(alert_times),
            "alerts_raised": BudgetAlert.objects.filter(budget__team__organization=org).count(),
        }
    finally:
        BudgetAlert.objects.filter(budget__team__organization=org).delete()
        Budget.objects.filter(team__organization=org).delete()
        Attempt.objects.filter(job__team__organization=org).delete()
        Job.objects.filter(team__organization=org).delete()
        Queue.objects.filter(team__organization=org).delete()
        Project.objects.filter(team__organization=org).delete()
        Team.objects.filter(organization=org).delete()
        PriorityTier.objects.filter(organization=org).delete()
        Cluster.objects.filter(organization=org).delete()
        org.delete()
        user.delete()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--attempts", type=int, default=100_000)
    parser.add_argument("--teams", type=int, default=20)
    parser.add_argument("--projects", type=int, default=5)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args(argv)
    scratch = None
    if not os.environ.get("DATABASE_URL"):
        scratch = tempfile.mkdtemp(prefix="qm-bench-budgets-")
        os.environ["DATABASE_URL"] = f"sqlite:///{scratch}/bench.sqlite3"
        os.environ["QM_VAR_DIR"] = scratch
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "portal.settings")
    try:
        import django
        from django.core.management import call_command

        django.setup()
        if scratch:
            call_command("migrate", verbosity=0)
        print(json.dumps(bench(args.attempts, args.teams, args.projects, args.repeat)))
    finally:
        if scratch:
            shutil.rmtree(scratch, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
