"""Personal API tokens: issued for a username and password, stored hashed, revocable, expiring."""

from __future__ import annotations

import hashlib
from datetime import timedelta

from django.db import connection
from django.test import Client
from django.utils import timezone

from tenancy import actions as tenancy_actions
from tenancy import tasks
from tenancy.models import ApiToken, AuditLog
from tests.conftest import World, api_client


def test_token_for_username_and_password(world: World) -> None:
    response = api_client().post(
        "/api/v1/auth/token/", {"username": "alice", "password": "demo", "name": "laptop", "expires_in_days": 7}
    )
    assert response.status_code == 201
    body = response.json()
    raw = body["token"]
    assert raw.startswith("qm_")
    assert body["name"] == "laptop"
    assert raw.startswith(body["hint"])
    token = ApiToken.objects.get(pk=body["id"])
    assert token.user == world.users["alice"]
    assert token.expires_at is not None
    assert timedelta(days=6, hours=23) < token.expires_at - timezone.now() <= timedelta(days=7)
    client = api_client()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {raw}")
    me = client.get("/api/v1/me/").json()
    assert me["username"] == "alice"
    assert [(m["team"], m["role"]) for m in me["memberships"]] == [("vision", "researcher")]


def test_only_the_hash_is_stored(world: World) -> None:
    body = api_client().post("/api/v1/auth/token/", {"username": "bob", "password": "demo"}).json()
    raw = body["token"]
    token = ApiToken.objects.get(pk=body["id"])
    assert token.key_hash == hashlib.sha256(raw.encode()).hexdigest()
    with connection.cursor() as cursor:
        cursor.execute("SELECT * FROM portal_apitoken")
        stored = " ".join(str(value) for row in cursor.fetchall() for value in row)
    assert raw not in stored
    assert raw[len(token.hint) :] not in stored
    assert "token" not in api_client(world.users["bob"]).get(f"/api/v1/auth/tokens/{token.pk}/").json()


def test_revocation_through_the_list_endpoint_and_the_page(world: World) -> None:
    client = api_client(world.users["alice"])
    other = api_client().post("/api/v1/auth/token/", {"username": "alice", "password": "demo"}).json()
    assert client.delete(f"/api/v1/auth/tokens/{other['id']}/").status_code == 204
    assert ApiToken.objects.get(pk=other["id"]).revoked_at is not None
    page_client = Client()
    page_client.force_login(world.users["alice"])
    third = api_client().post("/api/v1/auth/token/", {"username": "alice", "password": "demo"}).json()
    assert page_client.post(f"/account/tokens/{third['id']}/revoke/").status_code == 302
    revoked = api_client()
    revoked.credentials(HTTP_AUTHORIZATION=f"Bearer {third['token']}")
    assert revoked.get("/api/v1/me/").status_code == 401
    assert AuditLog.objects.filter(action="token.revoked", actor_name="alice").count() == 2


def test_revoking_twice_is_harmless(world: World) -> None:
    client = api_client(world.users["alice"])
    token = ApiToken.objects.filter(user=world.users["alice"]).get()
    assert client.delete("/api/v1/auth/token/").status_code == 204
    first = ApiToken.objects.get(pk=token.pk).revoked_at
    page_client = Client()
    page_client.force_login(world.users["alice"])
    page_client.post(f"/account/tokens/{token.pk}/revoke/")
    assert ApiToken.objects.get(pk=token.pk).revoked_at == first
    assert AuditLog.objects.filter(action="token.revoked").count() == 1


def test_page_creates_a_token_and_shows_it_once(world: World) -> None:
    client = Client()
    client.force_login(world.users["lena"])
    response = client.post("/account/tokens/", {"name": "notebook", "expires_in_days": "30"})
    assert response.status_code == 200
    raw = response.context["new_token"]
    assert raw.startswith("qm_")
    assert raw in response.content.decode()
    assert raw not in client.get("/account/tokens/").content.decode()


def test_last_used_is_recorded(world: World) -> None:
    client = api_client(world.users["bob"])
    token = ApiToken.objects.get(user=world.users["bob"])
    assert token.last_used_at is None
    client.get("/api/v1/me/")
    token.refresh_from_db()
    assert token.last_used_at is not None


def test_expire_task_deletes_only_long_dead_tokens(world: World) -> None:
    from tenancy import actions

    long_ago = timezone.now() - tenancy_actions.TOKEN_RETENTION - timedelta(days=1)
    actions.issue_token(world.users["bob"], name="live")
    dead, _ = actions.issue_token(world.users["bob"], name="dead")
    recent, _ = actions.issue_token(world.users["bob"], name="recently revoked")
    ApiToken.objects.filter(pk=dead.pk).update(expires_at=long_ago)
    ApiToken.objects.filter(pk=recent.pk).update(revoked_at=timezone.now())
    assert tasks.expire_api_tokens.delay().get() == 1
    assert set(ApiToken.objects.values_list("name", flat=True)) == {"live", "recently revoked"}
