"""What happened to a job, in one place (``GET /api/v1/jobs/{id}/debug/``, the job's debug page, ``qm debug``):
its placement and attempts, its timeline, why it waited (the reasons its timeline recorded, and the one it has
now), its nodes' health, its GPU utilization, its progress and the flags raised on it, and the last lines of its
output. Each part is read on its own; one that cannot be read (a cluster that does not answer) says why and the
rest is still there."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from django.utils import timezone

from clusters.backends.base import BackendError
from clusters.models import HealthCheckResult
from clusters.secrets import CredentialsError
from scheduler import utilization
from scheduler.models import Attempt, Job, Progress
from scheduler.placement import logs
from scheduler.watch.rounds import HUNG, STRAGGLER

#: Lines of output shown, and events of the timeline (the latest).
LOG_LINES = 40
EVENTS = 100


def gather(job: Job, *, now: datetime | None = None, log_lines: int = LOG_LINES) -> dict[str, Any]:
    now = now or timezone.now()
    attempts = list(
        Attempt.objects.filter(job=job)
        .select_related("cluster")
        .prefetch_related("assignments__node")
        .order_by("number")
    )
    events = list(job.events.order_by("-created_at", "-pk")[:EVENTS])[::-1]
    return {
        "job": {
            "id": job.pk,
            "name": job.name,
            "state": job.state,
            "attempt": job.attempt,
            "pending_reason": job.pending_reason,
            "pending_message": job.pending_message,
            "estimated_start": job.estimated_start,
            "message": job.message,
        },
        "attempts": [_attempt(a) for a in attempts],
        "timeline": [
            {"at": e.created_at, "from": e.from_state, "to": e.to_state, "reason": e.reason, "message": e.message}
            for e in events
        ],
        # Why it waited, each time it did: what it last waited for when it was admitted (the loop records it on
        # the admission), and why it went back to waiting.
        "waits": [
            {"at": e.created_at, "waited_for": e.detail.get("waited_for", ""), "event": e.reason, "message": e.message}
            for e in events
            if e.detail.get("waited_for") or e.to_state in ("pending", "requeued")
        ],
        "flags": [
            {"at": e.created_at, "kind": e.reason, "message": e.message, "detail": e.detail}
            for e in events
            if e.reason in (STRAGGLER, HUNG) and e.from_state == e.to_state
        ],
        "nodes": _nodes(attempts, job),
        "utilization": utilization.job_series(job, attempts, step=None, at=now, gpus=False)["summary"],
        "progress": _progress(job),
        "output": _output(job, log_lines),
    }


def _attempt(a: Attempt) -> dict[str, Any]:
    return {
        "number": a.number,
        "cluster": a.cluster.slug,
        "outcome": a.outcome,
        "reason": a.reason,
        "message": a.message,
        "admitted_at": a.admitted_at,
        "started_at": a.started_at,
        "ended_at": a.ended_at,
        "nodes": sorted({x.node.name for x in a.assignments.all()}),
    }


def _nodes(attempts: list[Attempt], job: Job) -> list[dict[str, Any]]:
    """The current attempt's nodes: their state, health and the latest failing check of each."""
    current = [a for a in attempts if a.number == job.attempt]
    if not current:
        return []
    nodes = {x.node.pk: x.node for x in current[0].assignments.all()}  # prefetched with the attempts
    failing: dict[int, HealthCheckResult] = {}
    for result in HealthCheckResult.objects.filter(node_id__in=nodes, ok=False).order_by("node_id", "-observed_at"):
        failing.setdefault(result.node_id, result)
    return [
        {
            "name": node.name,
            "state": node.state,
            "healthy": node.healthy,
            "ready": node.ready,
            "last_failing_check": (
                {"check": failing[pk].name, "message": failing[pk].message, "at": failing[pk].observed_at}
                if pk in failing
                else None
            ),
        }
        for pk, node in sorted(nodes.items(), key=lambda item: item[1].name)
    ]


def _progress(job: Job) -> list[dict[str, Any]]:
    """Each worker's latest progress report of the current attempt."""
    latest: dict[int, Progress] = {}
    for row in Progress.objects.filter(job=job, attempt=job.attempt).order_by("reported_at", "pk"):
        latest[row.worker] = row
    return [
        {"worker": w, "step": r.step, "step_seconds": r.step_seconds, "at": r.reported_at}
        for w, r in sorted(latest.items())
    ]


def _output(job: Job, lines: int) -> dict[str, Any]:
    """The last ``lines`` lines of the newest attempt's output, or why they cannot be shown."""
    attempt = logs.attempt_of(job, None)
    if attempt is None:
        return {"attempt": None, "text": "", "error": "It has not been handed to a cluster yet: no output."}
    try:
        chunk = logs.read(attempt, "", offset="", tail=lines, limit=64 * 1024)
    except (BackendError, CredentialsError) as error:
        return {"attempt": attempt.number, "text": "", "error": str(error) or type(error).__name__}
    return {"attempt": attempt.number, "text": chunk.text, "error": ""}
