"""The forecasts API: ``GET /api/v1/forecasts/?horizon=12w|6m&flavor=<name>`` gives, per flavor, demand's daily
(12 weeks) or weekly (6 months) history, its forecast with 80 and 95% intervals against capacity, the weeks
where demand may pass capacity, the model chosen and its backtest (``billing/forecast.py`` says how).

Finance and admins only, of their own organization (the price book's rule): researchers and leads get a 403.
An organization is the one the user holds finance or admin in; one who holds it in several names it with
``organization``. A bad parameter is a 400 naming it.
"""

from __future__ import annotations

from typing import Any

from django.urls import URLPattern, URLResolver, path
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import exceptions, serializers
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from billing.forecast import HORIZONS, LEVELS
from billing.forecast_history import finance_organizations, forecast_organization
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
    """A forecast period: demand's mean and interval bounds (the pending backlog included) and capacity."""

    start = serializers.DateField()
    demand = hours("The forecast's mean.")
    lower_80 = hours()
    upper_80 = hours()
    lower_95 = hours()
    upper_95 = hours()
    capacity = hours("Today's fleet carried forward.")
    backlog = hours("Of the pending queue's backlog, what this period carries (in every figure).")
    exceeds = serializers.ChoiceField(
        choices=["", "forecast", "80%", "95%"],
        read_only=True,
        help_text="What passes capacity: the mean, the upper 80% or 95% bound, or nothing.",
    )


class BacktestSerializer(serializers.Serializer[Any]):
    """The model fitted without the last ``held_back`` periods and scored on them."""

    held_back = serializers.IntegerField()
    trained_on = serializers.IntegerField()
    model = serializers.CharField()
    mape = hours("Mean absolute percentage error over the held-back periods with demand.", allow_null=True)
    zeros_skipped = serializers.IntegerField(help_text="Held-back periods without demand, left out of the MAPE.")
    coverage_80 = hours("Percent of held-back periods inside the 80% interval.", allow_null=True)
    coverage_95 = hours("Percent of held-back periods inside the 95% interval.", allow_null=True)
    baseline_mape = hours("MAPE of repeating the training's last week: what the model should beat.", allow_null=True)
    weekly_mape = hours("Daily horizon: the MAPE of 7-day totals.", allow_null=True)
    wape = hours("Sum of absolute errors over the sum of demand held back, percent.", allow_null=True)
    message = serializers.CharField(help_text="Why there is no backtest (too little history); empty otherwise.")


class FlavorForecastSerializer(serializers.Serializer[Any]):
    flavor = serializers.CharField()
    model = serializers.CharField(help_text="The ETS configuration chosen by AICc, e.g. ETS(A,Ad,A).")
    description = serializers.CharField()
    message = serializers.CharField(help_text="Why there is no forecast (too little history); empty otherwise.")
    accelerators = serializers.IntegerField(help_text="The fleet's accelerators of the flavor now.")
    capacity = hours(f"What they give a period, {HOURS}.")
    backlog = hours(f"What the jobs waiting now ask for, {HOURS}.")
    history = PointSerializer(many=True)
    forecast = PredictedSerializer(many=True)
    weeks = PredictedSerializer(many=True, help_text="The forecast in weeks from today.")
    shortfall = PredictedSerializer(many=True, help_text="The weeks where demand's upper 95% bound passes capacity.")
    backtest = BacktestSerializer()


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
        mine = finance_organizations(request.user)
        if not mine:  # asked first: a 403 says nothing of the parameters
            raise exceptions.PermissionDenied("Forecasts are for finance and organization admins.")
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


urlpatterns: list[URLPattern | URLResolver] = [
    path("forecasts/", ForecastView.as_view(), name="forecasts"),
]
