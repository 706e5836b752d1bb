"""Service accounts: a team's tokens for CI and tooling, scoped read-only / submit / admin, made and revoked by
the team's lead or an admin, audited, shown once; tenancy treats them as members of their team."""

from __future__ import annotations

from typing import Any

import pytest
from django.core.exceptions import PermissionDenied, ValidationError
from django.test import Client
from django.urls import URLPattern, URLResolver, get_resolver
from rest_framework.test import APIClient

from tenancy import actions
from tenancy.authentication import ApiTokenAuthentication
from tenancy.models import ApiToken, AuditLog, Membership, ServiceAccount
from tenancy.scopes import TokenScope
from tests.conftest import World, api_client

pytestmark = pytest.mark.django_db


def bearer(raw: str) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {raw}")
    return client


def service_token(world: World, scope: str, team: str = "vision", by: str = "lena") -> str:
    creator = world.users[by] if by in world.users else world.users["trent"]
    _, raw = actions.create_service_account(creator, world.teams[team], name=f"ci-{scope}", scope=scope)
    return raw


def test_a_lead_creates_one_on_the_team_page_and_sees_the_token_once(world: World) -> None:
    client = Client()
    client.force_login(world.users["lena"])
    team = world.teams["vision"]
    response = client.post(
        f"/teams/{team.pk}/service-accounts/", {"name": "nightly CI", "scope": "submit", "expires_in_days": 30}
    )
    assert response.status_code == 200
    raw = response.context["new_service_token"]
    assert raw.startswith("qm_")
    assert raw in response.content.decode()
    account = ServiceAccount.objects.get()
    assert (account.team, account.scope, account.created_by) == (team, "submit", world.users["lena"])
    assert account.user.has_usable_password() is False
    assert Membership.objects.get(user=account.user).source == Membership.Source.SERVICE_ACCOUNT
    entry = AuditLog.objects.get(action="service_account.created")
    assert (entry.actor_name, entry.organization, entry.changes["scope"]) == ("lena", world.org, "submit")
    assert raw not in str(entry.changes)
    again = client.get(f"/teams/{team.pk}/").content.decode()
    assert "nightly CI" in again
    assert raw not in again
    assert bearer(raw).get("/api/v1/me/").json()["username"] == account.user.username


def test_only_the_teams_lead_or_an_admin_creates_and_revokes(world: World) -> None:
    vision = world.teams["vision"]
    for outsider in ("alice", "bob", "fiona", "trent", "mallory"):
        with pytest.raises(PermissionDenied):
            actions.create_service_account(world.users[outsider], vision, name="x", scope="read")
    account, _ = actions.create_service_account(world.users["adam"], vision, name="oncall", scope="read")
    with pytest.raises(PermissionDenied):
        actions.revoke_service_account(world.users["alice"], account)
    client = Client()
    client.force_login(world.users["bob"])
    assert client.post(f"/service-accounts/{account.pk}/revoke/").status_code == 404
    assert ServiceAccount.objects.get().revoked_at is None
    client.force_login(world.users["lena"])
    assert client.post(f"/service-accounts/{account.pk}/revoke/").status_code == 302
    assert AuditLog.objects.filter(action="service_account.revoked", actor_name="lena").count() == 1


def test_bad_input_is_refused_naming_the_field(world: World) -> None:
    lena, vision = world.users["lena"], world.teams["vision"]
    cases: list[tuple[dict[str, Any], str]] = [
        ({"name": " ", "scope": "read"}, "name"),
        ({"name": "x", "scope": "root"}, "scope"),
        ({"name": "x", "scope": "read", "expires_in_days": 0}, "expires_in_days"),
    ]
    for kwargs, field in cases:
        with pytest.raises(ValidationError) as refused:
            actions.create_service_account(lena, vision, **kwargs)
        assert field in refused.value.message_dict
    actions.create_service_account(lena, vision, name="ci", scope="read")
    with pytest.raises(ValidationError, match="already has a service account named"):
        actions.create_service_account(lena, vision, name="ci", scope="submit")
    client = Client()
    client.force_login(lena)
    response = client.post(f"/teams/{vision.pk}/service-accounts/", {"name": "y", "scope": "everything"})
    assert response.status_code == 400
    assert ServiceAccount.objects.count() == 1


def test_revoked_account_token_stops_working_and_its_role_goes(world: World) -> None:
    account, raw = actions.create_service_account(world.users["lena"], world.teams["vision"], name="ci", scope="read")
    assert bearer(raw).get("/api/v1/me/").status_code == 200
    actions.revoke_service_account(world.users["adam"], account)
    actions.revoke_service_account(world.users["adam"], account)
    assert bearer(raw).get("/api/v1/me/").status_code == 401
    assert not Membership.objects.filter(user=account.user).exists()
    assert ApiToken.objects.get(user=account.user).revoked_at is not None
    assert AuditLog.objects.filter(action="service_account.revoked").count() == 1


