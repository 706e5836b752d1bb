"""The rollout controller: one model version to one device group, in phases (docs/devices.md#rollouts).

1. **Start** (``start_rollout``): the version must be stored and the team's, the group must have devices and
   no other rollout under way (running or paused). Phase 0 is assigned at once.
2. **Assign** a phase (``_assign``): a canary of N devices, or the devices that bring the share targeted up to
   a cumulative percentage of the group. Online devices first, spread across hardware kinds (round robin over
   ``hardware.accelerator``), then by name. A targeted device gets the version as its desired state (its
   revision moves, so its long poll answers) and a ``DeviceDeployment`` remembering what it ran before.
   Offline devices are targeted too: their desired state waits for them (they catch up when back).
3. **Judge** each report (``judge``, called in the report's transaction): ``healthy`` on the version marks the
   deployment healthy; ``unhealthy`` or ``checksum_mismatch`` fail it; ``download_failed`` fails it the
   third time. Each failed deployment counts once against the rollout's threshold.
4. **Step** (``_step``, after each report and every 5 s from the beat, ``edge/tasks.py``): at the threshold
   (a count, or a percentage of the devices targeted so far) the rollout pauses, and with automatic rollback
   every device it targeted gets back, as desired state, the version it ran before (none: null); it ends
   ``rolled_back``. Otherwise, when the phase is done the next one is assigned, and after the last the
   rollout completes. A phase is done when each of its devices is healthy or failed, except offline ones,
   which hold it back at most ``offline_grace`` seconds after they were targeted.

Row locks: the rollout first, then devices in primary-key order (``locked``, ``_lock_devices``); a report takes
its device's rollout before the device, so the two never wait on each other in opposite orders.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from django.core.exceptions import ValidationError
from django.db import IntegrityError, transaction
from django.utils import timezone

from common import metrics
from edge.models import (
    DeploymentState,
    Device,
    DeviceDeployment,
    DeviceEvent,
    DeviceGroup,
    Health,
    Rollout,
    RolloutEvent,
    RolloutState,
    Status,
)
from edge.presence import online_since
from registry.models import ModelVersion
from tenancy import policy
from tenancy.actions import audit

if TYPE_CHECKING:
    from datetime import datetime

    from django.contrib.auth.models import User
    from django.http import HttpRequest

DEFAULT_PHASES: list[dict[str, int]] = [{"canary": 1}, {"percent": 50}, {"percent": 100}]
DEFAULT_OFFLINE_GRACE = 600
DOWNLOAD_TRIES = 3
MAX_PHASES = 20


# --- locks --------------------------------------------------------------------------------------------------


@contextmanager
def locked(rollout_id: int | None) -> Iterator[Rollout | None]:
    """The rollout, row-locked, while it is under way (None otherwise). Inside a transaction."""
    rollout = None
    if rollout_id is not None:
        rollout = (
            Rollout.objects.select_for_update()
            .filter(pk=rollout_id, state__in=[RolloutState.RUNNING, RolloutState.PAUSED])
            .first()
        )
    yield rollout


def _lock_devices(ids: list[int]) -> dict[int, Device]:
    return {d.pk: d for d in Device.objects.select_for_update().filter(pk__in=ids).order_by("pk")}


# --- validation ---------------------------------------------------------------------------------------------


def clean_phases(phases: Any) -> list[dict[str, int]]:
    """``[{"canary": 2}, {"percent": 50}, {"percent": 100}]``: a canary first (optional), then rising
    cumulative percentages ending at 100."""
    if phases is None:
        return [dict(p) for p in DEFAULT_PHASES]
    problem = None
    cleaned: list[dict[str, int]] = []
    if not isinstance(phases, list) or not phases or len(phases) > MAX_PHASES:
        problem = f'Give 1 to {MAX_PHASES} phases, e.g. [{{"canary": 1}}, {{"percent": 50}}, {{"percent": 100}}].'
    else:
        last = 0
        for index, phase in enumerate(phases):
            if not isinstance(phase, dict) or len(phase) != 1:
                problem = f'Phase {index + 1}: one of {{"canary": N}} or {{"percent": P}}.'
                break
            ((kind, value),) = phase.items()
            if kind not in ("canary", "percent") or not isinstance(value, int) or isinstance(value, bool):
                problem = f'Phase {index + 1}: one of {{"canary": N}} or {{"percent": P}} with a whole number.'
                break
            if kind == "canary" and (index != 0 or not 1 <= value <= 1000):
                problem = "Only the first phase may be a canary, of 1 to 1000 devices."
                break
            if kind == "percent" and not last < value <= 100:
                problem = f"Phase {index + 1}: percentages rise, each above the last and at most 100."
                break
            last = value if kind == "percent" else last
            cleaned.append({kind: value})
        if problem is None and cleaned[-1].get("percent") != 100:
            problem = "The last phase must reach 100 percent of the group."
    if problem:
        raise ValidationError({"phases": problem})
    return cleaned


# --- people's actions ---------------------------------------------------------------------------------------


def start_rollout(
    actor: User,
    group: DeviceGroup,
    version: ModelVersion,
    *,
    phases: Any = None,
    failure_threshold: int | None = None,
    failure_percent: int | None = None,
    auto_rollback: bool = True,
    offline_grace: int = DEFAULT_OFFLINE_GRACE,
    http: HttpRequest | None = None,
) -> Rollout:
    policy.require(actor, "rollout.start", group)
    errors: dict[str, str] = {}
    try:
        cleaned = clean_phases(phases)
    except ValidationError as error:
        errors.update({k: v[0] for k, v in error.message_dict.items()})
    if version.model.team_id != group.team_id:
        errors["version"] = f"No model version {version.pk} of team {group.team.name}."
    elif not version.stored:
        errors["version"] = f"Version {version} is not in the artifact store; only stored versions roll out."
    if failure_threshold is not None and failure_percent is not None:
        errors["failure_threshold"] = "Give a failure threshold as a count or as a percentage, not both."
    if failure_threshold is not None and failure_threshold < 1:
        errors["failure_threshold"] = "At least 1."
    if failure_percent is not None and not 1 <= failure_percent <= 100:
        errors["failure_percent"] = "Between 1 and 100."
    if not 0 <= offline_grace <= 7 * 24 * 3600:
        errors["offline_grace"] = "Between 0 and 604800 seconds."
    if not group.devices.filter(revoked_at=None).exists():
        errors["group"] = f"Group {group.name} has no devices; enrol some first."
    elif other := Rollout.objects.filter(group=group, state__in=[RolloutState.RUNNING, RolloutState.PAUSED]).first():
        errors["group"] = f"Group {group.name} already has rollout #{other.pk} under way; end it first."
    if errors:
        raise ValidationError(errors)
    if failure_threshold is None and failure_percent is None:
        failure_threshold = 1
    now = timezone.now()
    try:
        with transaction.atomic():
            rollout = Rollout.objects.create(
                team_id=group.team_id,
                group=group,
                version=version,
                phases=cleaned,
                phase_started_at=now,
                failure_threshold=failure_threshold,
                failure_percent=failure_percent,
                auto_rollback=auto_rollback,
                offline_grace=offline_grace,
                created_by=actor,
                created_at=now,
            )
            Rollout.objects.select_for_update().get(pk=rollout.pk)
            _event(rollout, "started", f"{version} to {group.name} in {len(cleaned)} phases", actor, now)
            audit.record(
                "rollout.started",
                actor=actor,
                target=rollout,
                changes={"version": str(version), "group": group.name, "phases": cleaned},
                request=http,
            )
            _assign(rollout, 0, now)
            _step(rollout, now)
    except IntegrityError:  # another rollout started on the group meanwhile
        raise ValidationError({"group": f"Group {group.name} already has a rollout under way."}) from None
    return rollout


def _control(
    actor: User, rollout: Rollout, to: RolloutState, verb: str, reason: str, http: HttpRequest | None
) -> Rollout:
    policy.require(actor, "rollout.control", rollout)
    now = timezone.now()
    with transaction.atomic():
        row: Rollout = Rollout.objects.select_for_update().get(pk=rollout.pk)
        _move(row, to)
        row.reason = reason or row.reason
        _event(row, verb, f"{verb} by {actor.get_username()}" + (f": {reason}" if reason else ""), actor, now)
        audit.record(f"rollout.{verb}", actor=actor, target=row, reason=reason, request=http)
        if to is RolloutState.ROLLED_BACK:
            _roll_back(row, now)
        elif to is RolloutState.CANCELLED:
            row.ended_at = now
        row.save()
        if to is RolloutState.RUNNING:
            row.phase_started_at = max(row.phase_started_at, now - timedelta(seconds=row.offline_grace))
            row.save(update_fields=["phase_started_at"])
            _step(row, now)
    return row


def pause(actor: User, rollout: Rollout, reason: str = "", *, http: HttpRequest | None = None) -> Rollout:
    return _control(actor, rollout, RolloutState.PAUSED, "paused", reason, http)


def resume(actor: User, rollout: Rollout, reason: str = "", *, http: HttpRequest | None = None) -> Rollout:
    return _control(actor, rollout, RolloutState.RUNNING, "resumed", reason, http)


def cancel(actor: User, rollout: Rollout, reason: str = "", *, http: HttpRequest | None = None) -> Rollout:
    """Stop here: no further phase; devices already targeted keep the version."""
    return _control(actor, rollout, RolloutState.CANCELLED, "cancelled", reason, http)


def roll_back(actor: User, rollout: Rollout, reason: str = "", *, http: HttpRequest | None = None) -> Rollout:
    """Every device the rollout targeted gets back what it ran before."""
    return _control(actor, rollout, RolloutState.ROLLED_BACK, "rolled_back", reason, http)


# --- the controller -----------------------------------------------------------------------------------------


def advance(rollout_id: int) -> str:
    """One step of a running rollout under its row lock (the beat's, every 5 s); returns its state."""
    with transaction.atomic(), locked(rollout_id) as rollout:
        if rollout is None:
            return "ended"
        if rollout.state == RolloutState.RUNNING:
            _step(rollout, timezone.now())
        return str(rollout.state)


def judge(rollout: Rollout, device: Device, status: Status, version: ModelVersion | None) -> None:
    """A report of ``device`` under ``rollout`` (both locked), then a step of the rollout."""
    deployment = DeviceDeployment.objects.filter(rollout=rollout, device=device).first()
    if deployment is None or deployment.state in (DeploymentState.FAILED, DeploymentState.ROLLED_BACK):
        return
    about_it = version is not None and version.pk == rollout.version_id
    now = timezone.now()
    before = deployment.state
    failed = False
    if status is Status.HEALTHY and (about_it or device.running_version_id == rollout.version_id):
        deployment.state = DeploymentState.HEALTHY
    elif about_it and status in (Status.UNHEALTHY, Status.CHECKSUM_MISMATCH):
        failed = True
    elif about_it and status is Status.DOWNLOAD_FAILED:
        deployment.failures += 1
        failed = deployment.failures >= DOWNLOAD_TRIES
    elif deployment.state in (DeploymentState.PENDING, DeploymentState.OFFLINE):
        deployment.state = DeploymentState.UPDATING  # back online, on its way
    if failed:
        deployment.state = DeploymentState.FAILED
        rollout.failures += 1
        rollout.save(update_fields=["failures"])
        _event(rollout, "failure", f"{device.name}: {status.label.lower()} ({rollout.failures} failed)", None, now)
    if deployment.state != before or failed or status is Status.DOWNLOAD_FAILED:
        deployment.updated_at = now
        deployment.save()
    if rollout.state == RolloutState.RUNNING:
        _step(rollout, now)


def _step(rollout: Rollout, now: datetime) -> None:
    while rollout.state == RolloutState.RUNNING:
        if _over_threshold(rollout):
            _move(rollout, RolloutState.PAUSED)
            rollout.reason = f"{_devices(rollout.failures)} failed: the failure threshold was reached."
            _event(rollout, "paused", rollout.reason, None, now)
            if rollout.auto_rollback:
                _move(rollout, RolloutState.ROLLED_BACK)
                _roll_back(rollout, now)
                _event(rollout, "rolled_back", "Every updated device gets its previous version back.", None, now)
            rollout.save()
            return
        if not _phase_done(rollout, now):
            return
        if rollout.current_phase + 1 >= len(rollout.phases):
            _move(rollout, RolloutState.COMPLETED)
            rollout.ended_at = now
            rollout.save()
            _event(rollout, "completed", "Every phase is done.", None, now)
            return
        rollout.current_phase += 1
        rollout.phase_started_at = now
        rollout.save()
        _assign(rollout, rollout.current_phase, now)


def _over_threshold(rollout: Rollout) -> bool:
    if rollout.failures == 0:
        return False
    if rollout.failure_threshold is not None and rollout.failures >= rollout.failure_threshold:
        return True
    if rollout.failure_percent is not None:
        targeted = rollout.deployments.count()
        return targeted > 0 and rollout.failures * 100 >= rollout.failure_percent * targeted
    return False


def _phase_done(rollout: Rollout, now: datetime) -> bool:
    seen_after = online_since()
    grace = timedelta(seconds=rollout.offline_grace)
    waiting = rollout.deployments.filter(
        state__in=[DeploymentState.PENDING, DeploymentState.UPDATING, DeploymentState.OFFLINE]
    ).select_related("device")
    for deployment in waiting:
        seen = deployment.device.last_seen_at
        online = seen is not None and seen >= seen_after
        if online or now < max(deployment.targeted_at, rollout.phase_started_at) + grace:
            return False
    return True


def targets(devices: list[Device], already: set[int], phase: dict[str, int], online: set[int]) -> list[Device]:
    """The devices a phase adds (pure: the devices of the group, those targeted already, the phase, which
    are online): online ones first, spread across hardware kinds, then by name."""
    total = len(devices)
    want = len(already) + phase["canary"] if "canary" in phase else math.ceil(phase["percent"] * total / 100)
    need = max(0, min(total, want) - len(already))
    if need == 0:
        return []
    by_kind: dict[tuple[bool, str], list[Device]] = defaultdict(list)
    for device in sorted(devices, key=lambda d: d.name):
        if device.pk not in already:
            kind = str((device.hardware or {}).get("accelerator", ""))
            by_kind[(device.pk not in online, kind)].append(device)
    chosen: list[Device] = []
    for offline in (False, True):
        queues = [q for (off, _), q in sorted(by_kind.items()) if off == offline]
        while queues and len(chosen) < need:
            for queue in list(queues):
                if len(chosen) == need:
                    break
                chosen.append(queue.pop(0))
                if not queue:
                    queues.remove(queue)
    return chosen


def _assign(rollout: Rollout, index: int, now: datetime) -> None:
    devices = list(Device.objects.filter(group_id=rollout.group_id, revoked_at=None))
    seen_after = online_since()
    online = {d.pk for d in devices if d.last_seen_at is not None and d.last_seen_at >= seen_after}
    already = set(rollout.deployments.values_list("device_id", flat=True))
    chosen = targets(devices, already, rollout.phases[index], online)
    locked_devices = _lock_devices(sorted(d.pk for d in chosen))
    for pk in sorted(locked_devices):
        device = locked_devices[pk]
        if device.running_version_id == rollout.version_id and device.health == Health.OK:
            state = DeploymentState.HEALTHY
        else:
            state = DeploymentState.UPDATING if pk in online else DeploymentState.OFFLINE
        DeviceDeployment.objects.create(
            rollout=rollout,
            device=device,
            phase=index,
            from_version_id=device.running_version_id,
            state=state,
            targeted_at=now,
            updated_at=now,
        )
        _set_desired(device, rollout.version_id, rollout)
        DeviceEvent.objects.create(
            device=device, at=now, status="targeted", version_id=rollout.version_id, detail=f"rollout #{rollout.pk}"
        )
    names = ", ".join(sorted(d.name for d in chosen)[:5]) + ("…" if len(chosen) > 5 else "")
    _event(rollout, "phase", f"Phase {index + 1} ({_phase_words(rollout.phases[index])}): {_devices(len(chosen))}"
           + (f" ({names})" if chosen else ""), None, now)  # fmt: skip


def _set_desired(device: Device, version_id: int | None, rollout: Rollout | None) -> None:
    device.desired_version_id = version_id
    device.desired_rollout = rollout
    device.revision += 1
    device.save(update_fields=["desired_version", "desired_rollout", "revision"])


def _roll_back(rollout: Rollout, now: datetime) -> None:
    deployments = list(rollout.deployments.exclude(state=DeploymentState.ROLLED_BACK))
    devices = _lock_devices(sorted(d.device_id for d in deployments))
    for deployment in deployments:
        device = devices[deployment.device_id]
        if device.desired_rollout_id == rollout.pk and device.desired_version_id == rollout.version_id:
            _set_desired(device, deployment.from_version_id, rollout)
            DeviceEvent.objects.create(
                device=device,
                at=now,
                status="rollback",
                version_id=deployment.from_version_id,
                detail=f"rollout #{rollout.pk} rolled back",
            )
        if deployment.state != DeploymentState.FAILED:
            deployment.state = DeploymentState.ROLLED_BACK
            deployment.updated_at = now
            deployment.save(update_fields=["state", "updated_at"])
    rollout.ended_at = now


def _move(rollout: Rollout, to: RolloutState) -> None:
    state = RolloutState(rollout.state)
    if not state.can_become(to):
        raise ValidationError(
            {"state": f"Rollout #{rollout.pk} is {state.label.lower()}; it cannot be {to.label.lower()}."}
        )
    rollout.state = to
    transaction.on_commit(metrics.EDGE_ROLLOUT_MOVES.labels(str(to.value)).inc)


def _event(rollout: Rollout, kind: str, message: str, actor: User | None, at: datetime) -> None:
    RolloutEvent.objects.create(rollout=rollout, at=at, kind=kind, message=message[:500], actor=actor)


def _phase_words(phase: dict[str, int]) -> str:
    return f"canary of {phase['canary']}" if "canary" in phase else f"{phase['percent']}%"


def phase_words(phase: dict[str, int]) -> str:
    """A phase in words: "canary of 2", "50%"."""
    return _phase_words(phase)


def _devices(count: int) -> str:
    return f"{count} device{'' if count == 1 else 's'}"
