"""Job pages: the list (filtered, paged, polled while visible), one job (its state, why it waits, where it
runs, its timeline and cost so far; cancel and clone; admins force-preempt and requeue), the submit form with
its live preview (field errors and the estimated cost and start as you type), and the team queues with their
usage against quota (polled while visible too).

Thin: every job is looked up through ``Job.objects.for_user`` (another team's job is a 404), every change
goes through ``scheduler.actions``; bad input is answered with 400 and the errors beside their fields.
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal
from http import HTTPStatus
from typing import Any

from django.contrib import messages
from django.core.exceptions import PermissionDenied, ValidationError
from django.core.paginator import Paginator
from django.db.models import Count, OuterRef, Prefetch, Q, QuerySet, Subquery
from django.http import Http404, HttpResponse, HttpResponseRedirect
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.utils import timezone
from django.views.decorators.http import require_GET, require_POST

from common.types import AuthenticatedHttpRequest
from governance.models import PriorityTier, Queue
from scheduler import actions, costs, debug, output
from scheduler.actions import arrays, lifecycle, pipelines, replicas, sessions
from scheduler.attempts import checkpoint_counts, reason_words, state_words
from scheduler.models import Assignment, Attempt, Checkpoint, Job
from scheduler.placement import feasibility
from scheduler.queues import REASON_LABELS, describe_resources, queue_context
from scheduler.states import PLACED, WAITING
from scheduler.submission import JobRequest
from scheduler.web.forms import CancelForm, InterventionForm, JobForm, JobListFilter, QueueListFilter, initial_from_job
from tenancy import policy
from tenancy.scoping import Action

JOBS_PER_PAGE = 25


# --- helpers ----------------------------------------------------------------------------------------------


def _visible_jobs(request: AuthenticatedHttpRequest) -> QuerySet[Job]:
    jobs: QuerySet[Job] = Job.objects.for_user(request.user, Action.VIEW)
    return jobs


def _visible_job(request: AuthenticatedHttpRequest, pk: int) -> Job:
    jobs = _visible_jobs(request).select_related(
        "team__organization", "project", "tier", "queue", "submitted_by", "array"
    )
    job: Job = get_object_or_404(jobs, pk=pk)
    return job


def _reason_label(job: Job) -> str:
    """Why the job waits, in a few words; "" for a job that is not waiting (its old reason is over)."""
    return REASON_LABELS.get(job.pending_reason, "") if job.state in WAITING else ""


def _duration(seconds: int) -> str:
    hours, minutes = seconds // 3600, seconds % 3600 // 60
    return " ".join(part for part in (f"{hours} h" if hours else "", f"{minutes} min" if minutes else "") if part) or (
        f"{seconds} s"
    )


def _offers(request: AuthenticatedHttpRequest, job: Job) -> frozenset[str]:
    """What the page offers to do to ``job``: what the policy lets the user do (``actions.cancel_job`` asks the
    same), from one read of their roles."""
    return policy.granted(request.user, job, "job.cancel", "job.preempt", "job.requeue")


# --- the list ---------------------------------------------------------------------------------------------


def _list_context(request: AuthenticatedHttpRequest) -> tuple[dict[str, Any], int]:
    filters = JobListFilter(request.user, request.GET)
    current = Attempt.objects.filter(job=OuterRef("pk"), number=OuterRef("attempt"))
    jobs: QuerySet[Job] = (
        _visible_jobs(request)
        .select_related("team", "project", "tier", "submitted_by", "queue")
        .annotate(cluster_name=Subquery(current.values("cluster__name")[:1]))
    )
    status = 200
    if filters.is_valid():
        jobs = filters.filter(jobs)
    else:
        jobs, status = jobs.none(), HTTPStatus.BAD_REQUEST
    page = Paginator(jobs, JOBS_PER_PAGE).get_page(request.GET.get("page"))
    query = request.GET.copy()
    query.pop("page", None)
    rows = [(job, describe_resources(job), _reason_label(job)) for job in page]
    context = {
        "filter": filters,
        "page": page,
        "rows": rows,
        "query": query.urlencode(),
        "now": timezone.now(),
        "rows_url": f"{reverse('job-rows')}?{request.GET.urlencode()}",
    }
    return context, status


@require_GET
def job_list(request: AuthenticatedHttpRequest) -> HttpResponse:
    context, status = _list_context(request)
    context["may_submit"] = bool(actions.teams_for_submission(request.user))
    return render(request, "scheduler/job_list.html", context, status=status)


@require_GET
def job_rows(request: AuthenticatedHttpRequest) -> HttpResponse:
    """The list's table body alone: what the list polls while its tab is visible."""
    context, status = _list_context(request)
    return render(request, "scheduler/_job_rows.html", context, status=status)


