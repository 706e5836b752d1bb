"""The demo: seeding is idempotent, and `manage.py demo` runs web, worker and beat, restarting any that dies,
until stopped."""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from datetime import date
from pathlib import Path

import pytest
import requests
from django.contrib.auth import authenticate
from django.core.exceptions import ImproperlyConfigured
from django.test import RequestFactory

from demo.tenancy import USERS, seed_demo
from tenancy.models import Membership, Organization, Project, Team

ROOT = Path(__file__).resolve().parent.parent


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


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


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
    port = _free_port()
    env = {k: v for k, v in os.environ.items() if k not in {"DATABASE_URL", "REDIS_URL", "CELERY_BROKER_URL"}}
    # Two weeks of billing history, not half a year: the command is what is tested here.
    env.update(QM_VAR_DIR=str(tmp_path), DJANGO_SETTINGS_MODULE="portal.settings", QM_DEMO_HISTORY_DAYS="14")
    demo = subprocess.Popen(
        [sys.executable, "manage.py", "demo", "--bind", f"127.0.0.1:{port}"],
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
        deadline = time.monotonic() + 90
        while True:
            assert demo.poll() is None, output.text
            try:
                if requests.get(f"{base}/healthz/", timeout=2).status_code == 200:
                    break
            except requests.RequestException:
                pass  # not listening yet, or still starting its workers
            assert time.monotonic() < deadline, "the demo did not come up in 90 s"
            time.sleep(0.3)
        assert requests.get(f"{base}/login/", timeout=5).status_code == 200
        assert requests.get(f"{base}/static/css/portal.css", timeout=5).status_code == 200
        token = requests.post(f"{base}/api/v1/auth/token/", json={"username": "lena", "password": "demo"}, timeout=5)
        assert token.status_code == 201
        lena = {"Authorization": f"Bearer {token.json()['token']}"}
        me = requests.get(f"{base}/api/v1/me/", headers=lena, timeout=5)
        assert me.json()["memberships"][0]["role"] == "lead"

        # The worker dies: the demo says so and starts another, and the portal answers all along.
        worker = output.pid("worker")
        assert worker is not None, output.text
        os.kill(worker, signal.SIGKILL)
        deadline = time.monotonic() + 60
        while (again := output.pid("worker", after=worker)) is None:
            assert requests.get(f"{base}/healthz/", timeout=5).status_code == 200
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
        submitted = requests.post(f"{base}/api/v1/jobs/", json=job, headers=lena, timeout=5)
        assert submitted.status_code == 201, submitted.text
        deadline = time.monotonic() + 60
        while (
            state := requests.get(f"{base}/api/v1/jobs/{submitted.json()['id']}/", headers=lena, timeout=5).json()[
                "state"
            ]
        ) == "pending":
            assert time.monotonic() < deadline, output.text
            time.sleep(0.5)
        assert state in {"admitted", "placing", "running"}
        os.kill(again, 0)  # still there
    finally:
        demo.send_signal(signal.SIGINT)
        demo.wait(timeout=60)
        output.reader.join(10)
    assert demo.returncode == 0, output.text
    assert f"Quartermaster is running at http://127.0.0.1:{port}/" in output.text
    for demo_user in USERS:
        assert demo_user.username in output.text
    assert output.text.count("exited with") == 1, output.text  # the worker we killed, nothing else
    with pytest.raises(requests.ConnectionError):
        requests.get(f"{base}/healthz/", timeout=2)
    # Every child stopped with the demo: nothing of it is left in its process group.
    with pytest.raises(ProcessLookupError):
        os.killpg(demo.pid, 0)


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
