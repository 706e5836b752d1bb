"""The demo's model, service and devices (demo/inference.py, demo/devices.py, demo/traffic.py): seeded once,
tokens issued only to devices that need one, the load sent as a user's requests, replica processes ended with
the demo. `tests/demo/test_demo.py` runs the whole demo with them."""

from __future__ import annotations

import hashlib
import json
import os
import random
import signal
import subprocess
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from clusters.backends.simulated.replicas import members
from demo import devices, inference, traffic
from demo.supervisor import Child, public_url, stop_replicas
from demo.tenancy import seed_demo


@pytest.fixture
def demo_org(db, settings, tmp_path: Path):  # type: ignore[no-untyped-def]
    """The demo organization with its fleet and governance (no billing history); state under ``tmp_path``."""
    from demo.fleet import seed_demo_fleet, sync_demo_fleet
    from demo.jobs import seed_governance

    settings.VAR_DIR = tmp_path
    settings.ARTIFACT_ROOT = tmp_path / "artifacts"
    org = seed_demo()
    seed_demo_fleet(org)
    sync_demo_fleet(org)
    seed_governance(org)
    return org


def test_the_model_and_service_are_seeded_once(demo_org, settings) -> None:  # type: ignore[no-untyped-def]
    from registry import artifacts
    from registry.models import Model, ModelVersion
    from serving.models import Service

    first = inference.seed_inference(demo_org)
    again = inference.seed_inference(demo_org)
    assert again.pk == first.pk
    assert (Model.objects.count(), ModelVersion.objects.count(), Service.objects.count()) == (1, 2, 1)
    model = Model.objects.get()
    assert model.created_by is not None
    assert (model.team.slug, model.name, model.created_by.username) == ("robotics", "grasp-policy", "bob")
    for version in ModelVersion.objects.filter(model=model):
        # Stored, with its metrics; the bytes in the store are the ones the version names.
        assert version.stored
        assert version.metrics["success_rate"] > 0.8
        data = artifacts.path_for(version).read_bytes()
        assert (len(data), hashlib.sha256(data).hexdigest()) == (version.size_bytes, version.sha256)
        assert json.loads(data)["scale"] == inference.VERSIONS[version.version][2]
    service = Service.objects.get()
    assert (service.public, service.min_replicas, service.max_replicas) == (True, 1, 3)
    assert service.tier is not None
    assert service.tier.name == "high"
    revision = service.revision
    assert revision is not None
    assert revision.model_version is not None
    assert revision.model_version.version == "1"
    assert revision.command[1].endswith("deploy/model_server.py")
    assert revision.health_path == "/health"


def test_versions_come_from_finished_jobs_when_there_are_some(demo_org) -> None:  # type: ignore[no-untyped-def]
    from django.utils import timezone

    from demo.billing import seed_history
    from registry.models import ModelVersion
    from scheduler.models import Job
    from tenancy.models import Team

    seed_history(demo_org, days=3, now=timezone.now())
    robotics = Team.objects.get(organization=demo_org, slug="robotics")
    assert Job.objects.filter(team=robotics, state=Job.State.SUCCEEDED).exists()
    inference.seed_model(demo_org)
    first, second = ModelVersion.objects.order_by("version")
    assert first.source_job is not None
    assert second.source_job is not None
    assert first.source_job.team_id == robotics.pk
    assert first.source_job.finished_at <= second.source_job.finished_at


def test_enrolment_tokens_are_issued_once_and_only_to_devices_without_a_credential(demo_org) -> None:  # type: ignore[no-untyped-def]
    from django.utils import timezone

    from edge.actions import devices as edge
    from edge.models import Device, DeviceGroup, EnrolmentToken

    tokens = devices.enrolment_tokens(demo_org)
    assert sorted(tokens) == ["arm-01", "arm-02", "robot-01", "robot-02", "robot-03", "robot-04"]
    assert all(token.startswith("qmenrol_") for token in tokens.values())
    groups = {g.name: g for g in DeviceGroup.objects.all()}
    assert set(groups) == {"lab-robots", "warehouse-arms"}
    assert EnrolmentToken.objects.filter(group=groups["lab-robots"]).count() == 4
    # Seeding again keeps the tokens the portal still takes.
    assert devices.enrolment_tokens(demo_org) == tokens
    assert EnrolmentToken.objects.count() == 6

    # robot-01 enrols, as its agent does, and keeps its credential where the agent would.
    enrolled = edge.enrol(tokens["robot-01"], "robot-01", {}, {})
    credential = {"device": enrolled.device.pk, "name": "robot-01", "credential": enrolled.credential}
    devices.state_dir("robot-01").mkdir(parents=True)
    (devices.state_dir("robot-01") / "credential.json").write_text(json.dumps(credential))
    again = devices.enrolment_tokens(demo_org, 7)
    assert again["robot-01"] == ""
    assert again["robot-02"] == tokens["robot-02"]
    assert again["robot-05"].startswith("qmenrol_")  # a seventh device: the lab's fifth
    # A revoked device (or one a new database does not know) gets a new token, and enrols again by name.
    Device.objects.filter(pk=enrolled.device.pk).update(revoked_at=timezone.now())
    renewed = devices.enrolment_tokens(demo_org)["robot-01"]
    assert renewed.startswith("qmenrol_")
    assert renewed != tokens["robot-01"]
    argv = devices.agent_command("python3", "http://127.0.0.1:9", "robot-01", renewed, 15)
    assert argv[argv.index("--enrol-token") + 1] == renewed
    assert argv[argv.index("--poll-wait") + 1] == "15"
    assert "--enrol-token" not in devices.agent_command("python3", "http://x", "robot-02", "", 15)


