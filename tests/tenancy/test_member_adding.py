"""Who may be added to a team: a lead adds people already in the organization, an organization admin also
accounts new to the portal, a superuser anyone. Anyone else is answered exactly as an unknown username, and
nothing changes (no role, no audit entry, the same default organization in billing)."""

from __future__ import annotations

import re
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.test import Client

from billing import params
from tenancy.models import AuditLog, Membership
from tests.conftest import World, api_client

CSRF = re.compile(r'name="csrfmiddlewaretoken" value="[^"]*"')


def _state() -> tuple[list[tuple[Any, ...]], int]:
    return list(Membership.objects.order_by("pk").values_list("user", "organization", "team", "role")), (
        AuditLog.objects.count()
    )


def _api_add(world: World, actor: str) -> Any:
    """Adds a researcher to Vision through the API, as ``actor``."""
    client = api_client(world.users[actor])
    team = world.teams["vision"].pk
    return lambda name: client.post(
        "/api/v1/memberships/", {"username": name, "organization": world.org.pk, "team": team, "role": "researcher"}
    )


def _page_add(world: World, actor: str) -> Any:
    """Adds a researcher to Vision through the team's page, as ``actor``."""
    client = Client()
    client.force_login(world.users[actor])
    path = f"/teams/{world.teams['vision'].pk}/members/"
    return lambda name: client.post(path, {"username": name, "role": "researcher"})


def _refusals(add: Any, names: list[str]) -> list[tuple[int, str]]:
    """Each name's answer, with the name itself replaced, as the answers must differ in nothing else."""
    answers = []
    for name in names:
        before = _state()
        response = add(name)
        assert _state() == before, f"adding {name} changed something"
        # Pages differ only in their CSRF tokens, which are masked afresh for every answer.
        text = CSRF.sub("", response.content.decode()).replace(name, "NAME")
        answers.append((response.status_code, text))
    return answers


@pytest.fixture
def newcomer(world: World) -> User:
    """An account that belongs to no organization yet, and one of the organization no longer active."""
    User.objects.create_user("nina", password="pw")
    gone = User.objects.create_user("gus", password="pw", is_active=False)
    Membership.objects.create(user=gone, organization=world.org, team=world.teams["robotics"], role="researcher")
    return User.objects.get(username="nina")


def test_a_lead_cannot_pull_in_someone_of_another_organization_and_is_told_as_for_an_unknown_name(
    world: World, newcomer: User
) -> None:
    trent = world.users["trent"]
    assert params.organization(trent) == world.other_org
    names = ["trent", "mallory", "nina", "gus", "nobody-at-all"]
    api = _refusals(_api_add(world, "lena"), names)
    assert {status for status, _ in api} == {400}
    assert len(set(api)) == 1, api
    body = _api_add(world, "lena")("trent").json()
    assert list(body["error"]["fields"]) == ["username"]
    assert "already in Demo Research Lab" in body["error"]["fields"]["username"][0]
    pages = _refusals(_page_add(world, "lena"), names)
    assert {status for status, _ in pages} == {400}
    assert len(set(pages)) == 1
    assert "No user &#x27;NAME&#x27; you can add" in pages[0][1]
    # The stranger's default organization in billing is still their own.
    assert params.organization(trent) == world.other_org
    assert not Membership.objects.filter(user=trent, organization=world.org).exists()


def test_a_lead_adds_people_of_the_organization(world: World) -> None:
    before = AuditLog.objects.filter(action="membership.created").count()
    response = _api_add(world, "lena")("bob")
    assert response.status_code == 201, response.json()
    response = _page_add(world, "lena")("fiona")
    assert response.status_code == 302
    added = Membership.objects.filter(team=world.teams["vision"], user__username__in=["bob", "fiona"])
    assert added.count() == 2
    assert AuditLog.objects.filter(action="membership.created").count() == before + 2


def test_an_admin_also_adds_a_new_account_but_not_someone_of_another_organization(world: World, newcomer: User) -> None:
    add = _api_add(world, "adam")
    answers = _refusals(add, ["trent", "gus", "nobody-at-all"])
    assert {status for status, _ in answers} == {400}
    assert len(set(answers)) == 1
    response = add("nina")
    assert response.status_code == 201, response.json()
    assert params.organization(newcomer) == world.org
    # Organization-wide roles follow the same rule.
    adam = api_client(world.users["adam"])
    payload = {"username": "trent", "organization": world.org.pk, "role": "finance"}
    before = _state()
    assert adam.post("/api/v1/memberships/", payload).status_code == 400
    assert _state() == before


def test_a_superuser_adds_anyone(world: World) -> None:
    root = User.objects.create_superuser("root", password="pw")
    world.users["root"] = root
    response = _api_add(world, "root")("trent")
    assert response.status_code == 201, response.json()
    assert Membership.objects.filter(user=world.users["trent"], team=world.teams["vision"]).exists()
