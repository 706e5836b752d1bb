"""Budgets and member limits on the quota pages: the team's budgets with where each stands this month, their
chart and alerts; a budget set, changed and removed in place (the section back with the history told to
reload; the form back with each message by its field and 400 on bad input, 403 for what the user may not set,
nothing written either way); members' limits edited in place; every budget on the organization's page."""

from __future__ import annotations

import re
import sys
from datetime import date, timedelta
from decimal import Decimal
from html import unescape
from typing import Any

import pytest
from django.test import Client
from django.utils import timezone

from governance import placed
from governance.actions import budgets, quotas
from governance.models import Budget, BudgetAlert, MemberLimit, QuotaChange
from scheduler import actions
from tenancy.models import AuditLog, Project
from tests.governance.test_budgets import NOV_15, placed_attempt
from tests.scheduler.conftest import Fleet

pytestmark = pytest.mark.django_db

HOOK = "https://hooks.example.com/services/T0/B0/secret-token"
H100 = "H100-SXM-80GB"
HTMX = {"HX-Request": "true"}


def signed_in(fleet: Fleet, username: str) -> Client:
    client = Client()
    client.force_login(fleet.user(username))
    return client


def url(fleet: Fleet, rest: str = "", team: str = "vision") -> str:
    return f"/teams/{fleet.world.teams[team].pk}/quotas/{rest}"


def project(fleet: Fleet, slug: str) -> Project:
    return Project.objects.get(team=fleet.world.teams["vision"], slug=slug)


def written() -> tuple[Any, ...]:
    """Everything the budget and member-limit forms may write."""
    rows = list(
        Budget.objects.order_by("pk").values_list(
            "pk", "project", "accelerator_hours", "amount", "hard", "recipients", "webhook_url"
        )
    )
    limits = list(MemberLimit.objects.order_by("pk").values_list("pk", "user", "accelerators"))
    audited = AuditLog.objects.exclude(action__startswith="auth.").count()
    return rows, limits, QuotaChange.objects.count(), audited


@pytest.fixture
def budgeted(fleet: Fleet, monkeypatch: pytest.MonkeyPatch) -> Fleet:
    """On Nov 15 at noon (UTC): Vision's budget (adam's: 100 accelerator-hours and 200 a month, soft, with a
    webhook) and its Detection project's (lena's: 40 accelerator-hours, hard). The team used 4 GPUs from 8:00
    to 10:00 at 8.0 an hour; Detection runs one since 10:00 at 2.5 an hour, with a 4-hour limit."""
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
    vision = fleet.world.teams["vision"]
    budgets.set_budget(
        fleet.user("adam"),
        vision,
        accelerator_hours=100,
        amount=200,
        recipients=["ops@lab.example"],
        webhook_url=HOOK,
        reason="the month's plan",
    )
    budgets.set_budget(
        fleet.user("lena"),
        vision,
        project(fleet, "detection"),
        accelerator_hours=40,
        hard=True,
        reason="detection's share",
    )
    return fleet


def text(html: str) -> str:
    """What a piece of the page reads: no tags, one space between words."""
    return " ".join(unescape(re.sub(r"<[^>]+>", " ", html)).split())


def cells(body: str, budget: str, measure: str) -> dict[str, str]:
    row = re.search(
        rf'<tr data-testid="budget-row" data-budget="{budget}" data-measure="{measure}">(.*?)</tr>', body, re.S
    )
    assert row is not None, (budget, measure)
    found = re.findall(r'data-cell="(\w+)"[^>]*>(.*?)</td>', row.group(1), re.S)
    return {name: text(html) for name, html in found}


