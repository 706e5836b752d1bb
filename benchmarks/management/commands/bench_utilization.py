"""`manage.py bench_utilization --nodes 1000`: probe reports taken in per second, and a job's utilization
series read, at fleet scale (prints JSON; ``benchmarks/utilization.py`` says what is measured).

Runs on the configured database (PostgreSQL for figures that mean something) in a throwaway organization,
removed afterwards.
"""

from __future__ import annotations

import json
from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError, CommandParser

from benchmarks import utilization as utilization_bench


class Command(BaseCommand):
    help = "Time probe reports with GPU activity through the endpoint, and a gang job's series read (JSON)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--nodes", type=int, default=1000)
        parser.add_argument("--gpus", type=int, default=8, help="GPUs per node.")
        parser.add_argument("--rounds", type=int, default=3, help="Reports per node.")
        parser.add_argument("--interval", type=int, default=30, help="Seconds between a node's reports.")
        parser.add_argument("--gang", type=int, default=64, help="Nodes of the job whose series is read.")
        parser.add_argument("--history-hours", type=int, default=24, help="Hours of samples the job has.")

    def handle(self, *args: Any, **options: Any) -> None:
        if settings.PRODUCTION:
            raise CommandError("bench_utilization writes an organization of its own; never run it in production.")
        nodes, gpus, rounds, interval = options["nodes"], options["gpus"], options["rounds"], options["interval"]
        gang, hours = options["gang"], options["history_hours"]
        if not (1 <= gang <= nodes and 1 <= gpus <= 64 and rounds >= 1 and interval >= 1 and hours >= 1):
            raise CommandError(
                "need 1 <= --gang <= --nodes, 1 <= --gpus <= 64, --rounds, --interval, --history-hours >= 1"
            )
        if rounds * interval > 3000:
            raise CommandError("--rounds x --interval must stay under an hour: the endpoint refuses older reports")
        self.stdout.write(json.dumps(utilization_bench.run(nodes, gpus, rounds, interval, gang, hours), indent=2))
