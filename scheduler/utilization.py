"""GPU utilization attributed to jobs: the probes' per-minute samples (``clusters.GpuSample``) read through
the assignments of the attempts that held each node at the time.

**The rule.** An attempt *holds* its GPUs on a node from its admission to its end, as the meter counts
them (``billing/actions/metering.py``). Time is cut into buckets (an hour for billing's monthly sums, a minute or
more for plots). In one bucket of one node:

- ``M`` is the minutes with a reading, ``B`` the busy GPU-minutes (the sum over readings of utilization /
  100): a GPU at 50 % for ten minutes is five busy GPU-minutes;
- ``A`` is the GPU-seconds the attempts held there during the bucket (GPUs x seconds, summed over holds),
  and ``S`` the seconds of the bucket the node was held at all (the longest hold in it);
- ``c = min(1, 60 M / S)`` is the measured part of that time.

The node's allocation was busy ``U = min(1, (B / M) / (A / S))`` of the measured time: the busy GPUs
while it was read over the GPUs held while it was held (rates, so a minute read whole at either end of a
hold counts for no more than the hold's part of it). Every hold on the node in that bucket gets the
same ``U``: where a node is shared by several jobs, the probe cannot tell whose process keeps which GPU
busy (Kubernetes and Slurm choose the devices, not Quartermaster), so the node's busy share is split
evenly over what is held; a GPU nobody holds runs nothing and does not dilute it. A job holding a whole
node alone gets exactly its GPUs' mean utilization, and its per-GPU series are shown as its own.

A hold's measured GPU-seconds in a bucket are its held GPU-seconds times ``c``, and its busy GPU-seconds
those times ``U``. Held time in buckets without any reading is *unmeasured*, never idle.

The reads are two indexed queries: the holds on the nodes (assignments of the attempts overlapping the
window) and the samples of those nodes in the window, grouped in the database by node (and GPU) and
bucket, on the samples' unique index (node, minute, GPU).
"""

from __future__ import annotations

import datetime as dt
from collections import defaultdict
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from django.db import connection
from django.db.models import Q

from clusters.actions.probe import throttle_names
from clusters.models import GpuSample, Node
from scheduler.models import Assignment, Attempt, Job

EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)


@dataclass(frozen=True, slots=True)
class Hold:
    """What one attempt held on one node: ``milli`` thousandths of GPUs from ``start`` to ``end``."""

    attempt: int
    job: int
    node: int
    milli: int
    start: dt.datetime
    end: dt.datetime


@dataclass(frozen=True, slots=True)
class GpuPoint:
    """One GPU of a node in one bucket (means over the bucket's readings)."""

    utilization: float | None
    memory_utilization: float | None
    memory_used: float | None
    memory_total: int | None
    power_w: float | None
    sm_clock_mhz: float | None
    throttle_reasons: int
    minutes: int


@dataclass
class NodeBucket:
    """One node in one bucket: measured minutes, busy GPU-minutes, and each GPU's point."""

    minutes: int = 0
    busy_gpu_minutes: float = 0.0
    gpus: dict[int, GpuPoint] = field(default_factory=dict)
    #: The GPUs' power readings in the bucket: their sum (watts) and how many there were (GPU-minutes).
    watts: float = 0.0
    watt_readings: int = 0

    @property
    def gpu_watts(self) -> float | None:
        """The mean power of one GPU of the node in the bucket, where the probe read any."""
        return self.watts / self.watt_readings if self.watt_readings else None


def bucket_of(moment: dt.datetime, step: int) -> dt.datetime:
    """The start of the ``step``-second bucket (aligned on the epoch) holding ``moment``."""
    seconds = int((moment - EPOCH).total_seconds())
    return EPOCH + dt.timedelta(seconds=seconds - seconds % step)


