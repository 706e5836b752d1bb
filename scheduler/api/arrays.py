"""The arrays and pipelines API: submit an array (a sweep) and read it with its tasks counted by state
(failed first), cancel it, requeue its failed tasks; submit a pipeline of named steps that wait for each
other (docs/jobs.md §Arrays and sweeps, §Pipelines).

Thin like the jobs API: arrays come from ``JobArray.objects.for_user`` (another team's array is a 404),
changes go through ``scheduler/actions/arrays.py`` and ``scheduler/actions/pipelines.py``. Each step's (and an array's)
job request is the jobs API's own submission (``JobSubmissionSerializer``), its errors named
``job.<field>`` (``steps.<step>.job.<field>`` in a pipeline).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from django.core.exceptions import ValidationError as DjangoValidationError
from django.db.models import QuerySet
from drf_spectacular.utils import OpenApiResponse, extend_schema, extend_schema_field
from rest_framework import mixins, serializers, status
from rest_framework.decorators import action
from rest_framework.request import Request
from rest_framework.response import Response

from common.api.errors import error_body
from common.api.parsers import JSONParser
from common.api.serializers import StrictSerializer
from scheduler.actions import arrays, pipelines
from scheduler.api.serializers import API_FIELD_NAMES, JobSubmissionSerializer
from scheduler.models import Dependency, DependencyFailure, Job, JobArray
from scheduler.submission import JobRequest
from scheduler.sweeps import ARRAY_FIELDS, ArrayRequest
from tenancy.rest import TenantViewSet

ERROR = OpenApiResponse(description="`{error: {status, code, message, fields}}`")
#: How many tasks an array's detail lists (the rest: ``/api/v1/jobs/?array=<id>``).
TASKS_SHOWN = 100


class ArrayFieldsSerializer(StrictSerializer):
    """How the tasks are given: exactly one of ``range``, ``grid`` and ``params``."""

    range = serializers.CharField(
        required=False, allow_blank=True, max_length=2000, help_text="0-99, 0-99:2, 1,5,10-12"
    )
    grid = serializers.DictField(
        child=serializers.ListField(child=serializers.JSONField()),
        required=False,
        help_text='Parameter names and lists of values; every combination is a task: {"lr": [0.1, 0.01]}.',
    )
    params = serializers.ListField(
        child=serializers.DictField(child=serializers.JSONField()),
        required=False,
        help_text='One task per object of parameters: [{"lr": 0.1}, {"lr": 0.01}].',
    )
    max_running = serializers.IntegerField(
        required=False, allow_null=True, min_value=1, help_text="At most this many tasks at once; empty: no limit."
    )


class ArraySubmissionSerializer(ArrayFieldsSerializer):
    job = serializers.DictField(help_text="The tasks' job request, as POST /api/v1/jobs/ takes it.")


class AfterSerializer(StrictSerializer):
    step = serializers.CharField(required=False, allow_blank=True, max_length=120)
    job = serializers.IntegerField(required=False, min_value=1)
    array = serializers.IntegerField(required=False, min_value=1)
    kind = serializers.ChoiceField(choices=Dependency.Kind.choices, required=False, default=Dependency.Kind.AFTER_OK)


@extend_schema_field(
    {
        "oneOf": [
            {"type": "string", "description": "A step's name: after it succeeds."},
            {
                "type": "object",
                "properties": {
                    "step": {"type": "string"},
                    "job": {"type": "integer"},
                    "array": {"type": "integer"},
                    "kind": {"type": "string", "enum": list(Dependency.Kind.values)},
                },
            },
        ]
    }
)
class AfterField(serializers.Field):  # type: ignore[type-arg]
    """A step's name (``"train"``, after it succeeds), or an object: ``{"step"|"job"|"array": ..., "kind": ...}``."""

    def to_internal_value(self, data: Any) -> pipelines.After:
        if isinstance(data, str):
            return pipelines.After(step=data)
        form = AfterSerializer(data=data)
        form.is_valid(raise_exception=True)
        return pipelines.After(**form.validated_data)

    def to_representation(self, value: Any) -> Any:
        return value


class StepSerializer(StrictSerializer):
    name = serializers.CharField(max_length=120)
    job = serializers.DictField(help_text="The step's job request, as POST /api/v1/jobs/ takes it.")
    array = ArrayFieldsSerializer(required=False, allow_null=True, help_text="Makes the step an array of tasks.")
    after = serializers.ListField(child=AfterField(), required=False, help_text="What the step waits for.")
    on_dependency_failure = serializers.ChoiceField(
        choices=DependencyFailure.choices, required=False, default=DependencyFailure.CANCEL
    )


