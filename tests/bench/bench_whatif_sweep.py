"""A buy-or-burst sweep on Celery workers, from the repository root:

    .venv/bin/python tests/bench/bench_whatif_sweep.py [--days 30] [--workers 1 2] [--seeds 1]

Seeds a fresh demo (``seed_demo`` with ``--days`` + 2 days of history) in a temporary ``QM_VAR_DIR`` on the embedded
defaults (SQLite, the embedded broker), then for each worker count starts one Celery worker process with that
concurrency (``celery -A portal worker --concurrency N``, as ``manage.py demo`` does), asks for a study of 20
scenarios (``SCENARIOS``: buying 1 to 16 H100 nodes, some after a lead time, retiring some, buying and retiring
A100s, bursting into the demo's cloud pool up to 1 to 4 nodes; quotas grown with what is bought or burst) through
``studies.submit_study`` (one task per scenario and seed, sent at the commit), and times it until every replay is
done or failed. Prints one JSON object: the replays, the seconds per worker count, and the study's table for the
last run.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
H100, A100 = "H100-SXM-80GB", "A100-SXM-40GB"
#: Bought and burst capacity comes with the type's quotas grown in proportion (``grow_quotas``): on the demo every
#: queue is held by its quota, so capacity alone shortens no wait.
GROWN = {"grow_quotas": True}
SCENARIOS: list[dict[str, Any]] = [
    *({"cluster": "onprem-h100", "flavor": H100, "nodes": n, **GROWN} for n in (1, 2, 4, 8, 16)),
    *(
        {"cluster": "onprem-h100", "flavor": H100, "nodes": n, "lead_days": d, **GROWN}
        for n in (4, 8)
        for d in (10, 20)
    ),
    *({"cluster": "onprem-h100", "flavor": H100, "nodes": -n} for n in (2, 4, 8)),
    *({"cluster": "slurm-a100", "flavor": A100, "nodes": n, **GROWN} for n in (2, 4, 8)),
    {"cluster": "slurm-a100", "flavor": A100, "nodes": -2},
    *({"kind": "burst", "pool": "cloud-burst", "nodes": n, **GROWN} for n in (1, 2, 3, 4)),
]


def _env(var: Path, days: int) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in {"DATABASE_URL", "REDIS_URL", "CELERY_BROKER_URL"}}
    env.update(QM_VAR_DIR=str(var), DJANGO_SETTINGS_MODULE="portal.settings", QM_DEMO_HISTORY_DAYS=str(days + 2))
    return env


def _worker(env: dict[str, str], concurrency: int, log: Path) -> subprocess.Popen[bytes]:
    command = [sys.executable, "-m", "celery", "-A", "portal", "worker", "--loglevel", "WARNING", "--concurrency",
               str(concurrency), "--without-gossip", "--without-mingle", "--without-heartbeat"]  # fmt: skip
    return subprocess.Popen(
        command, cwd=ROOT, env=env, stdout=log.open("wb"), stderr=subprocess.STDOUT, start_new_session=True
    )


def sweep(days: int, workers: list[int], seeds: int) -> dict[str, Any]:
    var = Path(tempfile.mkdtemp(prefix="qm-sweep-"))
    env = _env(var, days)
    try:
        started = time.perf_counter()
        for command in (["migrate", "--no-input", "-v", "0"], ["seed_demo"]):
            subprocess.run([sys.executable, "manage.py", *command], cwd=ROOT, env=env, check=True, capture_output=True)
        seeded = time.perf_counter() - started
        os.environ.update(env)
        sys.path.insert(0, str(ROOT))
        import django

        django.setup()
        from django.contrib.auth import get_user_model

        from billing.actions import studies
        from tenancy.models import Organization

        organization = Organization.objects.get(slug="demo")
        paula = get_user_model().objects.get(username="paula")
        runs: list[dict[str, Any]] = []
        table: dict[str, Any] = {}
        for count in workers:
            worker = _worker(env, count, var / f"worker-{count}.log")
            try:
                time.sleep(5)  # the worker's start, before the clock
                asked = time.perf_counter()
                study = studies.submit_study(
                    paula, organization, name=f"sweep, {count} worker(s)", days=days, seeds=seeds, scenarios=SCENARIOS
                )
                while not (table := studies.study_table(study))["complete"]:
                    time.sleep(1)
                    if time.perf_counter() - asked > 3600:
                        raise RuntimeError(f"the sweep on {count} worker(s) did not finish in an hour")
                runs.append(
                    {
                        "workers": count,
                        "replays": table["total"],
                        "failed": len(table["failed"]),
                        "seconds": round(time.perf_counter() - asked, 1),
                    }
                )
            finally:
                os.killpg(worker.pid, signal.SIGTERM)
                worker.wait(60)
        return {
            "scenarios": len(SCENARIOS),
            "seeds": seeds,
            "days": days,
            "seed_demo_seconds": round(seeded, 1),
            "cpus": os.cpu_count(),
            "runs": runs,
            "table": [
                {
                    k: row[k]
                    for k in (
                        "label",
                        "cost",
                        "extra_cost",
                        "mean_wait_s",
                        "p95_wait_s",
                        "utilisation",
                        "wait_hours_saved",
                        "cost_per_wait_hour_saved",
                    )
                }
                for row in table.get("rows", [])
            ],
        }
    finally:
        shutil.rmtree(var, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--days", type=int, default=30, help="days of the demo's history replayed")
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 2], help="worker concurrencies to time")
    parser.add_argument("--seeds", type=int, default=1)
    args = parser.parse_args(argv)
    print(json.dumps(sweep(args.days, args.workers, args.seeds), indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
