"""Server-side render time of the live cluster view for a large cluster, from the repository root:

    .venv/bin/python tests/bench/bench_live_view.py --nodes 10000 --renders 9

Creates a simulated cluster (profile h100-onprem: InfiniBand blocks of 32 nodes, racks of 4; 40% busy),
syncs it with ``clusters.actions.sync.sync_cluster``, then calls the live view's two views (the full page and the
partial that htmx polls) as an organization admin and times each render: the one query, the grouping, the
template and the partial's compression, but not the network or middleware. Prints one JSON object with
p50/min/max in milliseconds.

Without ``DATABASE_URL`` it runs on a fresh SQLite database in a temporary folder (migrated first); with
``DATABASE_URL`` (PostgreSQL, for figures that mean something in production) on that database, in a
throwaway organization removed afterwards.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))


def _timed(function: Any, renders: int) -> tuple[list[float], Any]:
    times: list[float] = []
    result = None
    for _ in range(renders):
        started = time.perf_counter()
        result = function()
        times.append((time.perf_counter() - started) * 1000)
    return times, result


def _figures(times: list[float]) -> dict[str, float]:
    return {
        "p50_ms": round(statistics.median(times), 1),
        "min_ms": round(min(times), 1),
        "max_ms": round(max(times), 1),
    }


def bench(nodes: int, renders: int) -> dict[str, Any]:
    from django.contrib.auth.models import User
    from django.db import connection
    from django.test import RequestFactory
    from django.test.utils import CaptureQueriesContext

    from clusters.actions import sync
    from clusters.live import live_view
    from clusters.models import AcceleratorType, Cluster
    from clusters.web import views
    from tenancy.models import Membership, Organization
    from tenancy.scoping import Role

    stamp = f"{time.time():.0f}"
    org = Organization.objects.create(name=f"Bench live view {stamp}", slug=f"bench-live-{stamp}")
    user = User.objects.create_user(f"bench-live-{stamp}")
    try:
        Membership.objects.create(user=user, organization=org, role=Role.ADMIN)
        cluster = Cluster.objects.create(
            organization=org,
            name="bench",
            slug="bench",
            kind="simulated",
            endpoint=f"sim://bench-live-{stamp}",
            region="bench",
            levels=["ib_block", "rack"],
            options={"profile": "h100-onprem", "nodes": nodes, "busy": 0.4, "seed": 1},
        )
        started = time.perf_counter()
        result = sync.sync_cluster(cluster.pk)
        if not result.ok:
            raise RuntimeError(result.error)
        sync_seconds = time.perf_counter() - started

        factory = RequestFactory()

        def get(view: Any, path: str) -> Any:
            request = factory.get(path, headers={"accept-encoding": "gzip"})
            request.user = user
            response = view(request, pk=cluster.pk)
            assert response.status_code == 200, response.status_code
            return response

        tiles_path = f"/clusters/{cluster.pk}/live/tiles/"
        get(views.cluster_live_tiles, tiles_path)  # warm: template compiled, connection open
        with CaptureQueriesContext(connection) as queries:
            get(views.cluster_live_tiles, tiles_path)
        data_times, data = _timed(lambda: live_view(user, cluster, "/clusters/nodes/"), renders)
        tiles_times, tiles = _timed(lambda: get(views.cluster_live_tiles, tiles_path), renders)
        page_times, page = _timed(lambda: get(views.cluster_live, f"/clusters/{cluster.pk}/live/"), renders)
        return {
            "nodes": nodes,
            "renders": renders,
            "database": connection.vendor,
            "domains": sum(len(section.domains) for section in data.sections),
            "sync_seconds": round(sync_seconds, 2),
            "partial": {**_figures(tiles_times), "gzipped_bytes": len(tiles.content), "queries": len(queries)},
            "page": {**_figures(page_times), "bytes": len(page.content)},
            "query_and_grouping": _figures(data_times),
        }
    finally:
        Cluster.objects.filter(organization=org).delete()
        AcceleratorType.objects.filter(organization=org).delete()
        Membership.objects.filter(organization=org).delete()
        org.delete()
        user.delete()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--nodes", type=int, default=10_000)
    parser.add_argument("--renders", type=int, default=9)
    args = parser.parse_args(argv)
    scratch = None
    if not os.environ.get("DATABASE_URL"):
        scratch = tempfile.mkdtemp(prefix="qm-bench-live-")
        os.environ["DATABASE_URL"] = f"sqlite:///{scratch}/bench.sqlite3"
        os.environ["QM_VAR_DIR"] = scratch
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "portal.settings")
    try:
        import django
        from django.core.management import call_command

        django.setup()
        if scratch:
            call_command("migrate", verbosity=0)
        print(json.dumps(bench(args.nodes, args.renders)))
    finally:
        if scratch:
            shutil.rmtree(scratch, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
