"""The model registry's pages: a team's models (``/models/``), one model's versions (``/models/<pk>/``), and
the publish form (``/models/publish/?job=<id>``: one click from a finished job's page, or an upload).

Thin: models and jobs are found through ``for_user`` (another team's is a 404), publications go through
``registry.actions`` (the same checks as the API and ``qm model``, their messages shown beside the fields).
Downloads are the API's artifact endpoint, which a signed-in session may use.
"""

from __future__ import annotations

from http import HTTPStatus
from typing import Any, BinaryIO, cast

from django.contrib import messages
from django.core.exceptions import PermissionDenied, ValidationError
from django.http import HttpResponse
from django.shortcuts import get_object_or_404, redirect, render

from common import params
from common.types import AuthenticatedHttpRequest
from common.web.forms import apply_errors
from registry import actions, queries
from registry.models import ModelVersion
from registry.web.forms import PublishForm
from scheduler.models import Job
from tenancy import policy
from tenancy.scoping import Action


def model_list(request: AuthenticatedHttpRequest) -> HttpResponse:
    models = list(queries.models_for(request.user))
    rows = [(model, queries.latest(model)) for model in models]
    may_publish = bool(actions.teams_for_models(request.user))
    return render(request, "registry/model_list.html", {"rows": rows, "may_publish": may_publish})


def model_detail(request: AuthenticatedHttpRequest, pk: int) -> HttpResponse:
    model = get_object_or_404(queries.models_for(request.user), pk=pk)
    versions = list(queries.versions_of(model))
    return render(
        request,
        "registry/model_detail.html",
        {"model": model, "versions": versions, "may_publish": policy.can(request.user, "model.publish", model)},
    )


def publish(request: AuthenticatedHttpRequest) -> HttpResponse:
    """Publish a version: of the job named by ``?job=`` (its latest checkpoint), else of an uploaded file."""
    job = None
    if "job" in request.GET:
        job_id = params.id_(request.GET["job"], "job")
        job = get_object_or_404(Job.objects.for_user(request.user, Action.VIEW).select_related("team"), pk=job_id)
    teams = actions.teams_for_models(request.user)
    if job is not None:
        policy.require(request.user, "model.create", job.team)
        teams = [t for t in teams if t.pk == job.team_id]
    if not teams:
        raise PermissionDenied("You may publish models of no team.")
    checkpoint = actions.latest_checkpoint(job) if job is not None else None
    asked = params.as_id(request.GET.get("team", ""))
    initial: dict[str, Any] = {"team": asked if asked in {t.pk for t in teams} else teams[0].pk}
    if job is not None:
        initial["model"] = _default_name(job.name)
    form = PublishForm(request.POST or None, request.FILES or None, teams=teams, upload=job is None, initial=initial)
    status = HTTPStatus.OK
    if request.method == "POST":
        if form.is_valid():
            version = _publish(request, form, job)
            if version is not None:
                messages.success(request, f"Published {version.model.name} version {version.version}.")
                return redirect("model-detail", pk=version.model_id)
        status = HTTPStatus.BAD_REQUEST
    context = {
        "form": form,
        "job": job,
        "checkpoint": checkpoint,
        "importable": checkpoint is not None
        and job is not None
        and actions.importable(checkpoint.location, job.team) is not None,
        "existing": [m.name for m in queries.models_for(request.user).filter(team__in=teams)],
    }
    return render(request, "registry/publish.html", context, status=status)


def _default_name(job_name: str) -> str:
    """A model name made from a job's name ("ResNet 50 run" -> "resnet-50-run")."""
    cleaned = "".join(c if c.isalnum() else "-" for c in job_name.lower()).strip("-")
    while "--" in cleaned:
        cleaned = cleaned.replace("--", "-")
    return cleaned[:100] or "model"


def _publish(request: AuthenticatedHttpRequest, form: PublishForm, job: Job | None) -> ModelVersion | None:
    """The published version, or None with the actions' errors put on the form."""
    data = form.cleaned_data
    what = actions.Publication(version=data["version"], metrics=data["metrics"], notes=data["notes"])
    upload = data.get("file")
    try:
        return actions.publish_to_named(
            request.user,
            data["team"],
            data["model"],
            what,
            job=job,
            upload=cast(BinaryIO, upload) if upload is not None else None,
            filename=upload.name if upload is not None else "",
            http=request,
        )
    except ValidationError as error:
        apply_errors(form, error)
        return None
