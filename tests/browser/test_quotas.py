"""A team lead manages the team's quotas in Chromium: the quota page with its Plotly chart, an in-place edit of
the lending limit refused beside its field, then accepted, with the new value and the history row; a project's
budget and a member's limit set the same way; an admin reads the organization's page and creates a cohort, and
finance reads every budget there.

Screenshots go to ``test-artifacts/browser/`` (``QM_SHOTS`` names another folder).
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth.models import User
from playwright.sync_api import Page, expect

from clusters.models import Cluster
from demo.jobs import H100, seed_governance
from governance.models import Budget, Cohort, MemberLimit, Quota, QuotaChange
from tenancy.models import AuditLog, Project, Team
from tests.browser.conftest import sign_in_as

pytestmark = pytest.mark.browser

SHOTS = Path(os.environ.get("QM_SHOTS") or Path(__file__).resolve().parents[2] / "test-artifacts" / "browser")


def shot(page: Page, name: str) -> None:
    SHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SHOTS / f"{name}.png"), full_page=True)


@pytest.fixture
def governed(fleet: dict[str, Cluster], demo: Any) -> dict[str, Cluster]:
    """The demo fleet with the demo's tiers, cohort and team quotas, and the demo jobs placed by one cycle."""
    from demo.jobs import seed_jobs
    from scheduler.placement import loop

    seed_governance(demo)
    seed_jobs(demo)
    loop.run_all()
    return fleet


def quota_row(page: Page, queue: str, flavor: str, resource: str = "accelerator") -> Any:
    return page.get_by_test_id("quota-table").locator(
        f'tr[data-queue="{queue}"][data-flavor="{flavor}"][data-resource="{resource}"]'
    )


def test_lead_edits_the_lending_limit_in_place(page: Page, governed: dict[str, Cluster]) -> None:
    vision = Team.objects.get(organization__slug="demo", slug="vision")
    sign_in_as(page, "lena")
    page.goto(f"/teams/{vision.pk}/")
    page.get_by_test_id("team-quotas-link").click()
    expect(page).to_have_url(re.compile(rf"/teams/{vision.pk}/quotas/$"))
    expect(page.get_by_role("heading", level=1)).to_contain_text("Quotas of Vision")

    # The chart is drawn by Plotly: its root element and one bar group per trace.
    chart = page.get_by_test_id("quota-chart")
    expect(chart.locator(".js-plotly-plot")).to_have_count(1)
    expect(chart.locator(".js-plotly-plot .barlayer .trace")).to_have_count(4)
    expect(chart.locator(".legendtext")).to_have_text(["Used within nominal", "Borrowed", "Nominal", "Pending demand"])

    row = quota_row(page, "vision", H100)
    expect(row.locator('[data-cell="nominal"]')).to_have_text("160")
    expect(row.locator('[data-cell="lending_limit"]')).to_have_text("no limit")
    # The waiting and running jobs of the team's queue, with why they wait, from the queue's own partial.
    jobs = page.get_by_test_id("queue-jobs").first
    expect(jobs.get_by_test_id("running")).to_contain_text("segformer-finetune")
    expect(jobs).to_contain_text("detr-sweep")
    shot(page, "team-quotas")

    before = (list(Quota.objects.values_list("pk", "lending_limit")), QuotaChange.objects.count())
    row.get_by_test_id("edit-quota").click()
    form = page.get_by_test_id("quota-row-form")
    # The lead may change the lending limit of the team's queue, not its nominal quota or borrowing limit.
    expect(form.get_by_label("May lend")).to_be_visible()
    expect(form.get_by_label("Nominal")).to_have_count(0)
    expect(form.get_by_label("May borrow")).to_have_count(0)
    form.get_by_label("May lend").fill("200")
    form.get_by_label("Reason").fill("lend the idle nights to Robotics")
    form.get_by_role("button", name="Save").click()
    errors = form.get_by_test_id("errors-lending_limit")
    expect(errors).to_have_text("A queue cannot lend more than its nominal quota.")
    expect(form.get_by_label("May lend")).to_have_value("200")
    expect(form.get_by_label("May lend")).to_have_attribute("aria-invalid", "true")
    assert (list(Quota.objects.values_list("pk", "lending_limit")), QuotaChange.objects.count()) == before
    shot(page, "team-quotas-refused")

    form.get_by_label("May lend").fill("24")
    form.get_by_role("button", name="Save").click()
    expect(page.get_by_test_id("quota-row-form")).to_have_count(0)
    expect(quota_row(page, "vision", H100).locator('[data-cell="lending_limit"]')).to_have_text("24")
    history = page.get_by_test_id("quota-history").get_by_test_id("history-row").first
    expect(history).to_contain_text("lena")
    expect(history).to_contain_text("may lend: no limit → 24")
    expect(history).to_contain_text("lend the idle nights to Robotics")
    assert Quota.objects.get(queue__name="vision", flavor__name=H100).lending_limit == 24
    assert AuditLog.objects.filter(action="quota.changed", actor_name="lena").count() == 1
    shot(page, "team-quotas-edited")


