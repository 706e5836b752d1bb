"""Hierarchical quota with borrowing and lending: Kueue's cohort-tree arithmetic (docs/scheduling.md
§Quotas and borrowing).

Each tree node (a team queue or a cohort) holds, per (flavor, resource), a nominal quota and optional
borrowing and lending limits. A node's *subtree quota* is what it and its children bring to the tree;
the part it never lends is its *local* quota. Usage climbs the tree only beyond a node's local quota,
so a queue's unlendable quota can never be used by anyone else.

All amounts are ints (milli-accelerators, millicores, MiB), so the arithmetic is exact. The tree is
small (tens of nodes), so plain lists beat numpy here.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from enum import IntEnum

from .model import RESOURCES, Cohort, Queue, Quota


class Mode(IntEnum):
    """How a request fits a queue's quota, best first (the order matters: ``max`` picks the worst)."""

    FIT = 0  # fits in what is available now
    PREEMPT = 1  # fits the queue's potential, but only after something is preempted or finishes
    NO_FIT = 2  # more than the queue could ever get


class QuotaTree:
    """Quota state of every queue and cohort; mutated as the cycle admits and preempts."""

    def __init__(self, cohorts: Sequence[Cohort], queues: Sequence[Queue], flavors: Iterable[str]) -> None:  # noqa: C901
        self.flavors = sorted(set(flavors))
        self.flavor_index = {f: i for i, f in enumerate(self.flavors)}
        n_fr = len(self.flavors) * len(RESOURCES)
        self.names: list[str] = [c.name for c in cohorts] + [q.name for q in queues]
        self.index = {name: i for i, name in enumerate(self.names)}
        if len(self.index) != len(self.names):
            raise ValueError("queue and cohort names must be unique")
        self.is_queue = [False] * len(cohorts) + [True] * len(queues)
        parents = [c.parent for c in cohorts] + [q.cohort for q in queues]
        self.parent: list[int | None] = []
        for name, parent in zip(self.names, parents, strict=True):
            if parent is not None and parent not in self.index:
                raise ValueError(f"{name}: unknown cohort {parent!r}")
            if parent is not None and self.is_queue[self.index[parent]]:
                raise ValueError(f"{name}: parent {parent!r} is a queue, not a cohort")
            self.parent.append(None if parent is None else self.index[parent])
        self.children: list[list[int]] = [[] for _ in self.names]
        for i, p in enumerate(self.parent):
            if p is not None:
                self.children[p].append(i)
        self.nominal = [[0] * n_fr for _ in self.names]
        self.borrow: list[list[int | None]] = [[None] * n_fr for _ in self.names]
        self.lend: list[list[int | None]] = [[None] * n_fr for _ in self.names]
        #: (flavor, resource) columns that some queue or cohort sets a quota for. The others are not
        #: governed: a fleet that only rations accelerators need not write CPU and memory quotas.
        self.covered = [False] * n_fr
        for i, quotas in enumerate([c.quotas for c in cohorts] + [q.quotas for q in queues]):
            for (flavor, resource), quota in quotas.items():
                if flavor not in self.flavor_index:
                    continue  # quota for a flavor no node offers: harmless, nothing can use it
                if resource not in RESOURCES:
                    raise ValueError(f"unknown resource {resource!r}; expected one of {RESOURCES}")
                fr = self.fr(flavor, RESOURCES.index(resource))
                self._set(i, fr, quota)
                self.covered[fr] = True
        self._covered = [fr for fr in range(n_fr) if self.covered[fr]]
        self._lendable: dict[int, list[int]] = {}
        self._frs = {
            f: [(r, b + r) for r in range(len(RESOURCES)) if self.covered[b + r]]
            for f, b in ((f, i * len(RESOURCES)) for f, i in self.flavor_index.items())
        }
        self.depth = [self._depth(i) for i in range(len(self.names))]
        self.subtree = [[0] * n_fr for _ in self.names]
        self.local = [[0] * n_fr for _ in self.names]
        for i in sorted(range(len(self.names)), key=lambda i: -self.depth[i]):  # leaves first
            for fr in range(n_fr):
                sq = self.nominal[i][fr] + sum(self.subtree[c][fr] - self.local[c][fr] for c in self.children[i])
                self.subtree[i][fr] = sq
                lend = self.lend[i][fr]
                self.local[i][fr] = max(0, sq - lend) if lend is not None else 0
        # Potential depends on quotas only, never on usage: compute it once, parents first.
        self.potential_of = [[0] * n_fr for _ in self.names]
        for i in sorted(range(len(self.names)), key=lambda i: self.depth[i]):
            p = self.parent[i]
            for fr in range(n_fr):
                if p is None:
                    total = self.subtree[i][fr]
                else:
                    total = self.local[i][fr] + self.potential_of[p][fr]
                    borrow = self.borrow[i][fr]
                    if borrow is not None:
                        total = min(total, self.subtree[i][fr] + borrow)
                self.potential_of[i][fr] = max(0, total)
        self.usage = [[0] * n_fr for _ in self.names]

    def _set(self, i: int, fr: int, quota: Quota) -> None:
        if quota.nominal < 0 or (quota.borrowing_limit or 0) < 0 or (quota.lending_limit or 0) < 0:
            raise ValueError(f"{self.names[i]}: quotas and limits must not be negative")
        self.nominal[i][fr] = quota.nominal
        self.borrow[i][fr] = quota.borrowing_limit
        self.lend[i][fr] = quota.lending_limit

    def _depth(self, i: int) -> int:
        depth, seen = 0, {i}
        while (p := self.parent[i]) is not None:
            if p in seen:
                raise ValueError(f"cohort cycle through {self.names[p]!r}")
            seen.add(p)
            depth, i = depth + 1, p
        return depth

    def fr(self, flavor: str, resource: int) -> int:
        """Column of a (flavor, resource) pair."""
        return self.flavor_index[flavor] * len(RESOURCES) + resource

    def frs(self, flavor: str) -> list[tuple[int, int]]:
        """(resource, column) pairs of the governed resources of a flavor."""
        return self._frs[flavor]

    def root(self, i: int) -> int:
        while (p := self.parent[i]) is not None:
            i = p
        return i

    # ------------------------------------------------------------------------------------ the arithmetic

    def available(self, i: int, fr: int) -> int:
        p = self.parent[i]
        if p is None:
            return max(0, self.subtree[i][fr] - self.usage[i][fr])
        local = self.local[i][fr]
        local_avail = max(0, local - self.usage[i][fr])
        from_parent = self.available(p, fr)
        borrow = self.borrow[i][fr]
        if borrow is not None:
            stored = self.subtree[i][fr] - local
            used_in_parent = max(0, self.usage[i][fr] - local)
            from_parent = min(from_parent, stored - used_in_parent + borrow)
        return max(0, local_avail + from_parent)

    def potential(self, i: int, fr: int) -> int:
        """The most this node could ever use of a (flavor, resource) if everything else were idle."""
        return self.potential_of[i][fr]

    def add(self, i: int, fr: int, amount: int) -> None:
        node: int | None = i
        while node is not None and amount > 0:
            local_avail = max(0, self.local[node][fr] - self.usage[node][fr])
            self.usage[node][fr] += amount
            amount -= local_avail
            node = self.parent[node]

    def remove(self, i: int, fr: int, amount: int) -> None:
        node: int | None = i
        while node is not None and amount > 0:
            stored = self.usage[node][fr] - self.local[node][fr]
            self.usage[node][fr] -= amount
            amount = min(amount, stored)
            node = self.parent[node]

    # --------------------------------------------------------------------------------- questions asked

    def classify(self, queue: int, flavor: str, request: Sequence[int]) -> Mode:
        """Fit / Preempt / NoFit of a request (accelerator, cpu, memory) against a queue's quota."""
        mode = Mode.FIT
        for resource, fr in self.frs(flavor):
            amount = request[resource]
            if amount <= 0:
                continue
            if amount > self.potential(queue, fr):
                return Mode.NO_FIT
            if amount > self.available(queue, fr):
                mode = Mode.PREEMPT
        return mode

    def borrowing_level(self, queue: int, flavor: str, request: Sequence[int]) -> int:
        """0 when the request fits the queue's own quota, else how many levels up the borrowing reaches."""
        level, node = 0, queue
        while True:
            if all(
                self.usage[node][fr] + request[r] <= self.subtree[node][fr]
                for r, fr in self.frs(flavor)
                if request[r] > 0
            ):
                return level
            parent = self.parent[node]
            if parent is None:
                return level + 1
            level, node = level + 1, parent

    def charge(self, queue: int, flavor: str, request: Sequence[int], sign: int = 1) -> None:
        for r, fr in self.frs(flavor):
            if request[r]:
                (self.add if sign > 0 else self.remove)(queue, fr, request[r])

    def charge_running(self, usage: Mapping[tuple[str, str], Sequence[int]]) -> None:
        """Charge the running work's totals per (queue, flavor); queues or flavors the tree does not know are
        skipped. Charging a queue's total at once is exact: the tree's additions compose."""
        for (queue, flavor), total in sorted(usage.items()):
            if queue in self.index and flavor in self.flavor_index:
                self.charge(self.index[queue], flavor, total)

    def over_potential(self) -> bool:
        """True when some node uses more of a governed column than it could ever hold (a quota was lowered
        below usage); see ``over_quota.py``. One comparison per node and column: cheap enough for every cycle."""
        covered = self._covered
        return any(u[fr] > p[fr] for u, p in zip(self.usage, self.potential_of, strict=True) for fr in covered)

    def over_nominal(self, queue: int, flavor: str) -> bool:
        """True when the queue uses more than its own nominal quota of the flavor (it is borrowing)."""
        return any(self.usage[queue][fr] > self.nominal[queue][fr] for _, fr in self.frs(flavor))

    def share(self, i: int, flavor: str | None = None, request: Sequence[int] = (0, 0, 0)) -> float:
        """Dominant resource share (Kueue's DRS, 0-1000): how much of its parent's lendable capacity the
        node borrows, on its most-borrowed resource, optionally with ``request`` added in ``flavor``."""
        p = self.parent[i]
        if p is None:
            return 0.0
        borrowed = [0] * len(RESOURCES)
        lendable = self._lendable.get(p)
        if lendable is None:  # potential is fixed for the cycle, so the parent's lendable total is too
            lendable = self._lendable[p] = [0] * len(RESOURCES)
            for fr in self._covered:
                lendable[fr % len(RESOURCES)] += self.potential(p, fr)
        extra_base = -1 if flavor is None else self.flavor_index[flavor] * len(RESOURCES)
        usage, subtree = self.usage[i], self.subtree[i]
        for fr in self._covered:
            over = usage[fr] - subtree[fr]
            if fr - fr % len(RESOURCES) == extra_base:
                over += request[fr % len(RESOURCES)]
            if over > 0:
                borrowed[fr % len(RESOURCES)] += over
        best = 0.0
        for r in range(len(RESOURCES)):
            if borrowed[r]:
                best = max(best, 1000.0 * borrowed[r] / lendable[r]) if lendable[r] else float("inf")
        return best
