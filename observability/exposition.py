"""The text of ``/metrics``: the events every process counted, added up, then the state of the database.

Events (``common/metrics.py``) come from the files of every process in ``PROMETHEUS_MULTIPROC_DIR`` when it
is set (the client's multiprocess mode; the client itself reads that variable, when it is first imported),
else from this process's memory. The database's state comes from each app's collector (``<app>/metrics.py``),
run at scrape time; one that fails (the database is down, a query breaks) is reported as
``qm_metrics_collector_up{collector=...} 0`` with the others still exposed, never as a failed scrape.
"""

from __future__ import annotations

import hmac
import logging
import os
import time
from collections.abc import Callable, Iterable, Iterator
from datetime import datetime

from django.db import transaction
from django.utils import timezone
from prometheus_client import REGISTRY, CollectorRegistry, generate_latest
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.multiprocess import MultiProcessCollector
from prometheus_client.registry import Collector

from billing import metrics as billing_metrics
from clusters import metrics as cluster_metrics
from governance import metrics as governance_metrics
from scheduler import metrics as scheduler_metrics

log = logging.getLogger(__name__)

COLLECTORS: tuple[tuple[str, Callable[[datetime], Iterable[Metric]]], ...] = (
    ("scheduler", scheduler_metrics.collect),
    ("clusters", cluster_metrics.collect),
    ("billing", billing_metrics.collect),
    ("governance", governance_metrics.collect),
)


class DatabaseState(Collector):
    def collect(self) -> Iterator[Metric]:
        now = timezone.now()
        up = GaugeMetricFamily(
            "qm_metrics_collector_up",
            "Whether the collector answered at this scrape (0: see the log).",
            labels=["collector"],
        )
        spent = GaugeMetricFamily(
            "qm_metrics_collector_seconds", "Time the collector took at this scrape.", labels=["collector"]
        )
        for name, collect in COLLECTORS:
            started = time.perf_counter()
            try:
                with transaction.atomic():  # a failed query leaves the next collector a usable connection
                    found = list(collect(now))
            except Exception:  # any failure is reported as a metric, never as a failed scrape
                log.exception("the %s metrics collector failed", name)
                up.add_metric([name], 0)
            else:
                yield from found
                up.add_metric([name], 1)
            spent.add_metric([name], time.perf_counter() - started)
        yield up
        yield spent


def events() -> CollectorRegistry:
    """The events counted by every process that shares the metrics directory, or by this one alone."""
    if not os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        return REGISTRY
    registry = CollectorRegistry()
    MultiProcessCollector(registry)  # type: ignore[no-untyped-call]  # the client leaves it untyped
    return registry


def render() -> bytes:
    state = CollectorRegistry(auto_describe=False)
    state.register(DatabaseState())
    return generate_latest(events()) + generate_latest(state)


def bearer_ok(authorization: str, token: str) -> bool:
    """Whether an ``Authorization`` header carries ``token`` (compared in constant time)."""
    return hmac.compare_digest(authorization.encode(), f"Bearer {token}".encode())
