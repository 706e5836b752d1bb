"""The API devices speak (docs/devices.md#the-protocol): enrol, desired state (a long poll), artifacts (with
HTTP ranges), reports. Authenticated with ``Authorization: Device qmdev_…`` (``DeviceAuthentication``, used by
these views alone); enrolment with its one-time token in the body instead.
"""

from __future__ import annotations

import re
import time
from typing import Any

from django import db
from django.http.response import HttpResponseBase
from drf_spectacular.extensions import OpenApiAuthenticationExtension
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema, inline_serializer
from rest_framework import authentication, exceptions, serializers, status
from rest_framework.permissions import AllowAny, BasePermission
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from common.api.serializers import StrictSerializer
from edge.actions import devices
from edge.models import Device, Status
from edge.presence import poll_seconds
from registry import artifacts, downloads

ERROR = OpenApiResponse(description="`{error: {status, code, message, fields}}`")
LONG_POLL_STEP = 1.0
MAX_WAIT = 60


class DeviceAuthentication(authentication.BaseAuthentication):
    """``Authorization: Device <credential>``: the device, or 401 for a missing, bad or revoked credential."""

    keyword = "Device"

    def authenticate(self, request: Request) -> tuple[Any, Device] | None:
        header = authentication.get_authorization_header(request).split()
        if not header or header[0].lower() != b"device":
            return None
        if len(header) != 2:
            raise exceptions.AuthenticationFailed("Malformed Authorization header: use 'Device <credential>'.")
        device = devices.authenticate(header[1].decode(errors="replace"))
        if device is None:
            raise exceptions.AuthenticationFailed("Invalid or revoked device credential.")
        return None, device

    def authenticate_header(self, request: Request) -> str:
        return 'Device realm="edge"'


class DeviceCredentialScheme(OpenApiAuthenticationExtension):  # type: ignore[no-untyped-call]
    target_class = "edge.api.device.DeviceAuthentication"
    name = "deviceCredential"

    def get_security_definition(self, auto_schema: Any) -> dict[str, str]:
        return {"type": "apiKey", "in": "header", "name": "Authorization", "description": "Device qmdev_…"}


class IsDevice(BasePermission):
    def has_permission(self, request: Request, view: Any) -> bool:
        if not isinstance(request.auth, Device):
            raise exceptions.NotAuthenticated("Send the device's credential: 'Authorization: Device <credential>'.")
        return True


class DeviceView(APIView):
    authentication_classes = [DeviceAuthentication]
    permission_classes = [IsDevice]

    def device(self, request: Request) -> Device:
        device: Device = request.auth  # type: ignore[assignment]
        return device


def _object(max_keys: int = 32) -> serializers.DictField:
    return serializers.DictField(required=False, default=dict, max_length=max_keys)  # type: ignore[call-arg]


class EnrolSerializer(StrictSerializer):
    token = serializers.CharField(max_length=200)
    name = serializers.RegexField(r"^[A-Za-z0-9][A-Za-z0-9._-]*$", max_length=100)
    hardware = serializers.DictField(required=False, default=dict)
    software = serializers.DictField(required=False, default=dict)


class EnrolView(APIView):
    """Join with a one-time enrolment token; the answer carries the device's credential, once."""

    authentication_classes: list[Any] = []
    permission_classes = [AllowAny]

    @extend_schema(
        request=EnrolSerializer,
        responses={
            201: inline_serializer(
                "Enrolment",
                {
                    "device": serializers.IntegerField(),
                    "name": serializers.CharField(),
                    "credential": serializers.CharField(),
                },
            ),
            400: ERROR,
        },
    )
    def post(self, request: Request) -> Response:
        form = EnrolSerializer(data=request.data)
        form.is_valid(raise_exception=True)
        values = form.validated_data
        done = devices.enrol(values["token"], values["name"], values["hardware"], values["software"])
        body = {"device": done.device.pk, "name": done.device.name, "credential": done.credential}
        return Response(body, status=status.HTTP_201_CREATED)


def _integer(request: Request, name: str, low: int, high: int, default: int) -> int:
    raw = request.query_params.get(name)
    if raw is None or raw == "":
        return default
    if not re.fullmatch(r"\d{1,6}", raw) or not low <= int(raw) <= high:
        raise exceptions.ValidationError({name: [f"A whole number from {low} to {high}."]})
    return int(raw)


