"""Fixtures for the notification tests: the scheduler's small fleet, a cursor at the newest job event, and
deliveries run when asked rather than by a worker (the webhook receiver, ``hook``, is in ``tests/conftest.py``)."""

from __future__ import annotations

from typing import Any

import pytest

from notifications.actions import outbox
from notifications.models import OutboxCursor
from scheduler.models import JobEvent
from tests.scheduler.conftest import fleet  # noqa: F401 - the fleet fixture


@pytest.fixture
def queued(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """What would be queued for delivery; the tests deliver themselves (the broker is not what they test)."""
    ids: list[int] = []

    def send(task_name: str, *args: Any) -> bool:
        if task_name == outbox.DELIVER_TASK:
            ids.append(args[0])
        return True

    monkeypatch.setattr("common.enqueue.send", send)
    return ids


@pytest.fixture
def cursor(db: Any) -> OutboxCursor:
    """The outbox read from now on (a test database may have been flushed of the migration's cursor)."""
    newest = JobEvent.objects.order_by("-pk").values_list("pk", flat=True).first() or 0
    row, _ = OutboxCursor.objects.update_or_create(name=outbox.CURSOR, defaults={"last_id": newest})
    return row
