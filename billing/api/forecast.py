"""The forecasts API: ``GET /api/v1/forecasts/?horizon=12w|6m&flavor=<name>`` gives, per flavor, demand's daily
(12 weeks) or weekly (6 months) history, its forecast with calibrated 80 and 95% intervals against capacity,
the weeks where demand may pass capacity, the methods' weights, the rolling-origin backtest and a verdict in
words, and each team's part (``billing/forecast.py`` says how).

Finance and admins only, of their own organization (the price book's rule): researchers and leads get a 403.
An organization is the one the user holds finance or admin in; one who holds it in several names it with
``organization``. A bad parameter is a 400 naming it.
"""

from __future__ import annotations

from typing import Any

from django.db.models import QuerySet
from django.urls import URLPattern, URLResolver, path
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import exceptions, serializers
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.routers import SimpleRouter
from rest_framework.views import APIView

from billing.actions import capacity_plan
from billing.api.costs import BookViewSet
from billing.forecast import HORIZONS, LEVELS
from billing.forecast_history import forecast_organization, planning_organizations
from billing.models import CapacityChange
from clusters.models import AcceleratorType
from common.api.serializers import ERROR
from tenancy.models import Organization

HOURS = "accelerator-hours"


class Hours(serializers.FloatField):
    """Accelerator-hours, or a percentage, to three decimals."""

    def to_representation(self, value: Any) -> Any:
        return round(float(value), 3)


def hours(help_text: str = "", **kwargs: Any) -> Hours:
    return Hours(read_only=True, help_text=help_text or None, **kwargs)


class PointSerializer(serializers.Serializer[Any]):
    """A period of history: a day, or the 7 days from ``start`` (weekly periods end yesterday)."""

    start = serializers.DateField()
    demand = hours(f"Used plus queued, {HOURS}.")
    used = hours()
    queued = hours("Waiting jobs' accelerators x the hours they waited.")
    capacity = hours("Present accelerators x hours; null before the first capacity record.", allow_null=True)


class PredictedSerializer(serializers.Serializer[Any]):
    """A forecast period: demand's mean and interval bounds (the pending backlog included) and capacity. A bound is
    null where too few backtests calibrate it."""

    start = serializers.DateField()
    demand = hours("The forecast's mean.")
    lower_80 = hours(allow_null=True)
    upper_80 = hours(allow_null=True)
    lower_95 = hours(allow_null=True)
    upper_95 = hours(allow_null=True)
    capacity = hours("The capacity plan's accelerators that period, else today's fleet carried forward.")
    backlog = hours("Of the pending queue's backlog, what this period carries (in every figure).")
    exceeds = serializers.ChoiceField(
        choices=["", "forecast", "80%", "95%"],
        read_only=True,
        help_text="What passes capacity: the mean, the upper 80% or 95% bound, or nothing.",
    )


class ScoreSerializer(serializers.Serializer[Any]):
    """How the forecast did over its first ``weeks`` weeks, from every backtest origin (weekly totals)."""

    weeks = serializers.IntegerField()
    pairs = serializers.IntegerField(help_text="(origin, week) pairs scored.")
    calibrated = serializers.IntegerField(help_text="Of them, those whose intervals were calibrated.")
    wape = hours("All absolute errors over all demand, percent.", allow_null=True)
    baseline_wape = hours("The seasonal naive forecast's WAPE on the same pairs.", allow_null=True)
    coverage_80 = hours("Percent of calibrated pairs inside the 80% interval.", allow_null=True)
    coverage_95 = hours("Percent of calibrated pairs inside the 95% interval.", allow_null=True)


class BacktestSerializer(serializers.Serializer[Any]):
    """The rolling-origin backtest: each origin's forecast weighted and calibrated on what was known by then."""

    origins = serializers.IntegerField()
    stride = serializers.IntegerField(help_text="Days between origins.")
    scores = ScoreSerializer(many=True, help_text="At 1, 4 and 12 weeks.")
    daily_wape = hours("WAPE of the daily values over the first 12 weeks.", allow_null=True)
    daily_coverage_80 = hours(allow_null=True)
    daily_coverage_95 = hours(allow_null=True)
    message = serializers.CharField(help_text="Why there is no backtest (too little history); empty otherwise.")


class TeamForecastSerializer(serializers.Serializer[Any]):
    team = serializers.CharField(help_text="The team's name.")
    weeks = PredictedSerializer(many=True, help_text="Its part of the flavor's weekly forecast (they add up).")
    backtest = BacktestSerializer()
    verdict = serializers.CharField()


class FlavorForecastSerializer(serializers.Serializer[Any]):
    flavor = serializers.CharField()
    model = serializers.CharField(help_text="The methods combined.")
    weights = serializers.ListField(
        child=serializers.DictField(child=serializers.FloatField()),
        help_text="Per lead bucket (week 1, weeks 2-4, weeks 5-26): each method's weight.",
    )
    verdict = serializers.CharField(help_text="How far the forecast can be trusted, in words.")
    reliable = serializers.BooleanField()
    message = serializers.CharField(help_text="Why there is no forecast (too little history); empty otherwise.")
    accelerators = serializers.IntegerField(help_text="The fleet's accelerators of the flavor now.")
    capacity = hours(f"What they give a period, {HOURS}.")
    backlog = hours(f"What the jobs waiting now ask for, {HOURS}.")
    planned = serializers.BooleanField(help_text="Whether capacity ahead follows the capacity plan.")
    history = PointSerializer(many=True)
    forecast = PredictedSerializer(many=True)
    weeks = PredictedSerializer(many=True, help_text="The forecast in weeks from today: the same in every view.")
    shortfall = PredictedSerializer(many=True, help_text="The weeks where demand or an upper bound passes capacity.")
    backtest = BacktestSerializer()
    teams = TeamForecastSerializer(many=True)


