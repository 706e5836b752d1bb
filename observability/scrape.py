"""The answer to Prometheus's scrape of ``/metrics`` (served by ``portal.middleware.ServeMetrics``, before the
host check: docs/operations.md#metrics says who may read it)."""

from __future__ import annotations

import ipaddress

from django.conf import settings
from django.http import HttpRequest, HttpResponse
from django.views.decorators.http import require_GET
from prometheus_client import CONTENT_TYPE_LATEST

from common.client import client_address
from observability import exposition


def _loopback(request: HttpRequest) -> bool:
    address = client_address(request)
    return address is not None and ipaddress.ip_address(address).is_loopback


@require_GET
def metrics(request: HttpRequest) -> HttpResponse:
    """The Prometheus exposition. With ``METRICS_TOKEN`` set, only a request bearing it (``Authorization:
    Bearer ...``) is answered; without it, only requests from this host (docs/operations.md#metrics)."""
    token = settings.METRICS_TOKEN
    if token:
        if not exposition.bearer_ok(request.headers.get("Authorization", ""), token):
            response = HttpResponse("/metrics needs the bearer token METRICS_TOKEN.\n", status=401)
            response["WWW-Authenticate"] = 'Bearer realm="metrics"'
            response["Content-Type"] = "text/plain; charset=utf-8"
            return response
    elif not _loopback(request):
        return HttpResponse(
            "/metrics answers this host only; set METRICS_TOKEN to scrape it from elsewhere.\n",
            status=403,
            content_type="text/plain; charset=utf-8",
        )
    return HttpResponse(exposition.render(), content_type=CONTENT_TYPE_LATEST)
