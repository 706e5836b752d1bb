"""The placement loop: snapshot from the database, the engine, decisions applied, clusters told.

One cycle of one organization:
1. ``gates.settle`` cancels (or holds) the jobs whose dependencies can no longer be met and names what the
   others wait for; ``snapshot.build`` reads the fleet, the quotas and the jobs (and the loop's
   ``generation``), leaving out those waiting for dependencies and the tasks of arrays at their limit;
2. ``engine.schedule`` decides, touching nothing;
3. ``apply`` writes admissions and preemptions in one transaction, but only if the generation is still the
   one read (compare-and-set), so no two cycles ever place onto the same free capacity; job rows are
   locked in primary-key order and each decision is re-checked against the state the snapshot saw, so a
   job cancelled meanwhile is simply skipped;
4. after commit, the clusters are told (``dispatch``) by idempotent tasks keyed by attempt, and the
   pending reasons are written (advice only, so outside the transaction).

A worker killed anywhere in here loses nothing: before the commit nothing happened; after it, the next
cycle's ``recover`` re-sends what was admitted but never reached its cluster.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any

from django.conf import settings
from django.db import connection, transaction
from django.db.models import F, Max
from django.utils import timezone

from common import enqueue
from common.staging import staged
from scheduler.actions import lifecycle
from scheduler.engine import model as m
from scheduler.engine import schedule
from scheduler.models import Assignment, Attempt, Job, JobEvent, LoopState
from scheduler.placement import elastic, gates, measure
from scheduler.placement.leader import leadership
from scheduler.placement.snapshot import Index, build
from scheduler.states import ACTIVE, WAITING
from tenancy.models import Organization

log = logging.getLogger(__name__)
S = Job.State


@dataclass
class CycleReport:
    organization: str
    generation: int = 0
    admitted: int = 0
    preempted: int = 0
    pending: int = 0
    running: int = 0
    #: Decisions dropped because the job changed between the snapshot and the apply (cancelled, ...).
    skipped: int = 0
    #: Waiting jobs failed because every cluster that could run them refused them for good.
    failed: int = 0
    #: True when another cycle applied first: nothing of this one was written.
    stale: bool = False
    #: True when the cycle stopped at its admission limit with jobs it did not examine: run the next one now.
    more: bool = False
    seconds: dict[str, float] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


class Hooks:
    """Points where a test may stop the cycle (the chaos tests kill the worker at each of them)."""

    before_apply: Callable[[], None] | None = None
    before_commit: Callable[[], None] | None = None
    after_commit: Callable[[], None] | None = None


def _hook(name: str) -> None:
    hook = getattr(Hooks, name)
    if hook is not None:
        hook()


def run_all(now: datetime | None = None) -> list[CycleReport] | None:
    """One cycle for every organization with work, under the leader lock; None when another loop leads."""
    with leadership("placement") as leader:
        if not leader:
            return None
        measure.heartbeat()
        from scheduler.placement import recover  # the loop's own I/O half

        reports = []
        orgs = Organization.objects.filter(teams__jobs__state__in=ACTIVE).distinct()
        for organization in orgs:
            if not leader.renew():
                break
            recover.recover(organization, now)
            reports.append(run_cycle(organization, now))
        return reports


def run_cycle(
    organization: Organization,
    now: datetime | None = None,
    config: m.Config | None = None,
    *,
    tell_clusters: bool = True,
) -> CycleReport:
    """One placement cycle of ``organization`` (call it under the leader lock; ``run_all`` does).
    ``tell_clusters=False`` leaves the dispatch to ``recover.recover`` (the admission benchmark)."""
    now = now or timezone.now()
    report = CycleReport(organization.slug)
    started = time.perf_counter()
    config = config or m.Config(max_admissions_per_cycle=settings.PLACEMENT_MAX_ADMISSIONS)
    blocked = gates.settle(organization, now)
    snapshot, index = build(organization, now, config, blocked)
    report.seconds["snapshot"] = time.perf_counter() - started

    started = time.perf_counter()
    decisions = schedule(snapshot)
    report.seconds["engine"] = time.perf_counter() - started

    started = time.perf_counter()
    _hook("before_apply")
    applied = apply(organization, index, decisions, now, tell_clusters=tell_clusters)
    report.seconds["apply"] = time.perf_counter() - started
    if applied is None:
        report.stale = True
        measure.cycle(report.seconds, True, snapshot, decisions, index)
        return report
    report.generation, report.admitted, report.preempted, report.skipped = applied

    started = time.perf_counter()
    write_pending(index, decisions.pending + tuple(index.gated))
    gates.write_array_limits(index, now)
    report.failed = fail_refused(index, decisions.pending, now)
    report.seconds["pending"] = time.perf_counter() - started
    report.pending = len(decisions.pending)
    report.more = any(p.reason is m.PendingReason.NOT_CONSIDERED for p in decisions.pending)
    report.running = len(snapshot.running) + report.admitted
    measure.cycle(report.seconds, False, snapshot, decisions, index)
    LoopState.objects.filter(organization=organization).update(
        last_cycle_at=now, last_cycle={k: v for k, v in report.as_dict().items() if k != "organization"}
    )
    return report


def apply(
    organization: Organization, index: Index, decisions: m.Decisions, now: datetime, *, tell_clusters: bool = True
) -> tuple[int, int, int, int] | None:
    """Write the cycle's admissions and preemptions; None (and nothing written) if another cycle applied
    since the snapshot. Returns (new generation, admitted, preempted, skipped)."""
    with transaction.atomic():
        LoopState.objects.get_or_create(organization=organization)  # the first cycle of an organization
        generation = index.generation + 1
        claimed = LoopState.objects.filter(organization=organization, generation=index.generation).update(
            generation=generation
        )
        if not claimed:
            return None
        wanted = [int(a.job) for a in decisions.admissions] + [int(p.workload) for p in decisions.preemptions]
        # The one place the loop locks job rows: all at once, in primary-key order.
        rows = {
            pk: (state, number)
            for pk, state, number in Job.objects.select_for_update()
            .filter(pk__in=wanted)
            .order_by("pk")
            .values_list("pk", "state", "attempt")
            .iterator(chunk_size=5000)
        }
        events: list[JobEvent] = []
        attempt_ids = _admit(index, decisions.admissions, rows, now, events)
        preempted = _preempt(index, decisions.preemptions, rows, now, events)
        JobEvent.objects.bulk_create(events, batch_size=2000)
        grants = elastic.ask(index.elastic, decisions.wanted, now) if decisions.wanted else []
        _hook("before_commit")
        if tell_clusters:
            transaction.on_commit(lambda: _tell_clusters(attempt_ids, preempted))
        if grants:  # the clouds are asked once the asks are written
            transaction.on_commit(lambda: _ask_clouds(grants))
    _hook("after_commit")
    skipped = len(decisions.admissions) - len(attempt_ids) + len(decisions.preemptions) - len(preempted)
    return generation, len(attempt_ids), len(preempted), skipped


def _admit(
    index: Index,
    admissions: tuple[m.Admission, ...],
    rows: dict[int, tuple[str, int]],
    now: datetime,
    events: list[JobEvent],
) -> list[int]:
    """New attempts and their assignments for the admissions whose job is still as the snapshot saw it (the
    rows are locked); returns the attempts' ids."""
    placements: list[tuple[Attempt, m.Admission]] = []
    by_state: dict[str, list[int]] = {}
    renumbered: dict[int, int] = {}
    # Only a job that ran before may have a withdrawn attempt numbered above its current one (a first try has none).
    again = [pk for pk in (int(a.job) for a in admissions) if index.waiting.get(pk, ("",))[0] == S.REQUEUED]
    above = _numbers_above_current(again)
    for admission in admissions:
        pk = int(admission.job)
        seen = index.waiting.get(pk)
        if seen is None or rows.get(pk) != seen[:2]:
            continue
        state, number = seen[0], max(seen[1], above.get(pk, 0)) + 1
        if pk in above:
            renumbered[pk] = number
        else:
            by_state.setdefault(state, []).append(pk)
        attempt = Attempt(
            job_id=pk,
            number=number,
            cluster_id=index.clusters[admission.cluster],
            flavor=admission.flavor,
            cost_per_hour=Decimal(str(round(admission.cost_per_hour, 4))),
            borrowing=admission.borrowing,
            backfilled=admission.backfilled,
            admitted_at=now,
        )
        placements.append((attempt, admission))
        where = admission.cluster + (", borrowing quota" if admission.borrowing else "")
        events.append(
            lifecycle.event(
                pk,
                state,
                S.ADMITTED,
                "admitted",
                f"Placed on {where} ({admission.flavor}).",
                attempt=number,
                at=now,
                # What it waited for last (the admission SLO leaves out jobs that waited for their quota).
                detail={"nodes": sorted({a.node for a in admission.assignments}), "waited_for": seen[2][0] or ""},
            )
        )
    Attempt.objects.bulk_create([attempt for attempt, _ in placements], batch_size=2000)
    Assignment.objects.bulk_create(
        [
            Assignment(
                attempt_id=attempt.pk,
                node_id=index.nodes[a.node],
                workers=a.workers,
                accelerators=[list(x) for x in a.accels],
                cpu=a.cpu,
                memory=a.memory,
            )
            for attempt, admission in placements
            for a in admission.assignments
        ],
        batch_size=2000,
    )
    admitted = {
        "state": S.ADMITTED,
        "state_changed_at": now,
        "not_before": None,
        "pending_reason": "",
        "pending_message": "",
        "queue_position": None,
        "estimated_start": None,
    }
    for state, pks in by_state.items():
        for chunk in _chunks(pks, 5000):
            # Every job of one state had the attempt number the snapshot saw (rows are locked): +1.
            Job.objects.filter(pk__in=chunk, state=state).update(attempt=F("attempt") + 1, **admitted)
    for pk, number in renumbered.items():
        Job.objects.filter(pk=pk).update(attempt=number, **admitted)
    return [attempt.pk for attempt, _ in placements]


