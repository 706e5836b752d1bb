"""The notification settings pages: a user's own (``/account/notifications/``, with a test and their recent
notifications) and a team's defaults (``/teams/<pk>/notifications/``, set by its leads)."""

from __future__ import annotations

from http import HTTPStatus

from django.contrib import messages
from django.core.exceptions import ValidationError
from django.http import HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.http import require_POST

from common.types import AuthenticatedHttpRequest
from common.web.forms import apply_errors
from notifications.actions import outbox, preferences
from notifications.events import DEFAULT_WAIT_HOURS, EVENTS
from notifications.models import Channel, Notification
from notifications.web.forms import ChoicesForm, word
from tenancy import policy
from tenancy.models import Team
from tenancy.scoping import Action

RECENT = 20


def settings_page(request: AuthenticatedHttpRequest) -> HttpResponse:
    team = preferences.home_team(request.user)
    defaults = preferences.resolve(None, preferences.team_defaults(team) if team else None)
    own = preferences.own(request.user)
    form = ChoicesForm(
        request.POST or None,
        initial=ChoicesForm.initial_from(own),
        defaults=defaults.events,
        default_hours=defaults.wait_hours,
    )
    status = HTTPStatus.OK
    if request.method == "POST":
        if form.is_valid():
            try:
                preferences.set_own(request.user, **form.choices())
            except ValidationError as exc:
                apply_errors(form, exc)
            else:
                messages.success(request, "Your notification settings are saved.")
                return redirect("notification-settings")
        status = HTTPStatus.BAD_REQUEST
    effective = preferences.for_user(request.user, team)
    recent = list(Notification.objects.filter(user=request.user).select_related("job")[:RECENT])
    return render(
        request,
        "notifications/settings.html",
        {
            "form": form,
            "team": team,
            "effective": [(EVENTS[c].label, word(ch)) for c, ch in effective.events.items()],
            "effective_hours": effective.wait_hours,
            "recent": [(n, outbox.state(n)) for n in recent],
            "has_email": bool(request.user.email),
            "has_webhook": bool(effective.webhook_url),
        },
        status=status,
    )


@require_POST
def send_test(request: AuthenticatedHttpRequest) -> HttpResponse:
    made = outbox.send_test(request.user)
    if made:
        ways = " and ".join(Channel(n.channel).label.lower() for n in made)
        messages.success(request, f"A test notification is on its way by {ways}; its state is below.")
    else:
        messages.error(request, "You have no e-mail address and no webhook: there is nowhere to send a test.")
    return redirect("notification-settings")


def team_defaults(request: AuthenticatedHttpRequest, pk: int) -> HttpResponse:
    team = get_object_or_404(Team.objects.for_user(request.user, Action.VIEW), pk=pk)
    can_set = policy.can(request.user, preferences.SET_DEFAULTS, team)
    row = preferences.team_defaults(team)
    builtin = preferences.resolve(None, None)
    form = ChoicesForm(
        request.POST or None,
        initial=ChoicesForm.initial_from(row) if can_set else {},  # the URL may be a secret
        defaults=builtin.events,
        default_hours=DEFAULT_WAIT_HOURS,
    )
    status = HTTPStatus.OK
    if request.method == "POST":
        policy.require(request.user, preferences.SET_DEFAULTS, team)
        if form.is_valid():
            try:
                preferences.set_team_defaults(request.user, team, http=request, **form.choices())
            except ValidationError as exc:
                apply_errors(form, exc)
            else:
                messages.success(request, f"The notification defaults of {team.name} are saved.")
                return redirect("team-notifications", pk=team.pk)
        status = HTTPStatus.BAD_REQUEST
    resolved = preferences.resolve(row, None)
    return render(
        request,
        "notifications/team_defaults.html",
        {
            "team": team,
            "form": form,
            "can_set": can_set,
            "effective": [(EVENTS[c].label, word(ch)) for c, ch in resolved.events.items()],
            "effective_hours": resolved.wait_hours,
            "has_webhook": bool(row and row.webhook_url),
        },
        status=status,
    )