def test_the_team_page_shows_where_each_budget_stands(budgeted: Fleet) -> None:
    response = signed_in(budgeted, "alice").get(url(budgeted))
    assert response.status_code == 200
    body = response.content.decode()
    assert cells(body, "team vision", "accelerator_hours") == {
        "scope": "the team",
        "measure": "Accelerator-hours",
        "limit": "100",
        "used": "10 10%",
        "committed": "2",
        "forecast": "32.1",
        "hard": "soft",
        "alerted": "the team's leads, ops@lab.example, a webhook",
    }
    money = cells(body, "team vision", "amount")
    assert (money["limit"], money["used"], money["committed"], money["forecast"]) == (
        "200.00",
        "21.00 10%",
        "5.00",
        "67.50",
    )
    detection = cells(body, "project vision/detection", "accelerator_hours")
    assert (detection["scope"], detection["limit"], detection["used"], detection["hard"]) == (
        "project Detection",
        "40",
        "2 5%",
        "hard",
    )
    assert 'data-budget="project vision/detection" data-measure="amount"' not in body  # only what it limits
    # A panel per measure: used, forecast and limit per budget.
    chart = response.context["budget_chart"]
    assert [(t["name"], t["xaxis"], t["x"], t["y"]) for t in chart["data"]] == [
        ("Used", "x", ["the team", "project Detection"], [10.0, 2.0]),
        ("Forecast", "x", ["the team", "project Detection"], [32.143, 6.429]),
        ("Limit", "x", ["the team", "project Detection"], [100.0, 40.0]),
        ("Used", "x2", ["the team"], [21.0]),
        ("Forecast", "x2", ["the team"], [67.5]),
        ("Limit", "x2", ["the team"], [200.0]),
    ]
    assert chart["layout"]["yaxis2"]["title"]["text"] == "money"
    assert 'id="budget-chart-figure"' in body
    # A researcher reads: no form, no Change, and never the webhook's URL.
    assert 'data-testid="budget-form"' not in body
    assert 'data-testid="change-budget"' not in body
    assert "secret-token" not in body


def test_usage_is_computed_once_per_page(budgeted: Fleet, monkeypatch: pytest.MonkeyPatch) -> None:
    """Once by the page's budgets (the placement preview may ask too, for hard budgets: not counted here)."""
    calls = []
    use_of = placed.use_of

    def counted(found: Any, now: Any = None, **options: Any) -> Any:
        calls.append(sys._getframe(1).f_globals["__name__"])
        return use_of(found, now, **options)

    monkeypatch.setattr(placed, "use_of", counted)
    assert signed_in(budgeted, "lena").get(url(budgeted)).status_code == 200
    assert calls.count("governance.web.budgets") == 1
    assert signed_in(budgeted, "fiona").get("/quotas/").status_code == 200
    assert calls.count("governance.web.budgets") == 2


def test_alerts_show_their_delivery_and_the_error_only_to_those_who_set_the_budget(budgeted: Fleet) -> None:
    team_budget = Budget.objects.get(project=None)
    BudgetAlert.objects.create(
        budget=team_budget,
        period=date(2026, 11, 1),
        measure="amount",
        kind="50",
        limit=200,
        spent=Decimal("104"),
        message="The team vision budget has used 52% of its money",
        created_at=NOV_15,
        emailed_at=NOV_15,
        emailed_to="lena@demo.example",
        attempts=2,
        last_error=f"webhook: 500 Server Error for url: {HOOK}",
    )
    for username, shown in (("alice", False), ("lena", False), ("adam", True)):
        body = signed_in(budgeted, username).get(url(budgeted, "budgets/")).content.decode()
        alert = re.search(r'<tr data-testid="budget-alert" data-kind="50">(.*?)</tr>', body, re.S)
        assert alert is not None
        row = text(alert.group(1))
        assert "50% used of money" in row
        assert "104.00 of 200.00" in row
        assert "pending e-mailed, webhook not sent" in row  # the webhook is still owed
        assert ("secret-token" in row) == shown, username
        assert ("A channel failed; it is tried again." in row) != shown


