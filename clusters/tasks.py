"""Cluster loops run by Celery. Tasks take ids and are safe to run twice (``sync.py`` claims the cluster)."""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

from celery import shared_task

from clusters import sync


@shared_task
def sync_cluster(cluster_id: int) -> dict[str, Any]:
    """Read one cluster's inventory into the database."""
    return asdict(sync.sync_cluster(cluster_id))


@shared_task
def sync_due_clusters() -> int:
    """On the beat: queue a sync for every cluster that is due, each in its own task, so that a slow or
    failing cluster never holds up the others."""
    due = sync.due_clusters()
    for cluster_id in due:
        sync_cluster.delay(cluster_id)
    return len(due)
