"""The budgets API: budgets with where each stands this month, scoped to what the user may see; a budget set
(201 new, 200 changed, fields left out kept, 204 removed), refused (400 naming each bad field, 403 for a user of
the team who may not, 404 for a team or project the user cannot see; nothing written); their alerts; a team's
member limits read and set."""

from __future__ import annotations

from datetime import date, timedelta
from decimal import Decimal
from typing import Any

import pytest
from django.utils import timezone

from governance.actions import budgets
from governance.models import Budget, BudgetAlert, MemberLimit, QuotaChange
from tenancy.models import AuditLog, Project
from tests.conftest import api_client
from tests.governance.test_budgets import NOV_15, placed_attempt
from tests.scheduler.conftest import Fleet

pytestmark = pytest.mark.django_db

HOOK = "https://hooks.example.com/services/T0/B0/secret-token"


def client(fleet: Fleet, username: str) -> Any:
    return api_client(fleet.user(username))


def project(fleet: Fleet, slug: str) -> Project:
    return Project.objects.get(team=fleet.world.teams["vision"], slug=slug)


def written() -> tuple[Any, ...]:
    rows = list(
        Budget.objects.order_by("pk").values_list(
            "pk", "project", "accelerator_hours", "amount", "hard", "recipients", "webhook_url"
        )
    )
    limits = list(MemberLimit.objects.order_by("pk").values_list("pk", "user", "accelerators"))
    audited = AuditLog.objects.exclude(action__startswith="auth.").exclude(action__startswith="token.").count()
    return rows, limits, QuotaChange.objects.count(), audited


@pytest.fixture
def budgeted(fleet: Fleet, monkeypatch: pytest.MonkeyPatch) -> Fleet:
    """As the pages' tests: on Nov 15 at noon, Vision (100 accelerator-hours and 200 a month, with a webhook)
    has used 10 accelerator-hours and 21; its Detection project (40 accelerator-hours, hard) 2 and 5. Robotics
    has 50 a month and has used nothing."""
    placed_attempt(
        fleet,
        admitted=NOV_15 - timedelta(hours=4),
        ended=NOV_15 - timedelta(hours=2),
        price="8.0",
        name="done",
        accelerators=4,
    )
    placed_attempt(
        fleet,
        admitted=NOV_15 - timedelta(hours=2),
        ended=None,
        price="2.5",
        name="live",
        accelerators=1,
        time_limit=4 * 3600,
        project=project(fleet, "detection"),
    )
    monkeypatch.setattr(timezone, "now", lambda: NOV_15)
    adam, teams = fleet.user("adam"), fleet.world.teams
    budgets.set_budget(
        adam,
        teams["vision"],
        accelerator_hours=100,
        amount=200,
        recipients=["ops@lab.example"],
        webhook_url=HOOK,
        reason="the month's plan",
    )
    budgets.set_budget(
        fleet.user("lena"),
        teams["vision"],
        project(fleet, "detection"),
        accelerator_hours=40,
        hard=True,
        reason="detection's share",
    )
    budgets.set_budget(adam, teams["robotics"], amount=50, reason="robotics' plan")
    return fleet


