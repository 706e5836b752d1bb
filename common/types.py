"""Types shared by views and actions."""

from __future__ import annotations

from django.contrib.auth.models import AnonymousUser, User
from django.http import HttpRequest

# Who may ask for tenant data: anybody, signed in or not; `for_user` answers nothing to the anonymous.
AnyUser = User | AnonymousUser


class AuthenticatedHttpRequest(HttpRequest):
    """The request of a view behind `login_required`: its user is a real account."""

    user: User
