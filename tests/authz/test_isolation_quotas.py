"""The quota pages and API, role by role: every page and endpoint read or refused (404 beyond what the user
may see, 403 for what they see but may not change), every change refused or made, and nothing written on
refusal. Vision's lead changes Vision's lending limit, flavor order, projects' sub-quotas, projects' budgets and
members' limits; an admin of the organization everything (the team's budget too); researchers and finance read
only; another team's or organization's people get 404.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import date
from decimal import Decimal
from typing import Any

import pytest
from django.test import Client
from django.utils import timezone

from clusters.models import AcceleratorType
from governance.actions import budgets, quotas
from governance.models import Budget, BudgetAlert, Cohort, MemberLimit, Queue, Quota, QuotaChange
from scheduler import actions
from tenancy.models import AuditLog, Project
from tests.conftest import World, api_client

H100 = "H100-SXM-80GB"
ROLES = ["alice", "bob", "lena", "fiona", "adam", "mallory", "trent"]
#: Reads of Vision's pages and queue: its members and the organization's finance and admins.
READS_VISION = {"alice": 200, "bob": 404, "lena": 200, "fiona": 200, "adam": 200, "mallory": 404, "trent": 404}
#: Vision's lead and the organization's admins change; others who see it 403; the rest 404.
LEAD_OR_ADMIN = {"alice": 403, "bob": 404, "lena": 200, "fiona": 403, "adam": 200, "mallory": 404, "trent": 404}
ADMIN_ONLY = {**LEAD_OR_ADMIN, "lena": 403}
#: The organization's page: its finance and admins (another organization's admin sees their own).
ORG_PAGE = {"alice": 403, "bob": 403, "lena": 403, "fiona": 200, "adam": 200, "mallory": 200, "trent": 403}
#: Shaping the demo organization's cohort tree: its admins; a rival admin is told it is not there.
COHORT_TREE = {"alice": 403, "bob": 403, "lena": 403, "fiona": 403, "adam": 302, "mallory": 404, "trent": 403}
#: A cohort's quota in place: every member of the organization sees the tree; only its admins change it.
COHORT_CELL = {"alice": 403, "bob": 403, "lena": 403, "fiona": 403, "adam": 200, "mallory": 404, "trent": 404}


@pytest.fixture
def governed(world: World) -> World:
    AcceleratorType.objects.create(organization=world.org, name=H100)
    adam = world.users["adam"]
    vision = actions.queue_for(world.teams["vision"], None)
    quotas.set_quota(adam, vision, flavor=H100, nominal=16, borrowing_limit=8, reason="Q4 plan")
    quotas.create_cohort(adam, world.org, name="research", reason="one pool")
    cohort = Cohort.objects.get(name="research")
    quotas.set_quota(adam, cohort, flavor=H100, nominal=4, reason="reserve")
    budgets.set_budget(adam, world.teams["vision"], accelerator_hours=100, reason="the month's plan")
    budgets.set_budget(adam, world.teams["robotics"], amount=50, reason="the month's plan")
    detection = Project.objects.get(team=world.teams["vision"], slug="detection")
    budgets.set_budget(adam, world.teams["vision"], detection, accelerator_hours=10, reason="detection's share")
    for budget in Budget.objects.all():
        BudgetAlert.objects.create(
            budget=budget,
            period=date(2026, 11, 1),
            measure="amount",
            kind="50",
            limit=1,
            spent=1,
            message="half",
            created_at=timezone.now(),
        )
    return world


def written() -> tuple[Any, ...]:
    """Everything the quota pages and API may write (signing in and tokens are audited too: left out)."""
    rows = list(Quota.objects.order_by("pk").values_list("pk", "nominal", "borrowing_limit", "lending_limit"))
    policies = list(Queue.objects.order_by("pk").values_list("pk", "flavor_order", "weight", "reclaim", "cohort"))
    audited = AuditLog.objects.exclude(action__startswith="auth.").exclude(action__startswith="token.").count()
    spending = list(Budget.objects.order_by("pk").values_list("pk", "accelerator_hours", "amount", "hard"))
    limits = list(MemberLimit.objects.order_by("pk").values_list("pk", "user", "accelerators"))
    return rows, policies, QuotaChange.objects.count(), audited, Cohort.objects.count(), spending, limits


def page_client(world: World, username: str) -> Client:
    client = Client()
    client.force_login(world.users[username])
    return client


def check_write(expected: int, attempt: Callable[[], Any], what: str) -> None:
    """One change: refused (4xx) with nothing written, or made (something written)."""
    before = written()
    response = attempt()
    assert response.status_code == expected, (what, response.status_code)
    if expected >= 400:
        assert written() == before, what
    else:
        assert written() != before, what


@pytest.mark.parametrize("username", ROLES)
def test_quota_pages_role_by_role(governed: World, username: str) -> None:
    world = governed
    client = page_client(world, username)
    vision = Queue.objects.get(team=world.teams["vision"], project=None)
    team = f"/teams/{world.teams['vision'].pk}/quotas/"
    cell = f"{team}queues/{vision.pk}/quota/"
    policy = f"{team}queues/{vision.pk}/policy/"
    cohort = Cohort.objects.get(name="research")
    reads = [team, f"{team}chart/", f"{team}history/", f"{cell}?flavor={H100}", f"{cell}?edit=1&flavor={H100}", policy]
    for path in reads:
        assert client.get(path).status_code == READS_VISION[username], path
    assert client.get("/quotas/").status_code == ORG_PAGE[username]

    lend = {"flavor": H100, "lending_limit": "2", "reason": "lend"}
    check_write(LEAD_OR_ADMIN[username], lambda: client.post(cell, lend), "lending limit")
    grow = {"flavor": H100, "nominal": "20", "reason": "grow"}
    check_write(ADMIN_ONLY[username], lambda: client.post(cell, grow), "the team's nominal")
    order = {"flavor_order": H100, "reason": "first"}
    check_write(LEAD_OR_ADMIN[username], lambda: client.post(policy, order), "flavor order")
    heavier = {"weight": "2", "reason": "heavier"}
    check_write(ADMIN_ONLY[username], lambda: client.post(policy, heavier), "weight")
    project = Project.objects.get(team=world.teams["vision"], slug="detection")
    sub_quota = {
        "target": f"project:{project.pk}",
        "flavor": H100,
        "resource": "accelerator",
        "nominal": "4",
        "reason": "detection's share",
    }
    new = {**LEAD_OR_ADMIN, "lena": 302, "adam": 302}
    check_write(new[username], lambda: client.post(f"{team}new/", sub_quota), "sub-quota")
    org = world.org.pk
    pool = {"organization": org, "name": "pool", "reason": "x"}
    check_write(COHORT_TREE[username], lambda: client.post("/quotas/cohorts/", pool), "cohort")
    cohort_quota = {
        "organization": org,
        "cohort": cohort.pk,
        "flavor": H100,
        "resource": "cpu",
        "nominal": "64",
        "reason": "cores",
    }
    check_write(COHORT_TREE[username], lambda: client.post("/quotas/cohorts/quotas/", cohort_quota), "cohort quota")
    more = {"flavor": H100, "nominal": "6", "reason": "more"}
    check_write(COHORT_CELL[username], lambda: client.post(f"/quotas/cohorts/{cohort.pk}/quota/", more), "in place")


@pytest.mark.parametrize("username", ROLES)
def test_quota_api_role_by_role(governed: World, username: str) -> None:
    world = governed
    client = api_client(world.users[username])
    vision = Queue.objects.get(team=world.teams["vision"], project=None)
    listed = {q["name"] for q in client.get("/api/v1/queues/?page_size=100").json()["results"]}
    assert ("vision" in listed) == (READS_VISION[username] == 200)
    assert client.get(f"/api/v1/queues/{vision.pk}/").status_code == READS_VISION[username]
    history = {c["team"] for c in client.get("/api/v1/quota-changes/?page_size=100").json()["results"]}
    assert ("vision" in history) == (READS_VISION[username] == 200)
    assert ("robotics" in listed) == (username in ("bob", "fiona", "adam"))

    path = f"/api/v1/queues/{vision.pk}/"
    lend = {"flavor": H100, "lending_limit": 2, "reason": "lend"}
    check_write(LEAD_OR_ADMIN[username], lambda: client.post(f"{path}quotas/", lend), "lending")
    grow = {"flavor": H100, "nominal": 20, "reason": "grow"}
    check_write(ADMIN_ONLY[username], lambda: client.post(f"{path}quotas/", grow), "nominal")
    order = {"flavor_order": [H100], "reason": "first"}
    check_write(LEAD_OR_ADMIN[username], lambda: client.patch(path, order), "flavor order")
    heavier = {"weight": 2, "reason": "heavier"}
    check_write(ADMIN_ONLY[username], lambda: client.patch(path, heavier), "weight")
    assert client.post("/api/v1/queues/", {"name": "mine"}).status_code in (403, 404, 405)
    assert client.delete(path).status_code in (404, 405)
    if READS_VISION[username] == 200:
        assert Quota.objects.get(queue=vision).nominal == (20 if username == "adam" else 16)
        assert Quota.objects.get(queue=vision).lending_limit == (Decimal(2) if username in ("lena", "adam") else None)


#: Robotics' budgets and limits: none of Vision's people (its lead included); Robotics' researcher and finance
#: see them but may not change them; the organization's admin does.
ROBOTICS_ADMIN = {"alice": 404, "bob": 403, "lena": 404, "fiona": 403, "adam": 200, "mallory": 404, "trent": 404}
HTMX = {"HX-Request": "true"}


@pytest.mark.parametrize("username", ROLES)
def test_budget_and_member_limit_pages_role_by_role(governed: World, username: str) -> None:
    world = governed
    client = page_client(world, username)
    vision, robotics = world.teams["vision"], world.teams["robotics"]
    detection = Project.objects.get(team=vision, slug="detection")
    section = f"/teams/{vision.pk}/quotas/budgets/"
    alice_row = f"/teams/{vision.pk}/quotas/members/{world.users['alice'].pk}/"
    for path in (section, f"{section}?target=project:{detection.pk}", alice_row, f"{alice_row}?edit=1"):
        assert client.get(path).status_code == READS_VISION[username], path
    page = client.get(f"/teams/{vision.pk}/quotas/")
    if page.status_code == 200:
        body = page.content.decode()
        assert 'data-budget="team vision"' in body
        assert ('data-testid="budget-form"' in body) == (LEAD_OR_ADMIN[username] == 200)
        assert ('data-testid="edit-member-limit"' in body) == (LEAD_OR_ADMIN[username] == 200)
    org = client.get("/quotas/")
    if org.status_code == 200:
        assert ('data-budget="team robotics"' in org.content.decode()) == (username in ("fiona", "adam"))

    team_budget = {"target": "team", "accelerator_hours": "120", "reason": "more"}
    check_write(ADMIN_ONLY[username], lambda: client.post(section, team_budget, headers=HTMX), "the team's budget")
    project_budget = {"target": f"project:{detection.pk}", "accelerator_hours": "20", "reason": "more"}
    check_write(LEAD_OR_ADMIN[username], lambda: client.post(section, project_budget, headers=HTMX), "its project's")
    limit = {"accelerators": "4", "reason": "fair"}
    check_write(LEAD_OR_ADMIN[username], lambda: client.post(alice_row, limit), "a member's limit")

    manipulation = Project.objects.get(team=robotics, slug="manipulation")
    theirs = {"target": f"project:{manipulation.pk}", "amount": "10", "reason": "x"}
    robotics_section = f"/teams/{robotics.pk}/quotas/budgets/"
    check_write(ROBOTICS_ADMIN[username], lambda: client.post(robotics_section, theirs, headers=HTMX), "Robotics'")
    bob_row = f"/teams/{robotics.pk}/quotas/members/{world.users['bob'].pk}/"
    check_write(ROBOTICS_ADMIN[username], lambda: client.post(bob_row, limit), "Bob's limit")


@pytest.mark.parametrize("username", ROLES)
def test_budget_api_role_by_role(governed: World, username: str) -> None:
    world = governed
    client = api_client(world.users[username])
    vision, robotics = world.teams["vision"], world.teams["robotics"]
    sees_vision, sees_robotics = READS_VISION[username] == 200, username in ("bob", "fiona", "adam")
    listed = {(b["team"], b["project"]) for b in client.get("/api/v1/budgets/?page_size=100").json()["results"]}
    assert (("vision", None) in listed, ("vision", "detection") in listed) == (sees_vision, sees_vision)
    assert (("robotics", None) in listed) == sees_robotics
    vision_budget = Budget.objects.get(team=vision, project=None)
    assert client.get(f"/api/v1/budgets/{vision_budget.pk}/").status_code == READS_VISION[username]
    alerts = [a["team"] for a in client.get("/api/v1/budget-alerts/?page_size=100").json()["results"]]
    assert ("vision" in alerts, "robotics" in alerts) == (sees_vision, sees_robotics)
    limits = f"/api/v1/teams/{vision.pk}/member-limits/"
    assert client.get(limits).status_code == READS_VISION[username]

    team_budget = {"team": vision.pk, "accelerator_hours": 120, "reason": "more"}
    check_write(ADMIN_ONLY[username], lambda: client.post("/api/v1/budgets/", team_budget), "the team's budget")
    new = {**LEAD_OR_ADMIN, "lena": 201, "adam": 201}
    project_budget = {"team": vision.pk, "project": "segmentation", "amount": 10, "reason": "its own"}
    check_write(new[username], lambda: client.post("/api/v1/budgets/", project_budget), "a project's budget")
    limit = {"user": "alice", "accelerators": 4, "reason": "fair"}
    check_write(new[username], lambda: client.post(limits, limit), "a member's limit")

    theirs = {"team": robotics.pk, "project": "manipulation", "amount": 10, "reason": "x"}
    robotics_new = {**ROBOTICS_ADMIN, "adam": 201}
    check_write(robotics_new[username], lambda: client.post("/api/v1/budgets/", theirs), "Robotics' budget")
    bobs = {"user": "bob", "accelerators": 4, "reason": "fair"}
    robotics_limits = f"/api/v1/teams/{robotics.pk}/member-limits/"
    check_write(robotics_new[username], lambda: client.post(robotics_limits, bobs), "Bob's limit")
    assert client.delete(f"/api/v1/budgets/{vision_budget.pk}/").status_code in (404, 405)


def test_anonymous_is_sent_to_sign_in_or_refused(governed: World) -> None:
    vision = Queue.objects.get(team=governed.teams["vision"], project=None)
    team = f"/teams/{governed.teams['vision'].pk}/quotas/"
    for path in (team, "/quotas/"):
        response = Client().get(path)
        assert response.status_code == 302
        assert response["Location"].startswith("/login/")
    before = written()
    assert Client().post(f"{team}queues/{vision.pk}/quota/", {"flavor": H100, "nominal": "99"}).status_code == 302
    assert api_client().get("/api/v1/queues/").status_code == 401
    assert api_client().post(f"/api/v1/queues/{vision.pk}/quotas/", {"flavor": H100, "nominal": 99}).status_code == 401
    assert api_client().get("/api/v1/quota-changes/").status_code == 401
    team_id = governed.teams["vision"].pk
    budget = {"target": "team", "accelerator_hours": "1", "reason": "x"}
    assert Client().post(f"{team}budgets/", budget).status_code == 302
    assert Client().post(f"{team}members/{governed.users['alice'].pk}/", {"accelerators": "1"}).status_code == 302
    for path in ("/api/v1/budgets/", "/api/v1/budget-alerts/", f"/api/v1/teams/{team_id}/member-limits/"):
        assert api_client().get(path).status_code == 401
    assert api_client().post("/api/v1/budgets/", {"team": team_id, "amount": 1}).status_code == 401
    assert written() == before
