"""Types shared by views and actions."""

from __future__ import annotations

from django.contrib.auth.models import AnonymousUser, User
from django.http import HttpRequest

# Who may ask for tenant data: anybody, signed in or not; `for_user` answers nothing to the anonymous.
AnyUser = User | AnonymousUser


class AuthenticatedHttpRequest(HttpRequest):
    """The request of a page behind sign-in (every page not marked `login_not_required`:
    `portal.middleware.LoginRequired`): its user is a real account."""

    user: User
