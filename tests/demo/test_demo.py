"""The demo: seeding is idempotent, and `manage.py demo` runs web, worker and beat, restarting any that dies,
until stopped, with its service's replicas and its device agents alive, and nothing of it left after."""

from __future__ import annotations

import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from datetime import date
from pathlib import Path

import pytest
import requests
from django.contrib.auth import authenticate
from django.core.exceptions import ImproperlyConfigured
from django.test import RequestFactory

from clusters.backends.simulated.replicas import members
from demo.tenancy import USERS, seed_demo
from tenancy.models import Membership, Organization, Project, Team

ROOT = Path(__file__).resolve().parents[2]
# How long a request to the demo may take: on a loaded machine (CI runs this beside the other tests, on two cores)
# a sign-in's password hash and a write that waits for the embedded database's lock take seconds, not a second.
ANSWER = 30


def test_seed_is_idempotent(db) -> None:  # type: ignore[no-untyped-def]
    seed_demo()
    counts = [model.objects.count() for model in (Organization, Team, Project, Membership)]
    seed_demo()
    assert [model.objects.count() for model in (Organization, Team, Project, Membership)] == counts
    assert {t.slug for t in Team.objects.all()} == {"vision", "robotics", "language"}
    for demo in USERS:
        # As the sign-in page does: with the request, which the sign-in lockouts need.
        user = authenticate(RequestFactory().post("/login/"), username=demo.username, password="demo")
        assert user is not None
        membership = Membership.objects.get(user=user)
        assert membership.role == demo.role
        assert (membership.team.slug if membership.team else None) == demo.team


def test_seed_is_refused_in_production(db, settings) -> None:  # type: ignore[no-untyped-def]
    settings.PRODUCTION = True
    with pytest.raises(ImproperlyConfigured, match="never seeded in production"):
        seed_demo()
    assert not Organization.objects.exists()


def members_under(root: Path) -> list[int]:
    """The live processes (not zombies) whose working directory is under ``root``."""
    found = []
    for proc in Path("/proc").glob("[0-9]*"):
        try:
            state = (proc / "stat").read_text().rsplit(")", 1)[1].split()[0]
            if state != "Z" and root in Path(os.readlink(proc / "cwd")).parents:
                found.append(int(proc.name))
        except (OSError, IndexError):
            continue
    return found


def _down(base: str) -> bool:
    """Whether the portal's web server does not answer."""
    try:
        return requests.get(f"{base}/healthz/", timeout=2).status_code != 200
    except requests.RequestException:
        return True


def _free_ports(count: int) -> list[int]:
    """``count`` distinct free ports (held together while chosen, so no two are the same)."""
    sockets = [socket.socket() for _ in range(count)]
    try:
        for sock in sockets:
            sock.bind(("127.0.0.1", 0))
        return [int(sock.getsockname()[1]) for sock in sockets]
    finally:
        for sock in sockets:
            sock.close()


class Output:
    """The demo's output, read line by line as it comes (so the test can wait for a line)."""

    def __init__(self, process: subprocess.Popen[str]) -> None:
        self.lines: list[str] = []
        stdout = process.stdout
        assert stdout is not None
        self.reader = threading.Thread(target=lambda: self.lines.extend(iter(stdout.readline, "")))
        self.reader.start()

    @property
    def text(self) -> str:
        return "".join(self.lines)

    def pid(self, name: str, after: int = 0) -> int | None:
        """The pid of the latest start of child ``name`` other than ``after``."""
        pids = [int(p) for p in re.findall(rf"\] {name} started \(pid (\d+)\)", self.text)]
        return pids[-1] if pids and pids[-1] != after else None


