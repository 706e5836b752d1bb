"""What a capacity what-if costs: the replay of a month of job history through the simulator, twice. From the
repository root:

    .venv/bin/python tests/bench/bench_whatif.py --jobs 20000 --nodes 64 [--add 8] [--days 30] [--load 0.8]
    DATABASE_URL=postgres://postgres@127.0.0.1:5432/qm_bench .venv/bin/python tests/bench/bench_whatif.py

Creates a throwaway organization with one cluster of ``--nodes`` nodes of 8 accelerators (racks of 8 nodes) and
``--jobs`` jobs submitted over the last ``--days`` days by two teams, bulk-inserted with their attempts: 1 to
8 accelerators a worker, some gangs of 2 and 4 workers, log-normal run times scaled so that the demand is
``--load`` of the fleet's capacity; 2% were cancelled before they ran and some still wait. Then times the pieces
(reading the history, the replay on today's fleet, the replay with ``--add`` nodes more: wall-clock seconds, and
each replay's CPU seconds, steadier on a busy machine) and the whole run the Celery task makes (``whatif.run``:
claim, both replays with progress writes, the result stored). Prints one JSON object. The organization is
removed afterwards. Without ``DATABASE_URL`` it runs on a fresh SQLite database in a temporary folder.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import shutil
import sys
import tempfile
import time
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

FLAVOR = "H100-SXM-80GB"
#: (workers, accelerators per worker) and how often each shape comes.
SHAPES = (((1, 1), 40), ((1, 2), 20), ((1, 4), 20), ((1, 8), 15), ((2, 8), 4), ((4, 8), 1))


def bench(jobs: int, nodes: int, add: int, days: int, load: float, seed: int, end_to_end: bool) -> dict[str, Any]:
    from django.contrib.auth.models import User
    from django.db import connection
    from django.utils import timezone

    from billing import whatif_replay
    from billing.actions import whatif
    from billing.models import WhatIf
    from clusters.models import AcceleratorType, Cluster, Node
    from governance.models import PriorityTier, Queue
    from scheduler.models import Attempt, Job
    from scheduler.simulation.jobs import declared_limit
    from tenancy.models import Organization, Team

    rnd = random.Random(seed)
    stamp = f"{time.time():.0f}"
    org = Organization.objects.create(name=f"Bench what-ifs {stamp}", slug=f"bench-whatif-{stamp}")
    user = User.objects.create_user(f"bench-whatif-{stamp}")
    now = timezone.now()
    start = now - timedelta(days=days)
    try:
        cluster = Cluster.objects.create(
            organization=org,
            name="bench",
            slug="bench",
            kind="simulated",
            endpoint=f"sim://bench-whatif-{stamp}",
            region="bench",
            levels=["rack"],
            status=Cluster.Status.HEALTHY,
        )
        kind = AcceleratorType.objects.create(organization=org, name=FLAVOR)
        Node.objects.bulk_create(
            Node(
                cluster=cluster,
                name=f"node-{i:04d}",
                accelerator=kind,
                accelerators=8,
                accelerators_allocatable=8,
                cpu=192_000,
                cpu_allocatable=192_000,
                memory=2048 * 1024,
                memory_allocatable=2048 * 1024,
                topology={"rack": f"rack-{i // 8:03d}"},
            )
            for i in range(nodes)
        )
        tiers = [
            PriorityTier.objects.create(organization=org, name="normal", value=50, is_default=True),
            PriorityTier.objects.create(organization=org, name="high", value=100),
        ]
        teams = [Team.objects.create(organization=org, name=f"team {i}", slug=f"team-{i}") for i in range(2)]
        queues = {t.pk: Queue.objects.get(team=t, project=None) for t in teams}
        shapes = [shape for shape, _ in SHAPES]
        weights = [weight for _, weight in SHAPES]
        mean_gpus = sum(w * a * n for (w, a), n in SHAPES) / sum(weights)
        # Log-normal run times (sigma 1.2) whose mean makes the demand ``load`` of the capacity.
        mean_hours = load * nodes * 8 * days * 24 / (jobs * mean_gpus)
        sigma = 1.2
        mu = math.log(mean_hours * 3600) - sigma**2 / 2
        rows, spans = [], []
        span: tuple[datetime, datetime | None] | None
        for _ in range(jobs):
            submitted = start + timedelta(seconds=rnd.uniform(0, days * 86400))
            (workers, per) = rnd.choices(shapes, weights)[0]
            seconds = min(7 * 86400.0, max(60.0, rnd.lognormvariate(mu, sigma)))
            admitted = submitted + timedelta(seconds=rnd.expovariate(1 / 600))
            ended = admitted + timedelta(seconds=seconds)
            if rnd.random() < 0.02 or admitted >= now:
                state, span = (Job.State.CANCELLED if admitted < now else Job.State.PENDING), None
            elif ended >= now:
                state, span = Job.State.RUNNING, (admitted, None)
            else:
                state, span = Job.State.SUCCEEDED, (admitted, ended)
            team = rnd.choice(teams)
            rows.append(
                Job(
                    team=team,
                    queue=queues[team.pk],
                    submitted_by=user,
                    name="bench",
                    workers=workers,
                    accelerators=per,
                    cpu=8000 * per,
                    memory=65536 * per,
                    time_limit=declared_limit(seconds, "rounded"),
                    tier=tiers[rnd.random() < 0.1],
                    state=state,
                    state_changed_at=now,
                    submitted_at=submitted,
                )
            )
            spans.append(span)
        created = Job.objects.bulk_create(rows, batch_size=5000)
        Attempt.objects.bulk_create(
            [
                Attempt(
                    job=j,
                    number=1,
                    cluster=cluster,
                    flavor=FLAVOR,
                    admitted_at=span[0],
                    started_at=span[0],
                    ended_at=span[1],
                    outcome=Attempt.Outcome.ACTIVE if span[1] is None else Attempt.Outcome.SUCCEEDED,
                )
                for j, span in zip(created, spans, strict=True)
                if span is not None
            ],
            batch_size=5000,
        )

        timings: dict[str, float] = {}
        started = time.perf_counter()
        today = whatif_replay.today_fleet(org)
        changed, _ = whatif_replay.changed_fleet(today, "bench", FLAVOR, add)
        rules = whatif_replay.governance(org, today.every_flavor)
        workload = whatif_replay.history(org, start, now, rules.queues)
        timings["history_s"] = round(time.perf_counter() - started, 2)
        figures = {}
        cpu: dict[str, float] = {}
        for name, fleet in (("today", today), ("changed", changed)):
            started, used = time.perf_counter(), time.process_time()
            outcome, runs = whatif_replay.replay(fleet, workload, rules)
            timings[f"replay_{name}_s"] = round(time.perf_counter() - started, 2)
            cpu[f"replay_{name}_cpu_s"] = round(time.process_time() - used, 2)
            measured = whatif_replay.measures(outcome, runs, fleet, FLAVOR, days)
            figures[name] = {k: v for k, v in measured.items() if not k.endswith("_jobs") and k != "by_day"}
        result: dict[str, Any] = {
            "database": connection.vendor,
            "jobs": jobs,
            "replayed": len(workload.jobs),
            "nodes": nodes,
            "accelerators": nodes * 8,
            "added_nodes": add,
            "days": days,
            "load": load,
            **timings,
            "pieces_s": round(sum(timings.values()), 2),
            **cpu,
            "today": figures["today"],
            "changed": figures["changed"],
        }
        if end_to_end:
            # The row as ``submit_what_if`` stores it, without queueing a task a running worker might take.
            what_if = WhatIf.objects.create(
                organization=org,
                requested_by=user,
                cluster=cluster,
                flavor=kind,
                nodes=add,
                days=days,
                created_at=timezone.now(),
            )
            started = time.perf_counter()
            outcome_word = whatif.run(what_if.pk)
            result["run_s"] = round(time.perf_counter() - started, 2)
            result["run"] = outcome_word
            result["run_progress"] = WhatIf.objects.get(pk=what_if.pk).progress
        return result
    finally:
        WhatIf.objects.filter(organization=org).delete()
        Attempt.objects.filter(job__team__organization=org).delete()
        Job.objects.filter(team__organization=org).delete()
        Queue.objects.filter(team__organization=org).delete()
        Team.objects.filter(organization=org).delete()
        PriorityTier.objects.filter(organization=org).delete()
        Node.objects.filter(cluster__organization=org).delete()
        AcceleratorType.objects.filter(organization=org).delete()
        Cluster.objects.filter(organization=org).delete()
        org.delete()
        user.delete()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--jobs", type=int, default=20_000)
    parser.add_argument("--nodes", type=int, default=64)
    parser.add_argument("--add", type=int, default=8, help="Nodes the what-if adds (negative: removes).")
    parser.add_argument("--days", type=int, default=30)
    parser.add_argument("--load", type=float, default=0.8, help="Demand as a share of the fleet's capacity.")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--no-end-to-end", action="store_true", help="Time the pieces only, not whatif.run.")
    args = parser.parse_args(argv)
    scratch = None
    if not os.environ.get("DATABASE_URL"):
        scratch = tempfile.mkdtemp(prefix="qm-bench-whatif-")
        os.environ["DATABASE_URL"] = f"sqlite:///{scratch}/bench.sqlite3"
        os.environ["QM_VAR_DIR"] = scratch
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "portal.settings")
    try:
        import django
        from django.core.management import call_command

        django.setup()
        if scratch:
            call_command("migrate", verbosity=0)
        figures = bench(args.jobs, args.nodes, args.add, args.days, args.load, args.seed, not args.no_end_to_end)
        print(json.dumps(figures))
    finally:
        if scratch:
            shutil.rmtree(scratch, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
