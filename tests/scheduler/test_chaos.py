"""Chaos: a real Celery worker runs the placement loop against a PostgreSQL and a Redis of the test's own,
and is killed (SIGKILL) at random moments of its cycles, many times over; PostgreSQL and Redis are each
restarted once, in the middle of the run, under a worker that must keep going. After every kill the
database must hold a consistent world: no job lost, none placed twice, no GPU share and no quota exceeded,
every job's timeline ending in its state. At the end every job has run, exactly once, to success.

``QM_CHAOS_KILLS`` (16 by default; CI's chaos step, ``make chaos``, runs 200) and ``QM_CHAOS_SEED`` set the
run; ``QM_CHAOS_REPORT`` names a file for the run's figures (JSON), which are printed as well.
"""

from __future__ import annotations

import json
import os
import random
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections import Counter, defaultdict
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path
from typing import IO, Any

import pytest
from celery import Celery
from django.db import connection
from django.utils import timezone

from clusters.models import AcceleratorType
from governance.models import Quota
from scheduler import actions
from scheduler.models import Assignment, Attempt, Job, JobEvent, LoopState
from scheduler.states import PLACED
from tests.scheduler.conftest import Fleet

pytestmark = [pytest.mark.worker, pytest.mark.django_db(transaction=True)]
ROOT = Path(__file__).resolve().parents[2]
QUOTA_GPUS = 16
KILLS = int(os.environ.get("QM_CHAOS_KILLS", "16"))
SEED = int(os.environ.get("QM_CHAOS_SEED", "7"))
#: Jobs submitted stop while this many are still unfinished: the run keeps the quota contended without
#: piling up a backlog that the final phase would take minutes to drain.
BACKLOG = 12
#: How kombu's Redis transport fails when it closes a lost connection whose client it already cleared: the
#: worker ends (celery/kombu#582, still there in kombu 5); its supervisor starts another.
KOMBU_CLOSE_CRASH = "'NoneType' object has no attribute 'hostname'"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _listening(port: int) -> bool:
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) == 0


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
        while not _listening(self.port):
            assert time.monotonic() < deadline, "redis-server did not start"
            time.sleep(0.05)

    def stop(self) -> None:
        """Killed, not shut down: it forgets everything (queued tasks, the leader lock), as a crash would."""
        if self.process is not None:
            self.process.kill()
            self.process.wait()
            self.process = None

    def restart(self) -> None:
        self.stop()
        self.start()


def _postgres_bin() -> Path | None:
    """Where initdb and pg_ctl are: Debian keeps them out of PATH, under /usr/lib/postgresql/VERSION/bin."""
    found = [p.parent for p in Path("/usr/lib/postgresql").glob("*/bin/initdb") if p.parent.parent.name.isdigit()]
    if found:
        return max(found, key=lambda p: int(p.parent.name))
    initdb = shutil.which("initdb")
    return Path(initdb).parent if initdb else None


