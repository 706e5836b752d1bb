"""The price book as placement and reports read it: rates by effective day, on-prem rates from a node's costs,
and the prices clusters used to carry in their options moved into the book."""

from __future__ import annotations

import importlib
from datetime import date
from decimal import Decimal

from django.apps import apps

from billing.actions import prices
from billing.actions.prices import RateBook
from billing.models import Price
from clusters.capacity import CapacityType
from clusters.models import Cluster, Node
from scheduler.placement import feasibility, snapshot
from tests.billing.factories import priced
from tests.scheduler.conftest import Fleet


def test_a_rate_applies_from_its_day_until_the_next() -> None:
    key = (1, 2, CapacityType.SPOT)
    book = RateBook([(*key, date(2026, 1, 1), Decimal(1)), (*key, date(2026, 6, 1), Decimal(2))])
    assert book.rate(key, date(2025, 12, 31)) is None
    assert book.rate(key, date(2026, 5, 31)) == Decimal(1)
    assert book.rate(key, date(2026, 6, 1)) == Decimal(2)
    assert book.rate((1, 2, CapacityType.ON_DEMAND), date(2026, 6, 1)) is None


def test_an_on_prem_rate_is_purchase_over_depreciation_plus_power_and_hosting_per_accelerator() -> None:
    # 240,000 over 40 months of 730.5 hours, 8 kW at 0.25, 2,922 a month (4.00 an hour): 8.2135... + 2 + 4.
    rate = prices.on_prem_rate(Decimal(240000), 8, 40, Decimal(8), Decimal("0.25"), Decimal(2922))
    assert rate == Decimal("1.776694")


def test_placement_prices_each_node_from_the_book(fleet: Fleet) -> None:
    east, west = fleet.clusters["east"], fleet.clusters["west"]
    priced([east], 3.0)
    priced([west], 1.5)
    _, nodes, _ = snapshot.fleet(fleet.org, snapshot.Index(generation=0))
    by_cluster = {n.cluster: n.price_per_accel_hour for n in nodes if n.flavor != "cpu"}
    assert by_cluster == {"east": 3.0, "west": 1.5}


def test_prices_in_cluster_options_move_into_the_book(fleet: Fleet) -> None:
    east = fleet.clusters["east"]
    flavor = Node.objects.filter(cluster=east, accelerator__isnull=False).first().accelerator  # type: ignore[union-attr]
    Cluster.objects.filter(pk=east.pk).update(options={**east.options, "prices": {flavor.name: 4.1}})
    Cluster.objects.filter(pk=fleet.clusters["west"].pk).update(
        options={**fleet.clusters["west"].options, "price_per_accelerator_hour": "bad"}
    )
    migration = importlib.import_module("billing.migrations.0002_prices_from_cluster_options")
    migration.forward(apps, None)
    (row,) = Price.objects.all()
    assert (row.cluster_id, row.flavor_id, row.capacity_type, row.rate) == (
        east.pk,
        flavor.pk,
        CapacityType.ON_PREM,
        Decimal("4.1"),
    )
    assert "prices" not in Cluster.objects.get(pk=east.pk).options
    feasibility.forget(fleet.org)