def _numbers_above_current(pks: list[int]) -> dict[int, int]:
    """The highest attempt number of the jobs that have one above their current attempt: a job reattached to
    an earlier attempt after a failover (``follow.reattach``) has its withdrawn replacement's number taken."""
    if not pks:
        return {}
    rows = (
        Attempt.objects.filter(job_id__in=pks, number__gt=F("job__attempt"))
        .values("job_id")
        .annotate(top=Max("number"))
        .values_list("job_id", "top")
    )
    return dict(rows)


def _preempt(
    index: Index,
    preemptions: tuple[m.Preemption, ...],
    rows: dict[int, tuple[str, int]],
    now: datetime,
    events: list[JobEvent],
) -> list[int]:
    """Tell the victims still as the snapshot saw them to stop within their grace; returns their job ids."""
    preempted = []
    for preemption in preemptions:
        pk = int(preemption.workload)
        current = rows.get(pk)
        if current is None or current != index.placed.get(pk) or current[0] == S.PREEMPTING:
            continue
        state, number = current
        deadline = now + timedelta(seconds=preemption.grace_seconds)
        Job.objects.filter(pk=pk, state=state).update(state=S.PREEMPTING, state_changed_at=now)
        Attempt.objects.filter(job_id=pk, number=number, outcome=Attempt.Outcome.ACTIVE).update(
            stop_deadline=deadline, stop_reason=Attempt.Stop.PREEMPTED
        )
        events.append(
            lifecycle.event(
                pk,
                state,
                S.PREEMPTING,
                f"preempted_{preemption.reason}",
                f"{preemption.message} It has {preemption.grace_seconds} s to checkpoint and exit.",
                attempt=number,
                at=now,
                detail={
                    "preemptor": preemption.preemptor,
                    "deadline": deadline.isoformat(),
                    # Its cost, which counts against its tier's cap on disruption (snapshot.disruption_left).
                    "lost_accelerator_seconds": round(preemption.lost, 1),
                },
            )
        )
        preempted.append(pk)
    return preempted