@dataclass
class Postgres:
    """A PostgreSQL server of the test's own, in a temporary directory: the suite's other tests share the
    machine's server, which the chaos run must not restart under them."""

    bin: Path
    directory: Path
    port: int

    @property
    def data(self) -> Path:
        return self.directory / "data"

    def _run(self, *command: str, stdin: bytes | None = None, as_server: bool = False, password: str = "") -> bytes:
        # initdb and the server refuse to run as root: as root, they run as the postgres user.
        prefix = ["runuser", "-u", "postgres", "--"] if as_server and os.geteuid() == 0 else []
        env = {**os.environ, "PGPASSWORD": password} if password else None
        done = subprocess.run(
            [*prefix, str(self.bin / command[0]), *command[1:]], input=stdin, capture_output=True, env=env
        )
        log = self.directory / "server.log"
        assert done.returncode == 0, f"{command[0]} failed: {done.stderr.decode(errors='replace')}" + (
            log.read_text(errors="replace")[-2000:] if log.exists() else ""
        )
        return done.stdout

    def _ctl(self, *args: str) -> None:
        self._run(
            "pg_ctl",
            "-D",
            str(self.data),
            "-l",
            str(self.directory / "server.log"),
            "-w",
            "-t",
            "60",
            *args,
            as_server=True,
        )

    def init(self) -> None:
        self._run(
            "initdb",
            "-D",
            str(self.data),
            "-U",
            "postgres",
            "-A",
            "trust",
            "-E",
            "UTF8",
            "--locale=C",
            "--no-sync",
            as_server=True,
        )
        # Speed over durability (nothing here outlives the test); restarts stay clean shutdowns.
        options = (
            f"-p {self.port} -k {self.directory} -c listen_addresses=127.0.0.1 -c fsync=off"
            " -c synchronous_commit=off -c full_page_writes=off"
        )
        self._ctl("-o", options, "start")

    def restart(self) -> None:
        """A fast shutdown (open transactions are rolled back, every connection is cut), then a start."""
        self._ctl("-m", "fast", "restart")

    def stop(self) -> None:
        self._ctl("-m", "fast", "stop")

    def copy_database(self, source: dict[str, Any]) -> None:
        """The test database, as it stands, into a database of the same name here."""
        dump = self._run(
            "pg_dump",
            "--no-owner",
            "--no-privileges",
            "-h",
            str(source["HOST"] or "127.0.0.1"),
            "-p",
            str(source["PORT"] or 5432),
            "-U",
            str(source["USER"]),
            str(source["NAME"]),
            password=str(source.get("PASSWORD") or ""),
        )
        here = ("-h", "127.0.0.1", "-p", str(self.port), "-U", "postgres")
        self._run("createdb", *here, str(source["NAME"]))
        self._run("psql", "-q", "-v", "ON_ERROR_STOP=1", *here, "-d", str(source["NAME"]), stdin=dump)


@pytest.fixture
def postgres() -> Iterator[Postgres]:
    """A PostgreSQL of the test's own, holding a copy of the test database; the test's connection is moved
    there for the test's duration (the worker is pointed at it too), and back afterwards."""
    if connection.vendor != "postgresql":
        pytest.skip("the chaos test needs PostgreSQL (a worker process must see the test database)")
    bin_dir = _postgres_bin()
    if bin_dir is None:
        pytest.skip("the chaos test needs PostgreSQL's server programs (initdb, pg_ctl) for a server of its own")
    directory = Path(tempfile.mkdtemp(prefix="qm-chaos-postgres-"))
    if os.geteuid() == 0:
        shutil.chown(directory, "postgres", "postgres")
    server = Postgres(bin_dir, directory, _free_port())
    settings = connection.settings_dict
    moved = ("HOST", "PORT", "USER", "PASSWORD")
    saved = {key: settings[key] for key in moved}
    try:
        server.init()
        server.copy_database(settings)
        connection.close()
        settings.update(HOST="127.0.0.1", PORT=str(server.port), USER="postgres", PASSWORD="")
        yield server
    finally:
        connection.close()
        settings.update(saved)
        if (server.data / "postmaster.pid").exists():
            server.stop()
        shutil.rmtree(directory, ignore_errors=True)


@pytest.fixture
def redis_server(tmp_path: Path) -> Iterator[Redis]:
    if connection.vendor != "postgresql":
        pytest.skip("the chaos test needs PostgreSQL (a worker process must see the test database)")
    server = Redis(_free_port(), tmp_path / "redis.log")
    server.start()
    yield server
    server.stop()


