"""The probe endpoint, and a cluster's elastic pools and their asks of the cloud.

The probe endpoint: node probes post GPU health readings with their cluster's probe token.

``POST /api/v1/probe/health/`` with ``Authorization: Bearer qmp_…``. The node must belong to the token's
cluster (another cluster's node is a 404, as if it did not exist); one report per node per
``PROBE_MIN_INTERVAL`` (429 with ``Retry-After`` otherwise); readings are validated field by field (400
naming the field). The answer says whether the node passes and which checks fail. The activity readings
(utilization, memory, power, clocks, throttle reasons) are optional per GPU: older probes do not send them,
and a GPU that does not support one leaves it out.

Elastic pools: ``/api/v1/clusters/{id}/elastic-pools/`` (GET, POST), ``.../elastic-pools/{pool_id}/`` (GET,
PATCH) and ``/api/v1/clusters/{id}/elastic-grants/`` (GET), thin like the fleet API (``clusters.api.fleet``): rows
through ``for_user`` (another organization's cluster or pool is a 404), changes through
``clusters.actions.elastic``, which checks them and audits them.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta
from typing import Any

from django.conf import settings
from django.core.cache import cache
from django.core.exceptions import ValidationError as DjangoValidationError
from django.db.models import QuerySet
from django.shortcuts import get_object_or_404
from django.utils import timezone
from drf_spectacular.extensions import OpenApiAuthenticationExtension
from drf_spectacular.utils import (
    OpenApiParameter,
    OpenApiResponse,
    extend_schema,
    extend_schema_view,
    inline_serializer,
)
from rest_framework import authentication, exceptions, mixins, serializers, status
from rest_framework.permissions import BasePermission
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from clusters import actions, elastic
from clusters.actions import elastic as elastic_actions
from clusters.actions import probe
from clusters.api import serializers as s
from clusters.models import Cluster, ElasticGrant, ElasticPool, Node, ProbeToken
from common.api.answered import Answered
from common.api.parsers import JSONParser
from tenancy import policy
from tenancy.models import hash_token
from tenancy.rest import TenantViewSet
from tenancy.scoping import Action

CLOCK_SKEW = timedelta(minutes=5)
OLDEST = timedelta(hours=1)


class ProbeTokenAuthentication(authentication.BaseAuthentication):
    keyword = "Bearer"

    def authenticate(self, request: Request) -> tuple[Any, ProbeToken] | None:
        header = authentication.get_authorization_header(request).split()
        if not header or header[0].lower() != b"bearer":
            return None
        if len(header) != 2:
            raise exceptions.AuthenticationFailed("Malformed Authorization header: use 'Bearer <probe token>'.")
        token = (
            ProbeToken.objects.filter(key_hash=hash_token(header[1].decode(errors="replace")), revoked_at=None)
            .select_related("cluster")
            .first()
        )
        if token is None:
            raise exceptions.AuthenticationFailed("Invalid or revoked probe token.")
        actions.note_probe_token_use(token)
        return None, token

    def authenticate_header(self, request: Request) -> str:
        return 'Bearer realm="probe"'


class ProbeTokenScheme(OpenApiAuthenticationExtension):  # type: ignore[no-untyped-call]
    target_class = "clusters.api.views.ProbeTokenAuthentication"
    name = "probeToken"

    def get_security_definition(self, auto_schema: Any) -> dict[str, str]:
        return {"type": "http", "scheme": "bearer", "description": "A cluster's probe token (qmp_…)."}


class HasProbeToken(BasePermission):
    def has_permission(self, request: Request, view: Any) -> bool:
        return isinstance(request.auth, ProbeToken)


class GpuSerializer(serializers.Serializer[Any]):
    index = serializers.IntegerField(min_value=0, max_value=63)
    uuid = serializers.CharField(max_length=80, required=False, allow_blank=True)
    temperature_c = serializers.IntegerField(min_value=-40, max_value=150)
    ecc_uncorrected = serializers.IntegerField(min_value=0, default=0)
    xid_errors = serializers.ListField(child=serializers.IntegerField(min_value=0), max_length=64, default=list)
    nvlink_links_down = serializers.IntegerField(min_value=0, max_value=64, default=0)
    # Activity readings, each optional (not every GPU supports each; older probes send none).
    utilization_gpu = serializers.IntegerField(min_value=0, max_value=100, required=False)
    utilization_memory = serializers.IntegerField(min_value=0, max_value=100, required=False)
    memory_used_bytes = serializers.IntegerField(min_value=0, max_value=2**50, required=False)
    memory_total_bytes = serializers.IntegerField(min_value=0, max_value=2**50, required=False)
    power_w = serializers.FloatField(min_value=0, max_value=10_000, required=False)
    power_limit_w = serializers.FloatField(min_value=0, max_value=10_000, required=False)
    sm_clock_mhz = serializers.IntegerField(min_value=0, max_value=100_000, required=False)
    memory_clock_mhz = serializers.IntegerField(min_value=0, max_value=100_000, required=False)
    throttle_reasons = serializers.IntegerField(min_value=0, max_value=2**63 - 1, required=False)

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        used, total = attrs.get("memory_used_bytes"), attrs.get("memory_total_bytes")
        if used is not None and total is not None and used > total:
            raise serializers.ValidationError({"memory_used_bytes": "Is more than memory_total_bytes."})
        return attrs


class ReportSerializer(serializers.Serializer[Any]):
    node = serializers.CharField(max_length=200)
    observed_at = serializers.DateTimeField()
    gpus = GpuSerializer(many=True, default=list)
    error = serializers.CharField(max_length=500, required=False, allow_blank=True, default="")

    def validate_observed_at(self, value: Any) -> Any:
        now = timezone.now()
        if value > now + CLOCK_SKEW:
            raise serializers.ValidationError("Is in the future: check the node's clock.")
        if value < now - OLDEST:
            raise serializers.ValidationError("Is more than an hour old: send current readings.")
        return value

    def validate_gpus(self, value: list[dict[str, Any]]) -> list[dict[str, Any]]:
        indexes = [g["index"] for g in value]
        if len(indexes) > 64:
            raise serializers.ValidationError("At most 64 GPUs per node.")
        if len(indexes) != len(set(indexes)):
            raise serializers.ValidationError("Each GPU index may appear once.")
        return value


def activity(gpu: dict[str, Any]) -> probe.Activity:
    """The activity readings of one validated GPU, in the probe module's names."""
    return probe.Activity(
        utilization=gpu.get("utilization_gpu"),
        memory_utilization=gpu.get("utilization_memory"),
        memory_used=gpu.get("memory_used_bytes"),
        memory_total=gpu.get("memory_total_bytes"),
        power_w=gpu.get("power_w"),
        power_limit_w=gpu.get("power_limit_w"),
        sm_clock_mhz=gpu.get("sm_clock_mhz"),
        memory_clock_mhz=gpu.get("memory_clock_mhz"),
        throttle_reasons=gpu.get("throttle_reasons"),
    )


