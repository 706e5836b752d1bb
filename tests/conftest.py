"""Shared fixtures: the demo organization plus a second organization, and API clients per user.

Every isolation test has an owner (the team's members), a privileged reader (finance, admin) and an
outsider (another team, another organization).
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from django.contrib.auth.models import User
from hypothesis import settings as hypothesis_settings
from rest_framework.test import APIClient

from demo.tenancy import seed_demo
from tenancy import actions
from tenancy.models import Membership, Organization, Project, Team
from tenancy.scoping import Role
from tests import live_server, xdist_groups

# The property tests assert properties, not timings: an example slowed by the rest of a parallel suite must not
# fail for its time (Hypothesis's default 200 ms deadline). ``--hypothesis-profile`` still chooses another.
hypothesis_settings.register_profile("quartermaster", deadline=None)
hypothesis_settings.load_profile("quartermaster")

# The live server answers at once and reads chunked bodies, as gunicorn does (tests/live_server.py).
live_server.install()


@dataclass
class World:
    org: Organization
    other_org: Organization
    teams: dict[str, Team]
    users: dict[str, User]

    def project(self, team: str) -> Project:
        return self.teams[team].projects.order_by("pk").first()  # type: ignore[return-value]

    def membership(self, username: str) -> Membership:
        return Membership.objects.get(user=self.users[username])


@pytest.fixture
def world(db: Any) -> World:
    org = seed_demo()
    other_org = Organization.objects.create(name="Rival Labs", slug="rival")
    intruders = Team.objects.create(organization=other_org, name="Intruders", slug="intruders")
    Project.objects.create(team=intruders, name="Heist", slug="heist")
    mallory = User.objects.create_user("mallory", password="pw")
    Membership.objects.create(user=mallory, organization=other_org, role=Role.ADMIN)
    trent = User.objects.create_user("trent", password="pw")
    Membership.objects.create(user=trent, organization=other_org, team=intruders, role=Role.LEAD)
    teams = {team.slug: team for team in Team.objects.all()}
    users = {user.username: user for user in User.objects.all()}
    return World(org=org, other_org=other_org, teams=teams, users=users)


@pytest.fixture
def operator(world: World) -> User:
    """The installation's operator, a superuser outside every organization: who registers and changes a
    simulated cluster (its replicas run on the portal's host)."""
    return User.objects.create_superuser("operator", password="pw")


def api_client(user: User | None = None) -> APIClient:
    """An API client authenticated with a fresh personal token of `user` (anonymous when None)."""
    client = APIClient()
    if user is not None:
        _, raw = actions.issue_token(user, name="tests")
        client.credentials(HTTP_AUTHORIZATION=f"Bearer {raw}")
    return client


@pytest.fixture
def api(world: World) -> Any:
    return lambda username: api_client(world.users[username])


class Hook(BaseHTTPRequestHandler):
    """A webhook's receiver: keeps each POST's headers and JSON body, and answers ``status``."""

    received: list[tuple[dict[str, str], dict[str, Any]]] = []
    status = 200

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers["Content-Length"]))
        type(self).received.append((dict(self.headers), json.loads(body)))
        self.send_response(type(self).status)
        self.end_headers()

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def hook(settings: Any) -> Iterator[tuple[str, type[Hook]]]:
    """A webhook receiver on this machine (its URL, with a secret in its path, and its handler class): the site
    allows webhooks to its own networks, loopback included (budget alerts, job notifications)."""
    settings.WEBHOOKS_ALLOW_PRIVATE = True
    handler = type("Receiver", (Hook,), {"received": [], "status": 200})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/hook/secret-token", handler
    server.shutdown()
    server.server_close()


@pytest.fixture(autouse=True)
def _fresh_cache() -> None:
    """Each test starts with an empty local cache: kept results are keyed by ids, which tests on SQLite reuse.
    (With Redis each worker has its own key prefix, and PostgreSQL's ids do not repeat.)"""
    from django.core.cache import caches
    from django.core.cache.backends.locmem import LocMemCache

    if isinstance(caches["default"], LocMemCache):
        caches["default"].clear()