class PipelineSerializer(StrictSerializer):
    steps = serializers.ListField(child=StepSerializer(), min_length=1, max_length=pipelines.MAX_STEPS)


class ArraySerializer(serializers.ModelSerializer[JobArray]):
    team: serializers.SlugRelatedField[Any] = serializers.SlugRelatedField(slug_field="slug", read_only=True)
    submitted_by: serializers.SlugRelatedField[Any] = serializers.SlugRelatedField(
        slug_field="username", read_only=True
    )
    counts = serializers.SerializerMethodField(help_text="Tasks by state.")
    done = serializers.SerializerMethodField()

    class Meta:
        model = JobArray
        fields = [
            "id",
            "name",
            "team",
            "submitted_by",
            "submitted_at",
            "count",
            "max_running",
            "spec",
            "counts",
            "done",
        ]
        # Shown, never written here: a read-only field carries no bounds, and a model field's bounds differ by
        # database (2**31 on PostgreSQL, 2**63 on SQLite), which would make the committed schema differ too.
        read_only_fields = fields

    def _summary(self, array: JobArray) -> arrays.Summary:
        cache: dict[int, arrays.Summary] = self.context.setdefault("summaries", {})
        if array.pk not in cache:
            cache[array.pk] = arrays.summary(array)
        return cache[array.pk]

    def get_counts(self, array: JobArray) -> dict[str, int]:
        return self._summary(array).counts

    def get_done(self, array: JobArray) -> int:
        return self._summary(array).done


class TaskSerializer(serializers.ModelSerializer[Job]):
    index = serializers.IntegerField(source="array_index")
    params = serializers.JSONField(source="array_params")

    class Meta:
        model = Job
        fields = ["id", "index", "params", "name", "state", "pending_reason", "pending_message", "message"]


class ArrayDetailSerializer(ArraySerializer):
    tasks = serializers.SerializerMethodField(help_text=f"The first {TASKS_SHOWN} tasks, the failed ones first.")

    class Meta(ArraySerializer.Meta):
        fields = [*ArraySerializer.Meta.fields, "tasks"]

    def get_tasks(self, array: JobArray) -> list[dict[str, Any]]:
        return list(TaskSerializer(arrays.tasks_in_order(array)[:TASKS_SHOWN], many=True).data)


class ArrayReasonSerializer(serializers.Serializer[Any]):
    reason = serializers.CharField(required=False, allow_blank=True, max_length=2000)


@contextmanager
def named(prefix: str) -> Iterator[None]:
    """Re-raise a job request's errors as ``<prefix>job.<field>`` (the API's names), the array's as they are."""
    try:
        yield
    except (DjangoValidationError, serializers.ValidationError) as error:
        if isinstance(error, serializers.ValidationError):
            if not isinstance(error.detail, Mapping):
                raise
            items: dict[str, Any] = dict(error.detail)
        elif hasattr(error, "error_dict"):
            items = error.message_dict
        else:
            raise
        renamed = {
            (
                f"{prefix}{k}"
                if k in ARRAY_FIELDS or k.startswith("steps")
                else f"{prefix}job.{API_FIELD_NAMES.get(k, k)}"
            ): v
            for k, v in items.items()
        }
        raise serializers.ValidationError(renamed) from error


def job_request(view: Any, data: Any, prefix: str = "") -> JobRequest:
    form = JobSubmissionSerializer(data=data, context=view.get_serializer_context())
    with named(prefix):
        return form.checked_request()


def array_request(job: JobRequest, data: Mapping[str, Any]) -> ArrayRequest:
    return ArrayRequest(
        job=job,
        range=data.get("range") or "",
        grid=data.get("grid") or {},
        params=data.get("params") or (),
        max_running=data.get("max_running"),
    )