# --- one job ----------------------------------------------------------------------------------------------


#: Checkpoints listed on the job page, newest first (the job keeps more; the API lists them all).
CHECKPOINTS_SHOWN = 10


@dataclass
class AttemptRow:
    attempt: Attempt
    cost: Decimal
    assignments: list[Assignment]
    checkpoints: int = 0

    @property
    def state(self) -> str:
        return state_words(self.attempt)

    @property
    def ended_because(self) -> str:
        return reason_words(self.attempt)


def _state_context(request: AuthenticatedHttpRequest, job: Job) -> dict[str, Any]:
    now = timezone.now()
    attempts = list(
        job.attempts.select_related("cluster").prefetch_related(
            Prefetch("assignments", queryset=Assignment.objects.select_related("node").order_by("pk"))
        )
    )
    kept: list[Checkpoint] = list(job.checkpoints.order_by("-reported_at", "-pk"))
    counts = checkpoint_counts(kept)
    rows = [AttemptRow(a, costs.attempt_cost(a, now), list(a.assignments.all()), counts[a.number]) for a in attempts]
    current = next((row for row in rows if row.attempt.number == job.attempt), None)
    return {
        "job": job,
        "now": now,
        "waiting": job.state in WAITING,
        "placed": job.state in PLACED,
        "reason_label": _reason_label(job),
        "attempts": rows,
        "current": current if job.state in PLACED else None,
        "cost_so_far": costs.cost_so_far(job, now, attempts),
        "events": lifecycle.timeline(job),
        "resources": describe_resources(job),
        "last_checkpoint": kept[0] if kept else None,
        "resume_from": kept[0].location if kept else job.checkpoint_location,
        "checkpoints": kept[:CHECKPOINTS_SHOWN],
        "more_checkpoints": max(0, len(kept) - CHECKPOINTS_SHOWN),
        **_session_context(request, job, current.attempt if current else None),
    }


def _session_context(request: AuthenticatedHttpRequest, job: Job, attempt: Attempt | None) -> dict[str, Any]:
    """An interactive session's open button: shown while it runs with an address, to its submitter only."""
    if job.kind != Job.Kind.SESSION:
        return {}
    ready = job.state == Job.State.RUNNING and attempt is not None and bool(attempt.session_url)
    return {
        "session_ready": ready,
        "may_open_session": ready and policy.can(request.user, "job.session.open", job),
        "session_app_name": job.get_session_app_display().split(" (")[0] if job.session_app else "",
    }


def _render_job(request: AuthenticatedHttpRequest, job: Job, status: int = 200, **extra: Any) -> HttpResponse:
    context = _state_context(request, job)
    offers = _offers(request, job)
    posted, refused = extra.get("intervention", ""), extra.get("intervene_form")
    context.update(
        may_cancel=job.is_active and "job.cancel" in offers,
        may_preempt="job.preempt" in offers and job.state in actions.PREEMPTABLE,
        may_requeue="job.requeue" in offers and job.state == Job.State.FAILED,
        preempt_form=refused if posted == "preempt" else InterventionForm(),
        requeue_form=refused if posted == "requeue" else InterventionForm(),
        intervention=posted,
        may_clone=job.team_id in {team.pk for team in actions.teams_for_submission(request.user)},
        cancel_form=extra.get("cancel_form") or CancelForm(),
        clusters=list(job.clusters.all()),
        per_worker=describe_resources(job, per_worker=True),
        cpu_cores=job.cpu / 1000,
        memory_gib=job.memory / 1024,
        time_limit=_duration(job.time_limit),
        command=shlex.join(job.command),
        head_cpu_cores=job.head_cpu / 1000,
        head_memory_gib=job.head_memory / 1024,
        runtime_env=json.dumps(job.runtime_env, indent=2),
        dependencies=pipelines.dependencies_of(job),
        dependents=pipelines.dependents_of(job, request.user),
        array=job.array,
        serve_url=replicas.current_url(job),
    )
    return render(request, "scheduler/job_detail.html", context, status=status)


