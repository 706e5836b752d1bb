"""The capacity what-ifs API, under ``/api/v1/``: ``what-ifs/`` lists an organization's what-ifs and asks for a
new one; ``what-ifs/<id>/`` is one of them with its status, progress and, once done, its result.

Finance, procurement and admins only (``WhatIf``'s tenancy): anyone else lists nothing and gets 404 for a
what-if, and 403 on POST, asked before the body is judged. A POST answers 201 with the queued row; the replay
runs in a Celery task (``billing.tasks.run_what_if``), so poll the row until its status is ``done`` or
``failed``. Bad values answer 400 naming each field (``billing.actions.whatif.check``), unknown fields too, and
nothing is written.
"""

from __future__ import annotations

from typing import Any

import django_filters
from django.core.exceptions import ValidationError
from django.db.models import QuerySet
from drf_spectacular.utils import OpenApiResponse, extend_schema, extend_schema_field, extend_schema_view
from rest_framework import mixins, serializers, status
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.routers import SimpleRouter

from billing import params
from billing.actions import studies, whatif
from billing.models import WhatIf, WhatIfStudy
from common.api.parsers import JSONParser
from common.api.serializers import StrictSerializer
from tenancy import policy
from tenancy.filters import SlugOrIdFilter
from tenancy.rest import TenantViewSet

ERROR = OpenApiResponse(description="`{error: {status, code, message, fields}}`")


class WhatIfSerializer(serializers.ModelSerializer[WhatIf]):
    organization = serializers.SlugRelatedField[Any](slug_field="slug", read_only=True, help_text="Its slug.")
    cluster = serializers.SlugRelatedField[Any](slug_field="slug", read_only=True, help_text="The cluster's slug.")
    flavor = serializers.SlugRelatedField[Any](slug_field="name", read_only=True, help_text="The accelerator type.")
    requested_by = serializers.SlugRelatedField[Any](
        slug_field="username", read_only=True, allow_null=True, help_text="Who asked for it."
    )
    status = serializers.ChoiceField(
        choices=WhatIf.Status.choices, read_only=True, help_text="queued, running, done, or failed (see `error`)."
    )
    nodes = serializers.IntegerField(read_only=True, help_text="Nodes added (positive) or removed (negative).")
    kind = serializers.ChoiceField(
        choices=WhatIf.Kind.choices,
        read_only=True,
        help_text="nodes: bought (or retired) at the cluster's rate for the type; reserve: at the reserved rate.",
    )
    lead_days = serializers.IntegerField(read_only=True, help_text="Days into the window bought nodes arrive.")
    pool = serializers.SlugRelatedField[Any](
        slug_field="name", read_only=True, allow_null=True, help_text="A burst's elastic pool."
    )
    study = serializers.PrimaryKeyRelatedField[Any](read_only=True, allow_null=True, help_text="Its study, if any.")
    seed = serializers.IntegerField(read_only=True, help_text="0: the history as it was; else its days resampled.")
    grow_quotas = serializers.BooleanField(read_only=True, help_text="The type's quotas grow with the fleet.")
    progress = serializers.FloatField(read_only=True, help_text="0 to 1 while it runs; 1 once done.")
    result = serializers.JSONField(
        read_only=True,
        help_text=(
            "Once done: `today` and `changed` (jobs, mean/p50/p95/max queue wait in seconds, `wait_hours` of all "
            "finished jobs, `cost` over the window in the organization's currency, utilisation of the fleet and of "
            "the flavor, accelerators, never_fits, stuck, and `by_day` series), `priced` (`currency`, `extra_cost`, "
            "`wait_hours_saved`, `cost_per_wait_hour_saved`), `observed` (what the jobs waited in reality), "
            "`window`, `change`, `workload`, `days`."
        ),
    )

    class Meta:
        model = WhatIf
        fields = [
            "id",
            "organization",
            "cluster",
            "flavor",
            "nodes",
            "kind",
            "lead_days",
            "pool",
            "grow_quotas",
            "days",
            "study",
            "position",
            "seed",
            "status",
            "progress",
            "result",
            "error",
            "requested_by",
            "created_at",
            "started_at",
            "finished_at",
        ]
        read_only_fields = fields


class _Raw(serializers.Field):  # type: ignore[type-arg]
    """Passed to ``whatif.check`` as given, so that one answer names every bad field with the action's words."""

    def to_internal_value(self, data: Any) -> Any:
        return data

    def to_representation(self, value: Any) -> Any:
        return value


