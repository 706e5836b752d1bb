"""A researcher starts an interactive session from the submit form on the simulated fleet and, once its program
has said where JupyterLab listens, finds the "Open JupyterLab" button on the job's page (polled, no reload),
whose link redirects to the session with its secret; the team's lead sees the session but no button.

Screenshots go to ``test-artifacts/browser/`` (``QM_SHOTS`` names another folder)."""

from __future__ import annotations

import re
from typing import Any

import pytest
import requests
from playwright.sync_api import Page, expect

from clusters.models import Cluster
from scheduler.actions.checkpoints import token_for
from scheduler.models import Job
from scheduler.placement import dispatch, follow, loop
from tests.browser.conftest import sign_in_as
from tests.browser.test_jobs import POLL_SECONDS, governed, shot  # noqa: F401 - the demo fleet with governance

pytestmark = pytest.mark.browser


def test_researcher_starts_a_session_from_the_form_and_opens_it(
    page: Page,
    governed: dict[str, Cluster],  # noqa: F811
    demo: Any,
    live_server: Any,
) -> None:
    sign_in_as(page, "alice")
    page.goto("/jobs/new/")
    form = page.get_by_test_id("job-form")
    form.get_by_label("Name").fill("notebook")
    form.get_by_label("Interactive session").check()
    form.get_by_label("JupyterLab", exact=True).check()
    form.get_by_label("Ends after idle (minutes)").fill("30")
    form.get_by_label("Accelerators per worker").fill("1")
    form.get_by_label("Time limit: hours").fill("2")
    shot(page, "session-form")
    page.get_by_role("button", name="Submit job").click()
    expect(page).to_have_url(re.compile(r"/jobs/\d+/$"))
    job = Job.objects.get(name="notebook")
    assert (job.kind, job.session_app, job.session_idle_minutes) == ("session", "jupyterlab", 30)
    expect(page.get_by_test_id("session-kind")).to_contain_text("JupyterLab")

    # The placement loop places it and the simulated cluster runs it; the session starts.
    loop.run_cycle(demo)
    job.refresh_from_db()
    attempt = job.attempts.get()
    dispatch.dispatch(attempt.pk)
    follow.follow(attempt.cluster_id)
    job.refresh_from_db()
    assert job.state == Job.State.RUNNING
    expect(page.get_by_test_id("session-starting")).to_be_visible(timeout=(POLL_SECONDS + 10) * 1000)
    expect(page.get_by_test_id("open-session")).to_have_count(0)

    # Its program reports where JupyterLab listens, with the job token, as on a real cluster.
    said = requests.post(
        f"{live_server.url}/api/v1/jobs/{job.pk}/session/",
        json={"url": "http://10.0.0.7:8888/"},
        headers={"Authorization": f"Bearer {token_for(attempt)}"},
        timeout=10,
    )
    assert said.status_code == 201, said.text
    button = page.get_by_test_id("open-session")
    expect(button).to_be_visible(timeout=(POLL_SECONDS + 10) * 1000)
    expect(button).to_have_text("Open JupyterLab")
    expect(button).to_have_attribute("href", f"/jobs/{job.pk}/open/")
    shot(page, "session-open-button")
    opened = page.request.get(f"/jobs/{job.pk}/open/", max_redirects=0)
    assert opened.status == 302
    assert opened.headers["location"].startswith("http://10.0.0.7:8888/lab?qm_code=")
    assert opened.headers["location"].split("qm_code=")[1] not in page.content()

    # The team's lead sees the session run, and no button: only alice may open it.
    page.context.clear_cookies()
    sign_in_as(page, "lena")
    page.goto(f"/jobs/{job.pk}/")
    expect(page.get_by_test_id("session")).to_contain_text("only alice, who started it, may open it")
    expect(page.get_by_test_id("open-session")).to_have_count(0)
    assert page.request.get(f"/jobs/{job.pk}/open/", max_redirects=0).status == 403