def test_budgets_are_listed_with_their_standings_for_those_who_see_the_team(budgeted: Fleet) -> None:
    alice = client(budgeted, "alice")
    listed = alice.get("/api/v1/budgets/").json()["results"]
    assert [(b["team"], b["project"]) for b in listed] == [("vision", None), ("vision", "detection")]
    team = listed[0]
    assert (team["accelerator_hours"], team["amount"], team["hard"], team["recipients"]) == (
        "100.000",
        "200.00",
        False,
        ["ops@lab.example"],
    )
    assert team["webhook_url"] is None  # hers to read only if hers to set
    assert team["standings"] == [
        {
            "measure": "accelerator_hours",
            "limit": "100.000",
            "used": "10.000",
            "committed": "2.000",
            "forecast": "32.143",
            "percent": 10.0,
            "usage": None,
            "charge": None,
        },
        {
            "measure": "amount",
            "limit": "200.000",
            "used": "21.000",
            "committed": "5.000",
            "forecast": "67.500",
            "percent": 10.5,
            "usage": "21.000",
            "charge": "0.000",  # nothing metered: no statement yet
        },
    ]
    assert listed[1]["standings"] == [
        {
            "measure": "accelerator_hours",
            "limit": "40.000",
            "used": "2.000",
            "committed": "2.000",
            "forecast": "6.429",
            "percent": 5.0,
            "usage": None,
            "charge": None,
        },
    ]
    assert alice.get(f"/api/v1/budgets/{team['id']}/").json() == team
    assert alice.get("/api/v1/budgets/?team=robotics").json()["count"] == 0

    fiona = client(budgeted, "fiona")
    assert fiona.get("/api/v1/budgets/").json()["count"] == 3
    robotics = fiona.get("/api/v1/budgets/?team=robotics").json()["results"]
    assert [(b["team"], b["amount"], b["standings"][0]["used"]) for b in robotics] == [("robotics", "50.00", "0.000")]
    assert client(budgeted, "adam").get(f"/api/v1/budgets/{team['id']}/").json()["webhook_url"] == HOOK
    assert client(budgeted, "bob").get(f"/api/v1/budgets/{team['id']}/").status_code == 404
    assert client(budgeted, "mallory").get("/api/v1/budgets/").json()["count"] == 0


def test_a_lead_sets_changes_and_removes_a_project_budget(budgeted: Fleet) -> None:
    lena = client(budgeted, "lena")
    body = {
        "team": "vision",
        "project": "segmentation",
        "accelerator_hours": 25.5,
        "hard": True,
        "recipients": ["seg@lab.example"],
        "webhook_url": "https://hooks.example.com/seg",
        "reason": "its share",
    }
    created = lena.post("/api/v1/budgets/", body)
    assert created.status_code == 201
    answer = created.json()
    assert (answer["project"], answer["accelerator_hours"], answer["amount"], answer["hard"]) == (
        "segmentation",
        "25.500",
        None,
        True,
    )
    assert answer["webhook_url"] == "https://hooks.example.com/seg"
    assert answer["standings"][0]["used"] == "0.000"
    change = QuotaChange.objects.first()
    assert change is not None
    assert (change.kind, change.actor_name, change.reason) == ("budget", "lena", "its share")

    # Fields left out keep their values.
    segmentation = project(budgeted, "segmentation")
    changed = lena.post(
        "/api/v1/budgets/",
        {"team": budgeted.world.teams["vision"].pk, "project": segmentation.pk, "amount": "30", "reason": "and money"},
    )
    assert changed.status_code == 200
    saved = Budget.objects.get(project=segmentation)
    assert (saved.accelerator_hours, saved.amount, saved.hard, saved.recipients) == (
        Decimal("25.5"),
        Decimal(30),
        True,
        ["seg@lab.example"],
    )

    removed = lena.post(
        "/api/v1/budgets/",
        {"team": "vision", "project": "segmentation", "accelerator_hours": None, "amount": None, "reason": "merged"},
    )
    assert removed.status_code == 204
    assert not Budget.objects.filter(project=segmentation).exists()


def test_an_admin_sets_a_teams_budget(budgeted: Fleet) -> None:
    response = client(budgeted, "adam").post(
        "/api/v1/budgets/", {"team": "language", "accelerator_hours": 500, "reason": "pre-training"}
    )
    assert response.status_code == 201
    assert (response.json()["team"], response.json()["project"], response.json()["webhook_url"]) == (
        "language",
        None,
        "",
    )


