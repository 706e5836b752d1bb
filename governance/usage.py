"""Quota usage as people read it: per queue, accelerator type and resource, the quota beside what is used,
borrowed, lent and asked for. Logic only (no HTTP): the quota pages and the queues API show these rows.

Everything is read from the placement engine's own snapshot (``snapshot.build``, a few flat queries for the
whole organization, kept while no cycle applies, 10 s at most: ``feasibility.current_snapshot``) and judged
with the engine's own quota arithmetic (``engine.quota.QuotaTree``, charged with the running work as
``engine.cycle.Cycle`` charges it), so the page says what the next cycle will see.

For one row (a queue, a flavor, a resource):

- **nominal, borrowing limit, lending limit**: the quota as set (``Quota``; None: no quota row, or no
  limit). ``own`` is what the engine counts as the queue's own nominal: the same, except for the team's
  queue of a team split among projects, which keeps what its projects were not given (``quotas.py``).
- **used**: what the queue's placed jobs' current attempts hold (the engine's running work: accelerators as
  the milli-shares their assignments hold, CPU and memory as assigned).
- **borrowed**: used beyond ``own`` (zero where the resource is not governed: no queue or cohort of the
  organization sets a quota for that flavor and resource, so nobody's use of it is rationed).
- **lent**: of this queue's unused lendable quota, how much others in its cohort tree are using. Rule, per
  cohort, top down, in the engine's terms (a node's *stored* quota is what it brings to its parent beyond
  its local, unlendable part; its *draw* is its usage beyond that local part): a child whose draw is below
  what it stored has that difference *idle*; a child drawing beyond what it stored *borrows* the excess.
  What a cohort's pool gives out — its children's borrowing, plus whatever of the cohort's own idle quota
  its parent in turn lent onwards — is taken from the idle quota of its children (and of the cohort's own
  nominal) in proportion to each one's idle amount. So the lent amounts of a cohort's members add up to
  what is borrowed through it, and nothing is lent that its owner could not lend (its lending limit).
- **pending**: what the queue's waiting jobs ask for in total (workers x accelerators x share, and the
  CPU and memory of every worker). A job naming accelerator types counts under the first it names that
  the queue may use (the first it names, if the queue may use none of them); one naming none counts under
  the queue's first flavor (its fallback order, else the organization's cheapest). As in the engine, a job
  held back by a retry backoff is not waiting yet.

Rows: every quota row of the queue, and every (flavor, resource) it uses or asks for that is governed —
accelerators always; CPU and memory only where some quota in the organization rations them (every job
uses CPU and memory, and a table of unrationed ones says nothing). A cohort's rows: its own quota rows and
every governed (flavor, resource) that its subtree brings a pool of or uses.

Amounts are in people's units (accelerators, cores, GiB), rounded to three decimals.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from decimal import ROUND_HALF_UP, Decimal
from fractions import Fraction
from typing import Any

from governance.models import Cohort, Queue, Quota
from scheduler.engine import model as m
from scheduler.engine.quota import QuotaTree
from scheduler.placement import feasibility
from tenancy.models import Organization, Team

RESOURCES = m.RESOURCES  # ("accelerator", "cpu", "memory"): the engine's and ``Quota.Resource``'s names
THOUSANDTH = Decimal("0.001")
ZERO = Decimal(0)
Amounts = dict[tuple[str, str, str], int]  # (queue or cohort name, flavor, resource) -> engine units


def people(units: int | Fraction, resource: str) -> Decimal:
    """Engine units (milli-accelerators, millicores, MiB) in people's units, to three decimals."""
    value = Fraction(units) / Quota.ENGINE_UNITS[resource]
    return (Decimal(value.numerator) / Decimal(value.denominator)).quantize(THOUSANDTH, ROUND_HALF_UP)


