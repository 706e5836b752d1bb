"""The authorization matrix: every route, page and API, tried by anonymous and by every role of two
organizations, on each organization's objects, against the one table of expected answers (`routes.py`).

A check fails on a status other than the table's, on a canary of an object outside the user's scope in any
answer (a leak, whatever the status), and on any change to the database by a request the table refuses.
Each check runs in a savepoint rolled back after it, so every check sees the same world. Route coverage is
checked from the resolver: a route without a row in the table fails `test_every_route_has_a_row`.
"""

from __future__ import annotations

import functools
import logging
import os
import re
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.cookies import SimpleCookie
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.db import connection, transaction
from django.test import Client
from django.urls import URLPattern, URLResolver, get_resolver, reverse
from rest_framework.test import APIClient

from tests.authz.routes import FAMILIES, ROWS, Family, Row, policy_grid
from tests.authz.world import Rel, Side, World, build, canary

pytestmark = pytest.mark.each_database  # differs by database: CI runs it on both

UNSAFE = {"POST", "PUT", "PATCH", "DELETE"}
SIGN_IN = re.compile(r"^/(admin/)?login/\?next=")
#: Refusals: a request answered so must leave the database as it was.
REFUSALS = {"in", "400", "401", "403", "404", "405"}
POLICY_TXT = Path(__file__).with_name("policy.txt")


# --- the routes, from the resolver ----------------------------------------------------------------------


@dataclass(frozen=True)
class Route:
    key: str  # namespace:name, or namespace:pattern for an unnamed one
    pattern: URLPattern
    prefix: str

    @property
    def methods(self) -> set[str]:
        """The methods a DRF view answers (the rest are 405 by DRF itself); empty for a Django view, which
        says so only at run time."""
        callback = self.pattern.callback
        actions = getattr(callback, "actions", None)
        if actions:
            return {m.upper() for m in actions}
        cls = getattr(callback, "cls", None)
        if cls is not None and hasattr(cls, "http_method_names"):
            return {m.upper() for m in ("get", "post", "put", "patch", "delete") if hasattr(cls, m)}
        return set()


@functools.cache
def routes() -> list[Route]:
    found: list[Route] = []

    def walk(patterns: list[Any], prefix: str, namespace: str) -> None:
        for p in patterns:
            if isinstance(p, URLResolver):
                ns = f"{namespace}:{p.namespace}".strip(":") if p.namespace else namespace
                walk(p.url_patterns, prefix + str(p.pattern), ns)
            else:
                name = p.name or str(p.pattern)
                found.append(Route(f"{namespace}:{name}".lstrip(":"), p, prefix + str(p.pattern)))

    walk(get_resolver().url_patterns, "", "")
    return found


def family_of(key: str) -> Family | None:
    return next((f for f in FAMILIES if key.startswith(f.prefix)), None)


def test_every_route_has_a_row() -> None:
    """A new route, or a new method of an API route, fails here until the table says who may use it."""
    rows: dict[str, set[str]] = {}
    for r in ROWS:
        rows.setdefault(r.route, set()).add(r.method)
    missing: list[str] = []
    methods: set[str] = set()
    for route in routes():
        if family_of(route.key):
            continue
        if route.key not in rows:
            missing.append(f"{route.key} (/{route.prefix})")
        elif untried := route.methods - rows[route.key] - {"HEAD", "OPTIONS"}:
            methods.add(f"{route.key}: {', '.join(sorted(untried))}")
    known = {r.key for r in routes()}
    stale = sorted(set(rows) - known)
    assert not missing, "Routes without a row in tests/authz/routes.py: " + "; ".join(sorted(set(missing)))
    assert not methods, "Methods of API routes without a row in tests/authz/routes.py: " + "; ".join(sorted(methods))
    assert not stale, f"Rows of routes that do not exist: {stale}"


