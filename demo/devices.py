"""The demo's edge devices: robotics' device groups ``lab-robots`` and ``warehouse-arms``, and the real device
agents (``deploy/edge_agent.py``) that ``manage.py demo_devices`` runs against the demo's web server, so the
Devices and Rollouts pages show a live fleet (docs/devices.md).

Each demo device has a state directory ``<VAR_DIR>/demo-devices/<name>`` (the agent's credential, state and
models). A device that has no credential there yet, or whose credential the portal no longer knows (a new
database) or has revoked, gets a one-time enrolment token, issued by the demo admin and kept in
``<VAR_DIR>/demo-devices/tokens/<name>`` until the agent has used it; the agent enrols with it on its next
start and keeps its credential after. Seeding issues the tokens of the default fleet; ``demo_devices``
issues those of any device beyond it.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

from django.conf import settings
from django.contrib.auth import get_user_model
from django.db import transaction
from django.utils import timezone

from edge.actions import devices as edge
from edge.models import Device, DeviceGroup, EnrolmentToken
from tenancy.models import Organization, Team

TEAM = "robotics"
#: The groups: name -> (kind, description, the share of the demo's devices in it, the names' stem).
GROUPS = {
    "lab-robots": (DeviceGroup.Kind.LAB, "The manipulation lab's arms on the bench.", 2 / 3, "robot"),
    "warehouse-arms": (DeviceGroup.Kind.SITE, "Picking arms at the warehouse pilot.", 1 / 3, "arm"),
}
DEFAULT_DEVICES = 6
#: Who issues the tokens: the demo's admin (robotics has no lead among the demo users).
ISSUER = "adam"
TOKEN_HOURS = 24 * 30


def root() -> Path:
    return settings.VAR_DIR / "demo-devices"


def state_dir(name: str) -> Path:
    return root() / name


def _token_file(name: str) -> Path:
    return root() / "tokens" / name


def fleet(count: int) -> list[tuple[str, str]]:
    """The demo's first ``count`` devices as (name, group): two of three in the lab, the rest at the warehouse."""
    in_lab = math.ceil(count * GROUPS["lab-robots"][2])
    return [(f"robot-{i + 1:02d}", "lab-robots") for i in range(in_lab)] + [
        (f"arm-{i + 1:02d}", "warehouse-arms") for i in range(count - in_lab)
    ]


def seed_groups(org: Organization) -> dict[str, DeviceGroup]:
    """The device groups (idempotent)."""
    team = Team.objects.get(organization=org, slug=TEAM)
    admin = get_user_model().objects.get(username=ISSUER)
    groups = {}
    for name, (kind, description, _share, _stem) in GROUPS.items():
        groups[name] = DeviceGroup.objects.filter(team=team, name=name).first() or edge.create_group(
            admin, team, name=name, kind=kind, description=description
        )
    return groups


def _enrolled(name: str, team: Team) -> bool:
    """Whether the agent in ``name``'s directory holds a credential of a device the portal knows, not revoked."""
    try:
        saved = json.loads((state_dir(name) / "credential.json").read_text())
    except (OSError, ValueError):
        return False
    return Device.objects.filter(pk=saved.get("device"), team=team, name=name, revoked_at=None).exists()


def _pending(name: str) -> str:
    """The device's stored token, while the portal still takes it (unused, not expired); else ""."""
    try:
        saved = json.loads(_token_file(name).read_text())
    except (OSError, ValueError):
        return ""
    usable = EnrolmentToken.objects.filter(pk=saved.get("id"), used_at=None, expires_at__gt=timezone.now())
    return str(saved.get("token", "")) if usable.exists() else ""


def enrolment_tokens(org: Organization, count: int = DEFAULT_DEVICES) -> dict[str, str]:
    """The token each of the first ``count`` devices should start with ("" for one already enrolled), issuing
    those missing (idempotent: a stored token the portal still takes is kept)."""
    groups = seed_groups(org)
    team = Team.objects.get(organization=org, slug=TEAM)
    admin = get_user_model().objects.get(username=ISSUER)
    tokens = {}
    for name, group in fleet(count):
        if _enrolled(name, team):
            tokens[name] = ""
            continue
        tokens[name] = _pending(name)
        if tokens[name]:
            continue
        with transaction.atomic():
            row, raw = edge.issue_enrolment_token(admin, groups[group], hours=TOKEN_HOURS)
        path = _token_file(name)
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        path.write_text(json.dumps({"id": row.pk, "token": raw}))
        path.chmod(0o600)
        tokens[name] = raw
    return tokens


def agent_command(python: str, server: str, name: str, token: str, poll_wait: int) -> list[str]:
    """The agent's command line for device ``name`` (a token only while it is not enrolled)."""
    directory = state_dir(name)
    directory.mkdir(parents=True, exist_ok=True, mode=0o700)
    argv = [
        python,
        str(settings.BASE_DIR / "deploy" / "edge_agent.py"),
        "--server",
        server,
        "--state-dir",
        str(directory),
        "--name",
        name,
        "--poll-wait",
        str(poll_wait),
        "--backoff-max",
        "20",
    ]
    return [*argv, "--enrol-token", token] if token else argv
