"""Finance asks for a capacity what-if in Chromium: the form beside today's fleet, a refusal by its field, then a
run on the demo fleet with a week of crowded history (Celery runs eagerly in the tests, so the run is done when
its page opens) whose page shows today's fleet beside the changed one, the charts drawn by Plotly.

Screenshots go to ``test-artifacts/browser/`` (``QM_SHOTS`` names another folder).
"""

from __future__ import annotations

import os
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.utils import timezone
from playwright.sync_api import Page, expect

from billing.actions import whatif
from billing.models import WhatIf
from clusters.models import AcceleratorType, Cluster
from tenancy.models import Team
from tests.billing import whatif_history as h
from tests.browser.conftest import sign_in_as

pytestmark = pytest.mark.browser

SHOTS = Path(os.environ.get("QM_SHOTS") or Path(__file__).resolve().parents[2] / "test-artifacts" / "browser")


def shot(page: Page, name: str) -> None:
    SHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SHOTS / f"{name}.png"), full_page=True)


def test_finance_asks_for_a_what_if_and_reads_it_side_by_side(page: Page, fleet: dict[str, Cluster], demo: Any) -> None:
    onprem = fleet["onprem-h100"]
    team, alice = Team.objects.get(slug="vision"), User.objects.get(username="alice")
    start = timezone.now() - timedelta(days=6)
    for i in range(160):  # 128 H100 every 54 minutes for six days, half of them for eight hours: 5/4 of the H100
        h.job(
            team,
            alice,
            start + timedelta(hours=i * 0.9),
            where=onprem,
            workers=16,
            ran=3600.0 * (1 + 7 * (i % 2)),
            accelerator_types=[h.H100],
        )
    sign_in_as(page, "fiona")
    page.goto("/billing/what-ifs/")
    expect(page.get_by_role("heading", name="Capacity what-ifs")).to_be_visible()
    expect(page.get_by_test_id("fleet-table")).to_contain_text(h.H100)
    form = page.get_by_test_id("what-if-form")
    form.get_by_label("Cluster").select_option(label="On-prem H100 (onprem-h100)")
    form.get_by_label("Accelerator type").select_option(label=h.H100)
    form.get_by_label("Nodes").fill("-500")
    form.get_by_label("Days of history").fill("7")
    form.get_by_role("button", name="Replay the history").click()
    expect(page.get_by_text("at most 64 can go")).to_be_visible()
    shot(page, "what-if-refused")
    assert not WhatIf.objects.exists()

    page.set_default_timeout(120_000)  # the task runs eagerly, inside the request that asks for it
    page.get_by_test_id("what-if-form").get_by_label("Nodes").fill("32")
    page.get_by_test_id("what-if-form").get_by_role("button", name="Replay the history").click()
    expect(page.get_by_test_id("what-if-state")).to_have_text("Done", timeout=60_000)
    comparison = page.get_by_test_id("what-if-comparison")
    expect(comparison.get_by_role("rowheader", name="Mean queue wait")).to_be_visible()
    expect(page.locator("[data-testid=what-if-chart] .main-svg").first).to_be_visible()  # drawn by Plotly
    expect(page.locator("[data-testid=what-if-daily] .main-svg").first).to_be_visible()
    shot(page, "what-if-result")
    what_if = WhatIf.objects.get()
    assert what_if.status == WhatIf.Status.DONE
    assert what_if.result["changed"]["mean_wait_s"] < what_if.result["today"]["mean_wait_s"]
    page.goto("/billing/what-ifs/")
    expect(page.get_by_test_id("what-if-row")).to_contain_text("+32 H100-SXM-80GB nodes in On-prem H100")
    shot(page, "what-if-list")


def test_a_running_what_if_shows_its_progress_and_then_its_result(
    page: Page, fleet: dict[str, Cluster], demo: Any
) -> None:
    onprem = fleet["onprem-h100"]
    team, alice = Team.objects.get(slug="vision"), User.objects.get(username="alice")
    start = timezone.now() - timedelta(days=2)
    for i in range(24):
        h.job(team, alice, start + timedelta(hours=i), where=onprem, workers=8, accelerator_types=[h.H100])
    kind = AcceleratorType.objects.get(organization=demo, name=h.H100)
    what_if = WhatIf.objects.create(
        organization=demo,
        requested_by=User.objects.get(username="adam"),
        cluster=onprem,
        flavor=kind,
        nodes=-8,
        days=2,
        status=WhatIf.Status.RUNNING,
        progress=0.37,
        created_at=timezone.now(),
        started_at=timezone.now(),
        claimed_until=timezone.now() - timedelta(seconds=1),  # its worker died: the next run takes it over
    )
    sign_in_as(page, "adam")
    page.goto(f"/billing/what-ifs/{what_if.pk}/")
    expect(page.get_by_test_id("what-if-state")).to_have_text("Running")
    expect(page.get_by_test_id("what-if-percent")).to_contain_text("37% · replaying on today's fleet")
    expect(page.get_by_label("Progress")).to_have_attribute("value", "37")
    shot(page, "what-if-running")
    assert whatif.run(what_if.pk) == "done"
    expect(page.get_by_test_id("what-if-state")).to_have_text("Done", timeout=15_000)  # the 2-second poll
    expect(page.locator("[data-testid=what-if-chart] .main-svg").first).to_be_visible()
    expect(page.get_by_test_id("what-if-comparison")).to_contain_text("Accelerators of the type")
