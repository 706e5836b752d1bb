"""What a Prometheus scrape of ``/metrics`` costs on a big installation: the admission benchmark's organization
(``benchmarks/admission.py``: teams in cohorts, simulated clusters, thousands of jobs submitted and placed)
plus a history of finished jobs, then the database's state collected several times, each collector timed and
its queries counted (``observability/exposition.py``)."""

from __future__ import annotations

import statistics
import time
from typing import Any

from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone
from prometheus_client import CollectorRegistry, generate_latest

from benchmarks import admission
from observability import exposition
from scheduler.models import Job
from scheduler.placement import loop
from tenancy.models import Organization


def _history(organization: Any, finished: int) -> None:
    """``finished`` succeeded jobs, copies of the bench's first one (the scrape counts them by state)."""
    template = Job.objects.filter(team__organization=organization).order_by("pk").first()
    assert template is not None
    fields = {
        f.attname: getattr(template, f.attname)
        for f in Job._meta.concrete_fields
        if not f.primary_key and f.attname not in ("idempotency_key",)
    }
    now = timezone.now()
    batch = 5000
    for start in range(0, finished, batch):
        Job.objects.bulk_create(
            [
                Job(**{**fields, "state": Job.State.SUCCEEDED, "finished_at": now, "name": f"old-{start + i}"})
                for i in range(min(batch, finished - start))
            ]
        )


def run(jobs: int, finished: int, scrapes: int, seed: int = 1, *, reuse: bool = False) -> dict[str, Any]:
    """Build the installation (``reuse``: keep the one an earlier run built), then scrape it ``scrapes`` times."""
    if not (reuse and Organization.objects.filter(slug="bench").exists()):
        organization, plan, user = admission.setup(30, 5, jobs, seed)
        admission.submit_all(plan, user)
        for _ in range(20):
            if loop.run_cycle(organization, timezone.now(), tell_clusters=False).admitted == 0:
                break
        _history(organization, finished)
    registry = CollectorRegistry(auto_describe=False)
    registry.register(exposition.DatabaseState())
    totals: list[float] = []
    queries = 0
    size = 0
    for _ in range(scrapes):
        with CaptureQueriesContext(connection) as captured:
            started = time.perf_counter()
            text = generate_latest(registry)
            totals.append(time.perf_counter() - started)
        queries, size = len(captured.captured_queries), len(text)
    per_collector = {
        line.split('"')[1]: float(line.rsplit(" ", 1)[1])
        for line in text.decode().splitlines()
        if line.startswith("qm_metrics_collector_seconds{")
    }
    return {
        "jobs": Job.objects.count(),
        "waiting": Job.objects.filter(state__in=["pending", "requeued"]).count(),
        "scrapes": scrapes,
        "scrape_seconds_median": round(statistics.median(totals), 4),
        "scrape_seconds_max": round(max(totals), 4),
        "queries_per_scrape": queries,
        "exposition_bytes": size,
        "last_scrape_seconds_by_collector": {k: round(v, 4) for k, v in per_collector.items()},
    }
