"""What governance reads of the work placed under it, through an interface.

Quotas, tiers and budgets are below the scheduler: placement reads them to decide. Their pages and some of
their checks also show what is placed under them (a queue's use against its quota, a budget's month so far,
what a member holds), which only the scheduler knows. So governance never imports the scheduler: it asks the
module that ``GOVERNANCE_PLACED`` in the settings names (``scheduler.governed``), as placement reads prices
through ``PLACEMENT_PRICES``. ``Placed`` is what such a module answers.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal
from importlib import import_module
from typing import TYPE_CHECKING, Any, Protocol, cast

from django.conf import settings

if TYPE_CHECKING:
    from collections.abc import Iterable

    from django.contrib.auth.models import User

    from common.types import AuthenticatedHttpRequest
    from governance.models import Budget
    from governance.usage import Row, Usage
    from tenancy.models import Organization, Team


@dataclass
class Use:
    """A budget's month: accelerator-hours and money used so far, what running jobs may still use (until
    their time limits, within the month), and the use of the recent window the forecast is drawn from."""

    hours: float = 0.0
    money: float = 0.0
    committed_hours: float = 0.0
    committed_money: float = 0.0
    recent_hours: float = 0.0
    recent_money: float = 0.0
    #: Money both ways: the jobs' usage at their prices, and the full charge (usage with its shares of idle capacity
    #: and overhead, as the statement says; None where it was not read). ``money`` is the one the budget counts.
    usage_money: float = 0.0
    charge_money: float | None = None


class Placed(Protocol):
    def organization_usage(self, organization: Organization) -> Usage:
        """Every queue's and cohort's quota rows in ``organization`` (``governance/usage.py`` says what they mean)."""
        ...

    def use_of(self, budgets: Iterable[Budget], now: datetime | None = None, *, both: bool = False) -> dict[int, Use]:
        """The month's use of each of ``budgets``, by pk (``governance/actions/budgets.py`` says what counts); with
        ``both``, the full charge of every money budget too (for pages that show it beside usage)."""
        ...

    def member_holds(self, team: Team, member: User) -> Decimal:
        """The accelerators ``member``'s placed jobs in ``team`` hold now (as the engine counts a member's limit)."""
        ...

    def queue_jobs(self, request: AuthenticatedHttpRequest, queue_id: int) -> dict[str, Any]:
        """A queue's running and waiting jobs that the user may see, as the queue pages show them."""
        ...


def source() -> Placed:
    return cast("Placed", import_module(settings.GOVERNANCE_PLACED))


def organization_usage(organization: Organization) -> Usage:
    return source().organization_usage(organization)


def team_usage(team: Team) -> list[Row]:
    """The rows of ``team``'s queues (judged within its whole organization: lending crosses teams)."""
    return organization_usage(team.organization).of_team(team.pk)


def use_of(budgets: Iterable[Budget], now: datetime | None = None, *, both: bool = False) -> dict[int, Use]:
    return source().use_of(budgets, now, both=both)


def member_holds(team: Team, member: User) -> Decimal:
    return source().member_holds(team, member)


def queue_jobs(request: AuthenticatedHttpRequest, queue_id: int) -> dict[str, Any]:
    return source().queue_jobs(request, queue_id)
