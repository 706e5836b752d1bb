"""The ``qm`` admin commands against a real server (``live_server``): clusters and nodes as tables, cordon,
drain with a grace and resume a node named ``<cluster>/<name>``, plan, list and cancel maintenance; the
server's refusals on stderr with the field named; a member who may only look is refused."""

from __future__ import annotations

import json
import re
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from django.utils import timezone

from clusters.models import Cluster, Drain, MaintenanceWindow, Node
from qm import admin, cli
from tenancy import actions as tenancy_actions
from tenancy.models import AuditLog
from tests.clusters.factories import simulated_cluster
from tests.conftest import World

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def fleet(world: World, tmp_path: Path, live_server: Any, monkeypatch: pytest.MonkeyPatch) -> dict[str, Cluster]:
    """Two clusters of the demo organization and one of the rival's behind a live server; ``qm`` pointed at it
    (QM_URL; each test picks its user with ``as_user``)."""
    monkeypatch.setenv("QM_URL", live_server.url)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    east = simulated_cluster(world.org, "east", tmp_path, nodes=4)
    west = simulated_cluster(world.org, "west", tmp_path, profile="a100-slurm", nodes=2, runs=["batch_scripts"])
    rival = simulated_cluster(world.other_org, "rival", tmp_path, nodes=2)
    return {"east": east, "west": west, "rival": rival}


def as_user(world: World, monkeypatch: pytest.MonkeyPatch, username: str) -> None:
    _, token = tenancy_actions.issue_token(world.users[username], name="cli tests")
    monkeypatch.setenv("QM_TOKEN", token)


