"""`manage.py bench_dataplane`: the data plane's added latency over direct calls at fixed rates, a portal
restart under load, and the sign-in page while anonymous callers wait at a cold service (prints JSON;
``benchmarks/dataplane.py`` says how each is measured)."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError, CommandParser

from benchmarks import dataplane


class Command(BaseCommand):
    help = "Measure the data plane: added latency, a portal restart under load, a cold service's callers (JSON)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--replicas", type=int, default=4, help="Replica processes of the service.")
        parser.add_argument("--rates", default="200,1000", help="Requests per second to measure at, comma-separated.")
        parser.add_argument("--seconds", type=float, default=15.0, help="Seconds measured at each rate, each way.")
        parser.add_argument("--restart-rps", type=float, default=200.0, help="The load while the portal restarts.")
        parser.add_argument("--cold-callers", type=int, default=200, help="Anonymous callers at the cold service.")
        parser.add_argument("--latency-ms", type=int, default=1, help="The model server's compute per request.")

    def handle(self, *args: Any, **options: Any) -> None:
        if settings.PRODUCTION:
            raise CommandError("bench_dataplane makes services and runs processes of its own; never in production.")
        try:
            rates = [float(r) for r in options["rates"].split(",") if r.strip()]
        except ValueError:
            raise CommandError("--rates takes numbers, e.g. 200,1000") from None
        if not rates or not all(0 < r <= 5000 for r in rates) or not 1 <= options["replicas"] <= 16:
            raise CommandError("--rates from 1 to 5000 each; --replicas from 1 to 16")
        if options["seconds"] < 1 or not 0 < options["restart_rps"] <= 2000 or not 0 <= options["cold_callers"] <= 2000:
            raise CommandError("--seconds at least 1; --restart-rps up to 2000; --cold-callers up to 2000")
        with tempfile.TemporaryDirectory(prefix="bench-dataplane-") as state_dir:
            figures = dataplane.run(
                replicas=options["replicas"],
                rates=rates,
                seconds=options["seconds"],
                restart_rps=options["restart_rps"],
                cold_callers=options["cold_callers"],
                latency_ms=options["latency_ms"],
                state_dir=Path(state_dir),
            )
        self.stdout.write(json.dumps(figures, indent=2))