@extend_schema_field({"oneOf": [{"type": "string"}, {"type": "integer"}]})
class _Ref(_Raw):
    pass


@extend_schema_field({"type": "integer"})
class _Integer(_Raw):
    pass


@extend_schema_field({"type": "string"})
class _Text(_Raw):
    pass


@extend_schema_field({"type": "boolean"})
class _Boolean(_Raw):
    pass


@extend_schema_field({"type": "array", "items": {"type": "object"}})
class _Objects(_Raw):
    pass


class WhatIfCreateSerializer(StrictSerializer):
    """A what-if to run: unknown fields are refused by name; each bad value is named in the same answer."""

    organization = serializers.CharField(required=False, help_text="Its slug; needed only if you belong to several.")
    cluster = _Ref(required=False, help_text="The cluster's slug or id.")
    flavor = _Ref(required=False, help_text="The accelerator type's name or id (the cluster must have such nodes).")
    nodes = _Integer(required=False, help_text="Nodes to add (positive) or remove (negative); not 0.")
    days = _Integer(required=False, help_text=f"Days of history to replay, {whatif.MIN_DAYS} to {whatif.MAX_DAYS}.")
    kind = _Ref(
        required=False,
        help_text="nodes (default: bought or retired), reserve (reserved cloud capacity) or burst (an elastic pool).",
    )
    pool = _Ref(required=False, help_text="A burst: the elastic pool's name or id (nodes: at most this many).")
    grow_quotas = _Boolean(required=False, help_text="true: the type's quotas grow with the fleet, in proportion.")
    lead_days = _Integer(required=False, help_text="Bought nodes: days into the window until they arrive (default 0).")


# Here rather than in filters.py (the one module mypy lets subclass django-filter's untyped FilterSet), beside
# the one view that uses it.
class WhatIfFilter(django_filters.FilterSet):  # type: ignore[misc]
    status = django_filters.ChoiceFilter(choices=WhatIf.Status.choices)
    cluster = SlugOrIdFilter(field_name="cluster", help_text="A cluster's slug or id.")

    class Meta:
        model = WhatIf
        fields = ["status", "cluster"]


