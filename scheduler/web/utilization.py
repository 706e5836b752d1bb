"""GPU utilization pages: the job page's utilization panel (loaded by htmx after the page, so the page
itself stays as fast as it was) and a team's least efficient jobs, for its leads, finance and admins
(``efficiency.read`` in ``tenancy/policy.py``). The numbers come from ``scheduler/utilization.py``."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from django.db.models import Prefetch
from django.http import HttpResponse
from django.shortcuts import get_object_or_404, render
from django.utils import timezone
from django.views.decorators.http import require_GET

from common import params
from common.types import AuthenticatedHttpRequest
from scheduler import utilization
from scheduler.models import Assignment, Attempt, Job
from tenancy import policy
from tenancy.models import Team
from tenancy.scoping import Action

#: Lines drawn per job chart: beyond, a gang's nodes are summed up in the table only.
MAX_LINES = 24
#: The least efficient jobs a team page lists, and the window it looks at by default.
LEAST_EFFICIENT = 10
DEFAULT_DAYS = 7


def _mode(points: list[Any]) -> str:
    """Lines, with markers while there are too few readings for a line to show (a job just started)."""
    return "lines" if len(points) > 2 else "lines+markers"


def utilization_chart(series: dict[str, Any]) -> dict[str, Any]:
    """A Plotly figure of a job's utilization (``utilization.job_series``): one line per attempt and node;
    for a job that held a single node alone, one line per GPU too."""
    data: list[dict[str, Any]] = []
    nodes = [(a, n) for a in series["attempts"] for n in a["nodes"]]
    for attempt, node in nodes[:MAX_LINES]:
        name = f"#{attempt['number']} {node['node']}" + (" (shared)" if node["shared"] else "")
        data.append(
            {
                "type": "scatter",
                "mode": _mode(node["points"]),
                "name": name,
                "x": [p["at"] for p in node["points"]],
                "y": [p["utilization"] for p in node["points"]],
                "hovertemplate": "%{y:.1f} %<extra>" + name + "</extra>",
            }
        )
    if len(nodes) == 1:
        for gpu in nodes[0][1]["gpus"]:
            data.append(
                {
                    "type": "scatter",
                    "mode": _mode(gpu["points"]),
                    "name": f"GPU {gpu['index']}",
                    "x": [p["at"] for p in gpu["points"]],
                    "y": [p["utilization"] for p in gpu["points"]],
                    "line": {"width": 1, "dash": "dot"},
                    "hovertemplate": "%{y:.1f} %<extra>GPU " + str(gpu["index"]) + "</extra>",
                }
            )
    if not any(trace["x"] for trace in data):
        return {"data": [], "layout": {}}
    layout = {
        "yaxis": {"title": {"text": "GPU utilization (%)"}, "range": [0, 105], "automargin": True},
        "xaxis": {"type": "date", "automargin": True},
    }
    return {"data": data, "layout": layout}


@require_GET
def job_utilization(request: AuthenticatedHttpRequest, pk: int) -> HttpResponse:
    """The job page's utilization panel: a chart and the summary per attempt."""
    job = get_object_or_404(Job.objects.for_user(request.user, Action.VIEW), pk=pk)
    attempts = (
        Attempt.objects.filter(job=job)
        .select_related("cluster")
        .order_by("number")
        .prefetch_related(Prefetch("assignments", queryset=Assignment.objects.select_related("node").order_by("pk")))
    )
    series = utilization.job_series(job, list(attempts), step=None, at=timezone.now())
    context = {
        "job": job,
        "series": series,
        "chart": utilization_chart(series),
        "figure_id": f"job-{job.pk}-utilization-figure",
    }
    return render(request, "scheduler/_job_utilization.html", context)


@require_GET
def team_efficiency(request: AuthenticatedHttpRequest, pk: int) -> HttpResponse:
    """A team's least efficient jobs over the last ``days`` (7 by default, at most 92): the lowest mean GPU
    utilization among jobs measured for at least an hour, with the GPU-hours they held idle."""
    team = get_object_or_404(Team.objects.for_user(request.user, Action.VIEW).select_related("organization"), pk=pk)
    policy.require(request.user, "efficiency.read", team)
    days = params.optional_integer(request.GET.get("days"), "days", low=1, high=92) or DEFAULT_DAYS
    until = timezone.now()
    ranked = utilization.least_efficient(
        [team.pk], until - timedelta(days=days), until, limit=LEAST_EFFICIENT, at=until
    )
    rows = [
        {"job": e.job, "name": e.name, **utilization.summary(e.share), "idle_gpu_hours": idle_hours(e.share)}
        for e in ranked
    ]
    return render(request, "scheduler/team_efficiency.html", {"team": team, "rows": rows, "days": days})


def idle_hours(share: utilization.Share) -> float:
    """GPU-hours held and measured but not busy."""
    return round((share.measured - share.busy) / utilization.GPU_HOUR, 3)
