"""Chaos: a real Celery worker runs the placement loop against PostgreSQL and a Redis of the test's own,
and is killed (SIGKILL) at random moments of its cycles, many times over; Redis itself is restarted.
After every kill the database must hold a consistent world: no job lost, none placed twice, no GPU
share and no quota exceeded. At the end every job has run, exactly once, to success.
"""

from __future__ import annotations

import json
import os
import random
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections import Counter, defaultdict
from collections.abc import Iterator
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from celery import Celery
from django.db import connection

from clusters.models import AcceleratorType
from scheduler import actions
from scheduler.lifecycle import PLACED
from scheduler.models import Assignment, Attempt, Job, Quota
from tests.scheduler.conftest import Fleet

pytestmark = [pytest.mark.worker, pytest.mark.django_db(transaction=True)]
ROOT = Path(__file__).resolve().parents[2]
QUOTA_GPUS = 16


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class Redis:
    port: int
    log: Path
    process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        self.process = subprocess.Popen(
            ["redis-server", "--port", str(self.port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"],
            stdout=self.log.open("ab"),
            stderr=subprocess.STDOUT,
        )
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            with socket.socket() as s:
                if s.connect_ex(("127.0.0.1", self.port)) == 0:
                    return
            time.sleep(0.05)
        raise AssertionError("redis-server did not start")

    def stop(self) -> None:
        if self.process is not None:
            self.process.kill()
            self.process.wait()
            self.process = None


@pytest.fixture
def redis_server(tmp_path: Path) -> Iterator[Redis]:
    if connection.vendor != "postgresql":
        pytest.skip("the chaos test needs PostgreSQL (a worker process must see the test database)")
    server = Redis(_free_port(), tmp_path / "redis.log")
    server.start()
    yield server
    server.stop()


class Worker:
    """A Celery worker process on the test database and the test's Redis, consuming a queue of its own."""

    def __init__(self, redis: Redis, log: Path, pause: float) -> None:
        self.redis, self.log, self.pause = redis, log, pause
        self.queue = f"chaos-{uuid.uuid4().hex[:8]}"
        self.process: subprocess.Popen[bytes] | None = None
        db = connection.settings_dict
        self.database = f"postgres://{db['USER']}@{db['HOST'] or '127.0.0.1'}:{db['PORT'] or 5432}/{db['NAME']}"

    def start(self) -> None:
        env = {
            **os.environ,
            "DJANGO_SETTINGS_MODULE": "portal.settings",
            "DATABASE_URL": self.database,
            "REDIS_URL": self.redis.url,
            "CELERY_TASK_DEFAULT_QUEUE": self.queue,
            "QM_CHAOS_PAUSE": str(self.pause),
            "PLACEMENT_LOCK_SECONDS": "2",  # a killed leader's lock runs out quickly
        }
        env.pop("CELERY_BROKER_URL", None)
        self.process = subprocess.Popen(
            [sys.executable, "-m", "celery", "-A", "tests.scheduler.chaos_app", "worker", "--pool=solo",
             "-Q", self.queue, "--without-gossip", "--without-mingle", "--without-heartbeat", "-l", "INFO"],
            cwd=ROOT, env=env, stdout=self.log.open("ab"), stderr=subprocess.STDOUT,
        )  # fmt: skip
        deadline = time.monotonic() + 60
        while b" ready." not in self.log.read_bytes()[-4000:]:
            assert self.process.poll() is None, self.log.read_text()[-3000:]
            assert time.monotonic() < deadline, "the worker did not start"
            time.sleep(0.05)
        self.log.write_bytes(b"")  # the next start waits for its own "ready."

    def kill(self) -> None:
        if self.process is not None:
            self.process.send_signal(signal.SIGKILL)
            self.process.wait()
            self.process = None

    def stop(self) -> None:
        if self.process is not None:
            self.process.terminate()
            self.process.wait(30)
            self.process = None

    def busy(self) -> bool:
        """Whether tasks sent earlier are still queued (so the final phase does not pile up a backlog)."""
        import redis

        client = redis.Redis.from_url(self.redis.url)
        try:
            return bool(client.llen(self.queue))
        finally:
            client.close()

    def send(self, *tasks: str) -> None:
        client = Celery(broker=self.redis.url, set_as_current=False)  # the test's own tasks keep their broker
        try:
            for task in tasks:
                client.send_task(task, queue=self.queue)
        finally:
            client.close()


def check_world(fleet: Fleet, submitted: set[int]) -> None:
    """The invariants that must hold whenever the worker is dead, wherever it died."""
    jobs = {j.pk: j for j in Job.objects.all()}
    assert set(jobs) == submitted, "a job was lost or appeared"
    active = Counter(Attempt.objects.filter(outcome=Attempt.Outcome.ACTIVE).values_list("job_id", flat=True))
    for pk, job in jobs.items():
        last = job.events.order_by("pk").last()
        assert last is not None
        assert last.to_state == job.state, f"job {pk}: the timeline ends in {last.to_state}, the job is {job.state}"
        if job.state in PLACED:
            assert active[pk] == 1, f"job {pk} is {job.state} with {active[pk]} live attempts"
            assert job.attempts.get(outcome=Attempt.Outcome.ACTIVE).number == job.attempt
        else:
            assert active[pk] == 0, f"job {pk} is {job.state} and still holds {active[pk]} attempt(s)"
    held: dict[tuple[int, int], int] = defaultdict(int)
    live = Assignment.objects.filter(attempt__outcome=Attempt.Outcome.ACTIVE, attempt__job__state__in=PLACED)
    gpus = 0
    for node, accelerators in live.values_list("node_id", "accelerators"):
        for index, milli in accelerators:
            held[node, index] += milli
            gpus += milli
    assert all(milli <= 1000 for milli in held.values()), "an accelerator was handed out twice"
    assert gpus <= QUOTA_GPUS * 1000, f"the queue holds {gpus / 1000:g} GPUs, its quota is {QUOTA_GPUS}"


def cluster_jobs(fleet: Fleet) -> dict[str, dict[str, Any]]:
    jobs: dict[str, dict[str, Any]] = {}
    for path in fleet.state_dir.glob("*.json"):
        text = path.read_text()
        if text.strip():
            jobs.update(json.loads(text)["jobs"])
    return jobs


def test_killing_the_worker_anywhere_loses_nothing_and_runs_nothing_twice(
    fleet: Fleet, redis_server: Redis, tmp_path: Path
) -> None:
    rng = random.Random(7)
    h100 = AcceleratorType.objects.get(organization=fleet.org)
    Quota.objects.create(queue=actions.queue_for(fleet.world.teams["vision"], None), flavor=h100,
                         nominal=Decimal(QUOTA_GPUS))  # fmt: skip
    for path in fleet.state_dir.glob("*.json"):  # jobs run 2 s on the simulated clusters
        path.unlink()
    for cluster in fleet.clusters.values():
        cluster.options = {**cluster.options, "job_seconds": 2}
        cluster.save(update_fields=["options"])
    worker = Worker(redis_server, tmp_path / "worker.log", pause=0.15)
    tasks = ("scheduler.tasks.placement_cycle", "scheduler.tasks.follow_clusters")
    submitted: set[int] = set()
    kills = 0
    try:
        for iteration in range(16):
            for _ in range(rng.randint(1, 4)):
                job = fleet.submit(accelerators=rng.choice([1, 2, 4, 8]), workers=rng.choice([1, 1, 2]),
                                   time_limit=600, name=f"chaos-{iteration}")  # fmt: skip
                submitted.add(job.pk)
            worker.start()
            worker.send(*tasks, *tasks)
            time.sleep(rng.uniform(0.0, 1.2))
            worker.kill()
            kills += 1
            check_world(fleet, submitted)
            if iteration == 8:  # Redis restarts and forgets everything: queued tasks, the leader lock
                redis_server.stop()
                redis_server.start()

        worker.pause = 0.0
        worker.start()
        deadline = time.monotonic() + 180
        while Job.objects.exclude(state=Job.State.SUCCEEDED).exists():
            assert time.monotonic() < deadline, list(Job.objects.exclude(state="succeeded").values("pk", "state"))
            if not worker.busy():
                worker.send(*tasks)
            time.sleep(0.5)
        check_world(fleet, submitted)
        worker.send("scheduler.tasks.follow_clusters")  # the last cleanups
        time.sleep(2)
    finally:
        worker.stop()

    assert kills == 16
    # Every job succeeded once on the clusters: at most one attempt per job ran to its end there.
    ran: Counter[str] = Counter()
    for key, record in cluster_jobs(fleet).items():
        if not record["cancelled"]:
            ran[key.split("-")[0]] += 1
    assert set(ran) == {str(pk) for pk in submitted}
    assert max(ran.values()) == 1, {k: v for k, v in ran.items() if v > 1}
    for job in Job.objects.all():
        assert job.attempts.filter(outcome=Attempt.Outcome.SUCCEEDED).count() == 1
