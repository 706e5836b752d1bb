"""`manage.py demo`: migrate, seed the demo, then run the web server, a worker and beat until Ctrl-C.

The three run as supervised children (``demo/supervisor.py``): one that crashes is restarted alone.
"""

from __future__ import annotations

import signal
import sys
import threading
import time
from typing import Any

from django.core.management import call_command
from django.core.management.base import BaseCommand, CommandParser

from demo.supervisor import Supervisor
from demo.tenancy import DEMO_PASSWORD, USERS


class Command(BaseCommand):
    help = "Run the whole portal on the embedded defaults with demo data, until Ctrl-C."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--bind", default="127.0.0.1:8000", help="Address of the web server.")

    def handle(self, *args: Any, bind: str, **options: Any) -> None:
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
                "--access-logfile",
                "-",
                "--graceful-timeout",
                "5",
            ],
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
        }
        stopping = threading.Event()

        def stop(signum: int, frame: Any) -> None:
            stopping.set()

        signal.signal(signal.SIGINT, stop)
        signal.signal(signal.SIGTERM, stop)
        self._announce(bind)
        # Until Ctrl-C: a child that exits is logged and started again, the others keep running.
        Supervisor(processes, log=lambda line: self.stderr.write(f"[demo {time.strftime('%H:%M:%S')}] {line}")).run(
            stopping
        )
        self.stdout.write("Stopped the web server and the workers.")

    def _announce(self, bind: str) -> None:
        lines = [
            "",
            f"Quartermaster is running at http://{bind}/  (Ctrl-C stops everything)",
            f"Sign in as any of these users, password {DEMO_PASSWORD!r}:",
            *(f"  {u.username:<6} {u.role.label}{' of ' + u.team if u.team else ''}" for u in USERS),
            f"API docs: http://{bind}/api/docs/",
            "",
        ]
        self.stdout.write("\n".join(lines))
