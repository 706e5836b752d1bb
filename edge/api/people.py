"""People's API for the edge fleet: devices (list, filter by group and online, detail, revoke), device groups,
enrolment tokens (the token in the 201 answer only) and rollouts (start, list, detail, pause, resume, cancel,
roll back).

Thin: rows come from ``for_user`` (another team's device, group or rollout is a 404 for every verb, and absent
from lists); changes go through ``edge/actions/devices.py`` and ``edge/actions/rollouts.py``, which ask the policy
(403) and audit. Bad input is a 400 naming the field, and changes nothing.
"""

from __future__ import annotations

from typing import Any

from django.db.models import Count, Q, QuerySet
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema
from rest_framework import exceptions, mixins, serializers, status
from rest_framework.decorators import action
from rest_framework.request import Request
from rest_framework.response import Response

from common.api.serializers import StrictSerializer
from edge import presence
from edge.actions import devices, rollouts
from edge.models import Device, DeviceDeployment, DeviceGroup, EnrolmentToken, Rollout, RolloutEvent, Status
from registry.models import ModelVersion
from tenancy.models import Team
from tenancy.rest import ScopedRelatedField, TenantViewSet

ERROR = OpenApiResponse(description="`{error: {status, code, message, fields}}`")


def _version(version: ModelVersion | None) -> dict[str, Any] | None:
    if version is None:
        return None
    return {"version_id": version.pk, "model": version.model.name, "version": version.version, "sha256": version.sha256}


class GroupSerializer(serializers.ModelSerializer[DeviceGroup]):
    team = ScopedRelatedField(queryset=Team.objects.all())
    devices = serializers.IntegerField(read_only=True, source="device_count", default=0)

    class Meta:
        model = DeviceGroup
        fields = ["id", "team", "name", "kind", "description", "created_at", "devices"]
        read_only_fields = ["created_at"]
        validators: list[Any] = []


class DeviceSerializer(serializers.ModelSerializer[Device]):
    group = serializers.SerializerMethodField()
    last_status = serializers.ChoiceField(
        choices=Status.choices, allow_blank=True, read_only=True, help_text='What it last reported; "" before.'
    )
    online = serializers.SerializerMethodField()
    running = serializers.SerializerMethodField()
    previous = serializers.SerializerMethodField()
    desired = serializers.SerializerMethodField()

    class Meta:
        model = Device
        fields = [
            "id",
            "team",
            "group",
            "name",
            "online",
            "last_seen_at",
            "last_status",
            "last_detail",
            "health",
            "running",
            "previous",
            "desired",
            "desired_rollout",
            "hardware",
            "software",
            "connectivity",
            "enrolled_at",
            "revoked_at",
        ]
        read_only_fields = fields

    def get_group(self, device: Device) -> dict[str, Any]:
        return {"id": device.group_id, "name": device.group.name}

    def get_online(self, device: Device) -> bool:
        return presence.is_online(device)

    def get_running(self, device: Device) -> dict[str, Any] | None:
        return _version(device.running_version)

    def get_previous(self, device: Device) -> dict[str, Any] | None:
        return _version(device.previous_version)

    def get_desired(self, device: Device) -> dict[str, Any] | None:
        return _version(device.desired_version)