def _chunks(items: list[int], size: int) -> list[list[int]]:
    return [items[i : i + size] for i in range(0, len(items), size)]


def _ask_clouds(grants: list[int]) -> None:
    for grant in grants:
        enqueue.send("scheduler.tasks.provision_grant", grant)


def _tell_clusters(attempt_ids: list[int], preempted: list[int]) -> None:
    for chunk in _chunks(attempt_ids, 200):
        enqueue.send("scheduler.tasks.dispatch_attempts", chunk)
    for job_id in preempted:
        enqueue.send("scheduler.tasks.signal_job", job_id)


def write_pending(index: Index, pending: tuple[m.Pending, ...]) -> int:
    """Store each waiting job's reason, queue position and estimated start, where they changed; only for jobs
    still waiting. Returns how many rows were written."""
    rows = []
    places = queue_places(pending)
    for p in pending:
        pk = int(p.job)
        seen = index.waiting.get(pk)
        if seen is None:
            continue
        estimate = datetime.fromtimestamp(p.estimated_start, UTC) if p.estimated_start else None
        fresh = (str(p.reason), p.message, places.get(p.job), estimate)
        old = seen[2]
        if old[:3] == fresh[:3] and _same_minute(old[3], estimate):
            continue
        rows.append((pk, *fresh))
    if not rows:
        return 0
    if connection.vendor == "postgresql":
        _write_pending_postgresql(rows)
    else:
        fields = ("pending_reason", "pending_message", "queue_position", "estimated_start")
        with transaction.atomic():
            # Only jobs still waiting: one cancelled since the snapshot keeps no reason (as the UPDATE above).
            still = set(Job.objects.filter(pk__in=[r[0] for r in rows], state__in=WAITING).values_list("pk", flat=True))
            jobs = [Job(pk=r[0], **dict(zip(fields, r[1:], strict=True))) for r in rows if r[0] in still]
            Job.objects.bulk_update(jobs, fields, batch_size=500)
    return len(rows)


