"""The scheduler's state as Prometheus gauges, computed at scrape time from a few aggregate queries: jobs by
state, queue depth by queue, flavor and pending reason, and how long each organization's placement loop has
been silent while work waited. Events (cycles, admissions, failures) are counted where they happen
(``scheduler/placement/measure.py``); the names and labels are in docs/operations.md#metrics."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime

from django.db.models import Count, Min
from prometheus_client.core import GaugeMetricFamily, Metric

from scheduler.models import Job, LoopState
from scheduler.states import WAITING
from tenancy.models import Organization


def silence_by_organization(now: datetime) -> dict[int, float]:
    """Seconds each organization's loop has been silent while work waited: since its last cycle, or since the
    oldest waiting job began to wait if that is later; 0 for an organization with nothing waiting. Every
    organization with a loop row or waiting work has an entry."""
    waiting_since = dict(
        Job.objects.filter(state__in=WAITING)
        .values_list("team__organization_id")
        .annotate(since=Min("state_changed_at"))
        .order_by()
    )
    last_cycle = dict(LoopState.objects.values_list("organization_id", "last_cycle_at"))
    silence = {}
    for org in set(waiting_since) | set(last_cycle):
        since = waiting_since.get(org)
        if since is None:
            silence[org] = 0.0
            continue
        cycle = last_cycle.get(org)
        silence[org] = max(0.0, (now - (max(since, cycle) if cycle else since)).total_seconds())
    return silence


def collect(now: datetime) -> Iterator[Metric]:
    jobs = GaugeMetricFamily("qm_jobs", "Jobs by state (all of them, final states included).", labels=["state"])
    counts = dict(Job.objects.values_list("state").annotate(n=Count("pk")).order_by())
    for state in Job.State:
        jobs.add_metric([state.value], counts.get(state.value, 0))
    yield jobs

    depth = GaugeMetricFamily(
        "qm_queue_depth",
        "Jobs waiting (pending or requeued), by organization, queue, first accelerator type asked for (any: none "
        "named) and pending reason (none: not examined yet).",
        labels=["organization", "queue", "flavor", "reason"],
    )
    grouped: dict[tuple[str, str, str, str], int] = {}
    rows = (
        Job.objects.filter(state__in=WAITING)
        .values_list("team__organization__slug", "queue__name", "accelerator_types", "pending_reason")
        .annotate(n=Count("pk"))
        .order_by()
    )
    for org, queue, flavors, reason, n in rows:
        key = (org, queue, flavors[0] if flavors else "any", reason or "none")
        grouped[key] = grouped.get(key, 0) + n
    for key, n in sorted(grouped.items()):
        depth.add_metric(list(key), n)
    yield depth

    slugs = dict(Organization.objects.values_list("pk", "slug"))
    silent = GaugeMetricFamily(
        "qm_placement_loop_silence_seconds",
        "Seconds the organization's placement loop has been silent while jobs waited (0: nothing waits).",
        labels=["organization"],
    )
    for org, seconds in sorted(silence_by_organization(now).items()):
        silent.add_metric([slugs.get(org, str(org))], seconds)
    yield silent
