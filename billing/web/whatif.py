"""Capacity what-if pages, under ``/billing/what-ifs/``: a form to ask for one beside today's fleet and the runs
asked for so far; a run's page follows its progress (an htmx partial polled every 2 s while it is queued or
running and the tab is visible) and, once done, shows today's fleet and the changed one side by side: a table
and Plotly charts of queue wait and utilisation.

Finance, procurement and admins only: others get 403 on the list and 404 for a run (it is
outside what ``for_user`` lets them see). Thin: asking goes through ``whatif.submit_what_if`` (which decides who
may, and names each bad field: 400, nothing written); the numbers are the stored result's.
"""

from __future__ import annotations

from decimal import Decimal
from http import HTTPStatus
from typing import Any

from django import forms
from django.contrib import messages
from django.core.exceptions import PermissionDenied, ValidationError
from django.core.paginator import Paginator
from django.db.models import Count, Sum
from django.http import HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.http import require_GET, require_http_methods

from billing.actions import studies, whatif
from billing.models import WhatIf, WhatIfStudy
from billing.whatif_replay import in_service
from clusters.models import AcceleratorType, Cluster, Node
from common.types import AuthenticatedHttpRequest
from common.web.forms import apply_errors
from tenancy.models import Organization
from tenancy.scoping import Action

PER_PAGE = 20
#: Colours by name, as static/js/charts.js knows them.
COLORS = {"today": "slate", "changed": "indigo"}


class _Choice(forms.ModelChoiceField):  # type: ignore[type-arg]
    """A cluster or accelerator type, named after its organization when the user holds roles in several."""

    several = False

    def label_from_instance(self, obj: Any) -> str:
        label = f"{obj.name} ({obj.slug})" if isinstance(obj, Cluster) else str(obj.name)
        return f"{obj.organization.name} · {label}" if self.several else label


