"""``qm forecast`` and ``qm plan`` against a real server (``live_server``): procurement reads the forecast and keeps
the plan as the pages do, a researcher is refused, and a bad row is refused with its field named."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from django.utils import timezone

from billing.models import CapacityChange
from tenancy import actions as tenancy_actions
from tests.billing.test_cli_finance import qm
from tests.billing.test_forecast_history import Lab, lab  # noqa: F401 - the fixture

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def server(live_server: Any, lab: Lab, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Lab:  # noqa: F811
    monkeypatch.setenv("QM_URL", live_server.url)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    lab.history(40, timezone.now().date())
    return lab


def as_user(lab: Lab, monkeypatch: pytest.MonkeyPatch, username: str) -> None:  # noqa: F811
    _, token = tenancy_actions.issue_token(lab.world.users[username], name="cli tests")
    monkeypatch.setenv("QM_TOKEN", token)


def test_procurement_reads_the_forecast_and_keeps_the_plan(server: Lab, monkeypatch: Any, capsys: Any) -> None:
    as_user(server, monkeypatch, "paula")
    status, out, err = qm(capsys, "forecast", "--flavor", "H100", "--teams")
    assert (status, err) == (0, "")
    lines = out.splitlines()
    assert lines[0] == "H100: 16 accelerators now"
    assert "backtests" in lines[1]
    assert lines[2].split() == ["HORIZON", "WAPE", "LAST", "WEEK", "REPEATED", "80%", "HELD", "95%", "HELD"]
    weeks = [line for line in lines if line[:4].isdigit()]
    assert len(weeks) == 12
    assert any(line.startswith("Vision") for line in lines)
    status, out, _ = qm(capsys, "forecast", "--horizon", "6m", "--json")
    assert json.loads(out)["horizon"] == "6m"

    status, out, err = qm(
        capsys,
        "plan",
        "add",
        "order",
        "H100",
        "16",
        "--ordered-on",
        "2027-01-04",
        "--lead-days",
        "60",
        "--note",
        "rack 7",
    )
    assert (status, err) == (0, "")
    row = CapacityChange.objects.get()
    assert out.strip() == f"Planned #{row.pk}: order of 16 H100 from 2027-03-05"
    status, out, _ = qm(capsys, "plan")
    assert out.splitlines()[1].split()[:5] == [str(row.pk), "2027-03-05", "order", "H100", "+16"]
    status, out, err = qm(capsys, "plan", "add", "commitment", "H100", "8", "--starts-on", "2027-02-01")
    assert status != 0
    assert "ends_on" in err
    assert CapacityChange.objects.count() == 1
    status, out, _ = qm(capsys, "plan", "remove", str(row.pk))
    assert status == 0
    assert not CapacityChange.objects.exists()


def test_a_researcher_is_refused_the_forecast(server: Lab, monkeypatch: Any, capsys: Any) -> None:
    as_user(server, monkeypatch, "alice")
    status, _, err = qm(capsys, "forecast")
    assert status != 0
    assert "finance, procurement and organization admins" in err