def queue_places(pending: tuple[m.Pending, ...]) -> dict[str, int]:
    """Each waiting job's place in the queue, the one definition the page, the API and ``qm`` show: 1 is the
    next job the placement loop considers among those left waiting, 2 the one after it, and so on (the
    engine's ``Pending.position`` also counts the jobs it admitted in the same cycle, which no longer wait)."""
    ranked = sorted((p.position, p.job) for p in pending if p.position is not None)
    return {job: place for place, (_, job) in enumerate(ranked, start=1)}


def fail_refused(index: Index, pending: tuple[m.Pending, ...], now: datetime) -> int:
    """Fail the waiting jobs that every cluster able to run them refused for good (``Pending.refused``), with
    the clusters' words: waiting would not change the answer. Only jobs still as the snapshot saw them."""
    failed = 0
    for p in pending:
        seen = index.waiting.get(int(p.job))
        if not p.refused or seen is None:
            continue
        job = Job.objects.filter(pk=int(p.job), state=seen[0], attempt=seen[1]).first()
        if job is not None:
            message = f"{p.message} Nothing else can run it."
            failed += lifecycle.move(job, S.FAILED, "refused", message, at=now, message=message, finished_at=now)
    return failed


def _same_minute(a: datetime | None, b: datetime | None) -> bool:
    if a is None or b is None:
        return a is b
    return abs((a - b).total_seconds()) < 60


def _write_pending_postgresql(rows: list[tuple[Any, ...]]) -> None:
    """One UPDATE from the staged rows, for tens of thousands of jobs."""
    table = Job._meta.db_table
    columns = (
        ("id", "bigint"),
        ("reason", "text"),
        ("message", "text"),
        ("position", "integer"),
        ("estimate", "timestamptz"),
    )
    with transaction.atomic(), connection.cursor() as cursor, staged(cursor, "job_pending", columns, rows):
        cursor.execute(
            f"UPDATE {table} j SET pending_reason = p.reason, pending_message = p.message,"  # noqa: S608
            " queue_position = p.position, estimated_start = p.estimate"
            " FROM job_pending p WHERE j.id = p.id AND j.state IN (%s, %s)",
            [str(s) for s in WAITING],
        )


__all__ = ["CycleReport", "Hooks", "apply", "run_all", "run_cycle", "write_pending"]
