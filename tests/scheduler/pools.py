"""Elastic pools for the tests of ``scheduler.placement.elastic`` on each backend: a pool ``burst`` of 8-H100 nodes
on a cluster, and its price."""

from __future__ import annotations

from datetime import timedelta
from decimal import Decimal

from django.utils import timezone

from billing.models import Price
from clusters.models import AcceleratorType, Cluster, ElasticPool

H100 = "H100-SXM-80GB"


def burst_pool(cluster: Cluster, **fields: object) -> ElasticPool:
    """A pool ``burst`` of up to three 8-H100 nodes on ``cluster``, there at once, gone after ten idle minutes
    (``fields`` change any of it)."""
    values: dict[str, object] = {
        "cluster": cluster,
        "name": "burst",
        "accelerator": AcceleratorType.objects.get(organization=cluster.organization, name=H100),
        "node_accelerators": 8,
        "node_cpu": 110_000,
        "node_memory": 2_000_000,
        "max_nodes": 3,
        "lead_time": 0,
        "idle_release": 600,
        **fields,
    }
    return ElasticPool.objects.create(**values)


def four_an_hour(pool: ElasticPool) -> None:
    """The pool's accelerators at 4.00 an hour each in the price book: 32.00 a node-hour."""
    Price.objects.create(
        organization=pool.cluster.organization,
        cluster=pool.cluster,
        flavor=pool.accelerator,
        capacity_type="on_demand",
        hourly_rate=Decimal("4"),
        rate=Decimal("4"),
        effective_from=timezone.now().date() - timedelta(days=1),
        updated_at=timezone.now(),
    )