def test_admin_reads_the_organization_and_creates_a_cohort(page: Page, governed: dict[str, Cluster]) -> None:
    sign_in_as(page, "adam")
    page.get_by_role("navigation", name="Main").get_by_role("link", name="Quotas").click()
    expect(page).to_have_url(re.compile(r"/quotas/$"))
    teams = page.get_by_test_id("org-team")
    expect(teams).to_have_count(3)
    expect(page.get_by_test_id("cohort-tree").get_by_test_id("cohort")).to_contain_text("research")
    expect(page.get_by_test_id("quota-chart").locator(".js-plotly-plot")).to_have_count(1)

    page.get_by_test_id("cohort-new").locator("summary").click()
    form = page.get_by_test_id("cohort-form")
    form.get_by_label("Name").fill("gpu-pool")
    form.get_by_label("Inside").select_option(label="research")
    form.get_by_label("Reason").fill("a pool inside research")
    form.get_by_role("button", name="Create the cohort").click()
    expect(page.locator(".flash")).to_contain_text("Cohort gpu-pool created.")
    expect(page.locator('[data-testid="cohort"][data-cohort="gpu-pool"]')).to_be_visible()
    assert Cohort.objects.get(name="gpu-pool").parent == Cohort.objects.get(name="research")
    shot(page, "org-quotas")


