"""`manage.py bench_arrays`: an array's submission time, and the placement loop's cycle with a 10,000-task array
waiting against 10,000 separate jobs (prints JSON; ``benchmarks/arrays.py`` says what is measured).

It creates (and first removes) an organization named ``bench-arrays`` in the configured database: point
``DATABASE_URL`` at a database of its own, e.g. ``postgres://postgres@127.0.0.1:5432/qm_bench``.
"""

from __future__ import annotations

import json
from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError, CommandParser

from benchmarks import arrays as arrays_bench


class Command(BaseCommand):
    help = "Time array submissions (1k, 10k tasks) and loop cycles with a 10k array vs 10k jobs; prints JSON."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--nodes", type=int, default=4, help="simulated 8-GPU nodes (default 4)")
        parser.add_argument("--cycles", type=int, default=5, help="cycles measured per shape (default 5)")
        parser.add_argument("--tasks", type=int, default=10_000, help="the big array's tasks (default 10000)")

    def handle(self, *args: Any, nodes: int, cycles: int, tasks: int, **options: Any) -> None:
        if settings.PRODUCTION:
            raise CommandError("bench_arrays writes an organization of its own; never run it in production.")
        if nodes < 1 or cycles < 1 or not 1 <= tasks <= 10_000:
            raise CommandError("need --nodes >= 1, --cycles >= 1 and 1 <= --tasks <= 10000")
        self.stdout.write(json.dumps(arrays_bench.run(nodes, cycles, tasks, min(1_000, tasks)), indent=2))
