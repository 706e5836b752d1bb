"""Every id in a URL is an id the database can hold: ``<id:…>`` (``common.params.IdConverter``), never Django's
``<int:…>``, which takes any number of digits. A foreign key compared with an id past 2**63 raised SQLite's
OverflowError (a 500 on the embedded defaults) where PostgreSQL found nothing; now such a path matches no URL.

The walk covers every route of the URLconf, pages and API alike, so a route added later is covered too: each is
asked for with each id in it past 64 bits in turn, by an admin (a GET, or a POST where only that is allowed), and
must answer a 404.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import pytest
from django.test import Client
from django.urls import URLPattern, URLResolver, get_resolver
from django.urls.converters import IntConverter
from django.urls.resolvers import RoutePattern

from common.params import MAX_ID, IdConverter
from tests.conftest import World, api_client

pytestmark = pytest.mark.each_database  # differs by database: CI runs it on both

PAST_64_BITS = str(MAX_ID + 1)
_GROUP = re.compile(r"\(\?P<(\w+)>[^)]*\)")
_PLACEHOLDER = re.compile(r"<(?:(\w+):)?(\w+)>")


def _routes(patterns: list[Any], prefix: str = "") -> Iterator[tuple[str, dict[str, Any]]]:
    """Each endpoint's route, as text, and its converters by name (a regex's groups have none)."""
    for entry in patterns:
        pattern = entry.pattern
        text = str(pattern).lstrip("^").rstrip("$").replace(r"\Z", "").replace("\\", "")
        converters = dict(pattern.converters) if isinstance(pattern, RoutePattern) else {}
        if isinstance(entry, URLResolver):
            for route, inner in _routes(entry.url_patterns, prefix + text):
                yield route, {**converters, **inner}
        elif isinstance(entry, URLPattern):
            yield prefix + text, converters


ROUTES = sorted({route for route, _ in _routes(get_resolver().url_patterns)})


def test_no_route_takes_an_unbounded_number() -> None:
    unbounded = [
        route
        for route, converters in _routes(get_resolver().url_patterns)
        if any(isinstance(c, IntConverter) for c in converters.values())
    ]
    assert unbounded == []
    assert any(isinstance(c, IdConverter) for _, cs in _routes(get_resolver().url_patterns) for c in cs.values())


def _template(route: str) -> list[str]:
    """The route's text around each id it takes (a group named ``…pk``/``…id``, an ``<id:…>`` or ``<int:…>``),
    any other part it takes filled with ``x``."""
    route = _GROUP.sub(lambda m: "\0" if m.group(1).endswith(("pk", "id")) else "x", route)
    return _PLACEHOLDER.sub(lambda m: "\0" if m.group(1) in ("id", "int") else "x", route).split("\0")


def _with_a_huge_id(route: str) -> Iterator[str]:
    """The route once for each id in it: that id past 64 bits, any other 1 (a lookup by two ids finds nothing
    by the huge one only if it compares it). Nothing for a route that names no id."""
    parts = _template(route)
    for huge in range(len(parts) - 1):
        ids = [PAST_64_BITS if n == huge else "1" for n in range(len(parts) - 1)]
        filled = "".join(part + id_ for part, id_ in zip(parts, [*ids, ""], strict=True))
        if re.fullmatch(r"[\w/.\-]*", filled):
            yield "/" + filled


ID_ROUTES = sorted({path for route in ROUTES for path in _with_a_huge_id(route)})


def test_the_walk_finds_pages_and_api_routes_with_ids() -> None:
    assert f"/jobs/{PAST_64_BITS}/" in ID_ROUTES
    assert f"/api/v1/models/{PAST_64_BITS}/versions/1/artifact" in ID_ROUTES
    assert f"/api/v1/models/1/versions/{PAST_64_BITS}/artifact" in ID_ROUTES
    assert f"/api/v1/teams/{PAST_64_BITS}/member-limits/" in ID_ROUTES
    assert len(ID_ROUTES) > 60


@pytest.mark.parametrize("path", ID_ROUTES)
def test_an_id_past_64_bits_is_a_404(world: World, path: str) -> None:
    if path.startswith("/api/"):
        client: Any = api_client(world.users["adam"])
    else:
        client = Client()
        client.force_login(world.users["adam"])
    client.raise_request_exception = False
    response = client.get(path)
    if response.status_code == 405:  # an action: what it changes is looked up first
        response = client.post(path, {}, **({"format": "json"} if path.startswith("/api/") else {}))
    assert response.status_code == 404, (path, response.status_code, response.content[:300])
