"""Sign in as each demo role in a real browser and check what each one sees and may do."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from playwright.sync_api import Page, expect

from demo.tenancy import DEMO_PASSWORD, USERS
from tenancy.models import Team
from tenancy.scoping import Role

pytestmark = pytest.mark.browser

ARTIFACTS = Path(__file__).resolve().parents[2] / "test-artifacts" / "browser"
ALL_TEAMS = {"Vision", "Robotics", "Language"}
VISIBLE_TEAMS = {
    "alice": {"Vision"},
    "bob": {"Robotics"},
    "lena": {"Vision"},
    "fiona": ALL_TEAMS,
    "adam": ALL_TEAMS,
}
HOME = re.compile(r"/$")
LOGIN = re.compile(r"/login/(\?.*)?$")


def visit(page: Page, path: str, status: int) -> None:
    """Open `path` and check the HTTP status of the answer."""
    response = page.goto(path)
    assert response is not None
    assert response.status == status


def sign_in(page: Page, username: str, password: str = DEMO_PASSWORD) -> None:
    page.goto("/login/")
    page.locator("#id_username").fill(username)
    page.locator("#id_password").fill(password)
    page.get_by_role("button", name="Sign in").click()
    expect(page).to_have_url(HOME)
    expect(page.get_by_test_id("username")).to_have_text(username)


def nav_link(page: Page, name: str):
    return page.get_by_role("navigation", name="Main").get_by_role("link", name=name, exact=True)


def team_pk(slug: str) -> int:
    return Team.objects.get(organization__slug="demo", slug=slug).pk


@pytest.mark.parametrize("demo_user", USERS, ids=[u.username for u in USERS])
def test_each_role_sees_its_own_home_and_teams(page: Page, demo, demo_user):
    sign_in(page, demo_user.username)
    # Each role's own section of the home page, with the link to its main job (tests/browser/test_homes.py).
    section = {
        Role.RESEARCHER: "home-work",
        Role.LEAD: "home-team-vision",
        Role.FINANCE: "home-finance",
        Role.ADMIN: "home-fleet",
        Role.PROCUREMENT: "home-procurement",
    }[demo_user.role]
    expect(page.get_by_test_id(section).get_by_test_id("main-link")).to_be_visible()
    expect(page.get_by_text("coming soon")).to_have_count(0)

    procurement = demo_user.role == Role.PROCUREMENT  # plans capacity without seeing the teams' work
    for name in ("API tokens", "API"):
        expect(nav_link(page, name)).to_have_count(1)
    expect(nav_link(page, "Teams")).to_have_count(0 if procurement else 1)
    is_admin = demo_user.role == Role.ADMIN
    expect(nav_link(page, "Audit log")).to_have_count(1 if is_admin else 0)
    expect(page.get_by_test_id("heartbeat")).to_have_count(1 if is_admin else 0)
    badge = page.locator(".topbar .badge")  # the admin's shortened to fit the bar; its title says it whole
    expect(badge).to_have_text(["Admin" if is_admin else demo_user.role.label])
    expect(badge).to_have_attribute("title", demo_user.role.label)

    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / f"{demo_user.username}-home.png"), full_page=True)

    if procurement:
        expect(nav_link(page, "Capacity")).to_have_count(1)
        return
    nav_link(page, "Teams").click()
    expect(page).to_have_url(re.compile(r"/teams/$"))
    expect(page.get_by_role("heading", name="Teams", exact=True)).to_be_visible()
    listed = page.locator("main table tbody tr td:first-child a").all_inner_texts()
    assert sorted(listed) == sorted(VISIBLE_TEAMS[demo_user.username])


def test_researcher_cannot_open_another_team_or_the_audit_log(page: Page, demo):
    sign_in(page, "alice")

    visit(page, f"/teams/{team_pk('robotics')}/", 404)
    expect(page.get_by_role("heading", name="Not found.")).to_be_visible()
    expect(page.get_by_text("Robotics")).to_have_count(0)

    visit(page, "/audit/", 403)
    expect(page.get_by_role("heading", name="You may not do that.")).to_be_visible()
    expect(page.get_by_test_id("audit")).to_have_count(0)


def test_lead_creates_a_project_and_sees_errors_beside_the_field(page: Page, demo):
    sign_in(page, "lena")
    visit(page, f"/teams/{team_pk('vision')}/", 200)
    expect(page.get_by_test_id("member-form")).to_be_visible()
    form = page.get_by_test_id("project-form")
    projects = page.get_by_test_id("projects")
    expect(projects.locator("tbody tr td:first-child")).to_have_text(["Detection", "Segmentation"])

    form.locator("#id_name").fill("Tracking")
    form.locator("#id_description").fill("Multi-object tracking in video.")
    form.get_by_role("button", name="Create project").click()
    expect(page.get_by_role("status")).to_have_text("Project Tracking created.")
    expect(projects.locator("tbody tr td:first-child")).to_have_text(["Detection", "Segmentation", "Tracking"])
    # Left empty, the slug is made from the name.
    expect(projects.locator("tbody tr", has_text="Tracking").locator("code")).to_have_text("tracking")

    with page.expect_response(lambda r: r.request.method == "POST") as info:
        form.get_by_role("button", name="Create project").click()
    assert info.value.status == 400
    name_field = form.locator(".field", has=page.locator("#id_name"))
    expect(name_field).to_have_class(re.compile(r"\binvalid\b"))
    expect(name_field.get_by_role("alert")).to_have_text("This field is required.")
    expect(projects.locator("tbody tr")).to_have_count(3)


def test_researcher_cannot_manage_their_team(page: Page, demo):
    sign_in(page, "alice")
    visit(page, f"/teams/{team_pk('vision')}/", 200)
    expect(page.get_by_role("heading", name=re.compile("^Vision"))).to_be_visible()
    expect(page.get_by_test_id("members")).to_contain_text("alice")
    expect(page.get_by_test_id("members")).to_contain_text("lena")
    expect(page.get_by_test_id("projects")).to_contain_text("Detection")
    expect(page.get_by_test_id("project-form")).to_have_count(0)
    expect(page.get_by_test_id("member-form")).to_have_count(0)
    expect(page.get_by_role("button", name="Remove")).to_have_count(0)


def test_wrong_password_shows_an_error_and_stays_signed_out(page: Page, demo):
    page.goto("/login/")
    page.locator("#id_username").fill("alice")
    page.locator("#id_password").fill("not-the-password")
    with page.expect_response(lambda r: r.request.method == "POST") as info:
        page.get_by_role("button", name="Sign in").click()
    assert info.value.status == 400
    expect(page).to_have_url(LOGIN)
    expect(page.get_by_role("alert")).to_contain_text("correct username and password")
    expect(page.get_by_test_id("username")).to_have_count(0)

    page.goto("/")
    expect(page).to_have_url(LOGIN)
    expect(page.get_by_role("button", name="Sign in")).to_be_visible()


def test_admin_reads_their_own_sign_in_in_the_audit_log(page: Page, demo):
    sign_in(page, "adam")
    nav_link(page, "Audit log").click()
    expect(page).to_have_url(re.compile(r"/audit/$"))
    rows = page.get_by_test_id("audit").locator("tbody tr")
    own_login = rows.filter(has=page.locator("td:nth-child(2)", has_text=re.compile(r"^adam$"))).filter(
        has=page.locator('td:nth-child(3) [data-action="auth.login"]', has_text=re.compile(r"^Signed in$"))
    )
    expect(own_login).to_have_count(1)
    expect(own_login.locator("td:nth-child(6)")).to_have_text("127.0.0.1")


def test_researcher_creates_a_token_then_signs_out(page: Page, demo):
    sign_in(page, "alice")
    nav_link(page, "API tokens").click()
    expect(page).to_have_url(re.compile(r"/account/tokens/$"))
    form = page.get_by_test_id("token-form")
    form.locator("#id_name").fill("laptop CLI")
    form.get_by_role("button", name="Create token").click()

    token = page.get_by_test_id("new-token")
    expect(token).to_be_visible()
    assert token.inner_text().strip().startswith("qm_")
    expect(page.get_by_test_id("tokens").locator("tbody tr")).to_have_count(1)
    expect(page.get_by_test_id("tokens")).to_contain_text("laptop CLI")
    # Only a hint of the token stays on the page once shown.
    assert token.inner_text().strip() not in page.get_by_test_id("tokens").inner_text()

    page.get_by_role("button", name="Sign out").click()
    expect(page).to_have_url(LOGIN)
    expect(page.get_by_role("heading", name="Sign in")).to_be_visible()
    expect(page.get_by_test_id("username")).to_have_count(0)
    page.goto("/account/tokens/")
    expect(page).to_have_url(LOGIN)