@pytest.mark.worker
def test_demo_command_serves_the_portal_survives_a_killed_worker_and_stops_on_ctrl_c(tmp_path: Path) -> None:
    port, serve_port = _free_ports(2)
    # The replicas (run as nobody) work where any user may pass: not under tmp_path, which only root may enter.
    replicas = Path(tempfile.mkdtemp(prefix="qm-demo-replicas-"))
    replicas.chmod(0o755)
    env = {k: v for k, v in os.environ.items() if k not in {"DATABASE_URL", "REDIS_URL", "CELERY_BROKER_URL"}}
    # Two weeks of billing history, not half a year: the command is what is tested here.
    env.update(
        QM_VAR_DIR=str(tmp_path / "var"),
        SIMULATED_REPLICA_ROOT=str(replicas),
        DJANGO_SETTINGS_MODULE="portal.settings",
        QM_DEMO_HISTORY_DAYS="14",
    )
    demo = subprocess.Popen(
        [sys.executable, "manage.py", "demo", "--bind", f"127.0.0.1:{port}", "--serve-bind", f"127.0.0.1:{serve_port}"],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    output = Output(demo)
    base = f"http://127.0.0.1:{port}"
    try:
        # First the demo data is made (a minute or more on a loaded machine), then the processes start.
        deadline = time.monotonic() + 300
        while "is running at" not in output.text:
            assert demo.poll() is None, output.text
            assert time.monotonic() < deadline, f"the demo was not ready in 300 s: {output.text[-3000:]}"
            time.sleep(0.3)
        # The web server and the data plane start side by side: each answers its health check when it is up.
        deadline = time.monotonic() + 120
        for health in (f"{base}/healthz/", f"http://127.0.0.1:{serve_port}/healthz"):
            while True:
                assert demo.poll() is None, output.text
                try:
                    if requests.get(health, timeout=10).status_code == 200:
                        break
                except requests.RequestException:
                    pass  # not listening yet, or still starting its workers (or loading its table)
                assert time.monotonic() < deadline, f"{health} did not answer in 120 s: {output.text[-3000:]}"
                time.sleep(0.3)
        assert requests.get(f"{base}/login/", timeout=ANSWER).status_code == 200
        assert requests.get(f"{base}/static/css/portal.css", timeout=ANSWER).status_code == 200
        token = requests.post(
            f"{base}/api/v1/auth/token/", json={"username": "lena", "password": "demo"}, timeout=ANSWER
        )
        assert token.status_code == 201
        lena = {"Authorization": f"Bearer {token.json()['token']}"}
        me = requests.get(f"{base}/api/v1/me/", headers=lena, timeout=ANSWER)
        assert me.json()["memberships"][0]["role"] == "lead"

        # The demo's service answers through its public endpoint: a replica, a real model server process. (Before
        # the worker is killed: a replica whose dispatch dies with the worker is the scheduler's recovery to test.)
        predict = f"http://127.0.0.1:{serve_port}/serve/demo/robotics/grasp-policy/v1/predict"
        answer = requests.post(predict, json={"input": [1, 2]}, timeout=150)  # held while the replica starts
        assert answer.status_code == 200, (answer.text, output.text[-3000:])
        assert answer.json()["output"]["score"] == 3.0
        assert answer.json()["model"] == "grasp-policy"
        assert answer.json()["bytes"] > 0  # the version's bytes, which the replica fetched with its job token
        assert answer.headers["X-QM-Revision"] == "1"
        # The six demo devices' agents enrolled with the seeded tokens and keep polling: all online.
        token = requests.post(
            f"{base}/api/v1/auth/token/", json={"username": "adam", "password": "demo"}, timeout=ANSWER
        )
        adam = {"Authorization": f"Bearer {token.json()['token']}"}
        deadline = time.monotonic() + 60
        while True:
            listed = requests.get(f"{base}/api/v1/devices/?online=true", headers=adam, timeout=ANSWER).json()
            online = sorted(d["name"] for d in listed.get("results", listed))
            if len(online) == 6:
                break
            assert time.monotonic() < deadline, (online, output.text[-3000:])
            time.sleep(1)
        assert online == ["arm-01", "arm-02", "robot-01", "robot-02", "robot-03", "robot-04"]

        # The worker dies: the demo says so and starts another, and the portal answers all along.
        worker = output.pid("worker")
        assert worker is not None, output.text
        os.kill(worker, signal.SIGKILL)
        deadline = time.monotonic() + 60
        while (again := output.pid("worker", after=worker)) is None:
            assert requests.get(f"{base}/healthz/", timeout=ANSWER).status_code == 200
            assert time.monotonic() < deadline, output.text
            time.sleep(0.2)
        assert f"worker (pid {worker}) exited with signal SIGKILL" in output.text
        # The new worker takes tasks: a submission is placed (the submission wakes the placement loop).
        job = {
            "team": "vision",
            "name": "after-the-crash",
            "time_limit": "10m",
            "image": "busybox",
            "command": ["true"],
            "accelerators": 0,
            "cpu": 1,
            "memory_gib": 1,
        }
        submitted = requests.post(f"{base}/api/v1/jobs/", json=job, headers=lena, timeout=ANSWER)
        assert submitted.status_code == 201, submitted.text
        deadline = time.monotonic() + 60
        while (
            state := requests.get(f"{base}/api/v1/jobs/{submitted.json()['id']}/", headers=lena, timeout=ANSWER).json()[
                "state"
            ]
        ) == "pending":
            assert time.monotonic() < deadline, output.text
            time.sleep(0.5)
        assert state in {"admitted", "placing", "running"}
        os.kill(again, 0)  # still there

        # The portal's web server restarts: the service keeps answering through the data plane all the while.
        web = output.pid("web")
        assert web is not None, output.text
        os.kill(web, signal.SIGTERM)
        statuses: list[int] = []
        portal_down = False
        deadline = time.monotonic() + 90
        while (output.pid("web", after=web)) is None or not portal_down or _down(base):
            portal_down = portal_down or _down(base)
            statuses.append(requests.post(predict, json={"input": [1, 2]}, timeout=30).status_code)
            assert time.monotonic() < deadline, output.text[-3000:]
        assert portal_down  # it was away, and the service answered meanwhile
        assert set(statuses) == {200}, statuses
    finally:
        demo.send_signal(signal.SIGINT)
        demo.wait(timeout=60)
        output.reader.join(10)
    assert demo.returncode == 0, output.text
    assert f"Quartermaster is running at http://127.0.0.1:{port}/" in output.text
    for demo_user in USERS:
        assert demo_user.username in output.text
    # The worker we killed and the web server we stopped, nothing else.
    assert output.text.count("exited with") == 2, output.text
    assert f"web (pid {web}) exited with" in output.text
    # No request failed on the embedded defaults' one database file: the web server's access log (its lines
    # end '"METHOD path HTTP/1.1" status size …') has the devices' polls, enrolments and reports, the service's
    # requests and this test's, and not one 5xx.
    answered = re.findall(r'"[A-Z]+ (\S+) HTTP/1\.[01]" (\d{3}) ', output.text)
    assert any(path.startswith("/api/v1/edge/") for path, _ in answered), output.text[-3000:]
    assert [(path, status) for path, status in answered if status.startswith("5")] == []
    with pytest.raises(requests.ConnectionError):
        requests.get(f"{base}/healthz/", timeout=2)
    # Every child stopped with the demo: nothing of it is left in its process group (web, workers, agents), and
    # no service replica (in sessions of their own) works under its directory.
    # (Zombies do not count: the killed worker's pool processes wait for the system to reap them.)
    assert members(demo.pid) == [], output.text[-3000:]
    assert "service replicas stopped: 1" in output.text, output.text[-3000:]
    assert members_under(tmp_path) == [], output.text[-3000:]
    assert members_under(replicas) == [], output.text[-3000:]
    shutil.rmtree(replicas, ignore_errors=True)


def test_demo_jobs_and_governance_are_seeded_once(db, settings, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    from billing.models import Price
    from clusters.models import Cluster
    from demo.billing import seed_prices
    from demo.fleet import seed_demo_fleet, sync_demo_fleet
    from demo.jobs import JOBS, seed_demo_jobs
    from governance.models import Cohort, PriorityTier, Queue, Quota
    from scheduler.models import Job

    settings.VAR_DIR = tmp_path
    org = seed_demo()
    seed_demo_fleet(org)
    sync_demo_fleet(org)
    first = seed_demo_jobs(org)
    counts = [model.objects.count() for model in (Job, PriorityTier, Cohort, Queue, Quota)]
    again = seed_demo_jobs(org)
    assert [model.objects.count() for model in (Job, PriorityTier, Cohort, Queue, Quota)] == counts
    assert [j.pk for j in again] == [j.pk for j in first]
    assert counts == [len(JOBS), 4, 1, 3, 9]

    production = PriorityTier.objects.get(organization=org, name="production")
    assert (production.preemptible, [t.slug for t in production.teams.all()]) == (False, ["language"])
    assert PriorityTier.objects.get(organization=org, is_default=True).name == "normal"
    assert {q.team.slug: q.cohort.name for q in Queue.objects.select_related("team", "cohort")} == {
        "vision": "research",
        "robotics": "research",
        "language": "research",
    }
    seed_prices(org, date(2026, 1, 1))
    for cluster in Cluster.objects.filter(organization=org):  # every flavor of every cluster is priced
        flavors = set(cluster.nodes.values_list("accelerator_id", flat=True))
        assert set(Price.objects.filter(cluster=cluster).values_list("flavor_id", flat=True)) == flavors
    jobs = Job.objects.all()
    assert {j.submitted_by.username for j in jobs} == {"alice", "bob"}
    assert any(j.workers > 1 and j.accelerators > 0 for j in jobs)  # a gang
    assert any(j.accelerator_milli < 1000 for j in jobs)  # a fraction of one GPU
    assert any(j.accelerators == 0 for j in jobs)  # CPU only
    assert all(j.state == Job.State.PENDING for j in jobs)


# --- The background work (demo/background.py) ----------------------------------------------------------


@pytest.fixture
def living(db, settings, tmp_path: Path):  # type: ignore[no-untyped-def]
    """The demo organization with its fleet synced and its governance, no seeded jobs; the simulated state
    under ``tmp_path``."""
    from demo.background import seed_researchers
    from demo.fleet import seed_demo_fleet, sync_demo_fleet
    from demo.jobs import seed_governance

    settings.VAR_DIR = tmp_path
    org = seed_demo()
    seed_demo_fleet(org)
    sync_demo_fleet(org)
    seed_governance(org)
    seed_researchers(org)
    return org


def _place_and_start(org) -> None:  # type: ignore[no-untyped-def]
    """A placement cycle, each admitted attempt dispatched, then the clusters followed and synced."""
    from clusters.actions import sync
    from clusters.models import Cluster
    from scheduler.models import Attempt
    from scheduler.placement import dispatch, follow, loop

    loop.run_cycle(org)
    for attempt_id in Attempt.objects.filter(outcome="active", backend_id="").values_list("pk", flat=True):
        dispatch.dispatch(attempt_id)
    for cluster in Cluster.objects.filter(organization=org):
        follow.follow(cluster.pk)
        sync.sync_cluster(cluster.pk)


def test_the_background_submits_jobs_the_loop_places_and_the_nodes_count(living) -> None:  # type: ignore[no-untyped-def]
    import random

    from django.db.models import Q
    from django.utils import timezone

    from clusters.models import Node
    from demo.background import PER_TICK, RESEARCHERS, background_jobs, tick, utilization
    from scheduler import occupancy
    from scheduler.models import Job

    result = tick(living, timezone.now(), random.Random(3))
    # An idle fleet: the most a tick submits, each through submit_job by a background researcher.
    assert len(result.submitted) == PER_TICK, result
    assert {j.submitted_by.username for j in result.submitted} <= set(RESEARCHERS)
    assert all(j.state == Job.State.PENDING and j.time_limit <= 20 * 60 for j in result.submitted)
    _place_and_start(living)
    running = list(background_jobs(living).filter(state=Job.State.RUNNING))
    assert running, [(j.name, j.state, j.pending_message) for j in background_jobs(living)]
    # The simulated clusters report what the jobs hold, so the nodes count it after a sync.
    used, total = utilization(living)
    assert used == sum(Node.objects.filter(cluster__organization=living).values_list("accelerators_used", flat=True))
    assert 0 < used <= total
    # Node by node, the clusters' reports and our placements agree: nothing missed, nothing counted twice.
    ours = occupancy.held(Q(cluster__organization=living))
    reported = dict(Node.objects.filter(accelerators_used__gt=0).values_list("pk", "accelerators_used"))
    assert reported == {pk: held.accelerators for pk, held in ours.items() if held.accelerators}


def test_the_background_stays_bounded(living) -> None:  # type: ignore[no-untyped-def]
    import random

    from django.utils import timezone

    from demo.background import HIGH, MAX_WAITING, PER_TICK, background_jobs, tick, utilization
    from scheduler.states import WAITING

    rng = random.Random(11)
    # Ticks with no loop to place anything: the waiting line stops growing at MAX_WAITING.
    for _ in range(8):
        result = tick(living, timezone.now(), rng)
        assert len(result.submitted) <= PER_TICK
    assert background_jobs(living).filter(state__in=WAITING).count() == MAX_WAITING
    assert tick(living, timezone.now(), rng).submitted == []
    # With the loop placing them, the fleet fills, but never past HIGH by more than one large job.
    for _ in range(25):
        tick(living, timezone.now(), rng)
        _place_and_start(living)
    used, total = utilization(living)
    assert used / total < HIGH + 128 / total, (used, total)  # the largest recipe: 16 x 8
    assert background_jobs(living).count() <= 33 * PER_TICK


def test_a_health_event_drains_a_node_and_it_comes_back(living, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    import random
    from datetime import timedelta

    from django.utils import timezone

    from clusters.actions import health
    from clusters.models import Drain, Node
    from demo import background

    monkeypatch.setattr(background, "SICK_CHANCE", 1.0)
    monkeypatch.setattr(background, "DRAIN_CHANCE", 0.0)
    rng = random.Random(5)
    background.tick(living, timezone.now(), rng)
    _place_and_start(living)
    now = timezone.now()
    result = background.TickResult()
    background.health_events(living, now, rng, result)
    assert result.sick
    node = Node.objects.get(cluster__organization=living, name=result.sick)
    # The health round sees the failing check: the node is marked ill and drained automatically.
    health.check_cluster(node.cluster_id)
    node.refresh_from_db()
    assert (node.healthy, node.state) == (False, Node.State.DRAINING)
    assert Drain.objects.get(node=node).automatic
    # One ill node at a time: a second call makes no other ill.
    again = background.TickResult()
    background.health_events(living, now, rng, again)
    assert (again.sick, again.healed) == ("", "")
    # Its time is up: the fault is cleared; after RESUME_AFTER passing rounds the policy resumes the node.
    later = background.TickResult()
    background.health_events(living, now + timedelta(seconds=background.SICK_SECONDS + 1), rng, later)
    assert later.healed == node.name
    for _ in range(health.RESUME_AFTER):
        health.check_cluster(node.cluster_id)
    node.refresh_from_db()
    assert (node.healthy, node.state) == (True, Node.State.SCHEDULABLE)


def test_a_demo_drain_is_resumed_when_it_is_over(living, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    import random
    from datetime import timedelta

    from django.utils import timezone

    from clusters.models import Drain, Node
    from demo import background

    monkeypatch.setattr(background, "SICK_CHANCE", 0.0)
    monkeypatch.setattr(background, "DRAIN_CHANCE", 1.0)
    rng = random.Random(8)
    background.tick(living, timezone.now(), rng)
    _place_and_start(living)
    result = background.TickResult()
    background.drains(living, timezone.now(), rng, result)
    assert result.drained
    drain = Drain.objects.get(node__name=result.drained, reason=background.DRAIN_REASON)
    assert drain.requested_by is not None
    assert (drain.requested_by.username, drain.automatic) == ("adam", False)
    assert Node.objects.get(pk=drain.node_id).state == Node.State.DRAINING
    # One drain at a time, and it ends: resumed through resume_node once DRAIN_SECONDS are over.
    background.drains(living, timezone.now(), rng, again := background.TickResult())
    assert (again.drained, again.resumed) == ("", "")
    later = drain.created_at + timedelta(seconds=background.DRAIN_SECONDS + 1)
    background.drains(living, later, random.Random(0), over := background.TickResult())
    assert over.resumed == result.drained
    drain.refresh_from_db()
    assert drain.state == Drain.State.RESUMED
    assert Node.objects.get(pk=drain.node_id).state == Node.State.SCHEDULABLE
