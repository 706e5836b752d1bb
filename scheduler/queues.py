"""A queue as people see it: its usage against its quotas and its running and waiting jobs, each described in a
line, with why it waits. The job pages and the team's quota page (``governance/web/quotas.py``) both show it."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from django.db.models import F, OuterRef, Subquery
from django.shortcuts import get_object_or_404
from django.utils import timezone

from common.types import AuthenticatedHttpRequest
from governance.models import Queue, Quota
from scheduler.engine.model import PendingReason
from scheduler.models import Attempt, Job
from scheduler.states import PLACED, WAITING
from tenancy.scoping import Action

#: The pending reasons in a few words (the engine's message says the rest).
REASON_LABELS: dict[str, str] = {
    PendingReason.QUOTA_EXHAUSTED: "queue quota in use",
    PendingReason.CAPACITY: "waiting for free capacity",
    PendingReason.RESERVED: "capacity reserved for it",
    PendingReason.WAITING_FOR_PREEMPTION: "waiting for preempted jobs to stop",
    PendingReason.BACKFILL_BLOCKED: "behind a reservation",
    PendingReason.NOT_CONSIDERED: "not reached in the last cycle",
    PendingReason.MEMBER_LIMIT: "at its submitter's limit",
    PendingReason.BUDGET: "over a hard budget",
    PendingReason.NEVER_FITS: "never fits",
    PendingReason.MEMORY_NEVER_FITS: "more memory than any node has",
    PendingReason.CPU_NEVER_FITS: "more CPU than any node has",
    PendingReason.TOPOLOGY: "no domain big enough",
    PendingReason.PRICE_LIMIT: "over its price limit",
    PendingReason.QUOTA_EXCEEDS_LIMIT: "more than its queue may ever use",
    PendingReason.NO_FLAVOR: "no such accelerator offered",
    PendingReason.UNKNOWN_QUEUE: "unknown queue",
    PendingReason.UNKNOWN_TIER: "unknown tier",
    PendingReason.NO_CLUSTER: "no cluster can run it",
    PendingReason.MAINTENANCE: "would run into maintenance",
    PendingReason.DEPENDENCY: "waiting for its dependencies",
    PendingReason.ARRAY_LIMIT: "at its array's limit",
}


def describe_resources(job: Job, *, per_worker: bool = False) -> str:
    """What a job asks for in one line: ``2 x 8 H100-SXM-80GB``, ``0.25 of one A100-SXM-40GB``, ``4 x CPU
    only`` (with ``per_worker``, one worker's share alone)."""
    types = " or ".join(job.accelerator_types) or "any accelerator"
    if job.accelerators == 0:
        what = "CPU only" if not per_worker else "no accelerators"
    elif job.accelerator_milli < 1000:
        what = f"{job.accelerator_milli / 1000:g} of one {types}"
    else:
        what = f"{job.accelerators} {types}"
    return f"{job.workers} x {what}" if job.workers > 1 and not per_worker else what


@dataclass
class Usage:
    flavor: str
    used: float
    nominal: Decimal | None = None
    borrowing_limit: Decimal | None = None

    @property
    def percent(self) -> int:
        if not self.nominal:
            return 100 if self.used else 0
        return min(100, round(100 * self.used / float(self.nominal)))

    @property
    def borrowing(self) -> bool:
        return self.nominal is not None and self.used > float(self.nominal)

    @property
    def ceiling(self) -> Decimal | None:
        if self.nominal is None or self.borrowing_limit is None:
            return None
        return self.nominal + self.borrowing_limit


def queue_usage(request: AuthenticatedHttpRequest, queue: Queue) -> list[Usage]:
    """Accelerators the queue's placed jobs hold per type (their current attempts), beside its quotas."""
    used: dict[str, float] = defaultdict(float)
    holding = Attempt.objects.filter(
        job__queue=queue, job__state__in=PLACED, outcome=Attempt.Outcome.ACTIVE, number=F("job__attempt")
    )
    for flavor, workers, accelerators, milli in holding.values_list(
        "flavor", "job__workers", "job__accelerators", "job__accelerator_milli"
    ):
        if accelerators:
            used[flavor] += workers * accelerators * milli / 1000
    quotas = (
        Quota.objects.for_user(request.user, Action.VIEW)
        .filter(queue=queue, resource=Quota.Resource.ACCELERATORS)
        .select_related("flavor")
        .order_by("flavor__name")
    )
    rows = [Usage(q.flavor.name, used.pop(q.flavor.name, 0.0), q.nominal, q.borrowing_limit) for q in quotas]
    rows += [Usage(flavor, amount) for flavor, amount in sorted(used.items())]
    return rows


def queue_context(request: AuthenticatedHttpRequest, pk: int, *, jobs_only: bool = False) -> dict[str, Any]:
    """A queue's usage against quota (unless ``jobs_only``) and its running and waiting jobs."""
    scoped = Queue.objects.for_user(request.user, Action.VIEW).select_related("team", "project", "cohort")
    queue: Queue = get_object_or_404(scoped, pk=pk)
    current = Attempt.objects.filter(job=OuterRef("pk"), number=OuterRef("attempt"))
    jobs = (
        Job.objects.for_user(request.user, Action.VIEW)
        .filter(queue=queue)
        .select_related("project", "tier", "submitted_by")
        .annotate(
            cluster_name=Subquery(current.values("cluster__name")[:1]), flavor=Subquery(current.values("flavor")[:1])
        )
    )
    running = jobs.filter(state__in=PLACED).order_by("state_changed_at", "pk")
    waiting = jobs.filter(state__in=WAITING).order_by(F("queue_position").asc(nulls_last=True), "submitted_at", "pk")
    context = {
        "queue": queue,
        "jobs_only": jobs_only,
        "usage": [] if jobs_only else queue_usage(request, queue),
        "running": [(job, describe_resources(job)) for job in running],
        "waiting": [(job, describe_resources(job), REASON_LABELS.get(job.pending_reason, "")) for job in waiting],
        "now": timezone.now(),
    }
    return context
