"""From the portal to the robots: issue 24's "done when" lived by one team, end to end, as one test.

The vision team (alice, researcher; lena, lead) works through the portal's pages and API over HTTP against a
live server; only the loops are ticked by the test, as the other multi-process tests tick them (the placement
cycle and the clusters' follower, the services' control loop, the rollout beat). Everything else is real: the
training jobs run on the simulated fleet; the service's replicas are ``deploy/model_server.py`` processes the
simulated backend starts, which fetch the model version's bytes from the portal with their job token, check
its SHA-256 and report their address; the devices are ``deploy/edge_agent.py`` processes enrolled with
one-time tokens.

1. A training job ends with a checkpoint under ``ARTIFACT_IMPORT_ROOTS``; alice publishes it as version 1 from
   the job's page (one POST of the page's form).
2. A service serves version 1 (min 1, max 4 replicas, rps target 2, windows of seconds); a paced load
   generator sends predictions through the stable endpoint: the replica count follows the load up to four and,
   once the load stops, back down to one after the down window. Every answer came from a replica serving
   version 1's bytes, and the answers were spread over the replicas.
3. Two more training jobs publish version 2 (good) and version 3 (its bytes fail the devices' health check).
   Eight agents enrol into a device group with tokens lena issues; version 2 rolls out in phases (a canary of
   two, then 50 and 100 percent) and completes; version 3's canaries fail their health check, the rollout
   pauses and rolls back. Every agent ends on version 2, its current file hashing to version 2's SHA-256;
   none on version 3.

The figures the issue asks for are printed (``pytest -s``): the time to scale up under the load step, the time
to scale back down, the rollout's time to the group, the devices left on the bad version. Only behaviour is
asserted, never a timing.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import socket
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
import requests
from django.db import connections
from django.test import Client

from benchmarks import rollout as fleet_of_agents
from clusters.backends.simulated import replicas as simulated_replicas
from scheduler.actions.checkpoints import token_for
from scheduler.models import Attempt
from serving import dataplane
from serving.actions import control
from serving.dataplane import source
from serving.dataplane.server import DataPlane, InThread
from tenancy import actions as tenancy_actions
from tests.scheduler.conftest import Fleet, fleet  # noqa: F401 - the simulated fleet fixture

ROOT = Path(__file__).resolve().parents[2]
MODEL_SERVER = ROOT / "deploy" / "model_server.py"
MODEL = "grasp-policy"  # the training jobs' name, and so the model's (the publish form's default)
AGENTS = 8


# --- the team, over HTTP -------------------------------------------------------------------------------------


class Person:
    """Someone of the team calling the portal's API over HTTP with a personal API token."""

    def __init__(self, server: str, on: Fleet, username: str) -> None:
        self.server = server
        self.user = on.user(username)
        _, raw = tenancy_actions.issue_token(self.user, name="scenario")
        self.token = raw
        self.session = requests.Session()
        self.session.headers["Authorization"] = f"Bearer {raw}"

    def get(self, path: str, **params: Any) -> Any:
        answer = self.session.get(self.server + path, params=params, timeout=30)
        assert answer.status_code == 200, (path, answer.status_code, answer.text[:500])
        return answer.json()

    def post(self, path: str, body: dict[str, Any] | None = None, status: int = 201) -> Any:
        answer = self.session.post(self.server + path, json=body or {}, timeout=30)
        assert answer.status_code == status, (path, answer.status_code, answer.text[:500])
        return answer.json()

    def page(self) -> Client:
        """The portal's pages, signed in (the Django test client, against the same database)."""
        client = Client()
        client.force_login(self.user)
        return client


@dataclass
class Portal:
    server: str
    fleet: Fleet
    imports: Path  # where the training jobs write their checkpoints (ARTIFACT_IMPORT_ROOTS)
    tmp: Path

    def loops(self, service_id: int | None = None) -> None:
        """What the beat and the on-commit tasks do: a placement cycle (dispatching what it admitted), the
        clusters followed, and the service's control tick on the wall clock."""
        self.fleet.cycle()
        self.fleet.follow()
        if service_id is not None:
            control.tick_service(service_id)


