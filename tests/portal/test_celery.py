"""Celery: the beat schedule names real tasks, and a real worker runs them from the broker."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import timedelta

import pytest
from celery.contrib.testing.worker import start_worker
from django.conf import settings
from django.core.cache import cache
from django.utils import timezone

from portal.celery import app
from tenancy import actions, tasks
from tenancy.models import ApiToken
from tests.conftest import World


def test_beat_schedule_names_registered_tasks() -> None:
    app.loader.import_default_modules()
    assert settings.CELERY_BEAT_SCHEDULE
    for name, entry in settings.CELERY_BEAT_SCHEDULE.items():
        assert entry["task"] in app.tasks, name


def test_tests_run_tasks_eagerly() -> None:
    assert app.conf.task_always_eager


@contextmanager
def real_worker() -> Iterator[str]:
    """A worker thread consuming a queue of its own from the configured broker (Redis in CI)."""
    queue = f"test-{uuid.uuid4().hex[:8]}"
    app.conf.task_always_eager = False
    try:
        with start_worker(
            app, pool="solo", perform_ping_check=False, queues=[queue], loglevel="WARNING", shutdown_timeout=10
        ):
            yield queue
    finally:
        app.conf.task_always_eager = True


def wait_for(condition: Callable[[], bool], seconds: float = 20) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.05)
    return False


@pytest.mark.worker
@pytest.mark.django_db(transaction=True)
def test_real_worker_runs_tasks_from_the_broker(world: World) -> None:
    cache.delete(tasks.HEARTBEAT_CACHE_KEY)
    dead, _ = actions.issue_token(world.users["bob"], name="dead")
    ApiToken.objects.filter(pk=dead.pk).update(revoked_at=timezone.now() - actions.TOKEN_RETENTION - timedelta(days=1))
    with real_worker() as queue:
        tasks.record_heartbeat.apply_async(queue=queue)
        tasks.expire_api_tokens.apply_async(queue=queue)
        assert wait_for(lambda: tasks.last_heartbeat() is not None), "no heartbeat from the worker"
        assert wait_for(lambda: not ApiToken.objects.filter(pk=dead.pk).exists()), "the worker did not expire"


def test_heartbeat_of_an_older_shape_counts_as_none(db) -> None:  # type: ignore[no-untyped-def]
    cache.set(tasks.HEARTBEAT_CACHE_KEY, {"at": "2026-01-01T00:00:00", "host": "old"})
    assert tasks.last_heartbeat() is None
    tasks.record_heartbeat.delay()
    beat = tasks.last_heartbeat()
    assert beat is not None
    assert (timezone.now() - beat["at"]).total_seconds() < 60
