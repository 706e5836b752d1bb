"""Through the pages: sign-in required, another team's objects are 404, and nothing of theirs changes."""

from __future__ import annotations

import pytest
from django.test import Client

from tenancy.models import AuditLog, Membership, Project
from tenancy.scoping import Role
from tests.conftest import World

PAGES = ["/", "/teams/", "/account/tokens/", "/audit/"]


def signed_in(world: World, username: str) -> Client:
    client = Client()
    client.force_login(world.users[username])
    return client


@pytest.mark.parametrize("path", PAGES)
def test_anonymous_is_redirected_to_sign_in(world: World, path: str) -> None:
    response = Client().get(path)
    assert response.status_code == 302
    assert response["Location"] == f"/login/?next={path}"


def test_anonymous_posts_are_redirected_and_change_nothing(world: World) -> None:
    membership = world.membership("alice")
    response = Client().post(f"/memberships/{membership.pk}/role/", {"role": "lead"})
    assert response.status_code == 302
    membership.refresh_from_db()
    assert membership.role == Role.RESEARCHER


def test_another_teams_page_is_404(world: World) -> None:
    alice = signed_in(world, "alice")
    assert alice.get(f"/teams/{world.teams['vision'].pk}/").status_code == 200
    for team in ("robotics", "language", "intruders"):
        assert alice.get(f"/teams/{world.teams[team].pk}/").status_code == 404
    assert signed_in(world, "mallory").get(f"/teams/{world.teams['vision'].pk}/").status_code == 404


def test_team_list_shows_only_visible_teams(world: World) -> None:
    body = signed_in(world, "bob").get("/teams/").content.decode()
    assert "Robotics" in body
    assert "Vision" not in body
    assert "Intruders" not in body


def test_posts_against_another_team_are_404_and_change_nothing(world: World) -> None:
    lena = signed_in(world, "lena")
    bob = world.membership("bob")
    robotics = world.teams["robotics"].pk
    before = (Project.objects.count(), Membership.objects.count(), AuditLog.objects.count())
    assert lena.post(f"/teams/{robotics}/projects/", {"name": "Sneaky"}).status_code == 404
    assert lena.post(f"/teams/{robotics}/members/", {"username": "alice", "role": "lead"}).status_code == 404
    assert lena.post(f"/memberships/{bob.pk}/role/", {"role": "lead"}).status_code == 404
    assert lena.post(f"/memberships/{bob.pk}/remove/").status_code == 404
    assert (Project.objects.count(), Membership.objects.count(), AuditLog.objects.count()) == before


def test_researcher_sees_no_management_forms_and_cannot_post_them(world: World) -> None:
    alice = signed_in(world, "alice")
    vision = world.teams["vision"].pk
    page = alice.get(f"/teams/{vision}/").content.decode()
    assert 'data-testid="project-form"' not in page
    assert 'data-testid="member-form"' not in page
    assert alice.post(f"/teams/{vision}/projects/", {"name": "Mine"}).status_code == 403
    lena = world.membership("lena")
    assert alice.post(f"/memberships/{lena.pk}/role/", {"role": "researcher"}).status_code == 403
    own = world.membership("alice")
    assert alice.post(f"/memberships/{own.pk}/role/", {"role": "lead"}).status_code == 403
    lena.refresh_from_db()
    own.refresh_from_db()
    assert (lena.role, own.role) == (Role.LEAD, Role.RESEARCHER)
    assert not Project.objects.filter(name="Mine").exists()


def test_lead_manages_team_through_the_page(world: World) -> None:
    lena = signed_in(world, "lena")
    vision = world.teams["vision"].pk
    assert 'data-testid="project-form"' in lena.get(f"/teams/{vision}/").content.decode()
    response = lena.post(f"/teams/{vision}/projects/", {"name": "Tracking", "description": "video"})
    assert response.status_code == 302
    assert Project.objects.filter(team_id=vision, slug="tracking").exists()
    assert AuditLog.objects.filter(action="project.created", actor_name="lena").count() == 1


def test_audit_page_is_for_admins_only(world: World) -> None:
    for username in ("alice", "lena", "fiona"):
        assert signed_in(world, username).get("/audit/").status_code == 403
    assert signed_in(world, "adam").get("/audit/").status_code == 200


def test_audit_page_shows_only_own_organization(world: World) -> None:
    AuditLog.objects.create(organization=world.other_org, actor_name="mallory", action="secret.rival-thing")
    AuditLog.objects.create(organization=world.org, actor_name="adam", action="demo.visible-thing")
    body = signed_in(world, "adam").get("/audit/").content.decode()
    assert "demo.visible-thing" in body
    assert "secret.rival-thing" not in body


def test_home_shows_each_role_its_section(world: World) -> None:
    """Each role's section of the home page (``portal/home.py``; tests/portal/test_home.py has their figures)."""
    for username, section in [
        ("alice", "home-work"),
        ("lena", "home-team-vision"),
        ("fiona", "home-finance"),
        ("adam", "home-fleet"),
    ]:
        body = signed_in(world, username).get("/").content.decode()
        assert f'data-testid="{section}"' in body, username
        assert "coming soon" not in body, username
    assert "Audit log" not in signed_in(world, "alice").get("/").content.decode()
    assert "Price book" not in signed_in(world, "alice").get("/").content.decode()
