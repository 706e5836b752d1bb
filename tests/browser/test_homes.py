"""Each role's home in Chromium, on a laptop (1280x800) and a phone (390x844): its own section with the link to
its main job, a navigation that stays one row at 1280 px (an admin has the most links) and that folds behind a
"Menu" button on the phone, every link of it reachable there. Screenshots under test-artifacts/browser/."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest
from playwright.sync_api import Page, ViewportSize, expect

from tests.browser.conftest import sign_in_as

pytestmark = pytest.mark.browser

SHOTS = Path(os.environ.get("QM_SHOTS") or Path(__file__).resolve().parents[2] / "test-artifacts" / "browser")
LAPTOP = ViewportSize(width=1280, height=800)
PHONE = ViewportSize(width=390, height=844)
#: Each demo user's section of the home page, and the main links their navigation must offer.
ROLES = {
    "alice": ("home-work", ["Jobs", "Submit", "Costs"]),
    "lena": ("home-team-vision", ["Jobs", "Submit", "Quotas", "Teams"]),
    "fiona": ("home-finance", ["Costs", "Quotas", "Price book", "Capacity"]),
    "adam": ("home-fleet", ["Clusters", "Quotas", "Audit log", "SLOs", "Price book", "API tokens", "API"]),
}


def nav(page: Page):
    return page.get_by_role("navigation", name="Main")


def shot(page: Page, name: str) -> None:
    SHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SHOTS / f"home-{name}.png"), full_page=True)


@pytest.mark.parametrize("username", list(ROLES))
def test_each_role_s_home_on_a_laptop_keeps_the_navigation_on_one_row(page: Page, demo, username: str) -> None:
    section, links = ROLES[username]
    page.set_viewport_size(LAPTOP)
    sign_in_as(page, username)
    expect(page.get_by_test_id(section).get_by_test_id("main-link")).to_be_visible()
    expect(page.get_by_test_id("menu")).to_be_hidden()
    # One row: every link of the navigation sits on the same line, and the bar is as tall as one line.
    tops = nav(page).get_by_role("link").evaluate_all("links => links.map(a => a.getBoundingClientRect().top)")
    assert len({round(top) for top in tops}) == 1, tops
    bar = page.locator("header.topbar").bounding_box()
    assert bar is not None
    assert bar["height"] < 60, bar
    who = page.locator("header.topbar .who").bounding_box()
    assert who is not None
    assert who["x"] + who["width"] <= LAPTOP["width"], who
    for name in links:
        expect(nav(page).get_by_role("link", name=name, exact=True)).to_be_visible()
    shot(page, f"{username}-1280")
    nav(page).get_by_role("link", name=links[0], exact=True).click()
    expect(page.locator("h1")).to_be_visible()


@pytest.mark.parametrize("username", list(ROLES))
def test_each_role_s_home_on_a_phone_folds_the_navigation_behind_a_menu(page: Page, demo, username: str) -> None:
    section, links = ROLES[username]
    page.set_viewport_size(PHONE)
    sign_in_as(page, username)
    expect(page.get_by_test_id(section).get_by_test_id("main-link")).to_be_visible()
    menu = page.get_by_test_id("menu")
    expect(menu).to_be_visible()
    expect(nav(page)).to_be_hidden()
    shot(page, f"{username}-phone")
    menu.click()
    expect(nav(page)).to_be_visible()
    for name in links:
        link = nav(page).get_by_role("link", name=name, exact=True)
        expect(link).to_be_visible()
        box = link.bounding_box()
        assert box is not None
        assert box["x"] + box["width"] <= PHONE["width"], (name, box)
    expect(page.get_by_role("button", name="Sign out")).to_be_visible()
    # Nothing of the page is wider than the phone: no sideways scrolling.
    assert page.evaluate("document.documentElement.scrollWidth") <= PHONE["width"]
    shot(page, f"{username}-phone-menu")
    nav(page).get_by_role("link", name=links[0], exact=True).click()
    expect(page.locator("h1")).to_be_visible()


def test_a_researcher_s_home_shows_her_active_job_and_not_another_team_s(page: Page, fleet) -> None:
    from django.contrib.auth.models import User

    from governance.models import PriorityTier
    from scheduler import actions, submission

    organization = next(iter(fleet.values())).organization
    PriorityTier.objects.get_or_create(
        organization=organization, name="normal", defaults={"value": 50, "is_default": True}
    )
    jobs = {}
    for username, name in (("alice", "vit-pretrain"), ("bob", "grasp-policy")):
        user = User.objects.get(username=username)
        team = actions.teams_for_submission(user)[0]
        request = submission.JobRequest(team=team, name=name, time_limit=3600, image="ghcr.io/lab/train:1",
                                        command=["python", "train.py"], accelerators=1)  # fmt: skip
        jobs[username], _ = actions.submit_job(user, request)
    page.set_viewport_size(LAPTOP)
    sign_in_as(page, "alice")
    work = page.get_by_test_id("home-work")
    row = work.get_by_test_id("active-jobs").locator(f'tr[data-job="{jobs["alice"].pk}"]')
    expect(row).to_contain_text("vit-pretrain")
    expect(row.locator(".badge")).to_have_text(re.compile(r"^(Pending|Admitted|Placing|Running)$"))
    expect(work.get_by_test_id("active-count")).to_have_text("1")
    expect(work).not_to_contain_text("grasp-policy")
    shot(page, "alice-with-a-job")
    row.get_by_role("link").click()
    expect(page.locator("h1")).to_contain_text("vit-pretrain")