class Worker:
    """Celery workers on the test's PostgreSQL and Redis, one at a time, each forked by ``chaos_app``'s fork
    server (so hundreds can start), each killed or stopped before the next starts."""

    def __init__(self, redis: Redis, log: Path, queue: str, pause: float) -> None:
        self.redis, self.log, self.queue = redis, log, queue
        self.pid: int | None = None
        self.starts = 0
        db = connection.settings_dict
        env = {
            **os.environ,
            "DJANGO_SETTINGS_MODULE": "portal.settings",
            "DATABASE_URL": f"postgres://{db['USER']}@{db['HOST']}:{db['PORT']}/{db['NAME']}",
            "REDIS_URL": redis.url,
            "CELERY_TASK_DEFAULT_QUEUE": queue,
            "QM_CHAOS_PAUSE": str(pause),
            "PLACEMENT_LOCK_SECONDS": "1",  # a killed leader's lock runs out quickly
            "PYTHONUNBUFFERED": "1",
        }
        for name in ("CELERY_BROKER_URL", "CELERY_RESULT_BACKEND"):
            env.pop(name, None)
        self.server_log = log.with_suffix(".server.log")
        self.server = subprocess.Popen(
            [sys.executable, "-m", "tests.scheduler.chaos_app", str(log), queue],
            cwd=ROOT,
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self.server_log.open("ab"),
        )

    def _pipes(self) -> tuple[IO[bytes], IO[bytes]]:
        assert self.server.stdin is not None
        assert self.server.stdout is not None
        return self.server.stdin, self.server.stdout

    def alive(self) -> bool:
        if self.pid is None:
            return False
        try:
            os.kill(self.pid, 0)  # the fork server lets the kernel reap its children: a dead one is gone
        except ProcessLookupError:
            return False
        return True

    def tail(self) -> str:
        return self.log.read_text(errors="replace")[-3000:] + self.server_log.read_text(errors="replace")[-2000:]

    def start(self, seed: int) -> None:
        with self.log.with_suffix(".all.log").open("ab") as kept:  # every worker's log, for a failure's story
            kept.write(self.log.read_bytes() if self.log.exists() else b"")
        self.log.write_bytes(b"")  # this start waits for its own "ready."
        stdin, stdout = self._pipes()
        stdin.write(f"start {seed}\n".encode())
        stdin.flush()
        answer = stdout.readline()
        assert answer.strip().isdigit(), f"the fork server did not start a worker: {self.tail()}"
        self.pid = int(answer)
        self.starts += 1
        deadline = time.monotonic() + 60
        while b" ready." not in self.log.read_bytes()[-4000:]:
            assert self.alive(), self.tail()
            assert time.monotonic() < deadline, "the worker did not start"
            time.sleep(0.02)

    def where(self) -> str:
        """Where the last worker was when it died, from its log: in which task, at which hook of a cycle."""
        where = "starting"
        for line in self.log.read_text(errors="replace").splitlines():
            if hook := re.search(r"chaos: at (\w+)", line):
                where = f"placement_cycle, {hook[1]}"
            elif task := re.search(r"Task scheduler\.tasks\.(\w+)\[[-\w]+\] received", line):
                where = task[1]
            elif re.search(r"Task [.\w]+\[[-\w]+\] (succeeded|raised|retry)", line) or " ready." in line:
                where = "idle, between tasks"
        return where

    def failed_tasks(self) -> Counter[str]:
        """The tasks that raised, by error, over every worker's log (a server that restarted under them)."""
        logs = [self.log.with_suffix(".all.log"), self.log]
        text = "".join(p.read_text(errors="replace") for p in logs if p.exists())
        return Counter(re.findall(r"\] raised unexpected: (\w+)", text))

    def _end(self, signum: int, seconds: float) -> bool:
        """Send ``signum`` to the worker; whether it ended within ``seconds``."""
        if self.pid is None:
            return True
        try:
            os.kill(self.pid, signum)
        except ProcessLookupError:  # it ended by itself, and was reaped
            self.pid = None
            return True
        deadline = time.monotonic() + seconds
        while self.alive():
            if time.monotonic() > deadline:
                return False
            time.sleep(0.01)
        self.pid = None
        return True

    def kill(self) -> None:
        assert self._end(signal.SIGKILL, 10), f"worker {self.pid} outlived SIGKILL"

    def close(self) -> None:
        """Stop the last worker, gracefully if it lets itself be, then the fork server."""
        try:
            if not self._end(signal.SIGTERM, 30):
                self.kill()
        finally:
            stdin, _ = self._pipes()
            stdin.close()
            try:
                self.server.wait(30)
            except subprocess.TimeoutExpired:
                self.server.kill()
                self.server.wait()

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


