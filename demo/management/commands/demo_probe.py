"""`manage.py demo_probe`: the demo fleet's node probes. Every ``--interval`` seconds, each simulated node
that runs a job reports its GPUs' readings (``demo/utilization.py``), until stopped; ``--once`` reports
once. ``manage.py demo`` runs it beside the web server, the worker and beat."""

from __future__ import annotations

import time
from typing import Any

from django.core.management.base import BaseCommand, CommandParser
from django.utils import timezone

from demo.utilization import probe_running
from tenancy.models import Organization

DEMO_SLUG = "demo"


class Command(BaseCommand):
    help = "Report the demo fleet's GPU utilization as node probes would (demo only)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--interval", type=float, default=30.0, help="Seconds between reports.")
        parser.add_argument("--once", action="store_true", help="Report once and exit.")

    def handle(self, *args: Any, interval: float, once: bool, **options: Any) -> None:
        while True:
            org = Organization.objects.filter(slug=DEMO_SLUG).first()
            nodes = probe_running(org, timezone.now()) if org is not None else 0
            self.stdout.write(f"{nodes} busy nodes reported")
            if once:
                return
            time.sleep(interval)