#: Changes the policy does not decide: signing in and out, one's own new tokens and notification settings (and a
#: test notification to oneself), the probes' endpoint (for probe tokens alone), a job's checkpoints, exit code
#: and session address (for its own job token alone), a method the route refuses.
UNDECIDED = {
    ("login", "POST"),
    ("logout", "POST"),
    ("token-list", "POST"),
    ("notification-settings", "POST"),
    ("notification-send-test", "POST"),
    ("api:notification-preferences", "PUT"),
    ("api:notification-test", "POST"),
    ("oidc-callback", "POST"),
    ("api:token-obtain", "POST"),
    ("api:token-obtain", "DELETE"),
    ("api:probe-health", "POST"),
    ("api:job-checkpoints", "POST"),
    ("api:job-report", "POST"),
    ("api:job-progress", "POST"),
    ("api:job-session", "POST"),
    ("api:job-endpoint", "POST"),
    # The edge devices' own endpoints: a one-time token in the body, or a device's credential (tests/edge).
    ("api:edge-enrol", "POST"),
    ("api:edge-report", "POST"),
}


def test_every_change_row_names_its_permission() -> None:
    """A change's answers come from the policy's table (``perm``, its ``p`` columns), not written by hand."""
    unnamed = sorted({(r.route, r.method) for r in ROWS if r.method in UNSAFE and r.perm is None} - UNDECIDED)
    assert not unnamed, f"Change rows without the policy's permission: {unnamed}"


def test_the_policy_is_the_reviewed_one() -> None:
    """The change rows' answers are computed from the policy's table, so a wrong entry would move the code and
    the expected answers together: the table is pinned, in words, in ``policy.txt``. Changing who may do what
    means changing both, on purpose: ``UPDATE_POLICY_TXT=1 pytest tests/authz -k reviewed`` rewrites it."""
    if os.environ.get("UPDATE_POLICY_TXT"):
        POLICY_TXT.write_text(policy_grid())
    assert policy_grid() == POLICY_TXT.read_text(), "tenancy/policy.py differs from tests/authz/policy.txt"


# --- the checks -------------------------------------------------------------------------------------------


@dataclass
class Actor:
    name: str
    user: User | None
    page: Client
    api: APIClient
    column_outside: str  # their column when acting on the other organization's objects


def actors(world: World) -> list[Actor]:
    found = []
    for name, user in world.actors():
        # A view that raises is a 500 in the table, not an error of the test.
        page, api = Client(raise_request_exception=False), APIClient(raise_request_exception=False)
        outside = "-"
        if user is not None:
            page.force_login(user)
            api.credentials(HTTP_AUTHORIZATION=f"Bearer {world.tokens[name]}")
            own = next(s for s in world.sides.values() if world.relation(user, s) is not Rel.OUTSIDER)
            rel = world.relation(user, own)
            outside = {Rel.FINANCE: "ofin", Rel.ADMIN: "oadm", Rel.PROCUREMENT: "oproc"}.get(rel, "out")
        found.append(Actor(name, user, page, api, outside))
    return found


def writes() -> int:
    """Rows written so far in this connection (SQLite) or transaction (PostgreSQL), by any statement: a request
    the table refuses must not move it. (Counting writes, rather than comparing the tables, also catches a
    write that left a row as it was, and costs one query.)"""
    queries = {
        "sqlite": "SELECT total_changes()",
        "postgresql": "SELECT coalesce(sum(n_tup_ins + n_tup_upd + n_tup_del), 0) FROM pg_stat_xact_user_tables",
    }
    with connection.cursor() as cursor:
        cursor.execute(queries[connection.vendor])
        return int(cursor.fetchone()[0])


def body_of(response: Any) -> bytes:
    if getattr(response, "streaming", False):
        return b"".join(response.streaming_content)
    return bytes(response.content)


def outcome(api: bool, response: Any) -> str:
    status = response.status_code
    if status == 302 and SIGN_IN.match(response.get("Location", "")):
        return "in"
    if api and status == 401:
        return "in"
    return str(status)


