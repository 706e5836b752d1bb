"""Input that made the server fail (a 500) is refused with a 400 naming it, one test per root cause:
Unicode digits and out-of-range ids, NUL and other control characters, datetimes the database cannot hold,
JSON nested too deep, another team on the submit form, and bodies over the size limit.

NUL and the datetimes' offsets failed only on PostgreSQL: run this file with DATABASE_URL set too.
"""

from __future__ import annotations

import datetime as dt
import json
from typing import Any

import pytest
from django.test import Client, override_settings

from common import params
from tenancy.models import AuditLog, Project
from tests.common.test_bad_input import nothing_written
from tests.conftest import World, api_client

pytestmark = pytest.mark.each_database  # differs by database: CI runs it on both


def _named(response: Any, field: str) -> dict[str, Any]:
    """The API's 400, naming ``field``."""
    assert response.status_code == 400, response.content
    error: dict[str, Any] = response.json()["error"]
    assert (error["status"], error["code"]) == (400, "invalid"), error
    assert field in error["fields"], error
    assert field in error["message"], error
    return error


def _page(world: World, username: str) -> Client:
    client = Client()
    client.force_login(world.users[username])
    return client


# --- the parsers themselves ----------------------------------------------------------------------------------


@pytest.mark.parametrize("text", ["²", "٣", "\uff11", "3.0", " ", "+", "1e3", "0x10", "9" * 41])
def test_integers_are_ascii_digits_only(text: str) -> None:
    assert not text.isascii() or not text.strip().lstrip("+-").isdigit() or len(text) > 40
    with pytest.raises(params.BadParameter) as refused:
        params.integer(text, "limit")
    assert refused.value.message_dict == {"limit": ["A whole number."]}


@pytest.mark.parametrize("text", ["²", "٣", "0", "-1", str(2**63), "9" * 30, "", "1.0"])
def test_ids_are_ascii_digits_in_the_databases_range(text: str) -> None:
    assert params.as_id(text) is None
    with pytest.raises(params.BadParameter):
        params.id_(text, "team")
    assert params.as_id(str(2**63 - 1)) == 2**63 - 1


def test_datetimes_are_utc_within_what_the_database_stores() -> None:
    plus_twenty = params.datetime_("2026-01-01T00:00:00+20:00", "since")
    assert plus_twenty == dt.datetime(2025, 12, 31, 4, 0, tzinfo=dt.UTC)
    assert plus_twenty.utcoffset() == dt.timedelta(0)
    assert params.datetime_("2026-01-01", "since") == dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
    fullwidth = "\uff12\uff10\uff12\uff16-01-01"
    for text in ["0001-01-01T00:00:00+05:00", "9999-12-31T23:59:59-05:00", "yesterday", fullwidth]:
        with pytest.raises(params.BadParameter):
            params.datetime_(text, "since")


# --- Unicode digits and ids past the database's range: one parser for every id -----------------------------

UNICODE_DIGIT = "%C2%B2"  # ², which str.isdigit() takes and int() refuses
HUGE = "9" * 30  # past a 64-bit id: SQLite raised OverflowError


@pytest.mark.parametrize(
    "path",
    [
        "/api/v1/jobs/?team={v}",
        "/api/v1/jobs/?project={v}",
        "/api/v1/queues/?team={v}",
        "/api/v1/quota-changes/?team={v}",
        "/api/v1/budgets/?team={v}",
        "/api/v1/budget-alerts/?team={v}",
        "/api/v1/what-ifs/?cluster={v}",
        "/api/v1/teams/?slug={v}",
    ],
)
@pytest.mark.parametrize("value", [UNICODE_DIGIT, HUGE])
def test_slug_or_id_filters_take_any_text(world: World, path: str, value: str) -> None:
    response = api_client(world.users["adam"]).get(path.format(v=value))
    assert response.status_code == 200, response.content
    assert response.json()["results"] == []