def test_lead_sets_a_project_budget_and_a_members_limit(page: Page, governed: dict[str, Cluster]) -> None:
    vision = Team.objects.get(organization__slug="demo", slug="vision")
    sign_in_as(page, "lena")
    page.goto(f"/teams/{vision.pk}/quotas/")
    section = page.get_by_test_id("budgets")
    # The demo's budget of the team is an admin's: hers to read, not to change.
    team_row = section.locator('tr[data-budget="team vision"][data-measure="accelerator_hours"]')
    expect(team_row.locator('[data-cell="limit"]')).to_have_text("300,000")
    expect(team_row.get_by_test_id("change-budget")).to_have_count(0)

    # A refusal comes back beside its field, with what was typed, and writes nothing.
    section.get_by_test_id("budget-new").locator("summary").click()
    form = page.get_by_test_id("budget-form")
    form.get_by_label("For", exact=True).select_option(label="project Detection")
    form.get_by_label("Accelerator-hours a month").fill("lots")
    form.get_by_label("Reason").fill("detection's share of the month")
    form.get_by_role("button", name="Save the budget").click()
    form = page.get_by_test_id("budget-form")
    expect(form.locator(".field.invalid")).to_contain_text("'lots' is not a number.")
    expect(form.get_by_label("Accelerator-hours a month")).to_have_value("lots")
    assert not Budget.objects.filter(project__isnull=False).exists()
    assert not QuotaChange.objects.filter(kind="budget").exists()

    form.get_by_label("Accelerator-hours a month").fill("500")
    form.get_by_label("Money a month").fill("1200")
    form.get_by_label("Hard", exact=True).check()
    form.get_by_label("Also alert").fill("pi@lab.example")
    form.get_by_role("button", name="Save the budget").click()
    expect(page.get_by_test_id("budget-saved")).to_have_text("Budget of project Detection set.")
    row = page.locator('tr[data-budget="project vision/detection"][data-measure="accelerator_hours"]')
    expect(row.locator('[data-cell="scope"]')).to_have_text("project Detection")
    expect(row.locator('[data-cell="limit"]')).to_have_text("500")
    expect(row.locator('[data-cell="hard"]')).to_have_text("hard")
    expect(row.locator('[data-cell="alerted"]')).to_have_text("the team's leads, pi@lab.example")
    expect(page.get_by_test_id("budget-chart").locator(".js-plotly-plot")).to_have_count(1)
    history = page.get_by_test_id("quota-history").get_by_test_id("history-row").first
    expect(history).to_contain_text("budget of project Detection")
    expect(history).to_contain_text("accelerator-hours a month: no limit → 500")
    expect(history).to_contain_text("detection's share of the month")
    assert Budget.objects.get(project__slug="detection").hard
    # Change opens the form on that budget.
    row.get_by_test_id("change-budget").click()
    form = page.get_by_test_id("budget-form")
    expect(form).to_be_visible()
    expect(form.get_by_label("For", exact=True)).to_have_value(f"project:{Project.objects.get(slug='detection').pk}")
    expect(form.get_by_label("Accelerator-hours a month")).to_have_value("500")
    expect(form.get_by_label("Hard", exact=True)).to_be_checked()

    member = page.get_by_test_id("member-table").locator('tr[data-member="alice"]')
    member.get_by_test_id("edit-member-limit").click()
    form = page.get_by_test_id("member-row-form")
    form.get_by_label("Accelerators at once").fill("8")
    form.get_by_label("Reason").fill("one node at a time")
    form.get_by_role("button", name="Save").click()
    # Alice's demo jobs hold more than that: the lead is told so, and sets it only once she confirms.
    confirm = member.get_by_test_id("confirm-below-use")
    expect(member).to_contain_text("more than 8; they keep running, but no new job of theirs starts")
    assert not MemberLimit.objects.filter(user__username="alice").exists()
    confirm.locator("input").check()
    page.get_by_test_id("member-row-form").get_by_role("button", name="Save").click()
    expect(member.locator('[data-cell="accelerators"]')).to_have_text("8")
    expect(page.get_by_test_id("quota-history").get_by_test_id("history-row").first).to_contain_text(
        "accelerators at once: no limit → 8"
    )
    shot(page, "budgets-team-lena")


def test_finance_reads_every_budget_of_the_organization(page: Page, governed: dict[str, Cluster]) -> None:
    from governance.actions import budgets

    adam = User.objects.get(username="adam")
    teams = {t.slug: t for t in Team.objects.filter(organization__slug="demo")}
    budgets.set_budget(adam, teams["language"], amount=20000, hard=True, reason="the month's plan")
    detection = Project.objects.get(team=teams["vision"], slug="detection")
    budgets.set_budget(adam, teams["vision"], detection, accelerator_hours=500, reason="detection's share")
    sign_in_as(page, "fiona")
    page.goto("/quotas/")
    table = page.get_by_test_id("org-budget-table")
    # The demo's budgets of Vision (accelerator-hours and money) and Robotics (money), and these two.
    expect(table.get_by_test_id("budget-row")).to_have_count(5)
    expect(table.locator('tr[data-budget="team language"] [data-cell="hard"]')).to_have_text("hard")
    expect(table.get_by_test_id("change-budget")).to_have_count(0)
    expect(page.get_by_test_id("org-budgets").locator(".js-plotly-plot")).to_have_count(1)
    shot(page, "budgets-org-fiona")
