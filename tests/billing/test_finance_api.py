"""Finance's API: costs scoped to who asks, statements and the fleet summary as CSV and XLSX whose totals
match, the price book and overhead changed by finance only, and 400s naming the bad field or parameter."""

from __future__ import annotations

import csv
import io
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal
from typing import Any

import pytest
from openpyxl import load_workbook

from billing import attribution, reports
from billing.actions import metering, prices
from billing.models import Overhead, Price
from tenancy.models import AuditLog
from tests.billing.conftest import placed
from tests.billing.test_attribution import price_everything
from tests.conftest import api_client
from tests.scheduler.conftest import Fleet

START = datetime(2026, 11, 3, 9, tzinfo=UTC)
MONTH = "2026-11"


@pytest.fixture
def month(fleet: Fleet) -> Fleet:
    """November: vision ran 4 GPUs for 10 hours, robotics 2 for 5, at 2.50 an hour, with 1,000.00 of support."""
    price_everything(fleet, "2.5")
    placed(fleet, admitted=START, ended=START + timedelta(hours=10), accelerators=4, name="big")
    placed(fleet, username="bob", admitted=START, ended=START + timedelta(hours=5), accelerators=2, name="small")
    prices.set_overhead(fleet.user("fiona"), fleet.org, {"name": "Support", "amount": "1000", "starts": "2026-01-01"})
    metering.meter_capacity(fleet.org, START)
    metering.meter(fleet.org, START + timedelta(days=1))
    return fleet


def get(fleet: Fleet, user: str, url: str, **query: Any) -> Any:
    return api_client(fleet.world.users[user]).get(url, query)


def test_finance_reads_every_teams_costs_and_the_fleet_which_they_add_up_to(month: Fleet) -> None:
    response = get(month, "fiona", "/api/v1/billing/costs/", month=MONTH, group_by="team")
    assert response.status_code == 200, response.content
    body = response.json()
    teams = {row["team_name"]: row for row in body["rows"]}
    assert set(teams) == {"Vision", "Robotics"}
    assert (teams["Vision"]["usage"], teams["Robotics"]["usage"]) == ("100.00", "25.00")
    total = sum(Decimal(row["total"]) for row in body["rows"])
    assert total == Decimal(body["fleet"]["total"]) == Decimal(body["totals"]["total"])
    assert body["fleet"]["overhead"] == "1000.00"


def test_a_researcher_reads_only_their_teams_costs(month: Fleet) -> None:
    body = get(month, "alice", "/api/v1/billing/costs/", month=MONTH, group_by="team,user").json()
    assert {row["team_name"] for row in body["rows"]} == {"Vision"}
    assert "fleet" not in body
    assert "Robotics" not in str(body)
    assert "bob" not in str(body)
    # Another team by name is not there at all; another organization sees nothing of this one.
    assert get(month, "alice", "/api/v1/billing/costs/", month=MONTH, team="robotics").status_code == 404
    assert get(month, "alice", "/api/v1/billing/statements/robotics.csv", month=MONTH).status_code == 404
    assert get(month, "mallory", "/api/v1/billing/costs/", month=MONTH, organization="demo").status_code == 404
    jobs = get(month, "alice", "/api/v1/billing/job-costs/", month=MONTH).json()["jobs"]
    assert [j["name"] for j in jobs] == ["big"]
    assert get(month, "alice", "/api/v1/billing/fleet.csv", month=MONTH).status_code == 403


@pytest.mark.parametrize(
    ("query", "field"),
    [
        ({"month": "2026-13"}, "month"),
        ({"month": "last month"}, "month"),
        ({"group_by": "team,colour"}, "group_by"),
        ({"group_by": "team,team"}, "group_by"),
        ({"sort": "cost"}, "sort"),
    ],
)
def test_bad_report_filters_get_a_400_naming_the_parameter(month: Fleet, query: dict[str, str], field: str) -> None:
    response = get(month, "fiona", "/api/v1/billing/costs/", **query)
    assert response.status_code == 400
    assert field in response.json()["error"]["fields"]


def test_bad_job_limit_gets_a_400(month: Fleet) -> None:
    response = get(month, "fiona", "/api/v1/billing/job-costs/", month=MONTH, limit="0")
    assert response.status_code == 400
    assert "limit" in response.json()["error"]["fields"]


def test_a_teams_csv_statement_adds_up_to_its_total(month: Fleet) -> None:
    response = get(month, "lena", "/api/v1/billing/statements/vision.csv", month=MONTH)
    assert response.status_code == 200
    assert response["Content-Disposition"] == 'attachment; filename="statement-vision-2026-11.csv"'
    rows = list(csv.DictReader(io.StringIO(b"".join(response.streaming_content).decode())))
    *lines, total = rows
    assert total["project"] == "Total"
    assert sum(Decimal(r["total"]) for r in lines) == Decimal(total["total"])
    costs = get(month, "lena", "/api/v1/billing/costs/", month=MONTH).json()
    assert total["total"] == costs["totals"]["total"]


