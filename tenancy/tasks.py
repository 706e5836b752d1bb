"""Periodic housekeeping of the portal. Tasks take ids (or nothing) and are safe to run twice."""

from __future__ import annotations

import socket
from datetime import datetime
from typing import Any

from celery import shared_task
from django.core.cache import cache
from django.utils import timezone

from tenancy import actions
from tenancy.actions import identity

HEARTBEAT_CACHE_KEY = "qm:worker-heartbeat"


@shared_task
def record_heartbeat() -> str:
    """Proof that a worker and beat are running; the home page shows when it was last seen."""
    now = timezone.now()
    cache.set(HEARTBEAT_CACHE_KEY, {"at": now, "host": socket.gethostname()}, timeout=None)
    return now.isoformat()


def last_heartbeat() -> dict[str, Any] | None:
    """The last heartbeat, or None; a value of another shape (left by an older version) counts as none."""
    beat = cache.get(HEARTBEAT_CACHE_KEY)
    if isinstance(beat, dict) and isinstance(beat.get("at"), datetime):
        return beat
    return None


@shared_task
def expire_api_tokens() -> int:
    """Delete tokens that were revoked or expired more than the retention period ago."""
    return actions.expire_tokens()


@shared_task
def check_provider_accounts() -> dict[str, int]:
    """Deactivate users the identity provider no longer knows (``tenancy.actions.identity``); nothing when it is off."""
    return identity.check_provider_accounts()
