"""The probe endpoint: node probes post GPU health readings with their cluster's probe token.

``POST /api/v1/probe/health/`` with ``Authorization: Bearer qmp_…``. The node must belong to the token's
cluster (another cluster's node is a 404, as if it did not exist); one report per node per
``PROBE_MIN_INTERVAL`` (429 with ``Retry-After`` otherwise); readings are validated field by field (400
naming the field). The answer says whether the node passes and which checks fail. The activity readings
(utilization, memory, power, clocks, throttle reasons) are optional per GPU: older probes do not send them,
and a GPU that does not support one leaves it out.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from django.conf import settings
from django.core.cache import cache
from django.utils import timezone
from drf_spectacular.extensions import OpenApiAuthenticationExtension
from drf_spectacular.utils import extend_schema, inline_serializer
from rest_framework import authentication, exceptions, serializers, status
from rest_framework.permissions import BasePermission
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from clusters import actions
from clusters.actions import probe
from clusters.models import Node, ProbeToken
from tenancy.models import hash_token

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
