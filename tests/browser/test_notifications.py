"""A researcher sets how they are told in Chromium: a webhook and the events they want, a refused address shown
beside its field, then a test notification that arrives by e-mail and at the webhook, its state on the page; a
team's lead sets the team's defaults from the team page.

Screenshots go to ``test-artifacts/browser/`` (``QM_SHOTS`` names another folder).
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

import pytest
from django.core import mail
from playwright.sync_api import Page, expect

from notifications.models import Notification, Preference
from tenancy.models import Team
from tests.browser.conftest import sign_in_as
from tests.conftest import Hook

pytestmark = pytest.mark.browser

SHOTS = Path(os.environ.get("QM_SHOTS") or Path(__file__).resolve().parents[2] / "test-artifacts" / "browser")


def shot(page: Page, name: str) -> None:
    SHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SHOTS / f"{name}.png"), full_page=True)


def test_a_researcher_sets_a_webhook_and_events_and_sends_a_test(
    page: Page,
    demo: Any,
    hook: tuple[str, type[Hook]],
) -> None:
    url, receiver = hook
    sign_in_as(page, "alice")
    page.get_by_test_id("notifications-link").click()
    expect(page).to_have_url(re.compile(r"/account/notifications/$"))
    expect(page.get_by_role("heading", level=1)).to_have_text("Notifications")
    form = page.get_by_test_id("notification-form")
    expect(form.get_by_label("Failed")).to_have_value("")  # the default, named in its option
    expect(form.get_by_label("Failed").locator("option:checked")).to_have_text("Default: E-mail")

    form.get_by_label("Succeeded").select_option("both")
    form.get_by_label("Failed").select_option("webhook")
    form.get_by_label("Webhook URL").fill("http://169.254.169.254/latest/meta-data")
    form.get_by_role("button", name="Save").click()
    expect(form.locator(".field.invalid")).to_contain_text("cloud metadata service")
    assert not Preference.objects.exists()

    form.get_by_label("Webhook URL").fill(url)
    form.get_by_label("Waiting limit (hours)").fill("6")
    form.get_by_role("button", name="Save").click()
    expect(page.get_by_role("status")).to_contain_text("Your notification settings are saved.")
    own = Preference.objects.get(user__username="alice")
    assert own.events == {"succeeded": ["email", "webhook"], "failed": ["webhook"]}
    assert (own.webhook_url, own.wait_hours) == (url, 6)
    effective = page.get_by_test_id("effective")
    expect(effective.locator("tr", has_text="Succeeded")).to_contain_text("E-mail and webhook")
    expect(effective.locator("tr", has_text="Preempted")).to_contain_text("E-mail")  # built in

    page.get_by_test_id("test-form").get_by_role("button", name="Send a test notification").click()
    expect(page.get_by_role("status")).to_contain_text("A test notification is on its way by e-mail and webhook")
    recent = page.get_by_test_id("recent")
    expect(recent.get_by_test_id("state")).to_have_text(["sent", "sent"])
    (message,) = mail.outbox
    assert message.to == ["alice@demo.example"]
    ((headers, body),) = receiver.received
    assert body["text"].startswith("A test notification from Quartermaster to alice")
    webhook = Notification.objects.get(channel="webhook")
    assert headers["Idempotency-Key"] == f"quartermaster-notification-{webhook.pk}"
    shot(page, "notifications-settings")


def test_a_lead_sets_the_teams_defaults_from_the_team_page(page: Page, demo: Any) -> None:
    vision = Team.objects.get(organization__slug="demo", slug="vision")
    sign_in_as(page, "lena")
    page.goto(f"/teams/{vision.pk}/")
    page.get_by_test_id("team-notifications-link").click()
    expect(page.get_by_role("heading", level=1)).to_have_text("Notification defaults of Vision")
    form = page.get_by_test_id("team-notification-form")
    form.get_by_label("Succeeded").select_option("email")
    form.get_by_label("Hang flagged").select_option("off")
    form.get_by_role("button", name="Save the defaults").click()
    expect(page.get_by_role("status")).to_contain_text("The notification defaults of Vision are saved.")
    assert Preference.objects.get(team=vision).events == {"succeeded": ["email"], "hang": []}
    shot(page, "notifications-team-defaults")
    # A researcher of the team sees them, and follows them, but cannot change them.
    page.context.clear_cookies()
    sign_in_as(page, "alice")
    page.goto(f"/teams/{vision.pk}/notifications/")
    expect(page.get_by_test_id("team-notification-form")).to_have_count(0)
    expect(page.get_by_test_id("effective").locator("tr", has_text="Hang flagged")).to_contain_text("Not told")
    page.goto("/account/notifications/")
    succeeded = page.get_by_test_id("notification-form").get_by_label("Succeeded")
    expect(succeeded.locator("option:checked")).to_have_text("Default: E-mail")
