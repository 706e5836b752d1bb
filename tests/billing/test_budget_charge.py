"""Budgets on the full charge: a money budget counts usage (the jobs at their prices) or the full charge (usage with
its shares of idle capacity and overhead: the team's statement so far), says which, and shows both; a hard budget on
the full charge holds work that a budget on usage alone would let through."""

from __future__ import annotations

import csv
import io
from datetime import timedelta
from decimal import Decimal
from typing import Any

import pytest
from django.utils import timezone

from billing.actions import metering, prices
from governance.actions import budgets
from governance.models import Budget
from scheduler.placement.budgets import budget_name, snapshot_budgets
from tests.billing.conftest import placed
from tests.billing.test_attribution import price_everything
from tests.conftest import api_client
from tests.scheduler.conftest import Fleet


def this_month(fleet: Fleet) -> Fleet:
    """This month so far: vision's job held 4 GPUs for 4 hours yesterday, at 2.50 an hour, on a fleet whose capacity
    was metered from then on, with 3,000.00 a month of overhead. Yesterday is over, so its idle capacity and its part
    of the overhead are charged: the full charge is more than the usage."""
    now = timezone.now()
    if now.day == 1:
        pytest.skip("on a month's first day no day of it is over yet")
    price_everything(fleet, "2.5")
    prices.set_overhead(fleet.user("fiona"), fleet.org, {"name": "Support", "amount": "3000", "starts": "2026-01-01"})
    start = (now - timedelta(days=1)).replace(hour=10, minute=0, second=0, microsecond=0)
    placed(fleet, admitted=start, ended=start + timedelta(hours=4), accelerators=4, name="big")
    metering.meter_capacity(fleet.org, start)
    metering.meter_capacity(fleet.org, now)
    metering.meter(fleet.org, now)
    return fleet


def test_a_budget_on_the_full_charge_is_the_teams_bill_to_the_cent_and_shows_usage_beside_it(fleet: Fleet) -> None:
    this_month(fleet)
    adam, vision = fleet.user("adam"), fleet.world.teams["vision"]
    budgets.set_budget(adam, vision, amount=100_000, counts="charge", reason="the bill")
    lena = api_client(fleet.user("lena"))
    (budget,) = lena.get("/api/v1/budgets/", {"team": "vision"}).json()["results"]
    assert budget["counts"] == "charge"
    (money,) = budget["standings"]
    statement: Any = lena.get("/api/v1/billing/statements/vision.csv")
    total = list(csv.DictReader(io.StringIO(b"".join(statement.streaming_content).decode())))[-1]
    assert Decimal(money["used"]) == Decimal(money["charge"]) == Decimal(total["total"]) > 0
    assert Decimal(money["usage"]) == Decimal("40.00")  # 16 accelerator-hours at 2.50
    assert Decimal(money["charge"]) > Decimal(money["usage"])  # yesterday's idle and overhead

    # On usage, the same budget counts the jobs alone, and still shows the charge beside it.
    budgets.set_budget(adam, vision, amount=100_000, counts="usage", reason="the jobs")
    (money,) = lena.get("/api/v1/budgets/", {"team": "vision"}).json()["results"][0]["standings"]
    assert Decimal(money["used"]) == Decimal("40.00")
    assert Decimal(money["charge"]) == Decimal(total["total"])


def test_a_hard_budget_on_the_full_charge_holds_what_usage_alone_would_let_through(fleet: Fleet) -> None:
    this_month(fleet)
    adam, vision = fleet.user("adam"), fleet.world.teams["vision"]
    now = timezone.now()
    budgets.set_budget(adam, vision, amount=60, hard=True, reason="usage", confirm=True)
    left_on_usage = snapshot_budgets(fleet.org.pk, now)[budget_name(vision.pk, None)].money
    assert left_on_usage == 60 - 40
    budgets.set_budget(adam, vision, amount=60, hard=True, counts="charge", reason="the bill", confirm=True)
    charged = Decimal(
        api_client(adam).get("/api/v1/budgets/", {"team": "vision"}).json()["results"][0]["standings"][0]["charge"]
    )
    left_on_charge = snapshot_budgets(fleet.org.pk, now)[budget_name(vision.pk, None)].money
    assert left_on_charge is not None
    assert charged > 60 > 40  # over the limit as billed, within it on usage alone
    assert abs(Decimal(str(left_on_charge)) - (60 - charged)) < Decimal("0.01")


def test_counts_takes_usage_or_charge_and_a_limit_below_the_charge_asks_to_confirm(fleet: Fleet) -> None:
    this_month(fleet)
    adam = api_client(fleet.user("adam"))
    response = adam.post(
        "/api/v1/budgets/", {"team": "vision", "amount": "100", "counts": "bill", "reason": "x"}, format="json"
    )
    assert response.status_code == 400
    assert "counts" in response.json()["error"]["fields"]
    assert not Budget.objects.exists()
    response = adam.post(
        "/api/v1/budgets/", {"team": "vision", "amount": "39", "counts": "charge", "reason": "x"}, format="json"
    )
    assert response.status_code == 400
    assert "been charged" in response.json()["error"]["fields"]["amount"][0]
    response = adam.post(
        "/api/v1/budgets/", {"team": "vision", "amount": "41", "counts": "usage", "reason": "x"}, format="json"
    )
    assert response.status_code == 201, response.content