def test_a_budget_below_this_month_s_use_is_refused_until_confirmed(budgeted: Fleet) -> None:
    """Vision spent 21.00 this month (4 GPUs for 2 hours at 8.00, one for 2 hours at 2.50): a limit of 10 is a 400
    naming ``amount`` and what was spent, nothing written; with ``confirm`` it is set."""
    adam = client(budgeted, "adam")
    body = {"team": "vision", "amount": 10, "reason": "cut"}
    before = list(Budget.objects.order_by("pk").values_list("amount", flat=True))
    refused = adam.post("/api/v1/budgets/", body)
    assert refused.status_code == 400
    message = refused.json()["error"]["fields"]["amount"][0]
    assert message.startswith("Team Vision has already spent 21.00 this month, more than 10; its alerts would fire")
    assert list(Budget.objects.order_by("pk").values_list("amount", flat=True)) == before
    assert adam.post("/api/v1/budgets/", {**body, "confirm": "maybe"}).status_code == 400
    confirmed = adam.post("/api/v1/budgets/", {**body, "confirm": True})
    assert confirmed.status_code == 200
    assert Budget.objects.get(team__slug="vision", project=None).amount == 10
    # Above what is used, no confirmation is asked.
    assert adam.post("/api/v1/budgets/", {**body, "amount": 30}).status_code == 200


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"accelerator_hours": "lots"}, "accelerator_hours"),
        ({"accelerator_hours": -1}, "accelerator_hours"),
        ({"accelerator_hours": 70}, "accelerator_hours"),  # Detection holds 40 of Vision's 100
        ({"amount": "1.001"}, "amount"),
        ({"hard": "perhaps"}, "hard"),
        ({"recipients": "ops@lab.example"}, "recipients"),
        ({"recipients": ["not-an-address"]}, "recipients"),
        ({"webhook_url": "ftp://hooks.example.com"}, "webhook_url"),
        ({"webhook_url": "http://[::ffff:169.254.169.254]/latest/meta-data/"}, "webhook_url"),  # a metadata service
        ({"webhook_url": "http://10.0.0.7:8080/hook"}, "webhook_url"),  # a private network: not for leads' hooks
        ({"webhook_url": "http://localhost:6379/"}, "webhook_url"),  # the server itself, by a name that resolves
        ({"reason": ""}, "reason"),
        ({"acclerator_hours": 10}, "acclerator_hours"),  # misspelt: not taken for no limit
        ({"team": None}, "team"),
    ],
)
def test_bad_budgets_are_400_naming_the_field_and_write_nothing(
    budgeted: Fleet, body: dict[str, Any], field: str
) -> None:
    before = written()
    data = {"team": "vision", "project": "segmentation", "accelerator_hours": 10, "reason": "try", **body}
    response = client(budgeted, "lena").post("/api/v1/budgets/", data)
    assert response.status_code == 400, response.json()
    assert field in response.json()["error"]["fields"]
    assert written() == before


def test_budgets_the_user_may_not_set_or_see_are_refused_and_write_nothing(budgeted: Fleet) -> None:
    before = written()
    team_budget = {"team": "vision", "accelerator_hours": 500, "reason": "more"}
    refused = client(budgeted, "lena").post("/api/v1/budgets/", team_budget)
    assert refused.status_code == 403
    assert "set by an organization admin" in refused.json()["error"]["message"]
    # Asked before the body is judged: a researcher learns nothing about what would be wrong.
    project_budget = {"team": "vision", "project": "detection", "accelerator_hours": "lots", "reason": ""}
    for username in ("alice", "fiona"):
        assert client(budgeted, username).post("/api/v1/budgets/", project_budget).status_code == 403
    for username in ("bob", "mallory", "trent"):
        assert client(budgeted, username).post("/api/v1/budgets/", project_budget).status_code == 404
    # Projects are looked up in the team: another team's is not there.
    other = {"team": "vision", "project": "manipulation", "accelerator_hours": 1, "reason": "x"}
    assert client(budgeted, "adam").post("/api/v1/budgets/", other).status_code == 404
    assert client(budgeted, "lena").post("/api/v1/budgets/", {**other, "team": "robotics"}).status_code == 404
    assert client(budgeted, "alice").put("/api/v1/budgets/1/", team_budget).status_code in (404, 405)
    assert written() == before


