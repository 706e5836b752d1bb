"""What Quartermaster's own placements hold on nodes, for the node pages and the live view.

A node's use as the pages show it is the one the placement snapshot reasons with: the larger of what the
cluster last reported and what our placed attempts hold there (``placement/snapshot.py``). A job placed a
moment ago is not in the cluster's report until the next sync, and a cluster that does not count our jobs in
its report (or counts them late) must not show a node a job fills as idle. Only counts leave this module: no
job or team is named, so a page may add them to nodes whoever reads it.

The placements are the scheduler's, which is above this app: ``CLUSTERS_PLACED`` in the settings names the module
that counts them (``scheduler.occupancy``), as placement reads prices through ``PLACEMENT_PRICES``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from importlib import import_module
from typing import Any, Protocol, cast

from django.conf import settings
from django.db.models import Q

from clusters.models import Node


@dataclass(frozen=True, slots=True)
class Held:
    """What placed attempts hold on one node: accelerators (one shared by fractions counts once), millicores
    and MiB."""

    accelerators: int = 0
    cpu: int = 0
    memory: int = 0


NOTHING = Held()


class Placed(Protocol):
    def held(self, where: Q) -> dict[int, Held]:
        """Per node id, what the placed attempts on the nodes ``where`` selects (a ``Q`` over ``Node``, e.g.
        ``Q(cluster=cluster)``) hold there."""
        ...

    def beyond_reports(self, where: Q, key: str) -> dict[Any, int]:
        """Accelerators our placements hold beyond their nodes' reports, on the nodes ``where`` selects, summed
        by the node column ``key`` (``cluster_id``, ``accelerator_id``): what a sum of the reports must add to
        count every placement."""
        ...


def _source() -> Placed:
    return cast("Placed", import_module(settings.CLUSTERS_PLACED))


def held(where: Q) -> dict[int, Held]:
    return _source().held(where)


def beyond_reports(where: Q, key: str) -> dict[Any, int]:
    return _source().beyond_reports(where, key)


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
