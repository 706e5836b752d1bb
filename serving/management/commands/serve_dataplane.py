"""`manage.py serve_dataplane --bind HOST:PORT`: the data plane, answering services' endpoints until stopped
(SIGTERM or Ctrl-C: it stops taking connections and lets the requests under way finish, up to 30 s)."""

from __future__ import annotations

import logging
from typing import Any

from aiohttp import web
from django.core.management.base import BaseCommand, CommandError, CommandParser

from serving import dataplane
from serving.dataplane import source
from serving.dataplane.server import DataPlane

log = logging.getLogger(__name__)


class Command(BaseCommand):
    help = "Run the data plane: services' endpoints (/serve/<organization>/<team>/<service>/), until stopped."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--bind", default="127.0.0.1:8001", help="Address to listen on (HOST:PORT).")

    def handle(self, *args: Any, bind: str, **options: Any) -> None:
        from django.conf import settings

        host, _, port = bind.rpartition(":")
        if not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise CommandError(f"--bind takes HOST:PORT, not {bind!r}")
        plane = DataPlane(source, dataplane.limits(), auth_seconds=float(settings.SERVE_AUTH_SECONDS))
        self.stdout.write(f"The data plane answers at http://{bind}/serve/<organization>/<team>/<service>/")
        web.run_app(
            plane.app(),
            host=host.strip("[]"),
            port=int(port),
            access_log=None,
            shutdown_timeout=30,
            print=None,
            backlog=1024,
        )
