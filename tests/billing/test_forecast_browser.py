"""Finance reads the Procurement page in Chromium: half a year of growing H100 demand, its chart drawn with the
forecast's bands and the capacity line, the backtest's MAPE beside it, the weeks demand may pass capacity,
and the switch to six months swapped in by htmx with its chart drawn again.

Chromium is driven from a thread of its own: Playwright's sync API keeps an event loop running in the thread
that starts it, and the browser tests' session-wide browser (``tests/browser/conftest.py``) may hold this one.
Screenshots go to ``test-artifacts/browser/`` (``QM_SHOTS`` names another folder).
"""

from __future__ import annotations

import os
import random
import threading
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path

import pytest
from django.utils import timezone
from playwright.sync_api import Page, expect, sync_playwright

from tests.billing.test_forecast_history import Lab, lab  # noqa: F401 - the fixture
from tests.browser.conftest import CHROMIUM, CHROMIUM_ARGS, _require_chromium, sign_in_as

pytestmark = pytest.mark.browser

SHOTS = Path(os.environ.get("QM_SHOTS") or Path(__file__).resolve().parents[2] / "test-artifacts" / "browser")
WEEK = (1.0, 1.1, 1.15, 1.1, 1.0, 0.55, 0.45)


def shot(page: Page, name: str) -> None:
    SHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SHOTS / f"{name}.png"), full_page=True)


def in_chromium(base_url: str, steps: Callable[[Page], None]) -> None:
    """Run ``steps`` on a fresh page of a headless Chromium started in a thread of its own; what they raise is
    raised here."""
    _require_chromium()
    failures: list[BaseException] = []

    def run() -> None:
        try:
            with sync_playwright() as playwright:
                browser = playwright.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS, headless=True)
                context = browser.new_context(base_url=base_url, viewport={"width": 1280, "height": 800})
                context.set_default_timeout(10_000)
                try:
                    steps(context.new_page())
                finally:
                    context.close()
                    browser.close()
        except BaseException as failure:  # noqa: BLE001 - handed to the test's thread
            failures.append(failure)

    thread = threading.Thread(target=run)
    thread.start()
    thread.join()
    if failures:
        raise failures[0]


@pytest.fixture
def growing(lab: Lab, live_server) -> Lab:  # noqa: F811 - the fixture imported above
    """180 days to yesterday: H100 demand growing from about 170 to 330 accelerator-hours a day with a working
    week, on two nodes of 8 (384 a day); A100 a flat 40 a day on its node of 4 for the last 60 days."""
    rnd = random.Random(5)
    today = timezone.now().date()
    for i in range(180, 0, -1):
        day = today - timedelta(days=i)
        level = (170 + (180 - i) * 0.9) * WEEK[day.weekday()] + rnd.gauss(0, 12)
        for node in (0, 1):
            lab.capacity(day, 86_400, node=node)
            lab.usage(day, int(min(level / 2, 192) * 3600 / 8), 8000, node=node)
        if i <= 60:
            lab.capacity(day, 86_400, "A100", accelerators=4)
            lab.usage(day, int((40 + rnd.gauss(0, 3)) * 3600 / 4), 4000, "A100")
    return lab


def test_finance_reads_demand_against_capacity_and_switches_horizon(growing: Lab, live_server):
    def steps(page: Page) -> None:
        sign_in_as(page, "fiona")
        page.goto("/billing/capacity/")
        h100 = page.locator('[data-testid="capacity-flavor"][data-flavor="H100"]')
        expect(h100.locator(".main-svg").first).to_be_visible()  # Plotly drew the chart
        expect(h100.get_by_test_id("backtest-table")).to_contain_text("4 weeks")
        expect(h100.get_by_test_id("forecast-verdict")).to_contain_text("backtests")
        expect(h100.get_by_test_id("team-forecasts")).to_contain_text("Vision")
        expect(h100.get_by_test_id("shortfall-table")).to_be_visible()
        expect(page.locator('[data-flavor="A100"] .main-svg').first).to_be_visible()
        shot(page, "capacity-12-weeks")
        page.get_by_role("link", name="Next 6 months (weekly)").click()
        expect(page.get_by_test_id("capacity-forecasts")).to_have_attribute("data-horizon", "6m")
        expect(page).to_have_url(f"{page.url.split('?')[0]}?horizon=6m")
        expect(h100.locator(".main-svg").first).to_be_visible()
        expect(h100.get_by_test_id("backtest-table")).to_contain_text("12 weeks")
        shot(page, "capacity-6-months")

    in_chromium(live_server.url, steps)
