"""Sign-in lockouts, on every way in (the sign-in page, the admin's, the API's token endpoint): too many wrong
passwords from one client address, or for one username from one address, and even the right password is
refused there, with 429 and Retry-After, until the cool-off has passed; guesses at one username from many
addresses slow it down (1 s, 2, 4… at most a minute) but never lock its owner out, nor end their sessions or
tokens. X-Forwarded-For changes the address only behind a trusted proxy."""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest
from axes.models import AccessAttempt
from django.contrib.auth import authenticate
from django.contrib.auth.models import User
from django.db.models import F
from django.test import Client, RequestFactory
from django.utils import timezone
from rest_framework.test import APIClient

from common.client import client_address
from tenancy import actions as tenancy_actions
from tenancy.models import ApiToken, AuditLog
from tests.portal.test_settings_env import manage

LIMIT = 4
PASSWORD = "correct horse"
COOL_OFF = 15 * 60


def page(username: str, password: str, **meta: Any) -> Any:
    return Client().post("/login/", {"username": username, "password": password}, **meta)


def admin(username: str, password: str, **meta: Any) -> Any:
    return Client().post("/admin/login/", {"username": username, "password": password, "next": "/admin/"}, **meta)


def api(username: str, password: str, **meta: Any) -> Any:
    body = {"username": username, "password": password, "name": "laptop"}
    return APIClient().post("/api/v1/auth/token/", body, format="json", **meta)


SignIn = Callable[..., Any]
# Each way in, with its answer to the right password and to a wrong one.
WAYS: dict[str, tuple[SignIn, int, int]] = {
    "page": (page, 302, 400),
    "admin": (admin, 302, 200),
    "api": (api, 201, 400),
}


@pytest.fixture(autouse=True)
def users(db: Any, settings: Any) -> dict[str, User]:
    settings.AXES_FAILURE_LIMIT = LIMIT
    return {
        "root": User.objects.create_superuser("root", password=PASSWORD),
        "ops": User.objects.create_superuser("ops", password=PASSWORD),
    }


def assert_locked_out(response: Any, way: str) -> None:
    assert response.status_code == 429, response.content
    assert response["Retry-After"] == str(COOL_OFF)
    if way == "api":
        error = response.json()["error"]
        assert (error["status"], error["code"]) == (429, "locked_out")
        assert error["message"] == (
            "Too many failed sign-ins from this address, or for this username from this address. "
            "Try again in 15 minutes."
        )
    else:
        assert "Too many failed sign-ins" in response.content.decode()
        assert "_auth_user_id" not in response.wsgi_request.session


@pytest.mark.parametrize("way", WAYS)
def test_after_too_many_wrong_passwords_even_the_right_one_is_refused(way: str) -> None:
    sign_in, ok, wrong = WAYS[way]
    for _ in range(LIMIT - 1):
        assert sign_in("root", "guess").status_code == wrong
    # One short of the limit, the right password still works.
    assert sign_in("root", PASSWORD).status_code == ok
    assert sign_in("root", "guess").status_code == 429
    tokens = ApiToken.objects.count()
    assert_locked_out(sign_in("root", PASSWORD), way)
    assert ApiToken.objects.count() == tokens
    # Refused sign-ins are still in the audit log, from the client's address.
    refused = AuditLog.objects.filter(action="auth.login_failed")
    assert refused.count() == LIMIT + 1
    assert set(refused.values_list("ip_address", flat=True)) == {"127.0.0.1"}


@pytest.mark.parametrize("way", WAYS)
def test_changing_x_forwarded_for_does_not_make_another_client(way: str) -> None:
    sign_in, _, wrong = WAYS[way]
    for n in range(LIMIT):
        # A different name each time, so only the address can count them.
        response = sign_in(f"guess{n}", "guess", HTTP_X_FORWARDED_FOR=f"198.51.100.{n}")
        assert response.status_code == (wrong if n < LIMIT - 1 else 429)
    assert_locked_out(sign_in("ops", PASSWORD, HTTP_X_FORWARDED_FOR="198.51.100.200"), way)
    # Another client (another address) is not held up.
    assert sign_in("ops", PASSWORD, REMOTE_ADDR="192.0.2.7").status_code == WAYS[way][1]


def test_behind_a_trusted_proxy_its_forwarded_address_is_the_client(settings: Any) -> None:
    settings.TRUST_X_FORWARDED_FOR = True
    for n in range(LIMIT):
        api(f"guess{n}", "guess", HTTP_X_FORWARDED_FOR="203.0.113.9")
    assert_locked_out(api("ops", PASSWORD, HTTP_X_FORWARDED_FOR="203.0.113.9"), "api")
    # The proxy's own address is shared by every client behind it; only the forwarded one is locked out.
    assert api("ops", PASSWORD, HTTP_X_FORWARDED_FOR="203.0.113.10").status_code == 201
    # One definition of the address: the lockout's count and the audit log name the same one.
    assert set(AccessAttempt.objects.values_list("ip_address", flat=True)) == {"203.0.113.9"}
    refused = AuditLog.objects.filter(action="auth.login_failed").values_list("ip_address", flat=True)
    assert set(refused) == {"203.0.113.9"}
    # A header that holds no address leaves the proxy's.
    assert api("ops", "guess", HTTP_X_FORWARDED_FOR="not-an-address").status_code == 400
    assert AuditLog.objects.filter(action="auth.login_failed").order_by("pk").last().ip_address == "127.0.0.1"  # type: ignore[union-attr]


