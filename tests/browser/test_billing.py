"""Finance's pages in Chromium: fiona reads October's costs (the charts drawn by Plotly), downloads the fleet
summary as XLSX and finds in it the fleet total the page shows, opens a team's statement, and adds an on-prem
price to the book (the on-prem fields shown only for on-prem capacity; a refusal beside its field first);
alice reads her team's costs and nothing of another team's.

October is the demo's history (``demo/billing.py``): the teams' jobs through every day, placed on the demo
fleet and metered, priced by the demo's price book, with its shared overhead.
Screenshots go to ``test-artifacts/browser/`` (``QM_SHOTS`` names another folder).
"""

from __future__ import annotations

import io
import os
import re
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from django.core.cache import cache
from openpyxl import load_workbook
from playwright.sync_api import Page, expect

from clusters.models import Cluster, Node
from tests.browser.conftest import sign_in_as

pytestmark = pytest.mark.browser

SHOTS = Path(os.environ.get("QM_SHOTS") or Path(__file__).resolve().parents[2] / "test-artifacts" / "browser")
OCTOBER = "/billing/?month=2026-10"


def shot(page: Page, name: str) -> None:
    SHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SHOTS / f"{name}.png"), full_page=True)


def number(value: str) -> Decimal:
    return Decimal(value.strip().replace(",", ""))


@pytest.fixture
def billed(fleet: dict[str, Cluster], demo: Any) -> Any:
    """The demo's governance and its history up to November: jobs of Vision and Robotics arriving through
    every day of October, placed on the demo fleet and metered, with the demo's price book and overhead."""
    from demo.billing import seed_history
    from demo.jobs import seed_governance

    seed_governance(demo)
    assert seed_history(demo, days=45, now=datetime(2026, 11, 1, tzinfo=UTC)) > 100
    cache.clear()
    return demo


def test_finance_reads_the_month_and_downloads_the_fleet_summary(page: Page, billed: Any) -> None:
    sign_in_as(page, "fiona")
    page.goto(OCTOBER)
    expect(page.get_by_role("heading", level=1)).to_contain_text("Demo Research Lab · October 2026")
    chart = page.get_by_test_id("cost-chart")
    expect(chart.locator(".js-plotly-plot")).to_have_count(1)
    expect(chart.locator(".legendtext")).to_have_count(2)
    assert sorted(chart.locator(".legendtext").all_text_contents()) == ["Robotics", "Vision"]
    expect(page.get_by_test_id("idle-chart").locator(".js-plotly-plot .barlayer .trace")).to_have_count(1)
    expect(page.get_by_test_id("budget-burn-chart").locator(".js-plotly-plot")).to_have_count(1)
    fleet_total = number(page.locator('[data-figure="fleet-total"] .figure').inner_text())
    assert fleet_total > 0
    shown = [number(t) for t in page.locator('[data-testid="team-costs"] tbody [data-cell="total"]').all_inner_texts()]
    assert (
        sum(shown)
        == fleet_total
        == number(page.get_by_test_id("fleet-total-row").locator('[data-cell="total"]').inner_text())
    )
    shot(page, "costs-finance")

    with page.expect_download() as download:
        page.get_by_test_id("fleet-xlsx").click()
    assert download.value.suggested_filename == "fleet-demo-2026-10.xlsx"
    book = load_workbook(io.BytesIO(download.value.path().read_bytes()), read_only=True)
    header, *rows = list(book["Teams"].iter_rows(values_only=True))
    total = header.index("total")
    teams = [row for row in rows if row[1] != "Fleet total"]
    assert {row[1] for row in teams} >= {"Vision", "Robotics"}
    assert sum(Decimal(str(row[total])) for row in teams) == fleet_total

    page.get_by_test_id("team-row").filter(has_text="Vision").get_by_role("link", name="Vision").click()
    expect(page.get_by_role("heading", level=1)).to_contain_text("Statement of Vision")
    expect(page.get_by_test_id("team-days-chart").locator(".js-plotly-plot")).to_have_count(1)
    expect(page.get_by_test_id("statement-line").first).to_be_visible()
    shot(page, "costs-team-finance")


