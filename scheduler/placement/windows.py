"""What closes nodes to some work for a while, as the snapshot carries it: maintenance windows of the clusters
(``Snapshot.maintenance``), and the nodes approved reservations book for a team (``Snapshot.bookings``); and
what approved capacity requests add to a queue's quota rows (docs/scheduling.md §Maintenance, §Bookings)."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta
from decimal import Decimal
from typing import Any

from clusters.models import MaintenanceWindow
from governance import capacity
from governance.models import Quota
from scheduler.engine import model as m
from scheduler.placement.jobs import ts
from tenancy.models import Organization


def maintenance(organization: Organization, now: datetime, window: int) -> tuple[m.Maintenance, ...]:
    """The maintenance windows of the organization's clusters that have not ended and start within
    ``window`` seconds of ``now``, with their nodes as engine names (none: the whole cluster)."""
    rows = list(
        MaintenanceWindow.objects.filter(
            cluster__organization=organization, ends_at__gt=now, starts_at__lte=now + timedelta(seconds=window)
        ).values_list("pk", "cluster__slug", "starts_at", "ends_at")
    )
    if not rows:
        return ()
    nodes: dict[int, list[str]] = defaultdict(list)
    for pk, slug, name in MaintenanceWindow.nodes.through.objects.filter(
        maintenancewindow_id__in=[row[0] for row in rows]
    ).values_list("maintenancewindow_id", "node__cluster__slug", "node__name"):
        nodes[pk].append(f"{slug}/{name}")
    return tuple(
        m.Maintenance(slug, tuple(sorted(nodes.get(pk, ()))), ts(start), ts(end)) for pk, slug, start, end in rows
    )


def bookings(approved: Sequence[capacity.Approved]) -> tuple[m.Booking, ...]:
    """The reservations among ``approved`` (not ended, starting within the backfill window), with their nodes."""
    nodes = capacity.booked_nodes(approved)
    return tuple(
        m.Booking(
            f"reservation {r.pk}",
            r.team,
            nodes[r.pk][0].split("/")[0],
            tuple(nodes[r.pk]),
            ts(r.starts_at),
            ts(r.ends_at),
        )
        for r in approved
        if r.reservation and nodes.get(r.pk)
    )


def with_extra(
    quota_rows: list[dict[str, Any]], extra: Mapping[tuple[int, str], Decimal], queue: int
) -> list[dict[str, Any]]:
    """A queue's quota rows with the accelerators approved capacity requests add to each flavor's nominal."""
    added = {flavor: amount for (q, flavor), amount in extra.items() if q == queue}
    if not added:
        return quota_rows
    accelerators = Quota.Resource.ACCELERATORS
    rows = [
        {**r, "nominal": r["nominal"] + added[r["flavor__name"]]}
        if r["resource"] == accelerators and r["flavor__name"] in added
        else r
        for r in quota_rows
    ]
    have = {r["flavor__name"] for r in quota_rows if r["resource"] == accelerators}
    rows += [
        {
            "flavor__name": flavor,
            "resource": accelerators,
            "nominal": amount,
            "borrowing_limit": None,
            "lending_limit": None,
        }
        for flavor, amount in added.items()
        if flavor not in have
    ]
    return rows
