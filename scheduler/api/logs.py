"""``GET /api/v1/jobs/{id}/logs/``: a page of a job's output, read from its cluster (docs/jobs.md §Output).

A mixin of the jobs viewset, so the job is found as every job endpoint finds it (``for_user``: another
team's job is a 404). The page comes from the attempt's backend (``placement.logs``); what the cluster says
goes back in the API's one error format, never as a 500: no such worker or no output kept there is a 404
with the backend's words (code ``not_on_cluster`` or ``logs_unavailable``), an offset the backend never gave
a 400 naming ``offset``, a cluster that does not answer (or whose credentials cannot be read) a 503, any other
failure of the cluster a 502.

A job not dispatched yet has no output: the answer is an empty page with ``attempt`` null, ``complete`` only
once the job has ended (it never ran). Following is polling with ``offset`` (``qm logs -f``); the server does
not hold a request open waiting for output.
"""

from __future__ import annotations

from typing import Any

from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema
from rest_framework import serializers, status
from rest_framework.decorators import action
from rest_framework.request import Request
from rest_framework.response import Response

from clusters.backends.base import (
    LOG_LIMIT,
    LOG_LIMIT_MAX,
    LOG_TAIL_MAX,
    BackendError,
    BadOffset,
    LogsUnavailable,
    NotFound,
    Unreachable,
)
from clusters.secrets import CredentialsError
from common import params
from common.api.errors import error_body
from scheduler.models import Job
from scheduler.placement import logs

WORKER, OFFSET = logs.WORKER, logs.OFFSET
#: The smallest page: room for a long line and a UTF-8 character that would otherwise be cut.
LOG_LIMIT_MIN = 1024


class LogPageSerializer(serializers.Serializer[dict[str, Any]]):
    job = serializers.IntegerField()
    attempt = serializers.IntegerField(allow_null=True, help_text="The attempt read; null before the first dispatch.")
    latest_attempt = serializers.IntegerField(allow_null=True, help_text="The job's newest dispatched attempt.")
    cluster = serializers.CharField(allow_null=True)
    job_state = serializers.CharField()
    worker = serializers.CharField(help_text='"" for the job\'s main output, else as asked.')
    text = serializers.CharField(allow_blank=True)
    next_offset = serializers.CharField(allow_blank=True, help_text="Pass as `offset` to read on.")
    more = serializers.BooleanField(help_text="More output is there already: ask again with next_offset.")
    complete = serializers.BooleanField(help_text="This attempt's output has ended and will not grow.")
    origin = serializers.CharField(allow_blank=True, help_text="Where it was read from (a file, a pod).")


def _query(request: Request) -> tuple[str, str, int | None, int, int | None]:
    """(worker, offset, tail, limit, attempt) from the query string; ``BadParameter`` (a 400) naming the bad one."""
    query = request.query_params
    worker = query.get("worker", "").strip()
    if worker and not WORKER.fullmatch(worker):
        raise params.BadParameter("worker", "A worker's index (0, 1, ...) or name (head, submitter).")
    offset = query.get("offset", "").strip()
    if offset and not OFFSET.fullmatch(offset):
        raise params.BadParameter("offset", "The next_offset of an earlier answer.")
    tail = params.optional_integer(query.get("tail") or None, "tail", low=0, high=LOG_TAIL_MAX)
    if offset and tail is not None:
        raise params.BadParameter("tail", "Give tail or offset, not both: tail starts, offset goes on.")
    limit = params.optional_integer(query.get("limit") or None, "limit", low=LOG_LIMIT_MIN, high=LOG_LIMIT_MAX)
    attempt = params.optional_integer(query.get("attempt") or None, "attempt", low=1, high=params.MAX_ID)
    return worker, offset, tail, LOG_LIMIT if limit is None else limit, attempt


def _failure(error: BackendError | CredentialsError, cluster: str) -> Response:
    """The API's answer to what the cluster said (the module docstring)."""
    if isinstance(error, BadOffset):
        body = error_body(400, "invalid", "Invalid offset.", {"offset": [str(error)]})
        return Response(body, status=status.HTTP_400_BAD_REQUEST)
    if isinstance(error, NotFound):
        code = "logs_unavailable" if isinstance(error, LogsUnavailable) else "not_on_cluster"
        return Response(error_body(404, code, f"{cluster}: {error}"), status=status.HTTP_404_NOT_FOUND)
    if isinstance(error, Unreachable | CredentialsError):
        body = error_body(503, "cluster_unavailable", f"{cluster} did not answer: {error}")
        return Response(body, status=status.HTTP_503_SERVICE_UNAVAILABLE)
    return Response(error_body(502, "cluster_error", f"{cluster}: {error}"), status=status.HTTP_502_BAD_GATEWAY)


class JobLogsMixin:
    """The jobs viewset's ``logs`` endpoint (the module docstring)."""

    get_object: Any

    @extend_schema(
        filters=False,
        parameters=[
            OpenApiParameter(
                "worker", str, description='A worker\'s index, "head" or "submitter" (Ray); default: the main output.'
            ),
            OpenApiParameter("tail", int, description=f"Start with the last N lines (0-{LOG_TAIL_MAX})."),
            OpenApiParameter("offset", str, description="Go on from an earlier answer's next_offset."),
            OpenApiParameter(
                "limit", int, description=f"Bytes at most ({LOG_LIMIT_MIN}-{LOG_LIMIT_MAX}; {LOG_LIMIT})."
            ),
            OpenApiParameter("attempt", int, description="An attempt's number; default: the newest dispatched."),
        ],
        responses={
            200: LogPageSerializer,
            400: OpenApiResponse(description="A bad parameter, named."),
            404: OpenApiResponse(description="No such job, attempt or worker, or the cluster keeps no output."),
            502: OpenApiResponse(description="The cluster failed: its words."),
            503: OpenApiResponse(description="The cluster did not answer."),
        },
    )
    @action(detail=True, methods=["get"])
    def logs(self, request: Request, pk: str | None = None) -> Response:
        """A page of the job's output from its cluster: from the start, the last `tail` lines, or on from `offset`."""
        job: Job = self.get_object()
        worker, offset, tail, limit, number = _query(request)
        latest = logs.attempt_of(job, None)
        attempt = latest if number is None else logs.attempt_of(job, number)
        if attempt is None and number is not None:
            body = error_body(404, "no_such_attempt", f"Job {job.pk} has no attempt {number}.")
            return Response(body, status=status.HTTP_404_NOT_FOUND)
        page: dict[str, Any] = {
            "job": job.pk,
            "attempt": None,
            "latest_attempt": latest.number if latest is not None else None,
            "cluster": None,
            "job_state": job.state,
            "worker": worker,
            "text": "",
            "next_offset": offset,
            "more": False,
            "complete": not job.is_active,
            "origin": "",
        }
        if attempt is None:  # never dispatched: nothing to read yet, and nothing ever once it has ended
            return Response(LogPageSerializer(page).data)
        page.update(attempt=attempt.number, cluster=attempt.cluster.name)
        if not attempt.backend_id:  # an attempt the cluster was never handed (refused before, say)
            page["complete"] = attempt.outcome != attempt.Outcome.ACTIVE
            return Response(LogPageSerializer(page).data)
        try:
            chunk = logs.read(attempt, worker, offset=offset, tail=tail, limit=limit)
        except (BackendError, CredentialsError) as error:
            return _failure(error, f"Cluster {attempt.cluster.name}")
        page.update(
            text=chunk.text,
            next_offset=chunk.next_offset,
            more=chunk.more,
            complete=chunk.complete,
            origin=chunk.source,
        )
        return Response(LogPageSerializer(page).data)
