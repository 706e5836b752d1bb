"""An admin registers a cluster (its credentials never shown back), plans maintenance and issues a probe
token on a cluster's page; a researcher sees none of those forms.

Screenshots go to ``qm-shots/`` in the temporary folder (``/tmp/qm-shots/``) (``QM_ADMIN_SHOTS`` names another folder).
"""

from __future__ import annotations

import os
import re
import tempfile
from datetime import timedelta
from pathlib import Path

import pytest
from django.utils import timezone
from playwright.sync_api import Page, expect

from clusters.models import Cluster, MaintenanceWindow, ProbeToken
from tests.browser.conftest import sign_in_as

pytestmark = pytest.mark.browser

SHOTS = Path(os.environ.get("QM_ADMIN_SHOTS") or Path(tempfile.gettempdir()) / "qm-shots")
TOKEN = "eyJhbGciOiJSUzI1NiJ9.qm-browser-test-bearer.c2VjcmV0LXNpZ25hdHVyZQ"
FORM_ADMIN = ("maintenance-form", "probe-token-form", "probe-tokens", "sync-form", "edit-link")


def shot(page: Page, name: str) -> None:
    SHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SHOTS / f"admin-{name}.png"), full_page=True)
    # The cluster page is long (its nodes): its maintenance and probe-token columns close up as well.
    windows = page.get_by_test_id("windows")
    if windows.count():
        windows.locator("xpath=ancestor::div[contains(@class, 'columns')]").screenshot(
            path=str(SHOTS / f"admin-{name}-forms.png")
        )


def field(page: Page, field_id: str):
    return page.get_by_test_id("cluster-form").locator(".field", has=page.locator(f"#{field_id}"))


def test_admin_adds_a_kubernetes_cluster_and_its_token_is_never_shown(page: Page, fleet: dict[str, Cluster]) -> None:
    sign_in_as(page, "adam")
    page.goto("/clusters/")
    page.get_by_test_id("add-cluster").click()
    expect(page).to_have_url(re.compile(r"/clusters/new/$"))
    expect(page.get_by_role("heading", name="Add cluster")).to_be_visible()
    form = page.get_by_test_id("cluster-form")
    form.locator("#id_name").fill("Lab GKE")
    form.locator("#id_kind").select_option("kubernetes")
    # Loopback (allowed outside production) on the discard port: the eager first sync fails at once.
    form.locator("#id_endpoint").fill("https://127.0.0.1:9")
    form.locator("#id_region").fill("eu-west")
    form.locator("#id_levels").fill("zone, rack")
    form.locator("#id_kubernetes_token").fill(TOKEN)
    expect(form.locator("#id_kubernetes_token")).to_have_attribute("type", "password")
    shot(page, "add-filled")
    form.get_by_role("button", name="Add cluster").click()

    cluster = Cluster.objects.get(organization=fleet["onprem-h100"].organization, slug="lab-gke")
    expect(page).to_have_url(re.compile(rf"/clusters/{cluster.pk}/$"))
    expect(page.get_by_role("status")).to_contain_text("Lab GKE is registered")
    expect(page.get_by_test_id("credentials")).to_have_text("credentials set")
    expect(page.get_by_test_id("settings")).to_contain_text("https://127.0.0.1:9")
    assert TOKEN not in page.content()
    shot(page, "added-detail")

    cluster.refresh_from_db()
    assert cluster.kind == "kubernetes"
    assert cluster.levels == ["zone", "rack"]
    assert cluster.credentials() == {"token": TOKEN}

    page.get_by_test_id("edit-link").click()
    expect(page).to_have_url(re.compile(rf"/clusters/{cluster.pk}/edit/$"))
    expect(page.get_by_test_id("cluster-form").get_by_test_id("credentials")).to_contain_text("credentials set")
    expect(page.locator("#id_kubernetes_token")).to_have_value("")
    expect(page.locator("#id_kind")).to_have_count(0)  # fixed once registered
    expect(page.locator("#id_slurm_token")).to_have_count(0)
    assert TOKEN not in page.content()
    shot(page, "edit")


def test_add_form_shows_a_bad_endpoint_beside_its_field_and_creates_nothing(
    page: Page, fleet: dict[str, Cluster]
) -> None:
    before = Cluster.objects.count()
    sign_in_as(page, "adam")
    page.goto("/clusters/new/")
    form = page.get_by_test_id("cluster-form")
    form.locator("#id_name").fill("Old FTP")
    form.locator("#id_kind").select_option("kubernetes")
    form.locator("#id_endpoint").fill("ftp://k8s.example.org")
    form.locator("#id_region").fill("eu-west")
    form.locator("#id_kubernetes_token").fill(TOKEN)
    with page.expect_response(lambda r: r.request.method == "POST") as answer:
        form.get_by_role("button", name="Add cluster").click()
    assert answer.value.status == 400
    endpoint = field(page, "id_endpoint")
    expect(endpoint).to_have_class(re.compile(r"\binvalid\b"))
    expect(endpoint.get_by_role("alert")).to_have_text("Enter an http:// or https:// URL.")
    expect(page.get_by_test_id("cluster-form").get_by_role("alert")).to_have_count(1)
    # What was typed is kept, except the secret.
    expect(page.locator("#id_name")).to_have_value("Old FTP")
    expect(page.locator("#id_kubernetes_token")).to_have_value("")
    assert TOKEN not in page.content()
    shot(page, "add-error")
    assert Cluster.objects.count() == before
    assert not Cluster.objects.filter(name="Old FTP").exists()