def test_the_xlsx_statement_and_fleet_summary_have_the_right_totals(month: Fleet) -> None:
    costs = get(month, "fiona", "/api/v1/billing/costs/", month=MONTH, group_by="team").json()
    by_team = {row["team_name"]: Decimal(row["total"]) for row in costs["rows"]}

    response = get(month, "fiona", "/api/v1/billing/statements/vision.xlsx", month=MONTH)
    assert response.status_code == 200
    book = load_workbook(io.BytesIO(b"".join(response.streaming_content)), read_only=True)
    assert book.sheetnames == ["Summary", "Lines", "Days", "Jobs"]
    summary = {row[0]: row[1] for row in book["Summary"].iter_rows(values_only=True)}
    assert Decimal(str(summary["Total"])) == by_team["Vision"]
    header, *lines = list(book["Lines"].iter_rows(values_only=True))
    total_column = header.index("total")
    assert lines[-1][2] == "Total"
    assert sum(Decimal(str(r[total_column])) for r in lines[:-1]) == Decimal(str(lines[-1][total_column]))
    header, *jobs = list(book["Jobs"].iter_rows(values_only=True))
    assert [row[1] for row in jobs] == ["big", "Total"]
    usage = header.index("usage")
    assert Decimal(str(jobs[-1][usage])) == Decimal(str(summary["Usage"]))  # the sheet ties to its Summary

    response = get(month, "fiona", "/api/v1/billing/fleet.xlsx", month=MONTH)
    book = load_workbook(io.BytesIO(b"".join(response.streaming_content)), read_only=True)
    header, *teams = list(book["Teams"].iter_rows(values_only=True))
    total_column = header.index("total")
    *team_rows, fleet_row = teams
    assert fleet_row[1] == "Fleet total"
    assert Decimal(str(fleet_row[total_column])) == Decimal(costs["fleet"]["total"])
    assert sum(Decimal(str(r[total_column])) for r in team_rows) == Decimal(costs["fleet"]["total"])
    assert {r[1]: Decimal(str(r[total_column])) for r in team_rows} == by_team


# --- the price book ---------------------------------------------------------------------------------------


def cloud_row(fleet: Fleet, **changes: Any) -> dict[str, Any]:
    cluster = next(iter(fleet.clusters.values()))
    flavor = cluster.nodes.filter(accelerator__isnull=False).first().accelerator.name  # type: ignore[union-attr]
    return {
        "cluster": cluster.slug,
        "flavor": flavor,
        "capacity_type": "spot",
        "effective_from": "2026-12-01",
        "hourly_rate": "1.2345",
        **changes,
    }


def test_finance_adds_changes_and_removes_prices_and_each_change_is_audited(fleet: Fleet) -> None:
    client = api_client(fleet.user("fiona"))
    response = client.post("/api/v1/prices/", cloud_row(fleet), format="json")
    assert response.status_code == 201, response.content
    price = response.json()
    assert (price["rate"], price["capacity_type"]) == ("1.234500", "spot")

    on_prem = cloud_row(
        fleet,
        capacity_type="on_prem",
        hourly_rate=None,
        purchase_price="300000",
        accelerators_per_node=8,
        depreciation_months=48,
        power_kw="10.2",
        energy_price="0.15",
        hosting_per_month="1500",
    )
    response = client.post("/api/v1/prices/", on_prem, format="json")
    assert response.status_code == 201, response.content
    # (300000 / (48 x 730.5) + 10.2 x 0.15 + 1500 / 730.5) / 8
    assert response.json()["rate"] == "1.517396"

    response = client.put(f"/api/v1/prices/{price['id']}/", cloud_row(fleet, hourly_rate="1.5"), format="json")
    assert response.status_code == 200
    assert response.json()["rate"] == "1.500000"
    assert client.delete(f"/api/v1/prices/{price['id']}/").status_code == 204
    actions = list(AuditLog.objects.filter(action__startswith="price.").values_list("action", flat=True))
    assert sorted(actions) == ["price.changed", "price.created", "price.created", "price.deleted"]


def test_bad_price_book_input_gets_a_400_naming_every_field_and_writes_nothing(fleet: Fleet) -> None:
    client = api_client(fleet.user("fiona"))
    bad = cloud_row(
        fleet,
        capacity_type="on_prem",
        hourly_rate="2",
        purchase_price="-1",
        power_kw="lots",
        depreciation_months=0,
        effective_from="2026-02-30",
        colour="red",
    )
    response = client.post("/api/v1/prices/", bad, format="json")
    assert response.status_code == 400
    fields = response.json()["error"]["fields"]
    assert set(fields) >= {
        "hourly_rate",
        "purchase_price",
        "power_kw",
        "depreciation_months",
        "effective_from",
        "accelerators_per_node",
        "energy_price",
        "hosting_per_month",
        "colour",
    }
    response = client.post("/api/v1/prices/", cloud_row(fleet, cluster="nowhere", capacity_type="cheap"), format="json")
    assert set(response.json()["error"]["fields"]) == {"cluster", "capacity_type"}
    assert not Price.objects.exists()
    # The same day twice: the second is refused on effective_from.
    assert client.post("/api/v1/prices/", cloud_row(fleet), format="json").status_code == 201
    response = client.post("/api/v1/prices/", cloud_row(fleet), format="json")
    assert response.status_code == 400
    assert "effective_from" in response.json()["error"]["fields"]
    assert Price.objects.count() == 1


