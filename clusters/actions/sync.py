"""Inventory sync: what a cluster reports becomes rows, in a few bulk statements, only where it changed.

``sync_cluster(cluster_id)`` is safe to run twice and from two workers at once: it first claims the
cluster with a conditional update (a second caller finds it claimed and leaves), reads the inventory from
the backend outside any transaction, then writes everything in one transaction. A backend failure
touches no node: the cluster is marked degraded (then unreachable after ``UNREACHABLE_AFTER`` failures in
a row) with the error in words, and its next sync backs off exponentially, while other clusters sync on.

What the cluster says and what Quartermaster decided are kept apart: the cluster's facts (capacity,
usage, readiness, labels, topology) are copied; a node's ``state`` is Quartermaster's (cordoned, draining,
drained by an admin or the auto-drain policy) except that a node the cluster reports not ready is
``down`` until it is ready again, and one cordoned on the cluster itself shows as cordoned.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from django.db import connection, transaction
from django.db.models import F, Q
from django.utils import timezone

from clusters.backends.base import ELASTIC_POOL, Backend, BackendError, Inventory, NodeInfo
from clusters.backends.kinds import load
from clusters.capacity import priced_as
from clusters.models import OPEN_DRAINS, AcceleratorType, Cluster, Drain, ElasticPool, Node, TopologyDomain
from clusters.secrets import CredentialsError
from common import metrics
from common.staging import staged

UNREACHABLE_AFTER = 3
BACKOFF_BASE = timedelta(seconds=30)
BACKOFF_MAX = timedelta(minutes=15)
CLAIM = timedelta(minutes=5)
BATCH = 2000

#: The node columns a sync copies from the cluster's report.
COPIED = (
    "accelerator_id",
    "accelerators",
    "accelerators_allocatable",
    "cpu",
    "cpu_allocatable",
    "memory",
    "memory_allocatable",
    "accelerators_used",
    "cpu_used",
    "memory_used",
    "topology",
    "labels",
    "addresses",
    "ready",
    "heartbeat_at",
    "present",
    "state",
)


@dataclass(frozen=True, slots=True)
class SyncResult:
    cluster: int
    ok: bool
    created: int = 0
    updated: int = 0
    gone: int = 0
    unchanged: int = 0
    error: str = ""
    skipped: bool = False  # another worker holds the cluster


def backend_for(cluster: Cluster, *, dry_run: bool = False) -> Backend:
    """The cluster's backend, with its credentials decrypted just for it."""
    backend_class = load(cluster.kind)
    return backend_class(cluster.endpoint, cluster.credentials(), cluster.options, dry_run=dry_run)


def sync_cluster(cluster_id: int) -> SyncResult:
    now = timezone.now()
    claimed = (
        Cluster.objects.filter(pk=cluster_id)
        .exclude(status=Cluster.Status.DISABLED)
        .filter(Q(sync_claimed_until__isnull=True) | Q(sync_claimed_until__lt=now))
        .update(sync_claimed_until=now + CLAIM)
    )
    if not claimed:
        return SyncResult(cluster_id, ok=False, skipped=True)
    cluster = Cluster.objects.get(pk=cluster_id)
    try:
        inventory = backend_for(cluster).inventory()
    except (BackendError, CredentialsError) as error:
        return _failed(cluster, str(error) or type(error).__name__)
    try:
        with transaction.atomic():
            counts = _apply(cluster, inventory)
            # A cluster that reports its topology (Slurm's tree or block plugin) names its levels, so the
            # admin need not type them; levels an admin set are kept.
            levels = {} if cluster.levels else {"levels": reported_levels(inventory)}
            Cluster.objects.filter(pk=cluster.pk).update(
                **levels,
                status=Cluster.Status.HEALTHY,
                last_sync_at=timezone.now(),
                last_error="",
                failures=0,
                next_sync_at=None,
                sync_claimed_until=None,
            )
    except BadInventory as error:
        return _failed(cluster, str(error))
    metrics.SYNCS.labels(cluster.kind, "ok").inc()
    return SyncResult(cluster.pk, True, *counts)


class BadInventory(ValueError):
    """The report contradicts itself (e.g. a node named twice, more allocatable than capacity)."""


