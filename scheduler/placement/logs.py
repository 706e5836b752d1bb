"""A job's output, read from the cluster an attempt ran on (``Backend.logs``), for the API and ``qm logs``.

Reading is I/O in a web request: the backend's own timeout (10 s) bounds it, and its errors
(``BackendError``, ``CredentialsError``) go up to the caller, which answers them (docs/jobs.md §Output).
Nothing is written: the output stays on the cluster.
"""

from __future__ import annotations

import re

from clusters.actions.sync import backend_for
from clusters.backends.base import LogChunk
from scheduler.models import Attempt, Job

#: What a request may name as a worker and as an offset (the API and the job page check them alike).
WORKER = re.compile(r"[A-Za-z0-9_-]{1,63}")
OFFSET = re.compile(r"[0-9A-Za-z.~:_-]{1,100}")


def attempt_of(job: Job, number: int | None) -> Attempt | None:
    """The attempt ``number`` of ``job`` (None if it has none such), or when ``number`` is None its newest one
    the cluster was handed (None before the first dispatch)."""
    attempts = Attempt.objects.filter(job=job).select_related("cluster")
    if number is not None:
        return attempts.filter(number=number).first()
    return attempts.exclude(backend_id="").order_by("-number").first()


def read(attempt: Attempt, worker: str, *, offset: str, tail: int | None, limit: int) -> LogChunk:
    """A page of ``worker``'s output of ``attempt``, from its cluster."""
    return backend_for(attempt.cluster).logs(attempt.backend_id, worker, offset=offset, tail=tail, limit=limit)