class ForecastAnswerSerializer(serializers.Serializer[Any]):
    organization = serializers.CharField(help_text="The organization's slug.")
    horizon = serializers.ChoiceField(choices=list(HORIZONS))
    period = serializers.ChoiceField(choices=["day", "week"])
    levels = serializers.ListField(child=serializers.IntegerField(), help_text="The intervals' levels, percent.")
    today = serializers.DateField(help_text="The forecast's first day (UTC); history ends the day before.")
    generated_at = serializers.DateTimeField()
    fit_seconds = hours("Seconds the fits took (answers are cached for five minutes).")
    flavors = FlavorForecastSerializer(many=True)


class ForecastQuerySerializer(serializers.Serializer[Any]):
    horizon = serializers.ChoiceField(choices=list(HORIZONS), default="12w")
    flavor = serializers.CharField(required=False)
    organization = serializers.CharField(required=False)


PARAMETERS = [
    OpenApiParameter("horizon", OpenApiTypes.STR, enum=list(HORIZONS), description="12w (daily) or 6m (weekly)."),
    OpenApiParameter("flavor", OpenApiTypes.STR, description="One accelerator type's name; all when left out."),
    OpenApiParameter(
        "organization", OpenApiTypes.STR, description="Its slug: needed only by those in several organizations."
    ),
]


def _organization(mine: list[Organization], slug: str | None) -> tuple[Organization | None, str]:
    """The organization asked about among ``mine`` (those whose forecasts the user may read), or why not."""
    if slug:
        found = next((o for o in mine if o.slug == slug), None)
        return found, "" if found else f"{slug!r} is not an organization you hold finance or admin in."
    if len(mine) > 1:
        return None, f"You hold finance or admin in several: name one ({', '.join(o.slug for o in mine)})."
    return mine[0], ""


class ForecastView(APIView):
    """Demand against capacity per flavor, forecast with intervals and backtested."""

    @extend_schema(parameters=PARAMETERS, responses={200: ForecastAnswerSerializer, 400: ERROR, 403: ERROR})
    def get(self, request: Request) -> Response:
        mine = planning_organizations(request.user)
        if not mine:  # asked first: a 403 says nothing of the parameters
            raise exceptions.PermissionDenied("Forecasts are for finance, procurement and organization admins.")
        query = ForecastQuerySerializer(data=request.query_params)
        errors: dict[str, Any] = {} if query.is_valid() else dict(query.errors)
        organization, why = _organization(mine, request.query_params.get("organization"))
        if why:
            errors["organization"] = [why]
        flavor = request.query_params.get("flavor")
        names: set[str] = set()
        if flavor is not None and organization is not None:
            names = set(AcceleratorType.objects.filter(organization=organization).values_list("name", flat=True))
        if errors:  # (an organization not found is one)
            if flavor is not None and flavor not in names:
                errors["flavor"] = [_no_flavor(flavor, names)]
            raise exceptions.ValidationError(errors)
        assert organization is not None
        result = forecast_organization(organization, query.validated_data["horizon"])
        flavors = result.flavors
        if flavor is not None:
            if flavor not in names | {f.flavor for f in flavors}:  # (a flavor only jobs ask for has a forecast too)
                raise exceptions.ValidationError({"flavor": [_no_flavor(flavor, names)]})
            flavors = [f for f in flavors if f.flavor == flavor]
        answer = {
            "organization": organization.slug,
            "horizon": result.horizon,
            "period": HORIZONS[result.horizon].period,
            "levels": list(LEVELS),
            "today": result.today,
            "generated_at": result.generated_at,
            "fit_seconds": result.fit_seconds,
            "flavors": flavors,
        }
        return Response(ForecastAnswerSerializer(answer).data)


def _no_flavor(flavor: str, names: set[str]) -> str:
    return f"No flavor {flavor!r}; the organization's: {', '.join(sorted(names)) or 'none'}."


class CapacityChangeSerializer(serializers.ModelSerializer[CapacityChange]):
    flavor: Any = serializers.StringRelatedField()
    updated_by: Any = serializers.StringRelatedField()

    class Meta:
        model = CapacityChange
        fields = (
            "id",
            "flavor",
            "kind",
            "accelerators",
            "ordered_on",
            "lead_days",
            "starts_on",
            "ends_on",
            "note",
            "updated_at",
            "updated_by",
        )
        read_only_fields = fields


class CapacityPlanViewSet(BookViewSet):
    """The capacity plan: orders (``flavor``, ``kind`` "order", ``accelerators``, ``ordered_on``, ``lead_days``),
    retirements (``starts_on``) and reserved cloud commitments (``starts_on``, ``ends_on``) that the forecasts'
    capacity ahead follows. Finance and admins read and change it; others see none."""

    model = CapacityChange
    serializer_class = CapacityChangeSerializer
    setter = capacity_plan.set_change
    deleter = capacity_plan.delete_change

    def get_queryset(self) -> QuerySet[CapacityChange]:
        return super().get_queryset().select_related("flavor", "updated_by")


router = SimpleRouter(trailing_slash=True)
router.register("capacity-plan", CapacityPlanViewSet, basename="capacity-change")

urlpatterns: list[URLPattern | URLResolver] = [
    path("forecasts/", ForecastView.as_view(), name="forecasts"),
    *router.urls,
]
