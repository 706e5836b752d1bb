"""Closed months: a closed month's statements download byte-identical after a price correction or late usage, the
correction shows as an adjustment in the next open month (on its statements, tying to the fleet's total), and
reopening is deliberate (a reason, the latest closed month only, audited, corrections withdrawn)."""

from __future__ import annotations

import csv
import io
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal
from typing import Any

import pytest
from openpyxl import load_workbook

from billing import attribution
from billing.actions import metering, periods, prices
from billing.models import Adjustment, Period, Price, Statement
from tenancy.models import AuditLog
from tests.billing.conftest import placed
from tests.billing.test_finance_api import MONTH, START, get
from tests.billing.test_finance_api import month as month
from tests.conftest import api_client
from tests.scheduler.conftest import Fleet

NOV, DEC = date(2026, 11, 1), date(2026, 12, 1)


def body(response: Any) -> bytes:
    return b"".join(response.streaming_content) if response.streaming else response.content


def close(fleet: Fleet, user: str = "fiona", month: str = MONTH) -> Any:
    return api_client(fleet.user(user)).post("/api/v1/billing/periods/close/", {"month": month}, format="json")


def reopen(fleet: Fleet, reason: str, user: str = "fiona", month: str = MONTH) -> Any:
    client = api_client(fleet.user(user))
    return client.post("/api/v1/billing/periods/reopen/", {"month": month, "reason": reason}, format="json")


def correct_prices(fleet: Fleet, rate: str, effective_from: str = "2026-11-02") -> None:
    """Finance corrects the rate of every priced pool from a day inside November."""
    for row in list(Price.objects.filter(organization=fleet.org)):
        data = {
            "cluster": row.cluster.slug,
            "flavor": row.flavor.name,
            "capacity_type": row.capacity_type,
            "hourly_rate": rate,
            "effective_from": effective_from,
        }
        prices.set_price(fleet.user("fiona"), fleet.org, data)


def downloads(fleet: Fleet) -> dict[str, bytes]:
    found = {}
    for url in ("statements/vision.csv", "statements/vision.xlsx", "statements/robotics.csv", "fleet.xlsx"):
        response = get(fleet, "fiona", f"/api/v1/billing/{url}", month=MONTH)
        assert response.status_code == 200, url
        found[url] = body(response)
    return found


