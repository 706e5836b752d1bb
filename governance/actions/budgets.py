"""Monthly budgets of teams and projects: what they have used, who may set them, and their alerts.

**What counts.** A job uses its accelerators from admission (the engine reserves them for it then) until its
attempt ends, priced at the attempt's cost per hour (``costs.py``, until billing meters it). A month's use
is each attempt's part of that span inside the month (UTC calendar months). A team's budget counts all of
the team's jobs; a project's budget counts the jobs of that project.

**Usage or the full charge.** A money limit counts what its budget's ``counts`` says: ``usage``, the jobs as above,
or ``charge``, the full charge so far (usage with its shares of idle capacity and overhead, corrections of closed
months included: the team's or project's statement total, read from billing's attribution through
``BUDGET_CHARGES``), so that a budget on the charge agrees with the bill to the cent. What is ahead (running jobs
until their time limits, the forecast's rate) is then counted at the month's charge per unit of usage so far. Both
figures are shown beside every money limit, whichever it counts.

**Hard budgets** (``scheduler/placement/budgets.py``): what is left for the engine is the limit less what was used this
month and less what running jobs may still use before their time limits (within the month). A job whose own
use until its time limit (within the month) does not fit waits, with reason ``budget`` (the engine's
``budgets.py``). Running jobs are never stopped for a budget.

**Alerts** (``raise_alerts``, on the beat): at 50, 80 and 100% of a limit, and when the month's forecast
passes it, by e-mail to the team's leads and the budget's listed addresses and by POST to its webhook. Each
alert is a ``BudgetAlert`` row, unique per budget, month, measure, kind and limit, so it is raised once
(a raised limit arms the thresholds again); only the highest threshold newly reached is sent. Delivery
(``deliver``) is retried until both channels have taken it; a crash between sending and recording it may
send one twice, so the webhook carries an ``Idempotency-Key`` header for its receiver.

**The forecast** is the month's use so far plus the rate of the last seven days (or of the month so far, if
shorter) until the month ends; it is given from the second day of the month on, when a rate means something.

**Who sets them** (as quotas, ``quotas.py``): organization admins set teams' budgets; a team's lead sets its
projects' budgets, which together stay within the team's. Changes are validated as a whole, audited and kept
in the quota history. A limit below the month's use so far is refused, saying what is used, unless confirmed
(``below_use``: the page's confirmation box, the API's ``confirm=true``): a 400 rather than a warning in a 200,
so that nothing is set that its setter has not seen the consequence of. Member limits do the same
(``quotas.set_member_limit``).
"""

from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal
from typing import TYPE_CHECKING, Any

import requests
from django.conf import settings
from django.core.exceptions import ValidationError
from django.core.mail import send_mail
from django.core.validators import validate_email
from django.db import IntegrityError, transaction
from django.db.models import Q
from django.utils import timezone

from common import enqueue, outbound, webhooks
from governance import placed
from governance.actions import quotas
from governance.models import Budget, BudgetAlert, QuotaChange
from tenancy import policy
from tenancy.models import Project, Team
from tenancy.scoping import Role

if TYPE_CHECKING:
    from django.contrib.auth.models import User
    from django.http import HttpRequest

log = logging.getLogger(__name__)

THRESHOLDS = (50, 80, 100)
FORECAST_WINDOW = timedelta(days=7)
#: No forecast before this much of the month has passed: one busy hour is not a month's rate.
FORECAST_AFTER = timedelta(days=1)
MEASURES = ("accelerator_hours", "amount")
MEASURE_WORDS = {"accelerator_hours": "accelerator-hours", "amount": "money"}
MAX_RECIPIENTS = 20
WEBHOOK_TIMEOUT = webhooks.TIMEOUT
#: How many times an alert's delivery is tried before it is left for a person to look at.
MAX_DELIVERY_ATTEMPTS = 12
#: What a failed webhook delivery records, whatever the failure (the server's log has the reason).
WEBHOOK_FAILED = webhooks.FAILED
MONEY = Decimal("0.01")
#: The largest limit anyone may set (accelerator-hours or money a month).
MOST = Decimal(10) ** 11
HOURS = Decimal("0.001")


