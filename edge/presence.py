"""Whether a device is online: seen within ``ONLINE_POLLS`` of its polls (``EDGE_POLL_SECONDS``, default 10 s).

A device long-polling for its desired state is seen at the start of each poll and every poll interval while
it waits (``edge/api/device.py``), so one in a long poll stays online.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from django.conf import settings
from django.utils import timezone

from edge.models import Device

#: Seconds between a device's polls, told to it with its desired state.
POLL_SECONDS = 10
#: A device is online when it was last seen within this many polls.
ONLINE_POLLS = 3


def poll_seconds() -> int:
    return int(getattr(settings, "EDGE_POLL_SECONDS", POLL_SECONDS))


def online_since() -> datetime:
    """Devices seen after this moment are online."""
    return timezone.now() - timedelta(seconds=ONLINE_POLLS * poll_seconds())


def is_online(device: Device) -> bool:
    return device.last_seen_at is not None and device.last_seen_at >= online_since()
