"""The live cluster view's data: every node of a cluster in one query, grouped by topology in Python.

A node's use counts every placement: the cluster's report, or what our placements hold there where that is
more (``clusters/occupancy.py``, one more query).

Built for 10,000 nodes per render: one ``values_list`` query with the topology keys extracted by the
database (no model instances, no JSON parsing here) and one pass that groups the nodes and writes each
tile's markup. Tiles and domain boxes are markup written here, not in the template, for speed: a Django
template loop over 10,000 tiles took about 400 ms, one over 2,500 racks still 150 ms, these f-strings a
few; the template loops over the sections (InfiniBand blocks) only. Names (of nodes, levels, domains) are
the untrusted parts, and are escaped.

Domains are grouped by the cluster's ``levels``: the last level is the box a tile sits in (a rack, a TPU
slice), the levels above it name the section the box sits in (an InfiniBand block).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from html import escape
from typing import TYPE_CHECKING

from django.db.models import Q
from django.db.models.fields.json import KeyTextTransform
from django.utils.safestring import SafeString, mark_safe

from clusters import occupancy
from clusters.models import Cluster, Node
from tenancy.scoping import Action

if TYPE_CHECKING:
    from common.types import AnyUser

UNASSIGNED = "(none)"
#: Allocation steps, by the share of a node's accelerators in use: the tile's colour.
ALLOCATION_STEPS: tuple[tuple[str, str], ...] = (
    ("a0", "idle"),
    ("a1", "1 to 25% used"),
    ("a2", "26 to 50% used"),
    ("a3", "51 to 75% used"),
    ("a4", "76 to 100% used"),
    ("an", "no accelerators"),
)
#: States that mark a tile (schedulable nodes carry no mark), and the mark for failed health checks.
MARKED_STATES: tuple[str, ...] = (
    Node.State.DOWN,
    Node.State.DRAINED,
    Node.State.DRAINING,
    Node.State.CORDONED,
)
UNHEALTHY = "sick"


@dataclass(slots=True)
class Domain:
    """A box of tiles: one domain of the cluster's last topology level."""

    name: str
    #: Each node's tile, in name order.
    tiles: list[str] = field(default_factory=list)
    accelerators: int = 0
    used: int = 0


@dataclass(slots=True)
class Section:
    """The domains under one domain of the levels above the last (the whole cluster with one level)."""

    path: str
    #: The level of the boxes (e.g. rack), shown in each box's heading.
    level: str
    domains: list[Domain]

    @property
    def domains_html(self) -> SafeString:
        boxes = (
            f'<div class="domain" data-domain="{escape(d.name)}"><h3>{escape(domain_label(self.level, d.name))} '
            f'<small class="muted" title="accelerators in use">{d.used}/{d.accelerators}</small></h3>'
            f'<div class="tiles">{"".join(d.tiles)}</div></div>'
            for d in self.domains
        )
        return mark_safe("".join(boxes))  # noqa: S308 - every name in it is escaped here or in live_view


@dataclass(slots=True)
class LiveView:
    sections: list[Section]
    nodes: int
    accelerators: int
    used: int
    states: dict[str, int]
    unhealthy: int

    @property
    def percent_used(self) -> int:
        return round(100 * self.used / self.accelerators) if self.accelerators else 0


def domain_label(level: str, name: str) -> str:
    """``rack r07``, or ``rack-007`` alone when the name already says its level."""
    if not level or name.lower().startswith(level.lower().replace("_", "-")):
        return name
    return f"{level} {name}"


def allocation_class(used: int, total: int) -> str:
    if total <= 0:
        return "an"
    if used <= 0:
        return "a0"
    return f"a{min(4, 1 + (4 * used - 1) // total)}"


def live_view(user: AnyUser, cluster: Cluster, node_url: str) -> LiveView:
    """The cluster's nodes grouped for the live view; ``node_url`` is the prefix of a node's page (the
    node's id and a slash complete it)."""
    levels = [str(level) for level in cluster.levels or []]
    keys = [f"_level{i}" for i in range(len(levels))]
    rows = (
        Node.objects.for_user(user, Action.VIEW)
        .filter(cluster=cluster, present=True)
        .annotate(**{key: KeyTextTransform(level, "topology") for key, level in zip(keys, levels, strict=True)})
        .order_by("name")
        .values_list("pk", "name", "accelerators", "accelerators_used", "state", "healthy", *keys)
    )
    # Every placement counts: the cluster's report, or our placements where they hold more.
    ours = occupancy.held(Q(cluster=cluster, present=True))
    boxes: dict[tuple[str, ...], Domain] = {}
    states: Counter[str] = Counter()
    unhealthy = nodes = accelerators = used = 0
    for pk, name, total, reported, state, healthy, *where in rows:
        in_use = occupancy.in_use(reported, ours.get(pk, occupancy.NOTHING).accelerators)
        path = tuple(w or UNASSIGNED for w in where) or (UNASSIGNED,)
        box = boxes.get(path)
        if box is None:
            box = boxes[path] = Domain(path[-1])
        css = allocation_class(in_use, total)
        title = f"{escape(name)}: {in_use}/{total} used"
        if state != Node.State.SCHEDULABLE:
            css = f"{css} {state}"
            title = f"{title}, {state}"
        if not healthy:
            css = f"{css} {UNHEALTHY}"
            title = f"{title}, failing health checks"
            unhealthy += 1
        box.tiles.append(f'<a class="t {css}" href="{node_url}{pk}/" title="{title}"></a>')
        box.accelerators += total
        box.used += in_use
        states[state] += 1
        nodes += 1
        accelerators += total
        used += in_use
    sections: dict[tuple[str, ...], Section] = {}
    for path in sorted(boxes):
        outer = path[:-1]
        section = sections.get(outer)
        if section is None:
            label = " / ".join(domain_label(level, name) for level, name in zip(levels, outer, strict=False))
            section = sections[outer] = Section(label, levels[-1] if levels else "", [])
        section.domains.append(boxes[path])
    ordered_states = {state: states[state] for state in Node.State.values if states[state]}
    return LiveView(list(sections.values()), nodes, accelerators, used, ordered_states, unhealthy)