class WhatIfForm(forms.Form):
    cluster = _Choice(queryset=Cluster.objects.none(), empty_label="Choose a cluster")
    flavor = _Choice(queryset=AcceleratorType.objects.none(), label="Accelerator type", empty_label="Choose a type")
    nodes = forms.IntegerField(
        min_value=-whatif.MAX_NODES, max_value=whatif.MAX_NODES, help_text="Positive adds nodes, negative removes."
    )
    kind = forms.ChoiceField(
        choices=WhatIf.Kind.choices,
        initial=WhatIf.Kind.NODES,
        required=False,
        label="How they come",
        help_text="Bought nodes cost what the cluster's nodes of the type cost in the price book; reserved ones its "
        "reserved rate.",
    )
    grow_quotas = forms.BooleanField(
        required=False,
        label="Grow the type's quotas with the fleet",
        help_text="Every queue's and cohort's quota of the type grows in proportion; else they stay as they are.",
    )
    lead_days = forms.IntegerField(
        min_value=0,
        max_value=whatif.MAX_LEAD_DAYS,
        initial=0,
        required=False,
        label="Lead time, days",
        help_text="Bought nodes arrive this many days into the replayed window.",
    )
    days = forms.IntegerField(
        min_value=whatif.MIN_DAYS,
        max_value=whatif.MAX_DAYS,
        initial=whatif.DEFAULT_DAYS,
        label="Days of history",
        help_text=f"{whatif.MIN_DAYS} to {whatif.MAX_DAYS}; the jobs submitted in them are replayed.",
    )

    def __init__(self, organizations: list[Organization], *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        clusters = Cluster.objects.filter(organization__in=organizations).exclude(status=Cluster.Status.DISABLED)
        kinds = AcceleratorType.objects.filter(organization__in=organizations)
        for name, rows in (("cluster", clusters), ("flavor", kinds)):
            field = self.fields[name]
            assert isinstance(field, _Choice)
            field.queryset = rows.select_related("organization").order_by("organization__name", "name")
            field.several = len(organizations) > 1


def _fleet(organizations: list[Organization]) -> list[dict[str, Any]]:
    """Today's nodes in service and their accelerators, per cluster and type: what a change starts from."""
    rows = (
        in_service(Node.objects.filter(cluster__organization__in=organizations, accelerator__isnull=False))
        .values("cluster__name", "cluster__slug", "accelerator__name")
        .annotate(nodes=Count("pk"), accelerators=Sum("accelerators_allocatable"))
        .order_by("cluster__name", "accelerator__name")
    )
    return list(rows)


def _organizations(request: AuthenticatedHttpRequest) -> list[Organization]:
    organizations = whatif.organizations_for(request.user)
    if not organizations:
        raise PermissionDenied(whatif.REFUSED)
    return organizations


@require_http_methods(["GET", "POST"])
def what_if_list(request: AuthenticatedHttpRequest) -> HttpResponse:
    organizations = _organizations(request)
    form = WhatIfForm(organizations, request.POST if request.method == "POST" else None)
    status = 200
    if request.method == "POST":
        if form.is_valid():
            data = form.cleaned_data
            try:
                what_if = whatif.submit_what_if(
                    request.user,
                    data["cluster"].organization,
                    cluster=data["cluster"],
                    flavor=data["flavor"],
                    nodes=data["nodes"],
                    days=data["days"],
                    kind=data["kind"] or WhatIf.Kind.NODES,
                    lead_days=data["lead_days"] or 0,
                    grow_quotas=data["grow_quotas"],
                    http=request,
                )
            except ValidationError as exc:
                apply_errors(form, exc)
            else:
                messages.success(request, "What-if queued: the replay runs in the background.")
                return redirect("what-if-detail", pk=what_if.pk)
        status = HTTPStatus.BAD_REQUEST
    return render(request, "billing/whatif_list.html", what_if_list_context(request, form), status=status)


def what_if_list_context(
    request: AuthenticatedHttpRequest,
    form: WhatIfForm | None = None,
    study_errors: dict[str, str] | None = None,
    study_values: Any = None,
) -> dict[str, Any]:
    """The what-ifs page: the form, today's fleet, the what-ifs asked for (those of studies are on theirs), and
    the studies with the form to ask for one."""
    organizations = _organizations(request)
    rows = (
        WhatIf.objects.for_user(request.user, Action.VIEW)
        .filter(study=None)
        .select_related("cluster", "flavor", "requested_by", "pool")
    )
    page = Paginator(rows.order_by("-created_at", "-pk"), PER_PAGE).get_page(request.GET.get("page"))
    studies = WhatIfStudy.objects.for_user(request.user, Action.VIEW).annotate(runs=Count("what_ifs"))
    return {
        "form": form or WhatIfForm(organizations),
        "page": page,
        "rows": [summary(w) for w in page],
        "fleet": _fleet(organizations),
        "studies": studies.select_related("requested_by").order_by("-created_at", "-pk")[:PER_PAGE],
        "study_errors": study_errors or {},
        "study_values": study_values or {"days": whatif.DEFAULT_DAYS, "seeds": 1},
        "grammar": GRAMMAR_LINES,
    }


#: The study form's examples, one scenario a line.
GRAMMAR_LINES = (
    "buy 4 H100 in onprem after 60 days\nretire 2 H100 in onprem\nreserve 8 H100 in cloud\nburst cloud-burst up to 6"
)


def _what_if(request: AuthenticatedHttpRequest, pk: int) -> WhatIf:
    scoped = WhatIf.objects.for_user(request.user, Action.VIEW).select_related(
        "organization", "cluster", "flavor", "requested_by"
    )
    what_if: WhatIf = get_object_or_404(scoped, pk=pk)
    return what_if


@require_GET
def what_if_detail(request: AuthenticatedHttpRequest, pk: int) -> HttpResponse:
    return render(request, "billing/whatif_detail.html", status_context(_what_if(request, pk)))


@require_GET
def what_if_status(request: AuthenticatedHttpRequest, pk: int) -> HttpResponse:
    """The polled partial: progress while it runs, the comparison once done."""
    return render(request, "billing/whatif_status.html", status_context(_what_if(request, pk)))


# --- what the pages show ------------------------------------------------------------------------------------


def duration(seconds: float | None) -> str:
    """A wait as people read it: 45 s, 12 min, 3.4 h, 2.1 d."""
    if seconds is None:
        return "—"
    if seconds < 60:
        return f"{seconds:.0f} s"
    if seconds < 3600:
        return f"{seconds / 60:.0f} min"
    if seconds < 86400:
        return f"{seconds / 3600:.1f} h"
    return f"{seconds / 86400:.1f} d"


def _percent(value: float | None) -> str:
    return "—" if value is None else f"{value * 100:.1f}%"


def _difference(today: Any, changed: Any, kind: str) -> str:
    if kind == "money" and today is not None and changed is not None:
        money = Decimal(changed) - Decimal(today)
        return f"{money:+,.2f}" if money else "no change"
    if not isinstance(today, int | float) or not isinstance(changed, int | float):
        return ""
    if kind == "hours":
        return f"{changed - today:+,.1f} h" if changed != today else "no change"
    delta = changed - today
    if kind == "wait":
        return "no change" if abs(delta) < 0.5 else ("-" if delta < 0 else "+") + duration(abs(delta))
    if kind == "percent":
        return f"{delta * 100:+.1f} points"
    return f"{delta:+,}" if delta else "no change"


#: The comparison table's rows: (label, result key, kind).
ROWS = (
    ("Cost over the window", "cost", "money"),
    ("Hours of waiting, all jobs", "wait_hours", "hours"),
    ("Jobs finished", "jobs", "count"),
    ("Mean queue wait", "mean_wait_s", "wait"),
    ("Median queue wait", "p50_wait_s", "wait"),
    ("95th percentile wait", "p95_wait_s", "wait"),
    ("Longest wait", "max_wait_s", "wait"),
    ("Utilisation of the fleet", "utilisation", "percent"),
    ("Utilisation of the type", "flavor_utilisation", "percent"),
    ("Nodes", "nodes", "count"),
    ("Accelerators", "accelerators", "count"),
    ("Accelerators of the type", "flavor_accelerators", "count"),
    ("Preemptions", "preemptions", "count"),
    ("Never fit", "never_fits", "count"),
    ("Still waiting at the end", "stuck", "count"),
)


def _cell(value: Any, kind: str) -> str:
    if kind == "money":
        return "—" if value is None else f"{Decimal(value):,.2f}"
    if kind == "hours":
        return "—" if value is None else f"{value:,.1f} h"
    if kind == "wait":
        return duration(value)
    if kind == "percent":
        return _percent(value)
    return "—" if value is None else f"{value:,}"


def comparison(result: dict[str, Any]) -> list[dict[str, str]]:
    today, changed = result.get("today", {}), result.get("changed", {})
    return [
        {
            "label": label,
            "today": _cell(today.get(key), kind),
            "changed": _cell(changed.get(key), kind),
            "difference": _difference(today.get(key), changed.get(key), kind),
        }
        for label, key, kind in ROWS
    ]


def chart(result: dict[str, Any]) -> dict[str, Any]:
    """Two panels of bars, today beside the changed fleet: queue wait in hours (mean, median, 95th percentile)
    and utilisation in % (the fleet, the type changed)."""
    flavor = result.get("change", {}).get("flavor", "the type")
    waits = (("Mean wait", "mean_wait_s"), ("Median wait", "p50_wait_s"), ("95th pct wait", "p95_wait_s"))
    uses = (("Fleet", "utilisation"), (flavor, "flavor_utilisation"))
    data: list[dict[str, Any]] = []
    for name in ("today", "changed"):
        figures = result.get(name, {})
        label = "Today's fleet" if name == "today" else "Changed fleet"
        hours = [None if figures.get(k) is None else round(figures[k] / 3600, 2) for _, k in waits]
        percent = [None if figures.get(k) is None else round(figures[k] * 100, 1) for _, k in uses]
        common = {"type": "bar", "name": label, "legendgroup": name, "marker": {"color": COLORS[name]}}
        data.append(
            {
                **common,
                "x": [t for t, _ in waits],
                "y": hours,
                "xaxis": "x",
                "yaxis": "y",
                "hovertemplate": "%{y:,.2f} h<extra>" + label + "</extra>",
            }
        )
        data.append(
            {
                **common,
                "x": [t for t, _ in uses],
                "y": percent,
                "xaxis": "x2",
                "yaxis": "y2",
                "showlegend": False,
                "hovertemplate": "%{y:.1f}%<extra>" + label + "</extra>",
            }
        )
    layout = {
        "barmode": "group",
        "xaxis": {"domain": [0, 0.58], "anchor": "y", "automargin": True},
        "yaxis": {"anchor": "x", "title": {"text": "Queue wait (hours)"}, "rangemode": "tozero", "automargin": True},
        "xaxis2": {"domain": [0.68, 1], "anchor": "y2", "automargin": True},
        "yaxis2": {"anchor": "x2", "title": {"text": "Utilisation (%)"}, "rangemode": "tozero", "automargin": True},
    }
    return {"data": data, "layout": layout}


def daily_chart(result: dict[str, Any]) -> dict[str, Any]:
    """Per day of the window: the mean wait of the jobs submitted that day, on each fleet."""
    days = result.get("days", [])
    data = []
    for name in ("today", "changed"):
        waits = result.get(name, {}).get("by_day", {}).get("mean_wait_s", [])
        label = "Today's fleet" if name == "today" else "Changed fleet"
        data.append(
            {
                "type": "scatter",
                "mode": "lines+markers",
                "name": label,
                "x": days,
                "y": [None if w is None else round(w / 3600, 2) for w in waits],
                "line": {"color": COLORS[name]},
                "hovertemplate": "%{x}: %{y:,.2f} h<extra>" + label + "</extra>",
            }
        )
    layout = {
        "height": 280,
        "xaxis": {"type": "date", "automargin": True},
        "yaxis": {"title": {"text": "Mean wait (hours)"}, "rangemode": "tozero", "automargin": True},
    }
    return {"data": data, "layout": layout}


def change_of(what_if: WhatIf) -> str:
    """The change in words: "+4 H100-SXM-80GB nodes in On-prem H100", "bought, arriving after 30 days",
    "reserved"."""
    if what_if.kind == WhatIf.Kind.BURST or what_if.grow_quotas:
        return studies.scenario_label(what_if)
    plural = "s" if abs(what_if.nodes) != 1 else ""
    words = f"{what_if.nodes:+d} {what_if.flavor.name} node{plural} in {what_if.cluster.name}"
    if what_if.kind == WhatIf.Kind.RESERVE:
        return f"{words}, reserved"
    if what_if.lead_days:
        return f"{words}, bought, arriving after {what_if.lead_days} day{'s' if what_if.lead_days != 1 else ''}"
    return words


def price_words(result: dict[str, Any]) -> str:
    """The change's price against the waiting it saves, in a sentence."""
    priced = result.get("priced")
    if not priced:
        return ""
    currency, extra = priced["currency"], Decimal(priced["extra_cost"])
    cost = f"costs {extra:,.2f} {currency} more" if extra >= 0 else f"saves {-extra:,.2f} {currency}"
    saved = priced["wait_hours_saved"]
    if priced["cost_per_wait_hour_saved"] is None:
        return f"Over the window the change {cost} and saves no waiting ({saved:+,.1f} hours)."
    per_hour = Decimal(priced["cost_per_wait_hour_saved"])
    return (
        f"Over the window the change {cost} and saves {saved:,.1f} hours of waiting: {per_hour:,.2f} {currency} "
        "for each hour of waiting saved."
    )


def _unplaced(result: dict[str, Any]) -> list[dict[str, Any]]:
    """The jobs each replay never placed: too large for the fleet, or still waiting when the events ran out."""
    found = []
    for name, side in (("today", "today's fleet"), ("changed", "the changed fleet")):
        figures = result.get(name, {})
        for key, words in (("never_fits", "Never fit on"), ("stuck", "Still waiting at the end on")):
            jobs = figures.get(f"{key}_jobs", [])
            if figures.get(key):
                found.append({"label": f"{words} {side}", "jobs": jobs, "more": figures[key] - len(jobs)})
    return found


def summary(what_if: WhatIf) -> dict[str, Any]:
    """A list row: the change, and the mean wait and utilisation today and changed once done."""
    result: dict[str, Any] = what_if.result if what_if.status == WhatIf.Status.DONE else {}
    today, changed = result.get("today", {}), result.get("changed", {})
    done = bool(today and changed)
    return {
        "what_if": what_if,
        "change": change_of(what_if),
        "active": what_if.status in (WhatIf.Status.QUEUED, WhatIf.Status.RUNNING),
        "percent": round(what_if.progress * 100),
        "wait": f"{duration(today.get('mean_wait_s'))} → {duration(changed.get('mean_wait_s'))}" if done else "",
        "use": f"{_percent(today.get('utilisation'))} → {_percent(changed.get('utilisation'))}" if done else "",
    }


def status_context(what_if: WhatIf) -> dict[str, Any]:
    done = what_if.status == WhatIf.Status.DONE and bool(what_if.result)
    result: dict[str, Any] = what_if.result if done else {}
    observed = result.get("observed", {})
    return {
        "what_if": what_if,
        "change": change_of(what_if),
        "unplaced": _unplaced(result),
        "active": what_if.status in (WhatIf.Status.QUEUED, WhatIf.Status.RUNNING),
        "percent": round(what_if.progress * 100),
        "done": done,
        "rows": comparison(result) if done else [],
        "chart": chart(result) if done else None,
        "daily": daily_chart(result) if done else None,
        "observed": {k: duration(v) for k, v in observed.items()},
        "price_words": price_words(result) if done else "",
        "result": result,
        "figure_id": f"what-if-{what_if.pk}-chart",
        "daily_id": f"what-if-{what_if.pk}-daily",
    }