@dataclass(frozen=True, slots=True)
class Row:
    """One (queue, flavor, resource) of a team: its quota and what is made of it (see the module)."""

    queue_id: int
    queue: str
    team_id: int
    project_id: int | None
    flavor: str
    resource: str
    nominal: Decimal | None
    borrowing_limit: Decimal | None
    lending_limit: Decimal | None
    own: Decimal | None
    used: Decimal
    borrowed: Decimal
    lent: Decimal
    pending: Decimal
    governed: bool

    @property
    def within(self) -> Decimal:
        """Used within the queue's own nominal."""
        return self.used - self.borrowed

    @property
    def percent(self) -> int | None:
        """Used, as a share of the nominal quota (None without one)."""
        if self.own is None:
            return None
        if not self.own:
            return 100 if self.used else 0
        return round(100 * self.used / self.own)

    @property
    def meter(self) -> int:
        """The share in use for a meter of 0-100."""
        return min(100, self.percent or 0)

    @property
    def ceiling(self) -> Decimal | None:
        """The most the queue may hold with borrowing (None: no limit)."""
        if self.own is None or self.borrowing_limit is None:
            return None
        return self.own + self.borrowing_limit


@dataclass(frozen=True, slots=True)
class CohortRow:
    """One (cohort, flavor, resource): the cohort's own quota, the pool its subtree brings, what the queues
    below use, what the cohort borrows from its parent and what of its idle pool its parent lends out."""

    cohort_id: int
    cohort: str
    parent: str | None
    flavor: str
    resource: str
    nominal: Decimal | None
    borrowing_limit: Decimal | None
    lending_limit: Decimal | None
    pool: Decimal
    used: Decimal
    borrowed: Decimal
    lent: Decimal


@dataclass(slots=True)
class CohortNode:
    """A cohort of the tree for display: its rows, its member queues and its child cohorts."""

    pk: int
    name: str
    rows: list[CohortRow] = field(default_factory=list)
    queues: list[str] = field(default_factory=list)
    children: list[CohortNode] = field(default_factory=list)


@dataclass(slots=True)
class Usage:
    """An organization's quota usage: rows per queue (in team, queue, flavor, resource order) and the cohort
    tree (roots first, with their children)."""

    rows: list[Row]
    cohorts: list[CohortNode]
    flavors: tuple[str, ...]

    def of_team(self, team_id: int) -> list[Row]:
        return [row for row in self.rows if row.team_id == team_id]

    def of_queue(self, queue_id: int) -> list[Row]:
        return [row for row in self.rows if row.queue_id == queue_id]


# ------------------------------------------------------------------------------------------ the arithmetic


def running_usage(running: Iterable[m.Workload]) -> dict[tuple[str, str], list[int]]:
    """(queue, flavor) -> [accelerator milli, millicores, MiB] held by the running work, as the engine counts
    it (``Workload.usage``: every accelerator share and every assignment's CPU and memory)."""
    usage: dict[tuple[str, str], list[int]] = defaultdict(lambda: [0, 0, 0])
    for w in running:
        total = usage[(w.queue, w.flavor)]
        for r, amount in enumerate(w.usage()):
            total[r] += amount
    return usage


def charged_tree(snap: m.Snapshot, usage: dict[tuple[str, str], list[int]]) -> QuotaTree:
    """The engine's quota tree of ``snap`` with ``usage`` charged, exactly as ``Cycle.__init__`` does."""
    tree = QuotaTree(snap.cohorts, snap.queues, {n.flavor for n in snap.nodes})
    tree.charge_running(usage)
    return tree


def lent(tree: QuotaTree) -> dict[tuple[int, int], Fraction]:
    """Per (tree node, column): how much of its idle lendable quota others use (the rule in the module's
    docstring). Exact: fractions of engine units."""
    out: dict[tuple[int, int], Fraction] = {}
    order = sorted(range(len(tree.names)), key=lambda i: tree.depth[i])  # parents first
    for fr, covered in enumerate(tree.covered):
        if not covered:
            continue

        def draw(x: int, fr: int = fr) -> int:
            return max(0, tree.usage[x][fr] - tree.local[x][fr])

        def stored(x: int, fr: int = fr) -> int:
            return tree.subtree[x][fr] - tree.local[x][fr]

        for p in order:
            if tree.is_queue[p]:
                continue
            children = tree.children[p]
            idle = {c: max(0, stored(c) - draw(c)) for c in children}
            borrowing = sum(max(0, draw(c) - stored(c)) for c in children)
            supply = sum(idle.values()) + tree.nominal[p][fr]
            if not supply:
                continue
            taken = min(Fraction(supply), borrowing + out.get((p, fr), Fraction(0)))
            share = taken / supply
            for c in children:
                if idle[c]:
                    out[(c, fr)] = idle[c] * share
    return out


