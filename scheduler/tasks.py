"""The placement loop's Celery tasks. Thin: each takes ids and calls ``loop`` or ``dispatch``, which claim
their rows and are safe to run twice or to be killed anywhere."""

from __future__ import annotations

import logging
from dataclasses import asdict
from typing import Any

from celery import shared_task
from django.db.models import Q
from django.utils import timezone

from clusters.models import Cluster
from common import enqueue
from governance.actions import budgets, capacity
from scheduler.models import Attempt
from scheduler.placement import dispatch, elastic, follow, loop, recover
from scheduler.watch.rounds import watch_round
from tenancy.models import Organization

log = logging.getLogger(__name__)


@shared_task(ignore_result=True)
def placement_cycle() -> list[dict[str, Any]] | None:
    """On the beat and after each submission: one cycle per organization, if this worker leads. A cycle that
    stopped at its admission limit queues the next one at once, so a burst is admitted without waiting for
    the beat."""
    reports = loop.run_all()
    if reports is None:
        return None
    if any(r.more for r in reports):
        enqueue.send("scheduler.tasks.placement_cycle")
    return [r.as_dict() for r in reports]


@shared_task(ignore_result=True)
def dispatch_attempts(attempt_ids: list[int]) -> dict[str, int]:
    """Hand admitted attempts to their clusters (idempotent per attempt)."""
    outcomes: dict[str, int] = {}
    for attempt_id in attempt_ids:
        outcome = dispatch.dispatch(attempt_id)
        outcomes[outcome] = outcomes.get(outcome, 0) + 1
    return outcomes


@shared_task(ignore_result=True)
def signal_job(job_id: int) -> str:
    """Tell the cluster of a job being stopped (preempted, drained, at its time limit) to let it checkpoint
    and exit."""
    return dispatch.signal(job_id)


@shared_task(ignore_result=True)
def follow_cluster(cluster_id: int) -> dict[str, Any]:
    return asdict(follow.follow(cluster_id))


@shared_task(ignore_result=True)
def follow_clusters() -> int:
    """On the beat: follow every cluster with live attempts, each in its own task; and mark the drains whose
    nodes have no work left done."""
    recover.finish_drains(None, timezone.now())
    busy = Q(attempts__outcome=Attempt.Outcome.ACTIVE) | Q(attempts__cleanup_pending=True)
    ids = list(Cluster.objects.filter(busy).distinct().values_list("pk", flat=True))
    for cluster_id in ids:
        follow_cluster.delay(cluster_id)
    return len(ids)


@shared_task(ignore_result=True)
def cleanup_attempt(attempt_id: int) -> bool:
    """Cancel an ended attempt on its cluster (a cancelled job); the follow loop retries if this fails."""
    return dispatch.cleanup(attempt_id)


@shared_task(
    ignore_result=True,
    autoretry_for=(budgets.DeliveryFailed,),
    retry_backoff=30,
    retry_backoff_max=3600,
    max_retries=budgets.MAX_DELIVERY_ATTEMPTS,
)
def deliver_budget_alert(alert_id: int) -> bool:
    """Send one budget alert by e-mail and webhook (each channel once it has taken it)."""
    return budgets.deliver(alert_id)


@shared_task(ignore_result=True)
def check_budgets() -> int:
    """On the beat: raise the budget alerts that are due, and queue again the deliveries still owed."""
    raised = budgets.raise_alerts()
    for alert_id in budgets.undelivered():
        enqueue.send("scheduler.tasks.deliver_budget_alert", alert_id)
    return len(raised)


@shared_task(ignore_result=True)
def provision_grant(grant_id: int) -> str:
    """Ask an elastic pool's cloud for the nodes a placement cycle wrote down (``placement.elastic``)."""
    return elastic.provision(grant_id)


@shared_task(ignore_result=True)
def settle_elastic() -> dict[str, int]:
    """On the beat: asks to make again, elastic nodes that came up, idle ones given back."""
    return elastic.settle()


@shared_task(ignore_result=True)
def settle_capacity_requests() -> dict[str, int]:
    """On the beat: end the approved windows of capacity requests that are over, and tell the team's leads of
    those that end soon (``governance.actions.capacity.settle``; the loop already counts each only while it
    holds)."""
    return capacity.settle()


@shared_task(ignore_result=True)
def watch_jobs() -> dict[str, int]:
    """Every running job's progress through the straggler and hang detectors (``scheduler/watch``)."""
    totals = {"jobs": 0, "stragglers": 0, "hangs": 0}
    for organization in Organization.objects.all():
        report = watch_round(organization)
        totals["jobs"] += report.jobs
        totals["stragglers"] += report.stragglers
        totals["hangs"] += report.hangs
    return totals