@contextmanager
def tasks_to_worker(redis: Redis) -> Iterator[str]:
    """The test's own tasks (the wake-up each submission sends) go to the worker through its Redis, as the
    web server's do, instead of running eagerly in the test; yields the queue the worker must consume."""
    from portal.celery import app

    saved = app.conf.task_always_eager, app.conf.broker_url

    def reconnect() -> None:  # Celery keeps connection pools for the broker it first used: drop them
        app._pool = None  # type: ignore[attr-defined]
        app.amqp._producer_pool = None  # type: ignore[attr-defined]

    app.conf.task_always_eager = False
    app.conf.broker_url = redis.url  # type: ignore[misc]
    reconnect()
    try:
        yield str(app.conf.task_default_queue)
    finally:
        app.conf.task_always_eager, app.conf.broker_url = saved  # type: ignore[misc]
        reconnect()


def check_world(submitted: set[int]) -> None:
    """The invariants that must hold whenever the worker is dead, wherever it died."""
    jobs = dict(Job.objects.values_list("pk", "state"))
    assert set(jobs) == submitted, "a job was lost or appeared"
    numbers = dict(Job.objects.values_list("pk", "attempt"))
    last_event = dict(JobEvent.objects.order_by("job_id", "-pk").distinct("job_id").values_list("job_id", "to_state"))
    active: dict[int, list[int]] = defaultdict(list)
    for job_id, number in Attempt.objects.filter(outcome=Attempt.Outcome.ACTIVE).values_list("job_id", "number"):
        active[job_id].append(number)
    for pk, state in jobs.items():
        assert last_event.get(pk) == state, f"job {pk}: the timeline ends in {last_event.get(pk)}, the job is {state}"
        if state in PLACED:
            assert active[pk] == [numbers[pk]], f"job {pk} is {state} (attempt {numbers[pk]}) with live {active[pk]}"
        else:
            assert not active[pk], f"job {pk} is {state} and still holds live attempt(s) {active[pk]}"
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