def test_budget_alerts_are_scoped_and_their_errors_kept_from_readers(budgeted: Fleet) -> None:
    vision, robotics = Budget.objects.get(team__slug="vision", project=None), Budget.objects.get(team__slug="robotics")
    for budget in (vision, robotics):
        BudgetAlert.objects.create(
            budget=budget,
            period=date(2026, 11, 1),
            measure="amount",
            kind="80",
            limit=100,
            spent=1,
            message="80% used",
            created_at=NOV_15,
            attempts=1,
            last_error=f"webhook: 500 for url: {HOOK}",
        )
    alerts = client(budgeted, "alice").get("/api/v1/budget-alerts/").json()["results"]
    assert [(a["team"], a["kind"], a["delivered"]) for a in alerts] == [("vision", "80", False)]
    assert alerts[0]["last_error"] == "A channel failed; it is tried again."
    admin = client(budgeted, "adam").get("/api/v1/budget-alerts/?team=vision").json()["results"]
    assert [a["budget"] for a in admin] == [vision.pk]
    assert HOOK in admin[0]["last_error"]
    assert client(budgeted, "fiona").get("/api/v1/budget-alerts/").json()["count"] == 2
    assert client(budgeted, "fiona").get(f"/api/v1/budget-alerts/?budget={robotics.pk}").json()["count"] == 1
    assert client(budgeted, "mallory").get("/api/v1/budget-alerts/").json()["count"] == 0


def test_member_limits_are_read_by_the_team_and_set_by_its_lead(budgeted: Fleet) -> None:
    vision = budgeted.world.teams["vision"]
    path = f"/api/v1/teams/{vision.pk}/member-limits/"
    lena = client(budgeted, "lena")
    # alice's jobs hold 5 accelerators: a limit of 4 is a 400 naming the field and what they hold, until confirmed.
    refused = lena.post(path, {"user": "alice", "accelerators": 4, "reason": "one node"})
    assert refused.status_code == 400
    assert "alice's jobs hold 5 accelerators now, more than 4" in refused.json()["error"]["fields"]["accelerators"][0]
    assert not MemberLimit.objects.exists()
    created = lena.post(path, {"user": "alice", "accelerators": 4, "reason": "one node", "confirm": True})
    assert created.status_code == 201
    assert (created.json()["user"], created.json()["accelerators"]) == ("alice", "4.000")
    assert lena.post(path, {"user": "alice", "accelerators": "6.5", "reason": "more"}).status_code == 200
    assert client(budgeted, "alice").get(path).json()["results"] == [
        {"id": created.json()["id"], "user": "alice", "accelerators": "6.500"}
    ]
    assert client(budgeted, "fiona").get(path).json()["count"] == 1
    assert client(budgeted, "bob").get(path).status_code == 404
    history = client(budgeted, "alice").get("/api/v1/quota-changes/?kind=member").json()["results"]
    assert [(c["before"], c["after"]) for c in history] == [
        ({"accelerators": "4"}, {"accelerators": "6.5"}),
        ({"accelerators": None}, {"accelerators": "4"}),
    ]
    assert lena.post(path, {"user": "alice", "accelerators": None, "reason": "deadline"}).status_code == 204
    assert not MemberLimit.objects.exists()


@pytest.mark.parametrize(
    ("username", "body", "expected", "field"),
    [
        ("lena", {"user": "bob"}, 400, "user"),  # not in Vision
        ("lena", {"accelerators": -1}, 400, "accelerators"),
        ("lena", {"accelerators": "x"}, 400, "accelerators"),
        ("lena", {"reason": " "}, 400, "reason"),
        ("lena", {"limit": 4}, 400, "limit"),
        ("lena", {"accelerators": None, "user": None}, 400, "user"),
        ("alice", {"accelerators": "x"}, 403, None),
        ("fiona", {}, 403, None),
        ("bob", {}, 404, None),
        ("trent", {}, 404, None),
    ],
)
def test_member_limits_refused_write_nothing(
    budgeted: Fleet, username: str, body: dict[str, Any], expected: int, field: str | None
) -> None:
    before = written()
    path = f"/api/v1/teams/{budgeted.world.teams['vision'].pk}/member-limits/"
    response = client(budgeted, username).post(path, {"user": "alice", "accelerators": 2, "reason": "x", **body})
    assert response.status_code == expected
    if field:
        assert field in response.json()["error"]["fields"]
    assert written() == before
