"""`manage.py demo_background`: the demo's background work (``demo/background.py``). Every ``--interval``
seconds it submits jobs that come and go, and now and then makes a node ill or drains one, until stopped;
``--once`` runs one round. ``manage.py demo`` runs it beside the web server, the worker and beat."""

from __future__ import annotations

import random
import time
from typing import Any

from django.core.management.base import BaseCommand, CommandParser
from django.utils import timezone

from demo.background import tick
from tenancy.models import Organization

DEMO_SLUG = "demo"


class Command(BaseCommand):
    help = "Submit the demo's background jobs and health events (demo only)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--interval", type=float, default=20.0, help="Seconds between rounds.")
        parser.add_argument("--seed", type=int, default=None, help="Seed of the random choices (replayable).")
        parser.add_argument("--once", action="store_true", help="Run one round and exit.")

    def handle(self, *args: Any, interval: float, seed: int | None, once: bool, **options: Any) -> None:
        rng = random.Random(seed)  # noqa: S311 - a demo's choices, not a secret
        while True:
            org = Organization.objects.filter(slug=DEMO_SLUG).first()
            if org is not None:
                self.stdout.write(f"[background {time.strftime('%H:%M:%S')}] {tick(org, timezone.now(), rng)}")
            if once:
                return
            time.sleep(interval)
