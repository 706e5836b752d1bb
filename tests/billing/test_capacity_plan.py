"""The capacity plan: orders with lead times, retirements and reserved commitments, kept by finance and admins
(API and page, judged field by field, audited), and the capacity ahead they give the forecasts."""

from __future__ import annotations

from datetime import date, timedelta
from typing import Any

import pytest
from django.test import Client
from django.utils import timezone

from billing.actions.capacity_plan import daily_plan
from billing.forecast import AHEAD_DAYS
from billing.forecast_history import forecast_organization
from billing.models import CapacityChange
from tenancy.models import AuditLog
from tests.billing.test_forecast_history import Lab, lab  # noqa: F401 - the fixture

URL = "/api/v1/capacity-plan/"
TODAY = date(2026, 12, 7)
FLEET = {"H100": 16, "A100": 4}


def on(day: int) -> date:
    return TODAY + timedelta(days=day)


def test_an_order_adds_from_its_arrival_and_one_arrived_is_in_the_fleet_already():
    plan = daily_plan([("H100", "order", 8, on(30), None), ("H100", "order", 100, on(-3), None)], TODAY, FLEET)
    assert set(plan) == {"H100"}  # A100 has no plan: today's fleet carried forward
    assert len(plan["H100"]) == AHEAD_DAYS
    assert plan["H100"][29] == 16.0
    assert plan["H100"][30] == plan["H100"][-1] == 24.0


def test_a_retirement_takes_away_from_its_day_and_capacity_never_goes_below_none():
    plan = daily_plan([("A100", "retirement", 8, on(10), None)], TODAY, FLEET)
    assert plan["A100"][9] == 4.0
    assert plan["A100"][10] == 0.0


def test_a_commitment_counts_from_its_first_day_to_its_last_and_one_running_now_leaves_after_it():
    ahead = daily_plan([("H100", "commitment", 32, on(7), on(13))], TODAY, FLEET)["H100"]
    assert (ahead[6], ahead[7], ahead[13], ahead[14]) == (16.0, 48.0, 48.0, 16.0)
    running = daily_plan([("H100", "commitment", 8, on(-10), on(20))], TODAY, FLEET)["H100"]
    assert (running[0], running[20], running[21]) == (16.0, 16.0, 8.0)


@pytest.fixture
def api(lab: Lab) -> Any:  # noqa: F811 - the fixture imported above
    from tests.conftest import api_client

    return lambda username: api_client(lab.world.users[username])


def test_finance_plans_an_order_and_the_forecast_follows_it(lab: Lab, api: Any):  # noqa: F811
    lab.history(70, timezone.now().date())
    before = forecast_organization(lab.org, "6m")  # cached: the plan's change must be seen all the same
    h100 = next(f for f in before.flavors if f.flavor == "H100")
    assert not h100.planned
    assert h100.weeks[10].capacity == 16 * 24 * 7
    ordered = timezone.now().date()
    body = {"flavor": "H100", "kind": "order", "accelerators": 16, "ordered_on": ordered.isoformat(), "lead_days": 35}
    response = api("fiona").post(URL, body, format="json")
    assert response.status_code == 201, response.content
    row = response.json()
    assert (row["flavor"], row["kind"], row["starts_on"]) == ("H100", "order", (ordered + timedelta(35)).isoformat())
    assert row["updated_by"] == "fiona"
    entry = AuditLog.objects.get(action="capacity_change.created")
    assert entry.changes["accelerators"] == [None, 16]
    after = forecast_organization(lab.org, "6m")
    h100 = next(f for f in after.flavors if f.flavor == "H100")
    assert h100.planned
    assert h100.weeks[4].capacity == 16 * 24 * 7  # days 28-34: not yet
    assert h100.weeks[5].capacity == 32 * 24 * 7  # from day 35
    assert api("fiona").get(URL).json()["results"][0]["id"] == row["id"]
    # Changed (every field again), then removed: each audited.
    changed = api("adam").put(f"{URL}{row['id']}/", {**body, "accelerators": 8}, format="json")
    assert changed.status_code == 200, changed.content
    assert AuditLog.objects.get(action="capacity_change.changed").changes["accelerators"] == [16, 8]
    assert api("fiona").delete(f"{URL}{row['id']}/").status_code == 204
    assert AuditLog.objects.filter(action="capacity_change.deleted").count() == 1
    assert not CapacityChange.objects.exists()


