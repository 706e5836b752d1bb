"""The service pages in Chromium: a researcher makes a service through the form (a bad field refused beside
it), finds it in the list, and reads its page: endpoint and curl, the load chart drawn, replicas, revisions."""

from __future__ import annotations

import tempfile
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from django.utils import timezone
from playwright.sync_api import Page, expect

from governance.models import PriorityTier
from serving.models import Service, ServiceSample
from tenancy.models import Organization
from tests.browser.conftest import sign_in_as

pytestmark = pytest.mark.browser
SHOTS = Path(tempfile.gettempdir()) / "qm-shots" / "services"


def shot(page: Page, name: str) -> None:
    SHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SHOTS / f"{name}.png"), full_page=True)


def test_a_service_made_through_the_form_and_its_page(page: Page, fleet: dict[str, Any]) -> None:
    PriorityTier.objects.create(
        organization=Organization.objects.get(slug="demo"), name="normal", value=50, is_default=True
    )
    sign_in_as(page, "alice")
    page.get_by_role("navigation", name="Main").get_by_role("link", name="Models", exact=True).click()
    page.get_by_role("navigation", name="Models").get_by_role("link", name="Services", exact=True).click()
    expect(page.get_by_test_id("no-services")).to_be_visible()
    page.get_by_test_id("service-new-link").click()
    page.get_by_label("Name").fill("chat-api")
    page.get_by_label("Image").fill("ghcr.io/lab/serve:1")
    page.get_by_label("Command").fill("python3 deploy/model_server.py --port $PORT")
    page.get_by_label("CPU (cores)").fill("lots")
    page.get_by_role("button", name="Create service").click()
    expect(page.locator(".field.invalid").filter(has_text="Give a number of cores.")).to_be_visible()
    shot(page, "new-400")
    page.get_by_label("CPU (cores)").fill("0.5")
    page.get_by_role("button", name="Create service").click()
    expect(page.get_by_test_id("service-endpoint")).to_contain_text("/serve/demo/vision/chat-api/")
    service = Service.objects.get(name="chat-api")
    now = timezone.now()
    for i in range(60):
        ServiceSample.objects.create(
            service=service,
            at=now - timedelta(seconds=5 * (60 - i)),
            requests=50 + i * 5,
            rps=10 + i,
            p50_ms=40,
            p95_ms=60 + i,
            replicas_ready=1 + i // 15,
            replicas_desired=1 + i // 12,
        )
    page.reload()
    expect(page.get_by_test_id("service-curl")).to_contain_text('curl -H "Authorization: Bearer $QM_TOKEN"')
    expect(page.locator("[data-testid=service-chart] .main-svg").first).to_be_visible()
    expect(page.get_by_test_id("service-revisions")).to_contain_text("r1")
    shot(page, "detail")
    page.get_by_role("link", name="Update (new revision)").click()
    page.get_by_label("Image").fill("ghcr.io/lab/serve:2")
    page.get_by_role("button", name="Save").click()
    expect(page.get_by_test_id("service-revisions")).to_contain_text("Rolling out")
    page.get_by_role("link", name="← All services").click()
    expect(page.get_by_test_id("services")).to_contain_text("chat-api")
    shot(page, "list")
