"""The quotas API: queues with their quotas and usage, a queue's quota and policy changed, and the history of
quota changes.

Thin, like the rest of the API: queues and history come from ``for_user`` (another team's queue is a 404 for
every verb); the usage from ``governance.usage``; every change goes through ``governance.actions.quotas``, which says
who may change what (403, asked before the body is judged) and what a valid change is (400 naming each bad
field, nothing written). Amounts are in people's units: accelerators, CPU cores, GiB.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from django.db.models import QuerySet
from drf_spectacular.utils import extend_schema, extend_schema_field
from rest_framework import mixins, serializers
from rest_framework.decorators import action
from rest_framework.request import Request
from rest_framework.response import Response

from common.api.answered import Answered
from common.api.parsers import JSONParser
from common.api.serializers import ERROR, StrictSerializer
from governance import placed, usage
from governance.actions import quotas
from governance.filters import QueueFilter, QuotaChangeFilter
from governance.models import Cohort, Queue, Quota, QuotaChange
from tenancy import policy
from tenancy.rest import TenantViewSet
from tenancy.scoping import Action


def amount(**kwargs: Any) -> serializers.DecimalField:
    """An amount as shown: accelerators, cores or GiB, to three decimals."""
    return serializers.DecimalField(max_digits=12, decimal_places=3, **kwargs)


# --- what is read ----------------------------------------------------------------------------------------


class QuotaRowSerializer(serializers.Serializer[Any]):
    """One (flavor, resource) of a queue: its quota and what is made of it (``governance/usage.py``)."""

    flavor = serializers.CharField()
    resource = serializers.ChoiceField(choices=Quota.Resource.choices)
    nominal = amount(allow_null=True, help_text="Null: no quota set.")
    borrowing_limit = amount(allow_null=True, help_text="Null: no limit.")
    lending_limit = amount(allow_null=True, help_text="Null: no limit.")
    own = amount(
        allow_null=True,
        help_text="What the scheduler counts as the queue's own nominal quota: the nominal, except for the team's "
        "queue of a team split among projects, which keeps what its projects were not given.",
    )
    used = amount(help_text="What its placed jobs hold.")
    borrowed = amount(help_text="Used beyond its own nominal quota.")
    lent = amount(help_text="Of its idle lendable quota, what others in its cohort use.")
    pending = amount(help_text="What its waiting jobs ask for.")
    governed = serializers.BooleanField(help_text="Whether any quota of the organization rations this column.")


class FairShareStandingSerializer(serializers.Serializer[Any]):
    """Where a queue stands in fair sharing (``governance/usage.py``'s ``Standing``; docs/scheduling.md §Fair
    sharing)."""

    share = serializers.FloatField(help_text="What the next cycle compares: lower goes first among one tier's jobs.")
    borrowing = serializers.FloatField(help_text="Its weighted dominant resource share now (thousandths).")
    memory = serializers.FloatField(help_text="What its recent use (and its cohorts') adds to the share.")
    recent_accelerator_hours = serializers.FloatField(source="recent", help_text="Decayed with the half-life.")
    portion = serializers.FloatField(
        allow_null=True, help_text="Its part of the recent use of the queues beside it; null: none of them used any."
    )
    entitlement = serializers.FloatField(help_text="Its fair part: weight times nominal accelerators, over theirs.")
    rank = serializers.IntegerField(help_text="Its place among the organization's queues by share (1: first).")
    of = serializers.IntegerField()
    half_life = serializers.IntegerField(help_text="Seconds.")
    usage_weight = serializers.FloatField()
    why = serializers.CharField()


class QueueSerializer(serializers.ModelSerializer[Queue]):
    team = serializers.SlugRelatedField[Any](slug_field="slug", read_only=True)
    project = serializers.SlugRelatedField[Any](slug_field="slug", read_only=True, allow_null=True)
    cohort = serializers.SlugRelatedField[Any](slug_field="name", read_only=True, allow_null=True)
    quotas = serializers.SerializerMethodField()
    fair_share = serializers.SerializerMethodField()

    class Meta:
        model = Queue
        fields = [
            "id",
            "name",
            "team",
            "project",
            "cohort",
            "flavor_order",
            "within_queue",
            "reclaim",
            "weight",
            "quotas",
            "fair_share",
        ]
        read_only_fields = fields

    @extend_schema_field(QuotaRowSerializer(many=True))
    def get_quotas(self, queue: Queue) -> list[dict[str, Any]]:
        found: dict[int, usage.Usage] = self.context.get("usage", {})
        org = found.get(queue.team.organization_id)
        return [dict(QuotaRowSerializer(row).data) for row in org.of_queue(queue.pk)] if org else []

    @extend_schema_field(FairShareStandingSerializer(allow_null=True))
    def get_fair_share(self, queue: Queue) -> dict[str, Any] | None:
        found: dict[int, usage.Usage] = self.context.get("usage", {})
        org = found.get(queue.team.organization_id)
        standing = org.standings.get(queue.pk) if org else None
        return dict(FairShareStandingSerializer(standing).data) if standing else None


class QuotaChangeSerializer(serializers.ModelSerializer[QuotaChange]):
    team = serializers.SlugRelatedField[Any](slug_field="slug", read_only=True, allow_null=True)
    queue = serializers.SlugRelatedField[Any](slug_field="name", read_only=True, allow_null=True)
    cohort = serializers.SlugRelatedField[Any](slug_field="name", read_only=True, allow_null=True)
    actor = serializers.CharField(source="actor_name", read_only=True)

    class Meta:
        model = QuotaChange
        fields = [
            "id",
            "created_at",
            "actor",
            "kind",
            "team",
            "queue",
            "cohort",
            "subject",
            "before",
            "after",
            "reason",
        ]
        read_only_fields = fields


# --- what is written ---------------------------------------------------------------------------------------


class QuotaWriteSerializer(StrictSerializer):
    flavor = serializers.CharField(help_text="An accelerator type's name.")
    resource = serializers.CharField(default=Quota.Resource.ACCELERATORS, help_text="accelerator, cpu or memory.")
    nominal = serializers.DecimalField(
        max_digits=None,
        decimal_places=None,
        required=False,
        allow_null=True,
        help_text="Null removes the quota; left out, it keeps its value.",
    )
    borrowing_limit = serializers.DecimalField(
        max_digits=None,
        decimal_places=None,
        required=False,
        allow_null=True,
        help_text="Null: no limit; left out, it keeps its value.",
    )
    lending_limit = serializers.DecimalField(
        max_digits=None,
        decimal_places=None,
        required=False,
        allow_null=True,
        help_text="Null: no limit; left out, it keeps its value.",
    )
    reason = serializers.CharField(required=False, allow_blank=True, default="", help_text="Kept in the history.")


class PolicyWriteSerializer(StrictSerializer):
    flavor_order = serializers.ListField(
        child=serializers.CharField(), required=False, help_text="Accelerator type names, first tried first."
    )
    within_queue = serializers.CharField(required=False)
    reclaim = serializers.CharField(required=False)
    weight = serializers.FloatField(required=False, help_text="Fair-sharing weight, 0.01 to 1000.")
    cohort = serializers.CharField(required=False, allow_null=True, help_text="A cohort's name; null for none.")
    reason = serializers.CharField(required=False, allow_blank=True, default="", help_text="Kept in the history.")


# --- filters and views -------------------------------------------------------------------------------------


def usage_of(queues: Iterable[Queue]) -> dict[int, usage.Usage]:
    """The usage of each organization among ``queues`` (by organization id), one ``organization_usage`` each."""
    organizations = {q.team.organization_id: q.team.organization for q in queues}
    return {pk: placed.organization_usage(org) for pk, org in organizations.items()}


class QueueViewSet(Answered, TenantViewSet, mixins.ListModelMixin, mixins.RetrieveModelMixin):
    """Queues of the teams the user may see, each with its quotas and usage per flavor and resource. The team's
    lead sets its lending limits, flavor order and projects' sub-quotas; an organization admin everything."""

    model = Queue
    serializer_class = QueueSerializer
    filterset_class = QueueFilter
    parser_classes = [JSONParser]
    http_method_names = ["get", "post", "patch", "head", "options"]

    def get_queryset(self) -> QuerySet[Queue]:
        return super().get_queryset().select_related("team__organization", "project", "cohort").order_by("pk")

    def _answer(self, queues: list[Queue], many: bool) -> Any:
        context = {**self.get_serializer_context(), "usage": usage_of(queues)}
        return QueueSerializer(queues if many else queues[0], many=many, context=context).data

    @extend_schema(
        request=PolicyWriteSerializer,
        responses={200: QueueSerializer, 400: ERROR, 403: ERROR, 404: ERROR},
        description="Change the queue's policy (only the fields given) with a reason: the lead its flavor order, "
        "an admin also `within_queue`, `reclaim`, `weight` and `cohort`.",
    )
    def partial_update(self, request: Request, pk: str | None = None) -> Response:
        queue = self.get_object()
        policy.require(self.actor, "queue.flavor_order.set", queue)  # said before the body is judged
        form = PolicyWriteSerializer(data=request.data)
        form.is_valid(raise_exception=True)
        fields = dict(form.validated_data)
        reason = fields.pop("reason")
        if "cohort" in fields and fields["cohort"] is not None:
            name = fields["cohort"]
            found = Cohort.objects.for_user(self.actor, Action.VIEW).filter(
                organization=queue.team.organization_id, name=name
            )
            fields["cohort"] = found.first() or name  # quotas.set_policy names one that is not there
        quotas.set_policy(self.actor, queue, reason=reason, http=request._request, **fields)
        return Response(self._answer([self.get_queryset().get(pk=queue.pk)], many=False))

    @extend_schema(
        request=QuotaWriteSerializer,
        responses={200: QuotaRowSerializer, 400: ERROR, 403: ERROR, 404: ERROR},
        description="Set the queue's quota for one accelerator type and resource, with a reason. Limits left out "
        "keep their values. The team's lead may change the lending limit of the team's queue and everything of "
        "its projects' queues; an admin everything.",
    )
    @action(detail=True, methods=["post"], url_path="quotas")
    def set_quota(self, request: Request, pk: str | None = None) -> Response:
        queue = self.get_object()
        policy.require(self.actor, "quota.lend", queue)  # said before the body is judged
        form = QuotaWriteSerializer(data=request.data)
        form.is_valid(raise_exception=True)
        data = form.validated_data
        limits = {k: data.get(k, quotas.KEEP) for k in quotas.LIMITS}
        quotas.set_quota(
            self.actor,
            queue,
            flavor=data["flavor"],
            resource=data["resource"],
            reason=data["reason"],
            http=request._request,
            **limits,
        )
        row = next(
            (
                r
                for r in placed.organization_usage(queue.team.organization).of_queue(queue.pk)
                if (r.flavor, r.resource) == (data["flavor"], data["resource"])
            ),
            None,
        )
        if row is None:  # removed, and nothing in use or waiting there
            return Response({"flavor": data["flavor"], "resource": data["resource"], **dict.fromkeys(quotas.LIMITS)})
        return Response(QuotaRowSerializer(row).data)


class QuotaChangeViewSet(TenantViewSet, mixins.ListModelMixin, mixins.RetrieveModelMixin):
    """The history of quota changes, newest first: a team's for its members, the organization's (cohorts
    included) for its finance and admins."""

    model = QuotaChange
    serializer_class = QuotaChangeSerializer
    filterset_class = QuotaChangeFilter

    def get_queryset(self) -> QuerySet[QuotaChange]:
        return super().get_queryset().select_related("team", "queue", "cohort")