def month_of(now: datetime) -> tuple[datetime, datetime]:
    """The UTC calendar month that ``now`` falls in: its first instant and the first instant of the next."""
    start = now.astimezone(UTC).replace(day=1, hour=0, minute=0, second=0, microsecond=0)
    end = (start + timedelta(days=32)).replace(day=1)
    return start, end


# ----------------------------------------------------------------------------------------------- use


@dataclass(frozen=True)
class Standing:
    """Where one measure of a budget stands this month, for pages, the API and alerts."""

    measure: str
    limit: Decimal
    used: Decimal
    committed: Decimal
    forecast: Decimal | None
    #: Money both ways this month so far (the money measure only): usage, and the full charge (None: not read).
    usage: Decimal | None = None
    charge: Decimal | None = None

    @property
    def percent(self) -> float:
        return float(self.used / self.limit * 100) if self.limit else (100.0 if self.used else 0.0)

    @property
    def words(self) -> str:
        return MEASURE_WORDS[self.measure]


def standings(budget: Budget, use: placed.Use, now: datetime | None = None) -> list[Standing]:
    """Each limited measure of ``budget`` against its month's ``use``."""
    now = now or timezone.now()
    start, end = month_of(now)
    elapsed = now - start
    window = min(FORECAST_WINDOW, elapsed).total_seconds()
    result = []
    for measure, limit, used, committed, recent, step in (
        ("accelerator_hours", budget.accelerator_hours, use.hours, use.committed_hours, use.recent_hours, HOURS),
        ("amount", budget.amount, use.money, use.committed_money, use.recent_money, MONEY),
    ):
        if limit is None:
            continue
        forecast = None
        if elapsed >= FORECAST_AFTER and window > 0:
            forecast = Decimal(used + recent / window * (end - now).total_seconds()).quantize(step)
        both: dict[str, Decimal | None] = {}
        if measure == "amount":
            both["usage"] = Decimal(use.usage_money).quantize(MONEY)
            both["charge"] = None if use.charge_money is None else Decimal(use.charge_money).quantize(MONEY)
        result.append(
            Standing(measure, limit, Decimal(used).quantize(step), Decimal(committed).quantize(step), forecast, **both)
        )
    return result


# ---------------------------------------------------------------------------------------- the engine


def scope_of(budget: Budget) -> str:
    return f"project {budget.project.name}" if budget.project else "the team"


# ------------------------------------------------------------------------------------------- changes

FIELDS = ("accelerator_hours", "amount", "counts", "hard", "recipients", "webhook_url")


def permission(project: Project | None) -> str:
    """The policy's name for setting a team's own budget (``project`` None: admins) or a project's (its team's
    lead too), asked of the team."""
    return "budget.set" if project is None else "budget.project.set"


def _recipients(value: Any, errors: dict[str, str]) -> list[str]:
    if value is None or value == "":
        return []
    items = (
        [x.strip() for x in value.replace(";", ",").replace("\n", ",").split(",")] if isinstance(value, str) else value
    )
    if not isinstance(items, list | tuple) or not all(isinstance(x, str) for x in items):
        errors["recipients"] = "A list of e-mail addresses."
        return []
    addresses = [x for x in (i.strip() for i in items) if x]
    bad = []
    for address in addresses:
        try:
            validate_email(address)
        except ValidationError:
            bad.append(address)
    if bad:
        errors["recipients"] = f"Not an e-mail address: {', '.join(bad)}."
    elif len(addresses) > MAX_RECIPIENTS:
        errors["recipients"] = f"At most {MAX_RECIPIENTS} addresses."
    return list(dict.fromkeys(addresses))


def _webhook(value: Any, errors: dict[str, str]) -> str:
    try:
        return webhooks.check_url(value)
    except ValidationError as error:
        errors["webhook_url"] = error.messages[0]
        return value if isinstance(value, str) else ""


def _text(value: Any) -> Any:
    return format(value.normalize(), "f") if isinstance(value, Decimal) else value


