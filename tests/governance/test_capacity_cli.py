"""``qm capacity`` against a real server (``live_server``): a lead asks for a reservation for a deadline, a
researcher may not decide it, an admin approves it and the lead lists it with its booked nodes."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from django.utils import timezone

from governance.models import CapacityRequest
from tests.clusters.factories import simulated_cluster
from tests.clusters.test_cli_admin import as_user, qm
from tests.conftest import World

pytestmark = pytest.mark.django_db(transaction=True)


def test_a_lead_reserves_an_admin_approves_and_the_lead_sees_the_booked_nodes(
    world: World,
    tmp_path: Path,
    live_server: Any,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setenv("QM_URL", live_server.url)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    simulated_cluster(world.org, "east", tmp_path, nodes=2)
    start, end = timezone.now() + timedelta(days=1), timezone.now() + timedelta(days=3)
    as_user(world, monkeypatch, "lena")
    status, _, err = qm(capsys, "capacity", "reserve", "vision", "--flavor", "H100-SXM-80GB", "--accelerators", "8")
    assert status == 1
    assert "--reason" in err
    status, out, _ = qm(
        capsys,
        "capacity",
        "reserve",
        "vision",
        "--flavor",
        "H100-SXM-80GB",
        "--accelerators",
        "8",
        "--from",
        start.isoformat(),
        "--to",
        end.isoformat(),
        "--reason",
        "CVPR deadline",
    )
    assert status == 0, out
    request = CapacityRequest.objects.get()
    assert f"Asked: request {request.pk}" in out

    as_user(world, monkeypatch, "alice")
    status, _, err = qm(capsys, "capacity", "approve", str(request.pk), "--reason", "mine")
    assert status != 0
    assert "organization admin" in err

    as_user(world, monkeypatch, "adam")
    status, out, _ = qm(capsys, "capacity", "approve", str(request.pk), "--reason", "the deadline matters")
    assert status == 0, out
    assert f"Request {request.pk} is approved on east: h100-00000." in out

    as_user(world, monkeypatch, "lena")
    status, out, _ = qm(capsys, "capacity", "--state", "approved")
    assert status == 0
    (row,) = out.splitlines()[1:]
    assert row.split()[:4] == [str(request.pk), "vision", "reservation", "8"]
    assert "the deadline matters" in row
