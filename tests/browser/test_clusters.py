"""An admin watches a cluster's live view, drains a node from its page, and sees it marked on the live view.

Screenshots go to ``test-artifacts/browser/`` (``QM_SHOTS`` names another folder).
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest
from playwright.sync_api import Page, Request, expect

from clusters.models import Cluster, Node
from tests.browser.conftest import sign_in_as

pytestmark = pytest.mark.browser

SHOTS = Path(os.environ.get("QM_SHOTS") or Path(__file__).resolve().parents[2] / "test-artifacts" / "browser")
POLL_SECONDS = 5


def shot(page: Page, name: str) -> None:
    SHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SHOTS / f"{name}.png"), full_page=True)


def test_admin_drains_a_node_and_sees_it_on_the_live_view(page: Page, fleet: dict[str, Cluster]) -> None:
    h100 = fleet["onprem-h100"]
    node = Node.objects.get(cluster=h100, name="h100-00005")
    sign_in_as(page, "adam")

    page.get_by_role("navigation", name="Main").get_by_role("link", name="Clusters").click()
    rows = page.get_by_test_id("clusters").locator("tbody tr")
    expect(rows).to_have_count(3)
    expect(rows.filter(has_text="On-prem H100")).to_contain_text("Healthy")
    expect(rows.filter(has_text="On-prem H100")).to_contain_text("64 schedulable")
    shot(page, "clusters-list")

    rows.filter(has_text="On-prem H100").get_by_role("link", name="Live view").click()
    expect(page).to_have_url(re.compile(rf"/clusters/{h100.pk}/live/$"))
    live = page.get_by_test_id("live")
    # 64 nodes: InfiniBand blocks of 32 nodes, racks of 4.
    expect(live.get_by_role("heading", level=2)).to_have_text(["ib-block-000", "ib-block-001"])
    expect(live.locator(".domain")).to_have_count(16)
    expect(live.locator(".domain").first.get_by_role("heading", level=3)).to_contain_text("rack-000")
    expect(live.locator('.domain[data-domain="rack-001"] a.t')).to_have_count(4)
    expect(live.locator("a.t")).to_have_count(64)
    expect(page.get_by_test_id("legend")).to_contain_text("drained")
    shot(page, "cluster-live")

    # It polls its partial while the tab is visible, and stops while it is hidden.
    with page.expect_request(re.compile(r"/live/tiles/$"), timeout=(POLL_SECONDS + 3) * 1000):
        pass
    polls: list[Request] = []
    page.on("request", lambda request: polls.append(request) if "/live/tiles/" in request.url else None)
    page.evaluate(
        """() => {
            Object.defineProperty(document, 'visibilityState', {configurable: true, get: () => 'hidden'});
            document.dispatchEvent(new Event('visibilitychange'));
        }"""
    )
    page.wait_for_timeout((POLL_SECONDS + 1.5) * 1000)
    assert polls == []
    # Shown again, it asks at once. Let that answer be swapped in before clicking a tile: a click that lands
    # while the old tiles are being replaced goes nowhere.
    with page.expect_response(re.compile(r"/live/tiles/$"), timeout=3000):
        page.evaluate(
            """() => {
                Object.defineProperty(document, 'visibilityState', {configurable: true, get: () => 'visible'});
                document.dispatchEvent(new Event('visibilitychange'));
            }"""
        )

    page.wait_for_function("() => !document.querySelector('.htmx-request, .htmx-swapping, .htmx-settling')")
    live.locator(f'a.t[href="/clusters/nodes/{node.pk}/"]').click()
    expect(page.get_by_role("heading", level=1)).to_contain_text("h100-00005")
    expect(page.get_by_test_id("node-state")).to_have_text("Schedulable")
    form = page.get_by_test_id("drain-form")
    with page.expect_response(lambda r: r.request.method == "POST") as answer:
        form.get_by_role("button", name="Drain node").click()
    assert answer.value.status == 400
    expect(form.get_by_role("alert")).to_have_text("This field is required.")
    page.get_by_test_id("drain-form").locator("#drain_reason").fill("ECC errors on GPU 2; reseat and burn in")
    page.get_by_test_id("drain-form").get_by_role("button", name="Drain node").click()
    expect(page.get_by_role("status")).to_contain_text(re.compile(r"h100-00005 is (draining|drained)\."))
    expect(page.get_by_test_id("node-state")).to_have_text(re.compile("^(Draining|Drained)$"))
    expect(page.get_by_test_id("drains")).to_contain_text("ECC errors on GPU 2; reseat and burn in")
    expect(page.get_by_test_id("resume-form")).to_be_visible()
    shot(page, "node-drained")

    page.get_by_role("link", name="Live view").click()
    tile = page.get_by_test_id("live").locator(f'a.t[href="/clusters/nodes/{node.pk}/"]')
    expect(tile).to_have_class(re.compile(r"\b(drained|draining)\b"))
    expect(tile).to_have_attribute("title", re.compile(r"^h100-00005: \d+/8 used, (drained|draining)$"))
    expect(page.get_by_test_id("live-summary")).to_contain_text(re.compile(r"1 (drained|draining)"))
    tile.hover()
    shot(page, "cluster-live-drained")

    # Signed out elsewhere: the next poll takes the whole page to sign-in, back here after.
    page.context.clear_cookies()
    login = re.compile(rf"/login/\?next=%2Fclusters%2F{h100.pk}%2Flive%2F$")
    expect(page).to_have_url(login, timeout=(POLL_SECONDS + 3) * 1000)
    expect(page.get_by_role("heading", name="Sign in")).to_be_visible()


def test_researcher_reads_a_degraded_cluster_and_its_live_view_but_cannot_drain(
    page: Page, fleet: dict[str, Cluster]
) -> None:
    tpu = fleet["tpu-v5p"]
    error = "TPU API: 503 Service Unavailable: the zone us-central2-b is overloaded, try again later"
    Cluster.objects.filter(pk=tpu.pk).update(status=Cluster.Status.DEGRADED, last_error=error, failures=1)
    sign_in_as(page, "alice")
    page.goto("/clusters/")
    row = page.get_by_test_id("clusters").locator("tbody tr", has_text="Cloud TPU v5p")
    expect(row).to_contain_text("Degraded")
    expect(row.get_by_test_id("last-error")).to_have_text(error)
    shot(page, "clusters-list-degraded")

    row.get_by_role("link", name="Cloud TPU v5p").click()
    expect(page.get_by_test_id("sync")).to_contain_text(error)
    # A researcher is not shown the cluster's endpoint, credentials or backend options (server paths).
    expect(page.get_by_test_id("credentials")).to_have_count(0)
    expect(page.get_by_test_id("settings-note")).to_be_visible()
    expect(page.get_by_test_id("accelerator-types")).to_contain_text("v5p")
    expect(page.get_by_test_id("nodes").locator("tbody tr")).to_have_count(4)  # four v5p-32 slices
    shot(page, "cluster-detail")

    page.get_by_test_id("live-link").click()
    live = page.get_by_test_id("live")
    expect(live.locator("a.t")).to_have_count(4)
    expect(live.locator("a.t").first).to_have_attribute("title", re.compile(r"^v5p-32-00000: (0|16)/16 used$"))
    live.locator("a.t").first.click()
    expect(page.get_by_test_id("capacity")).to_contain_text("v5p")
    expect(page.get_by_test_id("drain-form")).to_have_count(0)
    expect(page.get_by_test_id("resume-form")).to_have_count(0)
    shot(page, "node-researcher")
