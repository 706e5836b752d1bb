"""The Content-Security-Policy holds in Chromium: the main pages load, draw their charts and poll with no
violation reported (every page's ``securitypolicyviolation`` events and Chromium's console both listened to).

A violation here means a template grew an inline script, handler, style or ``eval``: move it to a file under
``static/`` rather than loosening the policy (``CONTENT_SECURITY_POLICY`` in ``portal/settings.py``).
"""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.auth.models import User
from playwright.sync_api import ConsoleMessage, Page, expect

from clusters.models import Cluster
from scheduler import actions, submission
from scheduler.models import Job
from tenancy.models import Team
from tests.browser.conftest import sign_in_as
from tests.browser.test_billing import OCTOBER, billed  # noqa: F401 - the fixture: October's costs, metered

pytestmark = pytest.mark.browser

#: Collects the page's violation reports before any of its own scripts run.
LISTEN = """
window.__cspViolations = [];
document.addEventListener("securitypolicyviolation", (e) => {
  const where = `${e.sourceFile}:${e.lineNumber}`;
  window.__cspViolations.push(`${e.violatedDirective} blocked ${e.blockedURI || "inline"} at ${where}`);
});
"""


def violations(page: Page, console: list[str]) -> list[str]:
    reported: list[str] = page.evaluate("window.__cspViolations")
    return reported + [text for text in console if "Content Security Policy" in text]


@pytest.fixture
def watched(page: Page) -> tuple[Page, list[str]]:
    console: list[str] = []

    def heard(message: ConsoleMessage) -> None:
        console.append(message.text)

    page.on("console", heard)
    page.context.add_init_script(LISTEN)
    return page, console


def test_the_main_pages_run_under_the_policy(watched: tuple[Page, list[str]], billed: Any) -> None:  # noqa: F811
    page, console = watched
    vision = Team.objects.get(slug="vision")
    request = submission.JobRequest(team=vision, name="csp", time_limit=3600, image="img", accelerators=1)
    job, _ = actions.submit_job(User.objects.get(username="alice"), request)
    cluster = Cluster.objects.order_by("pk").first()
    assert cluster is not None

    page.goto("/login/")
    assert violations(page, console) == []
    sign_in_as(page, "adam")
    visits = [
        ("/", None),
        ("/jobs/", "job-state"),
        ("/jobs/new/", "job-form"),
        (f"/jobs/{job.pk}/", None),
        (f"/clusters/{cluster.pk}/live/", None),
        ("/clusters/", None),
        (OCTOBER, "cost-chart"),
        ("/quotas/", None),
        ("/billing/prices/", None),
        ("/api/docs/", None),
        ("/account/notifications/", "notification-form"),
    ]
    for path, testid in visits:
        page.goto(path)
        page.wait_for_load_state("networkidle")
        if testid:
            expect(page.get_by_test_id(testid).first).to_be_visible()
        assert violations(page, console) == [], path
    # The costs page drew its charts (Plotly ran, and styled them, under the policy).
    page.goto(OCTOBER)
    expect(page.get_by_test_id("cost-chart").locator(".js-plotly-plot")).to_have_count(1)
    expect(page.get_by_test_id("idle-chart").locator(".js-plotly-plot .barlayer .trace")).to_have_count(1)
    assert violations(page, console) == []
    # The job form's live preview and the live view's polling swap their answers in under it too.
    page.goto("/jobs/new/")
    page.get_by_label("Name").fill("typed")
    expect(page.get_by_test_id("estimate")).to_be_visible()
    page.goto(f"/clusters/{cluster.pk}/live/")
    with page.expect_response(lambda r: "/live/tiles/" in r.url, timeout=15_000):
        pass
    assert violations(page, console) == []
    assert Job.objects.filter(pk=job.pk).exists()