def holds_on(node_ids: Iterable[int], since: dt.datetime, until: dt.datetime, now: dt.datetime) -> list[Hold]:
    """Every hold on these nodes that overlaps [since, until), whichever job it is (one query)."""
    rows = (
        Assignment.objects.filter(node_id__in=set(node_ids), attempt__admitted_at__lt=until)
        .filter(Q(attempt__ended_at=None) | Q(attempt__ended_at__gt=since))
        .values_list(
            "attempt_id", "attempt__job_id", "node_id", "accelerators", "attempt__admitted_at", "attempt__ended_at"
        )
    )
    return [
        Hold(attempt, job, node, sum(int(m) for _, m in slots), admitted, ended or now)
        for attempt, job, node, slots, admitted, ended in rows
        if slots
    ]


def holds_of_attempts(attempts: Iterable[Attempt], now: dt.datetime) -> list[Hold]:
    """The holds of attempts whose assignments were prefetched (no query)."""
    return [
        Hold(a.pk, a.job_id, x.node_id, sum(int(m) for _, m in x.accelerators), a.admitted_at, a.ended_at or now)
        for a in attempts
        for x in a.assignments.all()
        if x.accelerators
    ]


def _bucket_sql(step: int) -> str:
    if connection.vendor == "postgresql":
        return f"CAST(FLOOR(EXTRACT(EPOCH FROM at) / {step}) AS bigint) * {step}"
    return f"(CAST(strftime('%%s', at) AS integer) / {step}) * {step}"


def node_buckets(
    node_ids: Iterable[int], since: dt.datetime, until: dt.datetime, step: int, *, per_gpu: bool
) -> dict[tuple[int, dt.datetime], NodeBucket]:
    """The samples of these nodes in [since, until), per node and ``step``-second bucket (one query)."""
    nodes = sorted(set(node_ids))
    if not nodes or since >= until:
        return {}
    bucket = _bucket_sql(int(step))
    table = GpuSample._meta.db_table
    where = f"node_id IN ({', '.join(['%s'] * len(nodes))}) AND at >= %s AND at < %s"
    params: list[Any] = [*nodes, since, until]
    found: dict[tuple[int, dt.datetime], NodeBucket] = defaultdict(NodeBucket)
    with connection.cursor() as cursor:
        if per_gpu:
            bits = "BIT_OR(throttle_reasons)" if connection.vendor == "postgresql" else "MAX(throttle_reasons)"
            sql = (
                f"SELECT node_id, {bucket} AS b, gpu, AVG(utilization), AVG(memory_utilization), AVG(memory_used), "  # noqa: S608 (placeholders only)
                f"MAX(memory_total), AVG(power_w), AVG(sm_clock_mhz), {bits}, COUNT(utilization), COUNT(*), "
                f"COUNT(power_w) FROM {table} WHERE {where} GROUP BY node_id, b, gpu"
            )
            cursor.execute(sql, params)
            for (
                node,
                b,
                gpu,
                util,
                mem_util,
                used,
                total,
                power,
                clock,
                throttled,
                counted,
                readings,
                powered,
            ) in cursor:
                key = (node, EPOCH + dt.timedelta(seconds=int(b)))
                here = found[key]
                here.gpus[gpu] = GpuPoint(util, mem_util, used, total, power, clock, int(throttled or 0), readings)
                here.minutes = max(here.minutes, counted)
                here.busy_gpu_minutes += (util or 0.0) * counted / 100
                here.watts += (power or 0.0) * powered
                here.watt_readings += int(powered or 0)
        else:
            # Minutes first (one row per node and minute), then buckets: two hash aggregations, where a
            # COUNT(DISTINCT at) per bucket would sort.
            sql = (
                f"SELECT node_id, {bucket} AS b, COUNT(*), SUM(busy), SUM(watts), SUM(readings) FROM ("  # noqa: S608 (placeholders only)
                f"SELECT node_id, at, SUM(utilization) / 100.0 AS busy, SUM(power_w) AS watts, "
                f"COUNT(power_w) AS readings FROM {table} "
                f"WHERE {where} AND utilization IS NOT NULL GROUP BY node_id, at) AS minutes GROUP BY node_id, b"
            )
            cursor.execute(sql, params)
            for node, b, minutes, busy, watts, readings in cursor:
                here = found[(node, EPOCH + dt.timedelta(seconds=int(b)))]
                here.minutes, here.busy_gpu_minutes = int(minutes), float(busy or 0)
                here.watts, here.watt_readings = float(watts or 0), int(readings or 0)
    return dict(found)


