"""Monthly budgets: what counts against them, hard budgets in the placement loop, who may set them, and
their alerts by e-mail and webhook (each sent once)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any

import pytest
from django.core import mail
from django.core.exceptions import PermissionDenied, ValidationError
from django.utils import timezone

from governance import placed
from governance.actions import budgets
from governance.models import Budget, BudgetAlert, QuotaChange
from scheduler.models import Attempt, Job
from scheduler.states import PLACED
from tenancy.models import AuditLog
from tests.billing.factories import priced
from tests.conftest import Hook
from tests.scheduler.conftest import Fleet

NOV_15 = datetime(2026, 11, 15, 12, 0, tzinfo=UTC)


def inside_a_month() -> datetime:
    """Now, unless the month ends within three hours (a job's charge would be cut there): then just after."""
    now = timezone.now()
    end = budgets.month_of(now)[1]
    return now if end - now > timedelta(hours=3) else end + timedelta(minutes=1)


def placed_attempt(fleet: Fleet, *, admitted: datetime, ended: datetime | None, price: str, **job: Any) -> Attempt:
    """A job of ``job``'s shape whose attempt held its accelerators from ``admitted`` to ``ended`` (None: still)."""
    submitted = fleet.submit(**job)
    fleet.cycle()
    attempt = Attempt.objects.get(job=submitted)
    Attempt.objects.filter(pk=attempt.pk).update(
        admitted_at=admitted,
        ended_at=ended,
        outcome=Attempt.Outcome.ACTIVE if ended is None else Attempt.Outcome.SUCCEEDED,
        cost_per_hour=Decimal(price),
    )
    return Attempt.objects.get(pk=attempt.pk)


def make_budget(fleet: Fleet, team: str = "vision", project: Any = None, **fields: Any) -> Budget:
    """A budget set by an admin (a team's) or by the vision team's lead (a project's)."""
    setter = fleet.user("lena" if project is not None else "adam")
    budgets.set_budget(setter, fleet.world.teams[team], project, reason="the month's plan", **fields)
    return Budget.objects.get(team=fleet.world.teams[team], project=project)


# ------------------------------------------------------------------------------------------------ use


def test_a_months_use_counts_each_attempts_part_inside_the_month(fleet: Fleet) -> None:
    project = fleet.world.project("vision")
    # 4 GPUs from Oct 31 22:00 to Nov 1 02:00: two of its hours fall in November.
    placed_attempt(
        fleet,
        admitted=datetime(2026, 10, 31, 22, tzinfo=UTC),
        ended=datetime(2026, 11, 1, 2, tzinfo=UTC),
        price="8.0",
        name="across",
        accelerators=4,
    )
    # 1 GPU of the project, running since 10:00 with a 4-hour limit: 2 hours used, 2 more it may use.
    placed_attempt(
        fleet,
        admitted=NOV_15 - timedelta(hours=2),
        ended=None,
        price="2.5",
        name="live",
        accelerators=1,
        time_limit=4 * 3600,
        project=project,
    )
    # All of it in October: not counted.
    placed_attempt(
        fleet,
        admitted=datetime(2026, 10, 3, tzinfo=UTC),
        ended=datetime(2026, 10, 4, tzinfo=UTC),
        price="8.0",
        name="october",
        accelerators=4,
    )
    team_budget = make_budget(fleet, accelerator_hours=100)
    project_budget = make_budget(fleet, project=project, amount=50)

    uses = placed.use_of([team_budget, project_budget], NOV_15)
    team, mine = uses[team_budget.pk], uses[project_budget.pk]
    assert (team.hours, team.money) == pytest.approx((4 * 2 + 1 * 2, 8.0 * 2 + 2.5 * 2))
    assert (team.committed_hours, team.committed_money) == pytest.approx((2, 5.0))
    assert (mine.hours, mine.money, mine.committed_money) == pytest.approx((2, 5.0, 5.0))

    (hours,) = budgets.standings(team_budget, team, NOV_15)
    assert (hours.used, hours.limit, hours.committed, hours.percent) == (Decimal(10), Decimal(100), Decimal(2), 10.0)
    # The forecast goes on at the rate of the last seven days (the live job's 2 hours; the job of Nov 1 is
    # older) for the 15.5 days left.
    assert hours.forecast == Decimal(10 + 2 / (7 * 24) * (15.5 * 24)).quantize(Decimal("0.001"))


# ---------------------------------------------------------------------------------------- hard budgets


def test_a_hard_budget_keeps_jobs_that_would_pass_it_pending_until_it_is_raised(fleet: Fleet) -> None:
    at = inside_a_month()
    make_budget(fleet, accelerator_hours=20, hard=True)
    fleet.submit("alice", name="first", accelerators=8, time_limit=2 * 3600)  # may use 16 of the 20
    second = fleet.submit("alice", name="second", accelerators=4, time_limit=2 * 3600)  # 8 more: too many
    fleet.submit("bob", name="robotics", accelerators=4, time_limit=2 * 3600)  # another team's
    fleet.cycle(at)
    placed = set(Job.objects.filter(state__in=PLACED).values_list("name", flat=True))
    assert placed == {"first", "robotics"}
    held = Job.objects.get(pk=second.pk)
    assert held.pending_reason == "budget"
    assert "Budget team vision has 4 accelerator-hours left this month" in held.pending_message

    fleet.cycle(at)  # the running job's hours stay committed: still pending
    assert Job.objects.get(pk=second.pk).pending_reason == "budget"

    budgets.set_budget(
        fleet.user("adam"), fleet.world.teams["vision"], accelerator_hours=30, hard=True, reason="the deadline moved up"
    )
    fleet.cycle(at)
    assert Job.objects.get(pk=second.pk).state in PLACED


def test_a_soft_budget_only_alerts(fleet: Fleet) -> None:
    at = inside_a_month()
    make_budget(fleet, accelerator_hours=1)
    job = fleet.submit("alice", accelerators=8, time_limit=2 * 3600)
    fleet.cycle(at)
    assert Job.objects.get(pk=job.pk).state in PLACED


def test_a_project_budget_holds_that_projects_jobs_only(fleet: Fleet) -> None:
    at = inside_a_month()
    project = fleet.world.project("vision")
    priced(fleet.clusters.values(), 2.0)  # the simulated clusters are free unless priced
    make_budget(fleet, project=project, amount=Decimal("0.01"), hard=True)
    held = fleet.submit("alice", name="project", accelerators=1, project=project)
    free = fleet.submit("alice", name="team", accelerators=1)
    fleet.cycle(at)
    assert Job.objects.get(pk=held.pk).pending_reason == "budget"
    assert "has 0.01 left this month" in Job.objects.get(pk=held.pk).pending_message
    assert Job.objects.get(pk=free.pk).state in PLACED
    # Lowered to nothing after it was accepted: no month will cover it (a new one would be refused outright).
    make_budget(fleet, project=project, amount=0, hard=True)
    fleet.cycle(at)
    assert "it can never start as things stand" in Job.objects.get(pk=held.pk).pending_message
    with pytest.raises(ValidationError):
        fleet.submit("alice", name="again", accelerators=1, project=project)


# ------------------------------------------------------------------------------------------- changes


def test_who_may_set_which_budget(fleet: Fleet) -> None:
    vision, robotics = fleet.world.teams["vision"], fleet.world.teams["robotics"]
    project = fleet.world.project("vision")
    for username in ("alice", "fiona", "lena", "bob"):  # the team's budget is the admins'
        with pytest.raises(PermissionDenied):
            budgets.set_budget(fleet.user(username), vision, accelerator_hours=10, reason="x")
    for username in ("alice", "fiona", "bob"):  # a project's: its team's lead or an admin
        with pytest.raises(PermissionDenied):
            budgets.set_budget(fleet.user(username), vision, project, accelerator_hours=10, reason="x")
    with pytest.raises(PermissionDenied):  # a lead of another team
        budgets.set_budget(fleet.user("lena"), robotics, fleet.world.project("robotics"), amount=5, reason="x")
    with pytest.raises(PermissionDenied):  # an admin of another organization
        budgets.set_budget(fleet.user("mallory"), vision, amount=5, reason="x")
    assert not Budget.objects.exists()

    change = budgets.set_budget(fleet.user("lena"), vision, project, amount="250.50", reason="the paper's runs")
    assert change is not None
    assert (change.kind, change.team, change.actor_name) == (QuotaChange.Kind.BUDGET, vision, "lena")
    assert change.after["amount"] == "250.5"
    assert AuditLog.objects.filter(action="budget.changed", actor=fleet.user("lena")).exists()
    # The same values again change nothing and write no history.
    assert budgets.set_budget(fleet.user("lena"), vision, project, amount="250.5", reason="again") is None


def test_bad_budgets_name_every_bad_field_and_write_nothing(fleet: Fleet) -> None:
    vision = fleet.world.teams["vision"]
    with pytest.raises(ValidationError) as refused:
        budgets.set_budget(
            fleet.user("adam"),
            vision,
            accelerator_hours="-1",
            amount="12.345",
            hard="yes",
            recipients=["lena@demo.example", "not an address"],
            webhook_url="ftp://example.com/hook",
            reason=" ",
        )
    assert set(refused.value.message_dict) == {
        "accelerator_hours",
        "amount",
        "hard",
        "recipients",
        "webhook_url",
        "reason",
    }
    assert "not an address" in refused.value.message_dict["recipients"][0]
    with pytest.raises(ValidationError) as refused:
        budgets.set_budget(fleet.user("adam"), vision, accelerator_hours="lots", reason="x")
    assert "'lots' is not a number" in refused.value.message_dict["accelerator_hours"][0]
    assert not Budget.objects.exists()
    assert not QuotaChange.objects.exists()


def test_project_budgets_stay_within_the_teams(fleet: Fleet) -> None:
    vision = fleet.world.teams["vision"]
    first, second = vision.projects.order_by("pk")[:2]
    make_budget(fleet, amount=1000, accelerator_hours=500)
    budgets.set_budget(fleet.user("lena"), vision, first, amount=600, reason="most of it")
    with pytest.raises(ValidationError) as refused:
        budgets.set_budget(fleet.user("lena"), vision, second, amount=500, reason="the rest and more")
    assert "at most 400 is left for this one" in refused.value.message_dict["amount"][0]
    with pytest.raises(ValidationError) as refused:  # nor can the team's drop below what its projects hold
        budgets.set_budget(fleet.user("adam"), vision, amount=500, accelerator_hours=500, reason="cut")
    assert "projects hold 600" in refused.value.message_dict["amount"][0]
    assert Budget.objects.get(team=vision, project=None).amount == 1000


def test_a_budget_without_limits_is_removed(fleet: Fleet) -> None:
    make_budget(fleet, accelerator_hours=10)
    change = budgets.set_budget(fleet.user("adam"), fleet.world.teams["vision"], reason="no longer needed")
    assert change is not None
    assert change.after == {}
    assert not Budget.objects.exists()


# -------------------------------------------------------------------------------------------- alerts


@pytest.fixture
def deliveries(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Run deliveries at once, as the worker would (the broker is not what these tests are about)."""
    queued: list[int] = []

    def send(task_name: str, *args: Any) -> bool:
        queued.append(args[0])
        return True

    monkeypatch.setattr("common.enqueue.send", send)
    return queued


def test_alerts_are_raised_once_at_the_highest_threshold_reached_and_sent_by_mail_and_webhook(
    fleet: Fleet, hook: tuple[str, type[Hook]], deliveries: list[int]
) -> None:
    url, receiver = hook
    budget = make_budget(fleet, accelerator_hours=20, recipients=["ops@demo.example"], webhook_url=url)
    # 4 GPUs for 3 hours this month: 12 of 20, 60%.
    placed_attempt(
        fleet, admitted=NOV_15 - timedelta(hours=4), ended=NOV_15 - timedelta(hours=1), price="1", accelerators=4
    )
    # 12 hours in the last seven days: at that rate the month ends over its 20 as well.
    alert, forecast = budgets.raise_alerts(NOV_15)
    assert (alert.kind, alert.measure, alert.spent, alert.limit) == (
        "50",
        "accelerator_hours",
        Decimal(12),
        Decimal(20),
    )
    assert forecast.kind == "forecast"
    assert budgets.raise_alerts(NOV_15) == []  # once

    assert deliveries == [alert.pk, forecast.pk]
    assert budgets.deliver(alert.pk)
    (sent,) = mail.outbox
    assert "Budget team vision: 50% used" in sent.subject
    assert set(sent.to) == {"lena@demo.example", "ops@demo.example"}
    assert "60% of its accelerator-hours this month: 12 of 20" in sent.body
    ((headers, body),) = receiver.received
    assert headers["Idempotency-Key"] == f"quartermaster-budget-alert-{alert.pk}"
    assert (body["team"], body["kind"], body["spent"], body["limit"], body["period"]) == (
        "vision",
        "50",
        "12",
        "20",
        "2026-11",
    )
    assert budgets.deliver(alert.pk)  # again (a retried task): nothing is sent twice
    assert len(mail.outbox) == 1
    assert len(receiver.received) == 1

    # Past 100% at once: only the 100% alert is raised, not 80% on the way (nor a forecast: it is over).
    placed_attempt(fleet, admitted=NOV_15 - timedelta(hours=3), ended=NOV_15, price="1", accelerators=4)
    (full,) = budgets.raise_alerts(NOV_15)
    assert full.kind == "100"
    assert budgets.raise_alerts(NOV_15 + timedelta(hours=1)) == []
    # A raised limit arms the thresholds again.
    budgets.set_budget(
        fleet.user("adam"),
        budget.team,
        accelerator_hours=40,
        recipients=["ops@demo.example"],
        webhook_url=url,
        reason="more for the deadline",
    )
    again, forecast = budgets.raise_alerts(NOV_15)
    assert (again.kind, again.limit, forecast.kind) == ("50", Decimal(40), "forecast")


def test_a_failed_webhook_is_retried_without_mailing_again(
    fleet: Fleet, hook: tuple[str, type[Hook]], deliveries: list[int]
) -> None:
    url, receiver = hook
    make_budget(fleet, amount=10, webhook_url=url)
    placed_attempt(fleet, admitted=NOV_15 - timedelta(hours=3), ended=NOV_15, price="3", accelerators=1)  # 9 of 10
    alert, forecast = budgets.raise_alerts(NOV_15)
    assert (alert.kind, alert.measure, forecast.kind) == ("80", "amount", "forecast")
    receiver.status = 503
    with pytest.raises(budgets.DeliveryFailed, match="webhook: not delivered"):
        budgets.deliver(alert.pk)
    alert.refresh_from_db()
    assert alert.emailed_at is not None
    assert alert.webhook_sent_at is None
    assert (alert.attempts, len(mail.outbox)) == (1, 1)
    assert alert.last_error == budgets.WEBHOOK_FAILED  # the lead reads it: no status, no network detail
    old = timezone.now() + timedelta(minutes=5)
    assert budgets.undelivered(now=old) == [alert.pk, forecast.pk]  # the beat queues them (again)

    receiver.status = 200
    assert budgets.deliver(alert.pk)
    alert.refresh_from_db()
    assert alert.webhook_sent_at is not None
    assert alert.last_error == ""
    assert len(mail.outbox) == 1
    assert len(receiver.received) == 2
    assert budgets.undelivered(now=old) == [forecast.pk]


def test_a_forecast_over_the_budget_alerts_before_it_is_used(fleet: Fleet, deliveries: list[int]) -> None:
    make_budget(fleet, accelerator_hours=100)
    # 8 GPUs for 4 hours in the last day: 32 of 100 used, but at that rate the month ends far over it.
    placed_attempt(
        fleet, admitted=NOV_15 - timedelta(hours=5), ended=NOV_15 - timedelta(hours=1), price="1", accelerators=8
    )
    (alert,) = budgets.raise_alerts(NOV_15)
    assert alert.kind == BudgetAlert.Kind.FORECAST
    assert alert.forecast is not None
    assert alert.forecast > 100
    assert "is forecast to reach" in alert.message
    # Not on the first day of a month: an hour's use is not a month's rate.
    assert budgets.raise_alerts(datetime(2026, 12, 1, 3, tzinfo=UTC)) == []


def test_the_history_keeps_a_webhooks_host_not_its_secret_url(fleet: Fleet) -> None:
    secret = "https://hooks.example.com/services/T000/B000/very-secret-token"
    change = budgets.set_budget(
        fleet.user("adam"),
        fleet.world.teams["vision"],
        amount=100,
        webhook_url=secret,
        reason="alerts to the team's channel",
    )
    assert change is not None
    assert change.after["webhook_url"].startswith("https://hooks.example.com/… (")
    assert "very-secret-token" not in str(change.after)
    assert "very-secret-token" not in str(AuditLog.objects.get(action="budget.changed").changes)
    assert Budget.objects.get().webhook_url == secret