@pytest.fixture
def portal(fleet: Fleet, live_server: Any, settings: Any, tmp_path: Path) -> Iterator[Portal]:  # noqa: F811
    settings.PUBLIC_URL = live_server.url  # where jobs, replicas and agents reach the portal
    settings.ARTIFACT_ROOT = tmp_path / "store"
    root = (tmp_path / "checkpoints").resolve()
    imports = root / "demo" / "vision"  # the team's own part of the import root
    imports.mkdir(parents=True)
    settings.ARTIFACT_IMPORT_ROOTS = [root]
    settings.EDGE_POLL_SECONDS = 2
    yield Portal(str(live_server.url), fleet, imports, tmp_path)
    for path in fleet.state_dir.glob("*.json"):  # no replica process outlives the test, whatever it asserted
        text = path.read_text()
        for job in json.loads(text)["jobs"].values() if text.strip() else ():
            simulated_replicas.forget(job)


def wait_for(what: str, ready: Callable[[], bool], seconds: float, tick: Callable[[], None] | None = None) -> float:
    """Seconds until ``ready()``, calling ``tick`` between tries; fails after ``seconds``."""
    started = time.monotonic()
    while not ready():
        assert time.monotonic() - started < seconds, f"timed out after {seconds:.0f} s waiting for {what}"
        if tick is not None:
            tick()
        time.sleep(0.5)
    return time.monotonic() - started


# --- 1 and 3: training jobs that end with a checkpoint, published from their page ------------------------------


def train(portal: Portal, alice: Person, weights: bytes, label: str) -> int:
    """A training job submitted through the API, run on the simulated fleet, that reports a checkpoint (a file
    under the import root, reported with its own job token, as ``qm checkpoint`` does) and ends; its id."""
    job = alice.post(
        "/api/v1/jobs/",
        {
            "team": "vision",
            "name": MODEL,
            "image": "ghcr.io/lab/train:1",
            "command": ["python", "train.py"],
            "accelerators": 1,
            "time_limit": "1h",
            "env": {"SIM_RUN_SECONDS": "3"},  # the simulated program's run time
        },
    )
    wait_for(
        f"job {job['id']} to run",
        lambda: alice.get(f"/api/v1/jobs/{job['id']}/")["state"] == "running",
        30,
        portal.loops,
    )
    checkpoint = portal.imports / f"{label}.ckpt"
    checkpoint.write_bytes(weights)
    attempt = Attempt.objects.get(job_id=job["id"], outcome=Attempt.Outcome.ACTIVE)
    reported = requests.post(
        f"{portal.server}/api/v1/jobs/{job['id']}/checkpoints/",
        json={"location": str(checkpoint), "step": 1000},
        headers={"Authorization": f"Bearer {token_for(attempt)}"},
        timeout=30,
    )
    assert reported.status_code == 201, reported.text
    wait_for(
        f"job {job['id']} to end",
        lambda: alice.get(f"/api/v1/jobs/{job['id']}/")["state"] == "succeeded",
        30,
        portal.loops,
    )
    return int(job["id"])


def publish_from_the_jobs_page(alice: Person, job_id: int) -> dict[str, Any]:
    """Alice opens the finished job's page, follows "Publish as a model version" and sends the form as it is."""
    pages = alice.page()
    detail = pages.get(f"/jobs/{job_id}/")
    assert detail.status_code == 200
    assert f"/models/publish/?job={job_id}".encode() in detail.content
    form = pages.get(f"/models/publish/?job={job_id}")
    assert form.status_code == 200
    initial = form.context["form"].initial
    assert initial["model"] == MODEL
    sent = pages.post(
        f"/models/publish/?job={job_id}",
        {"team": initial["team"], "model": initial["model"], "version": "", "metrics": "", "notes": ""},
    )
    assert sent.status_code == 302, sent.content[:2000]
    [model] = alice.get("/api/v1/models/", name=MODEL, team="vision")["results"]
    versions = alice.get(f"/api/v1/models/{model['id']}/versions/")["results"]
    [version] = [v for v in versions if v["source_job"] == job_id]
    return dict(version)


# --- 2: the service under load --------------------------------------------------------------------------------


