"""A job's GPU utilization: ``GET /api/v1/jobs/{id}/utilization/``.

Scoped like the job (another team's job is a 404). Parameters: ``attempt`` (one attempt's number; all of
them by default), ``step`` (the series' resolution in seconds, a multiple of 60 up to a day; by default
the finest that keeps each series within 720 points) and ``gpus`` (``true`` or ``false``: per-GPU series
for the nodes the job held alone; by default for jobs on at most 8 nodes). The rule that turns node samples into a job's
utilization is in ``scheduler/utilization.py`` and docs/operations.md.
"""

from __future__ import annotations

from typing import Any

from django.db.models import Prefetch
from django.http import Http404
from django.utils import timezone
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from common import params
from scheduler import utilization
from scheduler.models import Assignment, Attempt, Job
from tenancy.scoping import Action

MAX_STEP = 86_400


def step_param(value: Any) -> int | None:
    """The ``step`` parameter: None (automatic) or whole minutes in seconds, 60 to a day."""
    step = params.optional_integer(value, "step", low=60, high=MAX_STEP)
    if step is not None and step % 60:
        raise params.BadParameter("step", "A multiple of 60 seconds.")
    return step


def flag(value: Any, name: str) -> bool | None:
    """An optional ``true``/``false`` parameter (``1``/``0`` too); None when absent."""
    if value in (None, ""):
        return None
    spelled = {"true": True, "1": True, "false": False, "0": False}.get(str(value).strip().lower())
    if spelled is None:
        raise params.BadParameter(name, "true or false.")
    return spelled


class JobUtilizationView(APIView):
    @extend_schema(
        parameters=[
            OpenApiParameter("attempt", int, description="One attempt's number; all attempts by default."),
            OpenApiParameter("step", int, description="Seconds per point (a multiple of 60, at most 86400)."),
            OpenApiParameter("gpus", bool, description="Per-GPU series; by default for jobs on at most 8 nodes."),
        ],
        responses={
            200: OpenApiResponse(description="Per attempt, per node (per GPU where known) series and a summary."),
            400: OpenApiResponse(description="A bad parameter, named."),
            404: OpenApiResponse(description="No such job visible to you."),
        },
    )
    def get(self, request: Request, pk: str) -> Response:
        job_id = params.as_id(pk)
        job = Job.objects.for_user(request.user, Action.VIEW).filter(pk=job_id).first() if job_id else None
        if job is None:
            raise Http404("No such job.")
        query = request.query_params
        number = params.optional_integer(query.get("attempt"), "attempt", low=1, high=10_000)
        step = step_param(query.get("step"))
        gpus = flag(query.get("gpus"), "gpus")
        attempts = Attempt.objects.filter(job=job).select_related("cluster").order_by("number")
        if number is not None:
            attempts = attempts.filter(number=number)
        attempts = attempts.prefetch_related(
            Prefetch("assignments", queryset=Assignment.objects.select_related("node").order_by("pk"))
        )
        return Response(utilization.job_series(job, list(attempts), step=step, at=timezone.now(), gpus=gpus))
