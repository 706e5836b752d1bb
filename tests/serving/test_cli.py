"""``qm service`` against a real server: create, list, show, update, scale, stop, start, rollback, url; the
server's 400 printed field by field, another team's service not found."""

from __future__ import annotations

from typing import Any

import pytest

from serving import actions
from serving.models import Service
from tests.scheduler.conftest import Fleet, fleet  # noqa: F401 - the fixture under the server
from tests.scheduler.test_cli import qm, server  # noqa: F401 - the live server fixture

pytestmark = pytest.mark.django_db(transaction=True)


def test_a_service_from_create_to_rollback(server: Fleet, capsys: pytest.CaptureFixture[str]) -> None:  # noqa: F811
    status, out, err = qm(
        capsys,
        "service", "create", "chat-api", "--team", "vision", "--image", "ghcr.io/lab/serve:1",
        "--command", "python3 deploy/model_server.py --port $PORT", "--health-path", "/health",
        "--cpu", "0.5", "--memory-gib", "1", "--min", "1", "--max", "3", "--target", "15", "--env", "MODE=fast",
    )  # fmt: skip
    assert status == 0, err
    service = Service.objects.get()
    assert out.startswith(f"Created service {service.pk} (vision/chat-api): http")
    assert service.revision is not None
    assert service.revision.env == {"MODE": "fast"}
    status, out, _ = qm(capsys, "service", "list")
    assert status == 0
    assert "chat-api" in out
    assert "/1 " in out  # desired 1 (the control loop ran at once)
    status, out, _ = qm(capsys, "service", "show", "chat-api")
    assert status == 0
    assert "min 1, max 3; rps target 15.0 per replica" in out
    assert "(0.5 cores, 1.0 GiB)" in out
    status, out, _ = qm(capsys, "service", "update", "vision/chat-api", "--image", "ghcr.io/lab/serve:2")
    assert (status, out) == (0, f"Updated service {service.pk} (chat-api); rolling out revision 2.\n")
    assert qm(capsys, "service", "update", "chat-api", "--max-inflight", "8", "--max-rps", "20")[0] == 0
    service.refresh_from_db()
    assert (service.max_inflight, service.max_rps) == (8, 20)
    assert qm(capsys, "service", "update", "chat-api", "--max-rps", "0")[0] == 0  # the data plane's again
    service.refresh_from_db()
    assert (service.max_inflight, service.max_rps) == (8, None)
    status, out, _ = qm(capsys, "service", "scale", str(service.pk), "--max", "5")
    assert out == "Service chat-api scales between 1 and 5 replicas (rps target 15.0 per replica).\n"
    assert qm(capsys, "service", "stop", "chat-api")[1] == "Stopped service chat-api: stopped.\n"
    assert qm(capsys, "service", "start", "chat-api")[1] == "Started service chat-api: active.\n"
    status, out, _ = qm(capsys, "service", "rollback", "chat-api")
    assert status == 0
    assert out.startswith("Rolled back service chat-api: revision ")
    status, out, _ = qm(capsys, "service", "url", "chat-api", "--curl")
    lines = out.splitlines()
    assert lines[0].endswith("/serve/demo/vision/chat-api/")
    assert lines[1].startswith('curl -H "Authorization: Bearer $QM_TOKEN"')


def test_bad_input_and_another_teams_service(server: Fleet, capsys: pytest.CaptureFixture[str]) -> None:  # noqa: F811
    status, _, err = qm(
        capsys, "service", "create", "x", "--team", "vision", "--min", "4", "--max", "2", "--port", "99999"
    )
    assert status == 2
    assert "min_replicas" in err
    assert "port" in err
    assert not Service.objects.exists()
    status, _, err = qm(capsys, "service", "create", "x", "--env", "NOEQUALS")
    assert status == 1
    assert "--env takes NAME=VALUE" in err
    other: Any = server.world.users["bob"]

    hidden = actions.create_service(
        other, team=server.world.teams["robotics"], name="secret", image="img", command=["serve"]
    )
    status, _, err = qm(capsys, "service", "show", str(hidden.pk))
    assert status == 1
    assert "not_found" in err or "Not found" in err or "No " in err
    assert qm(capsys, "service", "show", "secret")[2] == "qm: No service 'secret', or not one you may see.\n"
