"""Budget webhooks under the outbound policy when they are sent: a URL that became (or always was) refused is
not called, redirects are not followed, and every failure reads the same to the lead who set the URL, so
that the alert's error is no port scanner; the reason is in the server's log."""

from __future__ import annotations

import logging
import socket
import time
from collections.abc import Callable
from datetime import date
from typing import Any

import pytest

from common import outbound
from governance.actions import budgets
from governance.models import Budget, BudgetAlert
from tests.common.test_outbound import Recorder, serve
from tests.conftest import api_client
from tests.governance.test_budgets import NOV_15
from tests.scheduler.conftest import Fleet

__all__ = ["serve"]  # the loopback receivers of tests/common/test_outbound.py, as a fixture here too


def alert_for(fleet: Fleet, url: str) -> BudgetAlert:
    """An alert of Vision's Detection budget (its lead, lena, sets it and reads its errors), e-mailed already,
    whose webhook ``url`` is stored as it is (the URL may predate the policy)."""
    project = fleet.world.project("vision")
    budgets.set_budget(fleet.user("adam"), fleet.world.teams["vision"], amount=1000, reason="plan")
    budgets.set_budget(fleet.user("lena"), fleet.world.teams["vision"], project, amount=100, reason="plan")
    budget = Budget.objects.get(project=project)
    Budget.objects.filter(pk=budget.pk).update(webhook_url=url)
    return BudgetAlert.objects.create(
        budget=budget,
        period=date(2026, 11, 1),
        measure="amount",
        kind="80",
        limit=100,
        spent=80,
        message="80% used",
        created_at=NOV_15,
        emailed_at=NOV_15,
    )


def deliver(alert: BudgetAlert) -> str:
    """Deliver it; the error its lead reads through the API."""
    with pytest.raises(budgets.DeliveryFailed):
        budgets.deliver(alert.pk)
    (read,) = (
        api_client(alert.budget.team.memberships.get(user__username="lena").user)
        .get(f"/api/v1/budget-alerts/?budget={alert.budget.pk}")
        .json()["results"]
    )
    alert.refresh_from_db()
    assert alert.webhook_sent_at is None
    error: str = read["last_error"]
    return error


def test_a_webhook_is_checked_again_when_sent(
    fleet: Fleet, serve: Callable[..., tuple[int, type[Recorder]]], settings: Any
) -> None:
    port, receiver = serve()
    settings.WEBHOOKS_ALLOW_PRIVATE = True
    alert = alert_for(fleet, f"http://127.0.0.1:{port}/hook")
    settings.WEBHOOKS_ALLOW_PRIVATE = False  # the operators closed their networks to webhooks since
    assert deliver(alert) == budgets.WEBHOOK_FAILED
    assert receiver.seen == []
    settings.WEBHOOKS_ALLOW_PRIVATE = True
    assert budgets.deliver(alert.pk)
    assert [path for path, _ in receiver.seen] == ["/hook"]


def test_a_name_rebound_to_this_server_after_it_was_saved_is_not_called(
    fleet: Fleet, serve: Callable[..., tuple[int, type[Recorder]]], monkeypatch: pytest.MonkeyPatch
) -> None:
    port, receiver = serve()
    answers = {"hooks.lab.test": ["93.184.216.34"]}
    monkeypatch.setattr(outbound, "resolver", lambda host, _port: answers[host])
    url = f"http://hooks.lab.test:{port}/hook"
    budgets.set_budget(fleet.user("adam"), fleet.world.teams["vision"], amount=1000, webhook_url=url, reason="plan")
    assert Budget.objects.get(project=None).webhook_url == url  # a public address when saved
    answers["hooks.lab.test"] = ["127.0.0.1"]
    alert = alert_for(fleet, url)
    assert deliver(alert) == budgets.WEBHOOK_FAILED
    assert receiver.seen == []


def test_a_webhook_that_redirects_is_not_followed(
    fleet: Fleet, serve: Callable[..., tuple[int, type[Recorder]]], settings: Any
) -> None:
    settings.WEBHOOKS_ALLOW_PRIVATE = True
    other_port, other = serve()
    port, first = serve(307, {"Location": f"http://127.0.0.1:{other_port}/internal-admin"})
    alert = alert_for(fleet, f"http://127.0.0.1:{port}/hook")
    assert deliver(alert) == budgets.WEBHOOK_FAILED
    assert len(first.seen) == 1
    assert other.seen == []


def test_every_failure_reads_the_same_to_the_lead_and_the_log_says_why(
    fleet: Fleet,
    serve: Callable[..., tuple[int, type[Recorder]]],
    settings: Any,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Nothing listening, something answering 503, an address refused: what a port scan would tell apart."""
    settings.WEBHOOKS_ALLOW_PRIVATE = True
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        closed = sock.getsockname()[1]
    answering, _ = serve(503)
    alert = alert_for(fleet, f"http://127.0.0.1:{closed}/hook")
    errors = []
    with caplog.at_level(logging.WARNING, logger="governance.actions.budgets"):
        for url in (
            f"http://127.0.0.1:{closed}/hook",
            f"http://127.0.0.1:{answering}/hook",
            "http://[::ffff:169.254.169.254]/latest/meta-data/",
        ):
            Budget.objects.filter(pk=alert.budget.pk).update(webhook_url=url)
            started = time.monotonic()
            errors.append(deliver(alert))
            assert time.monotonic() - started < budgets.WEBHOOK_TIMEOUT
    assert errors == [budgets.WEBHOOK_FAILED] * 3
    assert "Connection refused" in caplog.text
    assert "HTTP 503" in caplog.text
    assert "a cloud metadata service" in caplog.text