@require_GET
def job_detail(request: AuthenticatedHttpRequest, pk: int) -> HttpResponse:
    return _render_job(request, _visible_job(request, pk))


@require_GET
def job_debug(request: AuthenticatedHttpRequest, pk: int) -> HttpResponse:
    """Everything about one job that helps tell what happened (``scheduler/debug.py``; ``qm debug``)."""
    job = _visible_job(request, pk)
    return render(request, "scheduler/job_debug.html", {"job": job, "found": debug.gather(job)})


@require_GET
def job_state(request: AuthenticatedHttpRequest, pk: int) -> HttpResponse:
    """The job page's state block alone: polled while the job is active and the tab visible."""
    return render(request, "scheduler/_job_state.html", _state_context(request, _visible_job(request, pk)))


@require_GET
def job_output(request: AuthenticatedHttpRequest, pk: int) -> HttpResponse:
    """The job page's output panel (``scheduler/output.py``); ``?follow=1``: a follower's step, the new lines."""
    job = _visible_job(request, pk)
    asked = output.ask(request.GET)
    if asked["follow"]:
        panel, newer = output.follow_step(job, asked)
    else:
        panel, newer = output.build(job, asked), False
    if panel is None:
        raise Http404(f"Job {job.pk} has no attempt {asked['attempt']}.")
    context = {
        "panel": panel,
        "newer": newer,
        "url": reverse("job-output", kwargs={"pk": job.pk}),
        "follow_every": f"{output.FOLLOW_SECONDS}s",
    }
    partial = "_job_output_follow.html" if asked["follow"] else "_job_output.html"
    return render(request, f"scheduler/{partial}", context)


@require_GET
def job_open(request: AuthenticatedHttpRequest, pk: int) -> HttpResponse:
    """Open an interactive session: a redirect to its app with its secret, for its submitter only (another
    team's job is a 404; a teammate's session a 403: a notebook runs as the one who started it)."""
    job = _visible_job(request, pk)
    try:
        link = sessions.open_link(request.user, job)
    except sessions.NotReady as error:
        messages.warning(request, str(error))
        return redirect("job-detail", pk=job.pk)
    response = HttpResponseRedirect(link)
    response["Cache-Control"] = "no-store"
    response["Referrer-Policy"] = "no-referrer"
    return response


@require_POST
def job_cancel(request: AuthenticatedHttpRequest, pk: int) -> HttpResponse:
    job = _visible_job(request, pk)
    form = CancelForm(request.POST)
    if form.is_valid():
        try:
            actions.cancel_job(request.user, job, form.cleaned_data["reason"], http=request)
        except ValidationError as exc:
            form.add_error(None, " ".join(exc.messages))
        else:
            messages.success(request, f"Job #{job.pk} is cancelled.")
            return redirect("job-detail", pk=job.pk)
    job.refresh_from_db()
    return _render_job(request, job, HTTPStatus.BAD_REQUEST, cancel_form=form)