def test_a_lead_sets_a_project_budget_in_place(budgeted: Fleet) -> None:
    lena = signed_in(budgeted, "lena")
    page = lena.get(url(budgeted)).content.decode()
    # She may set her projects' budgets, not the team's.
    options = re.findall(r'<option value="([^"]*)"', page.split('data-testid="budget-form"')[1].split("</select>")[0])
    assert options == [f"project:{project(budgeted, slug).pk}" for slug in ("detection", "segmentation")]
    assert page.count('data-testid="change-budget"') == 1  # Detection's; the team's is an admin's

    segmentation = project(budgeted, "segmentation")
    data = {
        "target": f"project:{segmentation.pk}",
        "accelerator_hours": "25.5",
        "amount": "60",
        "hard": "on",
        "recipients": "seg@lab.example; pi@lab.example",
        "webhook_url": "",
        "reason": "segmentation's share",
    }
    response = lena.post(url(budgeted, "budgets/"), data, headers=HTMX)
    assert response.status_code == 200
    assert response["HX-Trigger"] == "quotas-changed"
    body = response.content.decode()
    assert 'data-testid="budget-saved"' in body
    assert "Budget of project Segmentation set." in body
    assert cells(body, "project vision/segmentation", "accelerator_hours")["limit"] == "25.5"
    assert cells(body, "project vision/segmentation", "amount")["used"] == "0.00 0%"
    saved = Budget.objects.get(project=segmentation)
    assert (saved.accelerator_hours, saved.amount, saved.hard, saved.recipients) == (
        Decimal("25.5"),
        Decimal(60),
        True,
        ["seg@lab.example", "pi@lab.example"],
    )
    change = QuotaChange.objects.first()
    assert change is not None
    assert (change.kind, change.actor_name, change.reason) == ("budget", "lena", "segmentation's share")
    history = lena.get(url(budgeted, "history/")).content.decode()
    assert "budget of project Segmentation" in history
    assert "accelerator-hours a month: no limit → <strong>25.5</strong>" in history
    assert "also alerted: — → <strong>seg@lab.example, pi@lab.example</strong>" in history


def test_change_opens_the_form_on_that_budget_and_empty_limits_remove_it(budgeted: Fleet) -> None:
    detection = project(budgeted, "detection")
    lena = signed_in(budgeted, "lena")
    section = lena.get(url(budgeted, "budgets/"), {"target": f"project:{detection.pk}"}).content.decode()
    assert re.search(r'<details class="disclosure" id="budget-form" open', section)
    assert f'<option value="project:{detection.pk}" selected>' in section
    assert re.search(r'name="accelerator_hours" value="40"', section)
    assert re.search(r'name="hard"[^>]* checked', section)
    # The team's own budget is not hers: the form does not open on it.
    assert (
        '<details class="disclosure" id="budget-form" open'
        not in lena.get(url(budgeted, "budgets/"), {"target": "team"}).content.decode()
    )

    data = {"target": f"project:{detection.pk}", "accelerator_hours": "", "amount": "", "reason": "merged"}
    response = lena.post(url(budgeted, "budgets/"), data, headers=HTMX)
    assert response.status_code == 200
    assert "Budget of project Detection removed." in response.content.decode()
    assert not Budget.objects.filter(project=detection).exists()
    history = lena.get(url(budgeted, "history/")).content.decode()
    assert "accelerator-hours a month: 40 → <strong>no limit</strong>" in history


def test_an_admin_sets_the_teams_budget_without_htmx_and_is_sent_back_to_the_page(budgeted: Fleet) -> None:
    adam = signed_in(budgeted, "adam")
    page = adam.get(url(budgeted), {"target": "team"}).content.decode()
    assert re.search(r'name="recipients" value="ops@lab.example"', page)
    assert f'value="{HOOK}"' in page  # hers to set: the URL is in her form
    data = {
        "target": "team",
        "accelerator_hours": "120",
        "amount": "200",
        "recipients": "ops@lab.example",
        "webhook_url": "https://hooks.example.com/other",
        "reason": "more hours",
    }
    response = adam.post(url(budgeted, "budgets/"), data)
    assert response.status_code == 302
    assert response["Location"] == url(budgeted) + "#budgets"
    team_budget = Budget.objects.get(project=None)
    assert (team_budget.accelerator_hours, team_budget.hard) == (Decimal(120), False)  # the box unticked: soft
    history = adam.get(url(budgeted, "history/")).content.decode()
    assert "webhook: hooks.example.com → <strong>hooks.example.com (another URL)</strong>" in history
    assert "also alerted:" not in history.split('data-testid="history-row"')[1]  # unchanged: left out
    assert "secret-token" not in history


