"""`manage.py bench_metrics`: what one scrape of /metrics costs on a big installation (prints JSON).

It creates (and first removes) an organization named ``bench`` in the configured database: point
``DATABASE_URL`` at a database of its own.
"""

from __future__ import annotations

import json
from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError, CommandParser

from benchmarks import metrics


class Command(BaseCommand):
    help = "Time the scrape-time collectors of /metrics on the admission bench's fleet plus a job history."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--jobs", type=int, default=10_000, help="Jobs submitted and placed.")
        parser.add_argument("--finished", type=int, default=200_000, help="Finished jobs of the history.")
        parser.add_argument("--scrapes", type=int, default=20)
        parser.add_argument("--reuse", action="store_true", help="Scrape the installation an earlier run built.")

    def handle(self, *args: Any, jobs: int, finished: int, scrapes: int, reuse: bool, **options: Any) -> None:
        if settings.PRODUCTION:
            raise CommandError("bench_metrics writes an organization of its own; never run it in production.")
        if jobs < 1 or finished < 0 or scrapes < 1:
            raise CommandError("need --jobs >= 1, --finished >= 0 and --scrapes >= 1")
        self.stdout.write(json.dumps(metrics.run(jobs, finished, scrapes, reuse=reuse), indent=2))