def test_the_fleet_splits_two_to_one() -> None:
    assert devices.fleet(6) == [
        ("robot-01", "lab-robots"),
        ("robot-02", "lab-robots"),
        ("robot-03", "lab-robots"),
        ("robot-04", "lab-robots"),
        ("arm-01", "warehouse-arms"),
        ("arm-02", "warehouse-arms"),
    ]
    assert devices.fleet(1) == [("robot-01", "lab-robots")]
    assert devices.fleet(0) == []


def test_the_load_is_quiet_then_busy_then_quiet() -> None:
    assert traffic.rate(0) == traffic.QUIET
    assert traffic.rate(traffic.BUSY_FROM) == traffic.BUSY
    assert traffic.rate(traffic.BUSY_UNTIL) == traffic.QUIET
    assert traffic.rate(traffic.PERIOD + traffic.BUSY_FROM + 1) == traffic.BUSY
    # The service's target: one replica when quiet, its maximum when busy.
    assert traffic.QUIET <= inference.TARGET_RPS < traffic.BUSY / (inference.MAX_REPLICAS - 1)


class _Counting(BaseHTTPRequestHandler):
    bodies: list[Any] = []

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers["Content-Length"]))
        _Counting.bodies.append((self.path, json.loads(body)))
        self.send_response(200 if len(_Counting.bodies) % 5 else 500)
        self.send_header("Content-Length", "2")
        self.end_headers()
        self.wfile.write(b"{}")

    def log_message(self, format: str, *args: Any) -> None:
        pass


def test_the_traffic_posts_predictions_and_counts_the_answers(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setattr(traffic, "QUIET", 40.0)
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Counting)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    lines: list[str] = []
    url = f"http://127.0.0.1:{server.server_address[1]}/serve/demo/robotics/grasp-policy/v1/predict"
    sender = traffic.Traffic(url, lines.append, random.Random(1))
    stopping = threading.Event()
    thread = threading.Thread(target=sender.run, args=(stopping,))
    thread.start()
    time.sleep(1.0)
    stopping.set()
    thread.join(10)
    for _ in range(traffic.WORKERS):  # the requests still in flight are answered and counted
        assert sender.inflight.acquire(timeout=10)
    server.shutdown()
    server.server_close()
    assert len(_Counting.bodies) >= 10
    assert all(
        path == "/serve/demo/robotics/grasp-policy/v1/predict" and len(b["input"]) == 4 for path, b in _Counting.bodies
    )
    tally = sender.tally
    assert tally.sent == len(_Counting.bodies)
    assert tally.failed == len(_Counting.bodies) // 5
    assert "answered 2xx" in tally.take()
    assert tally.sent == 0


def test_public_url_of_a_bind_address() -> None:
    assert public_url("127.0.0.1:8077") == "http://127.0.0.1:8077"
    assert public_url("0.0.0.0:8000") == "http://127.0.0.1:8000"
    assert public_url(":8000") == "http://127.0.0.1:8000"


def test_stop_replicas_ends_the_process_groups_working_under_a_directory(tmp_path: Path) -> None:
    replica = tmp_path / "simulated" / "c.json.replicas" / "job-1"
    replica.mkdir(parents=True)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    # A replica's shape: a session of its own, a shell whose child ignores SIGTERM (killed after the grace).
    stubborn = subprocess.Popen(["/bin/sh", "-c", "trap '' TERM; sleep 60 & wait"], cwd=replica, start_new_session=True)
    other = subprocess.Popen(["sleep", "60"], cwd=elsewhere, start_new_session=True)
    try:
        time.sleep(0.3)
        assert stop_replicas(tmp_path / "simulated", grace=0.5) == 1
        stubborn.wait(5)
        time.sleep(0.2)
        assert members(stubborn.pid) == []  # the shell and its sleep (a zombie at most, whoever reaps it)
        assert other.poll() is None  # not under the directory: left alone
        assert stop_replicas(tmp_path / "simulated") == 0
    finally:
        other.send_signal(signal.SIGKILL)
        other.wait()
        if stubborn.poll() is None:
            os.killpg(stubborn.pid, signal.SIGKILL)


def test_an_agent_goes_offline_for_a_while_and_comes_back(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    from demo.management.commands import demo_devices

    monkeypatch.setattr(demo_devices, "OFFLINE_EVERY", 0.05)
    monkeypatch.setattr(demo_devices, "OFFLINE_SECONDS", 0.5)
    agent = Child("robot-01", ["sleep", "30"], process=subprocess.Popen(["sleep", "30"]))
    supervisor = SimpleNamespace(children=[agent])
    stopping = threading.Event()
    lines: list[str] = []
    command = demo_devices.Command()
    monkeypatch.setattr(command, "_log", lines.append)
    spells = threading.Thread(target=command._offline_spells, args=(supervisor, stopping, {"offline_chance": 1.0}))
    spells.start()

    def state() -> str:
        return Path(f"/proc/{agent.process.pid}/stat").read_text().rsplit(")", 1)[1].split()[0]  # type: ignore[union-attr]

    try:
        deadline = time.monotonic() + 5
        while state() != "T":  # paused: the portal stops hearing from it
            assert time.monotonic() < deadline
            time.sleep(0.01)
        assert lines[0] == "robot-01 goes offline for 0.5 s (paused)"
        while "robot-01 is back" not in lines:
            assert time.monotonic() < deadline
            time.sleep(0.01)
        # Stopping lets a paused agent go on at once, so that it can end on the supervisor's SIGTERM.
        while state() != "T":
            assert time.monotonic() < deadline
            time.sleep(0.01)
        stopping.set()
        spells.join(5)
        assert state() != "T"
    finally:
        stopping.set()
        agent.process.kill()  # type: ignore[union-attr]
        agent.process.wait()  # type: ignore[union-attr]
