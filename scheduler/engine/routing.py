"""Where a job may go and where it goes: the clusters it may use, the nodes that could take it, one offer per
cluster with room, and the routing score that picks among them (docs/scheduling.md §Flavors and routing); and,
where no placement exists now, why (busy, held for a reservation, closed for maintenance, or never).

A ``Router`` belongs to one cycle and reads its node table, backfill timeline and maintenance windows; what it
derives from them (usable rows, allowed clusters, largest free nodes, capacities) it keeps for the cycle. It
changes nothing but its caches and the spread groups the cycle tells it of (``spread_add``): the cycle takes
capacity itself when it admits.

Spread groups (a service's replicas, ``Job.spread_group``): a one-worker job of a group is placed on a node none
of its group holds (running, or admitted earlier in the cycle) where one has room, else where it fits (soft
anti-affinity); among clusters whose routing scores tie, the one holding fewest of its group wins.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, replace

import numpy as np

from . import explain
from .backfill import Timeline
from .fgd import Fragmentation, Shape
from .maintenance import Maintenance
from .model import (
    REFUSED,
    WHOLE,
    Assignment,
    Booking,
    Config,
    Job,
    PendingReason,
    Queue,
    Topology,
    TopologyMode,
)
from .nodes import ANY_REACH, FreeState, IntArray, NodeTable, Reach
from .placement import (
    Holds,
    accelerator_slots,
    can_spread,
    head_row,
    held_fits,
    lacks_level,
    pick_single,
    spread,
    with_head,
    worker_fits,
)
from .running import RunningWork
from .verdicts import INF, Failures, Floor, Verdict


@dataclass(frozen=True, slots=True)
class Placement:
    cluster: int
    flavor: str
    assignments: tuple[Assignment, ...]
    cost_per_hour: float


#: A cluster's offer for a job: (cluster, [(row, workers)], first accelerator slot, fit 0-1, cost per hour,
#: fragmentation increase, the head's row or -1).
#: The increase in fragmentation (FGD) is there when it was scored; it then measures the fit across clusters.
Option = tuple[int, list[tuple[int, int]], int, float, float, float | None, int]


class Router:
    def __init__(
        self,
        table: NodeTable,
        config: Config,
        now: float,
        work: RunningWork,
        maintenance: Maintenance,
        timeline: Timeline,
        fragmentation: Fragmentation | None,
    ) -> None:
        self.table, self.config, self.now = table, config, now
        self.maintenance, self.timeline, self.fragmentation = maintenance, timeline, fragmentation
        #: Per spread group, the rows of the nodes its jobs hold and how many of them each cluster runs.
        self.spread_rows: defaultdict[str, set[int]] = defaultdict(set)
        self.spread_clusters: defaultdict[str, defaultdict[int, int]] = defaultdict(lambda: defaultdict(int))
        for w in work.workloads:
            if w.spread_group:
                self.spread_add(w.spread_group, w.assignments)
        self._usable_rows: dict[tuple[str, int, Reach], IntArray] = {}
        self._allowed: dict[tuple[object, ...], list[int]] = {}
        self._capacity: dict[tuple[int, int, Reach], int] = {}
        self._largest_free: dict[tuple[int, int, int, Reach], tuple[int, ...]] = {}
        self._ever: dict[tuple[object, ...], bool] = {}
        self._gang_fits: dict[tuple[object, ...], bool] = {}
        self._largest: dict[tuple[object, ...], tuple[int, int]] = {}

    def allowed_clusters(self, job: Job, flavor: str) -> list[int]:
        """The clusters with nodes of ``flavor`` that the job allows, that can run its program and that it is
        not excluded from. Every placement, estimate and victim search chooses among these."""
        key = (flavor, job.clusters, job.regions, job.needs, job.excluded)
        allowed = self._allowed.get(key)
        if allowed is None:
            excluded = {name for name, _ in job.excluded}
            allowed = [
                c
                for c in self.wanted_clusters(job, flavor)
                if not self.table.clusters[c].refuses(job.needs) and self.table.clusters[c].name not in excluded
            ]
            self._allowed[key] = allowed
        return allowed

    def wanted_clusters(self, job: Job, flavor: str) -> list[int]:
        """The clusters with nodes of ``flavor`` in the job's clusters and regions, whatever they run."""
        return [
            c
            for c in self.table.clusters_of(flavor)
            if (not job.clusters or self.table.clusters[c].name in job.clusters)
            and (not job.regions or self.table.clusters[c].region in job.regions)
        ]

    def ruled_out(self, job: Job, queue: Queue) -> list[explain.RuledOut]:
        """Each cluster that offers one of the job's flavors in its clusters and regions but cannot run its
        program or is excluded from it, by name; empty when there is no such cluster."""
        excluded = dict(job.excluded)
        ruled_out: dict[str, explain.RuledOut] = {}
        for flavor in queue.flavors:
            if job.flavors and flavor not in job.flavors:
                continue
            for c in self.wanted_clusters(job, flavor):
                cluster = self.table.clusters[c]
                why = excluded.get(cluster.name, "")
                if why.startswith(REFUSED):  # the cluster's own words explain best
                    ruled_out[cluster.name] = (cluster.name, why, True)
                elif cluster.refuses(job.needs):
                    ruled_out[cluster.name] = (cluster.name, cluster.refuses(job.needs), True)
                elif why:
                    ruled_out[cluster.name] = (cluster.name, why, False)
        return [ruled_out[name] for name in sorted(ruled_out)]

    def may_fit(
        self,
        state: FreeState,
        shape: Shape,
        workers: int,
        flavor: str,
        cluster: int,
        reach: Reach = ANY_REACH,
    ) -> bool:
        """A quick test from each (flavor, cluster)'s largest free node and total free accelerators, in
        the free state now or with every node idle: False means no placement exists there; True means
        look. Most jobs that fail now fail here, for a fraction of the cost of looking; and for one
        worker that asks only for accelerators, True is the answer."""
        f = self.table.flavor_index[flavor]
        version = int(self.table.group_version[f, cluster]) if state is self.table.free else -1
        known = self._largest_free.get((id(state), f, cluster, reach))
        if known is None or known[0] != version:
            rows = self.rows(flavor, cluster, reach)
            whole = state.whole[rows]
            known = self._largest_free[(id(state), f, cluster, reach)] = (
                version,
                int(whole.max()),
                int(state.accel[rows].max()),
                int(state.cpu[rows].max()),
                int(state.memory[rows].max()),
                int(whole.sum()),
            )
        _, whole_max, share_max, cpu_max, memory_max, whole_total = known
        if shape.cpu > cpu_max or shape.memory > memory_max:
            return False
        if shape.milli == WHOLE:
            return shape.accelerators <= whole_max and workers * shape.accelerators <= whole_total
        return shape.accelerators == 0 or shape.milli <= share_max

    def reach(self, job: Job) -> Reach:
        # A time limit of a second is the probes' (``why_no_room``) "whatever its time": past no node's horizon.
        reach = self.table.reach(job.shape, job.team, job.spot, job.time_limit if job.time_limit > 1 else 0)
        if job.team in self.maintenance.booked_for and not reach[1]:  # bookings are open to their team's jobs
            return reach[0], job.team, reach[2], reach[3]
        return reach

    def rows(self, flavor: str, cluster: int, reach: Reach = ANY_REACH) -> IntArray:
        """The candidate nodes of ``flavor`` in ``cluster`` for a job of that ``reach`` (``_reach``: its slice
        shape and, where nodes are lent to it, its team): the usable ones, of that shape, lent to no team or to
        the job's (``NodeTable.shaped``). Every placement, estimate and victim search chooses among these, so
        this is the one place where slices are kept to the jobs that ask for them, and lent nodes to their team."""
        key = (flavor, cluster, reach)
        rows = self._usable_rows.get(key)
        if rows is None:
            all_rows = self.table.rows(flavor, cluster)
            assert all_rows is not None
            rows = self.table.shaped(all_rows[self.table.usable[all_rows]], *reach)
            self._usable_rows[key] = rows
        return rows

    def place(
        self,
        job: Job,
        shape: Shape,
        flavor: str,
        state: FreeState,
        t: float,
        holds: Holds | None,
        *,
        pack: bool = True,
    ) -> Placement | None:
        """The best placement of ``job`` on ``flavor`` in ``state`` (now, or a future time ``t``), or None.

        Every allowed cluster that has room offers one placement; the routing score picks among them.
        """
        options = self._offers(job, shape, flavor, state, t, holds, pack=pack)
        if not options:
            return None
        c, pairs, first, _, cost, _, head = (
            options[0] if len(options) == 1 else self._route(job, flavor, state, options)
        )
        table = self.table
        assignments = tuple(
            Assignment(
                node=table.names[row],
                workers=count,
                accels=tuple(accelerator_slots(state, row, shape, count, first)),
                cpu=count * job.cpu,
                memory=count * job.memory,
            )
            for row, count in sorted(pairs)
        )
        if head >= 0:
            assignments = with_head(table.names[head], assignments, job.head, state.accel[head])
        return Placement(c, flavor, assignments, cost)

    def fits(self, job: Job, flavor: str, state: FreeState, t: float, holds: Holds | None = None) -> bool:
        """Whether ``job`` has a placement on ``flavor`` in ``state``: ``place`` for what-ifs, which need
        neither the best cluster nor the assignments."""
        return bool(self._offers(job, Shape.of(job), flavor, state, t, holds, pack=False, any_one=True))

    def _offers(
        self,
        job: Job,
        shape: Shape,
        flavor: str,
        state: FreeState,
        t: float,
        holds: Holds | None,
        *,
        pack: bool,
        any_one: bool = False,
    ) -> list[Option]:
        """One offer per allowed cluster with room for the job (only the first, given ``any_one``)."""
        end = t + job.time_limit
        total_accel = job.request()[0]
        options: list[Option] = []
        table = self.table
        windows = self._windows(job, state, t)
        for c in self.allowed_clusters(job, flavor):
            rows = self.rows(flavor, c, self.reach(job))
            levels = table.clusters[c].levels
            topology = self._topology_on(job, shape, flavor, c)
            if not len(rows) or lacks_level(levels, topology):
                continue
            closed = windows.closed(c, rows, t, end, job.team) if windows is not None else None
            if closed is not None and closed.all():
                continue
            if state is table.free or state is table.empty:
                if not self.may_fit(state, shape, job.workers, flavor, c, self.reach(job)):
                    continue
                bare = not (shape.cpu or shape.memory or holds or job.has_head) and job.max_price_per_hour is None
                if any_one and job.workers == 1 and bare and closed is None:
                    return [(c, [], -1, 0.0, 0.0, None, -1)]  # exact for this job (see ``may_fit``)
            fits = worker_fits(state, rows, shape)
            if closed is not None:
                fits = np.where(closed, 0, fits)
            if holds is not None:
                fits = held_fits(holds, rows, shape, end, fits)
            if job.max_price_per_hour is not None and total_accel:
                fits = np.where(table.price[rows] * total_accel / WHOLE <= job.max_price_per_hour + 1e-9, fits, 0)
            if any_one and not job.has_head:  # a head is placed after the workers, below
                if (
                    (fits > 0).any()
                    if job.workers == 1
                    else can_spread(table, rows, fits, levels, topology, job.workers)
                ):
                    return [(c, [], -1, 0.0, 0.0, None, -1)]
                continue
            option = self._option(
                job,
                shape,
                flavor,
                state,
                c,
                rows,
                fits,
                pack=pack,
                closed=closed,
                holds=holds,
                end=end,
                topology=topology,
            )
            if option is None:
                continue
            if any_one:
                return [(c, [], -1, 0.0, 0.0, None, -1)]
            options.append(option)
        return options

    def _topology_on(self, job: Job, shape: Shape, flavor: str, c: int) -> Topology | None:
        """The job's topology on cluster ``c``: its own; else, on a cluster whose gangs must not straddle the
        domains of a level (``Cluster.gang_level``: Slurm's topology/block), that level, required, when one
        domain of the idle cluster could hold the whole gang (a bigger gang spans, as Slurm lets it)."""
        level = self.table.clusters[c].gang_level
        if job.topology is not None or job.workers == 1 or not level:
            return job.topology
        levels = self.table.clusters[c].levels
        key = (c, flavor, self.reach(job), shape, job.workers)
        if key not in self._gang_fits:
            rows = self.rows(flavor, c, self.reach(job))
            fits = worker_fits(self.table.empty, rows, shape)
            one = Topology(level, TopologyMode.REQUIRED)
            self._gang_fits[key] = level in levels and can_spread(self.table, rows, fits, levels, one, job.workers)
        return Topology(level, TopologyMode.REQUIRED) if self._gang_fits[key] else None

    def _option(
        self,
        job: Job,
        shape: Shape,
        flavor: str,
        state: FreeState,
        c: int,
        rows: IntArray,
        fits: IntArray,
        *,
        pack: bool,
        closed: np.ndarray | None,
        holds: Holds | None,
        end: float,
        topology: Topology | None,
    ) -> Option | None:
        """Cluster ``c``'s offer for the job, its nodes ``rows`` taking ``fits`` workers each; None: no room."""
        table = self.table
        first, waste = -1, None
        if job.workers == 1:
            taken = self.spread_rows.get(job.spread_group) if job.spread_group else None
            if taken:  # a node none of its group holds, where one has room (soft)
                apart = np.where(np.isin(rows, np.fromiter(taken, np.int64, len(taken))), 0, fits)
                fits = apart if (apart > 0).any() else fits
            frag = self.fragmentation if pack and state is table.free else None
            picked = pick_single(state, rows, fits, shape, frag, (table.flavor_index[flavor], c))
            if picked is None:
                return None
            pairs, first, waste = [(picked[0], 1)], picked[1], picked[2]
        else:
            spread_pairs = spread(table, rows, fits, table.clusters[c].levels, topology, job.workers)
            if spread_pairs is None:
                return None
            pairs = spread_pairs
        used = np.array([row for row, _ in pairs])
        counts = np.array([count for _, count in pairs])
        cost = float((table.price[used] * counts).sum()) * job.accel_per_worker / WHOLE
        head = -1
        if job.has_head:  # one more member of the gang, with its own shape
            head = self._head(job, state, rows, pairs, shape, first, closed, holds, end)
            if head < 0:
                return None
            cost += float(table.price[head]) * job.head[0]
            if job.max_price_per_hour is not None and cost > job.max_price_per_hour + 1e-9:
                return None
            used = np.append(used, head)
        capacity = int(table.accel_count[used].sum()) * WHOLE
        left = int(state.accel[used].sum()) - job.request()[0]
        fit = 1.0 - left / capacity if capacity else 1.0
        return (c, pairs, first, fit, cost, waste, head)

    def _head(
        self,
        job: Job,
        state: FreeState,
        rows: IntArray,
        pairs: list[tuple[int, int]],
        shape: Shape,
        first: int,
        closed: np.ndarray | None,
        holds: Holds | None,
        end: float,
    ) -> int:
        """The row for the job's head, its workers being on ``pairs`` (``head_row``), on nodes open to it as
        to the workers (maintenance, reservations); -1 if none has room."""
        head_shape = Shape(job.head[0], WHOLE, job.head[1], job.head[2])
        room = worker_fits(state, rows, head_shape)
        if closed is not None:
            room = np.where(closed, 0, room)
        if holds is not None:
            room = held_fits(holds, rows, head_shape, end, room)
            # Beside its own workers on a held node, the head has the slack they leave: both are checked
            # against a reservation's slack together, never each against all of it.
            for row, count in pairs:
                position = np.flatnonzero(rows == row)
                if len(position) and end > holds.start[row]:
                    left = (
                        int(holds.slack_accel[row]) - count * shape.accelerators * shape.milli,
                        int(holds.slack_cpu[row]) - count * shape.cpu,
                        int(holds.slack_memory[row]) - count * shape.memory,
                    )
                    needs = (head_shape.accelerators * WHOLE, head_shape.cpu, head_shape.memory)
                    if any(have < need for have, need in zip(left, needs, strict=True)):
                        room[position[0]] = 0
        return head_row(state, rows, room, pairs, shape, first, head_shape)

    def _windows(self, job: Job, state: FreeState, t: float) -> Maintenance | None:
        """The maintenance windows that may keep ``job`` off nodes if it starts at ``t`` (None: none do). A
        job does not start on nodes it would still run on when a window starts, unless it is preemptible
        and starts now (the drain before the window stops it gracefully); no reservation is planned across
        a window. An idle fleet (``table.empty``) has no windows: maintenance never makes a job impossible."""
        if not self.maintenance.by_cluster or state is self.table.empty or (job.preemptible and t <= self.now):
            return None
        return self.maintenance

    def _route(self, job: Job, flavor: str, state: FreeState, options: list[Option]) -> Option:
        """Pick a cluster among those that fit: hardware fit, availability, price, locality, preference."""
        config = self.config
        costs = [option[4] for option in options]
        low, high = min(costs), max(costs)
        # Where fragmentation was scored in every cluster, it is the measure of fit: the cluster whose best
        # node fragments least fits best (FGD across clusters as within one).
        wastes = [option[5] for option in options]
        scored = [w for w in wastes if w is not None]
        least, most = (min(scored), max(scored)) if len(scored) == len(wastes) else (0.0, 0.0)
        best: tuple[float, int, int, Option] | None = None
        for option in options:
            c, _, _, fit, cost, waste, _ = option
            if waste is not None and most > least:
                fit = (most - waste) / (most - least)
            cluster = self.table.clusters[c]
            reach = self.reach(job)
            capacity = self._group_capacity(flavor, c, reach)
            available = float(state.accel[self.rows(flavor, c, reach)].sum()) / capacity if capacity else 0.0
            cheap = 1.0 - (cost - low) / (high - low) if high > low else 1.0
            local = 1.0 if job.locality in (cluster.name, cluster.region) else 0.0
            score = (
                config.weight_fit * fit
                + config.weight_availability * available
                + config.weight_price * cheap
                + config.weight_locality * local
                + config.weight_preference * cluster.preference / 100
            )
            # equal scores: the cluster holding fewest of the job's spread group (none without a group)
            together = self.spread_clusters[job.spread_group].get(c, 0) if job.spread_group else 0
            if best is None or (-score, together, c) < best[:3]:
                best = (-score, together, c, option)
        assert best is not None
        return best[3]

    def _group_capacity(self, flavor: str, cluster: int, reach: Reach = ANY_REACH) -> int:
        key = (self.table.flavor_index[flavor], cluster, reach)
        if key not in self._capacity:
            self._capacity[key] = int(self.table.accel_count[self.rows(flavor, cluster, reach)].sum()) * WHOLE
        return self._capacity[key]

    def spread_add(self, group: str, assignments: tuple[Assignment, ...]) -> None:
        rows = [self.table.index[a.node] for a in assignments if a.node in self.table.index]
        self.spread_rows[group].update(rows)
        for c in {int(self.table.cluster[row]) for row in rows}:
            self.spread_clusters[group][c] += 1

    def why_no_room(self, job: Job, flavor: str) -> tuple[Verdict, Floor]:
        """Quota allows the job but no placement exists now: say why (busy, held for a reservation, or
        never), and the least a job of its kind must ask for to fail the same way (``Failures``)."""
        facts: dict[str, object] = {"flavors": flavor}
        free = self.table.free
        if self.maintenance.by_cluster and not job.preemptible:
            clusters = self.allowed_clusters(job, flavor)
            window = self.maintenance.first(clusters, self.now, self.now + job.time_limit, job.team)
            if window is not None and self.fits(
                replace(job, preemptible=True), flavor, free, self.now, self.timeline.holds
            ):
                facts.update(cluster=window.cluster, start=window.start)
                if isinstance(window, Booking):
                    facts.update(booked_by=window.team, booking=window.name)
                return Verdict(PendingReason.MAINTENANCE, flavor, facts), Failures.floor(job)
        if self.timeline.held and self.fits(job, flavor, free, self.now):
            return Verdict(PendingReason.BACKFILL_BLOCKED, flavor, facts), Failures.floor(job)
        # Not the reservations' doing, so the time limit does not matter; if the accelerators alone do not
        # fit, neither CPU, memory nor price matter either.
        bare = replace(job, cpu=0, memory=0, time_limit=1, max_price_per_hour=None, head=(job.head[0], 0, 0))
        anything: Floor = (0, 0, 1, INF)
        room = self.fits(bare, flavor, free, self.now)  # for the accelerators alone
        least = (job.cpu, job.memory, 1, Failures.price(job)) if room else anything
        if not self._ever_fits(bare, flavor):
            reason = PendingReason.TOPOLOGY if job.topology is not None else PendingReason.NEVER_FITS
            if self.table.has_spot and not job.spot and self._ever_fits(replace(bare, spot=True), flavor):
                facts["spot_would"] = True  # only spot nodes could hold it: say that accepting spot would do
            return Verdict(reason, flavor, facts), anything
        cpu, memory = self._largest_node(job, flavor)
        if max(job.cpu, job.head[1]) > cpu or max(job.memory, job.head[2]) > memory:
            return self._host_never_fits(job, flavor, cpu, memory), (job.cpu, job.memory, 1, least[3])
        priced = room and job.max_price_per_hour is not None
        if priced and not self.fits(replace(job, time_limit=1), flavor, self.table.empty, self.now):
            return Verdict(PendingReason.PRICE_LIMIT, flavor, facts), least
        return Verdict(PendingReason.CAPACITY, flavor, facts), least

    @staticmethod
    def _host_never_fits(job: Job, flavor: str, cpu: int, memory: int) -> Verdict:
        """No node of ``flavor`` has the memory (first) or CPU that a worker or the head asks for: which, and
        how much the largest node has, for the field the request got wrong."""
        if job.memory > memory or job.head[2] > memory:
            reason, worker = PendingReason.MEMORY_NEVER_FITS, job.memory > memory
            facts: dict[str, object] = {"largest": f"{memory / 1024:g}", "largest_raw": memory}
        else:
            reason, worker = PendingReason.CPU_NEVER_FITS, job.cpu > cpu
            facts = {"largest": f"{cpu / 1000:g}", "largest_raw": cpu}
        facts.update(flavors=flavor, who="per worker" if worker else "for its Ray head")
        return Verdict(reason, flavor, facts)

    def _ever_fits(self, bare: Job, flavor: str) -> bool:
        """Whether the job's accelerators fit the allowed part of the fleet with every node idle."""
        key = (
            flavor,
            bare.workers,
            bare.accelerators,
            bare.accel_milli,
            bare.head,
            bare.clusters,
            bare.regions,
            bare.topology,
            bare.needs,
            bare.excluded,
            self.reach(bare),  # its slice shape, lent nodes and spot: what decides the nodes it may use
        )
        if key not in self._ever:
            empty = self.table.empty
            self._ever[key] = self.fits(bare, flavor, empty, self.now)
        return self._ever[key]

    def _largest_node(self, job: Job, flavor: str) -> tuple[int, int]:
        """The most CPU and memory any allowed node of the flavor has."""
        reach = (*self.reach(job)[:3], 0)  # whatever its time limit: the nodes' horizons do not matter here
        key = (flavor, job.clusters, job.regions, job.needs, job.excluded, reach)
        if key not in self._largest:
            rows = [self.rows(flavor, c, reach) for c in self.allowed_clusters(job, flavor)]
            every = np.concatenate(rows) if rows else np.zeros(0, np.int64)
            empty = self.table.empty
            self._largest[key] = (int(empty.cpu[every].max()), int(empty.memory[every].max())) if len(every) else (0, 0)
        return self._largest[key]
