"""Quota usage as people read it: per queue, accelerator type and resource, the quota beside what is used, borrowed,
lent and asked for, as the quota pages and the queues API show them. The scheduler makes the rows
(``scheduler/governed.py``, asked through ``placed.organization_usage``): everything is read from the placement
engine's own snapshot (``snapshot.build``, a few flat queries for the whole organization, kept while no cycle
applies, 10 s at most: ``feasibility.current_snapshot``) and judged with the engine's own quota arithmetic
(``engine.quota.QuotaTree``, charged with the running work as ``engine.cycle.Cycle`` charges it), so the page says
what the next cycle will see.

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

from dataclasses import dataclass, field
from decimal import ROUND_HALF_UP, Decimal
from fractions import Fraction

from governance.fairshare import words
from governance.models import Quota

#: ``Quota.Resource``'s names, in the engine's order (``engine.model.RESOURCES``).
RESOURCES = ("accelerator", "cpu", "memory")
THOUSANDTH = Decimal("0.001")
ZERO = Decimal(0)


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


@dataclass(frozen=True, slots=True)
class Standing:
    """Where a queue stands in fair sharing (docs/scheduling.md §Fair sharing), as the next cycle sees it: the
    share the cycle compares (lower goes first, among jobs of one priority tier) is what it borrows now plus
    what its recent use adds."""

    queue_id: int
    queue: str
    #: Decayed accelerator-hours of its recent use.
    recent: float
    #: Of the recent use of the queues beside it (its cohort's, or the top level's), its part; and its fair part
    #: (its weight times its nominal accelerators, over theirs). None: none of them used anything.
    portion: float | None
    entitlement: float
    #: Its weighted dominant resource share now (0-1000: thousandths of its cohort's lendable capacity).
    borrowing: float
    #: What recent use adds to the share: the organization's weight of recent use times the sum of its own
    #: standing and each cohort's above it.
    memory: float
    #: Each cohort above it whose recent use differs from its fair part: (name, its part, its fair part).
    cohorts: tuple[tuple[str, float, float], ...]
    #: Its place among the organization's queues by share (1: first), and how many there are.
    rank: int
    of: int
    half_life: int
    usage_weight: float

    @property
    def share(self) -> float:
        return self.borrowing + self.memory

    @property
    def why(self) -> str:
        """Why it ranks where it does, in words."""
        said = []
        if self.borrowing:
            said.append(f"It borrows {self.borrowing:.0f} thousandths of its cohort's lendable capacity now.")
        else:
            said.append("It borrows nothing now.")
        if self.usage_weight <= 0:
            said.append("Recent use does not count: the organization's weight of recent use is 0.")
        elif self.portion is None:
            said.append("Neither it nor the queues beside it used anything lately, so only borrowing counts.")
        else:
            said.append(
                f"It used {self.portion:.0%} of the recent accelerator-hours of the queues beside it "
                f"(half-life {words(self.half_life)}), against a fair part of {self.entitlement:.0%}."
            )
            for name, portion, entitled in self.cohorts:
                said.append(
                    f"Its cohort {name} used {portion:.0%} of its siblings' against a fair part of {entitled:.0%}."
                )
            if round(self.memory):
                verb = "adds" if self.memory > 0 else "takes"
                said.append(f"That {verb} {abs(self.memory):.0f} {'to' if self.memory > 0 else 'off'} its share.")
        place = "first" if self.rank == 1 else f"{_ordinal(self.rank)}"
        said.append(
            f"Share {self.share:.0f}: its waiting jobs come {place} of {self.of} queues among jobs of one priority "
            "tier (the lower the share, the sooner)."
        )
        return " ".join(said)


def _ordinal(n: int) -> str:
    suffix = "th" if 10 <= n % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{n}{suffix}"


@dataclass(slots=True)
class Usage:
    """An organization's quota usage: rows per queue (in team, queue, flavor, resource order), the cohort
    tree (roots first, with their children), and where each queue stands in fair sharing (by queue id)."""

    rows: list[Row]
    cohorts: list[CohortNode]
    flavors: tuple[str, ...]
    standings: dict[int, Standing] = field(default_factory=dict)

    def of_team(self, team_id: int) -> list[Row]:
        return [row for row in self.rows if row.team_id == team_id]

    def of_queue(self, queue_id: int) -> list[Row]:
        return [row for row in self.rows if row.queue_id == queue_id]


__all__ = ["RESOURCES", "CohortNode", "CohortRow", "Row", "Standing", "Usage", "people"]