def test_killing_the_worker_anywhere_loses_nothing_and_runs_nothing_twice(  # noqa: C901
    postgres: Postgres, redis_server: Redis, fleet: Fleet, tmp_path: Path
) -> None:
    began = time.monotonic()
    rng = random.Random(SEED)
    h100 = AcceleratorType.objects.get(organization=fleet.org)
    Quota.objects.create(
        queue=actions.queue_for(fleet.world.teams["vision"], None), flavor=h100, nominal=Decimal(QUOTA_GPUS)
    )
    for path in fleet.state_dir.glob("*.json"):  # jobs run 2 s on the simulated clusters
        path.unlink()
    for cluster in fleet.clusters.values():
        cluster.options = {**cluster.options, "job_seconds": 2}
        cluster.save(update_fields=["options"])
    tasks = ("scheduler.tasks.placement_cycle", "scheduler.tasks.follow_clusters")
    submitted: set[int] = set()
    restarts: Counter[str] = Counter()
    landed: Counter[str] = Counter()  # where the kills landed

    def submit(name: str) -> None:
        job = fleet.submit(
            accelerators=rng.choice([1, 2, 4, 8]), workers=rng.choice([1, 1, 2]), time_limit=600, name=name
        )
        submitted.add(job.pk)

    def survive(what: str, restart: Any) -> None:
        """Restart ``what`` under the running worker, which must then run a placement cycle, still alive."""
        restart()
        restarts[what] += 1
        connection.close()  # the test's own connection, if PostgreSQL it was, died with the server
        after = timezone.now()
        submit(f"after-{what}-restart")  # work for the next cycle
        deadline = time.monotonic() + 60
        while not LoopState.objects.filter(organization=fleet.org, last_cycle_at__gt=after).exists():
            if not worker.alive() and what == "Redis" and KOMBU_CLOSE_CRASH in worker.tail():
                # kombu's Redis transport, closing the lost connection, can fail on its own cleared client and
                # end the worker (celery/kombu#582); its supervisor starts another, as here: nothing is lost.
                restarts["worker, after kombu's crash on the lost connection"] += 1
                worker.start(rng.randrange(2**32))
            assert worker.alive(), f"the worker died when {what} restarted: {worker.tail()}"
            assert time.monotonic() < deadline, f"no placement cycle within 60 s of {what}'s restart: {worker.tail()}"
            if not worker.busy():
                worker.send(*tasks)
            time.sleep(0.2)

    kills = 0
    with tasks_to_worker(redis_server) as queue:
        worker = Worker(redis_server, tmp_path / "worker.log", queue, pause=0.15)
        try:
            for kill in range(KILLS):
                if Job.objects.exclude(state=Job.State.SUCCEEDED).count() < BACKLOG:
                    for _ in range(rng.randint(1, 3)):
                        submit(f"chaos-{kill}")
                worker.start(rng.randrange(2**32))
                worker.send(*tasks * 3)
                if kill == KILLS // 3:  # in the middle, while a worker goes on: PostgreSQL restarts ...
                    survive("PostgreSQL", postgres.restart)
                if kill == 2 * KILLS // 3:  # ... and Redis, forgetting everything: queued tasks, the leader lock
                    survive("Redis", redis_server.restart)
                time.sleep(rng.uniform(0.0, 1.2))
                worker.kill()
                kills += 1
                landed[worker.where()] += 1
                check_world(submitted)

            worker.start(rng.randrange(2**32))  # the last worker, left alone to finish every job
            deadline = time.monotonic() + 240
            while Job.objects.exclude(state=Job.State.SUCCEEDED).exists():
                assert time.monotonic() < deadline, list(Job.objects.exclude(state="succeeded").values("pk", "state"))
                if not worker.busy():
                    worker.send(*tasks)
                time.sleep(0.5)
            check_world(submitted)
            worker.send("scheduler.tasks.follow_clusters")  # the last cleanups
            time.sleep(2)
        finally:
            worker.close()

    assert kills == KILLS
    assert restarts["PostgreSQL"] == restarts["Redis"] == 1
    # Every job succeeded once on the clusters: at most one attempt per job ran to its end there.
    ran: Counter[str] = Counter()
    for key, record in cluster_jobs(fleet).items():
        if not record["cancelled"]:
            ran[key.split("-")[0]] += 1
    assert set(ran) == {str(pk) for pk in submitted}
    assert max(ran.values()) == 1, {k: v for k, v in ran.items() if v > 1}
    succeeded = Counter(Attempt.objects.filter(outcome=Attempt.Outcome.SUCCEEDED).values_list("job_id", flat=True))
    assert succeeded == Counter(submitted), "a job did not succeed exactly once"

    figures = {
        "kills_survived": kills,
        "seed": SEED,
        "jobs": len(submitted),
        "attempts": Attempt.objects.count(),
        "placement_cycles_applied": LoopState.objects.get(organization=fleet.org).generation,
        "worker_starts": worker.starts,
        "postgresql_restarts": restarts["PostgreSQL"],
        "redis_restarts": restarts["Redis"],
        "workers_ended_by_kombu_on_redis_restart": restarts["worker, after kombu's crash on the lost connection"],
        "seconds": round(time.monotonic() - began, 1),
        "kills_landed": dict(landed.most_common()),
        "tasks_failed": dict(worker.failed_tasks()),
    }
    print("\nchaos:", json.dumps(figures))
    if report := os.environ.get("QM_CHAOS_REPORT"):
        Path(report).write_text(json.dumps(figures, indent=2) + "\n")
