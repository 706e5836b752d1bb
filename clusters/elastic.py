"""What elastic pools have cost (docs/scheduling.md §Elastic pools): the month's spend of each pool's nodes, and
what its monthly budget has left; and the slice shape of a TPU pool's nodes (``pool_shape``). Read only: the
placement loop bounds its asks with ``month_spend`` (``scheduler.placement.elastic``), and the pool's page, API and
``qm pools`` show ``spend``.

A grant's nodes cost money from when they were due up (``up_at``) until they were released (or now), at the rate
they were asked at (``cost_per_hour``); asks that were refused, or not yet taken by the cloud, cost nothing.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from decimal import ROUND_HALF_UP, Decimal

from django.utils import timezone

from clusters.backends.tpu.accelerators import type_of_model
from clusters.models import ElasticGrant, ElasticPool

#: Grants whose nodes cost money this month (asked and refused ones never ran).
SPENDING = (ElasticGrant.State.COMING, ElasticGrant.State.UP, ElasticGrant.State.RELEASED)
#: Money as it is shown: to the cent.
CENT = Decimal("0.01")


def pool_shape(pool: ElasticPool) -> str:
    """The slice shape of a pool's nodes (``scheduler.engine.model.Elastic.shape``): on a Cloud TPU cluster the
    type its flavor (a TPU generation) and chips a node name (v5p and 16: ``v5p-32``); "" on every other kind.
    ``UnknownAcceleratorType`` when they name none (the pool's actions refuse such a pool)."""
    if pool.cluster.kind != "tpu":
        return ""
    return type_of_model(pool.accelerator.name, pool.node_accelerators)


def month_spend(found: Iterable[ElasticPool], now: datetime) -> dict[int, Decimal]:
    """Per pool: what its grants' nodes have cost since the start of ``now``'s month (UTC), from when they were
    due up to when they were released (or now), at the rate each was asked at."""
    first = now.replace(day=1, hour=0, minute=0, second=0, microsecond=0)
    spent: dict[int, Decimal] = {}
    for grant in ElasticGrant.objects.filter(pool__in=found, state__in=SPENDING).exclude(released_at__lt=first):
        start, end = max(grant.up_at, first), min(grant.released_at or now, now)
        if end > start:
            hours = Decimal((end - start).total_seconds()) / 3600
            spent[grant.pool_id] = spent.get(grant.pool_id, Decimal(0)) + grant.cost_per_hour * hours
    return spent


@dataclass(frozen=True, slots=True)
class Spend:
    """A pool's month so far, to the cent: what it spent, and what its budget has left (its budget less what it
    spent: below zero when a month's commitments went past it; None when it has no budget)."""

    spent: Decimal
    left: Decimal | None


def spend(pools: Iterable[ElasticPool], now: datetime | None = None) -> dict[int, Spend]:
    """Per pool (by pk): this month's spend and what its budget has left."""
    found = list(pools)
    if not found:
        return {}
    spent = month_spend(found, now or timezone.now())
    out = {}
    for pool in found:
        money = spent.get(pool.pk, Decimal(0)).quantize(CENT, rounding=ROUND_HALF_UP)
        left = None if pool.monthly_budget is None else (pool.monthly_budget - money).quantize(CENT)
        out[pool.pk] = Spend(money, left)
    return out
