"""Who wants to be told what, and how: each user's choices over their team's defaults over the built-in ones.

A user's ``Preference`` names, per event, the channels they chose (an empty list: not at all); an event they
left out follows their team's defaults (set by its leads), and one the team left out too follows the built-in
default (``events.EVENTS``). The webhook is the user's own URL, else the team's; the hours of waiting likewise.
Changes are validated as a whole: a ``ValidationError`` names every bad field and nothing is written.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from django.core.exceptions import ValidationError
from django.db import transaction
from django.utils import timezone

from common import webhooks
from notifications.events import DEFAULT_WAIT_HOURS, EVENTS, MAX_WAIT_HOURS
from notifications.models import Channel, Preference
from tenancy import policy
from tenancy.actions import audit
from tenancy.models import Team

if TYPE_CHECKING:
    from django.contrib.auth.models import User
    from django.http import HttpRequest

#: The permission a lead holds over their team (``tenancy/policy.py``).
SET_DEFAULTS = "notification.defaults.set"


@dataclass(frozen=True)
class Resolved:
    """What one user wants for jobs of one team: channels per event, the webhook and the hours of waiting."""

    events: dict[str, frozenset[Channel]]
    webhook_url: str
    wait_hours: int

    def channels(self, code: str) -> frozenset[Channel]:
        return self.events.get(code, frozenset())


#: The channels' codes (``Channel.values`` builds its list at each call).
CHANNELS = {c.value: c for c in Channel}


def _channels(value: list[str]) -> frozenset[Channel]:
    return frozenset(CHANNELS[c] for c in value if c in CHANNELS)


def resolve(own: Preference | None, team: Preference | None) -> Resolved:
    """The user's choices (``own``) over their team's defaults (``team``) over the built-in ones."""
    rows = [row for row in (own, team) if row is not None]
    events = {}
    for code, kind in EVENTS.items():
        chosen = next((row.events[code] for row in rows if isinstance(row.events.get(code), list)), None)
        events[code] = kind.builtin if chosen is None else _channels(chosen)
    url = next((row.webhook_url for row in rows if row.webhook_url), "")
    hours = next((row.wait_hours for row in rows if row.wait_hours is not None), DEFAULT_WAIT_HOURS)
    return Resolved(events, url, hours)


class Book:
    """Preferences read once per user and per team, for a round that resolves many jobs' submitters."""

    def __init__(self) -> None:
        self.users: dict[int, Preference | None] = {}
        self.teams: dict[int | None, Preference | None] = {None: None}
        self.resolved: dict[tuple[int, int | None], Resolved] = {}

    def load(self, user_ids: set[int], team_ids: set[int]) -> None:
        for user_id in user_ids - self.users.keys():
            self.users[user_id] = None
        for team_id in team_ids - self.teams.keys():
            self.teams[team_id] = None
        for row in Preference.objects.filter(user__in=user_ids):
            self.users[row.user_id] = row  # type: ignore[index]
        for row in Preference.objects.filter(team__in=team_ids):
            self.teams[row.team_id] = row

    def of(self, user_id: int, team_id: int | None) -> Resolved:
        if (user_id, team_id) not in self.resolved:
            if user_id not in self.users or team_id not in self.teams:
                self.load({user_id}, {team_id} if team_id is not None else set())
            self.resolved[user_id, team_id] = resolve(self.users[user_id], self.teams[team_id])
        return self.resolved[user_id, team_id]


def for_user(user: User, team: Team | None) -> Resolved:
    """What ``user`` wants for jobs of ``team`` (None: their own choices over the built-in defaults)."""
    book = Book()
    return book.of(user.pk, team.pk if team is not None else None)


def home_team(user: User) -> Team | None:
    """The team whose defaults a user's page shows (researchers and leads belong to one)."""
    return Team.objects.filter(memberships__user=user).order_by("pk").first()


# --- changes --------------------------------------------------------------------------------------------------


def _check_events(value: Any, errors: dict[str, str]) -> dict[str, list[str]]:
    """``{code: [channels]}``; a code given as null (or left out) follows the default."""
    if value is None:
        return {}
    if not isinstance(value, dict):
        errors["events"] = "An object of event codes, each a list of channels (email, webhook) or null."
        return {}
    unknown = sorted(str(code) for code in value if code not in EVENTS)
    if unknown:
        errors["events"] = f"Unknown event: {', '.join(unknown)}. Known: {', '.join(EVENTS)}."
        return {}
    result: dict[str, list[str]] = {}
    for code, channels in value.items():
        if channels is None:
            continue
        if not isinstance(channels, list) or not all(isinstance(c, str) and c in CHANNELS for c in channels):
            errors["events"] = f"{code}: a list of channels, each one of {', '.join(Channel.values)}."
            return {}
        result[code] = sorted(set(channels))
    return result


def _check_hours(value: Any, errors: dict[str, str]) -> int | None:
    if value is None or value == "":
        return None
    if isinstance(value, bool) or not isinstance(value, int | str):
        errors["wait_hours"] = f"A whole number of hours from 1 to {MAX_WAIT_HOURS}."
        return None
    try:
        hours = int(value)
    except ValueError:
        hours = 0
    if not 1 <= hours <= MAX_WAIT_HOURS:
        errors["wait_hours"] = f"A whole number of hours from 1 to {MAX_WAIT_HOURS}."
        return None
    return hours


def _check(events: Any, webhook_url: Any, wait_hours: Any) -> dict[str, Any]:
    errors: dict[str, str] = {}
    chosen = _check_events(events, errors)
    hours = _check_hours(wait_hours, errors)
    url = ""
    try:
        url = webhooks.check_url(webhook_url)
    except ValidationError as error:
        errors["webhook_url"] = error.messages[0]
    if not errors and not url and any(Channel.WEBHOOK in c for c in chosen.values()):
        errors["webhook_url"] = "Give a webhook URL to be told by webhook."
    if errors:
        raise ValidationError(errors)
    return {"events": chosen, "wait_hours": hours, "webhook_url": url}


def set_own(actor: User, *, events: Any = None, webhook_url: Any = "", wait_hours: Any = None) -> Preference:
    """Set ``actor``'s own choices (replacing them whole)."""
    new = _check(events, webhook_url, wait_hours)
    with transaction.atomic():
        row, _ = Preference.objects.update_or_create(user=actor, defaults={**new, "updated_at": timezone.now()})
    return row


def set_team_defaults(
    actor: User,
    team: Team,
    *,
    events: Any = None,
    webhook_url: Any = "",
    wait_hours: Any = None,
    http: HttpRequest | None = None,
) -> Preference:
    """Set ``team``'s defaults (replacing them whole): its leads and admins (``SET_DEFAULTS``). Audited; the
    log keeps the webhook's host, not its URL."""
    policy.require(actor, SET_DEFAULTS, team)
    new = _check(events, webhook_url, wait_hours)
    with transaction.atomic():
        row, _ = Preference.objects.update_or_create(team=team, defaults={**new, "updated_at": timezone.now()})
        audit.record(
            "notification.defaults_changed",
            actor=actor,
            target=team,
            organization=team.organization,
            changes={**new, "webhook_url": webhooks.host_of(new["webhook_url"])},
            request=http,
        )
    return row


def team_defaults(team: Team) -> Preference | None:
    return Preference.objects.filter(team=team).first()


def own(user: User) -> Preference | None:
    return Preference.objects.filter(user=user).first()