def set_budget(
    actor: User,
    team: Team,
    project: Project | None = None,
    *,
    accelerator_hours: Any = None,
    amount: Any = None,
    counts: Any = Budget.Counts.USAGE,
    hard: Any = False,
    recipients: Any = None,
    webhook_url: Any = "",
    reason: str,
    confirm: bool = True,
    http: HttpRequest | None = None,
) -> QuotaChange | None:
    """Set the monthly budget of ``team`` (or of its ``project``); with neither accelerator-hours nor an amount,
    remove it. Returns the history entry, or None if nothing changed. ``ValidationError`` names every bad
    field and nothing is written. Without ``confirm`` (the pages and the API ask for it), a limit below this
    month's use so far is refused with what is used (``below_use``), so that it is set knowingly."""
    policy.require(actor, permission(project), team)
    errors: dict[str, str] = {}
    reason = quotas.check_reason(reason, errors)
    if project is not None and project.team_id != team.pk:
        errors["project"] = f"Project {project} is not in team {team}."
    new: dict[str, Any] = {
        "accelerator_hours": quotas.check_amount(
            accelerator_hours, "accelerator_hours", errors, required=False, most=MOST, places=3
        ),
        "amount": quotas.check_amount(amount, "amount", errors, required=False, most=MOST, places=2),
        "counts": counts or Budget.Counts.USAGE,
        "hard": hard,
        "recipients": _recipients(recipients, errors),
        "webhook_url": _webhook(webhook_url, errors),
    }
    if not isinstance(hard, bool):
        errors["hard"] = "true or false."
    if new["counts"] not in Budget.Counts.values:
        errors["counts"] = f"{counts!r} is not one of {', '.join(Budget.Counts.values)}."
    removing = new["accelerator_hours"] is None and new["amount"] is None
    if errors:
        raise ValidationError(errors)

    with transaction.atomic():
        Team.objects.select_for_update().get(pk=team.pk)  # one change of a team's budgets at a time
        row: Budget | None = Budget.objects.filter(team=team, project=project).first()
        before = {k: getattr(row, k) for k in FIELDS} if row else {}
        after = {} if removing else new
        if {k: _text(v) for k, v in before.items()} == {k: _text(v) for k, v in after.items()}:
            return None
        if not removing:
            _check_within_team(team, project, new)
            if not confirm:
                below_use(team, project, new, row)
        if removing:
            if row is not None:
                row.delete()
        elif row is None:
            row = Budget.objects.create(team=team, project=project, updated_at=timezone.now(), **new)
        else:
            for k, v in new.items():
                setattr(row, k, v)
            row.updated_at = timezone.now()
            row.save()
        subject = f"budget of {'project ' + project.name if project else 'team ' + team.name}"
        # A webhook's URL is often a secret; the history, read by the whole team, keeps its host.
        before, after = (
            {k: webhooks.host_of(v) if k == "webhook_url" else v for k, v in d.items()} for d in (before, after)
        )
        return quotas.record(  # one history for quotas and budgets
            actor,
            organization=team.organization,
            team=team,
            queue=None,
            cohort=None,
            kind=QuotaChange.Kind.BUDGET,
            subject=subject,
            before={k: _text(v) for k, v in before.items()},
            after={k: _text(v) for k, v in after.items()},
            reason=reason,
            target=row or team,
            action="budget.removed" if removing else "budget.changed",
            http=http,
        )


#: The code of the refusal of a limit below what is used (the API's ``confirm=true`` sets it anyway).
BELOW_USE = "below_use"


def below_use(team: Team, project: Project | None, new: Mapping[str, Any], row: Budget | None) -> None:
    """Refuse (``ValidationError`` by measure, code ``BELOW_USE``) a limit below this month's use so far: what a
    hard budget then does (keep every new job waiting) or a soft one (alert at once) should be chosen knowingly."""
    # As it would be: what its money counts (usage or the full charge) is the new value.
    budget = Budget(pk=row.pk if row else None, team=team, project=project, amount=new["amount"], counts=new["counts"])
    use = placed.use_of([budget])[budget.pk]
    errors = {}
    for measure, used, step in (("accelerator_hours", use.hours, HOURS), ("amount", use.money, MONEY)):
        limit = new[measure]
        spent = Decimal(used).quantize(step)
        if limit is not None and limit < spent:
            scope = f"Project {project.name}" if project else f"Team {team.name}"
            hours = measure == "accelerator_hours"
            counted = "been charged" if new["counts"] == Budget.Counts.CHARGE else "spent"
            used_words = f"used {_text(spent)} accelerator-hours" if hours else f"{counted} {spent}"
            errors[measure] = ValidationError(
                f"{scope} has already {used_words} this month, more than {_text(limit)}; "
                f"{'its jobs would all wait' if new['hard'] else 'its alerts would fire at once'}. "
                "Confirm to set it anyway.",
                code=BELOW_USE,
            )
    if errors:
        raise ValidationError(errors)


