"""Fixtures for the browser tests: Debian's Chromium driven by Playwright's sync API against `live_server`.

Playwright's sync API keeps an asyncio event loop running in the test thread, so Django's async-safety
check would refuse every ORM call made from a test or fixture; it is turned off for these tests only.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import Browser, Page, expect, sync_playwright

os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = "true"

CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--disable-quic",
]


def _require_chromium() -> None:
    if CHROMIUM.exists():
        return
    if os.environ.get("CI"):
        pytest.fail(f"{CHROMIUM} is required in CI to run the browser tests (apt-get install chromium)")
    pytest.skip("Debian's chromium is not installed (apt-get install chromium); browser tests skipped")


@pytest.fixture(scope="session")
def browser() -> Iterator[Browser]:
    """One headless Chromium for the whole session."""
    _require_chromium()
    with sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS, headless=True)
        yield chromium
        chromium.close()


@pytest.fixture
def page(browser: Browser, live_server) -> Iterator[Page]:
    """A fresh browser context (no cookies) per test, with relative URLs resolved against the live server."""
    context = browser.new_context(base_url=live_server.url, viewport={"width": 1280, "height": 800})
    context.set_default_timeout(10_000)
    # Assertions wait as long as actions do: panels load after the page (htmx), and CI runs four workers on two
    # cores beside PostgreSQL (a Plotly panel once took over expect's default 5 s there).
    expect.set_options(timeout=10_000)
    try:
        yield context.new_page()
    finally:
        context.close()


@pytest.fixture
def demo(transactional_db):
    """The demo organization: teams Vision, Robotics and Language and one user per role."""
    from demo.tenancy import seed_demo

    return seed_demo()


@pytest.fixture
def fleet(demo, settings, tmp_path) -> dict[str, Any]:
    """The demo fleet (three simulated clusters), synced, by slug; its simulated state under ``tmp_path``."""
    from clusters.models import Cluster
    from demo.fleet import seed_demo_fleet, sync_demo_fleet

    settings.VAR_DIR = tmp_path
    seed_demo_fleet(demo)
    sync_demo_fleet(demo)
    return {c.slug: c for c in Cluster.objects.filter(organization=demo)}


def sign_in_as(page: Page, username: str) -> None:
    """Sign in with the demo password and wait until the page says who is signed in."""
    from playwright.sync_api import expect

    from demo.tenancy import DEMO_PASSWORD

    page.goto("/login/")
    page.locator("#id_username").fill(username)
    page.locator("#id_password").fill(DEMO_PASSWORD)
    page.get_by_role("button", name="Sign in").click()
    expect(page.get_by_test_id("username")).to_have_text(username)
