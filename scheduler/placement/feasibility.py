"""Before a job is created: can it ever run here, and when would it start and at what price?

Both questions are put to the engine itself, so that the answer matches what the placement loop will do:
- ``check`` places the request alone on the idle fleet (every node empty, healthy and in service) under
  the real quotas; a reason the engine gives there (no such accelerator type, no node or domain big
  enough, more than the queue could ever get, too expensive) will never go away, so the request is refused;
- ``preview`` places it beside today's running and waiting jobs, for the form's estimated start and cost.

The idle fleet is kept for ``IDLE_TTL`` seconds per organization, so a burst of submissions costs one
read of the fleet, and a verdict per request shape within it. Today's snapshot, for previews, is kept
while the placement loop has applied nothing since and for at most ``PREVIEW_TTL`` seconds, so a form
that asks again as its user types costs one small query, not a read of every node and job.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

from django.utils import timezone

from governance import capacity
from governance.models import MemberLimit, PriorityTier, Queue
from scheduler.engine import model as m
from scheduler.engine import schedule
from scheduler.placement.budgets import charged_to, never_budgets
from scheduler.placement.jobs import engine_job, owner
from scheduler.placement.snapshot import Index, build, fleet, governance, loop_generation
from tenancy.models import Organization

if TYPE_CHECKING:
    from scheduler.submission import JobRequest

IDLE_TTL = 30.0
PREVIEW_TTL = 10.0
R = m.PendingReason
#: Reasons that hold on an idle fleet too, and the request field each is about.
NEVER = {
    R.UNKNOWN_QUEUE: "tier",
    R.UNKNOWN_TIER: "tier",
    R.NO_FLAVOR: "accelerator_types",
    R.NEVER_FITS: "accelerators",
    R.TOPOLOGY: "topology_level",
    R.PRICE_LIMIT: "max_price_per_hour",
    R.QUOTA_EXCEEDS_LIMIT: "accelerators",
    R.NO_CLUSTER: "image",  # a new job is excluded from nowhere: no cluster runs its kind of program
    R.MEMORY_NEVER_FITS: "memory",
    R.CPU_NEVER_FITS: "cpu",
    R.MEMBER_LIMIT: "accelerators",  # on the idle fleet nothing of the submitter's runs: more than the limit
    R.BUDGET: "accelerators",  # the idle fleet has only the budgets whose limit is zero (``never_budgets``)
}
#: Where a request's Ray head, not its workers, is what does not fit: its own fields.
HEAD_FIELDS = {"memory": "head_memory", "cpu": "head_cpu"}


@dataclass(frozen=True)
class Refusal:
    field: str
    reason: str
    message: str


@dataclass(frozen=True)
class Preview:
    #: Price per hour of the placement the engine would choose now (or of the cheapest fit, if it waits).
    cost_per_hour: float | None
    starts_now: bool
    estimated_start: datetime | None
    reason: str
    message: str


_lock = threading.Lock()
_idle: dict[int, tuple[float, m.Snapshot]] = {}
_verdicts: dict[tuple[int, Any], Refusal | None] = {}
_current: dict[int, tuple[float, int, m.Snapshot]] = {}  # organization -> (read at, generation, snapshot)


def _idle_snapshot(organization: Organization) -> m.Snapshot:
    now = time.monotonic()
    with _lock:
        cached = _idle.get(organization.pk)
        if cached is not None and now - cached[0] < IDLE_TTL:
            return cached[1]
    index = Index(generation=0)
    clusters, nodes, every_flavor = fleet(organization, index)
    # with the quota approved capacity requests add now (one for a later window counts from its start)
    at = timezone.now()
    approved = capacity.approved(organization, at, timedelta(hours=1))
    tiers, cohorts, queues = governance(organization, every_flavor, index, at, approved)
    # Limits that no waiting can lift: per-member limits (nothing runs on the idle fleet, so only a request
    # larger than its submitter's limit is held) and the hard budgets whose limit is zero.
    limits = MemberLimit.objects.filter(team__organization=organization).values_list("team", "user", "accelerators")
    snapshot = m.Snapshot(
        time.time(),
        clusters,
        nodes,
        tiers,
        cohorts,
        queues,
        running=(),
        pending=(),
        member_limits={owner(team, user): int(amount * 1000) for team, user, amount in limits},
        budgets=never_budgets(organization.pk),
    )
    with _lock:
        _idle[organization.pk] = (now, snapshot)
        for key in [k for k in _verdicts if k[0] == organization.pk]:
            del _verdicts[key]
    return snapshot


def current_snapshot(organization: Organization) -> m.Snapshot:
    """Today's snapshot: the cached one while no cycle applied since and it is younger than ``PREVIEW_TTL``
    (for previews and the quota pages; a change of quotas or budgets drops it, ``forget``)."""
    generation = loop_generation(organization)
    now = time.monotonic()
    with _lock:
        cached = _current.get(organization.pk)
        if cached is not None and cached[1] == generation and now - cached[0] < PREVIEW_TTL:
            return cached[2]
    snapshot, index = build(organization, timezone.now())
    with _lock:
        _current[organization.pk] = (now, index.generation, snapshot)
    return snapshot


def forget(organization: Organization) -> None:
    """Drop the cached fleets and snapshot (tests, and after the fleet or quotas change)."""
    with _lock:
        _idle.pop(organization.pk, None)
        _current.pop(organization.pk, None)
        for key in [k for k in _verdicts if k[0] == organization.pk]:
            del _verdicts[key]


def _job(queue: Queue, tier: PriorityTier, request: JobRequest, submitted_at: float, submitter: int | None) -> m.Job:
    return engine_job(
        {
            "team_id": request.team.pk,
            "submitted_by_id": submitter,
            "queue__name": queue.name,
            "tier__name": tier.name,
            "submitted_at": datetime.fromtimestamp(submitted_at, UTC),
            "workers": request.workers,
            "accelerators": request.accelerators,
            "accelerator_milli": request.accelerator_milli,
            "cpu": request.cpu,
            "memory": request.memory,
            "accelerator_types": list(request.accelerator_types),
            "clusters": [c.slug for c in request.clusters],
            "regions": list(request.regions),
            "topology_level": request.topology_level,
            "topology_mode": request.topology_mode,
            "time_limit": request.time_limit,
            "max_price_per_hour": request.max_price_per_hour,
            "preemptible": request.preemptible and tier.preemptible,
            "spot": request.spot,
            "image": request.image,
            "data_locality": request.data_locality,
            "kind": request.kind,
            "head_accelerators": request.head_accelerators,
            "head_cpu": request.head_cpu,
            "head_memory": request.head_memory,
            "tpu_type": request.tpu_type,
            "tpu_topology": request.tpu_topology,
            "team__slug": request.team.slug,
        }
    )


def check(
    organization: Organization,
    queue: Queue,
    tier: PriorityTier,
    request: JobRequest,
    submitter: int | None = None,
) -> Refusal | None:
    """None if the request could run on this fleet under its queue's quota, its submitter's per-member limit
    (``submitter``, a user's pk) and its hard budgets whose limit is zero; else why it never will, and the
    field that is to blame."""
    idle = _idle_snapshot(organization)
    if queue.name not in {q.name for q in idle.queues} or tier.name not in {t.name for t in idle.tiers}:
        forget(organization)  # a queue made on first use, or a tier added, since the fleet was read
        idle = _idle_snapshot(organization)
    job = _job(queue, tier, request, idle.now, submitter)
    project = request.project.pk if request.project else None
    job = replace(job, budgets=charged_to(idle.budgets, request.team.pk, project))
    key = (organization.pk, replace(job, id="", submitted_at=0.0))
    with _lock:
        if key in _verdicts:
            return _verdicts[key]
    decisions = schedule(replace(idle, pending=(job,)))
    refusal = None
    if not decisions.admissions:
        pending = decisions.pending[0]
        if pending.reason in NEVER:
            field = NEVER[pending.reason]
            if request.tpu_type and field == "accelerators":  # a TPU job asks for slices, not accelerators
                field = "tpu_type"
            if field in HEAD_FIELDS and "Ray head" in pending.message:
                field = HEAD_FIELDS[field]
            refusal = Refusal(field, str(pending.reason), pending.message)
    with _lock:
        _verdicts[key] = refusal
    return refusal


def preview(
    organization: Organization,
    queue: Queue,
    tier: PriorityTier,
    request: JobRequest,
    submitter: int | None = None,
) -> Preview:
    """Where and when the request would start if submitted now by ``submitter`` (a user's pk), with today's
    queue and fleet: the placement loop's own cycle with the request added, so every limit that would hold it
    (its queue's quota, its submitter's per-member limit, a hard budget, maintenance, capacity) holds it
    here too, and the engine says which and, where running jobs' time limits bound it, until when."""
    snapshot = replace(current_snapshot(organization), now=time.time())
    job = _job(queue, tier, request, snapshot.now, submitter)
    if snapshot.budgets:
        project = request.project.pk if request.project else None
        job = replace(job, budgets=charged_to(snapshot.budgets, request.team.pk, project))
    config = replace(snapshot.config, estimate_for=job.id)  # however many jobs wait ahead, estimate this one
    decisions = schedule(replace(snapshot, pending=(*snapshot.pending, job), config=config))
    for admission in decisions.admissions:
        if admission.job == job.id:
            return Preview(admission.cost_per_hour, True, timezone.now(), "", "It would start now.")
    mine = next(p for p in decisions.pending if p.job == job.id)
    idle = schedule(replace(_idle_snapshot(organization), pending=(job,), member_limits={}, budgets={}))
    cost = idle.admissions[0].cost_per_hour if idle.admissions else None
    start = datetime.fromtimestamp(mine.estimated_start, UTC) if mine.estimated_start else None
    return Preview(cost, False, start, str(mine.reason), mine.message)
