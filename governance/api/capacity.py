"""The capacity requests API (``/api/v1/capacity-requests/``): a team's members read its requests, an admin every
team's; a lead asks (POST), withdraws (``/withdraw/``); an admin approves or refuses (``/decide/``).

Thin: read through ``for_user`` (another team's request is a 404), written through ``governance.actions.capacity``;
who may is asked before the body is judged (403), then the body as a whole (400 naming each bad field, unknown
fields too; nothing written)."""

from __future__ import annotations

from typing import Any

from django.db.models import QuerySet
from drf_spectacular.utils import extend_schema
from rest_framework import mixins, serializers, status
from rest_framework.decorators import action
from rest_framework.request import Request
from rest_framework.response import Response

from common import params
from common.api.parsers import JSONParser
from common.api.serializers import ERROR, StrictSerializer
from governance.actions import capacity
from governance.models import CapacityRequest
from tenancy import policy
from tenancy.rest import TenantViewSet, team_named


class CapacityRequestSerializer(serializers.ModelSerializer[CapacityRequest]):
    team = serializers.SlugRelatedField[Any](slug_field="slug", read_only=True)
    flavor = serializers.SlugRelatedField[Any](slug_field="name", read_only=True)
    cluster = serializers.SlugRelatedField[Any](slug_field="slug", read_only=True, allow_null=True)
    nodes = serializers.SerializerMethodField(help_text="A reservation's booked nodes, once approved.")

    class Meta:
        model = CapacityRequest
        fields = [
            "id",
            "team",
            "kind",
            "flavor",
            "accelerators",
            "starts_at",
            "ends_at",
            "reason",
            "requested_by_name",
            "created_at",
            "state",
            "decided_by_name",
            "decided_at",
            "decision",
            "cluster",
            "nodes",
        ]
        read_only_fields = fields

    def get_nodes(self, request: CapacityRequest) -> list[str]:
        return sorted(node.name for node in request.nodes.all())


class AskSerializer(StrictSerializer):
    team = serializers.CharField(help_text="The team's slug or id.")
    kind = serializers.ChoiceField(choices=CapacityRequest.Kind.choices)
    flavor = serializers.CharField(help_text="The accelerator type, e.g. H100-SXM-80GB.")
    accelerators = serializers.IntegerField(min_value=1, max_value=capacity.MOST)
    starts_at = serializers.CharField(
        required=False, allow_blank=True, help_text="ISO 8601; more quota: default now. A reservation: required."
    )
    ends_at = serializers.CharField(
        required=False, allow_blank=True, help_text="ISO 8601; more quota without it is for good."
    )
    reason = serializers.CharField(
        allow_blank=True, help_text="What it is for (a deadline, a project); kept with the request."
    )


class DecideSerializer(StrictSerializer):
    approve = serializers.BooleanField(help_text="true: approve; false: refuse.")
    reason = serializers.CharField(allow_blank=True, help_text="Why; the team reads it.")
    cluster = serializers.CharField(
        required=False,
        allow_blank=True,
        help_text="A reservation: the cluster to book it on (default: where it fits best).",
    )


class WithdrawSerializer(StrictSerializer):
    reason = serializers.CharField(allow_blank=True)


class CapacityRequestViewSet(TenantViewSet, mixins.ListModelMixin, mixins.RetrieveModelMixin):
    """Requests for reservations and more quota (docs/scheduling.md §Bookings), newest first."""

    model = CapacityRequest
    serializer_class = CapacityRequestSerializer
    parser_classes = [JSONParser]

    def get_queryset(self) -> QuerySet[CapacityRequest]:
        found = super().get_queryset().select_related("team", "flavor", "cluster").prefetch_related("nodes")
        state = self.request.query_params.get("state")
        if state:
            if state not in CapacityRequest.State.values:
                known = ", ".join(CapacityRequest.State.values)
                raise params.BadParameter("state", f"Unknown state {state!r}. Known: {known}.")
            found = found.filter(state=state)
        return found

    @extend_schema(
        request=AskSerializer,
        responses={201: CapacityRequestSerializer, 400: ERROR, 403: ERROR, 404: ERROR},
        description="Ask for a reservation (a window of capacity for a deadline) or more quota (for good, or until a "
        "date) for a team: its leads and admins. An organization admin decides.",
    )
    def create(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        data = request.data if isinstance(request.data, dict) else {}
        team = team_named(self.actor, data.get("team"))
        policy.require(self.actor, "capacity.request", team)  # said before the body is judged
        body = AskSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        values = dict(body.validated_data)
        values.pop("team")
        made = capacity.ask(self.actor, team, http=request._request, **values)
        return Response(CapacityRequestSerializer(made).data, status=status.HTTP_201_CREATED)

    @extend_schema(
        request=DecideSerializer,
        responses={200: CapacityRequestSerializer, 400: ERROR, 403: ERROR, 404: ERROR},
        description="Approve or refuse a pending request, with a reason (organization admins). Approving a "
        "reservation books whole nodes of one cluster for its window; 400 when they cannot be found.",
    )
    @action(detail=True, methods=["post"])
    def decide(self, request: Request, pk: str | None = None) -> Response:
        found = self.get_object()
        policy.require(self.actor, "capacity.decide", found.team.organization)
        body = DecideSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        decided = capacity.decide(self.actor, found, http=request._request, **body.validated_data)
        return Response(CapacityRequestSerializer(self.get_queryset().get(pk=decided.pk)).data)

    @extend_schema(
        request=WithdrawSerializer,
        responses={200: CapacityRequestSerializer, 400: ERROR, 403: ERROR, 404: ERROR},
        description="Withdraw a pending request, or end an approved window early (the team's leads and admins).",
    )
    @action(detail=True, methods=["post"])
    def withdraw(self, request: Request, pk: str | None = None) -> Response:
        found = self.get_object()
        policy.require(self.actor, "capacity.request", found.team)
        body = WithdrawSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        done = capacity.withdraw(self.actor, found, http=request._request, **body.validated_data)
        return Response(CapacityRequestSerializer(self.get_queryset().get(pk=done.pk)).data)