def _intervene(
    request: AuthenticatedHttpRequest, pk: int, name: str, change: Callable[..., Job], done: str
) -> HttpResponse:
    """An admin's force-preempt or requeue (``change``, the action) of a job the user can see: a 403 for
    anyone else, the page again with the reason's or the state's error beside the form if refused."""
    job = _visible_job(request, pk)
    form = InterventionForm(request.POST)
    if form.is_valid():
        try:
            job = change(request.user, job, form.cleaned_data["reason"], http=request)
        except ValidationError as exc:
            errors = exc.message_dict if hasattr(exc, "error_dict") else {"__all__": exc.messages}
            for field, texts in errors.items():
                form.add_error("reason" if field == "reason" else None, texts)
        else:
            messages.success(request, done.format(job=job))
            return redirect("job-detail", pk=job.pk)
    job.refresh_from_db()
    return _render_job(request, job, HTTPStatus.BAD_REQUEST, intervene_form=form, intervention=name)


@require_POST
def job_preempt(request: AuthenticatedHttpRequest, pk: int) -> HttpResponse:
    return _intervene(
        request,
        pk,
        "preempt",
        actions.preempt_job,
        "Job #{job.pk} is preempted: it has {job.tier.grace_seconds} s to checkpoint and exit, then goes back to "
        "its queue.",
    )


@require_POST
def job_requeue(request: AuthenticatedHttpRequest, pk: int) -> HttpResponse:
    return _intervene(request, pk, "requeue", actions.requeue_job, "Job #{job.pk} is requeued for one more try.")


# --- submitting -------------------------------------------------------------------------------------------


def _refuse_non_submitters(request: AuthenticatedHttpRequest) -> None:
    """403 for one whom the policy lets submit to no team (``actions.teams_for_submission``)."""
    if not actions.teams_for_submission(request.user):
        raise PermissionDenied("Only members of a team and organization admins submit jobs.")


def _render_form(request: AuthenticatedHttpRequest, form: JobForm, status: int = 200, **extra: Any) -> HttpResponse:
    context = {"form": form, "preview_url": reverse("job-preview"), **extra}
    return render(request, "scheduler/job_form.html", context, status=status)


def _judged(
    request: AuthenticatedHttpRequest, form: JobForm, *, placeholders: bool = False
) -> tuple[JobRequest | None, list[str], tuple[Queue, PriorityTier] | None]:
    """Check the form, then the request by the action's own rules (even when some fields failed the form's
    checks, so that every error shows at once); the queue and tier when all is well. No request at all when
    the team posted is not one the user may submit to: the form's team field says so, and there is no team
    for the action to judge the rest against."""
    form.is_valid()
    if form.chosen_team is None:
        return None, [], None
    job_request, missing = form.job_request(placeholders=placeholders)
    try:
        queue_and_tier = actions.validate(request.user, job_request)
    except ValidationError as exc:
        form.apply_action_errors(exc)
        return job_request, missing, None
    return job_request, missing, None if form.errors else queue_and_tier


def job_new(request: AuthenticatedHttpRequest) -> HttpResponse:
    _refuse_non_submitters(request)
    if request.method != "POST":
        return _render_form(request, JobForm(request.user))
    form = JobForm(request.user, request.POST)
    if form.redrawn:
        form.add_error("tier", "The team changed: check the project and priority tier chosen for it.")
    elif form.is_valid() and form.is_array:
        job_request, _ = form.job_request()
        try:
            array, _ = arrays.submit_array(request.user, form.array_request(job_request), http=request)
        except ValidationError as exc:
            form.apply_action_errors(exc)
        else:
            messages.success(request, f"Array #{array.pk} {array.name} is submitted: {array.count} tasks.")
            return redirect("array-detail", pk=array.pk)
    elif form.is_valid():
        job_request, _ = form.job_request()
        try:
            job, _ = actions.submit_job(request.user, job_request, http=request)
        except ValidationError as exc:
            form.apply_action_errors(exc)
        else:
            messages.success(request, f"Job #{job.pk} {job.name} is submitted to queue {job.queue}.")
            return redirect("job-detail", pk=job.pk)
    else:
        _judged(request, form)  # the action's word on the fields the form let through, beside them too
    return _render_form(request, form, HTTPStatus.BAD_REQUEST)