class DeviceViewSet(TenantViewSet, mixins.ListModelMixin, mixins.RetrieveModelMixin, mixins.DestroyModelMixin):
    """The team's devices (every team's, for an organization's finance and admins). DELETE (or POST
    ``revoke/``) revokes a device: its credential stops working at once, its history stays."""

    model = Device
    serializer_class = DeviceSerializer

    def get_queryset(self) -> QuerySet[Device]:
        rows = (
            super()
            .get_queryset()
            .select_related("group", "running_version__model", "previous_version__model", "desired_version__model")
        )
        if self.action != "list":
            return rows.order_by("pk")
        params = self.request.query_params
        if (group := params.get("group")) is not None:
            if not group.isdigit():
                raise exceptions.ValidationError({"group": ["A device group's id."]})
            rows = rows.filter(group_id=int(group))
        if (online := params.get("online")) is not None:
            if online not in ("true", "false"):
                raise exceptions.ValidationError({"online": ["true or false."]})
            seen = Q(last_seen_at__gte=presence.online_since())
            rows = rows.filter(seen) if online == "true" else rows.exclude(seen)
        return rows.order_by("name", "pk")

    @extend_schema(
        parameters=[
            OpenApiParameter("group", int, description="Only this group's devices."),
            OpenApiParameter("online", bool, description="Only the devices online (true) or offline (false)."),
        ]
    )
    def list(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        return super().list(request, *args, **kwargs)

    def perform_destroy(self, instance: Device) -> None:
        devices.revoke_device(self.actor, instance, http=self.request._request)

    @extend_schema(request=None, responses={200: DeviceSerializer, 403: ERROR, 404: ERROR})
    @action(detail=True, methods=["post"])
    def revoke(self, request: Request, pk: str | None = None) -> Response:
        device = devices.revoke_device(self.actor, self.get_object(), http=request._request)
        return Response(DeviceSerializer(device).data)


class DeviceGroupViewSet(TenantViewSet, mixins.ListModelMixin, mixins.RetrieveModelMixin, mixins.CreateModelMixin):
    """The team's device groups (a lab, a site, a robot type); its leads and admins add them."""

    model = DeviceGroup
    serializer_class = GroupSerializer

    def get_queryset(self) -> QuerySet[DeviceGroup]:
        live = Count("devices", filter=Q(devices__revoked_at=None))
        rows: QuerySet[DeviceGroup] = super().get_queryset().annotate(device_count=live)
        return rows.order_by("name", "pk")

    def perform_create(self, serializer: GroupSerializer) -> None:  # type: ignore[override]
        data = serializer.validated_data
        serializer.instance = devices.create_group(
            self.actor, data["team"], name=data["name"], kind=data.get("kind", "site"),
            description=data.get("description", ""),
        )  # fmt: skip


class EnrolmentTokenSerializer(serializers.ModelSerializer[EnrolmentToken]):
    class Meta:
        model = EnrolmentToken
        fields = ["id", "team", "group", "device", "hint", "expires_at", "used_at", "used_by", "created_at"]
        read_only_fields = fields


class NewEnrolmentTokenSerializer(EnrolmentTokenSerializer):
    token = serializers.CharField(read_only=True, help_text="The token itself, shown once: give it to the device.")

    class Meta(EnrolmentTokenSerializer.Meta):
        fields = [*EnrolmentTokenSerializer.Meta.fields, "token"]


class EnrolmentTokenCreateSerializer(StrictSerializer):
    group = ScopedRelatedField(
        queryset=DeviceGroup.objects.all(), required=False, help_text="The group a new device joins."
    )
    device = ScopedRelatedField(
        queryset=Device.objects.all(),
        required=False,
        help_text="The device the token re-enrols, and no other (a revoked one is restored by it).",
    )
    hours = serializers.IntegerField(required=False, min_value=1, max_value=devices.TOKEN_HOURS_MAX)

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        if ("group" in attrs) == ("device" in attrs):
            raise serializers.ValidationError({"group": "Give a group (a new device) or a device (to re-enrol it)."})
        return attrs


class EnrolmentTokenViewSet(TenantViewSet, mixins.ListModelMixin, mixins.CreateModelMixin):
    """Enrolment tokens of the teams one leads (every team's, for an admin). POST issues one for a group; the
    token is in that answer only."""

    model = EnrolmentToken
    serializer_class = EnrolmentTokenSerializer

    def get_queryset(self) -> QuerySet[EnrolmentToken]:
        return super().get_queryset().order_by("-created_at", "-pk")

    @extend_schema(
        request=EnrolmentTokenCreateSerializer, responses={201: NewEnrolmentTokenSerializer, 400: ERROR, 403: ERROR}
    )
    def create(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        form = EnrolmentTokenCreateSerializer(data=request.data, context=self.get_serializer_context())
        form.is_valid(raise_exception=True)
        data = form.validated_data
        device = data.get("device")
        group = device.group if device is not None else data["group"]
        token, raw = devices.issue_enrolment_token(
            self.actor, group, hours=data.get("hours"), device=device, http=request._request
        )
        body = dict(NewEnrolmentTokenSerializer(token).data)
        body["token"] = raw
        return Response(body, status=status.HTTP_201_CREATED)


class DeploymentSerializer(serializers.ModelSerializer[DeviceDeployment]):
    device = serializers.CharField(source="device.name")

    class Meta:
        model = DeviceDeployment
        fields = ["device_id", "device", "phase", "from_version", "state", "failures", "targeted_at", "updated_at"]
        read_only_fields = fields


class EventSerializer(serializers.ModelSerializer[RolloutEvent]):
    class Meta:
        model = RolloutEvent
        fields = ["at", "kind", "message"]
        read_only_fields = fields


class RolloutSerializer(serializers.ModelSerializer[Rollout]):
    version = serializers.SerializerMethodField()
    group = serializers.SerializerMethodField()

    class Meta:
        model = Rollout
        fields = [
            "id",
            "team",
            "group",
            "version",
            "state",
            "phases",
            "current_phase",
            "phase_started_at",
            "failure_threshold",
            "failure_percent",
            "failures",
            "auto_rollback",
            "offline_grace",
            "created_by",
            "created_at",
            "ended_at",
            "reason",
        ]
        read_only_fields = fields

    def get_version(self, rollout: Rollout) -> dict[str, Any] | None:
        return _version(rollout.version)

    def get_group(self, rollout: Rollout) -> dict[str, Any]:
        return {"id": rollout.group_id, "name": rollout.group.name}


class RolloutDetailSerializer(RolloutSerializer):
    deployments = DeploymentSerializer(many=True, read_only=True)
    events = EventSerializer(many=True, read_only=True)

    class Meta(RolloutSerializer.Meta):
        fields = [*RolloutSerializer.Meta.fields, "deployments", "events"]
        read_only_fields = fields


class RolloutCreateSerializer(StrictSerializer):
    group = ScopedRelatedField(queryset=DeviceGroup.objects.all())
    version = ScopedRelatedField(queryset=ModelVersion.objects.all())
    phases = serializers.JSONField(required=False, help_text='e.g. [{"canary": 2}, {"percent": 50}, {"percent": 100}]')
    failure_threshold = serializers.IntegerField(required=False, allow_null=True, min_value=1)
    failure_percent = serializers.IntegerField(required=False, allow_null=True, min_value=1, max_value=100)
    auto_rollback = serializers.BooleanField(required=False, default=True)
    offline_grace = serializers.IntegerField(required=False, min_value=0, max_value=7 * 24 * 3600)


class RolloutReasonSerializer(StrictSerializer):
    reason = serializers.CharField(required=False, allow_blank=True, max_length=500, default="")


class RolloutViewSet(TenantViewSet, mixins.ListModelMixin, mixins.RetrieveModelMixin, mixins.CreateModelMixin):
    """Rollouts of a model version to a device group in phases. POST starts one; pause, resume, cancel and
    roll back are actions of a rollout's leads and admins."""

    model = Rollout
    serializer_class = RolloutSerializer

    def get_queryset(self) -> QuerySet[Rollout]:
        rows = super().get_queryset().select_related("group", "version__model").order_by("-created_at", "-pk")
        if self.action == "retrieve":
            rows = rows.prefetch_related("deployments__device", "events")
        return rows

    def get_serializer_class(self) -> type[serializers.BaseSerializer[Any]]:
        return RolloutDetailSerializer if self.action != "list" else RolloutSerializer

    @extend_schema(request=RolloutCreateSerializer, responses={201: RolloutDetailSerializer, 400: ERROR, 403: ERROR})
    def create(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        form = RolloutCreateSerializer(data=request.data, context=self.get_serializer_context())
        form.is_valid(raise_exception=True)
        data = form.validated_data
        rollout = rollouts.start_rollout(
            self.actor,
            data["group"],
            data["version"],
            phases=data.get("phases"),
            failure_threshold=data.get("failure_threshold"),
            failure_percent=data.get("failure_percent"),
            auto_rollback=data["auto_rollback"],
            offline_grace=data.get("offline_grace", rollouts.DEFAULT_OFFLINE_GRACE),
            http=request._request,
        )
        return Response(self._detail(rollout.pk), status=status.HTTP_201_CREATED)

    def _detail(self, pk: int) -> Any:
        row = Rollout.objects.select_related("group", "version__model").prefetch_related(
            "deployments__device", "events"
        )
        return RolloutDetailSerializer(row.get(pk=pk)).data

    def _control(self, request: Request, verb: Any) -> Response:
        rollout = self.get_object()
        form = RolloutReasonSerializer(data=request.data)
        form.is_valid(raise_exception=True)
        verb(self.actor, rollout, form.validated_data["reason"], http=request._request)
        return Response(self._detail(rollout.pk))

    @extend_schema(request=RolloutReasonSerializer, responses={200: RolloutDetailSerializer, 400: ERROR, 403: ERROR})
    @action(detail=True, methods=["post"])
    def pause(self, request: Request, pk: str | None = None) -> Response:
        return self._control(request, rollouts.pause)

    @extend_schema(request=RolloutReasonSerializer, responses={200: RolloutDetailSerializer, 400: ERROR, 403: ERROR})
    @action(detail=True, methods=["post"])
    def resume(self, request: Request, pk: str | None = None) -> Response:
        return self._control(request, rollouts.resume)

    @extend_schema(request=RolloutReasonSerializer, responses={200: RolloutDetailSerializer, 400: ERROR, 403: ERROR})
    @action(detail=True, methods=["post"])
    def cancel(self, request: Request, pk: str | None = None) -> Response:
        return self._control(request, rollouts.cancel)

    @extend_schema(request=RolloutReasonSerializer, responses={200: RolloutDetailSerializer, 400: ERROR, 403: ERROR})
    @action(detail=True, methods=["post"])
    def rollback(self, request: Request, pk: str | None = None) -> Response:
        return self._control(request, rollouts.roll_back)
