"""The priority tiers API: every member of an organization reads its tiers; its admins create or change one
(``quotas.set_tier``: 403 for anyone else, asked before the body is judged; 400 naming each bad field,
unknown fields too, and nothing written)."""

from __future__ import annotations

from typing import Any

from django.db.models import QuerySet
from drf_spectacular.utils import extend_schema
from rest_framework import exceptions, mixins, serializers, status
from rest_framework.request import Request
from rest_framework.response import Response

from common.api.parsers import JSONParser
from common.api.serializers import ERROR, StrictSerializer
from governance.actions import quotas
from governance.models import PriorityTier, WatchAction
from tenancy import policy
from tenancy.models import Team
from tenancy.rest import TenantViewSet, organization_named


class TierSerializer(serializers.ModelSerializer[PriorityTier]):
    organization = serializers.SlugRelatedField[Any](slug_field="slug", read_only=True)
    teams = serializers.SlugRelatedField[Any](
        slug_field="slug", many=True, read_only=True, help_text="The teams that may use it; none: every team."
    )

    class Meta:
        model = PriorityTier
        fields = [
            "id",
            "organization",
            "name",
            "value",
            "preemptible",
            "grace_seconds",
            "failover_after",
            "on_straggler",
            "on_hang",
            "max_wait",
            "min_runtime",
            "max_disruption",
            "accepts_spot",
            "is_default",
            "teams",
        ]
        read_only_fields = fields


class TierWriteSerializer(StrictSerializer):
    organization = serializers.CharField(required=False, help_text="Its slug; needed only if you belong to several.")
    name = serializers.CharField(help_text="An existing tier's name changes it; a new one creates it.")
    value = serializers.IntegerField(help_text="Higher goes first and may preempt lower.")
    preemptible = serializers.BooleanField(default=True)
    grace_seconds = serializers.IntegerField(default=300, help_text="Time a victim gets to checkpoint.")
    failover_after = serializers.IntegerField(
        required=False,
        allow_null=True,
        default=None,
        help_text="Seconds its jobs on a silent cluster wait before they restart elsewhere; null: the cluster's.",
    )
    on_straggler = serializers.ChoiceField(
        choices=WatchAction.choices,
        default=WatchAction.NOTIFY,
        help_text="When one of its jobs has a node persistently slower than its gang's: tell the owner, "
        "restart it from its last checkpoint without that node (drained), or both.",
    )
    on_hang = serializers.ChoiceField(
        choices=WatchAction.choices,
        default=WatchAction.NOTIFY,
        help_text="When one of its jobs stops making progress: tell the owner, restart it from its last "
        "checkpoint, or both.",
    )
    max_wait = serializers.IntegerField(
        required=False,
        allow_null=True,
        default=None,
        help_text="The longest its jobs should wait, in seconds (600 to 2,592,000): past it a job goes ahead of the "
        "tier's others and is first to get a reservation of the capacity it waits for; null: no bound.",
    )
    min_runtime = serializers.IntegerField(
        required=False,
        allow_null=True,
        default=None,
        help_text="Seconds its jobs run before anything may preempt them (60 to 604,800); null: no protection.",
    )
    max_disruption = serializers.DecimalField(
        max_digits=None,
        decimal_places=None,
        required=False,
        allow_null=True,
        default=None,
        help_text="The most accelerator-hours of its jobs' work (since their last checkpoints) that preemptions for "
        "other jobs may lose in any hour; null: no cap.",
    )
    accepts_spot = serializers.BooleanField(
        default=False,
        help_text="Its jobs run on spot capacity unless they say otherwise (a preemptible tier only): cheaper, and the "
        "cloud may take it back (requeued from their checkpoints, no retry spent).",
    )
    is_default = serializers.BooleanField(default=False)
    teams = serializers.ListField(child=serializers.CharField(), default=list, help_text="Team slugs; none: all.")
    reason = serializers.CharField(required=False, allow_blank=True, default="", help_text="Kept in the history.")


class TierViewSet(TenantViewSet, mixins.ListModelMixin, mixins.RetrieveModelMixin):
    model = PriorityTier
    serializer_class = TierSerializer
    parser_classes = [JSONParser]

    def get_queryset(self) -> QuerySet[PriorityTier]:
        return super().get_queryset().select_related("organization").prefetch_related("teams").order_by("-value")

    @extend_schema(
        request=TierWriteSerializer,
        responses={200: TierSerializer, 201: TierSerializer, 400: ERROR, 403: ERROR, 404: ERROR},
        description="Create a priority tier, or change the one of that name (organization admins).",
    )
    def create(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        data = request.data if isinstance(request.data, dict) else {}
        organization = organization_named(self.actor, data.get("organization"))
        policy.require(self.actor, "tier.set", organization)
        body = TierWriteSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        values = dict(body.validated_data)
        values.pop("organization", None)
        slugs = values.pop("teams")
        teams = list(Team.objects.filter(organization=organization, slug__in=slugs))
        if missing := sorted(set(slugs) - {t.slug for t in teams}):
            raise exceptions.ValidationError({"teams": [f"No team {', '.join(missing)} in {organization}."]})
        values["name"] = name = values["name"].strip()
        existed = PriorityTier.objects.filter(organization=organization, name=name).exists()
        quotas.set_tier(self.actor, organization, teams=teams, http=request, **values)
        tier = self.get_queryset().get(organization=organization, name=name)
        return Response(TierSerializer(tier).data, status=status.HTTP_200_OK if existed else status.HTTP_201_CREATED)