@pytest.mark.parametrize(
    ("body", "field", "says"),
    [
        ({"kind": "order", "accelerators": 8, "lead_days": 30}, "ordered_on", "required"),
        ({"kind": "order", "accelerators": 8, "ordered_on": "2027-01-01", "lead_days": 30, "starts_on": "2027-02-01"},
         "starts_on", "give ordered_on and lead_days"),
        ({"kind": "commitment", "accelerators": 8, "starts_on": "2027-02-01", "ends_on": "2027-01-01"},
         "ends_on", "ends on or after the day it starts"),
        ({"kind": "retirement", "accelerators": 8, "starts_on": "2027-02-01", "ends_on": "2027-03-01"},
         "ends_on", "Only a commitment has an end"),
        ({"kind": "purchase", "accelerators": 8, "starts_on": "2027-02-01"}, "kind", "not one of order"),
        ({"kind": "retirement", "accelerators": 0, "starts_on": "2027-02-01"}, "accelerators", "1"),
        ({"kind": "retirement", "accelerators": 8, "starts_on": "2027-02-31"}, "starts_on", "is not a date"),
        ({"kind": "retirement", "accelerators": 8, "starts_on": "2027-02-01", "flavor": "TPU"},
         "flavor", "its types: A100, H100"),
        ({"kind": "retirement", "accelerators": 8, "starts_on": "2027-02-01", "lead_time": 3},
         "lead_time", "Unknown field"),
    ],
)  # fmt: skip
def test_a_bad_row_is_a_400_naming_its_field_and_changes_nothing(
    lab: Lab,  # noqa: F811
    api: Any,
    body: dict[str, Any],
    field: str,
    says: str,
):
    response = api("fiona").post(URL, {"flavor": "H100", **body}, format="json")
    assert response.status_code == 400, response.content
    assert says in str(response.json()["error"]["fields"][field])
    assert not CapacityChange.objects.exists()
    assert not AuditLog.objects.filter(action__startswith="capacity_change").exists()


def test_researchers_see_no_plan_and_may_not_change_it(lab: Lab, api: Any):  # noqa: F811
    CapacityChange.objects.create(
        organization=lab.org,
        flavor=lab.flavors["H100"],
        kind="retirement",
        accelerators=8,
        starts_on=TODAY,
        updated_at=timezone.now(),
    )
    assert api("alice").get(URL).json()["results"] == []
    refused = api("lena").post(
        URL, {"flavor": "H100", "kind": "retirement", "accelerators": 8, "starts_on": "2027-01-01"}
    )
    assert refused.status_code == 403
    assert CapacityChange.objects.count() == 1


def test_the_plan_page_lists_adds_refuses_and_removes(lab: Lab):  # noqa: F811
    client = Client()
    client.force_login(lab.world.users["fiona"])
    page = "/billing/capacity/plan/"
    assert "Nothing planned" in client.get(page).content.decode()
    bad = client.post(page, {"kind": "commitment", "flavor": "H100", "accelerators": "8", "starts_on": "2027-01-01"})
    assert bad.status_code == 400
    assert "ends_on: This field is required." in bad.content.decode()
    added = client.post(
        page,
        {
            "kind": "commitment",
            "flavor": "H100",
            "accelerators": "8",
            "starts_on": "2027-01-01",
            "ends_on": "2027-03-31",
        },
    )
    assert added.status_code == 302
    html = client.get(page).content.decode()
    assert "Reserved cloud commitment" in html
    assert "31 Mar 2027" in html
    row = CapacityChange.objects.get()
    assert client.post(f"{page}{row.pk}/remove/").status_code == 302
    assert not CapacityChange.objects.exists()
    researcher = Client()
    researcher.force_login(lab.world.users["alice"])
    assert researcher.get(page).status_code == 403
