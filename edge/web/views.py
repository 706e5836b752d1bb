"""The edge pages: the fleet (``/devices/``: each device's group, whether it is online, when last seen, what it
runs, its health; counts per state at the top; filter by group), a device (hardware, software, connectivity,
history), issuing an enrolment token (shown once), rollouts (list, start, one rollout's phases with device
counts by state, failures against the threshold, its timeline, and the buttons to pause, resume, cancel or
roll back).

Thin: rows come from ``for_user`` (another team's device or rollout is a 404), changes go through
``edge/actions/devices.py`` and ``edge/actions/rollouts.py`` (403 where the policy refuses, 400 with the form's errors).
"""

from __future__ import annotations

import json
from collections import Counter
from http import HTTPStatus
from typing import Any

from django.contrib import messages
from django.core.exceptions import ValidationError
from django.http import Http404, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.http import require_POST

from common.types import AuthenticatedHttpRequest
from edge import presence
from edge.actions import devices, rollouts
from edge.models import Device, DeviceGroup, Rollout
from registry.models import ModelVersion
from tenancy import policy
from tenancy.scoping import Action

HISTORY = 50


def _id(value: str | None) -> int | None:
    return int(value) if value and value.isdigit() else None


def fleet(request: AuthenticatedHttpRequest) -> HttpResponse:
    groups = DeviceGroup.objects.for_user(request.user, Action.VIEW).select_related("team").order_by("name")
    rows = Device.objects.for_user(request.user, Action.VIEW).select_related("group", "running_version__model")
    group = _id(request.GET.get("group"))
    if group is not None:
        rows = rows.filter(group_id=group)
    listed = []
    counts: Counter[str] = Counter()
    since = presence.online_since()
    for device in rows.filter(revoked_at=None).order_by("name"):
        online = device.last_seen_at is not None and device.last_seen_at >= since
        counts["online" if online else "offline"] += 1
        counts[device.health] += 1
        listed.append((device, online))
    issuable = [g for g in groups if policy.can(request.user, "device.token.issue", g)]
    return render(
        request,
        "edge/fleet.html",
        {"devices": listed, "counts": counts, "groups": groups, "group": group, "issuable": issuable},
    )


def _device(request: AuthenticatedHttpRequest, pk: int) -> Device:
    rows = Device.objects.for_user(request.user, Action.VIEW).select_related(
        "group", "running_version__model", "previous_version__model", "desired_version__model"
    )
    device: Device = get_object_or_404(rows, pk=pk)
    return device


def device_detail(request: AuthenticatedHttpRequest, pk: int) -> HttpResponse:
    device = _device(request, pk)
    history = device.events.select_related("version__model")[:HISTORY]
    return render(
        request,
        "edge/device.html",
        {
            "device": device,
            "online": presence.is_online(device),
            "history": history,
            "can_revoke": policy.can(request.user, "device.revoke", device) and device.revoked_at is None,
            "can_reenrol": policy.can(request.user, "device.token.issue", device.group),
        },
    )


@require_POST
def device_reenrol(request: AuthenticatedHttpRequest, pk: int) -> HttpResponse:
    """A token that re-enrols this device only (a re-imaged robot; a revoked one, restored)."""
    device = _device(request, pk)
    token, raw = devices.issue_enrolment_token(request.user, device.group, device=device, http=request)
    return render(request, "edge/token_new.html", {"token": token, "raw": raw, "groups": [], "errors": {}})


@require_POST
def device_revoke(request: AuthenticatedHttpRequest, pk: int) -> HttpResponse:
    device = _device(request, pk)
    devices.revoke_device(request.user, device, http=request)
    messages.success(request, f"{device.name}'s credential is revoked.")
    return redirect("device-detail", pk=device.pk)


def token_new(request: AuthenticatedHttpRequest) -> HttpResponse:
    visible = list(DeviceGroup.objects.for_user(request.user, Action.VIEW).select_related("team").order_by("name"))
    groups = [g for g in visible if policy.can(request.user, "device.token.issue", g)]
    context: dict[str, Any] = {"groups": groups, "errors": {}, "raw": None}
    status = HTTPStatus.OK
    if request.method == "POST":
        chosen = next((g for g in visible if g.pk == _id(request.POST.get("group"))), None)
        hours = request.POST.get("hours") or "24"
        try:
            if chosen is None:
                raise ValidationError({"group": "Choose one of your device groups."})
            policy.require(request.user, "device.token.issue", chosen)
            if not hours.isdigit():
                raise ValidationError({"hours": "A whole number of hours."})
            token, context["raw"] = devices.issue_enrolment_token(request.user, chosen, hours=int(hours), http=request)
            context["token"] = token
        except ValidationError as error:
            context["errors"] = {k: " ".join(v) for k, v in error.message_dict.items()}
            status = HTTPStatus.BAD_REQUEST
    return render(request, "edge/token_new.html", context, status=status)


def rollout_list(request: AuthenticatedHttpRequest) -> HttpResponse:
    rows = Rollout.objects.for_user(request.user, Action.VIEW).select_related("group", "version__model")
    return render(request, "edge/rollouts.html", {"rollouts": rows.order_by("-created_at")[:200]})


