"""The Procurement page, ``/billing/capacity/``: per flavor, demand's history and forecast with its 80 and 95%
intervals against capacity (a Plotly chart), the rolling-origin backtest's error (beside seasonal naive's) and
interval coverage at 1, 4 and 12 weeks, a verdict in words, each team's part, and the weeks where demand may pass
capacity; a switch between the next 12 weeks (daily) and 6 months (weekly) of the same forecast.

Thin: who may read is ``forecast_history.planning_organizations`` (finance, procurement and admins, their own
organizations);
the figures are ``forecast_history.forecast_organization``'s, cached for five minutes. An htmx request for the
other horizon gets the forecasts section alone.
"""

from __future__ import annotations

from datetime import date, timedelta
from typing import Any

from django.core.exceptions import PermissionDenied
from django.http import HttpResponse
from django.shortcuts import render
from django.views.decorators.http import require_GET

from billing.forecast import BUCKET_WORDS, HORIZONS, Backtest, FlavorForecast, Predicted
from billing.forecast_history import forecast_organization, planning_organizations
from common.types import AuthenticatedHttpRequest
from tenancy.models import Organization

#: History shown before the forecast: 26 weeks of days, or two years of weeks.
SHOWN = {"day": 182, "week": 104}
#: Colours by name, as static/js/charts.js knows them ("blue/0.28": blue at 28% opacity).
COLORS = {
    "demand": "blue",
    "used": "lavender",
    "forecast": "blue",
    "band80": "blue/0.28",
    "band95": "blue/0.12",
    "capacity": "crimson",
}


def hours(value: float | None) -> str:
    return "" if value is None else f"{value:,.0f}"


def percent(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.1f}%"


def chart(result: FlavorForecast, today: date) -> dict[str, Any]:
    """History, forecast and its bands, and capacity (recorded, then today's fleet carried forward)."""
    history = result.history[-SHOWN[result.period] :]
    past = [p.start.isoformat() for p in history]
    ahead = [p.start.isoformat() for p in result.forecast]
    hover = "%{y:,.0f} accelerator-hours<extra>%{fullData.name}</extra>"

    def line(name: str, x: list[str], y: list[Any], color: str, **extra: Any) -> dict[str, Any]:
        return {
            "type": "scatter",
            "mode": "lines",
            "name": name,
            "x": x,
            "y": y,
            "hovertemplate": hover,
            "line": {"color": color, "width": 2, **extra.pop("line", {})},
            **extra,
        }

    def band(level: int, color: str) -> list[dict[str, Any]]:
        upper = [getattr(p, f"upper_{level}") for p in result.forecast]
        lower = [getattr(p, f"lower_{level}") for p in result.forecast]
        common = {
            "type": "scatter",
            "mode": "lines",
            "x": ahead,
            "line": {"width": 0},
            "legendgroup": f"b{level}",
            "hovertemplate": hover,
        }
        return [
            {**common, "name": f"{level}% upper", "y": upper, "showlegend": False},
            {**common, "name": f"{level}% interval", "y": lower, "fill": "tonexty", "fillcolor": color},
        ]

    data: list[dict[str, Any]] = []
    if result.forecast:
        data += band(95, COLORS["band95"]) + band(80, COLORS["band80"])
    data.append(line("Used", past, [p.used for p in history], COLORS["used"], line={"width": 1}))
    data.append(line("Demand (used + queued)", past, [p.demand for p in history], COLORS["demand"]))
    if result.forecast:
        data.append(
            line("Forecast", ahead, [p.demand for p in result.forecast], COLORS["forecast"], line={"dash": "dash"})
        )
    capacity = [p.capacity for p in history] + [p.capacity for p in result.forecast]
    if any(c is not None for c in capacity):
        data.append(line("Capacity", past + ahead, capacity, COLORS["capacity"], line={"shape": "hv", "width": 1.5}))
    layout = {
        "height": 340,
        "margin": {"l": 70, "r": 10, "t": 30, "b": 40},
        "hovermode": "x unified",
        "xaxis": {"type": "date", "automargin": True},
        "yaxis": {"title": {"text": f"Accelerator-hours a {result.period}"}, "rangemode": "tozero", "automargin": True},
        "shapes": [
            {
                "type": "line",
                "xref": "x",
                "yref": "paper",
                "x0": today.isoformat(),
                "x1": today.isoformat(),
                "y0": 0,
                "y1": 1,
                "line": {"color": "grey", "width": 1, "dash": "dot"},
            }
        ],
    }
    return {"data": data, "layout": layout}


