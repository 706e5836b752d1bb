"""``/api/v1/services/``: a team's inference services (docs/service-tools.md §The API).

List and create; read, change (a change of the program rolls out a new revision) and delete (stops it: its
replicas are cancelled, the service and its revisions stay); ``scale``, ``stop``, ``start``, ``rollback``;
its replicas and its load over time (``samples/?since=``). Bodies are ``serving/submission.py``'s (cores, GiB,
names); changes are ``serving.actions``'; another team's service is a 404 whatever the verb.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from django.contrib.auth.models import User
from django.core.exceptions import ValidationError as DjangoValidationError
from django.db.models import QuerySet
from django.utils import timezone
from django.utils.dateparse import parse_datetime
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import exceptions, mixins, status, viewsets
from rest_framework.decorators import action
from rest_framework.request import Request
from rest_framework.response import Response

from common.api.errors import error_body
from common.api.parsers import JSONParser
from serving import actions, figures, submission
from serving.api.serializers import (
    ERROR,
    SAMPLE,
    ReplicaSerializer,
    ScaleSerializer,
    ServiceChangeSerializer,
    ServiceCreateSerializer,
    ServiceSerializer,
)
from serving.models import Service
from tenancy.scoping import Action

#: The load over time of the last hour by default; at most this far back.
DEFAULT_SINCE = timedelta(hours=1)
MAX_SINCE = timedelta(days=7)


def _body(request: Request) -> dict[str, Any]:
    if not isinstance(request.data, dict):
        raise exceptions.ValidationError({"non_field_errors": ["Send a JSON object."]})
    return dict(request.data)


def _invalid(error: DjangoValidationError) -> exceptions.ValidationError:
    return exceptions.ValidationError(submission.api_errors(error))


class ServiceViewSet(
    viewsets.GenericViewSet,  # type: ignore[type-arg]
    mixins.ListModelMixin,
    mixins.RetrieveModelMixin,
    mixins.DestroyModelMixin,
):
    """A team's inference services: each a program behind one stable endpoint, run as replicas (jobs of kind
    ``service``) that scale with the load. Another team's service is a 404 whatever the verb."""

    model = Service
    serializer_class = ServiceSerializer
    parser_classes = [JSONParser]
    http_method_names = ["get", "post", "patch", "delete", "head", "options"]

    @property
    def actor(self) -> User:
        assert isinstance(self.request.user, User)
        return self.request.user

    def get_queryset(self) -> QuerySet[Service]:
        # Every row through the one scoping path: another team's service is a 404, whatever the verb.
        return (
            Service.objects.for_user(self.request.user, Action.VIEW)
            .select_related("team", "project", "tier", "revision__model_version__model", "created_by")
            .prefetch_related("clusters")
            .order_by("team__slug", "name")
        )

    def get_serializer_context(self) -> dict[str, Any]:
        context = super().get_serializer_context()
        services = getattr(self, "_page_services", None)
        if services is not None:
            context["figures"] = figures.summaries(services)
        return context

    def list(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        queryset = self.filter_queryset(self.get_queryset())
        page = self.paginate_queryset(queryset)
        rows = list(page if page is not None else queryset)
        self._page_services = rows
        data = self.get_serializer(rows, many=True).data
        return self.get_paginated_response(data) if page is not None else Response(data)

    def _read(self, service: Service, code: int = status.HTTP_200_OK) -> Response:
        fresh = self.get_queryset().get(pk=service.pk)
        context = {**super().get_serializer_context(), "figures": figures.summaries([fresh])}
        return Response(ServiceSerializer(fresh, context=context).data, status=code)

    def retrieve(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        return self._read(self.get_object())

    @extend_schema(
        request=ServiceCreateSerializer,
        responses={201: ServiceSerializer, 400: ERROR, 403: ERROR},
        description="Create a service (revision 1, active); its replicas start at the control loop's next tick.",
    )
    def create(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        try:
            team, name, fields = submission.creation(self.actor, _body(request))
            service = actions.create_service(self.actor, team=team, name=name, http=request._request, **fields)
        except DjangoValidationError as error:
            raise _invalid(error) from error
        return self._read(service, status.HTTP_201_CREATED)

    @extend_schema(
        request=ServiceChangeSerializer,
        responses={200: ServiceSerializer, 400: ERROR, 403: ERROR, 404: ERROR},
        description="Change a service: a change of its program rolls out a new revision, one replica at a time.",
    )
    def partial_update(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        service = self.get_object()
        try:
            fields = submission.change(service, _body(request))
            actions.update_service(self.actor, service, http=request._request, **fields)
        except DjangoValidationError as error:
            raise _invalid(error) from error
        return self._read(service)

    @extend_schema(responses={200: ServiceSerializer, 403: ERROR, 404: ERROR, 409: ERROR})
    def destroy(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        """Stop the service (its replicas are cancelled); the service and its revisions stay, to start again."""
        return self._state(request, actions.stop_service)

    def _state(self, request: Request, change: Any) -> Response:
        service = self.get_object()
        try:
            change(self.actor, service, http=request._request)
        except DjangoValidationError as error:
            if "state" not in getattr(error, "error_dict", {}) and "revision" not in getattr(error, "error_dict", {}):
                raise _invalid(error) from error
            messages = [m for ms in error.message_dict.values() for m in ms]
            return Response(error_body(409, "conflict", " ".join(messages), error.message_dict), status=409)
        return self._read(service)

    @extend_schema(request=ScaleSerializer, responses={200: ServiceSerializer, 400: ERROR, 403: ERROR, 404: ERROR})
    @action(detail=True, methods=["post"])
    def scale(self, request: Request, pk: str | None = None) -> Response:
        """Change how the service scales: its bounds, metric, target and windows."""
        service = self.get_object()
        try:
            fields = submission.scaling(_body(request))
            actions.scale(self.actor, service, http=request._request, **fields)
        except DjangoValidationError as error:
            raise _invalid(error) from error
        return self._read(service)

    @extend_schema(request=None, responses={200: ServiceSerializer, 403: ERROR, 404: ERROR, 409: ERROR})
    @action(detail=True, methods=["post"])
    def stop(self, request: Request, pk: str | None = None) -> Response:
        """Stop every replica; the service stays, to start again."""
        return self._state(request, actions.stop_service)

    @extend_schema(request=None, responses={200: ServiceSerializer, 403: ERROR, 404: ERROR, 409: ERROR})
    @action(detail=True, methods=["post"])
    def start(self, request: Request, pk: str | None = None) -> Response:
        """Run a stopped service again."""
        return self._state(request, actions.start_service)

    @extend_schema(request=None, responses={200: ServiceSerializer, 403: ERROR, 404: ERROR, 409: ERROR})
    @action(detail=True, methods=["post"])
    def rollback(self, request: Request, pk: str | None = None) -> Response:
        """Abandon a rollout in progress, or roll out again the revision before the current one."""
        return self._state(request, actions.rollback)

    @extend_schema(responses={200: ReplicaSerializer(many=True), 404: ERROR})
    @action(detail=True, methods=["get"], pagination_class=None)
    def replicas(self, request: Request, pk: str | None = None) -> Response:
        """The replicas present (``?all=1``: those gone too), newest first, with where they run."""
        service = self.get_object()
        rows = figures.replica_rows(service, include_gone=request.query_params.get("all") in ("1", "true"))
        return Response(ReplicaSerializer(rows, many=True).data)

    @extend_schema(
        parameters=[
            OpenApiParameter("since", str, description="ISO 8601 date-time; default: an hour ago (at most 7 days ago).")
        ],
        responses={200: SAMPLE, 400: ERROR, 404: ERROR},
    )
    @action(detail=True, methods=["get"], pagination_class=None)
    def samples(self, request: Request, pk: str | None = None) -> Response:
        """The load over time: one sample per control tick, oldest first."""
        service = self.get_object()
        since = _since(request.query_params.get("since"))
        return Response([figures.sample_dict(s) for s in figures.samples_since(service, since)])


def _since(raw: str | None) -> datetime:
    now = timezone.now()
    if not raw:
        return now - DEFAULT_SINCE
    try:
        parsed = parse_datetime(raw)
    except ValueError:
        parsed = None
    if parsed is None:
        raise exceptions.ValidationError({"since": ["Give an ISO 8601 date-time, e.g. 2026-12-01T10:00:00Z."]})
    if timezone.is_naive(parsed):
        parsed = timezone.make_aware(parsed)
    return max(parsed, now - MAX_SINCE)