def test_admin_plans_maintenance_and_issues_then_revokes_a_probe_token(page: Page, fleet: dict[str, Cluster]) -> None:
    h100 = fleet["onprem-h100"]
    sign_in_as(page, "adam")
    page.goto(f"/clusters/{h100.pk}/")
    expect(page.get_by_role("heading", level=1)).to_contain_text("On-prem H100")
    windows = page.get_by_test_id("windows")
    expect(windows).to_contain_text("No maintenance planned.")
    shot(page, "detail")

    now = timezone.now().replace(second=0, microsecond=0)
    starts, ends = now + timedelta(hours=2), now + timedelta(hours=4)
    form = page.get_by_test_id("maintenance-form")
    form.locator("#maintenance_starts_at").fill(starts.strftime("%Y-%m-%dT%H:%M"))
    form.locator("#maintenance_ends_at").fill(ends.strftime("%Y-%m-%dT%H:%M"))
    form.locator("#maintenance_reason").fill("Firmware update of the InfiniBand switches")
    form.get_by_role("button", name="Plan maintenance").click()
    expect(page.get_by_role("status")).to_contain_text("The maintenance window is planned.")
    row = page.get_by_test_id("windows").locator("tbody tr")
    expect(row).to_have_count(1)
    expect(row).to_contain_text("Firmware update of the InfiniBand switches")
    expect(row).to_contain_text(starts.strftime("%Y-%m-%d %H:%M"))
    expect(row).to_contain_text(ends.strftime("%Y-%m-%d %H:%M"))
    expect(row).to_contain_text("adam")
    window = MaintenanceWindow.objects.get(cluster=h100)
    assert (window.starts_at, window.ends_at) == (starts, ends)
    shot(page, "maintenance-planned")

    tokens = page.get_by_test_id("probe-tokens")
    expect(tokens.get_by_test_id("probe-token-list")).to_contain_text("No probe tokens.")
    tokens.locator("#probe_token_name").fill("rack-000 image")
    tokens.get_by_role("button", name="Issue probe token").click()
    raw = page.get_by_test_id("new-probe-token").inner_text().strip()
    assert len(raw) >= 20
    token = ProbeToken.objects.get(cluster=h100, name="rack-000 image")
    assert raw.startswith(token.hint)
    command = page.get_by_test_id("probe-command")
    expect(command).to_contain_text(f"QM_PROBE_TOKEN={raw} python3 node_probe.py --url http://")
    listed = page.get_by_test_id("probe-token-list").locator("tbody tr", has_text="rack-000 image")
    expect(listed).to_contain_text(f"{token.hint}…")
    shot(page, "probe-token-issued")

    page.goto(f"/clusters/{h100.pk}/")
    expect(page.get_by_test_id("new-probe-token")).to_have_count(0)
    expect(page.get_by_test_id("probe-command")).to_have_count(0)
    assert raw not in page.content()
    listed = page.get_by_test_id("probe-token-list").locator("tbody tr", has_text="rack-000 image")
    listed.get_by_role("button", name="Revoke").click()
    expect(page.get_by_role("status")).to_contain_text("Probe token rack-000 image is revoked.")
    listed = page.get_by_test_id("probe-token-list").locator("tbody tr", has_text="rack-000 image")
    expect(listed.locator(".badge")).to_have_text("revoked")
    expect(listed.get_by_role("button", name="Revoke")).to_have_count(0)
    token.refresh_from_db()
    assert token.revoked_at is not None
    shot(page, "probe-token-revoked")


def test_researcher_sees_no_admin_forms_on_the_cluster_page(page: Page, fleet: dict[str, Cluster]) -> None:
    h100 = fleet["onprem-h100"]
    sign_in_as(page, "alice")
    page.goto(f"/clusters/{h100.pk}/")
    expect(page.get_by_role("heading", level=1)).to_contain_text("On-prem H100")
    expect(page.get_by_test_id("windows")).to_be_visible()
    for testid in FORM_ADMIN:
        expect(page.get_by_test_id(testid)).to_have_count(0)
    expect(page.get_by_role("button", name=re.compile("Sync now|Plan maintenance|Issue probe token"))).to_have_count(0)
    expect(page.get_by_role("link", name="Edit cluster")).to_have_count(0)
    shot(page, "researcher-detail")
    for path in (f"/clusters/{h100.pk}/edit/", "/clusters/new/"):
        response = page.goto(path)
        assert response is not None
        assert response.status == 403