@pytest.mark.parametrize("way", WAYS)
def test_guesses_at_a_username_from_many_addresses_slow_it_down_and_lock_nobody_out(way: str) -> None:
    sign_in, ok, wrong = WAYS[way]
    session = Client()
    session.force_login(User.objects.get(username="root"))
    _, raw = tenancy_actions.issue_token(User.objects.get(username="root"), name="held")
    for n in range(LIMIT):
        assert sign_in("root", "guess", REMOTE_ADDR=f"192.0.2.{n}").status_code == wrong
    # The limit reached from many addresses: each further try waits 1 s, then 2, 4... after the last failure
    # (a refused try counts too). Counted from this moment: on a busy machine the guesses above may have
    # taken longer than the first wait.
    # (A second is added so that a slow request still finds the wait running: 1 or 2 s are left.)
    AccessAttempt.objects.update(attempt_time=timezone.now() + timedelta(seconds=1))
    slowed = sign_in("root", "guess", REMOTE_ADDR="192.0.2.99")
    assert slowed.status_code == 429
    assert slowed["Retry-After"] in ("1", "2")
    assert "for this username, from many addresses" in slowed.content.decode()
    waits = []
    for n in range(6):
        back_in_time(60)  # the wait has passed: one more guess is let through, and counted
        assert sign_in("root", "guess", REMOTE_ADDR=f"198.51.100.{n}").status_code == wrong
        AccessAttempt.objects.update(attempt_time=timezone.now())  # the wait counts from now, however busy
        waits.append(int(sign_in("root", PASSWORD, REMOTE_ADDR=f"198.51.100.{n}")["Retry-After"]))
    # Doubling with each failure, at most a minute (less the second or two a busy machine takes to answer).
    expected = [4, 16, 60, 60, 60, 60]
    assert all(want - 2 <= got <= want for got, want in zip(waits, expected, strict=True)), waits
    # Never a lockout: its owner, from an address of their own, signs in once the wait has passed...
    back_in_time(60)
    assert sign_in("root", PASSWORD, REMOTE_ADDR="203.0.113.5").status_code == ok
    # ... and what they held all along kept working: their session and their API token.
    assert session.get("/admin/").status_code == 200
    assert APIClient(HTTP_AUTHORIZATION=f"Bearer {raw}").get("/api/v1/me/").status_code == 200
    # Those addresses each failed once or twice: another user signs in from them.
    assert sign_in("ops", PASSWORD, REMOTE_ADDR="192.0.2.0").status_code == ok


def test_a_username_is_locked_out_only_at_the_address_that_guessed() -> None:
    for _ in range(LIMIT):
        api("root", "guess", REMOTE_ADDR="192.0.2.66")
    assert_locked_out(api("root", PASSWORD, REMOTE_ADDR="192.0.2.66"), "api")
    back_in_time(60)  # past the username's wait
    assert api("root", PASSWORD, REMOTE_ADDR="192.0.2.77").status_code == 201


def back_in_time(seconds: int) -> None:
    """As if every failure had been ``seconds`` earlier."""
    AccessAttempt.objects.update(attempt_time=F("attempt_time") - timedelta(seconds=seconds))


def test_the_lockout_ends_after_the_cool_off() -> None:
    for _ in range(LIMIT):
        api("root", "guess")
    assert_locked_out(api("root", PASSWORD), "api")
    # An attempt while locked out starts the wait again: the last one is what the cool-off counts from.
    back_in_time(COOL_OFF - 60)
    assert_locked_out(api("root", PASSWORD), "api")
    back_in_time(COOL_OFF + 1)
    assert api("root", PASSWORD).status_code == 201
    assert page("root", PASSWORD).status_code == 302


def test_sign_ins_without_a_username_are_counted_per_address_only() -> None:
    """An identity provider's callback authenticates with a code, not a username: its failures lock out the
    address they came from, not every such sign-in."""
    for _ in range(LIMIT):
        assert authenticate(RequestFactory().get("/oidc/callback/", REMOTE_ADDR="192.0.2.1"), code="bad") is None
    assert AccessAttempt.objects.get().username is None
    assert_locked_out(page("root", PASSWORD, REMOTE_ADDR="192.0.2.1"), "page")
    assert authenticate(RequestFactory().get("/oidc/callback/", REMOTE_ADDR="192.0.2.2"), code="bad") is None
    assert page("root", PASSWORD, REMOTE_ADDR="192.0.2.2").status_code == 302


def test_the_limit_and_cool_off_come_from_the_environment() -> None:
    code = "from django.conf import settings as s; print(s.AXES_FAILURE_LIMIT, s.AXES_COOLOFF_TIME)"
    shown = manage("shell", "--no-imports", "-c", code, SIGNIN_FAILURE_LIMIT="3", SIGNIN_COOLOFF_MINUTES="90")
    assert shown.returncode == 0, shown.stderr
    assert shown.stdout.split() == ["3", "1:30:00"]
    refused = manage("check", SIGNIN_FAILURE_LIMIT="0")
    assert refused.returncode != 0
    assert "SIGNIN_FAILURE_LIMIT=0 must be at least 1" in refused.stderr
    refused = manage("check", SIGNIN_COOLOFF_MINUTES="soon")
    assert "SIGNIN_COOLOFF_MINUTES='soon' is not an integer" in refused.stderr


def test_the_client_address_is_one_canonical_address(rf: RequestFactory, settings: Any) -> None:
    assert client_address(rf.get("/", REMOTE_ADDR="::ffff:192.0.2.1")) == "192.0.2.1"
    assert client_address(rf.get("/", REMOTE_ADDR="192.0.2.1", HTTP_X_FORWARDED_FOR="198.51.100.1")) == "192.0.2.1"
    settings.TRUST_X_FORWARDED_FOR = True
    forwarded = rf.get("/", REMOTE_ADDR="10.0.0.1", HTTP_X_FORWARDED_FOR="2001:DB8::1, 10.0.0.2")
    assert client_address(forwarded) == "2001:db8::1"
