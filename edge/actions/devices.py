"""Actions on devices: groups, enrolment tokens, enrolment, revocation, and what a device tells the portal
(docs/devices.md).

People's actions (``create_group``, ``issue_enrolment_token``, ``revoke_device``) are authorized through the
policy and audited. The device's own (``enrol``, ``touch``, ``record_report``) are authorized by what it
holds: a one-time token, then its credential (``edge/api/device.py`` checks it). A report is judged by the
rollout that targeted the device, in the same transaction (``edge/actions/rollouts.py``).
"""

from __future__ import annotations

import hmac
from dataclasses import dataclass
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from django.core.exceptions import ValidationError
from django.db import IntegrityError, transaction
from django.utils import timezone

from edge.actions import rollouts
from edge.models import Device, DeviceEvent, DeviceGroup, EnrolmentToken, Health, Status
from edge.presence import poll_seconds
from registry.models import ModelVersion
from tenancy import policy
from tenancy.actions import audit
from tenancy.models import Team, hash_token

if TYPE_CHECKING:
    from django.contrib.auth.models import User
    from django.http import HttpRequest

TOKEN_HOURS_DEFAULT = 24
TOKEN_HOURS_MAX = 24 * 30


# --- people's actions ---------------------------------------------------------------------------------------


def create_group(
    actor: User, team: Team, *, name: str, kind: str = DeviceGroup.Kind.SITE, description: str = ""
) -> DeviceGroup:
    policy.require(actor, "device.group.create", team)
    name = (name or "").strip()
    errors: dict[str, str] = {}
    if not name:
        errors["name"] = "Name the group (a lab, a site, a robot type)."
    elif len(name) > 100:
        errors["name"] = "At most 100 characters."
    if kind not in DeviceGroup.Kind.values:
        errors["kind"] = f"{kind!r} is not a kind of group; use one of {', '.join(DeviceGroup.Kind.values)}."
    if errors:
        raise ValidationError(errors)
    try:
        with transaction.atomic():
            group = DeviceGroup.objects.create(team=team, name=name, kind=kind, description=description)
            audit.record("device_group.created", actor=actor, target=group, changes={"name": name, "kind": kind})
    except IntegrityError:
        raise ValidationError({"name": f"Team {team.name} already has a device group named {name!r}."}) from None
    return group


def issue_enrolment_token(
    actor: User,
    group: DeviceGroup,
    *,
    hours: int | None = None,
    device: Device | None = None,
    http: HttpRequest | None = None,
) -> tuple[EnrolmentToken, str]:
    """A single-use token for one device to join ``group``; returns the row and the raw token (shown once).
    With ``device``, the token re-enrols that device only (in its own group): the one way back for a revoked
    device, and so the lead's explicit act of restoring it, audited as such."""
    if device is not None:
        group = device.group
    policy.require(actor, "device.token.issue", group)
    hours = TOKEN_HOURS_DEFAULT if hours is None else hours
    if not 1 <= hours <= TOKEN_HOURS_MAX:
        raise ValidationError({"hours": f"Between 1 and {TOKEN_HOURS_MAX} hours."})
    raw, key_hash, hint = EnrolmentToken.generate()
    with transaction.atomic():
        token = EnrolmentToken.objects.create(
            team_id=group.team_id,
            group=group,
            device=device,
            key_hash=key_hash,
            hint=hint,
            expires_at=timezone.now() + timedelta(hours=hours),
            created_by=actor,
        )
        changes: dict[str, Any] = {"token": hint, "expires_at": token.expires_at.isoformat()}
        if device is not None:
            changes.update(device=device.name, revoked=device.revoked_at is not None)
        audit.record(
            "device.token_issued" if device is None else "device.reenrolment_allowed",
            actor=actor,
            target=group if device is None else device,
            changes=changes,
            request=http,
        )
    return token, raw


