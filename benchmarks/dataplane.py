"""The data plane measured as its users meet it (``manage.py bench_dataplane``; docs/services.md §The data plane):

1. **Added latency.** A service of ``replicas`` real replica processes (``deploy/model_server.py``, started by
   the simulated cluster, isolated as always) is called at a fixed rate, open loop, first straight at the
   replicas (in turn), then through the data plane (``manage.py serve_dataplane``, a process of its own, with an
   API token, as a user calls it), at each rate of ``rates``. Reported: p50, p90 and p99 of each, errors, and the
   data plane's added p50 and p99 (the difference of the two distributions' percentiles).
2. **A portal restart.** The portal's web server (gunicorn, as the demo runs it) is stopped and started again
   while ``restart_rps`` requests a second go through the data plane: how many failed (none should), and how
   long the portal did not answer.
3. **Anonymous callers at a cold service.** ``cold_callers`` requests without a token wait at a public service
   with no replica (nothing starts one here); meanwhile ``GET /login/`` is timed on the portal, against the same
   timings with nobody waiting. Reported: how many waited and how many were told at once to come back (the
   data plane's bounds), and the sign-in page's p50/p99 both ways.

Everything runs on this machine, against the configured database and cache, in the organization of
``bench_serving`` (``bench-serving``); each run makes its two services and stops them at the end.
"""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import aiohttp
import requests
from django.conf import settings

from benchmarks.serving import MODEL_SERVER, ROOT, Loops, Portal, _wait, _world
from demo.supervisor import stop_replicas
from serving import actions
from serving.models import Replica
from tenancy import actions as tenancy_actions

BODY = b'{"input": [1, 2, 3]}'


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _percentiles(samples: list[float]) -> dict[str, float | None]:
    if not samples:
        return {"p50_ms": None, "p90_ms": None, "p99_ms": None}
    cuts = statistics.quantiles(samples, n=100, method="inclusive")
    return {"p50_ms": round(cuts[49], 2), "p90_ms": round(cuts[89], 2), "p99_ms": round(cuts[98], 2)}


async def _paced(
    urls: list[str], rps: float, seconds: float, headers: dict[str, str] | None = None, warmup: float = 2.0
) -> dict[str, Any]:
    """Open loop: one POST every 1/rps seconds (a slow answer never delays the next), ``urls`` in turn; the
    latency of each, from sending to the last byte, after ``warmup`` seconds."""
    connector = aiohttp.TCPConnector(limit=512)
    latencies: list[float] = []
    errors: dict[str, int] = {}
    async with aiohttp.ClientSession(connector=connector, headers=headers or {}) as session:

        async def one(url: str, measured: bool) -> None:
            started = time.perf_counter()
            try:
                async with session.post(url, data=BODY, headers={"Content-Type": "application/json"}) as answer:
                    await answer.read()
                    status = answer.status
            except aiohttp.ClientError as error:
                errors[type(error).__name__] = errors.get(type(error).__name__, 0) + 1
                return
            if not measured:
                return
            if status != 200:
                errors[str(status)] = errors.get(str(status), 0) + 1
            else:
                latencies.append((time.perf_counter() - started) * 1000)

        loop = asyncio.get_running_loop()
        tasks = []
        total = int(rps * (seconds + warmup))
        begin = loop.time()
        for n in range(total):
            delay = begin + n / rps - loop.time()
            if delay > 0:
                await asyncio.sleep(delay)
            tasks.append(asyncio.create_task(one(urls[n % len(urls)], n >= rps * warmup)))
        await asyncio.gather(*tasks)
    return {"requests": int(rps * seconds), "answered": len(latencies), "errors": errors, **_percentiles(latencies)}


class Process:
    """A child process (the data plane, the portal's web server) with this process's settings."""

    def __init__(self, argv: list[str], ready_url: str) -> None:
        self.argv, self.ready_url = argv, ready_url
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> Process:
        self.process = subprocess.Popen(  # noqa: S603 - our own programs
            self.argv, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True
        )
        if not _wait(lambda: _answers(self.ready_url), 60):
            raise RuntimeError(f"{self.argv[2:4]} did not answer within 60 s")
        return self

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait()


def _answers(url: str) -> bool:
    try:
        return requests.get(url, timeout=2).status_code == 200
    except requests.RequestException:
        return False


def _portal(port: int) -> Process:
    argv = [sys.executable, "-m", "gunicorn", "portal.wsgi:application", "--bind", f"127.0.0.1:{port}"]
    argv += ["--workers", "2", "--worker-class", "gthread", "--threads", "16", "--graceful-timeout", "5"]
    return Process(argv, f"http://127.0.0.1:{port}/healthz/")


def _data_plane(port: int) -> Process:
    argv = [sys.executable, str(ROOT / "manage.py"), "serve_dataplane", "--bind", f"127.0.0.1:{port}"]
    return Process(argv, f"http://127.0.0.1:{port}/healthz")


def _timed_logins(url: str, count: int) -> dict[str, float | None]:
    timings = []
    with requests.Session() as session:
        for _ in range(count):
            started = time.perf_counter()
            session.get(url, timeout=30).raise_for_status()
            timings.append((time.perf_counter() - started) * 1000)
    return _percentiles(timings)


