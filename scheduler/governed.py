"""What governance reads of the work placed under quotas and budgets: the scheduler's answers to
``governance/placed.py`` (``GOVERNANCE_PLACED`` names this module).

Quota usage is read from the placement engine's own snapshot (``snapshot.build``, a few flat queries for the
whole organization, kept while no cycle applies, 10 s at most: ``feasibility.current_snapshot``) and judged
with the engine's own quota arithmetic (``engine.quota.QuotaTree``, charged with the running work as
``engine.cycle.Cycle`` charges it), so the page says what the next cycle will see; what each figure means is
``governance/usage.py``'s docstring. A budget's month is ``placement/budgets.use_of``'s.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterable
from decimal import Decimal
from fractions import Fraction
from typing import Any

from django.contrib.auth.models import User

from common.types import AuthenticatedHttpRequest
from governance.actions import fairshare
from governance.models import Cohort, Queue, Quota
from governance.usage import RESOURCES, CohortNode, CohortRow, Row, Standing, Usage, people
from scheduler.engine import model as m
from scheduler.engine.fairshare import memory_terms, standings
from scheduler.engine.quota import QuotaTree
from scheduler.models import Job
from scheduler.placement import feasibility
from scheduler.placement.budgets import use_of
from scheduler.queues import queue_context
from scheduler.states import PLACED
from tenancy.models import Organization, Team

__all__ = ["member_holds", "organization_usage", "queue_jobs", "use_of"]

Amounts = dict[tuple[str, str, str], int]  # (queue or cohort name, flavor, resource) -> engine units


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
    return Usage(
        rows=rows, cohorts=cohorts, flavors=every_flavor, standings=_standings(organization, snap, tree, queues)
    )


def _standings(
    organization: Organization, snap: m.Snapshot, tree: QuotaTree, queues: list[dict[str, Any]]
) -> dict[int, Standing]:
    """Each queue's place in fair sharing, with the cycle's own arithmetic (``engine.fairshare``,
    ``Cycle.queue_share``)."""
    engine_queue = {q.name: q for q in snap.queues}
    weight = snap.config.usage_weight
    terms = memory_terms(tree, engine_queue, snap.usage, weight)
    standing = standings(tree, engine_queue, snap.usage)
    setting = fairshare.setting(organization)
    known = [q for q in queues if q["name"] in tree.index]

    def borrowing(name: str) -> float:
        raw, w = tree.share(tree.index[name]), engine_queue[name].weight
        return raw / w if w > 0 else (float("inf") if raw > 0 else 0.0)

    share = {q["name"]: borrowing(q["name"]) + terms[tree.index[q["name"]]] for q in known}
    ranked = sorted(share, key=lambda name: (share[name], name))
    out = {}
    for q in known:
        i = tree.index[q["name"]]
        siblings = (
            tree.children[p]
            if (p := tree.parent[i]) is not None
            else [x for x, up in enumerate(tree.parent) if up is None]
        )
        used = any(standing[x].recent > 0 for x in siblings)
        above = []
        node = tree.parent[i]
        while node is not None:
            s = standing[node]
            if round(s.standing):
                above.append((tree.names[node], s.portion, s.entitlement))
            node = tree.parent[node]
        out[q["pk"]] = Standing(
            queue_id=q["pk"],
            queue=q["name"],
            recent=round(standing[i].recent, 3),
            portion=round(standing[i].portion, 4) if used else None,
            entitlement=round(standing[i].entitlement, 4),
            borrowing=round(borrowing(q["name"]), 1),
            memory=round(terms[i], 1),
            cohorts=tuple(above),
            rank=ranked.index(q["name"]) + 1,
            of=len(ranked),
            half_life=setting.half_life,
            usage_weight=weight,
        )
    return out


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


# ------------------------------------------------------------------------------------------ the rest


def member_holds(team: Team, member: User) -> Decimal:
    """The accelerators ``member``'s placed jobs in ``team`` hold now (as the engine counts a member's limit)."""
    held = Fraction(0)
    placed = Job.objects.filter(team=team, submitted_by=member, state__in=PLACED)
    for workers, accelerators, milli in placed.values_list("workers", "accelerators", "accelerator_milli"):
        held += Fraction(workers * accelerators * milli, 1000)
    return (Decimal(held.numerator) / Decimal(held.denominator)).quantize(Decimal("0.001"))


def queue_jobs(request: AuthenticatedHttpRequest, queue_id: int) -> dict[str, Any]:
    return queue_context(request, queue_id, jobs_only=True)
