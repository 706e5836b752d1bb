"""A researcher submits a job through the form, sees a bad value refused beside its field as they type and
the estimate once it is fixed, lands on the job's page, finds it in the list, and cancels it.

Screenshots go to ``test-artifacts/browser/`` (``QM_SHOTS`` names another folder).
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import Page, expect

from clusters.actions import sync
from clusters.models import Cluster
from demo.jobs import H100, seed_governance
from governance.models import PriorityTier
from scheduler import submission
from scheduler.models import Job
from tenancy.models import Team
from tests.billing.factories import priced
from tests.browser.conftest import sign_in_as

pytestmark = pytest.mark.browser

SHOTS = Path(os.environ.get("QM_SHOTS") or Path(__file__).resolve().parents[2] / "test-artifacts" / "browser")
POLL_SECONDS = 5


def shot(page: Page, name: str) -> None:
    SHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SHOTS / f"{name}.png"), full_page=True)


@pytest.fixture
def governed(fleet: dict[str, Cluster], demo: Any) -> dict[str, Cluster]:
    """The demo fleet with the demo's tiers, cohort and team quotas, every accelerator-hour at 4.00."""
    seed_governance(demo)
    priced(fleet.values(), 4.0)
    return fleet


def test_researcher_submits_sees_the_estimate_and_cancels(page: Page, governed: dict[str, Cluster]) -> None:
    sign_in_as(page, "alice")
    page.get_by_role("navigation", name="Main").get_by_role("link", name="Submit").click()
    expect(page).to_have_url(re.compile(r"/jobs/new/$"))
    form = page.get_by_test_id("job-form")
    # The tiers the Vision team may use: not Language's production tier.
    expect(form.locator("#id_tier option")).to_have_text(["high (100)", "normal (50)", "spot (10)"])
    expect(form.locator("#id_tier")).to_have_value(re.compile(r"\d+"))

    form.get_by_label("Name").fill("resnet-sweep")
    form.get_by_label(H100).check()
    form.get_by_label("Container image").fill("ghcr.io/lab/train:1")
    form.get_by_label("Command").fill("python train.py --lr 3e-4")
    # 16 accelerators per worker on 8-GPU nodes: refused beside the field while typing, before any submit.
    accelerators = form.get_by_label("Accelerators per worker")
    accelerators.fill("16")
    errors = page.locator("#errors-accelerators")
    expect(errors).to_contain_text("could hold 16 accelerators")
    expect(page.get_by_test_id("estimate-problem")).to_be_visible()
    expect(page.locator('.field[data-field="accelerators"] input')).to_have_css("border-color", "rgb(180, 35, 24)")
    shot(page, "job-form-never-fits")

    accelerators.fill("8")
    expect(errors).to_be_empty()
    expect(page.get_by_test_id("estimate-cost")).to_contain_text("32.00 per hour")  # 8 H100 at 4.00
    expect(page.get_by_test_id("estimate-start")).not_to_be_empty()
    expect(page.get_by_test_id("estimate-missing")).to_have_count(0)
    shot(page, "job-form-estimate")

    page.get_by_role("button", name="Submit job").click()
    expect(page).to_have_url(re.compile(r"/jobs/\d+/$"))
    job = Job.objects.get(name="resnet-sweep")
    assert job.submitted_by.username == "alice"
    assert (job.accelerators, job.accelerator_types, job.command) == (8, [H100], ["python", "train.py", "--lr", "3e-4"])
    expect(page.get_by_role("heading", level=1)).to_contain_text(f"#{job.pk} resnet-sweep")
    expect(page.get_by_test_id("timeline")).to_contain_text("submitted")
    shot(page, "job-detail")

    page.get_by_role("navigation", name="Main").get_by_role("link", name="Jobs").click()
    row = page.get_by_test_id("jobs").locator(f'tr[data-job="{job.pk}"]')
    expect(row).to_contain_text("resnet-sweep")
    expect(row).to_contain_text(f"8 {H100}")
    # The table body polls while the tab is visible.
    with page.expect_request(re.compile(r"/jobs/rows/"), timeout=(POLL_SECONDS + 3) * 1000):
        pass
    shot(page, "job-list")

    row.get_by_role("link", name=re.compile("resnet-sweep")).click()
    page.get_by_test_id("cancel").locator("summary").click()
    page.get_by_test_id("cancel-form").get_by_label("Reason").fill("wrong learning rate")
    page.get_by_role("button", name="Cancel job").click()
    expect(page.get_by_test_id("job-state")).to_have_text("Cancelled")
    expect(page.get_by_test_id("timeline")).to_contain_text("Cancelled by alice: wrong learning rate")
    expect(page.get_by_test_id("cancel")).to_have_count(0)
    shot(page, "job-cancelled")
    assert Job.objects.get(pk=job.pk).state == Job.State.CANCELLED

    # Clone it: the form comes prefilled, with the estimate for what it asks.
    page.get_by_test_id("clone-link").click()
    expect(page).to_have_url(re.compile(rf"/jobs/{job.pk}/clone/$"))
    form = page.get_by_test_id("job-form")
    expect(form.get_by_label("Name")).to_have_value("resnet-sweep (copy)")
    expect(form.get_by_label("Accelerators per worker")).to_have_value("8")
    expect(form.get_by_label(H100)).to_be_checked()
    expect(form.get_by_label("Command")).to_have_value("python train.py --lr 3e-4")
    expect(page.get_by_test_id("estimate-cost")).to_contain_text("32.00 per hour")
    shot(page, "job-clone")