def revoke_device(actor: User, device: Device, *, http: HttpRequest | None = None) -> Device:
    """The device's credential stops working at once; its history stays. Twice is harmless."""
    policy.require(actor, "device.revoke", device)
    now = timezone.now()
    with transaction.atomic():
        if Device.objects.filter(pk=device.pk, revoked_at=None).update(revoked_at=now):
            device.revoked_at = now
            DeviceEvent.objects.create(device=device, at=now, status="revoked", detail=f"by {actor.get_username()}")
            audit.record("device.revoked", actor=actor, target=device, changes={"name": device.name}, request=http)
    return device


# --- the device's own ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Enrolment:
    device: Device
    credential: str


def enrol(token: str, name: str, hardware: dict[str, Any], software: dict[str, Any]) -> Enrolment:
    """Join with a one-time token: a new device, or (same name in the team) the same device with a new
    credential, its history kept (a re-imaged robot)."""
    now = timezone.now()
    raw, credential_hash, prefix = Device.generate()
    with transaction.atomic():
        row = EnrolmentToken.objects.select_for_update().filter(key_hash=hash_token(token or "")).first()
        if row is None:
            raise ValidationError({"token": "Unknown enrolment token."})
        if row.used_at is not None:
            raise ValidationError({"token": "This enrolment token was already used; ask for a new one."})
        if row.expires_at <= now:
            raise ValidationError({"token": "This enrolment token has expired; ask for a new one."})
        device = Device.objects.select_for_update().filter(team_id=row.team_id, name=name).first()
        _may_enrol(row, device, name)
        if device is None:
            device = Device.objects.create(
                team_id=row.team_id,
                group_id=row.group_id,
                name=name,
                credential_hash=credential_hash,
                credential_prefix=prefix,
                hardware=hardware,
                software=software,
                enrolled_at=now,
                last_seen_at=now,
            )
            what = "enrolled"
        else:
            restored = device.revoked_at is not None
            device.credential_hash, device.credential_prefix = credential_hash, prefix
            device.hardware, device.software = hardware or device.hardware, software or device.software
            device.enrolled_at, device.last_seen_at, device.revoked_at = now, now, None
            device.save()
            what = "re-enrolled"
            audit.record(
                "device.reenrolled",
                actor=None,
                target=device,
                organization=device.team.organization,
                changes={"name": device.name, "token": row.hint, "restored": restored},
            )
        row.used_at, row.used_by = now, device
        row.save(update_fields=["used_at", "used_by"])
        DeviceEvent.objects.create(device=device, at=now, status=what, detail=f"token {row.hint}…")
    return Enrolment(device, raw)


def _may_enrol(row: EnrolmentToken, device: Device | None, name: str) -> None:
    """Whether ``row`` may enrol the device ``name`` (``device``, when the team has one of that name). A token
    issued for a device enrols that one only; a group's token enrols a new device, or re-enrols one of its own
    group that is not revoked: never another group's device (it would move it), never a revoked one (a lead
    restores it by issuing a token for it)."""
    if row.device_id is not None:
        if device is None or device.pk != row.device_id:
            raise ValidationError({"name": "This enrolment token is for another device."})
        return
    if device is None:
        return
    if device.revoked_at is not None:
        raise ValidationError(
            {"name": f"Device {name} was revoked: a lead of its team re-enrols it by issuing a token for it."}
        )
    if device.group_id != row.group_id:
        raise ValidationError(
            {"name": f"Device {name} is in another group: re-enrol it with a token of its group or issued for it."}
        )


def authenticate(credential: str) -> Device | None:
    """The device holding ``credential`` (not revoked), or None. The lookup is by the credential's prefix and
    the hash is compared in constant time."""
    if not credential.startswith(Device.PREFIX):
        return None
    digest = hash_token(credential)
    prefix = credential[: len(Device.PREFIX) + 6]
    candidates: list[Device] = list(Device.objects.filter(credential_prefix=prefix, revoked_at=None))
    return next((d for d in candidates if hmac.compare_digest(d.credential_hash, digest)), None)