def _failed(cluster: Cluster, message: str) -> SyncResult:
    failures = cluster.failures + 1
    metrics.SYNCS.labels(cluster.kind, "error").inc()
    backoff = min(BACKOFF_BASE * 2 ** (failures - 1), BACKOFF_MAX)
    Cluster.objects.filter(pk=cluster.pk).update(
        failures=F("failures") + 1,
        status=Cluster.Status.UNREACHABLE if failures >= UNREACHABLE_AFTER else Cluster.Status.DEGRADED,
        last_error=message[:2000],
        next_sync_at=timezone.now() + backoff,
        sync_claimed_until=None,
    )
    return SyncResult(cluster.pk, ok=False, error=message)


def _check(inventory: Inventory) -> None:
    seen: set[str] = set()
    for node in inventory.nodes:
        if not node.name:
            raise BadInventory("the cluster reported a node without a name")
        if node.name in seen:
            raise BadInventory(f"the cluster reported node {node.name} twice")
        seen.add(node.name)
        numbers = (node.accelerators, node.accelerators_allocatable, node.cpu, node.cpu_allocatable, node.memory)
        if min(numbers) < 0 or node.accelerators_allocatable > node.accelerators:
            raise BadInventory(f"node {node.name}: negative capacity, or more allocatable than capacity")


def _accelerators(cluster: Cluster, inventory: Inventory) -> dict[str, int]:
    """Accelerator types by model name, created where new (a handful per cluster)."""
    details = {a.model: a for a in inventory.accelerators}
    models = {n.accelerator for n in inventory.nodes if n.accelerator} | set(details)
    known = dict(
        AcceleratorType.objects.filter(organization=cluster.organization, name__in=models).values_list("name", "pk")
    )
    for model in sorted(models - set(known)):
        info = details.get(model)
        accelerator, _ = AcceleratorType.objects.get_or_create(
            organization=cluster.organization,
            name=model,
            defaults={
                "memory_gib": info.memory_gib if info else 0,
                "generation": info.generation if info else "",
                "interconnect": info.interconnect if info else "",
            },
        )
        known[model] = accelerator.pk
    return known


def _state(reported: NodeInfo, current: str, held: bool) -> str:
    """A node's state from what its cluster reports. ``held``: Quartermaster holds it out of service (an open
    drain or cordon), which only a resume ends. A cordon seen on the cluster alone (someone ran ``kubectl
    cordon``, or a resume not yet passed on when this sync read the cluster) ends when the cluster schedules
    on the node again."""
    State = Node.State
    if not reported.ready:
        return State.DOWN if current == State.SCHEDULABLE else current
    if current == State.DOWN:
        return State.SCHEDULABLE if reported.schedulable else State.CORDONED
    if not reported.schedulable and current == State.SCHEDULABLE:
        return State.CORDONED
    if reported.schedulable and current == State.CORDONED and not held:
        return State.SCHEDULABLE
    return current


def _apply(cluster: Cluster, inventory: Inventory) -> tuple[int, int, int, int]:
    """(created, updated, gone, unchanged) nodes."""
    _check(inventory)
    accelerators = _accelerators(cluster, inventory)
    existing = {row[0]: row for row in Node.objects.filter(cluster=cluster).values_list("name", "pk", *COPIED)}
    held = set(Drain.objects.filter(node__cluster=cluster, state__in=OPEN_DRAINS).values_list("node__name", flat=True))
    # a pool's node is paid for as its pool is, unless the cluster labels it itself
    pools = dict(ElasticPool.objects.filter(cluster=cluster).values_list("name", "capacity_type"))
    created: list[Node] = []
    changed: list[Node] = []
    unchanged = 0
    for info in inventory.nodes:
        row = existing.get(info.name)
        old_state = row[-1] if row else Node.State.SCHEDULABLE
        values: dict[str, Any] = {
            "accelerator_id": accelerators.get(info.accelerator),
            "accelerators": info.accelerators,
            "accelerators_allocatable": info.accelerators_allocatable,
            "cpu": info.cpu,
            "cpu_allocatable": info.cpu_allocatable,
            "memory": info.memory,
            "memory_allocatable": info.memory_allocatable,
            "accelerators_used": info.accelerators_used,
            "cpu_used": info.cpu_used,
            "memory_used": info.memory_used,
            "topology": dict(info.topology),
            "labels": priced_as(info.labels, pools.get(str(info.labels.get(ELASTIC_POOL, "")), "")),
            "addresses": list(info.addresses),
            "ready": info.ready,
            "heartbeat_at": info.heartbeat,
            "present": True,
            "state": _state(info, old_state, info.name in held),
        }
        if row is None:
            created.append(Node(cluster=cluster, name=info.name, **values))
        elif tuple(values[c] for c in COPIED) != row[2:]:
            changed.append(Node(cluster=cluster, name=info.name, **values))
        else:
            unchanged += 1
    Node.objects.bulk_create(created, batch_size=BATCH)
    _update(cluster, changed)
    reported = {n.name for n in inventory.nodes}
    # A node present now was seen by this sync (``Node.seen_at``); one that went missing was last seen by
    # the sync before, which is all that needs writing: no statement touches every row of a large cluster.
    gone = (
        Node.objects.filter(cluster=cluster, present=True)
        .exclude(name__in=reported)
        .update(present=False, last_seen_at=cluster.last_sync_at)
    )
    _domains(cluster, inventory)
    return len(created), len(changed), gone, unchanged


