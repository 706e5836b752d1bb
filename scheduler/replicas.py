"""Service replicas (``Job.Kind.SERVICE``): one replica of a service, a program serving HTTP until it is
stopped (docs/jobs.md, "Service replicas"). The ``serving`` app makes them with ``actions.submit_job`` (people
cannot: the job API and form refuse the kind) and stops them with ``actions.cancel_job``.

The program the cluster runs (``clusters/backends/slurm/service.py``; the simulated cluster runs the same
script) reports where the replica listens once its health path answers, with the attempt's job token
(``report``: ``POST /api/v1/jobs/{id}/endpoint/``); ``serving`` reads it from the running attempt
(``current_url``). An earlier or ended attempt may not report (``checkpoints.fence``), so an address is always
the current attempt's.
"""

from __future__ import annotations

from django.core.exceptions import ValidationError
from django.db import transaction

from scheduler.checkpoints import fence
from scheduler.models import Attempt, Job
from scheduler.sessions import check_url
from scheduler.states import JobState


def report(job: Job, attempt_number: int, url: object) -> Attempt:
    """Record where attempt ``attempt_number`` of replica ``job`` listens. ``ValidationError`` naming the field
    for bad input (nothing stored); ``PermissionDenied`` when the attempt may not report (``fence``)."""
    if job.kind != Job.Kind.SERVICE:
        raise ValidationError({"kind": f"Job #{job.pk} is not a service replica; it reports no endpoint."})
    address = check_url(url)
    with transaction.atomic():
        locked = Job.objects.select_for_update().get(pk=job.pk)
        attempt = fence(locked, attempt_number, "its endpoint")
        Attempt.objects.filter(pk=attempt.pk).update(serve_url=address)
        attempt.serve_url = address
    return attempt


def current_url(job: Job) -> str:
    """Where the running replica ``job`` listens ("" until its program has reported, and once it has ended)."""
    if job.kind != Job.Kind.SERVICE or job.state != JobState.RUNNING:
        return ""
    found = (
        Attempt.objects.filter(job=job, number=job.attempt, outcome=Attempt.Outcome.ACTIVE)
        .values_list("serve_url", flat=True)
        .first()
    )
    return found or ""