@pytest.mark.parametrize(
    ("posted", "field", "message"),
    [
        ({"accelerator_hours": "lots"}, "accelerator_hours", "is not a number"),
        ({"amount": "-5"}, "amount", "Must be zero or more"),
        ({"amount": "1.001"}, "amount", "At most two decimal places"),
        ({"accelerator_hours": "70"}, "accelerator_hours", "at most 60 is left for this one"),
        ({"recipients": "ops@lab.example, not-an-address"}, "recipients", "Not an e-mail address: not-an-address"),
        ({"webhook_url": "ftp://hooks.example.com/x"}, "webhook_url", "An http:// or https:// URL"),
        ({"webhook_url": "http://metadata.google.internal./x"}, "webhook_url", "is a cloud metadata service"),
        ({"webhook_url": "http://192.168.1.20/x"}, "webhook_url", "a private network address"),
        ({"reason": " "}, "reason", "Say why"),
        ({"target": "project:999999"}, "target", "Choose the team or one of its projects"),
    ],
)
def test_bad_budgets_come_back_by_their_field_with_400_and_write_nothing(
    budgeted: Fleet, posted: dict[str, str], field: str, message: str
) -> None:
    before = written()
    data = {
        "target": f"project:{project(budgeted, 'segmentation').pk}",
        "accelerator_hours": "10",
        "amount": "",
        "reason": "try",
        **posted,
    }
    response = signed_in(budgeted, "lena").post(url(budgeted, "budgets/"), data, headers=HTMX)
    assert response.status_code == 400
    body = response.content.decode()
    form = body.split('data-testid="budget-form"')[1]
    assert re.search(rf'<div class="field invalid">\s*<label for="budget_{field}">.*?{re.escape(message)}', form, re.S)
    assert re.search(r'<details class="disclosure" id="budget-form" open', body)
    if field not in ("target", "reason"):
        assert f'value="{posted[field]}"' in form  # what was typed stays in the form
    assert written() == before


def test_budgets_the_user_may_not_set_are_403_and_write_nothing(budgeted: Fleet) -> None:
    before = written()
    data = {"target": "team", "accelerator_hours": "500", "reason": "more"}
    refused = signed_in(budgeted, "lena").post(url(budgeted, "budgets/"), data, headers=HTMX)
    assert refused.status_code == 403
    assert "budget is set by an organization admin" in refused.content.decode()
    detection = {**data, "target": f"project:{project(budgeted, 'detection').pk}"}
    for username in ("alice", "fiona"):
        assert signed_in(budgeted, username).post(url(budgeted, "budgets/"), detection, headers=HTMX).status_code == 403
    # Another team's people are told it is not there.
    assert signed_in(budgeted, "bob").post(url(budgeted, "budgets/"), detection, headers=HTMX).status_code == 404
    assert signed_in(budgeted, "lena").post(url(budgeted, "budgets/", team="robotics"), data).status_code == 404
    assert written() == before


