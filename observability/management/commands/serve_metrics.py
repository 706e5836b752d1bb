"""``manage.py serve_metrics``: the events counted by the processes of this machine or pod (the files in
``PROMETHEUS_MULTIPROC_DIR``), served on a port of their own, without the database's state.

For the Kubernetes worker and beat pods, whose processes have no web server and do not share a disk with the
web pods: a sidecar runs this beside them, on the same emptyDir (deploy/kubernetes/). The web app's
``/metrics`` serves its own pod's events with the database's state. With ``METRICS_TOKEN`` set, a scrape must
bear it, as for ``/metrics``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, make_server

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError, CommandParser
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from observability import exposition

StartResponse = Callable[[str, list[tuple[str, str]]], Any]


class _Quiet(WSGIRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        pass  # one line a scrape is noise


def application(environ: dict[str, Any], start_response: StartResponse) -> Iterable[bytes]:
    token = settings.METRICS_TOKEN
    if token and not exposition.bearer_ok(environ.get("HTTP_AUTHORIZATION", ""), token):
        start_response(
            "401 Unauthorized", [("Content-Type", "text/plain"), ("WWW-Authenticate", 'Bearer realm="metrics"')]
        )
        return [b"the metrics need the bearer token METRICS_TOKEN\n"]
    if environ.get("PATH_INFO") != "/metrics":
        start_response("404 Not Found", [("Content-Type", "text/plain")])
        return [b"the metrics are at /metrics\n"]
    start_response("200 OK", [("Content-Type", CONTENT_TYPE_LATEST)])
    return [generate_latest(exposition.events())]


class Command(BaseCommand):
    help = "Serve this pod's processes' metrics (PROMETHEUS_MULTIPROC_DIR) on their own port, until stopped."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--bind", default="127.0.0.1", help="Address to listen on (default: %(default)s).")
        parser.add_argument("--port", type=int, default=9808, help="Port (default: %(default)s).")

    def handle(self, *args: Any, bind: str, port: int, **options: Any) -> None:
        if bind not in ("127.0.0.1", "::1", "localhost") and not settings.METRICS_TOKEN:
            raise CommandError("set METRICS_TOKEN to serve the metrics beyond this host")
        with make_server(bind, port, application, handler_class=_Quiet) as server:
            self.stdout.write(f"serving metrics on http://{bind}:{port}/metrics")
            server.serve_forever()