class ProbeReportView(APIView):
    authentication_classes = [ProbeTokenAuthentication]
    permission_classes = [HasProbeToken]

    @extend_schema(
        request=ReportSerializer,
        responses={
            202: inline_serializer(
                "ProbeVerdict",
                {
                    "node": serializers.CharField(),
                    "healthy": serializers.BooleanField(),
                    "failing": serializers.ListField(),
                },
            )
        },
    )
    def post(self, request: Request) -> Response:
        token: ProbeToken = request.auth  # type: ignore[assignment]
        data = ReportSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        values = data.validated_data
        node = Node.objects.filter(cluster=token.cluster, name=values["node"]).first()
        if node is None:
            raise exceptions.NotFound(f"No node {values['node']!r} in cluster {token.cluster}.")
        interval = settings.PROBE_MIN_INTERVAL_SECONDS
        if not cache.add(f"qm:probe:{node.pk}", 1, timeout=interval):
            raise exceptions.Throttled(wait=interval, detail=f"One report per {interval} s per node.")
        report = probe.Report(
            node=node.name,
            observed_at=values["observed_at"],
            gpus=tuple(
                probe.GpuReading(
                    g["index"],
                    g["temperature_c"],
                    g["ecc_uncorrected"],
                    tuple(g["xid_errors"]),
                    g["nvlink_links_down"],
                    activity(g),
                )
                for g in values["gpus"]
            ),
            error=values["error"],
            expected_gpus=node.accelerators or None,
        )
        failing = probe.record(node, report)
        body = {
            "node": node.name,
            "healthy": not failing,
            "failing": [{"check": s.check, "message": s.message} for s in failing],
        }
        return Response(body, status=status.HTTP_202_ACCEPTED)


# --- Elastic pools ------------------------------------------------------------------------------------------

POOL_PATH = [
    OpenApiParameter("id", int, OpenApiParameter.PATH, description="The cluster's id."),
]
POOL_DETAIL_PATH = [
    *POOL_PATH,
    OpenApiParameter("pool_id", int, OpenApiParameter.PATH, description="The pool's id."),
]
ERROR = OpenApiResponse(description="`{error: {status, code, message, fields}}`")
#: The API's names of the fields whose action's name differs (its units do: MiB there, GiB here).
API_NAMES = {"node_memory": "node_memory_gib"}


