"""What one placement cycle tells the metrics (``common/metrics.py``): time by phase, admissions' waits by
tier, preemptions by cause. Called by ``loop.run_cycle`` once its decisions are applied."""

from __future__ import annotations

import time
from datetime import datetime

from clusters.models import Cluster
from common import metrics
from scheduler.engine import model as m
from scheduler.models import Attempt, Job
from scheduler.placement.snapshot import Index
from scheduler.states import JobState

#: A job that last waited for one of these did not fit its quota (or budget, or its member limit): the
#: admission SLO leaves it out (observability/slo.py).
OVER_QUOTA = frozenset(
    {
        m.PendingReason.QUOTA_EXHAUSTED,
        m.PendingReason.QUOTA_EXCEEDS_LIMIT,
        m.PendingReason.BUDGET,
        m.PendingReason.MEMBER_LIMIT,
    }
)


def heartbeat() -> None:
    """The leading loop ran (with work or without): the "loop silent" alert watches this."""
    metrics.LOOP_LAST_RUN.set(time.time())


def cycle(seconds: dict[str, float], stale: bool, snapshot: m.Snapshot, decisions: m.Decisions, index: Index) -> None:
    for phase, spent in seconds.items():
        metrics.CYCLE_PHASE_SECONDS.labels(phase).observe(spent)
    metrics.CYCLES.labels("stale" if stale else "applied").inc()
    if stale:
        return
    jobs = {job.id: job for job in snapshot.pending}
    for admission in decisions.admissions:
        job = jobs.get(admission.job)
        seen = index.waiting.get(int(admission.job))
        if job is None or seen is None or seen[0] != JobState.PENDING:
            continue  # a requeued job's wait is not a submission's
        within = "false" if seen[2] and seen[2][0] in OVER_QUOTA else "true"
        wait = max(0.0, snapshot.now - job.submitted_at)
        metrics.ADMISSION_WAIT.labels(job.tier, within).observe(wait)
    for preemption in decisions.preemptions:
        metrics.PREEMPTIONS.labels(str(preemption.reason)).inc()


def started(attempt: Attempt, job: Job, now: datetime) -> None:
    """An attempt's job runs: how long it waited since its admission and, the first time, since submission."""
    tier = job.tier.name
    metrics.START_WAIT.labels(tier).observe(max(0.0, (now - attempt.admitted_at).total_seconds()))
    if attempt.number == 1:
        metrics.RUNNING_WAIT.labels(tier).observe(max(0.0, (now - job.submitted_at).total_seconds()))


def ended(attempt: Attempt, outcome: str, reason: str) -> None:
    """An attempt ended (``outcomes.end``); a preemption by its cluster counts as one of cause ``cluster``."""
    metrics.ATTEMPTS_ENDED.labels(_backend(attempt), outcome, reason).inc()
    if reason == "preempted_by_cluster":
        metrics.PREEMPTIONS.labels("cluster").inc()


_kinds: dict[int, str] = {}


def _backend(attempt: Attempt) -> str:
    """The kind of the attempt's cluster, without a query when the cluster came with it (a cluster's kind
    never changes, so one read per process and cluster is enough)."""
    if attempt.cluster_id not in _kinds:
        cached = attempt._state.fields_cache.get("cluster")
        kind = (
            cached.kind
            if cached is not None
            else Cluster.objects.values_list("kind", flat=True).get(pk=attempt.cluster_id)
        )
        _kinds[attempt.cluster_id] = str(kind)
    return _kinds[attempt.cluster_id]