def scores(test: Backtest) -> list[dict[str, Any]]:
    """The backtest's rows: per horizon, the forecast's and seasonal naive's WAPE and the intervals' coverage."""
    return [
        {
            "weeks": score.weeks,
            "pairs": score.pairs,
            "wape": percent(score.wape),
            "baseline": percent(score.baseline_wape),
            "better": score.wape is not None and score.baseline_wape is not None and score.wape < score.baseline_wape,
            "coverage_80": percent(score.coverage_80),
            "coverage_95": percent(score.coverage_95),
        }
        for score in test.scores
        if score.pairs
    ]


def _range(lower: float | None, upper: float | None) -> str:
    return "not calibrated" if lower is None or upper is None else f"{hours(lower)} to {hours(upper)}"


def _week(week: Predicted) -> dict[str, Any]:
    return {
        "start": week.start,
        "end": week.start + timedelta(days=6),
        "demand": hours(week.demand),
        "range_80": _range(week.lower_80, week.upper_80),
        "range_95": _range(week.lower_95, week.upper_95),
        "capacity": hours(week.capacity),
        "exceeds": {"forecast": "the forecast", "80%": "the 80% upper bound", "95%": "the 95% upper bound", "": ""}[
            week.exceeds
        ],
        "backlog": hours(week.backlog) if week.backlog else "",
    }


def flavor_context(organization: Organization, result: FlavorForecast, today: date) -> dict[str, Any]:
    key = f"capacity-{organization.pk}-{result.horizon}-{result.flavor}".replace(" ", "-")
    test = result.backtest
    return {
        "result": result,
        "key": key,
        "chart": chart(result, today),
        "figure_id": f"{key}-figure",
        "scores": scores(test),
        "weights": [
            {"bucket": bucket, "methods": ", ".join(f"{name} {share:.0%}" for name, share in weights.items())}
            for bucket, weights in zip(BUCKET_WORDS, result.weights, strict=False)
        ],
        "teams": [
            {
                "team": team.team,
                "first": _week(team.weeks[0]) if team.weeks else None,
                "total": hours(sum(w.demand for w in team.weeks)),
                "verdict": team.verdict,
            }
            for team in result.teams
        ],
        "capacity": hours(result.capacity),
        "backlog": hours(result.backlog),
        "shortfall": [_week(w) for w in result.shortfall],
    }


def forecasts_context(organizations: list[Organization], horizon: str) -> dict[str, Any]:
    sections = []
    for organization in organizations:
        found = forecast_organization(organization, horizon)
        sections.append(
            {
                "organization": organization,
                "today": found.today,
                "generated_at": found.generated_at,
                "fit_seconds": f"{found.fit_seconds:.1f}",
                "flavors": [flavor_context(organization, f, found.today) for f in found.flavors],
            }
        )
    chosen = HORIZONS[horizon]
    return {
        "horizon": chosen,
        "horizons": list(HORIZONS.values()),
        "sections": sections,
    }


@require_GET
def capacity(request: AuthenticatedHttpRequest) -> HttpResponse:
    """The page (``?horizon=12w`` or ``6m``); an htmx request gets the forecasts section alone."""
    organizations = planning_organizations(request.user)
    if not organizations:
        raise PermissionDenied("Capacity forecasts are for finance, procurement and organization admins.")
    horizon = request.GET.get("horizon", "12w")
    if horizon not in HORIZONS:
        error = f"horizon: {horizon!r} is not one of {', '.join(HORIZONS)}."
        context = {"error": error, "horizons": list(HORIZONS.values())}
        return render(request, "billing/capacity.html", context, status=400)
    context = forecasts_context(organizations, horizon)
    partial = request.headers.get("HX-Request") == "true"
    return render(request, "billing/capacity_forecasts.html" if partial else "billing/capacity.html", context)
