"""What-if studies, under ``/billing/what-ifs/studies/``: several scenarios (buy, retire, reserve, burst) over one
window, compared side by side in one table and one Plotly chart while their what-ifs run in parallel; asked for
from the what-ifs page with one scenario a line.

Thin: ``billing.actions.studies.submit_study`` decides who may and names each bad field (400, nothing
written), mapped here to the line it came from; ``studies.study_table`` gives the figures. Finance, procurement
and admins only: anyone else gets 403 on asking and 404 for a study (outside what ``for_user`` lets them see).
"""

from __future__ import annotations

import re
from decimal import Decimal
from http import HTTPStatus
from typing import Any

from django.contrib import messages
from django.core.exceptions import ValidationError
from django.http import HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.http import require_GET, require_POST

from billing import params
from billing.actions import studies as study_actions
from billing.models import WhatIfStudy
from billing.web.whatif import duration, what_if_list_context
from common.types import AuthenticatedHttpRequest
from tenancy.scoping import Action


@require_POST
def study_new(request: AuthenticatedHttpRequest) -> HttpResponse:
    """Ask for a study from the what-ifs page's form (``name``, ``days``, ``seeds``, ``scenarios`` as lines)."""
    organization = (
        params.organization(request.user, request.POST.get("organization"))
        if request.POST.get("organization")
        else None
    )
    scenarios, lines, errors = study_actions.scenarios_of(request.POST.get("scenarios", ""))
    if not errors:
        try:
            study = study_actions.submit_study(
                request.user,
                organization,
                name=request.POST.get("name", ""),
                days=request.POST.get("days", ""),
                seeds=request.POST.get("seeds", ""),
                scenarios=scenarios,
                http=request,
            )
        except ValidationError as exc:
            for field, texts in exc.message_dict.items():
                match = re.match(r"scenarios\[(\d+)\]\.(.+)", field)
                where = f"line {lines[int(match.group(1))]}: {match.group(2)}" if match else field
                errors[where] = " ".join(texts)
        else:
            messages.success(request, f"Study queued: {study.what_ifs.count()} replays run in the background.")
            return redirect("what-if-study", pk=study.pk)
    context = what_if_list_context(request, study_errors=errors, study_values=request.POST)
    return render(request, "billing/whatif_list.html", context, status=HTTPStatus.BAD_REQUEST)


def _study(request: AuthenticatedHttpRequest, pk: int) -> WhatIfStudy:
    scoped = WhatIfStudy.objects.for_user(request.user, Action.VIEW).select_related("organization", "requested_by")
    study: WhatIfStudy = get_object_or_404(scoped, pk=pk)
    return study


def _money(value: str | None) -> str:
    return "—" if value is None else f"{Decimal(value):,.2f}"


def context_of(study: WhatIfStudy) -> dict[str, Any]:
    table = study_actions.study_table(study)
    rows = [
        {
            **row,
            "cost_text": _money(row["cost"]),
            "extra_text": _money(row["extra_cost"]) if row["extra_cost"] is not None else "",
            "mean_text": duration(row["mean_wait_s"]),
            "p95_text": duration(row["p95_wait_s"]),
            "use_text": "—" if row["utilisation"] is None else f"{row['utilisation'] * 100:.1f}%",
            "saved_text": "" if row["wait_hours_saved"] is None else f"{row['wait_hours_saved']:,.1f} h",
            "per_hour_text": _money(row["cost_per_wait_hour_saved"]) if row["cost_per_wait_hour_saved"] else "—",
        }
        for row in table["rows"]
    ]
    return {
        "study": study,
        "table": table,
        "rows": rows,
        "active": not table["complete"],
        "percent": round(table["progress"] * 100),
        "chart": chart(table) if any(r["cost"] for r in table["rows"]) else None,
        "figure_id": f"study-{study.pk}-chart",
    }


def chart(table: dict[str, Any]) -> dict[str, Any]:
    """Each fleet's cost over the window against its queue wait (mean and 95th percentile, in hours)."""
    rows = [r for r in table["rows"] if r["cost"] is not None]
    x = [float(r["cost"]) for r in rows]
    labels = [r["label"] for r in rows]
    data = []
    for key, name, color in (("mean_wait_s", "Mean wait", "indigo"), ("p95_wait_s", "95th percentile wait", "crimson")):
        data.append(
            {
                "type": "scatter",
                "mode": "markers",
                "name": name,
                "x": x,
                "y": [None if r[key] is None else round(r[key] / 3600, 2) for r in rows],
                "text": labels,
                "marker": {"color": color, "size": 10},
                "hovertemplate": "%{text}<br>%{x:,.2f} "
                + table["currency"]
                + ", %{y:,.2f} h<extra>"
                + name
                + "</extra>",
            }
        )
    layout = {
        "height": 360,
        "xaxis": {"title": {"text": f"Cost over the window ({table['currency']})"}, "automargin": True},
        "yaxis": {"title": {"text": "Queue wait (hours)"}, "rangemode": "tozero", "automargin": True},
    }
    return {"data": data, "layout": layout}


@require_GET
def study_detail(request: AuthenticatedHttpRequest, pk: int) -> HttpResponse:
    return render(request, "billing/whatif_study.html", context_of(_study(request, pk)))


@require_GET
def study_status(request: AuthenticatedHttpRequest, pk: int) -> HttpResponse:
    """The polled partial: progress while its what-ifs run, the table and chart as they finish."""
    return render(request, "billing/whatif_study_status.html", context_of(_study(request, pk)))
