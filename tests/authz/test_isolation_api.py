"""Through the API, a team's objects are invisible (404) and untouchable to everyone outside it."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.utils import timezone

from tenancy import actions
from tenancy.models import ApiToken, AuditLog, Membership, Project
from tenancy.scoping import Role
from tests.conftest import World, api_client

ENDPOINTS = [
    "/api/v1/me/",
    "/api/v1/organizations/",
    "/api/v1/teams/",
    "/api/v1/projects/",
    "/api/v1/memberships/",
    "/api/v1/audit-log/",
    "/api/v1/auth/tokens/",
]


@pytest.mark.parametrize("path", ENDPOINTS)
def test_anonymous_gets_401_with_bearer_challenge(world: World, path: str) -> None:
    response = api_client().get(path)
    assert response.status_code == 401
    assert response["WWW-Authenticate"].startswith("Bearer")
    assert response.json()["error"]["code"] == "not_authenticated"


def _detail_paths(world: World, team: str) -> list[str]:
    paths = [f"/api/v1/teams/{world.teams[team].pk}/", f"/api/v1/projects/{world.project(team).pk}/"]
    paths += [f"/api/v1/memberships/{m.pk}/" for m in Membership.objects.filter(team=world.teams[team])]
    return paths


@pytest.mark.parametrize(
    ("username", "team"),
    [("alice", "robotics"), ("bob", "vision"), ("mallory", "vision"), ("adam", "intruders"), ("lena", "language")],
)
def test_other_teams_objects_are_404_for_every_verb(world: World, api: Any, username: str, team: str) -> None:
    client = api(username)
    before = (Project.objects.count(), Membership.objects.count(), AuditLog.objects.count())
    for path in _detail_paths(world, team):
        assert client.get(path).status_code == 404, path
        assert client.patch(path, {"role": "lead", "name": "x"}).status_code in (404, 405), path
        assert client.delete(path).status_code in (404, 405), path
    listed = {t["slug"] for t in client.get("/api/v1/teams/?page_size=500").json()["results"]}
    assert team not in listed
    assert listed  # the user does see their own teams, so the empty answer is not what hides the other
    assert (Project.objects.count(), Membership.objects.count(), AuditLog.objects.count()) == before


def test_list_endpoints_show_only_own_team(world: World, api: Any) -> None:
    client = api("alice")
    assert [t["slug"] for t in client.get("/api/v1/teams/").json()["results"]] == ["vision"]
    projects = client.get("/api/v1/projects/").json()["results"]
    assert {p["team"] for p in projects} == {world.teams["vision"].pk}
    members = client.get("/api/v1/memberships/").json()["results"]
    assert {m["username"] for m in members} == {"alice", "lena"}
    # Filtering by another team's id answers as filtering by one that does not exist: neither its rows nor
    # whether it exists.
    robotics = world.teams["robotics"].pk
    other, missing = (client.get(f"/api/v1/projects/?team={pk}") for pk in (robotics, 987654))
    assert other.status_code == missing.status_code == 200
    assert other.json() == missing.json()
    assert other.json()["results"] == []
    rival = world.other_org.pk
    assert (
        client.get(f"/api/v1/memberships/?organization={rival}").json()
        == client.get("/api/v1/memberships/?organization=987654").json()
    )


def test_creating_in_another_team_is_refused_as_if_it_did_not_exist(world: World, api: Any) -> None:
    response = api("lena").post("/api/v1/projects/", {"team": world.teams["robotics"].pk, "name": "Sneaky"})
    assert response.status_code == 400
    assert "team" in response.json()["error"]["fields"]
    assert not Project.objects.filter(name="Sneaky").exists()


def test_researcher_cannot_raise_own_role(world: World, api: Any) -> None:
    alice = api("alice")
    own = world.membership("alice")
    response = alice.patch(f"/api/v1/memberships/{own.pk}/", {"role": "lead"})
    assert response.status_code == 403
    response = alice.post("/api/v1/memberships/", {"username": "alice", "organization": world.org.pk, "role": "admin"})
    assert response.status_code == 403
    own.refresh_from_db()
    assert own.role == Role.RESEARCHER
    assert Membership.objects.filter(user=world.users["alice"]).count() == 1


def test_lead_cannot_raise_own_role_or_grant_org_roles(world: World, api: Any) -> None:
    lena = api("lena")
    own = world.membership("lena")
    assert lena.patch(f"/api/v1/memberships/{own.pk}/", {"role": "researcher"}).status_code == 403
    payload = {"username": "alice", "organization": world.org.pk, "role": "finance"}
    assert lena.post("/api/v1/memberships/", payload).status_code == 403
    assert lena.post("/api/v1/memberships/", {**payload, "username": "lena", "role": "admin"}).status_code == 403
    assert set(Membership.objects.filter(user=world.users["lena"]).values_list("role", flat=True)) == {"lead"}


def test_lead_manages_own_team_members(world: World, api: Any) -> None:
    lena = api("lena")
    alice = world.membership("alice")
    response = lena.patch(f"/api/v1/memberships/{alice.pk}/", {"role": "lead", "reason": "runs the detection work"})
    assert response.status_code == 200, response.json()
    assert response.json()["role"] == "lead"
    entry = AuditLog.objects.get(action="membership.role_changed")
    assert (entry.actor_name, entry.changes, entry.reason) == (
        "lena",
        {"role": ["researcher", "lead"]},
        "runs the detection work",
    )
    response = lena.post(
        "/api/v1/memberships/",
        {"username": "bob", "organization": world.org.pk, "team": world.teams["vision"].pk, "role": "researcher"},
    )
    assert response.status_code == 201, response.json()
    assert Membership.objects.filter(user=world.users["bob"], team=world.teams["vision"]).exists()


def test_researcher_reads_but_cannot_change_own_team(world: World, api: Any) -> None:
    alice = api("alice")
    lena = world.membership("lena")
    assert alice.get(f"/api/v1/memberships/{lena.pk}/").status_code == 200
    assert alice.patch(f"/api/v1/memberships/{lena.pk}/", {"role": "researcher"}).status_code == 403
    assert alice.delete(f"/api/v1/memberships/{lena.pk}/").status_code == 403
    assert alice.post("/api/v1/projects/", {"team": world.teams["vision"].pk, "name": "Mine"}).status_code == 403
    lena.refresh_from_db()
    assert lena.role == Role.LEAD
    assert not Project.objects.filter(name="Mine").exists()


def test_finance_reads_every_team_but_changes_nothing(world: World, api: Any) -> None:
    fiona = api("fiona")
    assert fiona.get("/api/v1/teams/").json()["count"] == 3
    alice = world.membership("alice")
    assert fiona.patch(f"/api/v1/memberships/{alice.pk}/", {"role": "lead"}).status_code == 403
    assert fiona.post("/api/v1/projects/", {"team": world.teams["vision"].pk, "name": "Cheap"}).status_code == 403


def test_a_token_authenticates_only_its_owner(world: World) -> None:
    alice_token_row, alice_raw = actions.issue_token(world.users["alice"], name="laptop")
    bob = api_client(world.users["bob"])
    # Bob cannot see or revoke Alice's token.
    assert bob.get(f"/api/v1/auth/tokens/{alice_token_row.pk}/").status_code == 404
    assert bob.delete(f"/api/v1/auth/tokens/{alice_token_row.pk}/").status_code == 404
    alice_token_row.refresh_from_db()
    assert alice_token_row.revoked_at is None
    # Alice's token acts as Alice, never as anybody else.
    alice = api_client()
    alice.credentials(HTTP_AUTHORIZATION=f"Bearer {alice_raw}")
    assert alice.get("/api/v1/me/").json()["username"] == "alice"
    # A token that is almost right (one character changed) is refused.
    forged = alice_raw[:-1] + ("A" if alice_raw[-1] != "A" else "B")
    alice.credentials(HTTP_AUTHORIZATION=f"Bearer {forged}")
    assert alice.get("/api/v1/me/").status_code == 401


def test_revoked_and_expired_tokens_are_refused(world: World) -> None:
    token, raw = actions.issue_token(world.users["bob"], name="ci")
    client = api_client()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {raw}")
    assert client.get("/api/v1/me/").status_code == 200
    ApiToken.objects.filter(pk=token.pk).update(expires_at=timezone.now() - timedelta(seconds=1))
    assert client.get("/api/v1/me/").status_code == 401
    ApiToken.objects.filter(pk=token.pk).update(expires_at=timezone.now() + timedelta(days=1))
    assert client.delete("/api/v1/auth/token/").status_code == 204
    assert client.get("/api/v1/me/").status_code == 401


def test_inactive_users_token_is_refused(world: World) -> None:
    client = api_client(world.users["bob"])
    world.users["bob"].is_active = False
    world.users["bob"].save()
    assert client.get("/api/v1/me/").status_code == 401
