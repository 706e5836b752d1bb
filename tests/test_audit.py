"""The audit log: one helper records who did what to which object, from where; admins read it."""

from __future__ import annotations

from django.test import Client

from tenancy import actions, audit
from tenancy.models import AuditLog
from tests.conftest import World, api_client


def test_record_captures_actor_target_origin_and_organization(world: World, rf) -> None:  # type: ignore[no-untyped-def]
    request = rf.post("/x", REMOTE_ADDR="10.1.2.3", HTTP_USER_AGENT="qm-cli/1.0", HTTP_X_FORWARDED_FOR="6.6.6.6")
    team = world.teams["vision"]
    entry = audit.record(
        "team.renamed",
        actor=world.users["adam"],
        target=team,
        changes={"name": ["A", "B"]},
        reason="typo",
        request=request,
    )
    entry.refresh_from_db()
    assert entry.actor == world.users["adam"]
    assert entry.organization == world.org
    assert entry.target_type is not None
    assert (entry.target_type.model, entry.target_id, entry.target_repr) == ("team", str(team.pk), "Vision")
    # X-Forwarded-For is not believed unless the deployment says a trusted proxy sets it.
    assert (entry.ip_address, entry.user_agent) == ("10.1.2.3", "qm-cli/1.0")
    assert (entry.changes, entry.reason) == ({"name": ["A", "B"]}, "typo")


def test_forwarded_for_is_used_behind_a_trusted_proxy(world: World, rf, settings) -> None:  # type: ignore[no-untyped-def]
    settings.TRUST_X_FORWARDED_FOR = True
    request = rf.get("/", REMOTE_ADDR="127.0.0.1", HTTP_X_FORWARDED_FOR="203.0.113.9, 127.0.0.1")
    assert audit.record("x.y", actor=None, request=request).ip_address == "203.0.113.9"


def test_every_privileged_action_is_recorded_once(world: World) -> None:
    adam, lena = world.users["adam"], world.users["lena"]
    team = actions.create_team(adam, world.org, name="Speech")
    project = actions.create_project(lena, world.teams["vision"], name="Tracking")
    membership = actions.add_member(adam, world.org, username="bob", role="researcher", team=team)
    actions.change_role(adam, membership, role="lead", reason="owns speech")
    actions.remove_member(adam, membership)
    token, _ = actions.issue_token(lena, name="cli")
    actions.revoke_token(lena, token)
    recorded = list(AuditLog.objects.order_by("id").values_list("action", "actor_name", "target_repr"))
    assert recorded == [
        ("team.created", "adam", "Speech"),
        ("project.created", "lena", str(project)),
        ("membership.created", "adam", "bob — Researcher of Speech"),
        ("membership.role_changed", "adam", "bob — Team lead of Speech"),
        ("membership.removed", "adam", "bob — Team lead of Speech"),
        ("token.created", "lena", str(token)),
        ("token.revoked", "lena", str(token)),
    ]
    assert set(AuditLog.objects.values_list("organization", flat=True)) == {world.org.pk}


def test_sign_in_sign_out_and_refusals_are_recorded(world: World) -> None:
    client = Client(REMOTE_ADDR="192.0.2.7")
    client.post("/login/", {"username": "alice", "password": "nope"})
    client.post("/login/", {"username": "alice", "password": "demo"})
    client.post("/logout/")
    entries = list(AuditLog.objects.order_by("id").values_list("action", "actor_name", "ip_address"))
    assert entries == [
        ("auth.login_failed", "system", "192.0.2.7"),
        ("auth.login", "alice", "192.0.2.7"),
        ("auth.logout", "alice", "192.0.2.7"),
    ]


def test_admins_read_the_log_through_the_api_with_filters(world: World) -> None:
    actions.create_project(world.users["lena"], world.teams["vision"], name="Tracking")
    audit.record("secret.rival", actor=world.users["mallory"], organization=world.other_org)
    adam = api_client(world.users["adam"])
    actions_seen = [e["action"] for e in adam.get("/api/v1/audit-log/?page_size=500").json()["results"]]
    assert "project.created" in actions_seen
    assert "secret.rival" not in actions_seen
    filtered = adam.get("/api/v1/audit-log/?action=project").json()["results"]
    assert [e["action"] for e in filtered] == ["project.created"]
    assert filtered[0]["target_type"] == "portal.project"
    assert api_client(world.users["lena"]).get("/api/v1/audit-log/").json()["count"] == 0
    assert api_client(world.users["mallory"]).get("/api/v1/audit-log/?action=project").json()["count"] == 0


def test_audit_page_lists_with_bounded_queries(world: World, django_assert_max_num_queries) -> None:  # type: ignore[no-untyped-def]
    for i in range(120):
        audit.record(f"bulk.entry{i}", actor=world.users["adam"], target=world.teams["vision"])
    client = Client()
    client.force_login(world.users["adam"])
    with django_assert_max_num_queries(12):
        response = client.get("/audit/")
    assert response.status_code == 200
    assert len(response.context["page"].object_list) == 50
    assert "page 1 of 3" in response.content.decode()