class ArrayViewSet(TenantViewSet, mixins.ListModelMixin, mixins.RetrieveModelMixin):
    """Job arrays (sweeps) of the teams the user may see, newest first; their tasks are jobs
    (``/api/v1/jobs/?array=<id>``)."""

    model = JobArray
    parser_classes = [JSONParser]

    def get_queryset(self) -> QuerySet[JobArray]:
        return super().get_queryset().select_related("team", "submitted_by")

    def get_serializer_class(self) -> type[Any]:
        if self.action == "create":
            return ArraySubmissionSerializer
        if self.action in ("cancel", "requeue"):
            return ArrayReasonSerializer
        return ArrayDetailSerializer if self.action == "retrieve" else ArraySerializer

    def _read(self, array: JobArray) -> dict[str, Any]:
        return dict(ArrayDetailSerializer(array, context=self.get_serializer_context()).data)

    @extend_schema(request=ArraySubmissionSerializer, responses={201: ArrayDetailSerializer, 400: ERROR, 403: ERROR})
    def create(self, request: Request) -> Response:
        """Submit an array: one job request run as many tasks, each with ``QM_ARRAY_INDEX`` and its parameters
        (``QM_PARAM_<NAME>``, ``QM_PARAMS``) in its environment. A repeated idempotency key returns the first."""
        form = ArraySubmissionSerializer(data=request.data)
        form.is_valid(raise_exception=True)
        job = job_request(self, form.validated_data["job"])
        with named(""):
            array, created = arrays.submit_array(
                self.actor, array_request(job, form.validated_data), http=request._request
            )
        return Response(self._read(array), status=status.HTTP_201_CREATED if created else status.HTTP_200_OK)

    def _change(self, request: Request, change: Any, done: str) -> Response:
        array = self.get_object()
        form = ArrayReasonSerializer(data=request.data)
        form.is_valid(raise_exception=True)
        try:
            if change is arrays.cancel_array:
                count = change(self.actor, array, form.validated_data.get("reason", ""), http=request._request)
            else:
                count = change(self.actor, array, http=request._request)
        except DjangoValidationError as error:
            if "state" not in getattr(error, "error_dict", {}):
                raise
            messages = error.message_dict["state"]
            return Response(error_body(409, "conflict", " ".join(messages), {"state": messages}), status=409)
        return Response({done: count, "array": self._read(array)})

    @extend_schema(
        request=ArrayReasonSerializer, responses={200: ArrayDetailSerializer, 403: ERROR, 404: ERROR, 409: ERROR}
    )
    @action(detail=True, methods=["post"])
    def cancel(self, request: Request, pk: str | None = None) -> Response:
        """Cancel every task still waiting or running: the array's owner, a lead of its team or an admin."""
        return self._change(request, arrays.cancel_array, "cancelled")

    @extend_schema(
        request=ArrayReasonSerializer, responses={200: ArrayDetailSerializer, 403: ERROR, 404: ERROR, 409: ERROR}
    )
    @action(detail=True, methods=["post"])
    def requeue(self, request: Request, pk: str | None = None) -> Response:
        """Give every failed task one more try (the same task, a new attempt, resuming from its checkpoint)."""
        return self._change(request, arrays.requeue_failed, "requeued")


class PipelineViewSet(TenantViewSet):
    """Pipelines: named steps (jobs or arrays) that wait for each other, submitted at once."""

    model = Job
    parser_classes = [JSONParser]
    serializer_class = PipelineSerializer

    @extend_schema(
        request=PipelineSerializer,
        responses={201: OpenApiResponse(description="`{steps: {name: {kind, id}}}`"), 400: ERROR, 403: ERROR},
    )
    def create(self, request: Request) -> Response:
        """Submit a pipeline. ``after`` names steps (or ``{"job": id}``, ``{"array": id}`` already submitted)
        with a kind: ``after_ok`` (default), ``after_any``, ``after_not_ok``. A cycle, or a job you cannot
        see, is a 400 and nothing is submitted."""
        form = PipelineSerializer(data=request.data)
        form.is_valid(raise_exception=True)
        steps = []
        errors: dict[str, Any] = {}
        for data in form.validated_data["steps"]:
            prefix = f"steps.{data['name']}."
            try:
                job = job_request(self, data["job"], prefix)
            except serializers.ValidationError as error:
                errors.update(error.detail if isinstance(error.detail, dict) else {prefix: error.detail})
                continue
            array = array_request(job, data["array"]) if data.get("array") else None
            steps.append(pipelines.Step(data["name"], job, array, data.get("after", []), data["on_dependency_failure"]))
        if errors:
            raise serializers.ValidationError(errors)
        with named(""):
            made = pipelines.submit_pipeline(self.actor, pipelines.PipelineRequest(steps), http=request._request)
        answer = {name: {"kind": "array" if isinstance(x, JobArray) else "job", "id": x.pk} for name, x in made.items()}
        return Response({"steps": answer}, status=status.HTTP_201_CREATED)