def pending_demand(snap: m.Snapshot) -> Amounts:
    """(queue, flavor, resource) -> what the waiting jobs ask for, counted under one flavor (the module)."""
    flavors = {q.name: q.flavors for q in snap.queues}
    demand: Amounts = defaultdict(int)
    for job in snap.pending:
        usable = flavors.get(job.queue, ())
        if job.flavors:
            flavor = next((f for f in job.flavors if f in usable), job.flavors[0])
        elif usable:
            flavor = usable[0]
        else:
            continue  # no flavor anywhere to count it under: an organization without nodes
        amounts = (job.workers * job.accelerators * job.accel_milli, job.workers * job.cpu, job.workers * job.memory)
        for resource, amount in zip(RESOURCES, amounts, strict=True):
            if amount:
                demand[(job.queue, flavor, resource)] += amount
    return demand


# ---------------------------------------------------------------------------------------------- the rows


def organization_usage(organization: Organization) -> Usage:
    """Every queue's and cohort's rows in ``organization`` (the admins' and finance's view)."""
    snap = feasibility.current_snapshot(organization)  # shared with previews: one read per cycle, 10 s at most
    usage = running_usage(snap.running)
    tree = charged_tree(snap, usage)
    lent_by = lent(tree)
    demand = pending_demand(snap)
    every_flavor = tuple(sorted({n.flavor for n in snap.nodes}))

    queues = list(
        Queue.objects.filter(team__organization=organization).values(
            "pk", "name", "team_id", "team__name", "project_id", "project__name", "cohort_id"
        )
    )
    queues.sort(key=lambda q: (q["team__name"], q["project_id"] is not None, q["project__name"] or ""))
    quota_rows: dict[int, dict[tuple[str, str], dict[str, Any]]] = defaultdict(dict)
    cohort_quota_rows: dict[int, dict[tuple[str, str], dict[str, Any]]] = defaultdict(dict)
    for q in Quota.objects.filter(flavor__organization=organization).values(
        "queue_id", "cohort_id", "flavor__name", "resource", "nominal", "borrowing_limit", "lending_limit"
    ):
        target = quota_rows[q["queue_id"]] if q["queue_id"] else cohort_quota_rows[q["cohort_id"]]
        target[(q["flavor__name"], q["resource"])] = q
    engine_queue = {q.name: q for q in snap.queues}

    def governed(flavor: str, resource: str) -> bool:
        return flavor in tree.flavor_index and tree.covered[tree.fr(flavor, RESOURCES.index(resource))]

    rows: list[Row] = []
    for q in queues:
        name = q["name"]
        keys = set(quota_rows[q["pk"]])
        for (queue, flavor), total in usage.items():
            if queue == name:
                keys |= {(flavor, r) for r, amount in zip(RESOURCES, total, strict=True) if amount}
        keys |= {(flavor, r) for (queue, flavor, r) in demand if queue == name}
        keys = {k for k in keys if k in quota_rows[q["pk"]] or k[1] == "accelerator" or governed(*k)}
        for flavor, resource in sorted(keys, key=lambda k: (k[0], RESOURCES.index(k[1]))):
            quota = quota_rows[q["pk"]].get((flavor, resource))
            used = usage.get((name, flavor), [0, 0, 0])[RESOURCES.index(resource)]
            is_governed = governed(flavor, resource)
            own_units: int | None = None
            borrowed = lent_units = Fraction(0)
            if name in tree.index and is_governed:
                i, fr = tree.index[name], tree.fr(flavor, RESOURCES.index(resource))
                own_units = tree.nominal[i][fr]
                borrowed = Fraction(max(0, tree.usage[i][fr] - own_units))
                lent_units = lent_by.get((i, fr), Fraction(0))
            elif quota is not None and name in engine_queue:
                found = engine_queue[name].quotas.get((flavor, resource))
                own_units = found.nominal if found else None
            rows.append(
                Row(
                    queue_id=q["pk"],
                    queue=name,
                    team_id=q["team_id"],
                    project_id=q["project_id"],
                    flavor=flavor,
                    resource=resource,
                    nominal=quota["nominal"] if quota else None,
                    borrowing_limit=quota["borrowing_limit"] if quota else None,
                    lending_limit=quota["lending_limit"] if quota else None,
                    own=people(own_units, resource) if own_units is not None and (quota or is_governed) else None,
                    used=people(used, resource),
                    borrowed=people(borrowed, resource),
                    lent=people(lent_units, resource),
                    pending=people(demand.get((name, flavor, resource), 0), resource),
                    governed=is_governed,
                )
            )

    cohorts = _cohort_tree(organization, tree, cohort_quota_rows, usage, queues, lent_by, governed)
    return Usage(rows=rows, cohorts=cohorts, flavors=every_flavor)