def test_only_finance_and_admins_read_or_change_the_price_book(fleet: Fleet) -> None:
    row = prices.set_price(fleet.user("fiona"), fleet.org, cloud_row(fleet))
    for name in ("alice", "lena"):
        client = api_client(fleet.world.users[name])
        assert client.get("/api/v1/prices/").json()["results"] == []
        assert client.get(f"/api/v1/prices/{row.pk}/").status_code == 404
        assert (
            client.post("/api/v1/prices/", cloud_row(fleet, effective_from="2027-01-01"), format="json").status_code
            == 403
        )
    mallory = api_client(fleet.world.users["mallory"])
    assert mallory.get(f"/api/v1/prices/{row.pk}/").status_code == 404
    assert mallory.delete(f"/api/v1/prices/{row.pk}/").status_code == 404
    assert api_client(fleet.user("adam")).get(f"/api/v1/prices/{row.pk}/").status_code == 200
    assert Price.objects.count() == 1
    assert get(fleet, "alice", "/api/v1/billing/meter/").status_code == 403


def test_overhead_is_set_by_finance_and_validated(fleet: Fleet) -> None:
    client = api_client(fleet.user("fiona"))
    response = client.post(
        "/api/v1/overheads/", {"name": "", "amount": "-5", "starts": "2026-12-09", "ends": "2026-10-01"}, format="json"
    )
    assert response.status_code == 400
    assert set(response.json()["error"]["fields"]) == {"name", "amount", "ends"}
    response = client.post(
        "/api/v1/overheads/", {"name": "Storage", "amount": "250.5", "starts": "2026-12-09"}, format="json"
    )
    assert response.status_code == 201
    assert response.json()["starts"] == "2026-12-01"  # months are stored as their first day
    assert Overhead.objects.get().amount == Decimal("250.50")
    assert api_client(fleet.user("alice")).post("/api/v1/overheads/", {}, format="json").status_code == 403


def test_the_meter_endpoint_shows_the_last_reconciliation(month: Fleet) -> None:
    metering.reconcile(month.org, since=datetime(2026, 11, 1, tzinfo=UTC))
    body = get(month, "fiona", "/api/v1/billing/meter/").json()
    assert body["last_reconciliation"]["balanced"] is True
    assert body["last_reconciliation"]["placed_accelerator_hours"] == pytest.approx(4 * 10 + 2 * 5)
    assert date.fromisoformat(body["last_reconciled_at"][:10]) >= date(2026, 11, 1)


def test_a_statements_jobs_add_up_to_the_teams_usage_to_the_cent() -> None:
    """Three jobs of 0.335 each: rounded alone they make 1.02, but the team's usage is 1.01 (1.005, rounded once).
    The sheet apportions them (0.34, 0.34, 0.33), so its total is the Summary's."""
    micro_hour = 1_000_000 * 3_600_000
    jobs = [
        attribution.JobCost(n, f"job-{n}", 1, None, 1, 3_600_000, 34, int(Decimal("0.335") * micro_hour))
        for n in range(3)
    ]
    line = attribution.Line(date(2026, 11, 3), 1, None, 1, 1, 1, "on_prem", 3 * 3_600_000, 101, 0, 0, True)
    month = attribution.Attribution(1, date(2026, 11, 1), [line], [], 0, 0, 0, {}, attribution.Names())
    *rows, total = list(reports.statement_jobs(month, 1, jobs))
    assert [row[6] for row in rows] == [Decimal("0.34"), Decimal("0.34"), Decimal("0.33")]
    assert total[1] == "Total"
    assert total[6] == Decimal("1.01")


def _sheet(book: Any, name: str, column: str) -> tuple[list[Decimal], Decimal]:
    """A sheet's figures in ``column``: its rows', and its last row's (the total)."""
    header, *rows = list(book[name].iter_rows(values_only=True))
    at = header.index(column)
    *body, last = [Decimal(str(row[at] or 0)) for row in rows]
    return body, last


def test_every_sheet_of_the_xlsx_exports_ties_to_its_summary(month: Fleet) -> None:
    for url, checks in (
        ("/api/v1/billing/fleet.xlsx", [("Teams", "total", "Fleet total"), ("Days", "total", "Fleet total"),
                                        ("Pools", "cost", "Capacity cost")]),
        ("/api/v1/billing/statements/vision.xlsx", [("Lines", "total", "Total"), ("Days", "total", "Total"),
                                                    ("Jobs", "usage", "Usage")]),
    ):  # fmt: skip
        response = get(month, "fiona", url, month=MONTH)
        book = load_workbook(io.BytesIO(b"".join(response.streaming_content)), read_only=True)
        summary = {row[0]: row[1] for row in book["Summary"].iter_rows(values_only=True)}
        for sheet, column, label in checks:
            body, total = _sheet(book, sheet, column)
            assert total == Decimal(str(summary[label])), (url, sheet)
            assert sum(body) == total, (url, sheet)