@pytest.mark.parametrize(
    ("path", "field"),
    [
        ("/api/v1/teams/?organization={v}", "organization"),
        ("/api/v1/projects/?team={v}", "team"),
        ("/api/v1/memberships/?team={v}", "team"),
        ("/api/v1/quota-changes/?queue={v}", "queue"),
        ("/api/v1/budget-alerts/?budget={v}", "budget"),
        ("/api/v1/jobs/?page={v}", "page"),
        ("/api/v1/jobs/?page_size={v}", "page_size"),
        ("/api/v1/billing/job-costs/?limit={v}", "limit"),
    ],
)
@pytest.mark.parametrize("value", [UNICODE_DIGIT, HUGE, "-9.79e%2B166", "null"])
def test_ids_and_numbers_are_refused_by_name(world: World, path: str, field: str, value: str) -> None:
    _named(api_client(world.users["adam"]).get(path.format(v=value)), field)


@pytest.mark.parametrize("path", ["/api/v1/billing/costs/?team={v}", "/api/v1/billing/costs/?organization={v}"])
def test_finance_lookups_by_slug_or_id_take_any_text(world: World, path: str) -> None:
    response = api_client(world.users["fiona"]).get(path.format(v=UNICODE_DIGIT))
    assert response.status_code == 404, response.content
    assert response.json()["error"]["code"] == "not_found"


# --- NUL and other control characters: refused once, at the edge ----------------------------------------------


@pytest.mark.parametrize(
    ("path", "field"),
    [
        ("/api/v1/jobs/?q=a%00b", "q"),
        ("/api/v1/billing/costs/?team=a%00b", "team"),
        ("/api/v1/budgets/?team=vision%00", "team"),
        ("/api/v1/audit-log/?actor=%1Badam", "actor"),
        ("/api/v1/me/?x%00=1", "x\x00"),
    ],
)
def test_control_characters_in_a_query_are_400(world: World, path: str, field: str) -> None:
    error = _named(api_client(world.users["adam"]).get(path), field)
    assert "not allowed" in " ".join(error["fields"][field])


def test_nul_in_a_json_body_is_400_naming_where(world: World) -> None:
    client = api_client(world.users["lena"])
    vision = world.teams["vision"].pk
    with nothing_written():
        in_a_key = client.post("/api/v1/projects/", {"team": vision, "name": "P", "x\x00": 1}, format="json")
        in_a_value = client.post("/api/v1/projects/", {"team": vision, "name": "P", "slug": ["p\x00"]}, format="json")
        surrogate = client.generic(
            "POST", "/api/v1/projects/", f'{{"team": {vision}, "name": "\\ud800"}}', content_type="application/json"
        )
    assert _named(in_a_key, "x\x00")["fields"]["x\x00"] == ["A key: NUL characters are not allowed."]  # by itself
    assert _named(in_a_value, "slug.0")["fields"]["slug.0"] == ["NUL characters are not allowed."]
    assert _named(surrogate, "name")["fields"]["name"] == ["Unpaired surrogate characters are not allowed."]


def test_nul_in_a_form_is_400_naming_the_field(world: World) -> None:
    client, api = _page(world, "lena"), api_client(world.users["lena"])
    with nothing_written():
        response = client.post(f"/teams/{world.teams['vision'].pk}/projects/", {"name": "P\x00"})
        api_form = api.post(
            "/api/v1/projects/", {"team": world.teams["vision"].pk, "name": "P", "slug": "p\x00"}, format="multipart"
        )
    assert response.status_code == 400
    assert "NUL characters are not allowed." in response.content.decode()
    _named(api_form, "slug")


def test_nul_in_a_page_query_is_400(world: World) -> None:
    response = _page(world, "adam").get("/audit/?q=a%00b")
    assert response.status_code == 400
    assert "NUL characters are not allowed." in response.content.decode()


# --- datetimes: as UTC, within what the database stores --------------------------------------------------