def test_a_closed_month_downloads_as_issued_after_a_price_correction_which_is_booked_in_the_open_month(
    month: Fleet,
) -> None:
    response = close(month)
    assert response.status_code == 201, response.content
    closed = response.json()
    assert closed["state"] == "closed"
    issued = {(s["team"], s["format"]): s["number"] for s in closed["statements"]}
    assert set(issued) == {(t, f) for t in ("vision", "robotics", None) for f in ("csv", "xlsx")}
    assert issued[("vision", "csv")] == issued[("vision", "xlsx")]  # one statement, two formats
    assert len(set(issued.values())) == 3
    before = downloads(month)
    nov_before = get(month, "fiona", "/api/v1/billing/costs/", month=MONTH).json()

    # The XLSX says what it is: its number, who closed the month, and the prices and overhead in force.
    book = load_workbook(io.BytesIO(before["statements/vision.xlsx"]), read_only=True)
    assert book.sheetnames == ["Summary", "Lines", "Days", "Jobs", "Prices", "Overhead"]
    summary = {row[0]: row[1] for row in book["Summary"].iter_rows(values_only=True)}
    assert summary["Statement number"] == issued[("vision", "xlsx")]
    assert summary["Month closed by"] == "fiona"
    rates = list(book["Prices"].iter_rows(values_only=True))[1:]
    assert rates
    assert all(Decimal(str(r[3])) == Decimal("2.5") for r in rates)
    assert list(book["Overhead"].iter_rows(values_only=True))[1:] == [("Support", 1000)]

    # A price corrected from the 2nd: November's downloads and figures do not move.
    correct_prices(month, "3.5")
    booked = periods.adjust(month.org)
    assert booked, "the correction is booked"
    assert downloads(month) == before
    assert get(month, "fiona", "/api/v1/billing/costs/", month=MONTH).json() == nov_before
    assert {a.month for a in booked} == {DEC}
    assert {a.corrects for a in booked} == {NOV}
    assert all("the price book changed" in a.reason for a in booked)

    # The correction is what November would now be, less what it was closed with, and December carries it.
    now = attribution.attribute(month.org.pk, NOV)
    was = attribution.kept(month.org.pk, NOV)
    correction = sum(a.usage + a.idle + a.overhead for a in booked)
    assert correction == now.fleet_total - was.fleet_total > 0
    dec = get(month, "fiona", "/api/v1/billing/costs/", month="2026-12", group_by="team,corrects").json()
    corrections = [r for r in dec["rows"] if r["corrects"]]
    assert {r["corrects"] for r in corrections} == {"2026-11-01"}
    unallocated = Decimal(dec["fleet"]["unallocated_idle"]) + Decimal(dec["fleet"]["unallocated_overhead"])
    assert sum(Decimal(r["total"]) for r in dec["rows"]) + unallocated == Decimal(dec["fleet"]["total"])  # it ties
    dec_month = attribution.attribute(month.org.pk, DEC)
    assert dec_month.adjustments == correction
    # Vision's December statement shows the correction as such, and its lines add up to its total.
    response = get(month, "lena", "/api/v1/billing/statements/vision.csv", month="2026-12")
    *lines, total = list(csv.DictReader(io.StringIO(body(response).decode())))
    assert [r["correction of"] for r in lines if r["correction of"]] == ["2026-11"]
    assert sum(Decimal(r["total"]) for r in lines) == Decimal(total["total"])
    response = get(month, "fiona", "/api/v1/billing/fleet.xlsx", month="2026-12")
    book = load_workbook(io.BytesIO(body(response)), read_only=True)
    summary = {row[0]: row[1] for row in book["Summary"].iter_rows(values_only=True)}
    assert Decimal(str(summary["Of which corrections of closed months"])) == Decimal(correction) / 100

    # Checking again books nothing more: the month's inputs have not changed since.
    assert periods.adjust(month.org) == []


def test_usage_metered_late_into_a_closed_month_is_booked_as_a_correction(month: Fleet) -> None:
    assert close(month).status_code == 201
    before = downloads(month)
    placed(month, admitted=START + timedelta(days=3), ended=START + timedelta(days=3, hours=4), accelerators=1)
    metering.meter(month.org, START + timedelta(days=4))
    booked = periods.adjust(month.org, now=datetime(2026, 12, 2, tzinfo=UTC))
    assert booked
    assert all("usage metered late" in a.reason for a in booked)
    assert {a.day for a in booked} == {date(2026, 12, 2)}
    vision = [a for a in booked if a.team and a.team.slug == "vision"]
    assert sum(a.milli_seconds for a in vision) == 4 * 3_600_000
    assert downloads(month) == before


def test_reopening_takes_a_reason_withdraws_the_corrections_and_the_next_close_issues_new_numbers(
    month: Fleet,
) -> None:
    first = close(month).json()
    correct_prices(month, "3.5")
    periods.adjust(month.org)
    assert Adjustment.objects.filter(corrects=NOV).exists()

    response = reopen(month, "   ")
    assert response.status_code == 400
    assert "reason" in response.json()["error"]["fields"]
    assert reopen(month, "the H100 rate was wrong", user="lena").status_code == 403
    assert Period.objects.get(month=NOV).closed

    response = reopen(month, "the H100 rate was wrong")
    assert response.status_code == 200, response.content
    assert response.json()["state"] == "reopened"
    assert not Adjustment.objects.filter(corrects=NOV).exists()
    assert Statement.objects.filter(superseded_at=None).count() == 0
    entry = AuditLog.objects.get(action="period.reopened")
    assert entry.reason == "the H100 rate was wrong"
    # Open again, November reads the book as it stands.
    live = get(month, "fiona", "/api/v1/billing/costs/", month=MONTH).json()
    assert Decimal(live["fleet"]["total"]) == Decimal(attribution.attribute(month.org.pk, NOV).fleet_total) / 100

    second = close(month).json()
    assert second["revision"] == 2
    old = {s["number"] for s in first["statements"]}
    new = {s["number"] for s in second["statements"]}
    assert not old & new
    assert set(AuditLog.objects.filter(action__startswith="period.").values_list("action", flat=True)) == {
        "period.closed",
        "period.reopened",
    }


