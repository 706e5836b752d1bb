"""Kueue's hierarchical quota (docs/scheduling.md §Quotas and borrowing), recomputed from scratch for the
invariant checker.

Written independently of the engine on purpose: the checker must not share a bug with what it checks.
It only needs usage and limits, never "available" or "potential", because a limit is a plain inequality
per tree node: ``usage_n <= SQ_n + borrowLimit_n`` where a borrow limit is set, and ``usage <= SQ`` at the
root. Kueue's available/potential formulas are these same inequalities unrolled along the path to the root.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass

from scheduler.engine.model import RESOURCES, Assignment, Quota, Quotas, Snapshot

#: (flavor, resource), the key of every quota entry.
Key = tuple[str, str]
#: A tree node: ("queue", name) or ("cohort", name); the kinds keep a queue and a cohort of one name apart.
TreeNode = tuple[str, str]

_ZERO = Quota(nominal=0)


def usage_by_key(flavor: str, assignments: Iterable[Assignment]) -> dict[Key, int]:
    """Quota usage of a placement (the rule of ``Workload.usage``), its non-zero entries only."""
    accel = cpu = memory = 0
    for a in assignments:
        accel += sum(milli for _, milli in a.accels)
        cpu += a.cpu
        memory += a.memory
    amounts = dict(zip(RESOURCES, (accel, cpu, memory), strict=True))
    return {(flavor, r): v for r, v in amounts.items() if v}


def queue_node(name: str) -> TreeNode:
    return ("queue", name)


def cohort_node(name: str) -> TreeNode:
    return ("cohort", name)


def describe(node: TreeNode) -> str:
    return f"{node[0]} {node[1]!r}"


@dataclass(frozen=True, slots=True)
class Bound:
    """The one inequality a tree node has to keep for a key: ``usage <= limit``."""

    limit: int
    why: str


class QuotaTree:
    """The cohort tree of a snapshot with the usage of its queues; usage changes as the replay admits jobs."""

    def __init__(self, snapshot: Snapshot) -> None:
        self.quotas: dict[TreeNode, Quotas] = {}
        self.parent: dict[TreeNode, TreeNode | None] = {}
        self.children: dict[TreeNode, list[TreeNode]] = defaultdict(list)
        for cohort in snapshot.cohorts:
            self.quotas[cohort_node(cohort.name)] = cohort.quotas
        for cohort in snapshot.cohorts:
            parent = cohort_node(cohort.parent) if cohort.parent is not None else None
            self._attach(cohort_node(cohort.name), parent)
        for queue in snapshot.queues:
            self.quotas[queue_node(queue.name)] = queue.quotas
            self._attach(queue_node(queue.name), cohort_node(queue.cohort) if queue.cohort is not None else None)
        self._reject_cycles()
        #: (flavor, resource) pairs that some queue or cohort sets a quota for; see ``governed``.
        self.covered: set[Key] = {key for quotas in self.quotas.values() for key in quotas}
        #: Usage of every queue: {(queue, (flavor, resource)): amount}.
        self.queue_usage: dict[tuple[str, Key], int] = defaultdict(int)
        self._sq: dict[tuple[TreeNode, Key], int] = {}

    def _attach(self, node: TreeNode, parent: TreeNode | None) -> None:
        # A cohort that is only named (by a queue or as a parent) exists with no quota of its own, as in Kueue.
        if parent is not None and parent not in self.quotas:
            self.quotas[parent] = {}
            self.parent[parent] = None
        self.parent[node] = parent
        if parent is not None:
            self.children[parent].append(node)

    def _reject_cycles(self) -> None:
        for start in self.parent:
            seen = {start}
            node = self.parent[start]
            while node is not None:
                if node in seen:
                    raise AssertionError(f"snapshot: the cohort tree has a cycle through {describe(node)}")
                seen.add(node)
                node = self.parent.get(node)

    def governed(self, key: Key) -> bool:
        """Whether quota limits a (flavor, resource) at all.

        A missing entry is a nominal of 0, except that a pair no queue or cohort in the whole snapshot names
        is not rationed (a fleet that only rations accelerators need not write CPU and memory quotas). This
        is the engine's documented rule (``scheduler/engine/quota.py``, ``QuotaTree.covered``).
        """
        return key in self.covered

    def quota(self, node: TreeNode, key: Key) -> Quota:
        return self.quotas.get(node, {}).get(key, _ZERO)

    def path(self, queue: str) -> list[TreeNode]:
        """The queue and its ancestors, up to the root."""
        nodes: list[TreeNode] = []
        node: TreeNode | None = queue_node(queue)
        while node is not None:
            nodes.append(node)
            node = self.parent.get(node)
        return nodes

    def root(self, queue: str) -> TreeNode:
        return self.path(queue)[-1]

    def subtree_quota(self, node: TreeNode, key: Key) -> int:
        """SQ: a queue's nominal; a cohort's own nominal plus Σ children (SQ_c - local_c)."""
        cached = self._sq.get((node, key))
        if cached is None:
            cached = self.quota(node, key).nominal
            if node[0] == "cohort":
                cached += sum(self.subtree_quota(c, key) - self.local(c, key) for c in self.children[node])
            self._sq[(node, key)] = cached
        return cached

    def local(self, node: TreeNode, key: Key) -> int:
        """Quota that is never lent: max(0, SQ - lendLimit) with a lend limit, else 0."""
        lend = self.quota(node, key).lending_limit
        return 0 if lend is None else max(0, self.subtree_quota(node, key) - lend)

    def potential(self, node: TreeNode, key: Key) -> int:
        """The most a node could ever use: SQ at the root; else min(local + parent's, SQ + borrowLimit)."""
        sq = self.subtree_quota(node, key)
        parent = self.parent[node]
        if parent is None:
            return max(0, sq)
        total = self.local(node, key) + self.potential(parent, key)
        borrow = self.quota(node, key).borrowing_limit
        if borrow is not None:
            total = min(total, sq + borrow)
        return max(0, total)

    def usage(self, node: TreeNode, key: Key) -> int:
        """A queue's admitted requests; a cohort's Σ children max(0, usage_c - local_c)."""
        if node[0] == "queue":
            return self.queue_usage[(node[1], key)]
        return sum(max(0, self.usage(c, key) - self.local(c, key)) for c in self.children[node])

    def bound(self, node: TreeNode, key: Key) -> Bound | None:
        """The limit a node's usage must keep, or None when only its ancestors limit it."""
        sq = self.subtree_quota(node, key)
        if self.parent[node] is None:
            return Bound(sq, f"root subtree quota SQ={sq}")
        borrow = self.quota(node, key).borrowing_limit
        if borrow is None:
            return None
        return Bound(sq + borrow, f"SQ={sq} + borrowing_limit={borrow}")

    def path_usage(self, queue: str, key: Key) -> dict[TreeNode, int]:
        return {node: self.usage(node, key) for node in self.path(queue)}
