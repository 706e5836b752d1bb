"""The job page's GPU utilization in Chromium: a job of the demo's history, whose nodes' probes reported
(``demo/utilization.py``), shows its utilization over time drawn by Plotly, under the CSP, and its summary;
a lead opens the team's least efficient jobs and follows one to its page.
Screenshots go to ``test-artifacts/browser/`` (``QM_SHOTS`` names another folder)."""

from __future__ import annotations

import os
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from django.utils import timezone
from playwright.sync_api import Page, expect

from clusters.models import Cluster
from tests.browser.conftest import sign_in_as

pytestmark = pytest.mark.browser

SHOTS = Path(os.environ.get("QM_SHOTS") or Path(__file__).resolve().parents[2] / "test-artifacts" / "browser")


@pytest.fixture
def measured(fleet: dict[str, Cluster], demo: Any) -> dict[str, Any]:
    """Two days of the demo's history, its last three hours sampled as the demo's probes would have."""
    from demo.billing import seed_history
    from demo.jobs import seed_governance
    from demo.utilization import seed_history_samples
    from scheduler.models import Attempt

    seed_governance(demo)
    now = timezone.now().replace(second=0, microsecond=0)
    assert seed_history(demo, days=2, now=now) > 10
    # Vision's latest job of the history, sampled over its last hours: on a weekend the history is thin, and
    # none may have ended in the last few hours.
    attempt = (
        Attempt.objects.filter(job__team__slug="vision", ended_at__isnull=False)
        .select_related("job__team")
        .order_by("-ended_at")
        .first()
    )
    assert attempt is not None
    assert attempt.ended_at is not None
    assert seed_history_samples(demo, attempt.ended_at - timedelta(hours=3), attempt.ended_at) > 0
    return {"job": attempt.job, "team": attempt.job.team}


def test_the_job_page_plots_its_gpu_utilization(page: Page, measured: dict[str, Any]) -> None:
    errors: list[str] = []
    page.on("console", lambda message: errors.append(message.text) if message.type == "error" else None)
    sign_in_as(page, "alice")
    page.goto(f"/jobs/{measured['job'].pk}/")
    panel = page.get_by_test_id("utilization")
    expect(panel.locator(".js-plotly-plot")).to_have_count(1)
    assert panel.locator(".js-plotly-plot .scatterlayer .trace").count() >= 1
    expect(page.get_by_test_id("utilization-summary")).to_contain_text("GPU-hours")
    expect(page.get_by_test_id("utilization-nodes").locator("tbody tr").first).to_be_visible()
    assert not [e for e in errors if "Content Security Policy" in e or "Refused" in e], errors
    SHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SHOTS / "job-utilization.png"), full_page=True)


def test_a_lead_follows_the_least_efficient_job_to_its_page(page: Page, measured: dict[str, Any]) -> None:
    sign_in_as(page, "lena")
    page.goto(f"/jobs/efficiency/{measured['team'].pk}/")
    table = page.get_by_test_id("least-efficient")
    expect(table.locator("tbody tr").first).to_be_visible()
    table.locator("tbody tr a").first.click()
    expect(page.get_by_test_id("utilization").locator(".js-plotly-plot")).to_have_count(1)
