"""A service under a load step, end to end: how fast its replicas follow the load up and back down, and what
the step does to its latency (``manage.py bench_serving``; docs/service-tools.md §Measured).

The setup is the demo's in one process: a simulated cluster whose service replicas are real local processes
(``deploy/model_server.py``, started by the simulated backend, reporting their address to this process's own
HTTP server, as a replica reports to the portal), the placement loop, the cluster follower and the services'
control loop ticking every second in a thread, and the stable endpoint
``/serve/<organization>/<team>/<service>/`` answered by the data plane in a thread, beside a threaded WSGI server
on a free local port where replicas report their addresses. The load
generator (``benchmarks/loadgen.py``, open loop) sends ``POST /v1/predict`` through the endpoint with an API token at
``low`` rps, steps to ``high`` rps, then back.

Reported: the seconds from the step up to enough ready replicas for the high load (ceil(high / target),
clamped to the maximum), the seconds from the step down until the replicas are back at what the low load
needs, latency p50/p95 and errors before, during and after the step, and a timeline every ``every`` seconds
(sent, answered, p95, replicas ready/desired, the replicas that answered).

It runs in an organization of its own (``bench-serving``), kept between runs; each run makes a service named
after the time, and stops it at the end (its replicas' processes end with it).
"""

from __future__ import annotations

import math
import socket
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.servers.basehttp import ThreadedWSGIServer, WSGIRequestHandler
from django.core.wsgi import get_wsgi_application
from django.db import connections

from benchmarks import loadgen
from clusters.actions import sync
from clusters.models import Cluster
from demo.supervisor import stop_replicas
from governance.models import PriorityTier
from scheduler.models import Attempt
from scheduler.placement import dispatch, follow, loop
from serving import actions, dataplane
from serving.actions import control
from serving.dataplane import source
from serving.dataplane.server import DataPlane, InThread
from serving.models import Replica, Service
from tenancy import actions as tenancy_actions
from tenancy.models import Membership, Organization, Team
from tenancy.scoping import Role

SLUG = "bench-serving"
ROOT = Path(__file__).resolve().parent.parent
MODEL_SERVER = ROOT / "deploy" / "model_server.py"


