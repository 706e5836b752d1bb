"""Currency and cost-centre codes: set by finance (audited, every bad field named, nothing written on a refusal), and
carried on every amount of the statements, the exports and the API; capacity types read as words."""

from __future__ import annotations

import csv
import io
from typing import Any

from openpyxl import load_workbook

from tenancy.models import AuditLog, Organization, Project
from tests.billing.test_finance_api import MONTH, get
from tests.billing.test_finance_api import month as month
from tests.conftest import api_client
from tests.scheduler.conftest import Fleet


def body(response: Any) -> bytes:
    return b"".join(response.streaming_content) if response.streaming else response.content


def put(fleet: Fleet, user: str, data: dict[str, Any]) -> Any:
    return api_client(fleet.user(user)).put("/api/v1/billing/codes/", data, format="json")


def test_finance_sets_the_currency_and_cost_centres_and_statements_carry_them(month: Fleet) -> None:
    project = Project.objects.create(team=month.world.teams["vision"], name="Detection 2", slug="detection-2")
    response = put(month, "fiona", {"currency": "EUR", "cost_centres": {"vision": "CC-1001", "robotics": "CC-2002"}})
    assert response.status_code == 200, response.content
    assert response.json() == {"currency": "EUR", "cost_centres": {"robotics": "CC-2002", "vision": "CC-1001"}}
    assert put(month, "fiona", {"cost_centres": {"vision/detection-2": "CC-1001-D"}}).status_code == 200
    assert Project.objects.get(pk=project.pk).cost_centre == "CC-1001-D"
    entry = AuditLog.objects.filter(action="billing.codes_changed").order_by("pk").first()
    assert entry is not None
    assert entry.changes["currency"] == ["USD", "EUR"]

    rows = list(
        csv.DictReader(
            io.StringIO(body(get(month, "lena", "/api/v1/billing/statements/vision.csv", month=MONTH)).decode())
        )
    )
    assert {r["currency"] for r in rows} == {"EUR"}
    assert {r["cost centre"] for r in rows} == {"CC-1001"}  # its lines have no project of their own code
    assert {r["capacity type"] for r in rows[:-1]} == {"On-demand"}  # words, not on_demand
    fleet_rows = list(
        csv.DictReader(io.StringIO(body(get(month, "fiona", "/api/v1/billing/fleet.csv", month=MONTH)).decode()))
    )
    assert {r["team"]: r["cost centre"] for r in fleet_rows}["Robotics"] == "CC-2002"
    assert {r["currency"] for r in fleet_rows} == {"EUR"}

    book = load_workbook(io.BytesIO(body(get(month, "fiona", "/api/v1/billing/statements/vision.xlsx", month=MONTH))))
    summary = {row[0]: row[1] for row in book["Summary"].iter_rows(values_only=True)}
    assert (summary["Currency"], summary["Cost centre"]) == ("EUR", "CC-1001")
    header = [c.value for c in book["Lines"][1]]
    total = book["Lines"].cell(row=2, column=header.index("total") + 1)
    assert total.number_format == '#,##0.00 "EUR"'  # every amount shows its currency

    costs = get(month, "lena", "/api/v1/billing/costs/", month=MONTH, group_by="team").json()
    assert costs["currency"] == "EUR"
    assert costs["rows"][0]["cost_centre"] == "CC-1001"
    assert get(month, "lena", "/api/v1/billing/job-costs/", month=MONTH).json()["currency"] == "EUR"
    assert api_client(month.user("lena")).get("/api/v1/budgets/").json()["results"] == []


def test_bad_codes_get_a_400_naming_each_field_and_change_nothing(month: Fleet) -> None:
    response = put(
        month, "fiona", {"currency": "eur", "cost_centres": {"nobody": "X", "vision": "x" * 41}, "colour": 1}
    )
    assert response.status_code == 400
    fields = response.json()["error"]["fields"]
    assert "did you mean EUR" in fields["currency"][0]
    assert "'nobody'" in fields["cost_centres"][0]
    assert "at most 40" in fields["cost_centres"][0]
    assert "colour" in fields
    assert Organization.objects.get(pk=month.org.pk).currency == "USD"
    assert put(month, "fiona", {"currency": "XYZ"}).status_code == 400
    assert put(month, "lena", {"currency": "EUR"}).status_code == 403
    assert (
        api_client(month.world.users["mallory"])
        .put(f"/api/v1/billing/codes/?organization={month.org.slug}", {"currency": "EUR"}, format="json")
        .status_code
        == 404
    )
    assert not AuditLog.objects.filter(action="billing.codes_changed").exists()


def test_the_codes_page_saves_and_shows_a_refusal_by_its_field(month: Fleet, client: Any) -> None:
    client.force_login(month.user("fiona"))
    page = client.get("/billing/codes/")
    assert page.status_code == 200
    assert b"vision = " in page.content
    response = client.post("/billing/codes/", {"currency": "GBP", "cost_centres": "vision = CC-7\nrobotics ="})
    assert response.status_code == 302
    assert Organization.objects.get(pk=month.org.pk).currency == "GBP"
    response = client.post("/billing/codes/", {"currency": "pounds", "cost_centres": ""})
    assert response.status_code == 400
    assert b"is not an ISO 4217 currency code" in response.content
    assert b'data-testid="currency">GBP' in client.get("/billing/", {"month": MONTH}).content
    client.force_login(month.user("alice"))
    assert client.get("/billing/codes/").status_code == 403