@extend_schema_view(
    list=extend_schema(
        description="The organization's capacity what-ifs, newest first (finance and admins; others: none)."
    ),
    retrieve=extend_schema(description="One what-if: its status, progress and, once done, its result."),
)
class WhatIfViewSet(TenantViewSet, mixins.ListModelMixin, mixins.RetrieveModelMixin):
    """Capacity what-ifs: finance and admins read and ask for them."""

    model = WhatIf
    serializer_class = WhatIfSerializer
    filterset_class = WhatIfFilter
    parser_classes = [JSONParser]

    def get_queryset(self) -> QuerySet[WhatIf]:
        return (
            super()
            .get_queryset()
            .select_related("organization", "cluster", "flavor", "requested_by")
            .order_by("-created_at", "-pk")
        )

    @extend_schema(
        request=WhatIfCreateSerializer,
        responses={201: WhatIfSerializer, 400: ERROR, 403: ERROR, 404: ERROR},
        description=(
            "Ask for a capacity what-if (finance, procurement and admins): the last `days` days of the "
            "organization's jobs replayed on today's fleet and on one with `nodes` more (fewer) nodes of `flavor` in "
            "`cluster`, bought (arriving `lead_days` in) or reserved, both priced from the price book. Answers the "
            "queued row; it runs in the background: follow `status` and `progress`."
        ),
    )
    def create(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        named = request.data.get("organization") if isinstance(request.data, dict) else None
        organization = whatif.default_organization(
            self.actor, None if named in (None, "") else params.organization(self.actor, named)
        )
        policy.require(self.actor, "whatif.run", organization)
        body = WhatIfCreateSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        values = {k: v for k, v in body.validated_data.items() if k in whatif.FIELDS}
        what_if = whatif.submit_what_if(self.actor, organization, http=request, **values)
        return Response(WhatIfSerializer(self.get_queryset().get(pk=what_if.pk)).data, status=status.HTTP_201_CREATED)


class WhatIfStudySerializer(serializers.ModelSerializer[WhatIfStudy]):
    organization = serializers.SlugRelatedField[Any](slug_field="slug", read_only=True, help_text="Its slug.")
    requested_by = serializers.SlugRelatedField[Any](slug_field="username", read_only=True, allow_null=True)
    table = serializers.SerializerMethodField(
        help_text=(
            "Today's fleet and each scenario side by side, means over the seeds done: `cost` and `extra_cost` over "
            "the window (in `currency`), `mean_wait_s`, `p95_wait_s`, `utilisation`, `wait_hours_saved`, "
            "`cost_per_wait_hour_saved`; with `progress` (0 to 1), `done`, `total`, `complete` and `failed`."
        )
    )
    what_ifs = serializers.PrimaryKeyRelatedField[Any](
        many=True, read_only=True, help_text="One per scenario and seed."
    )

    class Meta:
        model = WhatIfStudy
        fields = ["id", "organization", "name", "days", "seeds", "requested_by", "created_at", "what_ifs", "table"]
        read_only_fields = fields

    @extend_schema_field({"type": "object"})
    def get_table(self, study: WhatIfStudy) -> dict[str, Any]:
        return studies.study_table(study)


class WhatIfStudyCreateSerializer(StrictSerializer):
    """A study to run: each scenario is a what-if's fields but `days` (the study's)."""

    organization = serializers.CharField(required=False, help_text="Its slug; needed only if you belong to several.")
    name = _Text(required=False, help_text="What it compares.")
    days = _Integer(required=False, help_text=f"Days of history to replay, {whatif.MIN_DAYS} to {whatif.MAX_DAYS}.")
    seeds = _Integer(required=False, help_text=f"1 (the history as it was) to {studies.MAX_SEEDS}: resamplings of it.")
    options = _Objects(
        required=False,
        help_text=(
            "Instead of `scenarios`, one option a line as the page's form takes them: `buy 4 H100 in onprem after "
            "60 days`, `retire 2 H100 in onprem`, `reserve 8 H100 in cloud`, `burst cloud-burst up to 6`."
        ),
    )
    scenarios = _Objects(
        required=False,
        help_text=(
            "A list of what-ifs: {cluster, flavor, nodes, kind: nodes|reserve|burst, lead_days, pool}, at most "
            f"{studies.MAX_SCENARIOS}."
        ),
    )


@extend_schema_view(
    list=extend_schema(description="The organization's what-if studies, newest first (finance, procurement, admins)."),
    retrieve=extend_schema(description="One study: its scenarios side by side (`table`), as far as they have run."),
)
class WhatIfStudyViewSet(TenantViewSet, mixins.ListModelMixin, mixins.RetrieveModelMixin):
    """Studies of what-ifs: several scenarios over one window, compared side by side and run in parallel."""

    model = WhatIfStudy
    serializer_class = WhatIfStudySerializer
    parser_classes = [JSONParser]

    def get_queryset(self) -> QuerySet[WhatIfStudy]:
        return super().get_queryset().select_related("organization", "requested_by").order_by("-created_at", "-pk")

    @extend_schema(
        request=WhatIfStudyCreateSerializer,
        responses={201: WhatIfStudySerializer, 400: ERROR, 403: ERROR, 404: ERROR},
        description=(
            "Ask for a study: each scenario replayed over the last `days` days for each seed, every pair a what-if "
            "run by a task of its own (workers run them at once). Answers the study; follow `table.progress`."
        ),
    )
    def create(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        named = request.data.get("organization") if isinstance(request.data, dict) else None
        organization = whatif.default_organization(
            self.actor, None if named in (None, "") else params.organization(self.actor, named)
        )
        policy.require(self.actor, "whatif.run", organization)
        body = WhatIfStudyCreateSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        values = {k: v for k, v in body.validated_data.items() if k not in ("organization", "options")}
        lines = body.validated_data.get("options")
        if lines is not None:
            if not isinstance(lines, list) or not all(isinstance(line, str) for line in lines):
                raise ValidationError({"options": "A list of lines such as 'buy 4 H100 in onprem'."})
            scenarios, _, errors = studies.scenarios_of("\n".join(lines))
            if errors:
                raise ValidationError({f"options[{int(k.split()[1]) - 1}]": v for k, v in errors.items()})
            values["scenarios"] = scenarios
        study = studies.submit_study(self.actor, organization, http=request, **values)
        return Response(
            WhatIfStudySerializer(self.get_queryset().get(pk=study.pk)).data, status=status.HTTP_201_CREATED
        )


router = SimpleRouter(trailing_slash=True)
router.register("what-ifs", WhatIfViewSet, basename="what-if")
router.register("what-if-studies", WhatIfStudyViewSet, basename="what-if-study")
urlpatterns = router.urls