@dataclass
class Estimate:
    """What the preview shows: the errors to fix, or what is still missing, or the engine's estimate."""

    problems: bool = False
    missing: list[str] | None = None
    cost_per_hour: float | None = None
    total_cost: float | None = None
    starts_now: bool = False
    estimated_start: datetime | None = None
    reason: str = ""
    reason_label: str = ""
    message: str = ""


@require_POST
def job_preview(request: AuthenticatedHttpRequest) -> HttpResponse:
    """The form posted as it is typed: its field errors (swapped in beside their fields) and, when the
    request is valid, the estimated cost per hour and start from ``feasibility.preview``. Always 200, so
    htmx swaps it; nothing is written but the team's queue on its first use."""
    _refuse_non_submitters(request)
    form = JobForm(request.user, request.POST)
    estimate = Estimate()
    job_request, estimate.missing, queue_and_tier = _judged(request, form, placeholders=True)
    if job_request is not None and queue_and_tier is not None:
        queue, tier = queue_and_tier
        found = feasibility.preview(job_request.team.organization, queue, tier, job_request, request.user.pk)
        estimate.cost_per_hour = found.cost_per_hour
        if found.cost_per_hour is not None:
            estimate.total_cost = found.cost_per_hour * job_request.time_limit / 3600
        estimate.starts_now = found.starts_now
        estimate.estimated_start = found.estimated_start
        estimate.reason = found.reason
        estimate.reason_label = REASON_LABELS.get(found.reason, "")
        estimate.message = found.message
    estimate.problems = bool(form.errors)
    context = {"form": form, "estimate": estimate, "redraw": form.redrawn}
    return render(request, "scheduler/_preview.html", context)


@require_GET
def job_clone(request: AuthenticatedHttpRequest, pk: int) -> HttpResponse:
    job = _visible_job(request, pk)
    _refuse_non_submitters(request)
    policy.require(request.user, "job.submit", job.team)
    form = JobForm(request.user, initial=initial_from_job(job))
    return _render_form(request, form, cloned_from=job)


# --- queues -----------------------------------------------------------------------------------------------


def _queue_list_context(request: AuthenticatedHttpRequest) -> tuple[dict[str, Any], int]:
    filters = QueueListFilter(request.user, request.GET)
    queues: QuerySet[Queue] = (
        Queue.objects.for_user(request.user, Action.VIEW)
        .select_related("team", "project", "cohort")
        .annotate(
            running=Count("jobs", filter=Q(jobs__state__in=PLACED)),
            waiting=Count("jobs", filter=Q(jobs__state__in=WAITING)),
        )
    )
    status = 200
    if not filters.is_valid():
        queues, status = queues.none(), HTTPStatus.BAD_REQUEST
    elif filters.cleaned_data["team"] is not None:
        queues = queues.filter(team_id=filters.cleaned_data["team"])
    context = {
        "filter": filters,
        "queues": queues,
        "now": timezone.now(),
        "rows_url": f"{reverse('queue-rows')}?{request.GET.urlencode()}",
    }
    return context, status


@require_GET
def queue_list(request: AuthenticatedHttpRequest) -> HttpResponse:
    context, status = _queue_list_context(request)
    return render(request, "scheduler/queue_list.html", context, status=status)


@require_GET
def queue_rows(request: AuthenticatedHttpRequest) -> HttpResponse:
    """The queue list's table body alone: polled while its tab is visible, as the job list is."""
    context, status = _queue_list_context(request)
    return render(request, "scheduler/_queue_rows.html", context, status=status)


@require_GET
def queue_detail(request: AuthenticatedHttpRequest, pk: int) -> HttpResponse:
    return render(request, "scheduler/queue_detail.html", queue_context(request, pk))


@require_GET
def queue_state(request: AuthenticatedHttpRequest, pk: int) -> HttpResponse:
    """The queue page's usage and jobs alone (``?jobs_only=1``: the jobs alone): polled while its tab is
    visible, as the job list is."""
    context = queue_context(request, pk, jobs_only=bool(request.GET.get("jobs_only")))
    return render(request, "scheduler/_queue_state.html", context)
