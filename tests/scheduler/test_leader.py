"""The placement loop's leader lock: one leader at a time per deployment, and deployments (or test processes)
that share one Redis under different ``REDIS_KEY_PREFIX`` values never hold each other's lock."""

from __future__ import annotations

import os

import pytest
from django.conf import settings
from django.test import override_settings

from scheduler.placement.leader import leadership

pytestmark = pytest.mark.skipif(not settings.REDIS_URL, reason="the lock in Redis (without it, a file lock)")


def test_one_leader_per_prefix_on_a_shared_redis() -> None:
    with leadership("placement") as first:
        assert first
        with leadership("placement") as second:
            assert not second  # the same deployment: one leader
        with (
            override_settings(REDIS_KEY_PREFIX=f"{settings.REDIS_KEY_PREFIX}-another"),
            leadership("placement") as other,
        ):
            assert other  # another deployment on the same Redis leads its own loop
    with leadership("placement") as after:
        assert after  # released at the end of the first


def test_the_suites_processes_each_have_their_own_prefix() -> None:
    """Under xdist every worker has its own (a worker's ``placement`` lock held by the other skipped its cycle)."""
    worker = os.environ.get("PYTEST_XDIST_WORKER")
    if worker:
        assert settings.REDIS_KEY_PREFIX.endswith(f"-{worker}")
    assert settings.CACHES["default"]["KEY_PREFIX"] == settings.REDIS_KEY_PREFIX
