"""Governance's tests run on the scheduler's small fleet: quotas, tiers and budgets are judged by placing jobs."""

from __future__ import annotations

from tests.scheduler.conftest import fleet  # noqa: F401 - the fixture, shared with the scheduler tests
