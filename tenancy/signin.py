"""Sign-in lockouts: too many failed sign-ins from a client address, or for a username from that address, and
every way in refuses it for a while; guesses at one username from many addresses are slowed down, never locked
out.

django-axes keeps the count. Every way in checks a password through ``django.contrib.auth.authenticate`` with
the request: the sign-in page, the admin's, the API's token endpoint, and any backend added after them (an
identity provider's callback). Axes' backend, first in ``AUTHENTICATION_BACKENDS``, refuses a locked-out
client before any password is checked, and axes' middleware answers the refusal with ``lockout_response``.

Failures are counted per client address (``common.client``: X-Forwarded-For changes it only where a trusted
proxy sets the header), and per username *at* that address: ``SIGNIN_FAILURE_LIMIT`` failures from one
address, whatever the usernames, or for one username from one address, lock that address out (for everyone,
or for that username) until ``SIGNIN_COOLOFF_MINUTES`` have passed without another try. A try while locked out
counts as a failure too, so the wait starts again and ``Retry-After`` is the whole cool-off. A successful
sign-in does not clear the count: otherwise anyone with an account could sign into it between guesses at another
one's password.

A username is never locked out as such: that let anyone shut out any named user, an admin included, for as
long as they kept guessing. Instead, once a username has had ``SIGNIN_FAILURE_LIMIT`` failures from all
addresses together within the cool-off, each further try for it waits 1 s after the last failure, then 2, 4…
up to ``MAX_WAIT`` (``UsernameBackoff``): guessing from many addresses gains a few tries a minute, while the
user, from an address of their own, signs in after at most a minute. Nothing here touches a session or an API
token already held: only signing in is refused.
"""

from __future__ import annotations

import math
from datetime import datetime
from http import HTTPStatus
from typing import Any

from axes.helpers import get_client_username, get_cool_off
from axes.models import AccessAttempt
from django.conf import settings
from django.core.exceptions import PermissionDenied
from django.db.models import Max, Sum
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import render
from django.utils import timezone

from common.api.errors import error_body

#: The longest a username's guesses from many addresses wait between tries, in seconds.
MAX_WAIT = 60


def lockout_parameters(request: HttpRequest, credentials: dict[str, Any] | None = None) -> list[str | list[str]]:
    """Count by address, and by username at that address; by address alone when no username is given (an
    identity provider's callback carries none), or all such sign-ins would share one count."""
    if get_client_username(request, credentials):
        return ["ip_address", ["username", "ip_address"]]
    return ["ip_address"]


def username_wait(username: str, now: datetime) -> int:
    """Seconds before ``username`` may be tried again: 0 below ``SIGNIN_FAILURE_LIMIT`` failures (from every
    address, within the cool-off), then 1, 2, 4… up to ``MAX_WAIT`` counted from the last failure."""
    recent = AccessAttempt.objects.filter(username=username, attempt_time__gte=now - settings.AXES_COOLOFF_TIME)
    found = recent.aggregate(failures=Sum("failures_since_start"), last=Max("attempt_time"))
    over = int(found["failures"] or 0) - int(settings.AXES_FAILURE_LIMIT) + 1
    last: datetime | None = found["last"]
    if over <= 0 or last is None:
        return 0
    left = min(1 << min(over - 1, 16), MAX_WAIT) - (now - last).total_seconds()
    return max(0, math.ceil(left))


class UsernameBackoff:
    """Before any password is checked: a username tried too often from many addresses waits its turn. The
    refusal counts as a failure (of that address, and of the username there) and is answered as a lockout,
    a 429 with the wait as ``Retry-After``. It authenticates nobody and has no ``get_user``: sessions are never
    its (Django picks the first backend with one to log a user in by hand)."""

    def authenticate(self, request: HttpRequest | None, username: str | None = None, **kwargs: Any) -> None:
        if request is None or not username:
            return None
        wait = username_wait(username, timezone.now())
        if wait:
            request.axes_locked_out = True  # type: ignore[attr-defined]
            request.qm_username_wait = wait  # type: ignore[attr-defined]
            raise PermissionDenied
        return None


def retry_after(request: HttpRequest) -> int:
    """Seconds until a locked-out (or slowed-down) client may try again."""
    slowed: int = getattr(request, "qm_username_wait", 0)
    if slowed and getattr(request, "axes_failures_since_start", 0) < settings.AXES_FAILURE_LIMIT:
        return int(slowed)  # slowed down, and this try did not lock the address out as well
    wait = get_cool_off(request)
    return math.ceil(wait.total_seconds()) if wait is not None else 0


def message(seconds: int, *, slowed: bool = False) -> str:
    if slowed:
        return (
            "Too many failed sign-ins for this username, from many addresses. "
            f"Try again in {seconds} second{'s' if seconds != 1 else ''}."
        )
    minutes = max(1, math.ceil(seconds / 60))
    return (
        "Too many failed sign-ins from this address, or for this username from this address. "
        f"Try again in {minutes} minute{'s' if minutes != 1 else ''}."
    )


def lockout_response(
    request: HttpRequest, original_response: HttpResponse | None = None, credentials: dict[str, Any] | None = None
) -> HttpResponse:
    """429 with Retry-After: in the API's error shape under /api/, else a page saying when to come back."""
    seconds = retry_after(request)
    text = message(seconds, slowed=seconds == getattr(request, "qm_username_wait", None))
    response: HttpResponse
    if request.path.startswith("/api/"):
        response = JsonResponse(
            error_body(HTTPStatus.TOO_MANY_REQUESTS, "locked_out", text), status=HTTPStatus.TOO_MANY_REQUESTS
        )
    else:
        response = render(
            request, "registration/locked_out.html", {"message": text}, status=HTTPStatus.TOO_MANY_REQUESTS
        )
    response["Retry-After"] = str(seconds)
    return response