def _check_within_team(team: Team, project: Project | None, new: dict[str, Any]) -> None:
    """Projects' budgets together stay within the team's (for each measure the team limits); the team's
    cannot drop below what its projects hold."""
    team_row = Budget.objects.filter(team=team, project=None).first()
    projects = Budget.objects.filter(team=team, project__isnull=False)
    errors = {}
    for measure in MEASURES:
        if project is None:
            limit = new[measure]
            given = sum((getattr(b, measure) or Decimal(0) for b in projects), Decimal(0))
            if limit is not None and given > limit:
                errors[measure] = f"The team's projects hold {_text(given)} of it; lower theirs first."
            continue
        if team_row is None or getattr(team_row, measure) is None or new[measure] is None:
            continue
        limit = getattr(team_row, measure)
        others = sum((getattr(b, measure) or Decimal(0) for b in projects if b.project_id != project.pk), Decimal(0))
        if others + new[measure] > limit:
            left = max(Decimal(0), limit - others)
            errors[measure] = (
                f"Team {team} has {_text(limit)} {MEASURE_WORDS[measure]} a month; its other projects hold "
                f"{_text(others)}, so at most {_text(left)} is left for this one."
            )
    if errors:
        raise ValidationError(errors)


# -------------------------------------------------------------------------------------------- alerts


def raise_alerts(now: datetime | None = None) -> list[BudgetAlert]:
    """Record the alerts that are due for every budget (``_due``) and queue their delivery. Safe to run twice at once:
    the unique constraint lets one of two identical alerts in."""
    now = now or timezone.now()
    budgets = list(Budget.objects.select_related("team", "project"))
    period = month_of(now)[0].date()
    raised: dict[tuple[int, str, str], set[str]] = defaultdict(set)
    for budget_id, measure, kind, limit in BudgetAlert.objects.filter(period=period).values_list(
        "budget_id", "measure", "kind", "limit"
    ):
        raised[(budget_id, measure, _text(limit))].add(kind)
    new = []
    uses = placed.use_of(budgets, now)
    for budget in budgets:
        for standing in standings(budget, uses[budget.pk], now):
            done = raised[(budget.pk, standing.measure, _text(standing.limit))]
            for kind in _due(standing, done):
                if alert := _raise(budget, period, standing, kind, now):
                    new.append(alert)
                    enqueue.send("scheduler.tasks.deliver_budget_alert", alert.pk)
    return new


def _raise(budget: Budget, period: date, standing: Standing, kind: str, now: datetime) -> BudgetAlert | None:
    try:
        with transaction.atomic():
            return BudgetAlert.objects.create(
                budget=budget,
                period=period,
                measure=standing.measure,
                kind=kind,
                limit=standing.limit,
                spent=standing.used,
                forecast=standing.forecast,
                message=alert_message(budget, standing, kind),
                created_at=now,
            )
    except IntegrityError:
        return None  # another checker raised it first


def _due(standing: Standing, done: set[str]) -> list[str]:
    """The alerts due for one measure: the highest threshold newly reached (not those below it on the way),
    and the forecast's while the limit is not reached yet."""
    due = []
    reached = [t for t in THRESHOLDS if standing.used >= standing.limit * t / 100]
    if reached and not any(int(k) >= reached[-1] for k in done if k.isdigit()):
        due.append(str(reached[-1]))
    over = standing.forecast is not None and standing.forecast > standing.limit
    if over and standing.used < standing.limit and BudgetAlert.Kind.FORECAST not in done:
        due.append(BudgetAlert.Kind.FORECAST)
    return due


