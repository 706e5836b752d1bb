"""`manage.py bench_rollout`: a phased rollout to real device agents on loopback, timed (prints JSON).

It starts the portal on a free loopback port (Django's live-server thread, in this process), ``--devices``
agent processes (``deploy/edge_agent.py``) and runs ``benchmarks/rollout.py``'s scenario: enrolment, a good
version through a canary and waves to every device (some agents killed mid-download, some offline for a
phase), then a version that fails its health check, rolled back. It creates an organization of its own
(``edge-bench-<time>``) in the configured database: point ``DATABASE_URL`` at a database of its own.
"""

from __future__ import annotations

import json
import tempfile
import time
from pathlib import Path
from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.test import override_settings
from django.test.testcases import LiveServerThread, _StaticFilesHandler

from benchmarks import rollout


class Command(BaseCommand):
    help = "Time a phased rollout to real device agents on loopback, and a bad version's rollback."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--devices", type=int, default=50, help="Agent processes (10 to 200).")
        parser.add_argument("--size", type=int, default=4 << 20, help="Bytes of each model version.")
        parser.add_argument("--rate", type=int, default=2 << 20, help="Each agent's download limit, bytes/s.")

    def handle(self, *args: Any, devices: int, size: int, rate: int, **options: Any) -> None:
        if settings.PRODUCTION:
            raise CommandError("bench_rollout writes an organization of its own; never run it in production.")
        if not 10 <= devices <= 200 or size < 1 << 16 or rate < 1 << 14:
            raise CommandError("need 10 <= --devices <= 200, --size >= 65536 and --rate >= 16384")
        with tempfile.TemporaryDirectory(prefix="bench-rollout-") as scratch:
            root = Path(scratch)
            # Offline after 6 s unseen (EDGE_POLL_SECONDS 2), so a stopped agent drops out within a phase.
            with override_settings(ARTIFACT_ROOT=root / "artifacts", EDGE_POLL_SECONDS=2):
                server = LiveServerThread("127.0.0.1", _StaticFilesHandler)
                server.daemon = True
                server.start()
                server.is_ready.wait()
                if server.error:
                    raise CommandError(f"the portal did not start: {server.error}")
                try:
                    team, lead = rollout.make_team(f"bench-{int(time.time())}")
                    say = lambda line: self.stderr.write(line)  # noqa: E731
                    url = f"http://127.0.0.1:{server.port}"
                    result = rollout.run(url, root / "fleet", team, lead, devices, size, rate, log=say)
                finally:
                    server.terminate()
        self.stdout.write(json.dumps(result.figures(), indent=2))