def test_its_role_is_not_changed_by_hand_and_it_joins_no_other_team(world: World) -> None:
    account, _ = actions.create_service_account(world.users["lena"], world.teams["vision"], name="ci", scope="read")
    membership = Membership.objects.get(user=account.user)
    with pytest.raises(ValidationError, match="revoke the service account"):
        actions.change_role(world.users["lena"], membership, role="lead")
    with pytest.raises(ValidationError, match="revoke the service account"):
        actions.remove_member(world.users["adam"], membership)
    with pytest.raises(ValidationError, match="No user"):
        actions.add_member(
            world.users["adam"], world.org, username=account.user.username, role="lead", team=world.teams["robotics"]
        )


def test_removing_its_role_on_the_team_page_is_a_400_saying_why(world: World) -> None:
    account, _ = actions.create_service_account(world.users["lena"], world.teams["vision"], name="ci", scope="read")
    membership = Membership.objects.get(user=account.user)
    client = Client(raise_request_exception=False)
    for who in ("lena", "adam"):
        client.force_login(world.users[who])
        response = client.post(f"/memberships/{membership.pk}/remove/")
        assert response.status_code == 400
        assert b"revoke the service account instead" in response.content
    assert Membership.objects.filter(pk=membership.pk).exists()
    assert not AuditLog.objects.filter(action="membership.removed").exists()


def test_a_service_account_creates_no_service_accounts(world: World) -> None:
    raw = service_token(world, "admin")
    token = ApiToken.objects.get(user__service_account__isnull=False)
    assert raw.startswith(token.hint)
    with pytest.raises(PermissionDenied, match="may not create service accounts"):
        actions.create_service_account(token.user, world.teams["vision"], name="more", scope="admin")


def _api_views(resolver: URLResolver, prefix: str = "") -> list[tuple[str, Any]]:
    found: list[tuple[str, Any]] = []
    for pattern in resolver.url_patterns:
        if isinstance(pattern, URLResolver):
            found += _api_views(pattern, prefix + str(pattern.pattern))
        elif isinstance(pattern, URLPattern) and (prefix + str(pattern.pattern)).startswith("api/v1/"):
            found.append((prefix + str(pattern.pattern), pattern.callback))
    return found


def test_every_api_view_that_takes_tokens_checks_their_scope() -> None:
    """The scope is enforced by one permission: no API view that accepts API tokens may leave it out."""
    views = _api_views(get_resolver())
    assert len(views) > 20
    for route, callback in views:
        view_class = getattr(callback, "cls", None) or getattr(callback, "view_class", None)
        assert view_class is not None, route
        if ApiTokenAuthentication not in view_class.authentication_classes:
            continue
        view = view_class()
        for method in ("GET", "POST", "PATCH", "DELETE"):
            view.request = type("R", (), {"method": method})()
            permissions = view.get_permissions()
            assert any(isinstance(p, TokenScope) for p in permissions), f"{route} {method}"


def test_the_api_creates_lists_and_revokes_them(world: World) -> None:
    lena = api_client(world.users["lena"])
    vision = world.teams["vision"]
    created = lena.post("/api/v1/service-accounts/", {"team": vision.pk, "name": "CI", "scope": "submit"})
    assert created.status_code == 201, created.json()
    body = created.json()
    raw = body["secret"]
    assert raw.startswith(body["token"]["hint"])
    assert (body["team"], body["scope"], body["created_by"]) == (vision.pk, "submit", "lena")
    assert bearer(raw).get("/api/v1/me/").json()["memberships"] == [
        {
            "id": Membership.objects.get(user__username=body["username"]).pk,
            "organization": "demo",
            "team": "vision",
            "role": "researcher",
        }
    ]
    listed = lena.get("/api/v1/service-accounts/").json()["results"]
    assert [(a["name"], "secret" in a) for a in listed] == [("CI", False)]
    members = lena.get("/api/v1/memberships/", {"team": vision.pk}).json()["results"]
    assert {m["username"]: m["source"] for m in members}[body["username"]] == "service_account"
    # Researchers, other teams' leads and other organizations see none of them; a researcher may not create one.
    for outsider in ("alice", "bob", "trent"):
        assert api_client(world.users[outsider]).get(f"/api/v1/service-accounts/{body['id']}/").status_code == 404
    refused = api_client(world.users["alice"]).post(
        "/api/v1/service-accounts/", {"team": vision.pk, "name": "mine", "scope": "admin"}
    )
    assert refused.status_code == 403
    bad = lena.post("/api/v1/service-accounts/", {"team": vision.pk, "name": "x", "scope": "root"})
    assert (bad.status_code, list(bad.json()["error"]["fields"])) == (400, ["scope"])
    assert lena.delete(f"/api/v1/service-accounts/{body['id']}/").status_code == 204
    assert bearer(raw).get("/api/v1/me/").status_code == 401
    assert ServiceAccount.objects.get().revoked_at is not None


def test_an_admin_scoped_token_makes_no_more_accounts_through_the_api(world: World) -> None:
    client = bearer(service_token(world, "admin"))
    response = client.post(
        "/api/v1/service-accounts/", {"team": world.teams["vision"].pk, "name": "x", "scope": "admin"}
    )
    assert response.status_code == 403
    assert ServiceAccount.objects.count() == 1
