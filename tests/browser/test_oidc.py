"""Sign-in through the organisation's identity provider in Chromium, end to end against a real OpenID provider
(tests/oidc/provider.mjs): the portal's sign-in page, the provider's login form, back signed in with the teams
and roles of the groups claim; a later sign-in follows changed groups; a user the provider no longer knows is
deactivated and cannot come back."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth.models import User
from playwright.sync_api import Browser, Page, expect

from tenancy import actions
from tenancy.actions import identity
from tenancy.models import AuditLog, Membership
from tests.browser.conftest import sign_in_as
from tests.oidc.fixtures import LoopbackProvider, account, oidc_provider, oidc_settings

__all__ = ["oidc_provider", "oidc_settings"]

pytestmark = pytest.mark.browser

SHOTS = Path(os.environ.get("QM_SHOTS") or Path(__file__).resolve().parents[2] / "test-artifacts" / "browser")


def shot(page: Page, name: str) -> None:
    SHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SHOTS / f"oidc-{name}.png"), full_page=True)


def teams_shown(page: Page) -> list[str]:
    page.goto("/teams/")
    return sorted(page.locator("table tbody tr td:first-child a").all_inner_texts())


def provider_login(page: Page, username: str, password: str) -> None:
    expect(page.get_by_role("heading", name="Test identity provider")).to_be_visible()
    page.locator("#idp-username").fill(username)
    page.locator("#idp-password").fill(password)
    page.get_by_role("button", name="Log in").click()


def test_sign_in_with_the_provider_follows_groups_and_ends_for_unknown_users(
    page: Page, browser: Browser, live_server: Any, demo: Any, oidc_settings: LoopbackProvider
) -> None:
    root = User.objects.create_superuser("root", password="pw")  # the installation's administrator maps groups
    vision, robotics = demo.teams.get(slug="vision"), demo.teams.get(slug="robotics")
    actions.map_group(root, demo, group="ml-vision", role="researcher", team=vision)
    actions.map_group(root, demo, group="robotics-leads", role="lead", team=robotics)
    oidc_settings.set_accounts(
        {"carol": account("s3cret", ["ml-vision"], email="carol@example.org", preferred_username="carol")}
    )

    page.goto("/jobs/")
    shot(page, "1-sign-in-page")
    page.get_by_role("link", name="Sign in with Example SSO").click()
    assert page.url.startswith(f"{oidc_settings.issuer}/interaction/")
    provider_login(page, "carol", "wrong")
    expect(page.get_by_role("alert")).to_have_text("Unknown user or wrong password.")
    provider_login(page, "carol", "s3cret")
    expect(page.get_by_test_id("username")).to_have_text("carol")
    assert page.url.endswith("/jobs/")  # back where the sign-in started
    shot(page, "2-signed-in")
    assert teams_shown(page) == ["Vision"]
    carol = User.objects.get(username="carol")
    assert set(Membership.objects.filter(user=carol).values_list("team__slug", "role", "source")) == {
        ("vision", "researcher", "provider")
    }

    # The groups change at the provider: the next sign-in follows them (the provider's session is still open,
    # so it sends the browser straight back).
    oidc_settings.set_groups("carol", ["robotics-leads"])
    page.get_by_role("button", name="Sign out").click()
    page.get_by_role("link", name="Sign in with Example SSO").click()
    expect(page.get_by_test_id("username")).to_have_text("carol")
    assert teams_shown(page) == ["Robotics"]
    shot(page, "3-groups-changed")
    assert set(Membership.objects.filter(user=carol).values_list("team__slug", "role")) == {("robotics", "lead")}

    # The admin's page shows where each membership comes from.
    admin = browser.new_context(base_url=live_server.url)
    admin_page = admin.new_page()
    sign_in_as(admin_page, "adam")
    admin_page.get_by_role("link", name="Identity provider").click()
    row = admin_page.locator('[data-testid="membership-sources"] tr[data-user="carol"]')
    expect(row).to_contain_text("from the provider")
    expect(row).to_contain_text("robotics-leads")
    admin_page.screenshot(path=str(SHOTS / "oidc-4-identity-page.png"), full_page=True)
    admin.close()

    # The provider forgets carol: the check deactivates her, her session ends, and she cannot sign in again.
    oidc_settings.forget("carol")
    assert identity.check_provider_accounts()["deactivated"] == 1
    page.goto("/teams/")
    expect(page.get_by_role("heading", name="Sign in")).to_be_visible()
    page.get_by_role("link", name="Sign in with Example SSO").click()
    provider_login(page, "carol", "s3cret")
    expect(page.get_by_role("alert")).to_have_text("Unknown user or wrong password.")
    shot(page, "5-unknown-at-the-provider")
    carol.refresh_from_db()
    assert not carol.is_active
    assert AuditLog.objects.filter(action="user.deactivated", target_id=str(carol.pk)).exists()
    assert AuditLog.objects.filter(action="auth.login", actor=carol, changes__method="identity provider").count() == 2


def test_a_user_without_a_mapped_group_is_refused_with_a_reason(
    page: Page, demo: Any, oidc_settings: LoopbackProvider
) -> None:
    oidc_settings.set_accounts({"dora": account("pw", ["visitors"], preferred_username="dora")})
    page.goto("/login/")
    page.get_by_role("link", name="Sign in with Example SSO").click()
    provider_login(page, "dora", "pw")
    expect(page.get_by_role("status")).to_contain_text(
        "Sign-in with Example SSO failed: your account is deactivated (none of the user's groups"
    )
    expect(page.get_by_role("heading", name="Sign in")).to_be_visible()
    shot(page, "6-no-mapped-group")
    assert not User.objects.filter(username="dora").exists()  # no account is made for a user no group maps


def test_a_lead_creates_a_service_account_and_sees_its_token_once(page: Page, demo: Any) -> None:
    sign_in_as(page, "lena")
    page.goto(f"/teams/{demo.teams.get(slug='vision').pk}/")
    form = page.get_by_test_id("service-account-form")
    form.get_by_label("Name").fill("nightly CI")
    form.get_by_label("Scope").select_option("submit")
    form.get_by_role("button", name="Create service account").click()
    token = page.get_by_test_id("new-service-token").inner_text()
    assert token.startswith("qm_")
    expect(page.get_by_test_id("service-accounts")).to_contain_text("Submit jobs")
    expect(page.get_by_test_id("members")).to_contain_text("service account")
    shot(page, "7-service-account-created")
    page.goto(f"/teams/{demo.teams.get(slug='vision').pk}/")
    expect(page.get_by_test_id("service-accounts")).to_contain_text("nightly CI")
    assert token not in page.content()
