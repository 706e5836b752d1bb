"""`manage.py demo`: migrate, seed the demo, then run the web server, a worker and beat until Ctrl-C."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from typing import Any

from django.core.management import call_command
from django.core.management.base import BaseCommand, CommandParser

from portal.demo import DEMO_PASSWORD, USERS


class Command(BaseCommand):
    help = "Run the whole portal on the embedded defaults with demo data, until Ctrl-C."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--bind", default="127.0.0.1:8000", help="Address of the web server.")

    def handle(self, *args: Any, bind: str, **options: Any) -> None:
        call_command("migrate", interactive=False, verbosity=0)
        call_command("seed_demo")
        python = sys.executable
        processes = {
            "web": [python, "-m", "gunicorn", "portal.wsgi:application", "--bind", bind, "--workers", "2",
                    "--access-logfile", "-", "--graceful-timeout", "5"],
            "worker": [python, "-m", "celery", "-A", "portal", "worker", "--loglevel", "INFO", "--concurrency", "2"],
            "beat": [python, "-m", "celery", "-A", "portal", "beat", "--loglevel", "INFO"],
        }  # fmt: skip
        children = {name: subprocess.Popen(cmd) for name, cmd in processes.items()}
        self._announce(bind)
        stopping = False

        def stop(signum: int, frame: Any) -> None:
            nonlocal stopping
            stopping = True

        signal.signal(signal.SIGINT, stop)
        signal.signal(signal.SIGTERM, stop)
        exit_code = 0
        while not stopping:
            for name, child in children.items():
                if child.poll() is not None:
                    self.stderr.write(f"{name} exited with status {child.returncode}; stopping the demo.")
                    exit_code, stopping = 1, True
            time.sleep(0.2)
        self.stdout.write("Stopping the web server and the workers…")
        for child in children.values():
            if child.poll() is None:
                child.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + 15
        for child in children.values():
            try:
                child.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                child.kill()
        if exit_code:
            raise SystemExit(exit_code)

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
