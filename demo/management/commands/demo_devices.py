"""`manage.py demo_devices`: the demo's edge fleet and its service's load, until stopped (a child of
``manage.py demo``).

It runs ``--devices`` real device agents (``deploy/edge_agent.py``, one process each, state under
``<VAR_DIR>/demo-devices``; ``demo/devices.py``) against the demo's web server, restarting any that dies
(``demo/supervisor.py``). Their held polls wait ``--poll-wait`` seconds: each agent holds one of the web
server's threads while it waits (the demo's has 2 x 16), so six agents leave most of them to people. Now and
then (``--offline-chance`` per half minute, one at a time) an agent is paused for ``OFFLINE_SECONDS``
(SIGSTOP, then SIGCONT), so the fleet page shows a device going offline and coming back. Beside them, a thread
sends the service ``grasp-policy`` its load (``demo/traffic.py``) through the data plane (``SERVE_PUBLIC_URL``).
"""

from __future__ import annotations

import random
import signal
import sys
import threading
import time
from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db import connections

from demo import devices, inference
from demo.supervisor import Child, Supervisor
from demo.traffic import Traffic
from tenancy.models import Organization

DEMO_SLUG = "demo"
OFFLINE_SECONDS = 75
#: How often the offline spells are drawn.
OFFLINE_EVERY = 30.0


class Command(BaseCommand):
    help = "Run the demo's device agents and its service's load until stopped (demo only)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--devices", type=int, default=devices.DEFAULT_DEVICES, help="How many agents.")
        parser.add_argument("--server", default="", help="The portal's URL (default: PUBLIC_URL).")
        parser.add_argument("--poll-wait", type=int, default=15, help="Seconds an agent's poll may be held.")
        parser.add_argument(
            "--offline-chance", type=float, default=0.03, help="Chance per half minute that an agent goes offline."
        )
        parser.add_argument("--no-traffic", action="store_true", help="Send the service no load.")

    def handle(self, *args: Any, **options: Any) -> None:
        count, poll_wait = options["devices"], options["poll_wait"]
        if not 0 <= count <= 100:
            raise CommandError("--devices must be between 0 and 100.")
        if not 0 <= poll_wait <= 60:
            raise CommandError("--poll-wait must be between 0 and 60.")
        server = (options["server"] or settings.PUBLIC_URL).rstrip("/")
        org = Organization.objects.filter(slug=DEMO_SLUG).first()
        if org is None:
            raise CommandError("No demo organization: run manage.py seed_demo first.")
        tokens = devices.enrolment_tokens(org, count)
        connections.close_all()  # nothing more to read: no connection held while the agents run
        commands = {
            name: devices.agent_command(sys.executable, server, name, token, poll_wait)
            for name, token in tokens.items()
        }
        stopping = threading.Event()

        def stop(signum: int, frame: Any) -> None:
            stopping.set()

        signal.signal(signal.SIGINT, stop)
        signal.signal(signal.SIGTERM, stop)
        supervisor = Supervisor(commands, log=self._log)
        threads = [threading.Thread(target=self._offline_spells, args=(supervisor, stopping, options), daemon=True)]
        if not options["no_traffic"]:
            url = f"{settings.SERVE_PUBLIC_URL}/serve/{DEMO_SLUG}/{inference.TEAM}/{inference.SERVICE}/v1/predict"
            threads.append(threading.Thread(target=Traffic(url, self._log).run, args=(stopping,), daemon=True))
        for thread in threads:
            thread.start()
        self._log(f"{count} device agents against {server}, polls held up to {poll_wait} s")
        # On stop, the offline thread lets a paused agent go on at once, so that it ends on the SIGTERM.
        supervisor.run(stopping, poll=0.5)
        for thread in threads:
            thread.join(timeout=5)

    def _offline_spells(self, supervisor: Supervisor, stopping: threading.Event, options: dict[str, Any]) -> None:
        """Now and then pause one agent for ``OFFLINE_SECONDS``, then let it go on."""
        rng = random.Random()  # noqa: S311 - a demo's choices, not a secret
        while not stopping.wait(OFFLINE_EVERY):
            if not supervisor.children or rng.random() >= options["offline_chance"]:
                continue
            child = rng.choice(supervisor.children)
            if not _signal(child, signal.SIGSTOP):
                continue
            self._log(f"{child.name} goes offline for {OFFLINE_SECONDS} s (paused)")
            stopping.wait(OFFLINE_SECONDS)
            _signal(child, signal.SIGCONT)
            self._log(f"{child.name} is back")

    def _log(self, line: str) -> None:
        self.stderr.write(f"[devices {time.strftime('%H:%M:%S')}] {line}")


def _signal(child: Child, number: int) -> bool:
    process = child.process
    if process is None or process.poll() is not None:
        return False
    try:
        process.send_signal(number)
    except ProcessLookupError:
        return False
    return True