def alert_message(budget: Budget, standing: Standing, kind: str) -> str:
    words = standing.words
    used, limit = _text(standing.used), _text(standing.limit)
    hard = "It is a hard budget: jobs that would pass it wait." if budget.hard else "It is a soft budget."
    if kind == BudgetAlert.Kind.FORECAST:
        return (
            f"The {budget} budget is forecast to reach {_text(standing.forecast)} {words} this month, over its "
            f"limit of {limit} ({used} used so far). {hard}"
        )
    return f"The {budget} budget has used {standing.percent:.0f}% of its {words} this month: {used} of {limit}. {hard}"


def recipients_of(budget: Budget) -> list[str]:
    leads = policy.members(budget.team, Role.LEAD).exclude(user__email="")
    return list(dict.fromkeys([*leads.values_list("user__email", flat=True), *budget.recipients]))


def payload(alert: BudgetAlert) -> dict[str, Any]:
    budget = alert.budget
    return {
        "alert": alert.pk,
        "budget": budget.pk,
        "organization": budget.team.organization.slug,
        "team": budget.team.slug,
        "project": budget.project.slug if budget.project else None,
        "period": alert.period.strftime("%Y-%m"),
        "measure": alert.measure,
        "kind": alert.kind,
        "limit": _text(alert.limit),
        "spent": _text(alert.spent),
        "forecast": _text(alert.forecast),
        "hard": budget.hard,
        "message": alert.message,
        "raised_at": alert.created_at.isoformat(),
    }


class DeliveryFailed(Exception):
    """A channel did not take the alert; the task tries again later."""


def deliver(alert_id: int, now: datetime | None = None) -> bool:
    """Send alert ``alert_id`` by e-mail and webhook, each channel once it has taken it. True when both are
    done; ``DeliveryFailed`` when one failed (the other's success is kept)."""
    now = now or timezone.now()
    with transaction.atomic():
        alert = BudgetAlert.objects.select_for_update().select_related("budget__team__organization").get(pk=alert_id)
        budget, failures = alert.budget, []
        if alert.emailed_at is None:
            to = recipients_of(budget)
            try:
                if to:
                    subject = f"[Quartermaster] Budget {budget}: {alert.get_kind_display()}"
                    send_mail(subject, alert.message, settings.DEFAULT_FROM_EMAIL, to)
                alert.emailed_at, alert.emailed_to = now, ", ".join(to)
            except Exception as error:  # noqa: BLE001 - any mail failure is retried
                failures.append(f"e-mail: {error}")
        if budget.webhook_url and alert.webhook_sent_at is None:
            try:
                webhooks.post(budget.webhook_url, payload(alert), f"quartermaster-budget-alert-{alert.pk}")
                alert.webhook_sent_at = now
            except (requests.RequestException, outbound.Refused) as error:
                # The lead who set the URL reads last_error: one message whatever happened, so that it tells
                # nothing of what answers where inside the network. The reason is in the server's log.
                log.warning(
                    "budget alert %s: the webhook to %s failed: %s",
                    alert_id,
                    webhooks.host_of(budget.webhook_url),
                    error,
                )
                failures.append(WEBHOOK_FAILED)
        alert.attempts += 1
        alert.last_error = "; ".join(failures)
        alert.save(update_fields=["emailed_at", "emailed_to", "webhook_sent_at", "attempts", "last_error"])
    if failures:
        log.warning("budget alert %s not delivered (attempt %s): %s", alert_id, alert.attempts, alert.last_error)
        raise DeliveryFailed(alert.last_error)
    return True


def undelivered(older_than: timedelta = timedelta(minutes=2), now: datetime | None = None) -> list[int]:
    """Alerts still owed to a channel, and not given up on: the beat queues them again (a lost task)."""
    now = now or timezone.now()
    owed = Q(emailed_at=None) | (Q(webhook_sent_at=None) & ~Q(budget__webhook_url=""))
    rows = BudgetAlert.objects.filter(owed, attempts__lt=MAX_DELIVERY_ATTEMPTS, created_at__lt=now - older_than)
    return list(rows.order_by("pk").values_list("pk", flat=True))


__all__ = [
    "Standing",
    "deliver",
    "month_of",
    "permission",
    "raise_alerts",
    "set_budget",
    "standings",
]
