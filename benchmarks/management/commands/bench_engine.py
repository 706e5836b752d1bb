"""`manage.py bench_engine`: time the placement engine on a synthetic fleet and print one JSON object.

A thin wrapper over `benchmarks.engine` (plain Python, no database), with the same options as
`tests/bench/bench_engine.py`.
"""

from __future__ import annotations

import json
from typing import Any

from django.core.management.base import BaseCommand, CommandParser

from benchmarks import engine as bench


class Command(BaseCommand):
    help = "Benchmark the placement engine on a synthetic fleet and pending mix; prints JSON."
    requires_system_checks: list[str] = []  # needs neither the database nor the project's checks

    def add_arguments(self, parser: CommandParser) -> None:
        bench.add_arguments(parser)

    def handle(
        self, *args: Any, nodes: int, jobs: int | None, seed: int, cycles: int, scale: list[int] | None, **options: Any
    ) -> None:
        self.stdout.write(json.dumps(bench.bench_report(nodes, jobs, seed, cycles, scale or ()), indent=2))
