"""`manage.py bench_admission`: how fast the placement loop admits jobs on the database (prints JSON).

It creates (and first removes) an organization named ``bench`` in the configured database: point
``DATABASE_URL`` at a database of its own, e.g. ``postgres://postgres@127.0.0.1:5432/qm_bench``.
"""

from __future__ import annotations

import json
from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError, CommandParser

from benchmarks import admission as admission_bench


class Command(BaseCommand):
    help = "Submit jobs of three sizes to team queues in cohorts and time the loop admitting them; prints JSON."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--queues", type=int, default=30)
        parser.add_argument("--cohorts", type=int, default=5)
        parser.add_argument("--jobs", type=int, default=15_000)
        parser.add_argument("--seed", type=int, default=1)

    def handle(self, *args: Any, queues: int, cohorts: int, jobs: int, seed: int, **options: Any) -> None:
        if settings.PRODUCTION:
            raise CommandError("bench_admission writes an organization of its own; never run it in production.")
        if not 1 <= cohorts <= queues or jobs < 1:
            raise CommandError("need 1 <= --cohorts <= --queues and --jobs >= 1")
        self.stdout.write(json.dumps(admission_bench.run(queues, cohorts, jobs, seed), indent=2))