def team_usage(team: Team) -> list[Row]:
    """The rows of ``team``'s queues (judged within its whole organization: lending crosses teams)."""
    return organization_usage(team.organization).of_team(team.pk)


def _cohort_tree(
    organization: Organization,
    tree: QuotaTree,
    quota_rows: dict[int, dict[tuple[str, str], dict[str, Any]]],
    usage: dict[tuple[str, str], list[int]],
    queues: list[dict[str, Any]],
    lent_by: dict[tuple[int, int], Fraction],
    governed: Callable[[str, str], bool],
) -> list[CohortNode]:
    cohorts = list(Cohort.objects.filter(organization=organization).values("pk", "name", "parent_id", "parent__name"))
    nodes = {c["pk"]: CohortNode(c["pk"], c["name"]) for c in cohorts}
    roots: list[CohortNode] = []
    for c in sorted(cohorts, key=lambda c: c["name"]):
        parent = nodes.get(c["parent_id"]) if c["parent_id"] else None
        (parent.children if parent else roots).append(nodes[c["pk"]])
    for q in queues:
        if q["cohort_id"] in nodes:
            nodes[q["cohort_id"]].queues.append(q["name"])

    # What the queues below each cohort use: every tree node's subtree, queues at its leaves.
    below: dict[int, list[int]] = defaultdict(list)
    for i, is_queue in enumerate(tree.is_queue):
        if is_queue:
            node: int | None = i
            while node is not None:
                below[node].append(i)
                node = tree.parent[node]
    queue_names = tree.names

    for c in cohorts:
        name = c["name"]
        at = tree.index.get(name)
        keys = set(quota_rows[c["pk"]])
        if at is not None:
            for (queue, flavor), total in usage.items():
                if queue in tree.index and tree.index[queue] in below[at]:
                    keys |= {(flavor, r) for r, amount in zip(RESOURCES, total, strict=True) if amount}
            # Every governed column its subtree brings a pool of.
            keys |= {
                (flavor, resource)
                for flavor in tree.flavors
                for r, resource in enumerate(RESOURCES)
                if tree.covered[tree.fr(flavor, r)] and tree.subtree[at][tree.fr(flavor, r)]
            }
        keys = {k for k in keys if k in quota_rows[c["pk"]] or governed(*k)}
        for flavor, resource in sorted(keys, key=lambda k: (k[0], RESOURCES.index(k[1]))):
            quota = quota_rows[c["pk"]].get((flavor, resource))
            r = RESOURCES.index(resource)
            used = (
                sum(usage.get((queue_names[q], flavor), [0, 0, 0])[r] for q in below.get(at, []))
                if at is not None
                else 0
            )
            pool = borrowed = 0
            lent_units = Fraction(0)
            if at is not None and governed(flavor, resource):
                fr = tree.fr(flavor, r)
                pool = tree.subtree[at][fr]
                borrowed = max(0, tree.usage[at][fr] - pool)
                lent_units = lent_by.get((at, fr), Fraction(0))
            nodes[c["pk"]].rows.append(
                CohortRow(
                    cohort_id=c["pk"],
                    cohort=name,
                    parent=c["parent__name"],
                    flavor=flavor,
                    resource=resource,
                    nominal=quota["nominal"] if quota else None,
                    borrowing_limit=quota["borrowing_limit"] if quota else None,
                    lending_limit=quota["lending_limit"] if quota else None,
                    pool=people(pool, resource),
                    used=people(used, resource),
                    borrowed=people(borrowed, resource),
                    lent=people(lent_units, resource),
                )
            )
    return roots


__all__ = ["CohortNode", "CohortRow", "Row", "Usage", "organization_usage", "team_usage"]
