"""The array page: one array's tasks counted by state, the failed ones first, with cancel and requeue of its
failed tasks for its owner, its team's lead and admins (docs/jobs.md §Arrays and sweeps).

Thin: the array is looked up through ``JobArray.objects.for_user`` (another team's array is a 404), changes go
through ``scheduler/actions/arrays.py``.
"""

from __future__ import annotations

from http import HTTPStatus
from typing import Any

from django.contrib import messages
from django.core.exceptions import ValidationError
from django.core.paginator import Paginator
from django.http import HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.http import require_GET, require_POST

from common.types import AuthenticatedHttpRequest
from scheduler.actions import arrays
from scheduler.models import Job, JobArray
from scheduler.queues import REASON_LABELS
from scheduler.web.forms import CancelForm
from tenancy import policy
from tenancy.scoping import Action

TASKS_PER_PAGE = 50


def _visible_array(request: AuthenticatedHttpRequest, pk: int) -> JobArray:
    found = JobArray.objects.for_user(request.user, Action.VIEW).select_related("team__organization", "submitted_by")
    array: JobArray = get_object_or_404(found, pk=pk)
    return array


def _render(request: AuthenticatedHttpRequest, array: JobArray, status: int = 200, **extra: Any) -> HttpResponse:
    summary = arrays.summary(array)
    page = Paginator(arrays.tasks_in_order(array), TASKS_PER_PAGE).get_page(request.GET.get("page"))
    offers = policy.granted(request.user, array, "array.cancel", "array.requeue")
    active = sum(
        n
        for state, n in summary.counts.items()
        if state not in (Job.State.SUCCEEDED, Job.State.FAILED, Job.State.CANCELLED)
    )
    context = {
        "array": array,
        "summary": summary,
        "counts": [(Job.State(state).label, state, n) for state, n in summary.counts.items()],
        "page": page,
        "rows": [(task, REASON_LABELS.get(task.pending_reason, "")) for task in page],
        "may_cancel": "array.cancel" in offers and active > 0,
        "may_requeue": "array.requeue" in offers and summary.failed > 0,
        "cancel_form": extra.get("cancel_form") or CancelForm(),
        "error": extra.get("error", ""),
    }
    return render(request, "scheduler/array_detail.html", context, status=status)


@require_GET
def array_detail(request: AuthenticatedHttpRequest, pk: int) -> HttpResponse:
    return _render(request, _visible_array(request, pk))


@require_POST
def array_cancel(request: AuthenticatedHttpRequest, pk: int) -> HttpResponse:
    array = _visible_array(request, pk)
    form = CancelForm(request.POST)
    if form.is_valid():
        try:
            count = arrays.cancel_array(request.user, array, form.cleaned_data["reason"], http=request)
        except ValidationError as exc:
            form.add_error(None, " ".join(exc.messages))
        else:
            messages.success(request, f"Cancelled {count} task{'s' if count != 1 else ''} of array #{array.pk}.")
            return redirect("array-detail", pk=array.pk)
    return _render(request, array, HTTPStatus.BAD_REQUEST, cancel_form=form)


@require_POST
def array_requeue(request: AuthenticatedHttpRequest, pk: int) -> HttpResponse:
    array = _visible_array(request, pk)
    try:
        count = arrays.requeue_failed(request.user, array, http=request)
    except ValidationError as exc:
        return _render(request, array, HTTPStatus.BAD_REQUEST, error=" ".join(exc.messages))
    messages.success(request, f"Requeued {count} failed task{'s' if count != 1 else ''} of array #{array.pk}.")
    return redirect("array-detail", pk=array.pk)
