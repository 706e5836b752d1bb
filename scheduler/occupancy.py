"""What Quartermaster's own placements hold on nodes: the scheduler's answers to ``clusters/occupancy.py``
(``CLUSTERS_PLACED`` names this module), which says what the node pages and the live view make of them."""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from django.db.models import Q, QuerySet

from clusters.models import Node
from clusters.occupancy import Held, in_use
from scheduler.models import Assignment, Attempt
from scheduler.states import PLACED

__all__ = ["beyond_reports", "held"]


def _placed_on(where: Q) -> QuerySet[Assignment]:
    return Assignment.objects.filter(
        attempt__outcome=Attempt.Outcome.ACTIVE,
        attempt__job__state__in=PLACED,
        node__in=Node.objects.filter(where).values("pk"),
    )


def held(where: Q) -> dict[int, Held]:
    """Per node id, what the placed attempts on the nodes ``where`` selects (a ``Q`` over ``Node``, e.g.
    ``Q(cluster=cluster)``) hold there."""
    rows = _placed_on(where).values_list("node_id", "accelerators", "cpu", "memory")
    indexes: dict[int, set[int]] = defaultdict(set)
    cpu: dict[int, int] = defaultdict(int)
    memory: dict[int, int] = defaultdict(int)
    for node, slots, millicores, mib in rows:
        indexes[node].update(int(index) for index, milli in slots or () if milli > 0)
        cpu[node] += millicores
        memory[node] += mib
    return {node: Held(len(indexes[node]), cpu[node], memory[node]) for node in cpu}


def beyond_reports(where: Q, key: str) -> dict[Any, int]:
    """Accelerators our placements hold beyond their nodes' reports, on the nodes ``where`` selects, summed by
    the node column ``key`` (``cluster_id``, ``accelerator_id``): what a sum of the reports must add to count
    every placement. One query."""
    indexes: dict[int, set[int]] = defaultdict(set)
    nodes: dict[int, tuple[Any, int]] = {}
    rows = _placed_on(where).values_list("node_id", f"node__{key}", "node__accelerators_used", "accelerators")
    for node, group, reported, slots in rows:
        indexes[node].update(int(index) for index, milli in slots or () if milli > 0)
        nodes[node] = (group, reported)
    extra: dict[Any, int] = defaultdict(int)
    for node, (group, reported) in nodes.items():
        extra[group] += in_use(reported, len(indexes[node])) - reported
    return extra
