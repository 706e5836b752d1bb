"""What a cycle remembers of why jobs could not start: a ``Verdict`` per job shape, and ``Failures``, the cache
that lets a job like one that failed fail at once (docs/scheduling.md §Bounded work and speed).

Within a cycle capacity only shrinks, usage only grows and reservations only add up, so a job like one that
failed, asking at least as much CPU, memory and time, fails too (Armada's scheduling keys, with dominance).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Generic, TypeVar

from .model import Job, PendingReason

#: Reasons that mean "not now" for lack of nodes (as opposed to quota, or "never").
CAPACITY_REASONS = (PendingReason.CAPACITY, PendingReason.BACKFILL_BLOCKED, PendingReason.MAINTENANCE)
INF = float("inf")
#: The least a job must ask for to fail like one that failed: (CPU, memory, time limit, price limit).
Floor = tuple[int, int, int, float]
T = TypeVar("T")


@dataclass(slots=True)
class Verdict:
    """Why a job could not start, per the first flavor that explains it best."""

    reason: PendingReason
    flavor: str | None
    facts: Mapping[str, object]
    reservable: str | None = None  # a flavor whose quota fits but whose nodes are busy
    message: str = ""  # filled on first use; identical jobs share it
    estimate: float | None = None
    estimated: bool = False
    settled: bool = False  # nothing left to do for jobs with this verdict but pend them (``run``)
    refused: bool = False  # ``Pending.refused``


class Failures(Generic[T]):
    """What failed this cycle, by job shape. Within a cycle free capacity only shrinks, usage only grows
    and reservations only add up, so a job that asks for at least as much CPU, memory and time as one that
    failed, with no higher price limit, fails the same way (Armada's scheduling keys, with dominance)."""

    def __init__(self) -> None:
        self.known: dict[tuple[object, ...], list[tuple[int, int, int, float, T]]] = {}

    @staticmethod
    def price(job: Job) -> float:
        return job.max_price_per_hour if job.max_price_per_hour is not None else INF

    @staticmethod
    def floor(job: Job) -> Floor:
        """The job itself as a failure: only jobs asking at least as much fail like it."""
        return (job.cpu, job.memory, job.time_limit, Failures.price(job))

    def get(self, key: tuple[object, ...], job: Job) -> T | None:
        known = self.known.get(key)
        if not known:
            return None
        price = self.price(job)
        for i, (cpu, memory, limit, max_price, value) in enumerate(known):
            if job.cpu >= cpu and job.memory >= memory and job.time_limit >= limit and price <= max_price:
                if i:  # the failure that matched is likely to match the next job too: try it first
                    known.insert(0, known.pop(i))
                return value
        return None

    def put(self, key: tuple[object, ...], floor: Floor, value: T) -> None:
        """Record a failure of every job asking at least ``floor``; it replaces the ones it covers (keeping
        the list short and most general)."""
        entry = (*floor, value)
        known = [
            k
            for k in self.known.get(key, [])
            if not (k[0] >= entry[0] and k[1] >= entry[1] and k[2] >= entry[2] and k[3] <= entry[3])
        ]
        if len(known) < 16:
            known.append(entry)
        self.known[key] = known


def all_flavors(first: Verdict, verdicts: list[Verdict]) -> Mapping[str, object]:
    """``first``'s facts, naming every flavor tried that failed for the same reason (the types the job
    chose, or all its queue may use), not the first alone: a job that picked no type is not told about
    one type it never picked. Where the largest node was measured, it is the largest of them all."""
    same = [v for v in verdicts if v.reason is first.reason and v.flavor]
    if len(same) < 2:
        return first.facts
    facts = {**first.facts, "flavors": " or ".join(dict.fromkeys(str(v.flavor) for v in same))}
    if "largest_raw" in first.facts:
        largest = max(same, key=lambda v: int(str(v.facts["largest_raw"])))
        facts.update(largest=largest.facts["largest"], largest_raw=largest.facts["largest_raw"])
    return facts
