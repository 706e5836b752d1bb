"""The data plane: inference traffic to services' replicas, in a process of its own (``server.py``), reading the
portal's state through ``source.py``; ``limits()`` is what the settings allow each service."""

from __future__ import annotations

from django.conf import settings

from serving.dataplane.table import Limits


def limits() -> Limits:
    return Limits(
        max_inflight=settings.SERVE_MAX_INFLIGHT,
        queue_per_service=settings.SERVE_QUEUE_PER_SERVICE,
        queue_total=settings.SERVE_QUEUE_TOTAL,
        queue_seconds=float(settings.SERVE_QUEUE_SECONDS),
        max_rps=float(settings.SERVE_MAX_RPS),
        burst=settings.SERVE_MAX_RPS,
        cold_start_seconds=float(settings.SERVE_COLD_START_SECONDS),
        timeout_seconds=float(settings.SERVE_TIMEOUT_SECONDS),
    )
