"""`manage.py bench_serving`: a service under a load step through its stable endpoint, its replicas real local
processes: time to scale up and back down, latency before, during and after the step, a replica timeline
(prints JSON; ``benchmarks/serving.py`` says how it is set up and what is measured)."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError, CommandParser

from benchmarks import serving as serving_bench


class Command(BaseCommand):
    help = "Drive a load step through a service's endpoint and report how its replicas and latency follow (JSON)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--low", type=float, default=5.0, help="Requests per second before and after the step.")
        parser.add_argument("--high", type=float, default=60.0, help="Requests per second during the step.")
        parser.add_argument("--before", type=int, default=30, help="Seconds at the low load before the step.")
        parser.add_argument("--step", type=int, default=90, help="Seconds at the high load.")
        parser.add_argument("--after", type=int, default=120, help="Seconds at the low load after the step.")
        parser.add_argument("--target", type=float, default=12.0, help="Requests per second per replica.")
        parser.add_argument("--max-replicas", type=int, default=6)
        parser.add_argument("--up-window", type=int, default=10, help="The scale-up window (seconds).")
        parser.add_argument("--down-window", type=int, default=45, help="The scale-down window (seconds).")
        parser.add_argument("--latency-ms", type=int, default=40, help="The model server's compute per request.")
        parser.add_argument("--nodes", type=int, default=4, help="Nodes of the simulated cluster.")
        parser.add_argument("--every", type=int, default=5, help="Seconds between the timeline's rows.")

    def handle(self, *args: Any, **options: Any) -> None:
        if settings.PRODUCTION:
            raise CommandError(
                "bench_serving makes an organization and runs processes of its own; never in production."
            )
        low, high = options["low"], options["high"]
        if not (0 < low < high <= 1000 and options["target"] > 0 and 1 <= options["max_replicas"] <= 50):
            raise CommandError("need 0 < --low < --high <= 1000, --target > 0, 1 <= --max-replicas <= 50")
        if min(options["before"], options["step"], options["after"], options["every"]) < 1:
            raise CommandError("--before, --step, --after and --every are whole seconds, at least 1")
        with tempfile.TemporaryDirectory(prefix="bench-serving-") as state_dir:
            figures = serving_bench.run(
                low=low,
                high=high,
                before=options["before"],
                step=options["step"],
                after=options["after"],
                target=options["target"],
                max_replicas=options["max_replicas"],
                up_window=options["up_window"],
                down_window=options["down_window"],
                latency_ms=options["latency_ms"],
                nodes=options["nodes"],
                state_dir=Path(state_dir),
                every=options["every"],
            )
        timeline = figures.pop("timeline")
        text = json.dumps(figures, indent=2, default=str)
        rows = ",\n    ".join(json.dumps(row, default=str) for row in timeline)
        self.stdout.write(text[:-2] + ',\n  "timeline": [\n    ' + rows + "\n  ]\n}")