@dataclass
class Check:
    row: Row | None
    path: str
    method: str
    api: bool
    expected: str
    actor: Actor
    side: Side | None
    data: dict[str, Any] | None
    query: dict[str, Any] | None


#: The run in parts, so that workers share it: the pages (slower to answer) in two halves, the API.
PARTS = ("pages-1", "pages-2", "api")


def rows_of(part: str) -> list[Row]:
    pages = [row for row in ROWS if not row.api]
    half = len(pages) // 2
    return {"pages-1": pages[:half], "pages-2": pages[half:], "api": [row for row in ROWS if row.api]}[part]


def checks(world: World, people: list[Actor], part: str) -> Iterator[Check]:
    demo = world.sides["demo"]
    for row in rows_of(part):
        for actor in people:
            if row.target is None:
                own = next(
                    (
                        s
                        for s in world.sides.values()
                        if actor.user and world.relation(actor.user, s) is not Rel.OUTSIDER
                    ),
                    demo,
                )
                pairs = [(own, world.relation(actor.user, own).value)]
            else:
                pairs = []
                for side in world.sides.values():
                    rel = world.relation(actor.user, side)
                    pairs.append((side, actor.column_outside if rel is Rel.OUTSIDER else rel.value))
            for side, column in pairs:
                kwargs = row.url(side) if row.url else {}
                if not kwargs and row.target is not None and row.target != "org" and "pk" in _params(row.route):
                    kwargs = {"pk": side[row.target].pk}
                body = row.body(side) if row.body else None
                query = row.query(side) if row.query else None
                path = reverse(row.route, kwargs=kwargs)
                yield Check(row, path, row.method, row.api, row.answers[column], actor, side, body, query)
            if row.target is not None:
                yield from _ghost(row, actor, demo)
    for route in routes():
        family = family_of(route.key)
        if family is None or part != "api":
            continue
        answers = family.exceptions.get(route.key, family.answers)
        for actor in people:
            column = Rel.ANON.value if actor.user is None else _own_column(world, actor.user)
            yield Check(None, _admin_path(route), "GET", False, answers[column], actor, None, None, None)


#: The id, slug and organization of an object that does not exist.
GHOST_ID, GHOST_SLUG = 987654, "ghost"


def _ghost(row: Row, actor: Actor, side: Side) -> Iterator[Check]:
    """The row's request for an object that does not exist (its URL's ids, or the ids and slugs of its query,
    replaced): every user must get the answer an outsider of their role gets for an existing one, so that
    "not yours" and "no such thing" cannot be told apart."""
    kwargs = row.url(side) if row.url else {}
    if not kwargs and row.target != "org" and "pk" in _params(row.route):
        kwargs = {"pk": side[row.target].pk}  # type: ignore[index]
    kwargs = {k: GHOST_ID if isinstance(v, int) else GHOST_SLUG if k == "team" else v for k, v in kwargs.items()}
    query = row.query(side) if row.query else None
    if query:
        query = {k: GHOST_ID if isinstance(v, int) else GHOST_SLUG for k, v in query.items()}
    if not kwargs and not query:
        return  # the object is named in the body alone
    expected = row.answers[Rel.ANON.value if actor.user is None else actor.column_outside]
    body = row.body(side) if row.body else None
    path = reverse(row.route, kwargs=kwargs)
    yield Check(row, path, row.method, row.api, expected, actor, None, body, query)


def _own_column(world: World, user: User) -> str:
    return next(r.value for s in world.sides.values() if (r := world.relation(user, s)) is not Rel.OUTSIDER)


def _params(route: str) -> set[str]:
    return {name for r in routes() if r.key == route for name in r.pattern.pattern.regex.groupindex}


SAMPLES = {"object_id": "1", "id": "1", "app_label": "auth", "content_type_id": "1", "url": "matrix/"}