class QuietHandler(WSGIRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        pass


class Server(ThreadedWSGIServer):
    #: socketserver listens with a backlog of 5: a burst of the load generator's connections would be refused.
    request_queue_size = 256


class Portal:
    """This process's portal over HTTP on a free local port (where replicas report, where the load goes)."""

    def __init__(self) -> None:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        self.server = Server(("127.0.0.1", port), QuietHandler, allow_reuse_address=True)
        self.server.daemon_threads = True
        self.server.set_app(get_wsgi_application())
        self.url = f"http://127.0.0.1:{port}"
        self.thread = threading.Thread(target=self.server.serve_forever, name="bench-portal", daemon=True)

    def __enter__(self) -> Portal:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()


class Loops:
    """The placement loop, the follower and the control loop, every ``interval`` seconds in a thread."""

    def __init__(self, org: Organization, cluster: Cluster, service: Service, interval: float = 1.0) -> None:
        self.org, self.cluster, self.service, self.interval = org, cluster, service, interval
        self.stopping = threading.Event()
        self.errors: list[str] = []
        self.thread = threading.Thread(target=self._run, name="bench-loops", daemon=True)

    def once(self) -> None:
        loop.run_cycle(self.org)
        waiting = Attempt.objects.filter(job__team__organization=self.org, outcome="active", backend_id="")
        for attempt_id in waiting.values_list("pk", flat=True):
            dispatch.dispatch(attempt_id)
        follow.follow(self.cluster.pk)
        control.tick_service(self.service.pk)

    def _run(self) -> None:
        try:
            while not self.stopping.is_set():
                started = time.monotonic()
                try:
                    self.once()
                except Exception as error:  # noqa: BLE001 - a bench reports what failed and keeps going
                    self.errors.append(f"{type(error).__name__}: {error}")
                self.stopping.wait(max(self.interval - (time.monotonic() - started), 0.05))
        finally:
            connections.close_all()

    def __enter__(self) -> Loops:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stopping.set()
        self.thread.join(timeout=30)


def _world(state_dir: Path, nodes: int) -> tuple[Organization, Team, Any, Cluster]:
    org, _ = Organization.objects.get_or_create(slug=SLUG, defaults={"name": "Bench serving"})
    team, _ = Team.objects.get_or_create(organization=org, slug="inference", defaults={"name": "Inference"})
    user, _ = get_user_model().objects.get_or_create(username=f"{SLUG}-lead")
    Membership.objects.get_or_create(user=user, organization=org, team=team, role=Role.LEAD)
    PriorityTier.objects.get_or_create(
        organization=org, name="serving", defaults={"value": 100, "preemptible": False, "is_default": True}
    )
    cluster = Cluster.objects.filter(organization=org, slug=SLUG).first()
    options = {
        "profile": "h100-onprem",
        "nodes": nodes,
        "busy": 0.0,
        "seed": 1,
        "state_file": str(state_dir / "c.json"),
    }
    if cluster is None:
        cluster = Cluster.objects.create(
            organization=org,
            name=SLUG,
            slug=SLUG,
            kind="simulated",
            endpoint=f"sim://{SLUG}",
            region="bench",
            options=options,
        )
    else:
        Cluster.objects.filter(pk=cluster.pk).update(options=options)
        cluster.refresh_from_db()
    result = sync.sync_cluster(cluster.pk)
    if not result.ok:
        raise RuntimeError(f"the simulated cluster did not sync: {result.error}")
    return org, team, user, cluster


def _wait(condition: Callable[[], bool], seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.5)
    return False


def _first(timeline: list[dict[str, Any]], start: int, test: Callable[[dict[str, Any]], bool]) -> int | None:
    for row in timeline[start:]:
        if test(row):
            return int(row["second"]) - start
    return None


def run(
    *,
    low: float,
    high: float,
    before: int,
    step: int,
    after: int,
    target: float,
    max_replicas: int,
    up_window: int,
    down_window: int,
    latency_ms: int,
    nodes: int,
    state_dir: Path,
    every: int = 5,
) -> dict[str, Any]:
    org, team, user, cluster = _world(state_dir, nodes)
    _, token = tenancy_actions.issue_token(user, name=f"bench {time.time():.0f}")
    name = f"bench-{int(time.time())}"
    previous_url = settings.PUBLIC_URL
    timeline_extra: dict[int, dict[str, Any]] = {}
    plane = InThread(DataPlane(source, dataplane.limits(), refresh=0.5, flush_every=0.5))
    with Portal() as portal, plane:
        settings.PUBLIC_URL = portal.url  # where replicas report their address (QM_API_URL)
        service = actions.create_service(
            user,
            team=team,
            name=name,
            command=[sys.executable, str(MODEL_SERVER), "--host", "127.0.0.1", "--port", "$PORT"],
            env={"MODEL_LATENCY_MS": str(latency_ms), "MODEL_CONCURRENCY": "8"},
            health_path="/health",
            cpu=1000,
            memory=1024,
            min_replicas=1,
            max_replicas=max_replicas,
            target=target,
            scale_up_window=up_window,
            scale_down_window=down_window,
        )
        ready = Replica.objects.filter(service=service, state=Replica.State.READY)
        loops = Loops(org, cluster, service)
        try:
            with loops:
                started = time.monotonic()
                if not _wait(lambda: ready.exists(), 120):
                    raise RuntimeError(f"no replica was ready within 120 s; the loops said: {loops.errors[-3:]}")
                first_ready = time.monotonic() - started

                def sample(second: int) -> None:
                    desired = Service.objects.filter(pk=service.pk).values_list("desired_replicas", flat=True).first()
                    timeline_extra[second] = {"ready": ready.count(), "desired": desired}

                endpoint = f"{plane.url}/serve/{team.organization.slug}/{team.slug}/{name}/v1/predict"
                auth = {"Authorization": f"Bearer {token}"}
                send = loadgen.http_sender(endpoint, body=b'{"input": [1, 2, 3]}', headers=auth)
                profile = [loadgen.Step(low, before), loadgen.Step(high, step), loadgen.Step(low, after)]
                result = loadgen.run(send, profile, on_second=sample)
        finally:
            actions.stop_service(user, service)
            loops.once()
            gone = Replica.objects.filter(service=service).exclude(state=Replica.State.GONE)

            def all_gone() -> bool:
                loops.once()
                return not gone.exists()

            _wait(all_gone, 30)
            # Whatever of the replicas' processes is still up (their stops run after the rows say gone) ends
            # with the run: they work under the installation's replica root.
            stop_replicas(settings.SIMULATED_REPLICA_ROOT)
            settings.PUBLIC_URL = previous_url
    timeline = []
    for entry in result.timeline():
        entry.update(timeline_extra.get(entry["second"], {}))
        timeline.append(entry)
    need_high = min(max(math.ceil(high / target), 1), max_replicas)
    need_low = min(max(math.ceil(low / target), 1), max_replicas)
    up = _first(timeline, before, lambda r: r.get("ready", 0) >= need_high)
    down = _first(timeline, before + step, lambda r: r.get("ready", 0) <= need_low)
    return {
        "setup": {
            "low_rps": low,
            "high_rps": high,
            "seconds": [before, step, after],
            "target_rps_per_replica": target,
            "max_replicas": max_replicas,
            "scale_up_window_s": up_window,
            "scale_down_window_s": down_window,
            "model_latency_ms": latency_ms,
            "first_replica_ready_s": round(first_ready, 1),
        },
        "replicas_needed": {"high": need_high, "low": need_low},
        "scale_up_seconds": up,
        "scale_down_seconds": down,
        "before": result.window(0, before),
        "during": result.window(before, before + step),
        "after": result.window(before + step, before + step + after),
        "loop_errors": loops.errors[-5:],
        "timeline": [
            {k: row.get(k) for k in ("second", "sent", "ok", "errors", "p95_ms", "ready", "desired", "replicas")}
            for row in timeline
            if row["second"] % every == 0
        ],
    }
