"""Elastic pools in the event simulator (docs/scheduling.md §Elastic pools): a pool's nodes are added to the
fleet when the policy asks for them (``Plan.asks``), up after the pool's lead time, given back once idle for its
``idle_release`` seconds, and, for a spot pool, reclaimed at random with a notice. A pool may be asked for up to
its maximum less the nodes it has and those on their way; its monthly budget (months of 30 days from the replay's
start) is kept as the product keeps it: what is left after the month's spend and the nodes' commitments bounds
what new work on its nodes and new nodes may add (``engine.elastic.horizons``). A node costs its accelerators at
the pool's price from when it is up until it is gone, as the product counts a grant's spend.

``Account`` keeps one pool's nodes and money through a run; ``events.Simulation`` moves the nodes in and out.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from decimal import Decimal

from scheduler.engine.elastic import horizons
from scheduler.engine.model import WHOLE, Elastic, Node

#: The simulator's month, for monthly budgets.
MONTH = 30 * 86400.0


@dataclass(frozen=True, slots=True)
class Pool:
    """An elastic pool of the simulation: up to ``max_nodes`` nodes of one shape on ``cluster``."""

    name: str
    cluster: str
    flavor: str
    accelerators: int  # per node
    cpu: int  # millicores per node
    memory: int  # MiB per node
    price_per_accel_hour: float
    lead_time: float  # seconds from an ask until its nodes are up
    max_nodes: int
    idle_release: float = 600.0
    #: What its nodes may cost in a month; None: no limit.
    monthly_budget: float | None = None
    spot: bool = False
    #: A spot pool's reclaims: how often a node is taken back, per node and day, on average, and the notice given.
    reclaims_per_day: float = 0.0
    notice: float = 30.0
    #: Its nodes' domains, one a level of the cluster's topology (a cluster without one: none).
    topology: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if self.accelerators < 1 or self.max_nodes < 0 or self.lead_time < 0 or self.idle_release < 0:
            raise ValueError(f"pool {self.name}: a node needs accelerators, and counts and times cannot be negative")
        if self.reclaims_per_day and not self.spot:
            raise ValueError(f"pool {self.name}: only a spot pool's nodes are reclaimed")

    def node(self, name: str) -> Node:
        """One of its nodes, as the fleet holds it (free = capacity)."""
        return Node(
            name=name,
            cluster=self.cluster,
            flavor=self.flavor,
            accel_free=(WHOLE,) * self.accelerators,
            cpu_free=self.cpu,
            memory_free=self.memory,
            cpu_capacity=self.cpu,
            memory_capacity=self.memory,
            price_per_accel_hour=self.price_per_accel_hour,
            spot=self.spot,
            topology=self.topology,
        )

    @property
    def node_hour(self) -> Decimal:
        return Decimal(str(self.price_per_accel_hour)) * self.accelerators


@dataclass(slots=True)
class Account:
    """One pool through a run: its nodes asked for, up and gone, and what they cost."""

    pool: Pool
    #: Nodes asked for and not up yet: (when they are up, how many, how long each is held once up).
    coming: list[tuple[float, int, float]] = field(default_factory=list)
    #: Its nodes up now, and since when.
    up: dict[str, float] = field(default_factory=dict)
    #: Its nodes gone: (up since, gone at).
    spans: list[tuple[float, float]] = field(default_factory=list)
    made: int = 0
    asked: int = 0
    released: int = 0
    reclaimed: int = 0

    @property
    def on_the_way(self) -> int:
        return sum(n for _, n, _ in self.coming)

    def spent(self, start: float, end: float) -> Decimal:
        """What its nodes cost between ``start`` and ``end``."""
        seconds = sum(max(0.0, min(gone, end) - max(since, start)) for since, gone in self.spans)
        seconds += sum(max(0.0, end - max(since, start)) for since in self.up.values())
        return self.pool.node_hour * Decimal(str(seconds)) / 3600

    def room(self) -> int:
        """How many more nodes it may be asked for now."""
        return max(0, self.pool.max_nodes - len(self.up) - self.on_the_way)

    def left(self, now: float, held: dict[str, float]) -> float | None:
        """What its budget has left for more: the month's budget less what the month's spend so far, and its
        nodes, up (``held``: until when each is paid for) and on their way, are committed to. None: no budget."""
        pool = self.pool
        if pool.monthly_budget is None:
            return None
        rate = pool.node_hour / 3600
        committed = sum(max(0.0, until - now) for until in held.values())
        committed += sum(n * hold for _, n, hold in self.coming)
        month = now - now % MONTH
        return float(Decimal(str(pool.monthly_budget)) - self.spent(month, now) - rate * Decimal(str(committed)))

    def engine(self, now: float, held: dict[str, float], longest: float) -> tuple[Elastic, dict[str, float]]:
        """The pool as the engine reads it, with how long new work may run on each of its nodes (``held``: until
        when each is paid for; ``longest``: the longest time limit of the work waiting)."""
        pool = self.pool
        reach, left = horizons(held, now, pool.idle_release, longest, float(pool.node_hour), self.left(now, held))
        spec = Elastic(
            pool.name,
            pool.cluster,
            pool.flavor,
            pool.accelerators,
            pool.cpu,
            pool.memory,
            pool.price_per_accel_hour,
            pool.lead_time,
            self.room(),
            spot=pool.spot,
            coming=self.on_the_way,
            coming_at=max((at for at, _, _ in self.coming), default=0.0),
            left=left,
            idle_release=pool.idle_release,
        )
        return spec, reach

    def ask(self, count: int, now: float, hold: float) -> float:
        """Ask for ``count`` nodes, each held ``hold`` seconds once up; when they will be up. ValueError if that is
        more than it may be asked for."""
        if count < 1 or count > self.room():
            raise ValueError(f"pool {self.pool.name} may be asked for {self.room()} nodes now, not {count}")
        self.asked += count
        at = now + self.pool.lead_time
        self.coming.append((at, count, hold))
        return at

    def arrive(self, now: float) -> list[str]:
        """The nodes due up by ``now``, named, now up."""
        due = sum(n for at, n, _ in self.coming if at <= now)
        self.coming = [c for c in self.coming if c[0] > now]
        names = [f"{self.pool.name}-{self.made + k:04d}" for k in range(due)]
        self.made += due
        for name in names:
            self.up[name] = now
        return names

    def gone(self, name: str, now: float, *, reclaimed: bool = False) -> None:
        self.spans.append((self.up.pop(name), now))
        if reclaimed:
            self.reclaimed += 1
        else:
            self.released += 1

    def figures(self, end: float) -> dict[str, float]:
        node_seconds = sum(g - s for s, g in self.spans) + sum(end - s for s in self.up.values())
        months = [self.spent(m * MONTH, (m + 1) * MONTH) for m in range(int(end // MONTH) + 1)]
        return {
            "asked": self.asked,
            "node_hours": round(node_seconds / 3600, 1),
            "cost": float(self.spent(0.0, end).quantize(Decimal("0.01"))),
            "most_in_a_month": float(max(months).quantize(Decimal("0.01"))),
            "released": self.released,
            "reclaimed": self.reclaimed,
        }
