"""``qm queues`` and ``qm fair-share`` against a real server (``live_server``): a lead reads the team's queue in
fair-sharing order and why it ranks there; an admin changes the half-life with a reason; a lead is refused."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from governance.models import FairShare
from tests.clusters.test_cli_admin import as_user, qm
from tests.conftest import World
from tests.governance.test_fair_share_api import remember

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def served(world: World, tmp_path: Path, live_server: Any, monkeypatch: pytest.MonkeyPatch) -> World:
    monkeypatch.setenv("QM_URL", live_server.url)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    remember(world, vision=300.0, robotics=100.0, language=0.0)
    return world


def test_a_lead_reads_where_the_queue_stands_and_why(
    served: World, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    as_user(served, monkeypatch, "adam")
    status, out, _ = qm(capsys, "queues")
    assert status == 0
    lines = [line.split() for line in out.splitlines()[1:-1]]
    assert [line[0] for line in lines] == ["language", "robotics", "vision"]  # who used least goes first
    assert lines[2][2:4] == ["3/3", "417"]
    assert lines[2][7:9] == ["75%", "33%"]

    as_user(served, monkeypatch, "lena")
    status, out, _ = qm(capsys, "queues", "vision")
    assert status == 0
    assert "It used 75% of the recent accelerator-hours of the queues beside it (half-life 7 days)" in out
    status, _, err = qm(capsys, "queues", "robotics")  # another team's queue: not there
    assert status == 1
    assert "no queue 'robotics'" in err


def test_an_admin_changes_the_half_life_and_a_lead_may_not(
    served: World, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    as_user(served, monkeypatch, "lena")
    status, _, err = qm(capsys, "fair-share", "--half-life", "1d", "--reason", "mine")
    assert status != 0
    assert "admin" in err
    as_user(served, monkeypatch, "adam")
    status, _, err = qm(capsys, "fair-share", "--half-life", "1d")
    assert status == 1
    assert "--reason" in err
    status, out, _ = qm(capsys, "fair-share", "--half-life", "1d", "--reason", "a deadline month")
    assert status == 0
    assert "1 d" in out
    assert FairShare.objects.get(organization=served.org).half_life == 86400
    status, _, err = qm(capsys, "fair-share", "--usage-weight", "20", "--reason", "more")
    assert status != 0
    assert "usage_weight" in err