def _overlap(hold: Hold, start: dt.datetime, end: dt.datetime) -> float:
    return max(0.0, (min(hold.end, end) - max(hold.start, start)).total_seconds())


@dataclass
class Share:
    """A hold's sums over some buckets, in thousandth-GPU-seconds: held, measured and busy; and the energy its
    GPUs drew while measured (watt-seconds: its measured GPU-seconds at the node's mean power per GPU)."""

    held: float = 0.0
    measured: float = 0.0
    busy: float = 0.0
    watt_seconds: float = 0.0

    def add(self, other: Share) -> None:
        self.held += other.held
        self.measured += other.measured
        self.busy += other.busy
        self.watt_seconds += other.watt_seconds

    @property
    def utilization(self) -> float | None:
        return self.busy / self.measured if self.measured else None


def _buckets_of(hold: Hold, step: int) -> Iterator[tuple[dt.datetime, float]]:
    """The ``step``-second buckets ``hold`` touches, with its thousandth-GPU-seconds in each."""
    width = dt.timedelta(seconds=step)
    start = bucket_of(hold.start, step)
    while start < hold.end:
        yield start, hold.milli * _overlap(hold, start, start + width)
        start += width


def shares(
    holds: list[Hold],
    neighbours: list[Hold],
    buckets: Mapping[tuple[int, dt.datetime], NodeBucket],
    step: int,
) -> dict[tuple[int, int, dt.datetime], tuple[Share, float | None]]:
    """Each hold's share of each bucket it touches, keyed (attempt, node, bucket), with the node's ``U``
    (None where the bucket had no reading). ``neighbours``: every hold on the same nodes (theirs included).
    Linear in the hold-buckets: what is held per node and bucket is summed once."""
    allocated: dict[tuple[int, dt.datetime], float] = defaultdict(float)
    span: dict[tuple[int, dt.datetime], float] = defaultdict(float)
    for hold in neighbours:
        for start, held in _buckets_of(hold, step):
            if (hold.node, start) in buckets:
                allocated[(hold.node, start)] += held / 1000
                span[(hold.node, start)] = max(span[(hold.node, start)], held / hold.milli if hold.milli else 0.0)
    out: dict[tuple[int, int, dt.datetime], tuple[Share, float | None]] = {}
    for hold in holds:
        for start, held in _buckets_of(hold, step):
            share, node_u = Share(held=held), None
            measured = buckets.get((hold.node, start))
            if measured is not None and measured.minutes:
                # The measured part of the time the node was held in this bucket (a hold may cover part of it).
                coverage = min(1.0, measured.minutes * 60 / max(span[(hold.node, start)], 1.0))
                gpu_seconds = allocated[(hold.node, start)]
                # Busy GPUs while it was read over GPUs held while it was held: rates, so that a minute read
                # whole at either end of a hold does not count for more than the hold's part of it.
                busy_rate = measured.busy_gpu_minutes / measured.minutes
                held_rate = gpu_seconds / max(span[(hold.node, start)], 1.0)
                node_u = min(1.0, busy_rate / held_rate) if held_rate else 0.0
                share.measured = held * coverage
                share.busy = share.measured * node_u
                # Energy: the GPUs held, measured, at the node's mean power per GPU (a node's GPUs draw alike
                # enough; which GPU is whose, the probe cannot tell, as for utilization).
                share.watt_seconds = share.measured / 1000 * (measured.gpu_watts or 0.0)
            out[(hold.attempt, hold.node, start)] = (share, node_u)
    return out


def clipped(holds: Iterable[Hold], since: dt.datetime, until: dt.datetime) -> list[Hold]:
    """The holds cut to [since, until); those outside it dropped."""
    return [
        Hold(h.attempt, h.job, h.node, h.milli, max(h.start, since), min(h.end, until))
        for h in holds
        if h.start < until and h.end > since
    ]


