"""The meter's lag as a Prometheus gauge, computed at scrape time from each organization's ``MeterState``:
usage is recorded by the minute (``billing/actions/metering.py``), so a meter that stops shows here long before a
statement is wrong; an organization whose meter never ran counts from its creation. Names and labels:
docs/operations.md#metrics."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime

from prometheus_client.core import GaugeMetricFamily, Metric

from tenancy.models import Organization


def collect(now: datetime) -> Iterator[Metric]:
    lag = GaugeMetricFamily(
        "qm_meter_lag_seconds",
        "Seconds since the organization's meter last finished a run (usage after that is not recorded yet).",
        labels=["organization"],
    )
    rows = Organization.objects.values_list("slug", "meter_state__last_run_finished_at", "created_at")
    for org, finished, created in rows.order_by("slug"):
        lag.add_metric([org], max(0.0, (now - (finished or created)).total_seconds()))
    yield lag