#: Column types of the changed rows' staging table, for PostgreSQL's COPY (``_update``).
_PG_TYPES = {
    "accelerator_id": "bigint",
    "memory": "bigint",
    "memory_allocatable": "bigint",
    "memory_used": "bigint",
    "topology": "jsonb",
    "labels": "jsonb",
    "addresses": "jsonb",
    "ready": "boolean",
    "present": "boolean",
    "heartbeat_at": "timestamptz",
    "state": "text",
}


def _update(cluster: Cluster, changed: list[Node]) -> None:
    """Write the changed rows. On PostgreSQL: staged by COPY and one UPDATE (8,000 rows in well under a
    second, ``common.staging``); Django's upsert spends seconds compiling parameters. Elsewhere, the upsert."""
    if not changed:
        return
    columns = list(COPIED)
    if connection.vendor != "postgresql":
        Node.objects.bulk_create(
            changed,
            update_conflicts=True,
            unique_fields=["cluster", "name"],
            update_fields=[c.removesuffix("_id") for c in columns],
            batch_size=BATCH,
        )
        return
    table = Node._meta.db_table
    typed = [("name", "text"), *((c, _PG_TYPES.get(c, "integer")) for c in columns)]
    rows = (
        [node.name, *(json.dumps(v) if isinstance(v, (dict, list)) else v for v in (getattr(node, c) for c in columns))]
        for node in changed
    )
    with connection.cursor() as cursor, staged(cursor, "node_sync", typed, rows):
        assignments = ", ".join(f"{c} = s.{c}" for c in columns)
        cursor.execute(
            f"UPDATE {table} n SET {assignments} FROM node_sync s WHERE n.cluster_id = %s AND n.name = s.name",  # noqa: S608
            [cluster.pk],
        )


def reported_levels(inventory: Inventory) -> list[str]:
    """The topology levels the nodes report, widest first (the order of ``NodeInfo.topology``)."""
    levels: list[str] = []
    for node in sorted(inventory.nodes, key=lambda n: -len(n.topology)):
        levels.extend(level for level in node.topology if level not in levels)
    return levels


def _domains(cluster: Cluster, inventory: Inventory) -> None:
    """Topology domains from the nodes' labels at the cluster's levels, each under its parent."""
    levels = list(cluster.levels) or reported_levels(inventory)
    wanted: dict[tuple[str, str], tuple[str, str] | None] = {}
    for node in inventory.nodes:
        parent: tuple[str, str] | None = None
        for level in levels:
            name = node.topology.get(level)
            if not name:
                continue
            wanted.setdefault((level, name), parent)
            parent = (level, name)
    ids = {(d.level, d.name): d.pk for d in TopologyDomain.objects.filter(cluster=cluster)}
    for level in levels:  # parents first
        new = [
            TopologyDomain(cluster=cluster, level=lv, name=name, parent_id=ids.get(parent) if parent else None)
            for (lv, name), parent in wanted.items()
            if lv == level and (lv, name) not in ids
        ]
        for domain in TopologyDomain.objects.bulk_create(new, batch_size=BATCH):
            ids[(domain.level, domain.name)] = domain.pk
    stale = [pk for key, pk in ids.items() if key not in wanted]
    if stale:
        TopologyDomain.objects.filter(pk__in=stale).delete()


def due_clusters() -> list[int]:
    """Clusters whose sync is due: not disabled, not backing off."""
    now = timezone.now()
    return list(
        Cluster.objects.exclude(status=Cluster.Status.DISABLED)
        .filter(Q(next_sync_at__isnull=True) | Q(next_sync_at__lte=now))
        .values_list("pk", flat=True)
    )