def measure(
    holds: list[Hold], since: dt.datetime, until: dt.datetime, *, step: int, at: dt.datetime
) -> dict[tuple[int, int, dt.datetime], tuple[Share, float | None]]:
    """``shares`` of these holds within [since, until), node-level (two queries)."""
    holds = clipped(holds, since, until)
    nodes = {h.node for h in holds}
    if not holds:
        return {}
    neighbours = holds_on(nodes, since, until, at)
    return shares(holds, neighbours, node_buckets(nodes, since, until, step, per_gpu=False), step)


#: Plot resolutions: the finest that keeps a series within ``MAX_POINTS`` points.
STEPS = (60, 300, 900, 3600, 6 * 3600, 86400)
MAX_POINTS = 720
GPU_HOUR = 1000 * 3600  # thousandth-GPU-seconds


def step_for(since: dt.datetime, until: dt.datetime) -> int:
    seconds = (until - since).total_seconds()
    return next((s for s in STEPS if seconds / s <= MAX_POINTS), STEPS[-1])


def summary(share: Share) -> dict[str, Any]:
    """A share in the units people read: GPU-hours allocated, measured, used and unmeasured, mean %; the energy its
    GPUs drew while measured (kWh), their mean power (W a GPU), and the unmeasured time's energy estimated at that
    mean (null where nothing was measured)."""
    gpu_watts = share.watt_seconds / (share.measured / 1000) if share.measured and share.watt_seconds else None
    unmeasured = (share.held - share.measured) / GPU_HOUR
    return {
        "gpu_hours_allocated": round(share.held / GPU_HOUR, 3),
        "gpu_hours_measured": round(share.measured / GPU_HOUR, 3),
        "gpu_hours_used": round(share.busy / GPU_HOUR, 3),
        "gpu_hours_unmeasured": round(unmeasured, 3),
        "mean_utilization": None if share.utilization is None else round(100 * share.utilization, 1),
        "energy_kwh_measured": round(share.watt_seconds / 3.6e6, 3),
        "mean_gpu_watts": None if gpu_watts is None else round(gpu_watts, 1),
        "energy_kwh_estimated": None if gpu_watts is None else round(unmeasured * gpu_watts / 1000, 3),
    }


def _gpu_point(at: dt.datetime, point: GpuPoint) -> dict[str, Any]:
    def rounded(value: float | None) -> float | None:
        return None if value is None else round(float(value), 1)

    return {
        "at": at.isoformat(),
        "utilization": rounded(point.utilization),
        "memory_utilization": rounded(point.memory_utilization),
        "memory_used_bytes": None if point.memory_used is None else int(point.memory_used),
        "memory_total_bytes": point.memory_total,
        "power_w": rounded(point.power_w),
        "sm_clock_mhz": rounded(point.sm_clock_mhz),
        "throttle_reasons": throttle_names(point.throttle_reasons),
    }


def _node_series(
    hold: Hold,
    node: Node,
    exclusive: bool,
    per_gpu: bool,
    measured: Mapping[tuple[int, int, dt.datetime], tuple[Share, float | None]],
    buckets: Mapping[tuple[int, dt.datetime], NodeBucket],
    step: int,
) -> tuple[dict[str, Any], Share]:
    total = Share()
    points = []
    gpu_points: dict[int, list[dict[str, Any]]] = defaultdict(list)
    start = bucket_of(hold.start, step)
    while start < hold.end:
        share, node_u = measured.get((hold.attempt, hold.node, start), (Share(), None))
        total.add(share)
        if node_u is not None:
            points.append({"at": start.isoformat(), "utilization": round(100 * node_u, 1)})
            if exclusive and per_gpu:
                for gpu, point in sorted(buckets[(hold.node, start)].gpus.items()):
                    gpu_points[gpu].append(_gpu_point(start, point))
        start += dt.timedelta(seconds=step)
    series = {
        "node": node.name,
        "gpus_held": hold.milli / 1000,
        "shared": not exclusive,
        "summary": summary(total),
        "points": points,
        "gpus": [{"index": gpu, "points": found} for gpu, found in sorted(gpu_points.items())],
    }
    return series, total


