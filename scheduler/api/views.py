"""The jobs API: submit (and preview), list, read, follow the timeline of, and cancel jobs; admins also
force-preempt and requeue them.

Thin, like the rest of the API: rows come from ``Job.objects.for_user`` (another team's job is a 404 for
every verb), a submission goes through ``actions.submit_job`` (the one path, shared with the web form and
the ``qm`` CLI), its output from its cluster (``logs.py``), a cancellation through ``actions.cancel_job``, a
preemption or requeue through ``actions.preempt_job`` / ``actions.requeue_job``; a job in the wrong state for
the change is a 409. The serializers convert between the units people use and the engine's.

Checkpoints and the exit code are reported by the job itself, with its attempt's token
(``scheduler.actions.checkpoints``): the two endpoints that take a job token, and ones no person's token may report
to (docs/jobs.md says why).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from django.core.exceptions import ValidationError as DjangoValidationError
from django.db.models import Exists, OuterRef, Prefetch, QuerySet
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema
from rest_framework import mixins, status
from rest_framework.authentication import SessionAuthentication
from rest_framework.decorators import action
from rest_framework.exceptions import NotFound, PermissionDenied, Throttled
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.serializers import Serializer

from common import params
from common.api.errors import error_body
from common.api.parsers import JSONParser
from scheduler import actions, debug, submission
from scheduler.actions import replicas, sessions
from scheduler.actions.checkpoints import AlreadyReported, JobToken, TooSoon, report, report_exit, report_progress
from scheduler.api import serializers as s
from scheduler.api.logs import JobLogsMixin
from scheduler.authentication import JobTokenAuthentication, JobTokenOrSignedIn
from scheduler.filters import JobFilter
from scheduler.models import Assignment, Attempt, Checkpoint, Dependency, Job, JobEvent
from scheduler.placement import feasibility
from tenancy.authentication import ApiTokenAuthentication
from tenancy.rest import TenantViewSet
from tenancy.scopes import TokenScope

ERROR = OpenApiResponse(description="`{error: {status, code, message, fields}}`")


@contextmanager
def api_field_names() -> Iterator[None]:
    """Re-raise an action's ``ValidationError`` under the API's field names (``memory`` -> ``memory_gib``)."""
    try:
        yield
    except DjangoValidationError as error:
        if not hasattr(error, "error_dict"):
            raise
        raise DjangoValidationError(
            {s.API_FIELD_NAMES.get(name, name): messages for name, messages in error.message_dict.items()}
        ) from error


class JobViewSet(JobLogsMixin, TenantViewSet, mixins.ListModelMixin, mixins.RetrieveModelMixin):
    """Jobs of the teams the user may see. Submitting takes the units people use: cores, GiB, a fraction of
    an accelerator, a time limit in seconds or as ``90m`` / ``2h`` / ``1d``."""

    model = Job
    filterset_class = JobFilter
    parser_classes = [JSONParser]

    def get_queryset(self) -> QuerySet[Job]:
        attempts = Attempt.objects.select_related("cluster").prefetch_related(
            Prefetch("assignments", queryset=Assignment.objects.select_related("node").order_by("pk"))
        )
        queryset = super().get_queryset().select_related("team", "project", "queue", "tier", "submitted_by")
        queryset = queryset.prefetch_related(Prefetch("attempts", queryset=attempts.order_by("number")))
        if self.action == "retrieve":
            queryset = queryset.prefetch_related("clusters")
            # Most jobs wait for nothing: their detail needs no query for dependencies (``JobSerializer``).
            queryset = queryset.annotate(has_dependencies=Exists(Dependency.objects.filter(job=OuterRef("pk"))))
        if self.action not in ("list", "events", "checkpoints", "logs"):
            # What the detail shows of checkpoints (the last, a count per attempt): the kept ones, in one query.
            queryset = queryset.prefetch_related("checkpoints")
        return queryset

    def filter_queryset(self, queryset: QuerySet[Any]) -> QuerySet[Any]:
        # The list's filters only: a job's own endpoints take other parameters (``events?after=``).
        return super().filter_queryset(queryset) if self.action == "list" else queryset

    def get_serializer_class(self) -> type[Any]:
        if self.action == "list":
            return s.JobListSerializer
        if self.action in ("create", "preview"):
            return s.JobSubmissionSerializer
        if self.action == "events":
            return s.JobEventSerializer
        if self.action == "checkpoints":
            return s.CheckpointSerializer
        return s.JobSerializer

    def _job_request(self, request: Request) -> submission.JobRequest:
        form = s.JobSubmissionSerializer(data=request.data, context=self.get_serializer_context())
        return form.checked_request(request.headers.get("Idempotency-Key"))

    def _read(self, job: Job) -> dict[str, Any]:
        """``job`` as the detail endpoint shows it; a 404 if the user may no longer see it (a repeated
        idempotency key of a job left behind in a team the user has since left)."""
        visible = self.get_queryset().filter(pk=job.pk).first()
        if visible is None:
            raise NotFound()
        return dict(s.JobSerializer(visible, context=self.get_serializer_context()).data)

    @extend_schema(
        request=s.JobSubmissionSerializer,
        parameters=[OpenApiParameter("Idempotency-Key", str, OpenApiParameter.HEADER, description="Safe retries.")],
        responses={
            201: s.JobSerializer,
            200: OpenApiResponse(s.JobSerializer, description="The job first submitted with this idempotency key."),
            400: ERROR,
            403: ERROR,
        },
    )
    def create(self, request: Request) -> Response:
        """Submit a job. A request that can never fit anywhere is a 400 with the engine's reason."""
        job_request = self._job_request(request)
        with api_field_names():
            job, created = actions.submit_job(self.actor, job_request, http=request._request)
        return Response(self._read(job), status=status.HTTP_201_CREATED if created else status.HTTP_200_OK)

    @extend_schema(request=s.JobSubmissionSerializer, responses={200: s.PreviewSerializer, 400: ERROR, 403: ERROR})
    @action(detail=False, methods=["post"])
    def preview(self, request: Request) -> Response:
        """What a submission would get now (price per hour, start), without submitting anything."""
        job_request = self._job_request(request)
        with api_field_names():
            queue, tier = actions.validate(self.actor, job_request)
        result = feasibility.preview(job_request.team.organization, queue, tier, job_request, self.actor.pk)
        return Response(s.PreviewSerializer(result).data)

    @extend_schema(
        filters=False,
        parameters=[OpenApiParameter("lines", int, description="Lines of output to show (0-500; default 40).")],
        responses={200: OpenApiTypes.OBJECT, 400: ERROR, 404: ERROR},
        description=(
            "What happened to the job, in one answer: its attempts and where they ran, its timeline, why it "
            "waited, its nodes' health, its GPU utilization, its progress and the stragglers or hangs flagged, "
            "and the last lines of its output (or why they cannot be read). `qm debug` prints it."
        ),
    )
    @action(detail=True, methods=["get"])
    def debug(self, request: Request, pk: str | None = None) -> Response:
        job = self.get_object()
        lines = params.optional_integer(request.query_params.get("lines") or None, "lines", low=0, high=500)
        return Response(debug.gather(job, log_lines=debug.LOG_LINES if lines is None else lines))

    @extend_schema(
        filters=False,
        parameters=[OpenApiParameter("after", int, description="Only events with a greater id (for following).")],
        responses=s.JobEventSerializer(many=True),
    )
    @action(detail=True, methods=["get"])
    def events(self, request: Request, pk: str | None = None) -> Response:
        """The job's timeline: every move with its reason, oldest first."""
        job = self.get_object()
        events = JobEvent.objects.filter(job=job).select_related("actor").order_by("created_at", "pk")
        after = request.query_params.get("after")
        if after not in (None, ""):
            events = events.filter(pk__gt=params.integer(after, "after", low=0, high=params.MAX_ID))
        page = self.paginate_queryset(events)
        assert page is not None
        return self.get_paginated_response(s.JobEventSerializer(page, many=True).data)

    @extend_schema(
        request=s.CancelSerializer,
        responses={200: s.JobSerializer, 403: ERROR, 404: ERROR, 409: OpenApiResponse(description="Already over.")},
    )
    @action(detail=True, methods=["post"])
    def cancel(self, request: Request, pk: str | None = None) -> Response:
        """Cancel a waiting or running job: researchers their own, leads and admins any of the team's."""
        return self._change(request, s.CancelSerializer, actions.cancel_job)

    @extend_schema(
        request=s.InterventionSerializer,
        responses={
            200: s.JobSerializer,
            400: ERROR,
            403: ERROR,
            404: ERROR,
            409: OpenApiResponse(description="Not placed or running."),
        },
    )
    @action(detail=True, methods=["post"])
    def preempt(self, request: Request, pk: str | None = None) -> Response:
        """Admins: stop a placed or running job within its tier's grace period (it checkpoints and exits) and
        put it back in its queue, to resume from its checkpoint. Not counted as a retry."""
        return self._change(request, s.InterventionSerializer, actions.preempt_job)

    @extend_schema(
        request=s.InterventionSerializer,
        responses={
            200: s.JobSerializer,
            400: ERROR,
            403: ERROR,
            404: ERROR,
            409: OpenApiResponse(description="Not failed."),
        },
    )
    @action(detail=True, methods=["post"])
    def requeue(self, request: Request, pk: str | None = None) -> Response:
        """Admins: put a failed job (out of retries, say) back in its queue for one more try."""
        return self._change(request, s.InterventionSerializer, actions.requeue_job)

    def _change(self, request: Request, form_class: type[Serializer[Any]], change: Callable[..., Job]) -> Response:
        """Apply ``change`` (an action taking the actor, the job and a reason) to a job the user can see; a job
        in a state the change does not apply to is a 409 naming the state."""
        job = self.get_object()
        form = form_class(data=request.data)
        form.is_valid(raise_exception=True)
        try:
            job = change(self.actor, job, form.validated_data["reason"], http=request._request)
        except DjangoValidationError as error:
            if "state" not in getattr(error, "error_dict", {}):
                raise
            messages = error.message_dict["state"]
            body = error_body(409, "conflict", " ".join(messages), {"state": messages})
            return Response(body, status=status.HTTP_409_CONFLICT)
        return Response(self._read(job))

    @extend_schema(
        methods=["GET"],
        filters=False,
        responses={200: s.CheckpointSerializer(many=True), 403: ERROR, 404: ERROR},
        description="The checkpoints the job reported (the last 50 kept), newest first.",
    )
    @extend_schema(
        methods=["POST"],
        request=s.CheckpointReportSerializer,
        responses={
            201: s.CheckpointSerializer,
            400: ERROR,
            401: ERROR,
            403: OpenApiResponse(description="Not a job token, another job's, or its attempt is no longer current."),
            404: ERROR,
            429: OpenApiResponse(description="Reported too soon after the last one: see Retry-After."),
        },
        description=(
            "Report a checkpoint, with the job's own token (`QM_JOB_TOKEN`; `qm checkpoint` inside the job). "
            "A restart resumes from the last one."
        ),
    )
    @action(
        detail=True,
        methods=["get", "post"],
        authentication_classes=[JobTokenAuthentication, ApiTokenAuthentication, SessionAuthentication],
        permission_classes=[JobTokenOrSignedIn, TokenScope],
    )
    def checkpoints(self, request: Request, pk: str | None = None) -> Response:
        token = request.auth if isinstance(request.auth, JobToken) else None
        if request.method == "GET":
            if token is not None:
                raise PermissionDenied("A job token only reports its job's checkpoints; it reads nothing.")
            job = self.get_object()
            page = self.paginate_queryset(Checkpoint.objects.filter(job=job).order_by("-reported_at", "-pk"))
            assert page is not None
            return self.get_paginated_response(s.CheckpointSerializer(page, many=True).data)
        job, token = self._reporting_job(
            token,
            pk,
            "Checkpoints are reported by the job itself, with the token of its attempt (QM_JOB_TOKEN): "
            "run `qm checkpoint` inside the job.",
        )
        form = s.CheckpointReportSerializer(data=request.data)
        form.is_valid(raise_exception=True)
        try:
            checkpoint = report(job, token.attempt, form.validated_data["location"], form.validated_data["step"])
        except TooSoon as error:
            raise Throttled(wait=error.retry_after, detail=str(error)) from None
        return Response(s.CheckpointSerializer(checkpoint).data, status=status.HTTP_201_CREATED)

    @extend_schema(
        request=s.ExitReportSerializer,
        responses={
            201: s.ExitReportedSerializer,
            400: ERROR,
            401: ERROR,
            403: OpenApiResponse(description="Not a job token, another job's, or its attempt is no longer current."),
            404: ERROR,
            409: OpenApiResponse(description="The attempt reported its exit code already: the first report stands."),
        },
        description=(
            "Report how the job's program ended, with the job's own token (`QM_JOB_TOKEN`), once per attempt: "
            "0 succeeds the job, anything else fails it (then its retries). For clusters that cannot tell "
            "(Cloud TPU: the startup script reports)."
        ),
    )
    @action(
        detail=True,
        methods=["post"],
        authentication_classes=[JobTokenAuthentication, ApiTokenAuthentication, SessionAuthentication],
        permission_classes=[JobTokenOrSignedIn, TokenScope],
    )
    def report(self, request: Request, pk: str | None = None) -> Response:
        job, token = self._reporting_job(
            request.auth if isinstance(request.auth, JobToken) else None,
            pk,
            "A job's exit code is reported by the job itself, with the token of its attempt (QM_JOB_TOKEN).",
        )
        form = s.ExitReportSerializer(data=request.data)
        form.is_valid(raise_exception=True)
        try:
            attempt = report_exit(job, token.attempt, form.validated_data["exit_code"])
        except AlreadyReported as error:
            body = error_body(409, "conflict", str(error), {})
            return Response(body, status=status.HTTP_409_CONFLICT)
        return Response(s.ExitReportedSerializer(attempt).data, status=status.HTTP_201_CREATED)

    @extend_schema(
        request=s.ProgressReportSerializer,
        responses={
            201: s.ProgressSerializer,
            400: ERROR,
            401: ERROR,
            403: OpenApiResponse(description="Not a job token, another job's, or its attempt is no longer current."),
            404: ERROR,
            429: OpenApiResponse(description="That worker reported too soon after its last report: see Retry-After."),
        },
        description=(
            "Report how far a worker got, with the job's own token (`QM_JOB_TOKEN`; `qm progress` inside the "
            "job): its step count and its own seconds per step. Quartermaster flags a worker persistently slower "
            "than its peers (a straggler) and a job that stops making progress (hung); the job's tier says what "
            "follows."
        ),
    )
    @action(
        detail=True,
        methods=["post"],
        authentication_classes=[JobTokenAuthentication, ApiTokenAuthentication, SessionAuthentication],
        permission_classes=[JobTokenOrSignedIn, TokenScope],
    )
    def progress(self, request: Request, pk: str | None = None) -> Response:
        job, token = self._reporting_job(
            request.auth if isinstance(request.auth, JobToken) else None,
            pk,
            "Progress is reported by the job itself, with the token of its attempt (QM_JOB_TOKEN): "
            "run `qm progress` inside the job.",
        )
        form = s.ProgressReportSerializer(data=request.data)
        form.is_valid(raise_exception=True)
        data = form.validated_data
        try:
            row = report_progress(job, token.attempt, data["worker"], data["step"], data["step_seconds"])
        except TooSoon as error:
            raise Throttled(wait=error.retry_after, detail=str(error)) from None
        return Response(s.ProgressSerializer(row).data, status=status.HTTP_201_CREATED)

    @extend_schema(
        methods=["GET"],
        request=None,
        responses={
            200: s.SessionLinkSerializer,
            401: ERROR,
            403: OpenApiResponse(description="Not the session's submitter (a notebook runs as them)."),
            404: ERROR,
            409: OpenApiResponse(description="Not a session, or it does not run with an address yet."),
        },
        description=(
            "The link that opens an interactive session once, a one-time code in it (`qm open`): for its submitter "
            "only, while it runs and its app has said where it listens."
        ),
    )
    @extend_schema(
        methods=["POST"],
        request=s.SessionReportSerializer,
        responses={
            201: OpenApiResponse(description="Taken."),
            400: ERROR,
            401: ERROR,
            403: OpenApiResponse(description="Not a job token, another job's, or its attempt is no longer current."),
            404: ERROR,
        },
        description=(
            "An interactive session's program reports, with the job's own token (`QM_JOB_TOKEN`), where its app "
            'listens (`{"url": ...}`) and, when the app stopped itself after its idle time, `{"ended": "idle"}`.'
        ),
    )
    @action(
        detail=True,
        methods=["get", "post"],
        authentication_classes=[JobTokenAuthentication, ApiTokenAuthentication, SessionAuthentication],
        permission_classes=[JobTokenOrSignedIn, TokenScope],
    )
    def session(self, request: Request, pk: str | None = None) -> Response:
        token = request.auth if isinstance(request.auth, JobToken) else None
        if request.method == "GET":
            if token is not None:
                raise PermissionDenied("A job token reports a session's address; it opens nothing.")
            job = self.get_object()  # another team's job: 404
            try:
                link = sessions.open_link(request.user, job)
            except sessions.NotReady as error:
                return Response(error_body(409, "conflict", str(error), {}), status=status.HTTP_409_CONFLICT)
            return Response(s.SessionLinkSerializer({"url": link}).data)
        job, token = self._reporting_job(
            token, pk, "A session's address is reported by its own program, with the token of its attempt."
        )
        form = s.SessionReportSerializer(data=request.data)
        form.is_valid(raise_exception=True)
        data = form.validated_data
        sessions.report(job, token.attempt, data.get("url"), ended_idle=data.get("ended") == "idle")
        return Response({"taken": True}, status=status.HTTP_201_CREATED)

    @extend_schema(
        request=s.EndpointReportSerializer,
        responses={
            201: OpenApiResponse(description="Taken."),
            400: ERROR,
            401: ERROR,
            403: OpenApiResponse(description="Not a job token, another job's, or its attempt is no longer current."),
            404: ERROR,
        },
        description=(
            "A service replica's program reports, with the job's own token (`QM_JOB_TOKEN`), where it listens "
            '(`{"url": "http://10.0.0.7:8123/"}`) once its health path answers.'
        ),
    )
    @action(
        detail=True,
        methods=["post"],
        authentication_classes=[JobTokenAuthentication, ApiTokenAuthentication, SessionAuthentication],
        permission_classes=[JobTokenOrSignedIn, TokenScope],
    )
    def endpoint(self, request: Request, pk: str | None = None) -> Response:
        job, token = self._reporting_job(
            request.auth if isinstance(request.auth, JobToken) else None,
            pk,
            "A service replica's address is reported by its own program, with the token of its attempt.",
        )
        form = s.EndpointReportSerializer(data=request.data)
        form.is_valid(raise_exception=True)
        replicas.report(job, token.attempt, form.validated_data["url"])
        return Response({"taken": True}, status=status.HTTP_201_CREATED)

    def _reporting_job(self, token: JobToken | None, pk: str | None, who_reports: str) -> tuple[Job, JobToken]:
        """The job a job token reports for (its own, by the URL): a person gets 404 for a job they may not
        see, else 403 saying who reports; another job's token is 403."""
        if token is None:
            self.get_object()  # a job the user may not see is a 404, as for every verb
            raise PermissionDenied(who_reports)
        if str(token.job_id) != pk:
            raise PermissionDenied(f"This job token is for job #{token.job_id}, not #{pk}.")
        job = Job.objects.filter(pk=token.job_id).first()
        if job is None:
            raise NotFound()
        return job, token