def test_a_lead_sets_and_clears_a_members_limit_in_place(budgeted: Fleet) -> None:
    lena, alice = signed_in(budgeted, "lena"), budgeted.user("alice")
    page = lena.get(url(budgeted)).content.decode()
    members = re.findall(r'<tr data-testid="member-row" data-member="(\w+)">', page)
    assert members == ["alice", "lena"]
    row_url = url(budgeted, f"members/{alice.pk}/")
    form = lena.get(row_url, {"edit": "1"}).content.decode()
    assert 'data-testid="member-row-form"' in form
    assert re.findall(r'<input form="[^"]+" name="(\w+)"', form) == ["accelerators", "reason"]

    # alice's jobs hold 5 accelerators (4 + 1): a limit of 4 is refused once, saying so, until confirmed.
    held = placed.member_holds(budgeted.world.teams["vision"], alice)
    assert held == 5
    warned = lena.post(row_url, {"accelerators": "4", "reason": "one node at a time"})
    assert warned.status_code == 400
    assert "alice&#x27;s jobs hold 5 accelerators now, more than 4" in warned.content.decode()
    assert 'data-testid="confirm-below-use"' in warned.content.decode()
    assert not MemberLimit.objects.filter(user=alice).exists()
    response = lena.post(row_url, {"accelerators": "4", "reason": "one node at a time", "confirm": "on"})
    assert response.status_code == 200
    assert response["HX-Trigger"] == "quotas-changed"
    assert re.search(r'data-cell="accelerators">4</td>', response.content.decode())
    assert MemberLimit.objects.get(user=alice).accelerators == 4
    history = lena.get(url(budgeted, "history/")).content.decode()
    assert "accelerators at once: no limit → <strong>4</strong>" in history

    cleared = lena.post(row_url, {"accelerators": "", "reason": "the deadline"})
    assert cleared.status_code == 200
    assert "no limit" in cleared.content.decode()
    assert not MemberLimit.objects.filter(user=alice).exists()


@pytest.mark.parametrize(
    ("posted", "field", "message"),
    [
        ({"accelerators": "-1"}, "accelerators", "Must be zero or more"),
        ({"accelerators": "many"}, "accelerators", "is not a number"),
        ({"accelerators": "2", "reason": ""}, "reason", "Say why"),
    ],
)
def test_bad_member_limits_come_back_by_their_field_with_400_and_write_nothing(
    budgeted: Fleet, posted: dict[str, str], field: str, message: str
) -> None:
    before = written()
    data = {"reason": "try", **posted}
    response = signed_in(budgeted, "lena").post(url(budgeted, f"members/{budgeted.user('alice').pk}/"), data)
    assert response.status_code == 400
    body = response.content.decode()
    errors = re.search(rf'data-testid="errors-{field}">(.*?)</div>', body, re.S)
    assert errors is not None
    assert message in errors.group(1)
    assert f'value="{posted["accelerators"]}"' in body
    assert written() == before


def test_member_limits_are_the_leads_and_admins(budgeted: Fleet) -> None:
    before = written()
    row_url = url(budgeted, f"members/{budgeted.user('alice').pk}/")
    alice = signed_in(budgeted, "alice")
    assert 'data-testid="edit-member-limit"' not in alice.get(url(budgeted)).content.decode()
    assert 'data-testid="member-row-form"' not in alice.get(row_url, {"edit": "1"}).content.decode()
    refused = alice.post(row_url, {"accelerators": "64", "reason": "mine"})
    assert refused.status_code == 403
    assert "Only a lead of" in refused.content.decode()
    assert signed_in(budgeted, "fiona").post(row_url, {"accelerators": "64", "reason": "x"}).status_code == 403
    # Bob is not in Vision: not a row of its page, for anyone.
    bob_row = url(budgeted, f"members/{budgeted.user('bob').pk}/")
    assert signed_in(budgeted, "lena").post(bob_row, {"accelerators": "1", "reason": "x"}).status_code == 404
    assert written() == before
    admin = signed_in(budgeted, "adam").post(row_url, {"accelerators": "8", "reason": "fair share"})
    assert admin.status_code == 200
    assert MemberLimit.objects.get(user=budgeted.user("alice")).accelerators == 8


