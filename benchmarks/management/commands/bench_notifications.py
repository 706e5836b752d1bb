"""`manage.py bench_notifications`: what a round of the notifications' outbox costs (prints JSON).

It creates (and first removes) an organization named ``bench`` in the configured database: point
``DATABASE_URL`` at a database of its own.
"""

from __future__ import annotations

import json
from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError, CommandParser

from benchmarks import notifications


class Command(BaseCommand):
    help = "Time the rounds that turn job events into notifications (benchmarks/notifications.py)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--jobs", type=int, default=5000, help="Jobs, each with four job events.")
        parser.add_argument("--users", type=int, default=200, help="Researchers who submitted them.")

    def handle(self, *args: Any, jobs: int, users: int, **options: Any) -> None:
        if settings.PRODUCTION:
            raise CommandError("bench_notifications writes an organization of its own; never run it in production.")
        if jobs < 1 or users < 1:
            raise CommandError("need --jobs >= 1 and --users >= 1")
        self.stdout.write(json.dumps(notifications.run(jobs, users), indent=2))