@dataclass
class Load:
    """``rps`` predictions a second, paced, through the stable endpoint (each on a thread of its own, so a slow
    answer does not slow the pace); every answer kept: (second sent, status, body, X-QM-Replica)."""

    url: str
    token: str
    rps: float
    answers: list[tuple[float, int, dict[str, Any], str]] = field(default_factory=list)
    stopping: threading.Event = field(default_factory=threading.Event)
    started: float = 0.0

    def send(self, at: float) -> None:
        try:
            answer = requests.post(
                self.url, json={"input": [1, 2, 3]}, headers={"Authorization": f"Bearer {self.token}"}, timeout=30
            )
            body = answer.json() if answer.headers.get("Content-Type", "").startswith("application/json") else {}
            self.answers.append((at, answer.status_code, body, answer.headers.get("X-QM-Replica", "")))
        except requests.RequestException as error:
            self.answers.append((at, 0, {"error": str(error)}, ""))

    def run(self) -> None:
        sent = 0
        while not self.stopping.is_set():
            due = self.started + sent / self.rps
            if time.monotonic() < due:
                self.stopping.wait(due - time.monotonic())
                continue
            threading.Thread(target=self.send, args=(due - self.started,), daemon=True).start()
            sent += 1

    def __enter__(self) -> Load:
        self.started = time.monotonic()
        self.thread = threading.Thread(target=self.run, daemon=True)
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stopping.set()
        self.thread.join()
        time.sleep(1.0)  # the last answers come back


def ready_replicas(lena: Person, service_id: int) -> int:
    replicas = lena.get(f"/api/v1/services/{service_id}/replicas/")
    listed = replicas["results"] if isinstance(replicas, dict) else replicas
    return sum(1 for r in listed if r["state"] == "ready")


# --- the scenario ------------------------------------------------------------------------------------------------