def test_audit_log_since_with_an_offset_is_converted_to_utc(world: World) -> None:
    client = api_client(world.users["adam"])
    everything = client.get("/api/v1/audit-log/").json()["count"]
    assert everything > 0
    # +20:00 is a valid ISO 8601 offset that PostgreSQL refused ("time zone displacement out of range").
    response = client.get("/api/v1/audit-log/?since=2000-01-01T00:00:00%2B20:00&until=9999-01-01T00:00:00-05:00")
    assert response.status_code == 200, response.content
    assert response.json()["count"] == everything


@pytest.mark.parametrize(
    ("query", "field"),
    [("since=0001-01-01T00:00:00%2B05:00", "since"), ("until=9999-12-31T23:59:59-05:00", "until")],
)
def test_audit_log_datetimes_past_the_databases_range_are_400(world: World, query: str, field: str) -> None:
    _named(api_client(world.users["adam"]).get(f"/api/v1/audit-log/?{query}"), field)
    page = _page(world, "adam").get(f"/audit/?{query}")
    assert page.status_code == 400
    assert field in page.context["filter"].errors


# --- JSON nested too deep -----------------------------------------------------------------------------------


@pytest.mark.parametrize("depth", [params.MAX_JSON_DEPTH + 1, 100_000])
def test_deeply_nested_json_is_400_for_anyone(db: Any, depth: int) -> None:
    body = "[" * depth + "]" * depth
    response = api_client().generic("POST", "/api/v1/auth/token/", body, content_type="application/json")
    assert response.status_code == 400, response.content
    error = response.json()["error"]
    assert error["code"] == "parse_error"
    assert f"deeper than {params.MAX_JSON_DEPTH}" in error["message"]


def test_json_as_deep_as_allowed_is_read(world: World) -> None:
    nested: Any = "x"
    for _ in range(params.MAX_JSON_DEPTH - 1):
        nested = [nested]
    response = api_client().post("/api/v1/auth/token/", {"username": nested, "password": "p"}, format="json")
    _named(response, "username")  # read, then refused by the serializer: not a string


def test_deeply_nested_json_in_a_form_field_is_a_field_error(world: World) -> None:
    deep = "[" * 100_000 + "]" * 100_000
    with pytest.raises(params.BadParameter) as refused:
        params.parse_json(deep, "options")
    assert refused.value.message_dict == {"options": [f"JSON nested deeper than {params.MAX_JSON_DEPTH} levels."]}
    assert json.loads("[[1]]") == params.parse_json("[[1]]")


# --- the submit form, posted with a team that is not the user's -------------------------------------------


@pytest.mark.parametrize("path", ["/jobs/new/", "/jobs/new/preview/"])
def test_submit_form_with_another_team_is_a_field_error(world: World, path: str) -> None:
    intruders = world.teams["intruders"].pk
    client = _page(world, "alice")
    with nothing_written():
        response = client.post(path, {"team": intruders, "name": "x", "image": "busybox"})
    assert response.status_code == (400 if path == "/jobs/new/" else 200)
    assert "team" in response.context["form"].errors


# --- bodies over the size limit --------------------------------------------------------------------------------


@override_settings(DATA_UPLOAD_MAX_MEMORY_SIZE=1000)
def test_api_body_over_the_limit_is_413_in_the_error_shape(db: Any) -> None:
    body = json.dumps({"username": "a" * 2000, "password": "p"})
    response = api_client().generic("POST", "/api/v1/auth/token/", body, content_type="application/json")
    assert response.status_code == 413
    assert response["Content-Type"] == "application/json"
    error = response.json()["error"]
    assert (error["status"], error["code"]) == (413, "too_large")


@override_settings(DATA_UPLOAD_MAX_MEMORY_SIZE=1000)
def test_page_body_over_the_limit_is_400(world: World) -> None:
    client = _page(world, "lena")
    before = Project.objects.count(), AuditLog.objects.count()
    response = client.post(f"/teams/{world.teams['vision'].pk}/projects/", {"name": "P" * 2000})
    assert response.status_code == 400
    assert "too large" in response.content.decode()
    assert (Project.objects.count(), AuditLog.objects.count()) == before
