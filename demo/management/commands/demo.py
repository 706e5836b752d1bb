"""`manage.py demo`: migrate, seed the demo, then run the web server, a worker, beat, the demo fleet's
node probes (``demo_probe``), its background work (``demo_background``), and its edge devices with the load on
its service (``demo_devices``) until Ctrl-C.

They run as supervised children (``demo/supervisor.py``): one that crashes is restarted alone. They write
their Prometheus metrics into ``var/metrics`` (or ``PROMETHEUS_MULTIPROC_DIR``), emptied first; the web server's
``/metrics`` adds them up.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
from pathlib import Path
from typing import Any

from django.conf import settings
from django.core.management import call_command
from django.core.management.base import BaseCommand, CommandError, CommandParser

from demo.supervisor import Supervisor, metrics_directory, public_url, stop_replicas
from demo.tenancy import DEMO_PASSWORD, USERS


class Command(BaseCommand):
    help = "Run the whole portal on the embedded defaults with demo data, until Ctrl-C."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--bind", default="127.0.0.1:8000", help="Address of the web server.")
        parser.add_argument(
            "--serve-bind", default="", help="Address of the data plane (services' endpoints); default: port + 1."
        )

    def handle(self, *args: Any, bind: str, serve_bind: str, **options: Any) -> None:
        host, _, port = bind.rpartition(":")
        if not port.isdigit():
            raise CommandError(f"--bind takes HOST:PORT, not {bind!r}")
        serve_bind = serve_bind or f"{host}:{int(port) + 1}"
        call_command("migrate", interactive=False, verbosity=0)
        call_command("seed_demo")
        python = sys.executable
        processes = {
            "web": [
                python,
                "-m",
                "gunicorn",
                "portal.wsgi:application",
                "--bind",
                bind,
                "--workers",
                "2",
                # Threads: a device's held poll and a request a service's endpoint relays wait on others.
                "--worker-class",
                "gthread",
                "--threads",
                "16",
                "--access-logfile",
                "-",
                "--graceful-timeout",
                "5",
            ],
            # Inference traffic to the demo's service: the data plane, never the web server.
            "dataplane": [python, str(settings.BASE_DIR / "manage.py"), "serve_dataplane", "--bind", serve_bind],
            # One worker: gossip, mingle and heartbeats are for finding others, and each would bind a queue
            # of its own that outlives a restarted worker.
            "worker": [
                python,
                "-m",
                "celery",
                "-A",
                "portal",
                "worker",
                "--loglevel",
                "INFO",
                "--concurrency",
                "2",
                "--without-gossip",
                "--without-mingle",
                "--without-heartbeat",
            ],
            "beat": [python, "-m", "celery", "-A", "portal", "beat", "--loglevel", "INFO"],
            # What node probes would report of the simulated GPUs, so job pages plot utilization.
            "probe": [python, str(settings.BASE_DIR / "manage.py"), "demo_probe"],
            # Jobs that come and go, and now and then an ill or drained node (``demo/background.py``).
            "background": [python, str(settings.BASE_DIR / "manage.py"), "demo_background"],
            # Device agents polling this web server, and requests to the demo's service (``demo/devices.py``).
            "devices": [python, str(settings.BASE_DIR / "manage.py"), "demo_devices"],
        }
        stopping = threading.Event()

        def stop(signum: int, frame: Any) -> None:
            stopping.set()

        signal.signal(signal.SIGINT, stop)
        signal.signal(signal.SIGTERM, stop)
        self._announce(bind, serve_bind)
        metrics = Path(os.environ.get("PROMETHEUS_MULTIPROC_DIR") or settings.VAR_DIR / "metrics")
        env = metrics_directory(metrics)
        # Where service replicas report their address and device agents poll: this web server, unless told.
        env.setdefault("QM_PUBLIC_URL", public_url(bind))
        env.setdefault("SERVE_PUBLIC_URL", public_url(serve_bind))

        def log(line: str) -> None:
            self.stderr.write(f"[demo {time.strftime('%H:%M:%S')}] {line}")

        # Until Ctrl-C: a child that exits is logged and started again, the others keep running.
        try:
            Supervisor(processes, log=log, env=env).run(stopping)
        finally:
            # The simulated clusters' service replicas run in sessions of their own: they end with the demo.
            stopped = stop_replicas(settings.SIMULATED_REPLICA_ROOT)
            if stopped:
                log(f"service replicas stopped: {stopped}")
        self.stdout.write("Stopped the web server, the workers, the device agents and the service replicas.")

    def _announce(self, bind: str, serve_bind: str) -> None:
        lines = [
            "",
            f"Quartermaster is running at http://{bind}/  (Ctrl-C stops everything)",
            f"Sign in as any of these users, password {DEMO_PASSWORD!r}:",
            *(f"  {u.username:<6} {u.role.label}{' of ' + u.team if u.team else ''}" for u in USERS),
            f"API docs: http://{bind}/api/docs/   Metrics: http://{bind}/metrics   SLOs (as adam): http://{bind}/slo/",
            f"Services answer at the data plane: http://{serve_bind}/serve/<organization>/<team>/<service>/",
            "",
        ]
        self.stdout.write("\n".join(lines))