def test_lead_reads_why_a_job_waits_and_the_queue(page: Page, governed: dict[str, Cluster], demo: Any) -> None:
    from django.contrib.auth.models import User

    from demo.jobs import seed_jobs
    from scheduler import actions
    from scheduler.placement import loop

    seed_jobs(demo)
    alice = User.objects.get(username="alice")
    vision = actions.teams_for_submission(alice)[0]
    # Work Quartermaster does not know of holds 40% of the H100s (as the background does in a running demo).
    h100s = governed["onprem-h100"]
    h100s.options = {**h100s.options, "busy": 0.4}
    h100s.save(update_fields=["options"])
    sync.sync_cluster(h100s.pk)
    # 30 whole H100 nodes at once, within Vision's quota: more than the busy demo fleet has free now.
    big, _ = actions.submit_job(
        alice,
        submission.JobRequest(
            team=vision,
            name="big-gang",
            time_limit=4 * 3600,
            accelerator_types=[H100],
            accelerators=8,
            workers=30,
            image="ghcr.io/demo/vision-train:2.4",
        ),
    )
    loop.run_all()  # a burst of submissions wakes the loop once; run the cycle that follows it now
    big.refresh_from_db()
    assert big.state == Job.State.PENDING
    assert big.pending_reason

    sign_in_as(page, "lena")
    page.get_by_role("navigation", name="Main").get_by_role("link", name="Jobs").click()
    rows = page.get_by_test_id("jobs").locator("tbody tr")
    expect(rows.filter(has_text="big-gang")).to_contain_text("30 x 8 " + H100)
    expect(rows.filter(has_text="eval-notebook")).to_contain_text("0.25 of one")
    expect(page.get_by_test_id("jobs")).not_to_contain_text("grasp-gang")  # Robotics' job
    shot(page, "job-list-demo")

    rows.filter(has_text="big-gang").get_by_role("link").click()
    pending = page.get_by_test_id("pending")
    expect(pending).to_contain_text("Why it is waiting")
    expect(page.get_by_test_id("pending-message")).to_have_text(big.pending_message)
    expect(page.get_by_test_id("queue-position")).to_contain_text("in vision")
    # The lead may cancel a teammate's job; the state block polls while the job is active.
    expect(page.get_by_test_id("cancel")).to_be_visible()
    with page.expect_request(re.compile(rf"/jobs/{big.pk}/state/$"), timeout=(POLL_SECONDS + 3) * 1000):
        pass
    shot(page, "job-waiting")

    pending.get_by_role("link", name="vision").click()
    expect(page.get_by_role("heading", level=1)).to_contain_text("Queue vision")
    usage = page.get_by_test_id("usage")
    expect(usage.locator(f'tr[data-flavor="{H100}"]')).to_contain_text("160")  # nominal
    expect(page.get_by_test_id("waiting")).to_contain_text("big-gang")
    shot(page, "queue-vision")


def test_admin_switching_team_gets_that_teams_tiers_and_projects(page: Page, governed: dict[str, Cluster]) -> None:
    sign_in_as(page, "adam")
    page.goto("/jobs/new/")
    form = page.get_by_test_id("job-form")
    language_tiers = ["production (1000, not preemptible)", "high (100)", "normal (50)", "spot (10)"]
    expect(form.get_by_label("Team")).to_have_value(str(Team.objects.get(slug="language").pk))  # first by name
    expect(form.locator("#id_tier option")).to_have_text(language_tiers)
    form.get_by_label("Team").select_option(label="Vision")
    expect(form.locator("#id_tier option")).to_have_text(["high (100)", "normal (50)", "spot (10)"])
    expect(form.locator("#id_tier")).to_have_value(str(PriorityTier.objects.get(name="normal").pk))
    expect(form.locator("#id_project option")).to_have_text(["(none: the team's queue)", "Detection", "Segmentation"])
    form.get_by_label("Team").select_option(label="Language")
    expect(form.locator("#id_tier option")).to_have_text(language_tiers)
    expect(form.locator("#id_project option")).to_have_text(["(none: the team's queue)", "Alignment", "Pretraining"])
    form.get_by_label("Priority tier").select_option(label="production (1000, not preemptible)")
    form.get_by_label("Name").fill("llm-eval")
    form.get_by_label("Container image").fill("ghcr.io/demo/llm:1")
    expect(page.get_by_test_id("estimate-missing")).to_have_count(0)
    expect(page.get_by_test_id("estimate-start")).not_to_be_empty()
    shot(page, "job-form-admin-language")
    page.get_by_role("button", name="Submit job").click()
    expect(page).to_have_url(re.compile(r"/jobs/\d+/$"))
    job = Job.objects.get(name="llm-eval")
    assert (job.team.slug, job.tier.name, job.preemptible) == ("language", "production", False)
