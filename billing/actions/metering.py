"""The meter: usage records from the jobs' placements, capacity records from the fleet, and the proof that
what was metered is what was placed.

**Usage.** An attempt holds its accelerators from its admission (the engine reserves them then, so nobody
else can be placed there) until it ends: the placement loop writes ``Attempt.admitted_at`` and
``ended_at`` in the same transaction as the job's ``admitted`` and ending events. For every node the
attempt holds accelerators on (its ``Assignment`` rows), the meter writes one ``UsageRecord`` per UTC day
the hold touches, from the admission to the end (or to the run's time while it lasts), in whole seconds:
both ends are cut to the second, so consecutive records meet exactly and a day's records sum to the hold.

Every run recomputes the records of the attempts it looks at from those rows alone, and writes them keyed
by (attempt, node, day): running it twice, or again after a worker died half-way, writes the same rows,
never a second copy. It looks at every attempt still running, every attempt with a record still open,
and every attempt admitted since shortly before the previous run began (so one admitted and ended
between two runs is not missed). ``reconcile`` checks the result against the placements and re-meters
what differs.

**Recent use** (fair share with memory, docs/scheduling.md §Fair sharing). In the transaction that writes an
attempt's records, the meter values the records it replaces and those it writes at the run's moment
(``scheduler.engine.fairshare.hours``) and adds the difference to each queue's decayed accelerator-hours
(``governance.actions.fairshare.keep``). Every run and repair takes its turn on the organization's fair-share
row, so a change is counted once; what was kept is the value of every record there is, at every run. A new
half-life (or none kept yet) rebuilds it from the records (``remember``).

**Capacity.** Nodes have no history of their own, so the meter samples: each run extends the open
record of every present node with accelerators to the run's time (closing it at midnight and opening
the next day's), and closes the record of a node that left at its last sighting. A node's flavor,
accelerator count or capacity type changing starts a new record where the last one ended. The error is
at most one metering interval at each end of a node's life.

**Capacity type** (which price applies): ``clusters.capacity.capacity_type``, from the node's labels, else its
cluster's option, else its kind.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, time, timedelta
from itertools import pairwise
from typing import Any

from django.db import transaction
from django.db.models import Min, Q
from django.utils import timezone

from billing.models import CapacityRecord, MeterState, UsageRecord
from clusters.capacity import capacity_type
from clusters.models import AcceleratorType, Node
from governance.actions import fairshare
from governance.models import FairShare
from scheduler.engine.fairshare import hours
from scheduler.models import Assignment, Attempt
from tenancy.models import Organization

#: Attempts admitted this long before the previous run began are looked at again: a transaction that
#: wrote its admission time before that run, and committed after it, is still metered.
ADMISSION_MARGIN = timedelta(minutes=10)
#: How many attempts one statement handles.
BATCH = 2000


def second(moment: datetime) -> datetime:
    """``moment`` cut to the whole second (the meter's resolution)."""
    return moment.replace(microsecond=0)


def midnight(day: date) -> datetime:
    return datetime.combine(day, time.min, tzinfo=UTC)


def split_days(start: datetime, end: datetime) -> Iterator[tuple[date, datetime, datetime]]:
    """[start, end) cut at UTC midnights: (day, from, to) for each day it touches; nothing when empty."""
    start, end = start.astimezone(UTC), end.astimezone(UTC)
    while start < end:
        next_midnight = midnight(start.date() + timedelta(days=1))
        piece_end = min(end, next_midnight)
        yield start.date(), start, piece_end
        start = piece_end


@dataclass(frozen=True, slots=True)
class _NodeFacts:
    cluster_id: int
    flavor_id: int | None
    capacity_type: str


def _node_facts(node_ids: Iterable[int]) -> dict[int, _NodeFacts]:
    rows = Node.objects.filter(pk__in=set(node_ids)).values(
        "pk", "cluster_id", "accelerator_id", "labels", "cluster__kind", "cluster__options"
    )
    return {
        r["pk"]: _NodeFacts(
            r["cluster_id"],
            r["accelerator_id"],
            capacity_type(r["labels"] or {}, r["cluster__kind"], r["cluster__options"] or {}),
        )
        for r in rows
    }


def hold_end(attempt: Attempt, now: datetime) -> datetime:
    """Where an attempt's hold ends as the meter counts it: its end, or ``now`` while it lasts."""
    return second(min(attempt.ended_at, now) if attempt.ended_at is not None else now)


def usage_records(
    attempt: Attempt,
    milli: Mapping[int, int],
    nodes: Mapping[int, _NodeFacts],
    now: datetime,
    flavors: Mapping[str, int],
    organization_id: int,
) -> list[UsageRecord]:
    """The records of ``attempt`` up to ``now``: a pure function of the attempt and its assignments."""
    job = attempt.job
    start, end = second(attempt.admitted_at), hold_end(attempt, now)
    closed = attempt.ended_at is not None and attempt.ended_at <= now
    records = []
    for node_id, held in sorted(milli.items()):
        facts = nodes.get(node_id)
        if facts is None:
            continue
        flavor_id = facts.flavor_id or flavors.get(attempt.flavor)
        if flavor_id is None:
            continue  # an accelerator nobody can name or price; ``reconcile`` reports it
        for day, piece_start, piece_end in split_days(start, end):
            records.append(
                UsageRecord(
                    organization_id=organization_id,
                    team_id=job.team_id,
                    project_id=job.project_id,
                    user_id=job.submitted_by_id,
                    job_id=job.pk,
                    attempt_id=attempt.pk,
                    cluster_id=facts.cluster_id,
                    node_id=node_id,
                    flavor_id=flavor_id,
                    capacity_type=facts.capacity_type,
                    day=day,
                    start=piece_start,
                    end=piece_end,
                    seconds=int((piece_end - piece_start).total_seconds()),
                    milli=held,
                    closed=closed,
                )
            )
    return records


def meter_attempts(organization: Organization, attempt_ids: Iterable[int], now: datetime) -> int:
    """Write the records of these attempts as of ``now`` and drop any of theirs that no longer belong (a
    day past an end that was written late). Returns how many records were written."""
    ids = sorted(set(attempt_ids))
    flavors = dict(AcceleratorType.objects.filter(organization=organization).values_list("name", "pk"))
    written = 0
    for offset in range(0, len(ids), BATCH):
        chunk = ids[offset : offset + BATCH]
        attempts = list(Attempt.objects.filter(pk__in=chunk, cluster__organization=organization).select_related("job"))
        milli = _milli_by_attempt(chunk)
        nodes = _node_facts(node for held in milli.values() for node in held)
        records = [
            record
            for attempt in attempts
            for record in usage_records(attempt, milli.get(attempt.pk, {}), nodes, now, flavors, organization.pk)
        ]
        with transaction.atomic():
            memory = remember(organization, now)
            # The records there were: what they were worth goes, and those the new ones do not cover go too.
            before = list(
                UsageRecord.objects.filter(attempt_id__in=chunk).values_list(
                    "pk", "attempt_id", "node_id", "day", "job__queue_id", "milli", "start", "end"
                )
            )
            change = _valued((row[4:] for row in before), now, memory.half_life, sign=-1)
            UsageRecord.objects.bulk_create(
                records,
                batch_size=1000,
                update_conflicts=True,
                unique_fields=["attempt", "node", "day"],
                update_fields=["start", "end", "seconds", "milli", "closed"],
            )
            keep = {(r.attempt_id, r.node_id, r.day) for r in records}
            stale = [row[0] for row in before if row[1:4] not in keep]
            UsageRecord.objects.filter(pk__in=stale).delete()
            queue_of = {a.pk: a.job.queue_id for a in attempts}
            written_now = [(queue_of[r.attempt_id], r.milli, r.start, r.end) for r in records]
            for queue_id, value in _valued(written_now, now, memory.half_life).items():
                change[queue_id] = change.get(queue_id, 0.0) + value
            fairshare.keep(memory, change, now)
        written += len(records)
    return written


def _valued(
    holds: Iterable[tuple[int, int, datetime, datetime]], at: datetime, half_life: float, sign: int = 1
) -> dict[int, float]:
    """Per queue, the recent use of ``holds`` (queue id, milli, start, end) valued at ``at``, times ``sign``."""
    out: dict[int, float] = defaultdict(float)
    for queue_id, milli, start, end in holds:
        out[queue_id] += sign * hours(milli, start.timestamp(), end.timestamp(), at.timestamp(), half_life)
    return out


#: Records older than this many half-lives are left out of a rebuild: they count less than a billionth.
FORGOTTEN = 30


def remember(organization: Organization, now: datetime, *, rebuild: bool = False) -> FairShare:
    """Lock the organization's fair-share row for this transaction (metering runs and repairs take turns on it);
    when the queues' recent use was kept with another half-life (a new one, or never kept), or ``rebuild`` says
    so (records were repaired), rebuild it from the usage records first (docs/scheduling.md §Fair sharing)."""
    memory = fairshare.lock(organization)
    if rebuild or memory.kept_with != memory.half_life:
        since = now - timedelta(seconds=FORGOTTEN * memory.half_life)
        records = UsageRecord.objects.filter(organization=organization, end__gt=since).values_list(
            "job__queue_id", "milli", "start", "end"
        )
        fairshare.keep(memory, _valued(records.iterator(), now, memory.half_life), now, rebuilt=True)
    return memory


def _extend(record: CapacityRecord, until: datetime) -> list[CapacityRecord]:
    """The open record carried on to ``until``: itself, closed at midnight when the day ended, then one
    record per further day (the last one open, unless ``until`` is a midnight)."""
    out = []
    pieces = list(split_days(record.start, max(record.start, until)))
    if not pieces:
        return [record]
    for day, start, end in pieces:
        piece = record if day == record.day else _copy(record, day, start)
        piece.end, piece.seconds, piece.closed = end, int((end - start).total_seconds()), False
        out.append(piece)
    for piece in out[:-1]:
        piece.closed = True
    return out


def _copy(record: CapacityRecord, day: date, start: datetime) -> CapacityRecord:
    return CapacityRecord(
        organization_id=record.organization_id,
        cluster_id=record.cluster_id,
        node_id=record.node_id,
        flavor_id=record.flavor_id,
        capacity_type=record.capacity_type,
        accelerators=record.accelerators,
        day=day,
        start=start,
        end=start,
        seconds=0,
    )


def _node_record(
    organization: Organization,
    node: Mapping[str, Any],
    kind: str,
    day: date,
    start: datetime,
    end: datetime,
    *,
    closed: bool,
) -> CapacityRecord:
    """A capacity record of ``node`` (a row of ``Node.values``) from ``start`` to ``end`` within ``day``."""
    return CapacityRecord(
        organization_id=organization.pk,
        cluster_id=node["cluster_id"],
        node_id=node["pk"],
        flavor_id=node["accelerator_id"],
        capacity_type=kind,
        accelerators=node["accelerators"],
        day=day,
        start=start,
        end=end,
        seconds=int((end - start).total_seconds()),
        closed=closed,
    )


def meter_capacity(organization: Organization, now: datetime) -> int:
    """Carry every present node's capacity record to ``now``; close the records of nodes that left."""
    now = second(now)
    open_records = {r.node_id: r for r in CapacityRecord.objects.filter(organization=organization, closed=False)}
    nodes = (
        Node.objects.filter(cluster__organization=organization)
        .filter(Q(present=True) | Q(pk__in=list(open_records)))
        .values(
            "pk",
            "cluster_id",
            "accelerator_id",
            "accelerators",
            "labels",
            "present",
            "last_seen_at",
            "cluster__kind",
            "cluster__options",
        )
    )
    changed: list[CapacityRecord] = []
    for n in nodes:
        current = open_records.get(n["pk"])
        counts = n["present"] and n["accelerator_id"] is not None and n["accelerators"] > 0
        kind = capacity_type(n["labels"] or {}, n["cluster__kind"], n["cluster__options"] or {})
        if current is not None:
            same = counts and (current.flavor_id, current.accelerators, current.capacity_type) == (
                n["accelerator_id"],
                n["accelerators"],
                kind,
            )
            if same:
                changed.extend(_extend(current, now))
                continue
            # It left (counted up to its last sighting), or changed (the new record starts where this ends).
            until = current.end if counts else second(n["last_seen_at"] or current.end)
            pieces = _extend(current, max(current.end, min(until, now)))
            pieces[-1].closed = True
            changed.extend(pieces)
            if not counts:
                continue
            start = pieces[-1].end
        elif counts:
            start = now
        else:
            continue
        changed.append(_node_record(organization, n, kind, start.astimezone(UTC).date(), start, start, closed=False))
        if start < now:
            changed.extend(_extend(changed.pop(), now))
    CapacityRecord.objects.bulk_create(
        changed,
        batch_size=1000,
        update_conflicts=True,
        unique_fields=["node", "day", "start"],
        update_fields=["end", "seconds", "closed"],
    )
    return len(changed)


def backfill_capacity(organization: Organization, since: datetime, now: datetime | None = None) -> int:
    """Capacity records for the organization's present nodes from ``since`` up to where each node's records
    begin (or ``now``): for switching billing on over a fleet that was already there, and for the demo."""
    now = second(now or timezone.now())
    since = second(since)
    first = dict(
        CapacityRecord.objects.filter(organization=organization)
        .values("node_id")
        .annotate(first=Min("start"))
        .values_list("node_id", "first")
    )
    records = []
    for n in Node.objects.filter(
        cluster__organization=organization, present=True, accelerator__isnull=False, accelerators__gt=0
    ).values("pk", "cluster_id", "accelerator_id", "accelerators", "labels", "cluster__kind", "cluster__options"):
        until = min(first.get(n["pk"], now), now)
        kind = capacity_type(n["labels"] or {}, n["cluster__kind"], n["cluster__options"] or {})
        records += [_node_record(organization, n, kind, *piece, closed=True) for piece in split_days(since, until)]
    CapacityRecord.objects.bulk_create(records, batch_size=1000, ignore_conflicts=True)
    return len(records)


@dataclass(frozen=True)
class MeterRun:
    attempts: int
    usage_records: int
    capacity_records: int


def meter(organization: Organization, now: datetime | None = None) -> MeterRun:
    """One metering run of ``organization``. Runs of one organization take turns (a row lock)."""
    now = second(now or timezone.now())
    with transaction.atomic():
        state, _ = MeterState.objects.get_or_create(organization=organization)
        state = MeterState.objects.select_for_update().get(pk=state.pk)
        attempts = Attempt.objects.filter(cluster__organization=organization)
        if state.last_run_started_at is not None:  # else the first run: every attempt there has been
            since = state.last_run_started_at - ADMISSION_MARGIN
            attempts = attempts.filter(Q(ended_at=None) | Q(admitted_at__gte=since))
        attempt_ids = set(attempts.values_list("pk", flat=True))
        attempt_ids |= set(
            UsageRecord.objects.filter(organization=organization, closed=False).values_list("attempt_id", flat=True)
        )
        remember(organization, now)
        written = meter_attempts(organization, attempt_ids, now)
        capacity = meter_capacity(organization, now)
        MeterState.objects.filter(pk=state.pk).update(last_run_started_at=now, last_run_finished_at=timezone.now())
    return MeterRun(attempts=len(attempt_ids), usage_records=written, capacity_records=capacity)


@dataclass
class Reconciliation:
    """What ``reconcile`` compared: every attempt admitted before the last run and not ended before
    ``since``, its placements against its records."""

    since: datetime
    metered_until: datetime | None
    attempts: int = 0
    #: Accelerator-seconds the placements held, and what the records count (thousandths).
    placed_milli_seconds: int = 0
    metered_milli_seconds: int = 0
    #: Attempts whose records differed from their placements, before repair; those still wrong after it.
    mismatched: list[int] = field(default_factory=list)
    unrepaired: list[int] = field(default_factory=list)

    @property
    def balanced(self) -> bool:
        return not self.unrepaired and self.placed_milli_seconds == self.metered_milli_seconds

    def as_dict(self) -> dict[str, Any]:
        return {
            "since": self.since.isoformat(),
            "metered_until": self.metered_until.isoformat() if self.metered_until else None,
            "attempts": self.attempts,
            "placed_accelerator_hours": round(self.placed_milli_seconds / 1000 / 3600, 6),
            "metered_accelerator_hours": round(self.metered_milli_seconds / 1000 / 3600, 6),
            "mismatched": len(self.mismatched),
            "repaired": len(set(self.mismatched) - set(self.unrepaired)),
            "unrepaired": self.unrepaired,
            "balanced": self.balanced,
        }


def _check(attempts: list[Attempt], until: datetime) -> tuple[int, int, list[int]]:
    """(placed, metered, attempts whose records differ) for ``attempts`` as metered up to ``until``."""
    ids = [a.pk for a in attempts]
    expected_milli = _milli_by_attempt(ids)
    records: dict[int, dict[int, list[tuple[datetime, datetime, int, int, bool]]]] = defaultdict(
        lambda: defaultdict(list)
    )
    for row in UsageRecord.objects.filter(attempt_id__in=ids).values_list(
        "attempt_id", "node_id", "start", "end", "seconds", "milli", "closed"
    ):
        records[row[0]][row[1]].append(row[2:])
    placed = metered = 0
    wrong = []
    for attempt in attempts:
        start, end = second(attempt.admitted_at), hold_end(attempt, until)
        closed = attempt.ended_at is not None and attempt.ended_at <= until
        expected = expected_milli.get(attempt.pk, {})
        mine = records.get(attempt.pk, {})
        metered += sum(r[2] * r[3] for rows in mine.values() for r in rows)
        ok = set(mine) <= set(expected)  # no records on nodes the attempt never held
        span = max(0, int((end - start).total_seconds()))
        for node, milli in expected.items():
            placed += span * milli
            rows = sorted(mine.get(node, []))
            # The records must tile [start, end) exactly: contiguous, the attempt's share, closed when it is.
            tiles = bool(rows) and rows[0][0] == start and rows[-1][1] == end
            tiles = tiles and all(a[1] == b[0] for a, b in pairwise(rows))
            tiles = tiles and all(r[3] == milli and r[2] == int((r[1] - r[0]).total_seconds()) for r in rows)
            tiles = tiles and all(r[4] == closed for r in rows)
            if not tiles and not (span == 0 and not rows):
                ok = False
        if not ok:
            wrong.append(attempt.pk)
    return placed, metered, wrong


def _milli_by_attempt(ids: list[int]) -> dict[int, dict[int, int]]:
    """Per attempt and node, the thousandths of accelerators its assignments hold ([[index, milli], ...])."""
    milli: dict[int, dict[int, int]] = defaultdict(lambda: defaultdict(int))
    for attempt_id, node_id, accelerators in Assignment.objects.filter(attempt_id__in=ids).values_list(
        "attempt_id", "node_id", "accelerators"
    ):
        milli[attempt_id][node_id] += sum(int(m) for _, m in accelerators)
    return {a: {node: m for node, m in held.items() if m > 0} for a, held in milli.items()}


def reconcile(organization: Organization, since: datetime | None = None, repair: bool = True) -> Reconciliation:
    """Prove that the records of every attempt admitted before the last metering run, and not ended before
    ``since`` (default: the first day of last month), tile its placements exactly; re-meter the attempts
    that differ (``repair``) and say which still do. The result is kept on the meter's row."""
    now = timezone.now()
    if since is None:
        this_month = now.astimezone(UTC).date().replace(day=1)
        since = midnight((this_month - timedelta(days=1)).replace(day=1))
    state, _ = MeterState.objects.get_or_create(organization=organization)
    result = Reconciliation(since=since, metered_until=state.last_run_started_at)
    if state.last_run_started_at is None:
        return result
    until = state.last_run_started_at
    queryset = (
        Attempt.objects.filter(cluster__organization=organization, admitted_at__lt=until)
        .filter(Q(ended_at=None) | Q(ended_at__gte=since))
        .order_by("pk")
    )
    ids = list(queryset.values_list("pk", flat=True))
    for offset in range(0, len(ids), BATCH):
        attempts = list(Attempt.objects.filter(pk__in=ids[offset : offset + BATCH]).order_by("pk"))
        placed, metered, wrong = _check(attempts, until)
        if wrong and repair:
            with transaction.atomic():
                MeterState.objects.select_for_update().get(pk=state.pk)  # not while a run is metering
                meter_attempts(organization, wrong, until)
            placed, metered, still = _check(attempts, until)
        else:
            still = wrong
        result.attempts += len(attempts)
        result.placed_milli_seconds += placed
        result.metered_milli_seconds += metered
        result.mismatched.extend(wrong)
        result.unrepaired.extend(still)
    if result.mismatched and repair:
        # Records were damaged or lost behind the meter's back, so what was kept of them is wrong too.
        with transaction.atomic():
            MeterState.objects.select_for_update().get(pk=state.pk)
            remember(organization, until, rebuild=True)
    MeterState.objects.filter(pk=state.pk).update(last_reconciled_at=now, last_reconciliation=result.as_dict())
    return result