def test_the_organization_page_lists_every_budget(budgeted: Fleet) -> None:
    budgets.set_budget(budgeted.user("adam"), budgeted.world.teams["robotics"], amount=50, reason="robotics' plan")
    fiona = signed_in(budgeted, "fiona").get("/quotas/")
    assert fiona.status_code == 200
    body = fiona.content.decode()
    table = body.split('data-testid="org-budget-table"')[1].split("</table>")[0]
    listed = re.findall(r'data-budget="([^"]+)" data-measure="(\w+)"', table)
    assert listed == [
        ("team robotics", "amount"),
        ("team vision", "accelerator_hours"),
        ("team vision", "amount"),
        ("project vision/detection", "accelerator_hours"),
    ]
    assert cells(table, "team vision", "accelerator_hours")["used"] == "10 10%"
    assert cells(table, "team robotics", "amount")["used"] == "0.00 0%"
    assert 'data-testid="change-budget"' not in table  # finance reads
    assert "secret-token" not in body
    chart = fiona.context["sections"][0]["budgets"]["chart"]["data"]
    assert [(t["name"], t["x"]) for t in chart if t["name"] == "Used"] == [
        ("Used", ["vision · the team", "vision · project Detection"]),
        ("Used", ["robotics · the team", "vision · the team"]),
    ]

    adam = signed_in(budgeted, "adam").get("/quotas/").content.decode()
    vision = budgeted.world.teams["vision"].pk
    assert f'href="/teams/{vision}/quotas/?target=team#budget-form"' in adam
    assert signed_in(budgeted, "alice").get("/quotas/").status_code == 403


def test_a_lead_is_told_who_sets_what_she_may_not_change(budgeted: Fleet) -> None:
    """Beside each value a lead may not change, who may: the team's own budget, and in the team queue's quota
    form its nominal quota and borrowing limit (she sets its lending limit)."""
    lena = signed_in(budgeted, "lena")
    page = lena.get(url(budgeted)).content.decode()
    assert re.search(r'data-testid="budget-locked">Set by an organization admin<', page)
    queue = actions.queue_for(budgeted.world.teams["vision"], None)
    quotas.set_quota(budgeted.user("adam"), queue, flavor=H100, nominal=8, reason="Q4 plan")
    query = {"edit": "1", "flavor": H100, "resource": "accelerator"}
    form = lena.get(url(budgeted, f"queues/{queue.pk}/quota/"), query)
    body = form.content.decode()
    assert form.status_code == 200
    for locked in ("nominal", "borrowing_limit"):
        assert f'data-testid="locked-{locked}">Set by an organization admin<' in body, locked
    assert 'data-testid="locked-lending_limit"' not in body
    assert 'name="lending_limit"' in body
    adam = signed_in(budgeted, "adam").get(url(budgeted, f"queues/{queue.pk}/quota/"), query)
    assert 'data-testid="locked-' not in adam.content.decode()


def test_the_budget_form_warns_before_a_limit_below_this_month_s_use(budgeted: Fleet) -> None:
    """Detection used 2 accelerator-hours this month (one GPU since 10:00): lena's limit of 1 comes back with
    what is used and a box to confirm it; ticked, it is set."""
    lena = signed_in(budgeted, "lena")
    detection = project(budgeted, "detection")
    data = {"target": f"project:{detection.pk}", "accelerator_hours": "1", "hard": "on", "reason": "cut"}
    before = written()
    warned = lena.post(url(budgeted, "budgets/"), data, headers=HTMX)
    assert warned.status_code == 400
    body = unescape(warned.content.decode())
    assert "Project Detection has already used 2 accelerator-hours this month, more than 1; its jobs would" in body
    assert 'data-testid="confirm-below-use"' in body
    assert written() == before
    confirmed = lena.post(url(budgeted, "budgets/"), {**data, "confirm": "on"}, headers=HTMX)
    assert confirmed.status_code == 200
    assert Budget.objects.get(project=detection).accelerator_hours == 1