def test_only_an_ended_open_month_closes_and_only_the_latest_closed_month_reopens(month: Fleet) -> None:
    this_month = datetime.now(UTC).strftime("%Y-%m")
    for bad, field in ((this_month, "month"), ("2026-13", "month"), ("", "month")):
        response = close(month, month=bad)
        assert response.status_code == 400, bad
        assert field in response.json()["error"]["fields"]
    response = api_client(month.user("fiona")).post(
        "/api/v1/billing/periods/close/", {"month": MONTH, "colour": "red"}, format="json"
    )
    assert response.status_code == 400
    assert "colour" in response.json()["error"]["fields"]
    assert not Period.objects.exists()
    assert close(month, user="lena").status_code == 403
    assert close(month, user="alice").status_code == 403

    assert close(month, month="2026-10").status_code == 201
    assert close(month).status_code == 201
    again = close(month)
    assert again.status_code == 400
    assert "already closed" in again.json()["error"]["fields"]["month"][0]
    response = reopen(month, "a late invoice", month="2026-10")
    assert response.status_code == 400
    assert "2026-11" in response.json()["error"]["fields"]["month"][0]
    assert reopen(month, "a late invoice").status_code == 200
    assert reopen(month, "a late invoice", month="2026-10").status_code == 200


def test_another_organizations_months_are_invisible_and_untouchable(month: Fleet) -> None:
    assert close(month).status_code == 201
    mallory = api_client(month.world.users["mallory"])
    assert mallory.get("/api/v1/billing/periods/", {"organization": month.org.slug}).status_code == 404
    response = mallory.post(
        f"/api/v1/billing/periods/reopen/?organization={month.org.slug}", {"month": MONTH, "reason": "x"}
    )
    assert response.status_code == 404
    assert Period.objects.get(month=NOV).closed
    assert get(month, "alice", "/api/v1/billing/periods/").status_code == 403


def test_the_periods_page_closes_and_lists_the_issued_statements(month: Fleet, client: Any) -> None:
    client.force_login(month.user("fiona"))
    page = client.get("/billing/periods/")
    assert page.status_code == 200
    assert b'data-month="2026-11" data-state="open"' in page.content
    response = client.post("/billing/periods/", {"action": "close", "month": MONTH})
    assert response.status_code == 302
    page = client.get("/billing/periods/")
    assert b'data-month="2026-11" data-state="closed"' in page.content
    assert page.content.count(b'data-testid="issued-statement"') == 3
    costs = client.get("/billing/", {"month": MONTH})
    assert b'data-testid="month-closed"' in costs.content
    response = client.post("/billing/periods/", {"action": "reopen", "month": MONTH, "reason": ""})
    assert response.status_code == 400
    assert b"Say why the month is reopened" in response.content
    client.force_login(month.user("alice"))
    assert client.get("/billing/periods/").status_code == 403


@pytest.mark.parametrize("months", [1, 2])
def test_corrections_go_to_the_first_open_month_after_the_corrected_one(month: Fleet, months: int) -> None:
    assert close(month, month="2026-10").status_code == 201
    if months == 2:
        assert close(month).status_code == 201
    correct_prices(month, "3.5", effective_from="2026-10-20")
    booked = periods.adjust(month.org)
    # October had no usage: only November (if closed) has a correction, booked in December.
    assert {(a.corrects, a.month) for a in booked} == ({(NOV, DEC)} if months == 2 else set())
