"""`manage.py bench_sync --nodes 10000`: time the inventory sync of a large simulated cluster.

Three syncs of one cluster, printed as JSON: the first creates every node, the second finds nothing
changed, the third finds the usage of about half the nodes changed. Runs on the configured database
(PostgreSQL for figures that mean something) in a throwaway organization, removed afterwards.
"""

from __future__ import annotations

import json
import time
from typing import Any

from django.core.management.base import BaseCommand, CommandParser

from clusters.actions import sync
from clusters.models import AcceleratorType, Cluster
from tenancy.models import Organization


class Command(BaseCommand):
    help = "Time the inventory sync of a large simulated cluster (JSON)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--nodes", type=int, default=10_000)

    def handle(self, *args: Any, nodes: int, **options: Any) -> None:
        org, _ = Organization.objects.get_or_create(slug="bench-sync", defaults={"name": "Bench sync"})
        try:
            cluster = Cluster.objects.create(
                organization=org,
                name="bench",
                slug="bench",
                kind="simulated",
                endpoint=f"sim://bench-{time.time()}",
                region="bench",
                levels=["ib_block", "rack"],
                options={"profile": "h100-onprem", "nodes": nodes, "busy": 0.3, "seed": 1},
            )
            figures: dict[str, Any] = {"nodes": nodes}
            for label, seed in (("first_sync", 1), ("unchanged_sync", 1), ("changed_sync", 2)):
                Cluster.objects.filter(pk=cluster.pk).update(options={**cluster.options, "seed": seed})
                started = time.perf_counter()
                result = sync.sync_cluster(cluster.pk)
                figures[f"{label}_seconds"] = round(time.perf_counter() - started, 3)
                figures[f"{label}_rows"] = {"created": result.created, "updated": result.updated}
                if not result.ok:
                    raise RuntimeError(result.error)
            self.stdout.write(json.dumps(figures))
        finally:
            Cluster.objects.filter(organization=org).delete()
            AcceleratorType.objects.filter(organization=org).delete()
            org.delete()
