"""Real replicas for the serving tests: each replica is a real HTTP server process on this machine.

``Plant`` plays the replica's program and its report: a replica whose job runs on the simulated fleet gets a
process of the test's (answering with its revision's behaviour, set per test), and its attempt's ``serve_url`` is
set to it, as the program would report it with the job token. What the simulated cluster itself starts for the
job (its command, a ``sleep``) is stopped when the test ends. That the cluster runs a replica's own program and
that the program's report reaches the attempt is proven by tests/scheduler/test_service_replicas.py and, with
the whole loop, by tests/portal/test_portal_to_robots.py.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from django.utils import timezone

from clusters.actions import sync
from scheduler.models import Attempt, Job
from serving import dataplane
from serving.actions import control
from serving.dataplane import source
from serving.dataplane.server import DataPlane, InThread
from serving.dataplane.table import Limits
from serving.models import Replica, Service
from tests.scheduler.conftest import Fleet

SERVER = r"""
import json, sys, time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

name, health, delay, port = sys.argv[1], int(sys.argv[2]), float(sys.argv[3]), int(sys.argv[4])

class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def answer(self, status, body):
        data = body.encode()
        self.send_response(status)
        self.send_header("Content-Type", "text/plain")
        self.send_header("Content-Length", str(len(data)))
        self.send_header("Connection", "close")
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(data)

    def do_GET(self):
        if self.path == "/healthz":
            return self.answer(health, "ok" if health == 200 else "broken")
        time.sleep(delay)
        self.answer(200, f"{name} {self.command} {self.path}")

    do_POST = do_PUT = do_DELETE = do_HEAD = do_GET

    def log_message(self, *args):
        pass

server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
print(server.server_address[1], flush=True)
server.serve_forever()
"""


@dataclass
class Plant:
    """Starts a real process for each running replica and reports its address (see the module)."""

    fleet: Fleet
    script: Path
    #: Per revision number: (health status, seconds each request takes).
    behaviour: dict[int, tuple[int, float]] = field(default_factory=dict)
    processes: dict[int, subprocess.Popen[str]] = field(default_factory=dict)
    now: datetime = field(default_factory=timezone.now)

    def start(self, name: str, port: int, health: int = 200, delay: float = 0.0) -> tuple[subprocess.Popen[str], str]:
        """A replica's process on ``port`` (the one its attempt was handed: the only one it may report)."""
        process = subprocess.Popen(
            [sys.executable, str(self.script), name, str(health), str(delay), str(port)],
            stdout=subprocess.PIPE,
            text=True,
        )
        assert process.stdout is not None
        port = int(process.stdout.readline())
        return process, f"http://127.0.0.1:{port}/"

    def place(self) -> None:
        """Place and start what the control loop submitted, and give each running replica its process."""
        self.fleet.cycle()
        self.fleet.follow()
        for replica in Replica.objects.exclude(state=Replica.State.GONE).select_related("job", "revision"):
            if replica.job.state != Job.State.RUNNING or replica.job_id in self.processes:
                continue
            health, delay = self.behaviour.get(replica.revision.number, (200, 0.0))
            attempt = Attempt.objects.get(job=replica.job, number=replica.job.attempt)
            name = f"replica-{replica.pk}-r{replica.revision.number}"
            process, url = self.start(name, attempt.serve_port, health, delay)
            self.processes[replica.job_id] = process
            Attempt.objects.filter(pk=attempt.pk).update(serve_url=url)

    def tick(self, service: Service, seconds: float = 5.0) -> Service:
        """Advance the control loop's clock by ``seconds`` and run one tick, then place what it asked for."""
        self.now += timedelta(seconds=seconds)
        control.tick_service(service.pk, self.now)
        self.place()
        service.refresh_from_db()
        return service

    def settle(self, service: Service, ticks: int = 3) -> Service:
        for _ in range(ticks):
            service = self.tick(service)
        return service

    def kill(self, replica: Replica) -> None:
        process = self.processes[replica.job_id]
        process.kill()
        process.wait()

    def stop_all(self) -> None:
        for process in self.processes.values():
            process.kill()
            process.wait()


def states(service: Service) -> dict[str, int]:
    counts: dict[str, int] = {}
    for state in service.replicas.values_list("state", flat=True):
        counts[state] = counts.get(state, 0) + 1
    return counts


def ready(service: Service) -> list[Replica]:
    return list(service.replicas.filter(state=Replica.State.READY).select_related("revision").order_by("pk"))


def stop_cluster_replicas() -> None:
    """Stop what the simulated clusters run for every replica the test made (their processes are real)."""
    for attempt in Attempt.objects.filter(job__kind=Job.Kind.SERVICE).exclude(backend_id="").select_related("cluster"):
        sync.backend_for(attempt.cluster).cancel(attempt.backend_id)


@pytest.fixture
def plant(fleet: Fleet, tmp_path: Path) -> Iterator[Plant]:
    script = tmp_path / "replica_server.py"
    script.write_text(SERVER)
    planted = Plant(fleet, script)
    yield planted
    planted.stop_all()


def service_fields(**more: Any) -> dict[str, Any]:
    return {
        "image": "ghcr.io/lab/serve:1",
        # What the simulated cluster runs for each replica: a program that waits (``Plant`` serves for it, on the
        # port each replica is handed).
        "command": ["sleep", "600"],
        "port": 0,
        "health_path": "/healthz",
        "accelerators": 1,
        "max_replicas": 4,
        "target": 5.0,
        **more,
    }


class Plane(InThread):
    """The data plane (``serving/dataplane/server.py``) in a thread of the test's process, reading its database and
    cache through ``source`` as the real process does: its table rebuilt and its counts added every tenth of a
    second, token verdicts kept ``auth_seconds`` (none by default)."""

    def __init__(self, limits: Limits | None = None, *, auth_seconds: float = 0.0) -> None:
        super().__init__(
            DataPlane(source, limits or dataplane.limits(), refresh=0.1, flush_every=0.1, auth_seconds=auth_seconds)
        )


@pytest.fixture
def plane(fleet: Fleet) -> Iterator[Plane]:
    with Plane() as running:
        yield running
