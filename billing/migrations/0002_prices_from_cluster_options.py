"""The prices clusters carried in their options (``{"prices": {flavor: rate}, "price_per_accelerator_hour": rate}``,
read by placement before the price book existed) become rows of the price book, in effect since 2000-01-01,
for every flavor among each cluster's nodes and the capacity type the cluster is priced as."""

import datetime as dt
from decimal import Decimal, InvalidOperation
from typing import Any

from django.db import migrations
from django.utils import timezone

SPELLINGS = {"on_demand": "on_demand", "on-demand": "on_demand", "spot": "spot", "reserved": "reserved",
             "on_prem": "on_prem", "on-prem": "on_prem"}  # fmt: skip


def _rate(value: object) -> Decimal | None:
    try:
        rate = Decimal(str(value))
    except (InvalidOperation, ValueError):
        return None
    return rate.quantize(Decimal("0.0001")) if rate.is_finite() and rate >= 0 else None


def forward(apps: Any, schema_editor: Any) -> None:
    Cluster = apps.get_model("clusters", "Cluster")
    Node = apps.get_model("clusters", "Node")
    Price = apps.get_model("billing", "Price")
    now = timezone.now()
    for cluster in Cluster.objects.all():
        options = cluster.options or {}
        prices = options["prices"] if isinstance(options.get("prices"), dict) else {}
        default = options.get("price_per_accelerator_hour")
        if not prices and default is None:
            continue
        kind = SPELLINGS.get(str(options.get("capacity_type", "")).lower()) or (
            "on_demand" if cluster.kind == "tpu" else "on_prem"
        )
        flavors = {
            n.accelerator_id: n.accelerator.name
            for n in Node.objects.filter(cluster=cluster, accelerator__isnull=False).select_related("accelerator")
        }
        for flavor_id, name in flavors.items():
            rate = _rate(prices.get(name, default))
            if rate is None:
                continue
            Price.objects.get_or_create(
                cluster=cluster, flavor_id=flavor_id, capacity_type=kind, effective_from=dt.date(2000, 1, 1),
                defaults={"organization_id": cluster.organization_id, "hourly_rate": rate, "rate": rate,
                          "updated_at": now, "note": "From the cluster's options"},
            )  # fmt: skip
        cleaned = {k: v for k, v in options.items() if k not in ("prices", "price_per_accelerator_hour")}
        Cluster.objects.filter(pk=cluster.pk).update(options=cleaned)


class Migration(migrations.Migration):
    dependencies = [("billing", "0001_initial"), ("clusters", "0003_drain_window")]

    operations = [migrations.RunPython(forward, migrations.RunPython.noop)]