def qm(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    capsys.readouterr()
    status = cli.main(list(argv))
    out, err = capsys.readouterr()
    return status, out, err


def node(cluster: Cluster, index: int = 1) -> Node:
    found: Node = Node.objects.filter(cluster=cluster).order_by("name")[index]
    return found


def test_clusters_and_nodes_as_tables(world: World, fleet: dict[str, Cluster], monkeypatch: Any, capsys: Any):
    as_user(world, monkeypatch, "alice")
    Node.objects.filter(pk=node(fleet["east"]).pk).update(state=Node.State.CORDONED)
    status, out, err = qm(capsys, "clusters")
    assert (status, err) == (0, "")
    lines = out.splitlines()
    assert lines[0].split() == ["ID", "SLUG", "KIND", "STATUS", "NODES", "ACCELERATORS", "RUNS", "LAST", "SYNC"]
    rows = {line.split()[1]: line for line in lines[1:]}
    assert set(rows) == {"east", "west"}  # never the rival's
    assert "4 (1 cordoned)" in rows["east"]
    assert "batch_scripts, containers" in rows["east"]
    assert re.search(r" used\s+batch_scripts\s", rows["west"]), rows["west"]
    status, out, _ = qm(capsys, "clusters", "--json")
    assert [c["slug"] for c in json.loads(out)] == ["east", "west"]

    status, out, _ = qm(capsys, "nodes", "--cluster", "east")
    assert status == 0
    lines = out.splitlines()
    assert lines[0].split() == ["ID", "NODE", "STATE", "HEALTH", "ACCELERATORS", "NOTE"]
    assert len(lines) == 5
    assert all(line.split()[1].startswith("east/") for line in lines[1:])
    status, out, _ = qm(capsys, "nodes", "--state", "cordoned")
    assert [line.split()[1] for line in out.splitlines()[1:]] == [f"east/{node(fleet['east']).name}"]
    status, out, err = qm(capsys, "nodes", "--state", "asleep")
    assert status == 2
    assert "  state: " in err


def test_cordon_drain_with_a_grace_and_resume(world: World, fleet: dict[str, Cluster], monkeypatch: Any, capsys: Any):
    as_user(world, monkeypatch, "adam")
    target = node(fleet["east"])
    name = f"east/{target.name}"
    status, out, err = qm(capsys, "cordon", name, "--reason", "flaky NVLink")
    assert (status, err) == (0, "")
    assert out.strip() == f"Node {name}: cordoned."
    status, out, _ = qm(capsys, "nodes", "--cluster", "east", "--state", "cordoned")
    assert "cordon by adam: flaky NVLink" in out

    status, out, err = qm(capsys, "drain", str(target.pk), "--reason", "swap the board", "--grace", "10m")
    assert (status, err) == (0, "")
    assert out.startswith(f"Node {name}: ")
    assert out.strip().endswith("jobs get 600 s.")
    assert Drain.objects.get(node=target, kind="drain").grace_seconds == 600

    status, out, err = qm(capsys, "resume", target.name, "--reason", "board swapped")  # its name alone: unique
    assert (status, err) == (0, "")
    assert out.strip() == f"Node {name}: schedulable."
    target.refresh_from_db()
    assert target.state == Node.State.SCHEDULABLE
    actions = set(AuditLog.objects.filter(target_repr=target.name).values_list("action", flat=True))
    assert actions == {"node.cordoned", "node.drained", "node.resumed"}


def test_refusals_are_explained(world: World, fleet: dict[str, Cluster], monkeypatch: Any, capsys: Any):
    as_user(world, monkeypatch, "adam")
    target = node(fleet["east"])
    status, _, err = qm(capsys, "cordon", f"east/{target.name}", "--reason", " ")
    assert status == 2
    assert "  reason: Say why" in err
    status, _, err = qm(capsys, "cordon", "east/no-such-node", "--reason", "x")
    assert status == 1
    assert "No node 'no-such-node' in cluster east" in err
    status, _, err = qm(capsys, "cordon", f"rival/{node(fleet['rival']).name}", "--reason", "x")
    assert status == 2
    assert "  cluster: No cluster 'rival'." in err
    status, _, err = qm(capsys, "drain", f"east/{target.name}", "--reason", "x", "--grace", "soon")
    assert status == 2
    assert "not a duration" in err
    status, _, err = qm(capsys, "resume", f"east/{target.name}", "--reason", "nothing to resume")
    assert status == 2
    assert "not drained" in err
    assert not Drain.objects.exists()

    as_user(world, monkeypatch, "alice")
    status, _, err = qm(capsys, "cordon", f"east/{target.name}", "--reason", "mine now")
    assert status == 1
    assert "Only admins of" in err
    assert not Drain.objects.exists()


def test_plan_list_and_cancel_maintenance(world: World, fleet: dict[str, Cluster], monkeypatch: Any, capsys: Any):
    as_user(world, monkeypatch, "adam")
    start = (timezone.now() + timedelta(days=1)).replace(microsecond=0)
    end = start + timedelta(hours=4)
    east = fleet["east"]
    names = f"{node(east, 0).name},{node(east, 1).name}"
    status, out, err = qm(
        capsys,
        "maintenance",
        "plan",
        "--cluster",
        "east",
        "--start",
        start.isoformat(),
        "--end",
        end.isoformat(),
        "--reason",
        "PDU swap",
        "--nodes",
        names,
        "--drain-ahead",
        "2h",
    )
    assert (status, err) == (0, "")
    window = MaintenanceWindow.objects.get()
    assert out.startswith(f"Maintenance window {window.pk} on east: ")
    assert "2 nodes drained from" in out
    assert (window.starts_at, window.ends_at, window.drain_ahead_minutes) == (start, end, 120)
    assert sorted(window.nodes.values_list("name", flat=True)) == sorted(names.split(","))

    for argv in (["maintenance"], ["maintenance", "list"], ["maintenance", "list", "--cluster", "east"]):
        status, out, _ = qm(capsys, *argv)
        lines = out.splitlines()
        assert lines[0].split()[:3] == ["ID", "CLUSTER", "STARTS"], argv
        assert [line.split()[0] for line in lines[1:]] == [str(window.pk)], argv
        assert "PDU swap" in lines[1]
    status, out, _ = qm(capsys, "maintenance", "list", "--cluster", "west")
    assert out.strip() == "No maintenance planned."

    status, _, err = qm(capsys, "maintenance", "plan", "--cluster", "east", "--start", "soon", "--end", "later",
                        "--reason", "x")  # fmt: skip
    assert status == 2
    assert "  starts_at: " in err
    assert "  ends_at: " in err

    as_user(world, monkeypatch, "lena")
    status, _, err = qm(capsys, "maintenance", "cancel", str(window.pk))
    assert status == 1
    assert MaintenanceWindow.objects.exists()

    as_user(world, monkeypatch, "adam")
    status, out, err = qm(capsys, "maintenance", "cancel", str(window.pk))
    assert (status, err) == (0, "")
    assert out.strip() == f"Maintenance window {window.pk} is cancelled; the nodes drained for it are resumed."
    assert not MaintenanceWindow.objects.exists()
    assert AuditLog.objects.filter(action="maintenance.cancelled").exists()


def test_durations() -> None:
    assert [admin.seconds(t) for t in ("600", "90s", "10m", "2h", "1d")] == [600, 90, 600, 7200, 86400]
    assert [admin.minutes(t) for t in ("60", "60m", "2h")] == [60, 60, 120]
    for bad in ("soon", "-5", "1.5h", "10 m"):
        with pytest.raises(Exception, match="not a duration"):
            admin.seconds(bad)
    with pytest.raises(Exception, match="not whole minutes"):
        admin.minutes("90s")