def rollout_new(request: AuthenticatedHttpRequest) -> HttpResponse:
    source = request.POST if request.method == "POST" else request.GET
    visible = list(DeviceGroup.objects.for_user(request.user, Action.VIEW).order_by("name"))
    groups = [g for g in visible if policy.can(request.user, "rollout.start", g)]
    versions = ModelVersion.objects.for_user(request.user, Action.VIEW).filter(stored=True).select_related("model")
    context: dict[str, Any] = {
        "groups": groups,
        "versions": versions.order_by("model__name", "-published_at")[:200],
        "group": _id(source.get("group")),
        "version": _id(source.get("version")),
        "values": source,
        # what the phases field shows until one types others (escaped by the template like any value)
        "phases": source.get("phases") or json.dumps(rollouts.DEFAULT_PHASES),
        "errors": {},
    }
    status = HTTPStatus.OK
    if request.method == "POST":
        try:
            rollout = _start(request, visible, versions)
        except ValidationError as error:
            context["errors"] = {k: " ".join(v) for k, v in error.message_dict.items()}
            status = HTTPStatus.BAD_REQUEST
        else:
            messages.success(request, f"Rollout #{rollout.pk} started.")
            return redirect("rollout-detail", pk=rollout.pk)
    return render(request, "edge/rollout_new.html", context, status=status)


def _start(request: AuthenticatedHttpRequest, groups: list[DeviceGroup], versions: Any) -> Rollout:
    data = request.POST
    group = next((g for g in groups if g.pk == _id(data.get("group"))), None)
    version = versions.filter(pk=_id(data.get("version"))).first()
    errors = {}
    if group is None:
        errors["group"] = "Choose one of your device groups."
    else:
        policy.require(request.user, "rollout.start", group)  # 403 before the rest is judged
    if version is None:
        errors["version"] = "Choose a stored model version."
    phases: Any = None
    if data.get("phases", "").strip():
        try:
            phases = json.loads(data["phases"])
        except ValueError:
            errors["phases"] = 'JSON, e.g. [{"canary": 1}, {"percent": 50}, {"percent": 100}].'
    numbers: dict[str, int | None] = {}
    for field in ("failure_threshold", "failure_percent", "offline_grace"):
        raw = data.get(field, "").strip()
        if raw and not raw.isdigit():
            errors[field] = "A whole number."
        numbers[field] = int(raw) if raw.isdigit() else None
    if errors or group is None or version is None:
        raise ValidationError(errors)
    return rollouts.start_rollout(
        request.user,
        group,
        version,
        phases=phases,
        failure_threshold=numbers["failure_threshold"],
        failure_percent=numbers["failure_percent"],
        auto_rollback=data.get("auto_rollback") == "on",
        offline_grace=numbers["offline_grace"]
        if numbers["offline_grace"] is not None
        else rollouts.DEFAULT_OFFLINE_GRACE,
        http=request,
    )


def _rollout(request: AuthenticatedHttpRequest, pk: int) -> Rollout:
    rows = Rollout.objects.for_user(request.user, Action.VIEW).select_related("group", "version__model")
    rollout: Rollout = get_object_or_404(rows, pk=pk)
    return rollout


def rollout_detail(request: AuthenticatedHttpRequest, pk: int) -> HttpResponse:
    rollout = _rollout(request, pk)
    deployments = list(rollout.deployments.select_related("device", "from_version"))
    phases = []
    for index, phase in enumerate(rollout.phases):
        states = Counter(d.state for d in deployments if d.phase == index)
        phases.append({"number": index + 1, "words": rollouts.phase_words(phase), "states": dict(states),
                       "current": index == rollout.current_phase and rollout.state == "running"})  # fmt: skip
    threshold = (
        f"{rollout.failure_threshold} devices"
        if rollout.failure_threshold is not None
        else f"{rollout.failure_percent}% of those targeted"
    )
    state = Rollout.State(rollout.state)
    can = policy.can(request.user, "rollout.control", rollout)
    verbs = [v for v, to in VERBS.items() if can and state.can_become(to)]
    return render(
        request,
        "edge/rollout.html",
        {
            "rollout": rollout,
            "phases": phases,
            "deployments": deployments,
            "threshold": threshold,
            "events": rollout.events.select_related("actor"),
            "verbs": verbs,
        },
    )


VERBS = {
    "pause": Rollout.State.PAUSED,
    "resume": Rollout.State.RUNNING,
    "cancel": Rollout.State.CANCELLED,
    "rollback": Rollout.State.ROLLED_BACK,
}
ACTIONS = {
    "pause": rollouts.pause,
    "resume": rollouts.resume,
    "cancel": rollouts.cancel,
    "rollback": rollouts.roll_back,
}


@require_POST
def rollout_control(request: AuthenticatedHttpRequest, pk: int, verb: str) -> HttpResponse:
    if verb not in ACTIONS:
        raise Http404
    rollout = _rollout(request, pk)
    try:
        ACTIONS[verb](request.user, rollout, (request.POST.get("reason") or "")[:500], http=request)
    except ValidationError as error:
        messages.error(request, " ".join(error.messages))
        return redirect("rollout-detail", pk=rollout.pk)
    messages.success(request, f"Rollout #{rollout.pk}: {verb} done.")
    return redirect("rollout-detail", pk=rollout.pk)