DESIRED = inline_serializer(
    "DesiredState",
    {
        "revision": serializers.CharField(),
        "desired": serializers.DictField(allow_null=True),
        "rollout": serializers.IntegerField(allow_null=True),
        "poll_seconds": serializers.IntegerField(),
    },
)


class DesiredView(DeviceView):
    """What the device should run. With ``known`` (the revision it has) and ``wait`` (seconds), the answer
    waits for a change up to ``wait`` seconds; every call is a heartbeat."""

    @extend_schema(
        parameters=[
            OpenApiParameter("known", str, description="The revision the device already has."),
            OpenApiParameter("wait", int, description="Seconds to wait for a change (0 to 60)."),
        ],
        responses={200: DESIRED, 401: ERROR},
    )
    def get(self, request: Request) -> Response:
        device = self.device(request)
        wait = _integer(request, "wait", 0, MAX_WAIT, 0)
        known = request.query_params.get("known", "")
        devices.touch(device)
        current = devices.current(device.pk)
        deadline = time.monotonic() + wait
        heartbeat = time.monotonic() + poll_seconds()
        while known and current.revision_tag == known and time.monotonic() < deadline:
            # A held poll keeps no database connection while it sleeps: a fleet of devices waiting would
            # otherwise hold one each (Django opens another at the next query).
            if not db.connection.in_atomic_block:
                db.connection.close()
            time.sleep(min(LONG_POLL_STEP, max(0.0, deadline - time.monotonic())))
            if time.monotonic() >= heartbeat:  # still here: keep it online while it waits
                devices.touch(current)
                heartbeat = time.monotonic() + poll_seconds()
            try:
                current = devices.current(device.pk)
            except Device.DoesNotExist:  # deleted while it waited: its credential is gone with it
                raise exceptions.AuthenticationFailed("This device is no longer enrolled.") from None
        return Response(devices.desired(current))


class ArtifactView(DeviceView):
    """The bytes of a version the device may run (its desired one, or one it ran, for a rollback); a
    ``Range: bytes=N-`` or ``N-M`` request gets 206, an unsatisfiable one 416."""

    @extend_schema(
        responses={
            (200, "application/octet-stream"): OpenApiResponse(description="The bytes."),
            (206, "application/octet-stream"): OpenApiResponse(description="The range asked for."),
            401: ERROR,
            404: ERROR,
            416: ERROR,
        }
    )
    def get(self, request: Request, version_id: int) -> HttpResponseBase:
        device = self.device(request)
        devices.touch(device)
        version = devices.may_download(device, version_id)
        path = artifacts.path_for(version) if version is not None else None
        if version is None or path is None or not path.is_file():
            raise exceptions.NotFound(f"No artifact {version_id} for this device.")
        return downloads.artifact_response(request._request, version)


class VersionRefSerializer(StrictSerializer):
    version_id = serializers.IntegerField(min_value=1)
    sha256 = serializers.RegexField(r"^[0-9a-f]{64}$", required=False)


class DeviceReportSerializer(StrictSerializer):
    status = serializers.ChoiceField(choices=Status.choices)
    version_id = serializers.IntegerField(min_value=1, required=False, allow_null=True)
    running = VersionRefSerializer(required=False, allow_null=True)
    previous = VersionRefSerializer(required=False, allow_null=True)
    detail = serializers.CharField(max_length=500, required=False, allow_blank=True, default="")
    hardware = serializers.DictField(required=False)
    software = serializers.DictField(required=False)
    connectivity = serializers.DictField(required=False)


class ReportView(DeviceView):
    """What the device is doing and running, how it is; judged by the rollout that targeted it."""

    @extend_schema(
        request=DeviceReportSerializer,
        responses={
            200: inline_serializer("ReportAnswer", {"revision": serializers.CharField()}),
            400: ERROR,
            401: ERROR,
        },
    )
    def post(self, request: Request) -> Response:
        form = DeviceReportSerializer(data=request.data)
        form.is_valid(raise_exception=True)
        device = devices.record_report(self.device(request), dict(form.validated_data))
        return Response({"revision": device.revision_tag})
