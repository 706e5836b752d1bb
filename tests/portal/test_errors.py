"""One error format for the API: unknown paths, wrong methods and failures answer in it too."""

from __future__ import annotations

from tests.conftest import World, api_client


def test_unknown_api_path_is_json_404(world: World) -> None:
    response = api_client(world.users["alice"]).get("/api/v1/no-such-thing/")
    assert response.status_code == 404
    assert response.json()["error"]["code"] == "not_found"


def test_wrong_method_is_405_in_the_error_format(world: World) -> None:
    response = api_client(world.users["alice"]).put("/api/v1/me/", {})
    assert response.status_code == 405
    error = response.json()["error"]
    assert (error["status"], error["code"]) == (405, "method_not_allowed")


def test_unknown_page_is_html_404(world: World, client) -> None:  # type: ignore[no-untyped-def]
    client.force_login(world.users["alice"])
    response = client.get("/no-such-page/")
    assert response.status_code == 404
    assert b"belongs to a team you are not in" in response.content


def test_healthz(client, db) -> None:  # type: ignore[no-untyped-def]
    response = client.get("/healthz/")
    assert (response.status_code, response.json()) == (200, {"status": "ok"})