@pytest.mark.worker
@pytest.mark.django_db(transaction=True)
def test_a_team_trains_serves_with_autoscaling_and_rolls_out_to_robots_with_a_rollback(portal: Portal) -> None:
    figures: dict[str, Any] = {}
    alice = Person(portal.server, portal.fleet, "alice")
    lena = Person(portal.server, portal.fleet, "lena")

    # 1. A training run ends with a checkpoint; alice publishes it from the job's page.
    weights_1 = json.dumps({"scale": 2, "trained_on": "run 1"}).encode()
    v1 = publish_from_the_jobs_page(alice, train(portal, alice, weights_1, "run-1"))
    assert (v1["version"], v1["sha256"], v1["stored"]) == ("1", hashlib.sha256(weights_1).hexdigest(), True)
    (portal.imports / "run-1.ckpt").unlink()  # the run's scratch is wiped: the portal's store holds the bytes

    # 2. The team serves version 1, and its replicas follow a load step up and back down.
    target, high_rps = 2.0, 8.0
    service = lena.post(
        "/api/v1/services/",
        {
            "team": "vision",
            "name": "grasp",
            "command": [sys.executable, str(MODEL_SERVER), "--host", "127.0.0.1", "--port", "$PORT"],
            "env": {"MODEL_LATENCY_MS": "10"},
            "health_path": "/health",
            "accelerators": 0,
            "cpu": 0.5,
            "memory_gib": 0.5,
            "model_version": v1["id"],
            "min_replicas": 1,
            "max_replicas": 4,
            "metric": "rps",
            "target": target,
            "scale_up_window": 3,
            "scale_down_window": 8,
        },
    )
    sid = int(service["id"])
    tick = lambda: portal.loops(sid)  # noqa: E731 - the loops, as the beat runs them
    first_ready = wait_for("the first replica", lambda: ready_replicas(lena, sid) == 1, 60, tick)
    # The load goes through the data plane, as a user's would (the portal's /serve/ only points there).
    with InThread(DataPlane(source, dataplane.limits(), refresh=0.2, flush_every=0.2)) as plane:
        endpoint = f"{plane.url}/serve/demo/vision/grasp/v1/predict"
        needed = min(math.ceil(high_rps / target), 4)
        with Load(endpoint, alice.token, high_rps) as load:
            scale_up = wait_for(
                f"{needed} ready replicas under the load", lambda: ready_replicas(lena, sid) >= needed, 90, tick
            )
            for _ in range(6):  # a few seconds with every replica serving
                tick()
                time.sleep(0.5)
            spread_since = time.monotonic() - load.started - 3
        scale_down = wait_for("one replica once the load stopped", lambda: ready_replicas(lena, sid) == 1, 90, tick)
    figures["serving"] = {
        "first_replica_ready_s": round(first_ready, 1),
        "load_rps": high_rps,
        "target_rps_per_replica": target,
        f"scale_up_to_{needed}_replicas_s": round(scale_up, 1),
        "scale_down_to_1_after_load_s": round(scale_down, 1),
        "requests": len(load.answers),
    }

    statuses = Counter(status for _, status, _, _ in load.answers)
    assert statuses == {200: len(load.answers)}, statuses
    # Every answer is version 1's: the replica fetched the stored bytes and serves their scale (2 x (1+2+3)).
    assert {(body["version"], body["output"]["score"]) for _, _, body, _ in load.answers} == {("1", 12)}
    late = {replica for at, _, _, replica in load.answers if at >= spread_since}
    assert len(late) == needed, late  # the load is spread over every replica
    tick()
    samples = lena.get(f"/api/v1/services/{sid}/samples/")
    listed = samples["results"] if isinstance(samples, dict) else samples
    assert max(s["replicas_desired"] for s in listed) == needed
    shown = lena.page().get(f"/services/{sid}/")  # the service's page: its endpoint, replicas, load
    assert shown.status_code == 200
    assert b"/serve/demo/vision/grasp/" in shown.content
    lena.post(f"/api/v1/services/{sid}/stop/", status=200)
    wait_for("the replicas to stop", lambda: ready_replicas(lena, sid) == 0, 60, tick)

    # 3. Two more runs publish version 2 (good) and version 3 (bad bytes, that fail the robots' health check).
    weights_2 = json.dumps({"scale": 3, "trained_on": "run 2"}).encode()
    weights_3 = fleet_of_agents.BAD_MARK + json.dumps({"scale": 0}).encode()
    v2 = publish_from_the_jobs_page(alice, train(portal, alice, weights_2, "run-2"))
    v3 = publish_from_the_jobs_page(alice, train(portal, alice, weights_3, "run-3"))
    assert (v2["version"], v3["version"]) == ("2", "3")

    # The lead makes a device group, issues one-time tokens, and eight robots enrol with them.
    team_id = portal.fleet.world.teams["vision"].pk
    group = lena.post("/api/v1/device-groups/", {"team": team_id, "name": "arm-lab", "kind": "lab"})["id"]
    health = portal.tmp / "health_check.py"
    health.write_text(fleet_of_agents.HEALTH_CHECK)
    (portal.tmp / "robots").mkdir()
    options = ["--health-command", f"{sys.executable} {health}", "--poll-wait", "2", "--backoff-max", "1"]
    agents = [
        fleet_of_agents.Agent(
            portal.tmp / "robots",
            f"robot-{i:02d}",
            "arm-lab",
            portal.server,
            lena.post("/api/v1/enrolment-tokens/", {"group": group, "hours": 1})["token"],
            options,
        )
        for i in range(AGENTS)
    ]

    def devices() -> list[dict[str, Any]]:
        return list(lena.get("/api/v1/devices/", group=group, page_size=100)["results"])

    def rollout_state(rollout_id: int) -> str:
        return str(lena.get(f"/api/v1/rollouts/{rollout_id}/")["state"])

    beat = fleet_of_agents.Beat()
    beat.start()
    for agent in agents:
        agent.start()
    try:
        wait_for("the robots to enrol", lambda: [d["last_status"] for d in devices()] == ["idle"] * AGENTS, 60)
        phases = [{"canary": 2}, {"percent": 50}, {"percent": 100}]
        started = time.monotonic()
        good = lena.post(
            "/api/v1/rollouts/", {"group": group, "version": v2["id"], "phases": phases, "failure_threshold": 2}
        )
        wait_for("version 2's rollout", lambda: rollout_state(good["id"]) in ("completed", "paused", "rolled_back"), 90)
        figures[f"rollout_of_v2_to_{AGENTS}_devices_s"] = round(time.monotonic() - started, 1)
        done = lena.get(f"/api/v1/rollouts/{good['id']}/")
        assert done["state"] == "completed", done["events"]
        assert [e["kind"] for e in done["events"] if e["kind"] == "phase"] == ["phase"] * 3
        assert sorted(d["state"] for d in done["deployments"]) == ["healthy"] * AGENTS

        started = time.monotonic()
        bad = lena.post(
            "/api/v1/rollouts/", {"group": group, "version": v3["id"], "phases": phases, "failure_threshold": 2}
        )
        wait_for("version 3's rollout to stop", lambda: rollout_state(bad["id"]) in ("completed", "rolled_back"), 90)
        stopped = lena.get(f"/api/v1/rollouts/{bad['id']}/")
        assert stopped["state"] == "rolled_back", stopped["events"]
        kinds = [e["kind"] for e in stopped["events"]]
        assert kinds.index("paused") < kinds.index("rolled_back"), kinds
        assert kinds.count("phase") == 1  # the canary only: no wave started after it failed
        reached = [d["device"] for d in stopped["deployments"]]
        assert len(reached) == 2

        def settled() -> bool:
            listed = devices()
            return all((d["running"] or {}).get("version_id") == v2["id"] and d["health"] == "ok" for d in listed)

        wait_for("every robot back on version 2", settled, 60)
        figures["bad_version_stopped_and_rolled_back_s"] = round(time.monotonic() - started, 1)
    finally:
        for agent in agents:
            agent.end()
        beat.stop()
        connections.close_all()
        time.sleep(3)  # the portal's held polls run out before the live server goes

    # What each robot runs, read from its own state directory: a verified version 2, never version 3.
    on_bad = [a.name for a in agents if a.running_sha() == v3["sha256"]]
    assert on_bad == []
    assert [a.verified() for a in agents] == [(v2["sha256"], True)] * AGENTS
    for agent in agents:
        if agent.name in reached:
            assert "unhealthy" in agent.log, agent.log[-2000:]
    figures["devices_left_on_the_bad_version"] = len(on_bad)
    print("\nportal to robots:", json.dumps(figures, indent=2))


