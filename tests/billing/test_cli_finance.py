"""``qm costs``, ``qm budgets``, ``qm quotas`` and ``qm months`` against a real server (``live_server``): the same
scoping and permissions as the pages (a researcher sees her team's costs, not the fleet's; only finance closes a
month), figures that match the API's, and refusals on stderr with the field named."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from clusters.models import AcceleratorType
from governance.actions import budgets, quotas
from qm import cli
from scheduler import actions
from tenancy import actions as tenancy_actions
from tests.billing.test_finance_api import MONTH
from tests.billing.test_finance_api import month as month
from tests.scheduler.conftest import Fleet

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def server(live_server: Any, month: Fleet, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Fleet:
    monkeypatch.setenv("QM_URL", live_server.url)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    return month


def as_user(fleet: Fleet, monkeypatch: pytest.MonkeyPatch, username: str) -> None:
    _, token = tenancy_actions.issue_token(fleet.user(username), name="cli tests")
    monkeypatch.setenv("QM_TOKEN", token)


def qm(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    capsys.readouterr()
    status = cli.main(list(argv))
    out, err = capsys.readouterr()
    return status, out, err


def test_costs_for_finance_and_for_a_researcher(server: Fleet, monkeypatch: Any, capsys: Any) -> None:
    as_user(server, monkeypatch, "fiona")
    status, out, err = qm(capsys, "costs", "--month", MONTH)
    assert (status, err) == (0, "")
    lines = out.splitlines()
    assert lines[0] == "Costs of 2026-11 in USD"
    assert lines[1].split() == ["TEAM", "ACC-HOURS", "USAGE", "IDLE", "OVERHEAD", "TOTAL"]
    rows = {line.split()[0]: line.split() for line in lines[2:-1]}
    assert rows["Vision"][2] == "100.00"  # 40 accelerator-hours at 2.50, as the API says
    assert lines[-1].startswith("Fleet: total ")
    status, out, _ = qm(capsys, "costs", "--month", MONTH, "--json")
    assert json.loads(out)["currency"] == "USD"

    as_user(server, monkeypatch, "alice")
    status, out, _ = qm(capsys, "costs", "--month", MONTH, "--by", "team,user")
    assert status == 0
    assert "Robotics" not in out
    assert "Fleet:" not in out
    status, _, err = qm(capsys, "costs", "--month", "2026-13")
    assert status != 0
    assert "  month: " in err


def test_budgets_and_quotas(server: Fleet, monkeypatch: Any, capsys: Any) -> None:
    adam, vision = server.user("adam"), server.world.teams["vision"]
    budgets.set_budget(adam, vision, amount=500, counts="charge", reason="x")
    flavor = AcceleratorType.objects.filter(organization=server.org).order_by("name").first()
    assert flavor is not None
    quotas.set_quota(adam, actions.queue_for(vision, None), flavor=flavor.name, nominal=16, reason="Q4 plan")
    as_user(server, monkeypatch, "lena")
    status, out, err = qm(capsys, "budgets")
    assert (status, err) == (0, "")
    header, row = out.splitlines()[:2]
    assert header.split()[:3] == ["FOR", "MEASURE", "LIMIT"]
    assert "money (charge, USD)" in row
    assert "usage " in row
    assert ", charge " in row
    status, out, err = qm(capsys, "quotas")
    assert (status, err) == (0, "")
    header, *rows = out.splitlines()
    assert header.split() == ["QUEUE", "FLAVOR", "RESOURCE", "QUOTA", "USED", "BORROWED", "LENT", "WAITING"]
    assert [row.split()[1:4] for row in rows] == [[flavor.name, "accelerator", "16"]]


def test_months_close_and_reopen_by_finance_only(server: Fleet, monkeypatch: Any, capsys: Any) -> None:
    as_user(server, monkeypatch, "lena")
    status, _, err = qm(capsys, "months", "close", MONTH)
    assert status != 0
    assert "finance" in err
    as_user(server, monkeypatch, "fiona")
    status, out, err = qm(capsys, "months", "close", MONTH)
    assert (status, err) == (0, "")
    assert out.startswith("2026-11 closed; statements 2026-11-")
    status, out, _ = qm(capsys, "months")
    assert any(line.split()[:2] == ["2026-11", "closed"] for line in out.splitlines())
    status, _, err = qm(capsys, "months", "reopen", MONTH, "--reason", " ")
    assert status != 0
    assert "  reason: " in err
    status, out, _ = qm(capsys, "months", "reopen", MONTH, "--reason", "a late invoice")
    assert (status, out.strip()) == (0, "2026-11 reopened")