def test_finance_adds_an_on_prem_price(page: Page, billed: Any) -> None:
    # A price from the first of a month to come: "scheduled" whatever today is.
    starts = (datetime.now(UTC).date().replace(day=1) + timedelta(days=62)).replace(day=1).isoformat()
    from billing.models import Price

    sign_in_as(page, "fiona")
    page.goto("/billing/prices/")
    expect(page.get_by_test_id("price-group").first).to_be_visible()
    before = Price.objects.count()
    page.get_by_test_id("price-new").locator("summary").click()
    form = page.get_by_test_id("price-form")
    # A cloud price asks for the hourly rate; an on-prem one for what a node costs.
    form.get_by_label("Capacity type").select_option("spot")
    expect(form.get_by_label("Price of an accelerator-hour")).to_be_visible()
    expect(form.get_by_test_id("on-prem-fields")).to_be_hidden()
    form.get_by_label("Capacity type").select_option("on_prem")
    expect(form.get_by_test_id("on-prem-fields")).to_be_visible()
    expect(form.get_by_test_id("cloud-fields")).to_be_hidden()

    form.get_by_label("Cluster").select_option("onprem-h100")
    h100 = Node.objects.filter(cluster=billed.clusters.get(slug="onprem-h100"), accelerator__isnull=False)
    form.get_by_label("Accelerator type").select_option(str(h100.values_list("accelerator__name", flat=True).first()))
    form.get_by_label("Effective from").fill(starts)
    form.get_by_label("Purchase price of a node").fill("300000")
    form.get_by_label("Accelerators per node").fill("8")
    form.get_by_label("Power a node draws").fill("-3")
    form.get_by_label("Energy price").fill("0.2")
    form.get_by_label("Hosting a month").fill("1400")
    form.get_by_role("button", name="Add the price").click()
    form = page.get_by_test_id("price-form")
    expect(form.locator(".field.invalid").filter(has=page.locator('[name="depreciation_months"]'))).to_contain_text(
        "This field is required for an on-prem price."
    )
    expect(form.locator(".field.invalid").filter(has=page.locator('[name="power_kw"]'))).to_be_visible()
    expect(form.get_by_label("Purchase price of a node")).to_have_value("300000")
    assert Price.objects.count() == before
    shot(page, "prices-refused")

    form.get_by_label("Depreciation period").fill("60")
    form.get_by_label("Power a node draws").fill("10.5")
    form.get_by_role("button", name="Add the price").click()
    expect(page.locator(".flash")).to_contain_text(
        f"Price added: H100-SXM-80GB on On-prem H100, on-prem, from {starts}"
    )
    added = Price.objects.get(effective_from=starts)
    row = page.locator(f"#price-{added.pk}")
    expect(row.locator('[data-cell="rate"]')).to_have_text(re.compile(r"^\d+\.\d{2,6}$"))
    expect(row.locator('[data-cell="inputs"]')).to_contain_text("300,000.00 a node over 60 months")
    expect(row).to_contain_text("scheduled")
    assert Price.objects.count() == before + 1
    shot(page, "prices")


def test_a_researcher_reads_only_her_teams_costs(page: Page, billed: Any) -> None:
    sign_in_as(page, "alice")
    page.goto(OCTOBER)
    expect(page.get_by_role("heading", level=1)).to_contain_text("Vision · October 2026")
    expect(page.get_by_test_id("cost-chart").locator(".js-plotly-plot")).to_have_count(1)
    expect(page.get_by_test_id("team-row")).to_have_count(1)
    expect(page.get_by_test_id("project-costs")).to_contain_text("Segmentation")
    from scheduler.models import Job

    html = page.content()
    for other in ("Robotics", "bob", "Fleet total", "Platform team"):
        assert other not in html, other
    theirs = Job.objects.filter(team__slug="robotics").values_list("name", flat=True)
    assert theirs
    assert not [name for name in theirs if name in html]
    shot(page, "costs-researcher")
