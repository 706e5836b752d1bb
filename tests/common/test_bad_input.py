"""Bad input to every form and endpoint: 400, the offending field named, and nothing written."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.test import Client

from tenancy.models import ApiToken, AuditLog, Membership, Organization, Project, Team
from tests.conftest import World, api_client

MODELS = (User, Organization, Team, Project, Membership, ApiToken, AuditLog)


@contextmanager
def nothing_written() -> Iterator[None]:
    """Nothing changes, except that a refused sign-in is recorded in the audit log, as it must be."""
    refused = AuditLog.objects.filter(action="auth.login_failed")
    before = {model: model.objects.count() for model in MODELS}
    refused_before = refused.count()
    roles = sorted(Membership.objects.values_list("pk", "role"))
    yield
    after = {model: model.objects.count() for model in MODELS}
    after[AuditLog] -= refused.count() - refused_before
    assert after == before
    assert sorted(Membership.objects.values_list("pk", "role")) == roles


def _ids(world: World) -> dict[str, int]:
    return {"vision": world.teams["vision"].pk, "org": world.org.pk, "alice": world.membership("alice").pk}


# (who, method, path, payload, fields that must be named)
API_CASES: list[tuple[str | None, str, str, Any, set[str]]] = [
    ("adam", "post", "/api/v1/teams/", {}, {"organization", "name"}),
    ("adam", "post", "/api/v1/teams/", {"organization": "{org}", "name": "X", "slug": "not a slug!"}, {"slug"}),
    ("adam", "post", "/api/v1/teams/", {"organization": 99999, "name": "X"}, {"organization"}),
    ("adam", "post", "/api/v1/teams/", {"organization": "{org}", "name": "Vision"}, {"slug"}),
    ("adam", "post", "/api/v1/teams/", {"organization": "{org}", "name": "x" * 121}, {"name"}),
    ("lena", "post", "/api/v1/projects/", {"team": "{vision}"}, {"name"}),
    ("lena", "post", "/api/v1/projects/", {"team": "nope", "name": "P"}, {"team"}),
    ("lena", "post", "/api/v1/projects/", {"team": "{vision}", "name": "Detection"}, {"slug"}),
    ("lena", "post", "/api/v1/projects/", {"team": "{vision}", "name": "!!!"}, {"name"}),
    (
        "lena",
        "post",
        "/api/v1/memberships/",
        {"organization": "{org}", "team": "{vision}", "role": "researcher"},
        {"username"},
    ),
    (
        "lena",
        "post",
        "/api/v1/memberships/",
        {"username": "ghost", "organization": "{org}", "team": "{vision}", "role": "researcher"},
        {"username"},
    ),
    (
        "lena",
        "post",
        "/api/v1/memberships/",
        {"username": "bob", "organization": "{org}", "team": "{vision}", "role": "emperor"},
        {"role"},
    ),
    (
        "lena",
        "post",
        "/api/v1/memberships/",
        {"username": "bob", "organization": "{org}", "role": "researcher"},
        {"team"},
    ),
    (
        "adam",
        "post",
        "/api/v1/memberships/",
        {"username": "bob", "organization": "{org}", "team": "{vision}", "role": "admin"},
        {"team"},
    ),
    (
        "lena",
        "post",
        "/api/v1/memberships/",
        {"username": "alice", "organization": "{org}", "team": "{vision}", "role": "lead"},
        {"username"},
    ),
    ("lena", "patch", "/api/v1/memberships/{alice}/", {"role": "emperor"}, {"role"}),
    ("lena", "patch", "/api/v1/memberships/{alice}/", {}, {"role"}),
    ("adam", "patch", "/api/v1/memberships/{alice}/", {"role": "finance"}, {"role"}),
    (None, "post", "/api/v1/auth/token/", {}, {"username", "password"}),
    (None, "post", "/api/v1/auth/token/", {"username": "alice", "password": "wrong"}, {"password"}),
    (
        None,
        "post",
        "/api/v1/auth/token/",
        {"username": "alice", "password": "demo", "expires_in_days": 0},
        {"expires_in_days"},
    ),
    (None, "post", "/api/v1/auth/token/", {"username": "alice", "password": "demo", "name": ""}, {"name"}),
    ("adam", "get", "/api/v1/audit-log/?since=yesterday", None, {"since"}),
    ("alice", "get", "/api/v1/projects/?archived=maybe", None, {"archived"}),
    ("alice", "get", "/api/v1/memberships/?role=emperor", None, {"role"}),
]


def _fill(value: Any, ids: dict[str, int]) -> Any:
    if isinstance(value, dict):
        return {key: _fill(item, ids) for key, item in value.items()}
    if isinstance(value, str) and value.startswith("{") and value.endswith("}") and value[1:-1] in ids:
        return ids[value[1:-1]]
    if isinstance(value, str):
        return value.format(**ids)
    return value


@pytest.mark.parametrize(("who", "method", "path", "payload", "fields"), API_CASES)
def test_api_bad_input(world: World, who: str | None, method: str, path: str, payload: Any, fields: set[str]) -> None:
    ids = _ids(world)
    client = api_client(world.users[who]) if who else api_client()
    with nothing_written():
        response = getattr(client, method)(_fill(path, ids), _fill(payload, ids))
    assert response.status_code == 400, response.content
    error = response.json()["error"]
    assert error["status"] == 400
    assert fields <= set(error["fields"]), error
    for field in fields:
        assert field in error["message"] or error["code"] != "invalid", error


def test_api_malformed_json_is_400(world: World) -> None:
    client = api_client(world.users["lena"])
    with nothing_written():
        response = client.generic("POST", "/api/v1/projects/", "{not json", content_type="application/json")
    assert response.status_code == 400
    assert response.json()["error"]["code"] == "parse_error"


# (who, path, data, fields)
FORM_CASES: list[tuple[str | None, str, dict[str, str], set[str]]] = [
    (None, "/login/", {"username": "", "password": ""}, {"username", "password"}),
    (None, "/login/", {"username": "alice", "password": "wrong"}, {"__all__"}),
    ("lena", "/teams/{vision}/projects/", {"name": ""}, {"name"}),
    ("lena", "/teams/{vision}/projects/", {"name": "Detection"}, {"name"}),
    ("lena", "/teams/{vision}/projects/", {"name": "P", "slug": "bad slug"}, {"slug"}),
    ("lena", "/teams/{vision}/members/", {"username": "ghost", "role": "researcher"}, {"username"}),
    ("lena", "/teams/{vision}/members/", {"username": "bob", "role": "admin"}, {"role"}),
    ("lena", "/teams/{vision}/members/", {"username": "", "role": ""}, {"username", "role"}),
    ("lena", "/memberships/{alice}/role/", {"role": "emperor"}, {"role"}),
    ("alice", "/account/tokens/", {"name": "", "expires_in_days": "30"}, {"name"}),
    ("alice", "/account/tokens/", {"name": "x", "expires_in_days": "0"}, {"expires_in_days"}),
    ("alice", "/account/tokens/", {"name": "x", "expires_in_days": "many"}, {"expires_in_days"}),
]


@pytest.mark.parametrize(("who", "path", "data", "fields"), FORM_CASES)
def test_form_bad_input(world: World, who: str | None, path: str, data: dict[str, str], fields: set[str]) -> None:
    client = Client()
    if who:
        client.force_login(world.users[who])
    with nothing_written():
        response = client.post(path.format(**_ids(world)), data)
    assert response.status_code == 400
    body = response.content.decode()
    assert 'role="alert"' in body
    context = response.context
    if context is not None and "form" in context and hasattr(context["form"], "errors"):
        assert fields <= set(context["form"].errors), context["form"].errors
    else:
        # The team page carries several forms; the named field's error is shown beside it.
        assert any(f'id="id_{field}"' in body for field in fields) or "role" in fields


def test_audit_filter_bad_date_is_400(world: World) -> None:
    client = Client()
    client.force_login(world.users["adam"])
    response = client.get("/audit/?since=yesterday")
    assert response.status_code == 400
    assert "since" in response.context["filter"].errors
