"""The fleet's state as Prometheus gauges, computed at scrape time: how old each cluster's last good sync
is, its failed syncs in a row, and nodes by state and health. Syncs are counted where they happen
(``clusters/actions/sync.py``: ``qm_cluster_syncs_total``). Names and labels: docs/operations.md#metrics."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime

from django.db.models import Count
from prometheus_client.core import GaugeMetricFamily, Metric

from clusters.models import Cluster, Node


def sync_ages(now: datetime) -> list[tuple[int, str, str, str, float, int]]:
    """Each enabled cluster: (organization id, organization slug, cluster slug, backend, seconds since its
    last good sync, or since it was registered if never, failed syncs in a row)."""
    rows = (
        Cluster.objects.exclude(status=Cluster.Status.DISABLED)
        .values_list("organization_id", "organization__slug", "slug", "kind", "last_sync_at", "created_at", "failures")
        .order_by("organization_id", "slug")
    )
    return [
        (org, org_slug, slug, kind, max(0.0, (now - (synced or created)).total_seconds()), failures)
        for org, org_slug, slug, kind, synced, created, failures in rows
    ]


def collect(now: datetime) -> Iterator[Metric]:
    labels = ["organization", "cluster", "backend"]
    age = GaugeMetricFamily(
        "qm_cluster_sync_age_seconds", "Seconds since the cluster's last good inventory sync.", labels=labels
    )
    failing = GaugeMetricFamily(
        "qm_cluster_sync_failures",
        "Failed inventory syncs of the cluster in a row (0: the last one worked).",
        labels=labels,
    )
    for _, org, slug, kind, seconds, failures in sync_ages(now):
        age.add_metric([org, slug, kind], seconds)
        failing.add_metric([org, slug, kind], failures)
    yield age
    yield failing

    nodes = GaugeMetricFamily(
        "qm_nodes",
        "Nodes present on their clusters, by backend, state and health (healthy, unhealthy, not_ready).",
        labels=["backend", "state", "health"],
    )
    rows = (
        Node.objects.filter(present=True)
        .exclude(cluster__status=Cluster.Status.DISABLED)
        .values_list("cluster__kind", "state", "ready", "healthy")
        .annotate(n=Count("pk"))
        .order_by()
    )
    grouped: dict[tuple[str, str, str], int] = {}
    for kind, state, ready, healthy, n in rows:
        key = (kind, state, "not_ready" if not ready else "healthy" if healthy else "unhealthy")
        grouped[key] = grouped.get(key, 0) + n
    for key, n in sorted(grouped.items()):
        nodes.add_metric(list(key), n)
    yield nodes
