"""The notifications API: one's own choices, a team's defaults (its leads), one's notifications, a test.
Bad input is a 400 naming each field, with nothing written; another team's defaults are a 404."""

from __future__ import annotations

from typing import Any

import pytest
from django.core import mail
from django.utils import timezone

from notifications.models import Notification, Preference
from tenancy.models import AuditLog
from tests.conftest import Hook, World

PREFS = "/api/v1/notifications/preferences/"


def defaults_url(world: World, team: str = "vision") -> str:
    return f"/api/v1/notifications/teams/{world.teams[team].pk}/defaults/"


def test_own_choices_over_the_teams_defaults_over_the_built_in(world: World, api: Any) -> None:
    alice, lena = api("alice"), api("lena")
    body = alice.get(PREFS).json()
    assert body["team"] == "vision"
    assert body["events"] == {}
    assert body["effective"]["events"]["failed"] == ["email"]
    assert body["effective"]["events"]["succeeded"] == []
    assert body["effective"]["wait_hours"] == 24

    answer = lena.put(defaults_url(world), {"events": {"succeeded": ["email"], "failed": []}, "wait_hours": 8})
    assert answer.status_code == 200, answer.json()
    answer = alice.put(PREFS, {"events": {"failed": ["email"]}, "wait_hours": None})
    assert answer.status_code == 200, answer.json()
    effective = answer.json()["effective"]
    assert effective["events"]["failed"] == ["email"]  # hers
    assert effective["events"]["succeeded"] == ["email"]  # the team's
    assert effective["events"]["preempted"] == ["email"]  # built in
    assert effective["wait_hours"] == 8
    assert AuditLog.objects.filter(action="notification.defaults_changed").count() == 1


@pytest.mark.parametrize(
    ("payload", "fields"),
    [
        ({"events": {"exploded": ["email"]}}, {"events"}),
        ({"events": {"failed": ["pigeon"]}}, {"events"}),
        ({"events": {"failed": "email"}}, {"events"}),
        ({"events": ["failed"]}, {"events"}),
        ({"wait_hours": 0}, {"wait_hours"}),
        ({"wait_hours": 100000}, {"wait_hours"}),
        ({"wait_hours": "soon"}, {"wait_hours"}),
        ({"webhook_url": "ftp://example.org/x"}, {"webhook_url"}),
        ({"webhook_url": "http://192.168.1.10/hook", "wait_hours": -1}, {"webhook_url", "wait_hours"}),
        ({"events": {"failed": ["webhook"]}}, {"webhook_url"}),
        ({"mute": True}, {"mute"}),
    ],
)
def test_bad_choices_name_each_field_and_write_nothing(
    world: World, api: Any, payload: dict[str, Any], fields: set[str]
) -> None:
    answer = api("alice").put(PREFS, payload)
    assert answer.status_code == 400, answer.json()
    assert set(answer.json()["error"]["fields"]) == fields
    assert not Preference.objects.exists()


def test_a_private_webhook_is_refused_with_the_policys_words(world: World, api: Any, settings: Any) -> None:
    settings.WEBHOOKS_ALLOW_PRIVATE = False
    answer = api("alice").put(PREFS, {"events": {"failed": ["webhook"]}, "webhook_url": "http://127.0.0.1:8080/x"})
    assert answer.status_code == 400
    assert "loopback" in answer.json()["error"]["fields"]["webhook_url"][0]
    assert not Preference.objects.exists()


def test_team_defaults_are_set_by_its_leads_and_hidden_from_other_organizations(world: World, api: Any) -> None:
    url, body = defaults_url(world), {"events": {"succeeded": ["email"]}, "webhook_url": "https://hooks.example/T1"}
    assert api("alice").put(url, body).status_code == 403  # a researcher of the team
    assert api("bob").put(url, body).status_code == 404  # another team's researcher does not see it
    assert api("trent").put(url, body).status_code == 404  # another organization's lead
    assert api("mallory").get(url).status_code == 404  # another organization's admin
    assert not Preference.objects.exists()
    assert api("lena").put(url, body).status_code == 200
    assert api("adam").put(url, body).status_code == 200  # the organization's admin
    # The team's webhook may be a secret: only who may set it reads it.
    assert api("lena").get(url).json()["webhook_url"] == "https://hooks.example/T1"
    seen = api("alice").get(url).json()
    assert (seen["webhook_url"], seen["events"]) == (None, {"succeeded": ["email"]})
    assert api("alice").put(PREFS, {"events": {}}).status_code == 200


def test_each_user_lists_only_their_own_notifications(world: World, api: Any) -> None:
    now = timezone.now()
    for name in ("alice", "bob"):
        Notification.objects.create(
            user=world.users[name], event="test", key=f"test:{name}", channel="email",
            subject=f"for {name}", message="hello", created_at=now,
        )  # fmt: skip
    rows = api("alice").get("/api/v1/notifications/").json()["results"]
    assert [(r["subject"], r["state"]) for r in rows] == [("for alice", "pending")]


def test_a_test_notification_goes_by_every_channel_the_user_has(
    world: World, api: Any, hook: tuple[str, type[Hook]], django_capture_on_commit_callbacks: Any
) -> None:
    url, receiver = hook
    alice = api("alice")
    assert alice.put(PREFS, {"webhook_url": url}).status_code == 200
    with django_capture_on_commit_callbacks(execute=True):
        answer = alice.post("/api/v1/notifications/test/")
    assert answer.status_code == 201
    assert sorted(n["channel"] for n in answer.json()) == ["email", "webhook"]
    (message,) = mail.outbox
    assert (message.subject, message.to) == ("[Quartermaster] Test notification", ["alice@demo.example"])
    ((headers, body),) = receiver.received
    assert body["text"].startswith("A test notification from Quartermaster to alice")
    assert headers["Idempotency-Key"].startswith("quartermaster-notification-")
    states = {r["channel"]: r["state"] for r in alice.get("/api/v1/notifications/").json()["results"]}
    assert states == {"email": "sent", "webhook": "sent"}