def _admin_path(route: Route) -> str:
    if route.pattern.name is None:
        return "/admin/matrix-nowhere/"
    kwargs = {name: SAMPLES[name] for name in route.pattern.pattern.regex.groupindex}
    return reverse(route.key, kwargs=kwargs)


@dataclass
class Tally:
    """What the run saw besides its problems: evidence that the checks could fail."""

    checks: int = 0
    shown: set[str] = field(default_factory=set)  # canaries found in answers to those allowed to see them
    changed: set[tuple[str, str, str | None]] = field(default_factory=set)  # rows whose allowed change wrote


def run(check: Check, world: World, tally: Tally) -> list[str]:
    """Send one request in a savepoint that is rolled back; the problems found (none: it passed)."""
    actor = check.actor
    client: Any = actor.api if check.api else actor.page
    cookies = SimpleCookie(client.cookies)
    problems = []
    with transaction.atomic():
        before = writes() if check.method in UNSAFE else 0
        send = getattr(client, check.method.lower())
        options: dict[str, Any] = {"format": "json"} if check.api else {}
        if check.method == "GET":
            response = send(check.path, check.query or {})
        else:
            path = check.path + ("?" + "&".join(f"{k}={v}" for k, v in check.query.items()) if check.query else "")
            response = send(path, check.data or {}, **options)
        written = writes() - before if check.method in UNSAFE else 0
        transaction.set_rollback(True)
    client.cookies = cookies
    got = outcome(check.api, response)
    where = f"{check.method} {check.path} as {actor.name}"
    where += f" on {check.side.slug}'s objects" if check.side is not None else ""
    where += " on a missing object" if check.side is None and check.row is not None else ""
    if got != check.expected:
        problems.append(f"{where}: {got}, expected {check.expected}")
    content = body_of(response)
    allowed = world.scopes_of(actor.user) if actor.user else set()
    leaked = sorted(s for s in world.all_scopes() - allowed if canary(s).encode() in content)
    if leaked:
        problems.append(f"{where}: the answer ({got}) shows {', '.join(leaked)}'s objects")
    tally.shown |= {s for s in allowed if canary(s).encode() in content}
    if written and check.expected in REFUSALS:
        problems.append(f"{where}: refused ({got}) but {written} rows were written")
    if written and check.row is not None:
        tally.changed.add((check.row.route, check.row.method, check.row.target))
    tally.checks += 1
    return problems


@pytest.mark.parametrize("part", PARTS)
def test_authorization_matrix(db: None, tmp_path: Path, part: str) -> None:
    world = build()
    people = actors(world)
    started = time.monotonic()
    problems: list[str] = []
    tally = Tally()
    # Thousands of 4xx answers, each logged as a warning, would only slow the run down.
    quiet = logging.getLogger("django.request")
    level = quiet.level
    quiet.setLevel(logging.ERROR)
    try:
        for check in checks(world, people, part):
            problems += run(check, world, tally)
    finally:
        quiet.setLevel(level)
    seconds = time.monotonic() - started
    # A refusal proves something only if the same request, by someone allowed, does change the database;
    # and an absent canary only if canaries are shown to those who may see them.
    for row in rows_of(part):
        allowed = any(answer not in REFUSALS | {"-"} for answer in row.answers.values())
        key = (row.route, row.method, row.target)
        if row.method in UNSAFE and allowed and row.writes and key not in tally.changed:
            problems.append(f"{row.method} {row.route} ({row.target}): no allowed request wrote anything")
    unseen = world.all_scopes() - tally.shown
    if unseen:
        problems.append(f"No answer showed the objects of {sorted(unseen)}, even to those who may see them")
    summary = f"{part}: {tally.checks} authorization checks in {seconds:.1f} s, {len(problems)} problems"
    (tmp_path / "matrix.txt").write_text(summary + "\n" + "\n".join(problems) + "\n")
    print(summary)
    assert not problems, f"{summary}:\n" + "\n".join(problems)