def touch(device: Device) -> None:
    """A heartbeat: the device was seen now (at most one write a second)."""
    now = timezone.now()
    if device.last_seen_at is None or now - device.last_seen_at >= timedelta(seconds=1):
        Device.objects.filter(pk=device.pk).update(last_seen_at=now)
        device.last_seen_at = now


def desired(device: Device) -> dict[str, Any]:
    """The protocol's answer to ``GET desired``."""
    version = device.desired_version
    body: dict[str, Any] = {"revision": device.revision_tag, "desired": None, "rollout": device.desired_rollout_id}
    if version is not None:
        body["desired"] = {
            "model": version.model.name,
            "version_id": version.pk,
            "version": version.version,
            "sha256": version.sha256,
            "size_bytes": version.size_bytes,
            "url": f"/api/v1/edge/artifacts/{version.pk}",
        }
    body["poll_seconds"] = poll_seconds()
    return body


def current(device_id: int) -> Device:
    device: Device = Device.objects.select_related("desired_version__model").get(pk=device_id)
    return device


def may_download(device: Device, version_id: int) -> ModelVersion | None:
    """The version, if ``device`` may fetch its bytes: its desired one, one it runs or ran, or one a rollout
    gave it (for a rollback); a stored version of its own team."""
    wanted = {device.desired_version_id, device.running_version_id, device.previous_version_id}
    if version_id not in wanted and not device.deployments.filter(from_version_id=version_id).exists():
        return None
    version: ModelVersion | None = (
        ModelVersion.objects.select_related("model__team")
        .filter(pk=version_id, stored=True, model__team_id=device.team_id)
        .first()
    )
    return version


def _version(device: Device, value: Any, field: str) -> ModelVersion | None:
    if value is None:
        return None
    version: ModelVersion | None = ModelVersion.objects.filter(pk=value, model__team_id=device.team_id).first()
    if version is None:
        raise ValidationError({field: f"No model version {value} of team {device.team.name}."})
    return version


def record_report(device: Device, report: dict[str, Any]) -> Device:
    """What the device says (validated in shape by the API): its state, what it runs, how it is; judged by
    the rollout that targeted it. Returns the device as it is now."""
    status = Status(report["status"])
    running: dict[str, Any] = report.get("running") or {}
    previous: dict[str, Any] = report.get("previous") or {}
    version = _version(device, report.get("version_id"), "version_id")
    running_version = _version(device, running.get("version_id"), "running.version_id")
    previous_version = _version(device, previous.get("version_id"), "previous.version_id")
    if running_version is not None and running.get("sha256") not in (None, running_version.sha256):
        raise ValidationError({"running.sha256": "Not the SHA-256 of the version named in running.version_id."})
    now = timezone.now()
    detail = (report.get("detail") or "")[:500]
    # Locks in the one order: the rollout first (rollouts.locked), then the device.
    with transaction.atomic(), rollouts.locked(device.desired_rollout_id) as rollout:
        device = Device.objects.select_for_update().get(pk=device.pk)
        changed = (status.value, version and version.pk) != (device.last_status, _last_version(device))
        device.last_seen_at, device.last_status, device.last_detail = now, status.value, detail
        if "running" in report:
            device.running_version = running_version
        if "previous" in report:
            device.previous_version = previous_version
        for field in ("hardware", "software", "connectivity"):
            if report.get(field):
                setattr(device, field, report[field])
        if status.failing:
            device.health = Health.FAILING
        elif status in (Status.HEALTHY, Status.IDLE, Status.ROLLED_BACK):
            device.health = Health.OK
        device.save()
        if changed or status.failing:
            DeviceEvent.objects.create(device=device, at=now, status=status.value, version=version, detail=detail)
        if rollout is not None and rollout.pk == device.desired_rollout_id:
            rollouts.judge(rollout, device, status, version)
    return device


def _last_version(device: Device) -> int | None:
    last = device.events.exclude(status__in=["enrolled", "re-enrolled", "revoked"]).first()
    return last.version_id if last else None
