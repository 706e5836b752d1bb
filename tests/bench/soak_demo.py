"""Soak test of `manage.py demo` (outside the test run), from the repository root:

    .venv/bin/python tests/bench/soak_demo.py --minutes 150 --out /work/soak/demo-1

Starts the demo as a new user would (embedded defaults: no DATABASE_URL, REDIS_URL or CELERY_BROKER_URL) on
a fresh ``QM_VAR_DIR`` (``<out>/var``) and a free port, waits for it to answer, then for the given time:

- every ``--poll`` seconds GETs ``/healthz/`` and the sign-in page; a failed answer (or none) starts an
  outage that the next good answer ends, and the outages add up to the downtime;
- every ``--submit-every`` seconds submits a small CPU job as alice through the API (signed in once through
  the token endpoint) and follows the jobs it submitted: each must leave ``pending`` (the worker ran the
  placement loop that the submission or beat woke) within ``--placement-timeout`` seconds, and is cancelled
  once placed, so the demo fleet never fills up;
- reads the demo's output (kept in ``<out>/demo.log``): children's exits and restarts (the supervisor's
  ``[demo …] worker (pid N) exited with …`` lines), and any worker's "Unrecoverable error" or Traceback.

Every minute and at the end it writes a JSON summary to ``<out>/summary.json`` (and prints it at the end):
requests, failures, downtime, placements and their latency, restarts per child, the broker folder's backlog.
Then it stops the demo with SIGINT and records how long that took. Exit status 0 when the web server never
failed, every job was placed in time and no child exited; 1 otherwise. ``--kill-worker-every`` SIGKILLs the
worker now and then, to watch the supervision at work (off by default: a soak measures a demo left alone).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import socket
import statistics
import subprocess
import sys
import time
from collections import Counter
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import requests

ROOT = Path(__file__).resolve().parents[2]
EXIT = re.compile(r"\[demo [\d:]+\] (\w+) \(pid (\d+)\) exited with (.+?) after")
STARTED = re.compile(r"\[demo [\d:]+\] (\w+) started \(pid (\d+)\)")
JOB = {
    "team": "vision",
    "project": "detection",
    "name": "soak",
    "time_limit": "10m",
    "image": "busybox",
    "command": ["true"],
    "accelerators": 0,
    "cpu": 1,
    "memory_gib": 1,
}


def now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass
class Soak:
    base: str
    out: Path
    placement_timeout: float
    started_at: str = field(default_factory=now)
    calls: Counter[str] = field(default_factory=Counter)
    failures: Counter[str] = field(default_factory=Counter)
    last_failures: list[str] = field(default_factory=list)
    down_since: float | None = None
    downtime: float = 0.0
    longest_outage: float = 0.0
    submitted: dict[int, float] = field(default_factory=dict)  # job id -> when, until placed
    placed: list[float] = field(default_factory=list)  # seconds from submission to leaving pending
    late: list[int] = field(default_factory=list)
    states: Counter[str] = field(default_factory=Counter)
    submit_failures: int = 0
    exits: list[str] = field(default_factory=list)
    restarts: Counter[str] = field(default_factory=Counter)
    pids: dict[str, int] = field(default_factory=dict)
    worker_errors: list[str] = field(default_factory=list)
    token: str | None = None
    log_offset: int = 0

    # --- the web server --------------------------------------------------------------------------------
    def call(self, what: str, method: str, path: str, **kwargs: Any) -> requests.Response | None:
        """One request, counted; a 5xx or no answer is a failure (and starts an outage)."""
        self.calls[what] += 1
        try:
            response = requests.request(method, self.base + path, timeout=10, **kwargs)
        except requests.RequestException as exc:
            self.fail(what, type(exc).__name__)
            return None
        if response.status_code >= 500:
            self.fail(what, f"HTTP {response.status_code}")
            return None
        return response

    def fail(self, what: str, why: str) -> None:
        self.failures[what] += 1
        self.last_failures = [*self.last_failures[-9:], f"{now()} {what}: {why}"]
        if self.down_since is None:
            self.down_since = time.monotonic()

    def up(self) -> None:
        if self.down_since is not None:
            outage = time.monotonic() - self.down_since
            self.downtime += outage
            self.longest_outage = max(self.longest_outage, outage)
            self.down_since = None

    def poll(self) -> None:
        health = self.call("healthz", "GET", "/healthz/")
        login = self.call("login", "GET", "/login/")
        if health is not None and health.status_code == 200 and login is not None and login.status_code == 200:
            self.up()
        elif health is not None and health.status_code != 200:
            self.fail("healthz", f"HTTP {health.status_code}")

    # --- jobs ------------------------------------------------------------------------------------------
    def headers(self) -> dict[str, str]:
        if self.token is None:
            body = {"username": "alice", "password": "demo", "name": f"soak {now()}"}
            response = self.call("token", "POST", "/api/v1/auth/token/", json=body)
            if response is not None and response.status_code == 201:
                self.token = response.json()["token"]
        return {"Authorization": f"Bearer {self.token}"} if self.token else {}

    def submit(self) -> None:
        response = self.call("submit", "POST", "/api/v1/jobs/", json=JOB, headers=self.headers())
        if response is None or response.status_code != 201:
            self.submit_failures += 1
            if response is not None and response.status_code == 401:
                self.token = None
            return
        self.submitted[response.json()["id"]] = time.monotonic()

    def follow(self) -> None:
        for job, submitted in list(self.submitted.items()):
            response = self.call("job", "GET", f"/api/v1/jobs/{job}/", headers=self.headers())
            if response is None or response.status_code != 200:
                continue
            state = response.json()["state"]
            if state == "pending":
                if time.monotonic() - submitted > self.placement_timeout and job not in self.late:
                    self.late.append(job)
                continue
            self.placed.append(time.monotonic() - submitted)
            self.states[state] += 1
            del self.submitted[job]
            self.call("cancel", "POST", f"/api/v1/jobs/{job}/cancel/", json={"reason": "soak"}, headers=self.headers())

    # --- the demo's output -----------------------------------------------------------------------------
    def read_log(self, log: Path) -> None:
        with log.open("rb") as file:
            file.seek(self.log_offset)
            chunk = file.read()
        complete = chunk.rfind(b"\n") + 1
        self.log_offset += complete
        for line in chunk[:complete].decode(errors="replace").splitlines():
            if match := EXIT.search(line):
                self.restarts[match[1]] += 1
                self.exits = [*self.exits[-19:], line.strip()]
            elif match := STARTED.search(line):
                self.pids[match[1]] = int(match[2])
            if "Unrecoverable error" in line or line.startswith("Traceback"):
                self.worker_errors = [*self.worker_errors[-9:], line.strip()[:300]]

    def summary(self, began: float, startup: float, var: Path) -> dict[str, Any]:
        pending_for = [time.monotonic() - t for t in self.submitted.values()]
        broker = var / "broker" / "queue"
        names = os.listdir(broker) if broker.exists() else []
        return {
            "started_at": self.started_at,
            "updated_at": now(),
            "startup_seconds": round(startup, 1),
            "soak_seconds": round(time.monotonic() - began),
            "requests": sum(self.calls.values()),
            "requests_by_kind": dict(self.calls),
            "failures": sum(self.failures.values()),
            "failures_by_kind": dict(self.failures),
            "last_failures": self.last_failures,
            "downtime_seconds": round(
                self.downtime + (time.monotonic() - self.down_since if self.down_since else 0), 1
            ),
            "longest_outage_seconds": round(self.longest_outage, 1),
            "jobs_submitted": len(self.placed) + len(self.submitted),
            "jobs_placed": len(self.placed),
            "placed_states": dict(self.states),
            "placement_seconds_p50": round(statistics.median(self.placed), 1) if self.placed else None,
            "placement_seconds_max": round(max(self.placed), 1) if self.placed else None,
            "jobs_still_pending": len(self.submitted),
            "oldest_pending_seconds": round(max(pending_for), 1) if pending_for else None,
            "jobs_late": len(self.late),
            "submit_failures": self.submit_failures,
            "child_restarts": sum(self.restarts.values()),
            "child_restarts_by_name": dict(self.restarts),
            "child_exits": self.exits,
            "worker_errors": self.worker_errors,
            "broker_files": len(names),
            "broker_unreadable": sum(name.endswith(".unreadable") for name in names),
        }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--minutes", type=float, default=10)
    parser.add_argument("--out", type=Path, required=True, help="folder for demo.log, summary.json and var/")
    parser.add_argument("--poll", type=float, default=5, help="seconds between polls of the web server")
    parser.add_argument("--submit-every", type=float, default=60, help="seconds between submissions")
    parser.add_argument("--placement-timeout", type=float, default=90, help="a job pending longer is late")
    parser.add_argument("--kill-worker-every", type=float, default=0, help="SIGKILL the worker this often (s)")
    parser.add_argument("--history-days", help="QM_DEMO_HISTORY_DAYS for the seed (the demo's own by default)")
    args = parser.parse_args()

    out: Path = args.out
    var = out / "var"
    var.mkdir(parents=True, exist_ok=False)  # a fresh demo each time
    port = free_port()
    env = {k: v for k, v in os.environ.items() if k not in {"DATABASE_URL", "REDIS_URL", "CELERY_BROKER_URL"}}
    env.update(QM_VAR_DIR=str(var), DJANGO_SETTINGS_MODULE="portal.settings", PYTHONUNBUFFERED="1")
    if args.history_days is not None:
        env["QM_DEMO_HISTORY_DAYS"] = args.history_days
    log = out / "demo.log"
    demo = subprocess.Popen(
        [sys.executable, "manage.py", "demo", "--bind", f"127.0.0.1:{port}"],
        cwd=ROOT,
        env=env,
        stdout=log.open("wb"),
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    soak = Soak(f"http://127.0.0.1:{port}", out, args.placement_timeout)
    launched = time.monotonic()
    while True:
        if demo.poll() is not None:
            print(log.read_text()[-3000:], file=sys.stderr)
            raise SystemExit(f"the demo exited with status {demo.returncode} before answering")
        try:
            if requests.get(f"{soak.base}/healthz/", timeout=5).status_code == 200:
                break
        except requests.RequestException:
            pass
        time.sleep(1)
    began = time.monotonic()
    startup = began - launched
    end = began + args.minutes * 60
    next_submit, next_write = began, began + 60
    next_kill = began + args.kill_worker_every if args.kill_worker_every else float("inf")
    summary_file = out / "summary.json"
    try:
        while time.monotonic() < end and demo.poll() is None:
            soak.poll()
            if time.monotonic() >= next_submit:
                soak.submit()
                next_submit += args.submit_every
            soak.follow()
            soak.read_log(log)
            if time.monotonic() >= next_kill and "worker" in soak.pids:
                os.kill(soak.pids.pop("worker"), signal.SIGKILL)
                next_kill += args.kill_worker_every
            if time.monotonic() >= next_write:
                summary_file.write_text(json.dumps(soak.summary(began, startup, var), indent=1))
                next_write += 60
            time.sleep(args.poll)
    finally:
        alive = demo.poll() is None
        stopping = time.monotonic()
        demo.send_signal(signal.SIGINT)
        try:
            demo.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(demo.pid, signal.SIGKILL)
            demo.wait()
        stop_seconds = time.monotonic() - stopping
        soak.read_log(log)
    result = soak.summary(began, startup, var)
    result.update(
        demo_alive_at_end=alive,
        demo_exit_status=demo.returncode,
        stop_seconds=round(stop_seconds, 1),
        kill_worker_every=args.kill_worker_every,
    )
    summary_file.write_text(json.dumps(result, indent=1))
    print(json.dumps(result, indent=1))
    killed = args.kill_worker_every > 0
    ok = (
        alive
        and result["failures"] == 0
        and result["jobs_late"] == 0
        and not result["worker_errors"]
        and (killed or result["child_restarts"] == 0)
    )
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