#: Per-GPU series are sent by default for jobs on at most this many nodes (a gang's would be megabytes).
GPU_SERIES_NODES = 8


def job_series(
    job: Job, attempts: list[Attempt], *, step: int | None, at: dt.datetime, gpus: bool | None = None
) -> dict[str, Any]:
    """A job's utilization over ``attempts`` (their assignments and nodes prefetched): per attempt, per
    node (per GPU where the job held the node alone, and ``gpus`` asks for it: by default for jobs on at most
    ``GPU_SERIES_NODES`` nodes), and a summary. Four queries at most."""
    holds = holds_of_attempts(attempts, at)
    per_gpu = gpus if gpus is not None else len(holds) <= GPU_SERIES_NODES
    body: dict[str, Any] = {"job": job.pk, "step_seconds": step, "summary": summary(Share()), "attempts": []}
    if not holds:
        return body
    since, until = min(h.start for h in holds), max(h.end for h in holds)
    step = step or step_for(since, until)
    body["step_seconds"] = step
    nodes = {x.node_id: x.node for a in attempts for x in a.assignments.all()}
    neighbours = holds_on(nodes, since, until, at)
    buckets = node_buckets(nodes, since, until, step, per_gpu=per_gpu)
    measured = shares(holds, neighbours, buckets, step)
    everything = Share()
    for attempt in attempts:
        attempt_total = Share()
        node_series = []
        for hold in (h for h in holds if h.attempt == attempt.pk):
            node = nodes[hold.node]
            alone = not any(
                n.attempt != hold.attempt and n.node == hold.node and _overlap(n, hold.start, hold.end)
                for n in neighbours
            )
            exclusive = alone and hold.milli >= node.accelerators * 1000
            series, total = _node_series(hold, node, exclusive, per_gpu, measured, buckets, step)
            node_series.append(series)
            attempt_total.add(total)
        everything.add(attempt_total)
        body["attempts"].append(
            {
                "number": attempt.number,
                "cluster": attempt.cluster.slug,
                "admitted_at": attempt.admitted_at.isoformat(),
                "ended_at": attempt.ended_at.isoformat() if attempt.ended_at else None,
                "summary": summary(attempt_total),
                "nodes": node_series,
            }
        )
    body["summary"] = summary(everything)
    return body


@dataclass(frozen=True, slots=True)
class JobEfficiency:
    job: int
    name: str
    team: int
    share: Share


def least_efficient(
    team_ids: Iterable[int],
    since: dt.datetime,
    until: dt.datetime,
    *,
    limit: int,
    at: dt.datetime,
    min_measured_hours: float = 1.0,
) -> list[JobEfficiency]:
    """The teams' jobs with the lowest mean utilization over [since, until), among those measured for at
    least ``min_measured_hours`` GPU-hours (hourly buckets; three queries)."""
    attempts = Attempt.objects.filter(job__team_id__in=list(team_ids), admitted_at__lt=until).filter(
        Q(ended_at=None) | Q(ended_at__gt=since)
    )
    rows = Assignment.objects.filter(attempt__in=attempts).values_list(
        "attempt_id",
        "attempt__job_id",
        "node_id",
        "accelerators",
        "attempt__admitted_at",
        "attempt__ended_at",
        "attempt__job__name",
        "attempt__job__team_id",
    )
    names: dict[int, tuple[str, int]] = {}
    holds = []
    for attempt, job, node, slots, admitted, ended, name, team in rows:
        if slots:
            holds.append(Hold(attempt, job, node, sum(int(m) for _, m in slots), admitted, ended or at))
            names[job] = (name, team)
    per_job: dict[int, Share] = defaultdict(Share)
    job_of = {h.attempt: h.job for h in holds}
    for (attempt, _, _), (share, _) in measure(holds, since, until, step=3600, at=at).items():
        per_job[job_of[attempt]].add(share)
    ranked = [
        JobEfficiency(job, *names[job], share)
        for job, share in per_job.items()
        if share.measured >= min_measured_hours * GPU_HOUR
    ]
    ranked.sort(key=lambda e: (e.share.utilization or 0.0, -e.share.held, e.job))
    return ranked[:limit]
