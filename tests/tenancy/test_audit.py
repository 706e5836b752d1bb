"""The audit log: one helper records who did what to which object, from where; admins read it, in words, by
day, and as CSV; every job submission is in it."""

from __future__ import annotations

import csv
import io
import re
from datetime import UTC, datetime
from html import unescape

from django.test import Client

from tenancy import actions
from tenancy.actions import audit
from tenancy.models import AuditLog
from tests.conftest import World, api_client
from tests.scheduler.conftest import Fleet, fleet  # noqa: F401 - the fixture, for submissions


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


# --- the page reads like English, filters by day, exports CSV; submissions are recorded ----------------------


def admin_client(world: World) -> Client:
    client = Client()
    client.force_login(world.users["adam"])
    return client


def test_changes_read_as_field_old_new_lines_not_python(world: World) -> None:
    audit.record(
        "membership.role_changed",
        actor=world.users["adam"],
        target=world.teams["vision"],
        changes={"role": ["researcher", "lead"], "hard": [False, True], "limit": [None, "16"], "nodes": ["a", "b"]},
        reason="owns detection",
    )
    body = admin_client(world).get("/audit/?action=membership").content.decode()
    cell = re.search(r'<td data-testid="changes">(.*?)</td>', body, re.S)
    assert cell is not None
    lines = [unescape(line) for line in re.findall(r"<div>(.*?)</div>", cell.group(1))]
    assert lines == [
        "hard: no → yes",
        "limit: none → 16",
        "nodes: a, b",
        "role: researcher → lead",
        "<em>Reason: owns detection</em>",
    ]
    assert "Membership role changed" in body
    assert "{&#x27;" not in body
    assert "[&#x27;" not in body
    assert "None" not in cell.group(1)


def test_action_words() -> None:
    assert audit.action_words("job.submitted") == "Job submitted"
    assert audit.action_words("probe_token.revoked") == "Probe token revoked"
    assert audit.action_words("auth.login_failed") == "Sign-in failed"


def test_the_page_filters_by_days_picked_from_a_calendar(world: World) -> None:
    adam = world.users["adam"]
    for day in (1, 2, 3):
        entry = audit.record(f"test.day{day}", actor=adam, target=world.teams["vision"])
        AuditLog.objects.filter(pk=entry.pk).update(created_at=datetime(2026, 11, day, 23, 30, tzinfo=UTC))
    client = admin_client(world)
    page = client.get("/audit/").content.decode()
    assert 'type="date" name="since"' in page
    assert 'type="date" name="until"' in page

    def shown(query: str) -> list[str]:
        response = client.get(f"/audit/?{query}")
        assert response.status_code == 200
        return [entry.action for entry, _, _ in response.context["rows"] if entry.action.startswith("test.")]

    assert shown("since=2026-11-02") == ["test.day3", "test.day2"]
    assert shown("until=2026-11-02") == ["test.day2", "test.day1"]  # the day picked is included, to 23:59
    assert shown("since=2026-11-02&until=2026-11-02") == ["test.day2"]
    bad = client.get("/audit/?since=2026-13-45")
    assert bad.status_code == 400
    assert "Enter a valid date" in bad.content.decode()


def test_csv_export_has_the_page_s_words_under_the_same_filters(world: World) -> None:
    adam = world.users["adam"]
    kept = audit.record("team.renamed", actor=adam, target=world.teams["vision"], changes={"name": ["A", "=cmd()"]})
    AuditLog.objects.filter(pk=kept.pk).update(created_at=datetime(2026, 11, 2, 9, tzinfo=UTC))
    left = audit.record("team.renamed", actor=adam, target=world.teams["robotics"], changes={"name": ["C", "D"]})
    AuditLog.objects.filter(pk=left.pk).update(created_at=datetime(2026, 11, 5, 9, tzinfo=UTC))
    AuditLog.objects.create(organization=world.other_org, actor_name="mallory", action="team.renamed")
    page = admin_client(world).get("/audit/?action=team.renamed&until=2026-11-03").content.decode()
    assert 'href="/audit/export.csv?action=team.renamed&amp;until=2026-11-03"' in page
    response = admin_client(world).get("/audit/export.csv?action=team.renamed&until=2026-11-03")
    assert response.status_code == 200
    assert response["Content-Type"].startswith("text/csv")
    rows = list(csv.reader(io.StringIO(b"".join(response.streaming_content).decode())))  # type: ignore[attr-defined]
    assert rows[0] == list(audit.CSV_HEADER)
    assert rows[1:] == [
        ["2026-11-02 09:00:00", "adam", "team.renamed", "Team renamed", "Vision", "name: A → =cmd()", "", ""]
    ]
    assert admin_client(world).get("/audit/export.csv?since=yesterday").status_code == 400
    alice = Client()
    alice.force_login(world.users["alice"])
    assert alice.get("/audit/export.csv").status_code == 403
    mallory = Client()
    mallory.force_login(world.users["mallory"])
    exported = b"".join(mallory.get("/audit/export.csv").streaming_content).decode()  # type: ignore[attr-defined]
    assert "Vision" not in exported


def test_a_cell_a_spreadsheet_would_run_is_quoted() -> None:
    entry = AuditLog(actor_name="=HYPERLINK()", action="x.y", created_at=datetime(2026, 1, 1, tzinfo=UTC))
    line = "".join(audit.csv_stream([entry])).splitlines()[1]
    assert line.startswith("2026-01-01 00:00:00,'=HYPERLINK(),")


def test_each_submission_is_recorded_once_without_its_environment(fleet: Fleet) -> None:  # noqa: F811
    job = fleet.submit("alice", name="audited", env={"WANDB_KEY": "hush"}, idempotency_key="k1")
    again = fleet.submit("alice", name="audited", idempotency_key="k1")  # the same submission, sent twice
    assert again.pk == job.pk
    entries = AuditLog.objects.filter(action="job.submitted")
    assert entries.count() == 1
    entry = entries.get()
    assert (entry.actor_name, entry.target_id, entry.organization) == ("alice", str(job.pk), fleet.org)
    assert entry.changes["queue"] == job.queue.name
    assert entry.changes["accelerators"] == job.accelerators
    assert "hush" not in str(entry.changes)
    assert "WANDB_KEY" not in str(entry.changes)
