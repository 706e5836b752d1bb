"""Sign-in lockouts: a client address or a username with too many failed sign-ins is refused on every way in.

django-axes keeps the count. Every way in checks a password through ``django.contrib.auth.authenticate`` with
the request: the sign-in page, the admin's, the API's token endpoint, and any backend added after them (an
identity provider's callback). Axes' backend, first in ``AUTHENTICATION_BACKENDS``, refuses a locked-out
client before any password is checked, and axes' middleware answers the refusal with ``lockout_response``.

Failures are counted per client address (``common.client``: X-Forwarded-For changes it only where a trusted
proxy sets the header) and per username, each on its own: ``SIGNIN_FAILURE_LIMIT`` failures from one address,
whatever the usernames, or for one username, from whatever addresses, lock it out until
``SIGNIN_COOLOFF_MINUTES`` have passed without another try. A try while locked out counts as a failure too,
so the wait starts again and ``Retry-After`` is the whole cool-off. A successful sign-in does not clear the
count: otherwise anyone with an account could sign into it between guesses at another one's password.
"""

from __future__ import annotations

import math
from http import HTTPStatus
from typing import Any

from axes.helpers import get_client_username, get_cool_off
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import render

from portal.api.errors import error_body


def lockout_parameters(request: HttpRequest, credentials: dict[str, Any] | None = None) -> list[str]:
    """Count by address and by username; by address alone when no username is given (an identity provider's
    callback carries none), or all such sign-ins would share one count and lock each other out."""
    return ["ip_address", "username"] if get_client_username(request, credentials) else ["ip_address"]


def retry_after(request: HttpRequest) -> int:
    """Seconds until a locked-out client may try again."""
    wait = get_cool_off(request)
    return math.ceil(wait.total_seconds()) if wait is not None else 0


def message(seconds: int) -> str:
    minutes = max(1, math.ceil(seconds / 60))
    return (
        "Too many failed sign-ins from this address or for this username. "
        f"Try again in {minutes} minute{'s' if minutes != 1 else ''}."
    )


def lockout_response(
    request: HttpRequest, original_response: HttpResponse | None = None, credentials: dict[str, Any] | None = None
) -> HttpResponse:
    """429 with Retry-After: in the API's error shape under /api/, else a page saying when to come back."""
    seconds = retry_after(request)
    text = message(seconds)
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
