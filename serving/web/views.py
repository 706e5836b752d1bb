"""The service pages: a team's services, the form to make or change one, and a service's page (its endpoint,
replicas, load and latency over time, cost, revisions, and the buttons that scale, stop, start and roll back).

Thin: services are looked up through ``Service.objects.for_user`` (another team's is a 404); the form's body
is ``serving/submission.py``'s, the changes ``serving.actions``', the figures ``serving/figures.py``'s.
"""

from __future__ import annotations

from datetime import timedelta
from http import HTTPStatus
from typing import Any

from django.contrib import messages
from django.core.exceptions import PermissionDenied, ValidationError
from django.http import HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.utils import timezone
from django.views.decorators.http import require_GET, require_http_methods, require_POST

from common.types import AuthenticatedHttpRequest
from serving import actions, dataplane, figures, submission
from serving.dataplane.table import own
from serving.models import Revision, Service
from serving.web.charts import load_chart
from serving.web.forms import ScaleForm, ServiceForm, initial_of
from tenancy import policy
from tenancy.scoping import Action

#: The charts on a service's page cover this much time.
CHART_SPAN = timedelta(hours=1)


def _visible(request: AuthenticatedHttpRequest, pk: int) -> Service:
    found = Service.objects.for_user(request.user, Action.VIEW).select_related(
        "team__organization", "project", "tier", "revision__model_version__model", "created_by"
    )
    service: Service = get_object_or_404(found, pk=pk)
    return service


@require_GET
def service_list(request: AuthenticatedHttpRequest) -> HttpResponse:
    services = list(
        Service.objects.for_user(request.user, Action.VIEW)
        .select_related("team", "revision")
        .order_by("team__name", "name")
    )
    summaries = figures.summaries(services)
    rows = [(service, summaries[service.pk]) for service in services]
    context = {"rows": rows, "may_create": bool(submission.service_teams(request.user))}
    return render(request, "serving/service_list.html", context)


@require_http_methods(["GET", "POST"])
def service_new(request: AuthenticatedHttpRequest) -> HttpResponse:
    teams = submission.service_teams(request.user)
    if not teams:
        raise PermissionDenied("You may not create services in any team.")
    form = ServiceForm(request.POST or None, teams=teams)
    if request.method == "POST" and form.is_valid():
        body, own = form.request()
        try:
            team, name, fields = submission.creation(request.user, body)
            if own:
                raise ValidationError(own)
            service = actions.create_service(request.user, team=team, name=name, http=request, **fields)
        except ValidationError as error:
            form.add_errors({**submission.api_errors(error), **own})
        else:
            messages.success(request, f"Created service {service.name}: its replicas start within seconds.")
            return redirect("service-detail", pk=service.pk)
    status = HTTPStatus.BAD_REQUEST if request.method == "POST" else HTTPStatus.OK
    return render(request, "serving/service_form.html", {"form": form, "service": None}, status=status)


@require_http_methods(["GET", "POST"])
def service_edit(request: AuthenticatedHttpRequest, pk: int) -> HttpResponse:
    service = _visible(request, pk)
    policy.require(request.user, "service.change", service)
    form = ServiceForm(request.POST or None, teams=[], service=service, initial=initial_of(service))
    if request.method == "POST" and form.is_valid():
        body, own = form.request()
        try:
            fields = submission.change(service, body)
            if own:
                raise ValidationError(own)
            actions.update_service(request.user, service, http=request, **fields)
        except ValidationError as error:
            form.add_errors({**submission.api_errors(error), **own})
        else:
            messages.success(request, f"Saved service {service.name}.")
            return redirect("service-detail", pk=service.pk)
    status = HTTPStatus.BAD_REQUEST if request.method == "POST" else HTTPStatus.OK
    return render(request, "serving/service_form.html", {"form": form, "service": service}, status=status)


def _render(request: AuthenticatedHttpRequest, service: Service, status: int = 200, **extra: Any) -> HttpResponse:
    now = timezone.now()
    samples = figures.samples_since(service, now - CHART_SPAN)
    endpoint = figures.endpoint(service)
    context = {
        "service": service,
        "endpoint": endpoint,
        "summary": figures.summaries([service])[service.pk],
        "limits": own(dataplane.limits(), service.max_inflight, service.max_rps),
        "last_hour": figures.last_hour(service, now),
        "replicas": figures.replica_rows(service),
        "revisions": service.revisions.select_related("created_by").order_by("-number"),
        "rolling": service.revisions.filter(state=Revision.State.ROLLING_OUT).order_by("-number").first(),
        "chart": load_chart(samples),
        "may_change": policy.can(request.user, "service.change", service),
        "scale_form": extra.get("scale_form")
        or ScaleForm(initial={"min_replicas": service.min_replicas, "max_replicas": service.max_replicas}),
        "error": extra.get("error", ""),
    }
    return render(request, "serving/service_detail.html", context, status=status)


@require_GET
def service_detail(request: AuthenticatedHttpRequest, pk: int) -> HttpResponse:
    return _render(request, _visible(request, pk))


@require_POST
def service_scale(request: AuthenticatedHttpRequest, pk: int) -> HttpResponse:
    service = _visible(request, pk)
    form = ScaleForm(request.POST)
    if form.is_valid():
        try:
            actions.scale(request.user, service, http=request, **submission.scaling(form.cleaned_data))
        except ValidationError as error:
            for name, words in submission.api_errors(error).items():
                form.add_error(name if name in form.fields else None, " ".join(words))
        else:
            messages.success(request, f"Service {service.name} now scales between its new bounds.")
            return redirect("service-detail", pk=service.pk)
    return _render(request, service, HTTPStatus.BAD_REQUEST, scale_form=form)


def _change(request: AuthenticatedHttpRequest, pk: int, change: Any, done: str) -> HttpResponse:
    service = _visible(request, pk)
    try:
        change(request.user, service, http=request)
    except ValidationError as error:
        return _render(request, service, HTTPStatus.BAD_REQUEST, error=" ".join(error.messages))
    messages.success(request, done.format(name=service.name))
    return redirect("service-detail", pk=service.pk)


@require_POST
def service_stop(request: AuthenticatedHttpRequest, pk: int) -> HttpResponse:
    return _change(request, pk, actions.stop_service, "Stopping service {name}: its replicas are cancelled.")


@require_POST
def service_start(request: AuthenticatedHttpRequest, pk: int) -> HttpResponse:
    return _change(request, pk, actions.start_service, "Starting service {name}.")


@require_POST
def service_rollback(request: AuthenticatedHttpRequest, pk: int) -> HttpResponse:
    return _change(request, pk, actions.rollback, "Rolling back service {name}.")