def _restart(plane_url: str, portal: Process, rps: float, seconds: float, headers: dict[str, str]) -> dict[str, Any]:
    """Requests through the data plane while the portal stops (at a quarter of the time) and starts again."""
    down: list[float] = []

    async def around() -> dict[str, Any]:
        load = asyncio.create_task(_paced([plane_url], rps, seconds, headers, warmup=0.0))
        await asyncio.sleep(seconds / 4)
        stopped = time.monotonic()
        await asyncio.to_thread(portal.stop)
        await asyncio.sleep(seconds / 8)
        await asyncio.to_thread(portal.start)
        down.append(time.monotonic() - stopped)
        return await load

    figures = asyncio.run(around())
    return {"rps": rps, "seconds": seconds, **figures, "portal_away_s": round(down[0], 1)}


def run(
    *,
    replicas: int,
    rates: list[float],
    seconds: float,
    restart_rps: float,
    cold_callers: int,
    latency_ms: int,
    state_dir: Path,
) -> dict[str, Any]:
    org, team, user, cluster = _world(state_dir, max(replicas, 2))
    _, token = tenancy_actions.issue_token(user, name=f"bench dataplane {time.time():.0f}")
    auth = {"Authorization": f"Bearer {token}"}
    stamp = int(time.time())
    figures: dict[str, Any] = {"replicas": replicas, "model_latency_ms": latency_ms, "latency": {}}
    previous_url = settings.PUBLIC_URL
    plane_port, portal_port = _free_port(), _free_port()
    plane, portal = _data_plane(plane_port), _portal(portal_port)
    with Portal() as reports:
        settings.PUBLIC_URL = reports.url  # where the replicas report their addresses
        service = actions.create_service(
            user,
            team=team,
            name=f"plane-{stamp}",
            command=[sys.executable, str(MODEL_SERVER), "--host", "127.0.0.1", "--port", "$PORT"],
            env={"MODEL_LATENCY_MS": str(latency_ms), "MODEL_CONCURRENCY": "64"},
            health_path="/health",
            cpu=1000,
            memory=1024,
            min_replicas=replicas,
            max_replicas=replicas,
        )
        cold = actions.create_service(
            user,
            team=team,
            name=f"cold-{stamp}",
            command=[sys.executable, str(MODEL_SERVER), "--host", "127.0.0.1", "--port", "$PORT"],
            health_path="/health",
            min_replicas=0,
            max_replicas=1,
            scale_to_zero_after=60,
            public=True,
        )
        ready = Replica.objects.filter(service=service, state=Replica.State.READY)
        loops = Loops(org, cluster, service)
        try:
            with loops:
                if not _wait(lambda: ready.count() >= replicas, 180):
                    raise RuntimeError(f"{replicas} replicas were not ready in 180 s: {loops.errors[-3:]}")
            direct = list(ready.values_list("url", flat=True))
            path = f"/serve/{org.slug}/{team.slug}/{service.name}/v1/predict"
            plane.start()
            through = f"http://127.0.0.1:{plane_port}{path}"
            _wait(lambda: requests.post(through, data=BODY, headers=auth, timeout=5).status_code == 200, 30)
            for rps in rates:
                straight = asyncio.run(_paced([u.rstrip("/") + "/v1/predict" for u in direct], rps, seconds))
                planed = asyncio.run(_paced([through], rps, seconds, auth))
                figures["latency"][str(int(rps))] = {
                    "direct": straight,
                    "data_plane": planed,
                    "added_p50_ms": _added(planed, straight, "p50_ms"),
                    "added_p99_ms": _added(planed, straight, "p99_ms"),
                }
            portal.start()
            figures["portal_restart"] = _restart(through, portal, restart_rps, 20.0, auth)
            login = f"http://127.0.0.1:{portal_port}/login/"
            quiet = _timed_logins(login, 100)
            figures["cold_service"] = asyncio.run(
                _cold(f"http://127.0.0.1:{plane_port}/serve/{org.slug}/{team.slug}/{cold.name}/", cold_callers, login)
            )
            figures["cold_service"]["login_alone"] = quiet
        finally:
            plane.stop()
            portal.stop()
            for made in (service, cold):
                actions.stop_service(user, made)
            loops.once()
            stop_replicas(settings.SIMULATED_REPLICA_ROOT)
            settings.PUBLIC_URL = previous_url
    return figures


def _added(planed: dict[str, Any], straight: dict[str, Any], key: str) -> float | None:
    if planed[key] is None or straight[key] is None:
        return None
    return round(float(planed[key]) - float(straight[key]), 2)


async def _cold(url: str, callers: int, login: str) -> dict[str, Any]:
    """``callers`` anonymous requests at a cold service, and the sign-in page timed while they wait."""
    outcomes: dict[str, int] = {}
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as session:

        async def call() -> None:
            try:
                async with session.get(url, timeout=aiohttp.ClientTimeout(total=300)) as answer:
                    outcomes[str(answer.status)] = outcomes.get(str(answer.status), 0) + 1
            except (aiohttp.ClientError, TimeoutError) as error:
                outcomes[type(error).__name__] = outcomes.get(type(error).__name__, 0) + 1

        waiting = [asyncio.create_task(call()) for _ in range(callers)]
        await asyncio.sleep(2.0)  # every caller has arrived: some wait, the rest were answered
        told_at_once = sum(outcomes.values())
        timed = await asyncio.to_thread(_timed_logins, login, 100)
        for task in waiting:
            task.cancel()
        await asyncio.gather(*waiting, return_exceptions=True)
    return {
        "callers": callers,
        "answered_at_once": told_at_once,
        "answers_at_once": outcomes,
        "waiting": callers - told_at_once,
        "login_while_waiting": timed,
    }
