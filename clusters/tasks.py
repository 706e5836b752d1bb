"""Cluster loops run by Celery. Tasks take ids and are safe to run twice (``sync.py`` claims the cluster)."""

from __future__ import annotations

from dataclasses import asdict
from datetime import timedelta
from typing import Any

from celery import shared_task
from django.conf import settings
from django.utils import timezone

from clusters import actions, maintenance
from clusters.actions import health, sync
from clusters.backends.base import AuthenticationFailed, BackendError, NotFound
from clusters.models import OPEN_DRAINS, Cluster, Drain, Node
from clusters.secrets import CredentialsError


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


@shared_task(bind=True, max_retries=6)
def apply_drain(self: Any, drain_id: int) -> str:
    """Tell the cluster to take no new work on the node of a committed cordon or drain; retried with backoff
    while the cluster refuses or cannot be reached, then marked failed with the reason.

    The cluster is only ever asked to *cordon*: Quartermaster stops the running work of a drained node
    itself, gracefully (``scheduler.placement.recover``: signalled, its grace, then requeued), and marks the
    drain done when none is left. A cluster's own drain would kill it at once."""
    drain = Drain.objects.select_related("node__cluster").get(pk=drain_id)
    if drain.state not in (Drain.State.CORDONED, Drain.State.DRAINING):
        return str(drain.state)  # resumed in the meantime, or done
    try:
        sync.backend_for(drain.node.cluster).cordon(drain.node.name, drain.reason)
    except (BackendError, CredentialsError) as error:
        message = str(error) or type(error).__name__
        # A node the cluster does not know, or credentials it refuses, will not mend by waiting.
        permanent = isinstance(error, NotFound | AuthenticationFailed | CredentialsError)
        if permanent or self.request.retries >= self.max_retries:
            actions.note_drain_try(drain, message, failed=True)
            return str(Drain.State.FAILED)
        actions.note_drain_try(drain, message)
        raise self.retry(countdown=60 * 2**self.request.retries) from error
    actions.note_drain_try(drain, "")
    return str(drain.state)


@shared_task(bind=True, max_retries=6)
def apply_resume(self: Any, node_id: int) -> str:
    """Tell the cluster a node is back in service (idempotent: resuming twice is harmless)."""
    node = Node.objects.select_related("cluster").get(pk=node_id)
    if Drain.objects.filter(node=node, state__in=OPEN_DRAINS).exists():
        return str(node.state)  # cordoned or drained again since
    # Not held: resume it on the cluster, even if a sync that read the cluster first marked it cordoned again
    # (the next sync then sees it schedulable; clusters/actions/sync.py ``_state``).
    try:
        sync.backend_for(node.cluster).resume(node.name)
    except (BackendError, CredentialsError) as error:
        raise self.retry(countdown=60 * 2**self.request.retries) from error
    return str(node.state)


@shared_task
def check_cluster_health(cluster_id: int) -> dict[str, Any]:
    """One round of health checks and the auto-drain policy on one cluster."""
    return asdict(health.check_cluster(cluster_id))


@shared_task
def check_all_health() -> int:
    """On the beat: a health round for every cluster that is not disabled, each in its own task."""
    ids = list(Cluster.objects.exclude(status=Cluster.Status.DISABLED).values_list("pk", flat=True))
    for cluster_id in ids:
        check_cluster_health.delay(cluster_id)
    return len(ids)


@shared_task
def apply_maintenance_windows() -> dict[str, int]:
    """On the beat: drain the nodes of windows about to start, resume those of windows that ended."""
    return asdict(maintenance.apply_windows())


@shared_task
def prune_gpu_samples() -> int:
    """On the beat: delete GPU samples older than ``GPU_SAMPLE_DAYS``, in batches; how many went. Billing
    reads utilization from the samples, so the default keeps the last full month's statement whole."""
    return actions.prune_gpu_samples(timezone.now() - timedelta(days=settings.GPU_SAMPLE_DAYS))