class _OfCluster(TenantViewSet):
    """Rows of the cluster in the path, among those the user sees (another organization's cluster: 404)."""

    def cluster(self) -> Cluster:
        found: Cluster = get_object_or_404(Cluster.objects.for_user(self.actor, Action.VIEW), pk=self.kwargs["pk"])
        return found

    def administers(self, cluster: Cluster) -> bool:
        return policy.can(self.actor, "cluster.change", cluster)


@extend_schema_view(
    list=extend_schema(parameters=POOL_PATH),
    retrieve=extend_schema(parameters=POOL_DETAIL_PATH),
    create=extend_schema(
        parameters=POOL_PATH,
        request=s.ElasticPoolBodySerializer,
        responses={201: s.ElasticPoolSerializer, 400: ERROR, 403: ERROR, 404: ERROR},
    ),
    partial_update=extend_schema(
        parameters=POOL_DETAIL_PATH,
        request=s.ElasticPoolBodySerializer(partial=True),
        responses={200: s.ElasticPoolSerializer, 400: ERROR, 403: ERROR, 404: ERROR},
    ),
)
class ElasticPoolViewSet(Answered, _OfCluster, mixins.ListModelMixin, mixins.RetrieveModelMixin):
    """A cluster's elastic pools (docs/scheduling.md §Elastic pools), each with this month's spend and what its
    budget has left; every member of the organization reads them. Its admins add a pool (POST) and change any of
    its fields (PATCH; ``enabled: false`` switches it off: nothing more is asked of it, its nodes still go back
    once idle). Who may change is asked before the body is judged (403 whatever was sent); bad input is a 400
    naming the field, and changes nothing."""

    model = ElasticPool
    serializer_class = s.ElasticPoolSerializer
    parser_classes = [JSONParser]
    lookup_url_kwarg = "pool_id"

    def get_queryset(self) -> QuerySet[ElasticPool]:
        if getattr(self, "swagger_fake_view", False):  # the schema's generation: no cluster in the path
            return ElasticPool.objects.none()
        return (
            super()
            .get_queryset()
            .filter(cluster=self.cluster())
            .select_related("cluster", "accelerator")
            .order_by("name", "pk")
        )

    def _answer(self, pools: list[ElasticPool], many: bool) -> Any:
        context = {**self.get_serializer_context(), "spend": elastic.spend(pools)}
        return s.ElasticPoolSerializer(pools if many else pools[0], many=many, context=context).data

    def create(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        """Admins: add a pool to the cluster."""
        cluster = self.cluster()
        policy.require(self.actor, "cluster.change", cluster, f"Only admins of {cluster.organization} add pools.")
        form = s.ElasticPoolBodySerializer(data=request.data)
        form.is_valid(raise_exception=True)
        with _api_names():
            pool = elastic_actions.create_pool(self.actor, cluster, http=request._request, **form.to_action())
        body = self._answer([self.get_queryset().get(pk=pool.pk)], many=False)
        return Response(body, status=status.HTTP_201_CREATED)

    def partial_update(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        """Admins: change any of a pool's fields; those left out stay."""
        pool = self.get_object()
        policy.require(self.actor, "cluster.change", pool.cluster, "Only organization admins change pools.")
        form = s.ElasticPoolBodySerializer(data=request.data, partial=True)
        form.is_valid(raise_exception=True)
        with _api_names():
            elastic_actions.change_pool(self.actor, pool, http=request._request, **form.to_action())
        return Response(self._answer([self.get_queryset().get(pk=pool.pk)], many=False))


@contextmanager
def _api_names() -> Iterator[None]:
    """An action's refusal with its fields as the API names them."""
    try:
        yield
    except DjangoValidationError as error:
        if not hasattr(error, "error_dict"):
            raise
        raise exceptions.ValidationError(
            {API_NAMES.get(name, name): messages for name, messages in error.message_dict.items()}
        ) from None


@extend_schema_view(list=extend_schema(parameters=POOL_PATH))
class ElasticGrantViewSet(_OfCluster, mixins.ListModelMixin):
    """What the cluster's pools asked of the cloud, newest first: each ask's state, nodes, cost an hour and when
    they came up and went back; the jobs each was for, to the cluster's admins only."""

    model = ElasticGrant
    serializer_class = s.ElasticGrantSerializer

    def get_queryset(self) -> QuerySet[ElasticGrant]:
        if getattr(self, "swagger_fake_view", False):
            return ElasticGrant.objects.none()
        return (
            super()
            .get_queryset()
            .filter(pool__cluster=self.cluster())
            .select_related("pool")
            .order_by("-asked_at", "-pk")
        )

    def get_serializer_context(self) -> dict[str, Any]:
        context = super().get_serializer_context()
        if not getattr(self, "swagger_fake_view", False):
            context["administered"] = self.administers(self.cluster())
        return context
