"""GPU samples at fleet scale: how fast probe reports are taken in, and how fast a job's series is read.

``run`` makes a throwaway organization with one simulated cluster of ``nodes`` nodes and a probe token,
then:

1. **Ingest**: ``rounds`` rounds of one report per node (every GPU with all its activity readings), each
   posted through the real endpoint (``POST /api/v1/probe/health/`` in process: token, validation, health
   judgement, the samples' upsert), rounds ``interval`` seconds of report time apart; it prints reports/s
   and the samples written. A fleet reporting every ``interval`` seconds needs ``nodes / interval``
   reports/s.
2. **Read**: ``history_hours`` of minute samples for a gang of ``gang`` nodes (bulk-written), then the
   job's series as the API reads it (the holds on its nodes, the samples grouped per node, or per node and
   GPU, and bucket; the shares), the median of three reads each.

Everything it wrote is removed at the end.
"""

from __future__ import annotations

import datetime as dt
import statistics
import time
from typing import Any

from django.contrib.auth.models import User
from django.core.cache import cache
from django.utils import timezone
from rest_framework.test import APIClient

from clusters import actions
from clusters.actions import sync
from clusters.models import AcceleratorType, Cluster, GpuSample, Node
from scheduler import utilization
from tenancy.models import Membership, Organization
from tenancy.scoping import Role

SLUG = "bench-utilization"


def _report(node: str, at: dt.datetime, gpus: int, round_: int) -> dict[str, Any]:
    return {
        "node": node,
        "observed_at": at.isoformat(),
        "gpus": [
            {
                "index": g,
                "temperature_c": 60,
                "utilization_gpu": (37 * round_ + 11 * g) % 101,
                "utilization_memory": 20,
                "memory_used_bytes": 40 * 2**30,
                "memory_total_bytes": 80 * 2**30,
                "power_w": 500.5,
                "power_limit_w": 700.0,
                "sm_clock_mhz": 1980,
                "memory_clock_mhz": 2619,
                "throttle_reasons": 4 if g == 0 else 0,
            }
            for g in range(gpus)
        ],
        "error": "",
    }


def _history(nodes: list[Node], gpus: int, until: dt.datetime, hours: int) -> int:
    start = until - dt.timedelta(hours=hours)
    rows = []
    written = 0
    for minute in range(hours * 60):
        at = start + dt.timedelta(minutes=minute)
        for node in nodes:
            for g in range(gpus):
                rows.append(GpuSample(node=node, gpu=g, at=at, utilization=(minute + g) % 100, power_w=400.0))
        if len(rows) >= 50_000:
            GpuSample.objects.bulk_create(rows, batch_size=10_000, ignore_conflicts=True)
            written += len(rows)
            rows = []
    GpuSample.objects.bulk_create(rows, batch_size=10_000, ignore_conflicts=True)
    return written + len(rows)


def run(nodes: int, gpus: int, rounds: int, interval: int, gang: int, history_hours: int) -> dict[str, Any]:
    Organization.objects.filter(slug=SLUG).delete()
    org = Organization.objects.create(slug=SLUG, name="Bench utilization")
    admin = User.objects.create_user(f"{SLUG}-admin")
    Membership.objects.create(user=admin, organization=org, role=Role.ADMIN)
    try:
        cluster = Cluster.objects.create(
            organization=org,
            name=SLUG,
            slug=SLUG,
            kind="simulated",
            endpoint=f"sim://{SLUG}-{time.time()}",
            region="bench",
            options={"profile": "h100-onprem", "nodes": nodes, "busy": 0.0, "seed": 1},
        )
        result = sync.sync_cluster(cluster.pk)
        if not result.ok:
            raise RuntimeError(result.error)
        fleet = list(Node.objects.filter(cluster=cluster).order_by("name"))
        Node.objects.filter(cluster=cluster).update(accelerators=gpus)
        _, raw = actions.issue_probe_token(admin, cluster, "bench")
        client = APIClient()
        client.credentials(HTTP_AUTHORIZATION=f"Bearer {raw}")
        now = timezone.now()
        per_round = []
        for r in range(rounds):
            cache.delete_many([f"qm:probe:{n.pk}" for n in fleet])
            at = now - dt.timedelta(seconds=interval * (rounds - r))
            bodies = [_report(n.name, at, gpus, r) for n in fleet]
            started = time.perf_counter()
            for body in bodies:
                answer = client.post("/api/v1/probe/health/", body, format="json")
                if answer.status_code != 202:
                    raise RuntimeError(f"{answer.status_code}: {answer.content[:300]!r}")
            per_round.append(time.perf_counter() - started)
        samples = GpuSample.objects.filter(node__cluster=cluster).count()
        figures: dict[str, Any] = {
            "nodes": nodes,
            "gpus_per_node": gpus,
            "reports": nodes * rounds,
            "ingest_seconds": round(sum(per_round), 3),
            "reports_per_second": round(nodes * rounds / sum(per_round), 1),
            "needed_reports_per_second": round(nodes / interval, 1),
            "samples_after_ingest": samples,
        }
        GpuSample.objects.filter(node__cluster=cluster).delete()

        members = fleet[:gang]
        figures["history_rows"] = _history(members, gpus, now, history_hours)
        since = now - dt.timedelta(hours=history_hours)
        holds = [utilization.Hold(1, 1, n.pk, gpus * 1000, since, now) for n in members]
        step = utilization.step_for(since, now)
        figures.update(gang_nodes=gang, history_hours=history_hours, series_step_seconds=step)
        for per_gpu in (False, True):
            timings = []
            for _ in range(3):
                started = time.perf_counter()
                neighbours = utilization.holds_on({n.pk for n in members}, since, now, now)
                buckets = utilization.node_buckets({n.pk for n in members}, since, now, step, per_gpu=per_gpu)
                shares = utilization.shares(holds, neighbours + holds, buckets, step)
                timings.append(time.perf_counter() - started)
            figures["series_points_per_node"] = len(shares) // max(gang, 1)
            label = "per_gpu" if per_gpu else "per_node"
            figures[f"job_series_{label}_seconds_median"] = round(statistics.median(timings), 3)
        return figures
    finally:
        GpuSample.objects.filter(node__cluster__organization=org).delete()
        Cluster.objects.filter(organization=org).delete()
        AcceleratorType.objects.filter(organization=org).delete()
        Membership.objects.filter(organization=org).delete()
        User.objects.filter(username=f"{SLUG}-admin").delete()
        org.delete()
