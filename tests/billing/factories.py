"""Prices for tests: rows of the price book, as finance's ``set_price`` would write them."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import date
from decimal import Decimal

from django.utils import timezone

from billing.models import Price
from clusters.capacity import capacity_type
from clusters.models import AcceleratorType, Cluster
from scheduler.placement import feasibility


def priced(clusters: Iterable[Cluster], rate: float, by_flavor: Mapping[str, float] | None = None) -> None:
    """Each flavor of each cluster's nodes at ``rate`` an accelerator-hour (or its own in ``by_flavor``),
    for the capacity type the cluster's nodes are priced as, from 2000 on."""
    org = None
    for cluster in clusters:
        org = cluster.organization
        kind = capacity_type({}, cluster.kind, cluster.options or {})
        for flavor in AcceleratorType.objects.filter(pk__in=cluster.nodes.values("accelerator_id")):
            value = Decimal(str((by_flavor or {}).get(flavor.name, rate)))
            Price.objects.update_or_create(
                cluster=cluster,
                flavor=flavor,
                capacity_type=kind,
                effective_from=date(2000, 1, 1),
                defaults={
                    "organization": cluster.organization,
                    "hourly_rate": value,
                    "rate": value,
                    "updated_at": timezone.now(),
                },
            )
    if org is not None:
        feasibility.forget(org)