# --- the model server's side of it: the bytes it serves are the version's -----------------------------------


class Artifact(BaseHTTPRequestHandler):
    """The portal's artifact download as a replica sees it: the bytes, to a request with the job token only."""

    data = b""
    token = ""

    def do_GET(self) -> None:
        ok = self.headers.get("Authorization") == f"Bearer {self.token}"
        body = self.data if ok else b'{"detail": "no token"}'
        self.send_response(200 if ok else 401)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: Any) -> None:
        pass


@pytest.mark.parametrize(
    ("token", "checksum_of", "health"),
    [("qmj_ok", b'{"scale": 2}', 200), ("qmj_ok", b"other bytes", 500), ("qmj_wrong", b'{"scale": 2}', 500)],
)
def test_a_replica_serves_only_the_fetched_bytes_whose_checksum_matches(
    tmp_path: Path, token: str, checksum_of: bytes, health: int
) -> None:
    Artifact.data, Artifact.token = b'{"scale": 2}', "qmj_ok"
    portal = ThreadingHTTPServer(("127.0.0.1", 0), Artifact)
    threading.Thread(target=portal.serve_forever, daemon=True).start()
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {
        "PATH": os.environ.get("PATH", ""),
        "QM_MODEL_URL": f"http://127.0.0.1:{portal.server_address[1]}/artifact",
        "QM_JOB_TOKEN": token,
        "QM_MODEL_SHA256": hashlib.sha256(checksum_of).hexdigest(),
        "QM_MODEL_NAME": MODEL,
        "QM_MODEL_VERSION": "7",
    }
    argv = [sys.executable, str(MODEL_SERVER), "--host", "127.0.0.1", "--port", str(port)]
    server = subprocess.Popen(argv, env=env, cwd=tmp_path, stderr=subprocess.DEVNULL)
    try:
        answer = wait_for_answer(f"http://127.0.0.1:{port}/health")
        assert answer.status_code == health, answer.text
        if health == 200:
            assert answer.json()["model"] == MODEL
            assert answer.json()["version"] == "7"
            assert (tmp_path / "model.bin").read_bytes() == Artifact.data
        else:
            assert not (tmp_path / "model.bin").exists()  # bytes that do not verify are not kept
            predicted = requests.post(f"http://127.0.0.1:{port}/v1/predict", json={"input": [1]}, timeout=5)
            assert predicted.status_code == 503
    finally:
        server.terminate()
        server.wait(10)
        portal.shutdown()
        portal.server_close()


def wait_for_answer(url: str) -> requests.Response:
    deadline = time.monotonic() + 30
    while True:
        try:
            return requests.get(url, timeout=5)
        except requests.ConnectionError:
            assert time.monotonic() < deadline, f"nothing answered at {url}"
            time.sleep(0.2)
