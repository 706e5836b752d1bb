"""The fair-share API: every member reads how the organization's fair sharing remembers use; its admins change it
(``fairshare.set_fair_share``: 403 for anyone else, asked before the body is judged; 400 naming each bad field,
unknown fields too, and nothing written). Where each queue stands is on the queues (``/api/v1/queues/``,
``fair_share``)."""

from __future__ import annotations

from typing import Any

from drf_spectacular.utils import extend_schema
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response

from common.api.parsers import JSONParser
from common.api.serializers import ERROR, StrictSerializer
from governance.actions import fairshare
from governance.models import FairShare
from tenancy import policy
from tenancy.models import Organization
from tenancy.rest import TenantViewSet, organization_named


class FairShareSerializer(serializers.ModelSerializer[FairShare]):
    organization = serializers.SlugRelatedField[Any](slug_field="slug", read_only=True)

    class Meta:
        model = FairShare
        fields = ["organization", "half_life", "usage_weight"]
        read_only_fields = fields


class FairShareWriteSerializer(StrictSerializer):
    organization = serializers.CharField(required=False, help_text="Its slug; needed only if you belong to several.")
    half_life = serializers.IntegerField(
        required=False, help_text="Seconds after which an hour of use counts half: 3,600 (an hour) to 31,536,000."
    )
    usage_weight = serializers.FloatField(
        required=False,
        help_text="How much recent use beyond a queue's fair part adds to its share, 0 (shares forget) to 10.",
    )
    reason = serializers.CharField(required=False, allow_blank=True, default="", help_text="Kept in the history.")


class FairShareViewSet(TenantViewSet):
    """How fair sharing remembers, per organization the user belongs to (docs/scheduling.md §Fair sharing)."""

    model = Organization
    serializer_class = FairShareSerializer
    parser_classes = [JSONParser]
    pagination_class = None

    @extend_schema(responses={200: FairShareSerializer(many=True)})
    def list(self, request: Request) -> Response:
        settings = [fairshare.setting(org) for org in self.get_queryset().order_by("slug")]
        return Response(FairShareSerializer(settings, many=True).data)

    @extend_schema(
        request=FairShareWriteSerializer,
        responses={200: FairShareSerializer, 400: ERROR, 403: ERROR, 404: ERROR},
        description="Change the half-life of recent use and its weight in the shares (organization admins), with a "
        "reason; a value left out keeps its current one. A new half-life rebuilds every queue's recent use from the "
        "usage records at the meter's next run.",
    )
    def create(self, request: Request) -> Response:
        data = request.data if isinstance(request.data, dict) else {}
        organization = organization_named(self.actor, data.get("organization"))
        policy.require(self.actor, "fair_share.set", organization)
        body = FairShareWriteSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        values = dict(body.validated_data)
        values.pop("organization", None)
        fairshare.set_fair_share(self.actor, organization, http=request, **values)
        return Response(FairShareSerializer(fairshare.setting(organization)).data)