@pytest.hookimpl(wrapper=True)
def pytest_collection_modifyitems(config: Any, items: list[pytest.Item]) -> Iterator[None]:
    """Group and order the suite for xdist (``--dist loadgroup``, as ``make test`` runs it).

    The tests that use a Slurm lab run one after another on one worker (the group ``slurm-lab``): they share
    the labs' nodes, and some take a node out (DRAIN, DOWN), which requeues or kills whatever another test
    runs there (``tests/xdist_groups.py`` tells xdist's scheduler the groups under pytest 9.2). (A group per
    lab, the two side by side, made CI's suite slower, 16:25 against 15:29: the suite is bound by the two
    cores, and both labs at once only added load.) The longest go first, so that each starts on a worker of
    its own while the other workers share the rest: the API fuzzing (a test per role), then the Slurm group.
    pytest-django's order is kept otherwise; a test after one whose changes were committed finds the tables
    emptied, as after any such test."""
    for item in items:
        if any(name.startswith("slurm_lab") for name in getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.xdist_group("slurm-lab"))
        elif _concurrent(item):
            item.add_marker(pytest.mark.each_database)
    xdist_groups.write(config, items)
    yield
    items.sort(
        key=lambda item: 0 if item.get_closest_marker("fuzz") else 1 if item.get_closest_marker("xdist_group") else 2
    )


def _concurrent(item: pytest.Item) -> bool:
    """Whether the test serves requests, runs a worker or starts threads over committed data: what one database
    does differently from another (SQLite has one writer at a time and one lock for the file; PostgreSQL locks
    rows). The Slurm labs' tests are left out: what they test is the lab's, and they take a quarter hour. So are
    the browser tests: one person's clicks through pages, whose requests the live-server tests of the API and
    the demo's own test already put to SQLite concurrently."""
    if item.get_closest_marker("browser"):
        return False
    fixtures = set(getattr(item, "fixturenames", ()))
    django_db = item.get_closest_marker("django_db")
    return bool(
        fixtures & {"live_server", "transactional_db"}
        or (django_db is not None and django_db.kwargs.get("transaction"))
        or any(item.get_closest_marker(name) for name in ("worker", "fuzz"))
    )


def pytest_configure(config: pytest.Config) -> None:
    xdist_groups.configure(config)


def pytest_unconfigure(config: pytest.Config) -> None:
    xdist_groups.unconfigure(config)


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    return xdist_groups.scheduler(config, log)


def pytest_sessionstart(session: Any) -> None:
    """Forget the fault-matrix rows of an earlier run (in the controller only, before any worker writes)."""
    if not hasattr(session.config, "workerinput"):
        import shutil

        from tests.scheduler.fault_table import ARTIFACTS

        shutil.rmtree(ARTIFACTS, ignore_errors=True)


def pytest_terminal_summary(terminalreporter: Any) -> None:
    """Print the fault-injection matrix (``tests/scheduler/test_fault_matrix.py``) when it ran: one row per
    backend and fault, written by the scenarios (also under xdist, whose workers write the files)."""
    from tests.scheduler.fault_table import render

    table = render()
    if table:
        terminalreporter.section("fault-injection matrix")
        terminalreporter.write_line(table)


@contextmanager
def broker_down() -> Iterator[None]:
    """Celery sending to a broker nothing listens on (a task that cannot be queued), then back as it was: its
    broker, retries and eager mode restored, and the connection pools it made for the dead broker dropped (the
    app keeps them), so that a later test's worker in the same process reaches the real broker."""
    from portal.celery import app

    names = ("task_always_eager", "broker_url", "broker_connection_retry", "broker_connection_max_retries")
    saved = {name: app.conf[name] for name in names}

    def drop_pools() -> None:
        app._pool = None  # type: ignore[attr-defined]  # Celery resets these after a fork, as here
        app.amqp._producer_pool = None  # type: ignore[attr-defined]

    drop_pools()
    app.conf.update(
        task_always_eager=False,
        broker_url="redis://127.0.0.1:1/0",  # nothing listens there
        broker_connection_retry=False,
        broker_connection_max_retries=0,
    )
    try:
        yield
    finally:
        app.conf.update(saved)
        drop_pools()
