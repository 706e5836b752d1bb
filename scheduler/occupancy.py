"""What Quartermaster's own placements hold on nodes, for the node pages and the live view.

A node's use as the pages show it is the one the placement snapshot reasons with: the larger of what the
cluster last reported and what our placed attempts hold there (``placement/snapshot.py``). A job placed a
moment ago is not in the cluster's report until the next sync, and a cluster that does not count our jobs in
its report (or counts them late) must not show a node a job fills as idle. Only counts leave this module: no
job or team is named, so a page may add them to nodes whoever reads it.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from django.db.models import Q, QuerySet

from clusters.models import Node
from scheduler.models import Assignment, Attempt
from scheduler.states import PLACED


@dataclass(frozen=True, slots=True)
class Held:
    """What placed attempts hold on one node: accelerators (one shared by fractions counts once), millicores
    and MiB."""

    accelerators: int = 0
    cpu: int = 0
    memory: int = 0


NOTHING = Held()


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


def in_use(reported: int, ours: int) -> int:
    """A node's use as the snapshot counts it: the cluster's report, or our own placements where more."""
    return max(reported, ours)


def use_of(node: Node, ours: Mapping[int, Held]) -> Held:
    """The node's use as the pages show it: per resource, its cluster's report or our placements where more."""
    mine = ours.get(node.pk, NOTHING)
    return Held(
        in_use(node.accelerators_used, mine.accelerators),
        in_use(node.cpu_used, mine.cpu),
        in_use(node.memory_used, mine.memory),
    )


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
