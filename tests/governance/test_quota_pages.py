"""The quota pages: a team's quotas, chart, jobs and history; in-place edits of quotas and queue policies (the
row back on success with the history told to reload, the form back with the message by its field and 400 on
bad input, 403 for what the user may not change, nothing written either way); the sub-quota form; the
organization's page for admins and finance."""

from __future__ import annotations

import re
from typing import Any

import pytest
from django.test import Client

from governance.actions import quotas
from governance.models import Cohort, Queue, Quota, QuotaChange
from scheduler import actions
from tenancy.models import AuditLog, Project
from tests.scheduler.conftest import Fleet

pytestmark = pytest.mark.django_db

H100 = "H100-SXM-80GB"


def signed_in(fleet: Fleet, username: str) -> Client:
    client = Client()
    client.force_login(fleet.user(username))
    return client


def team_queue(fleet: Fleet, team: str = "vision") -> Queue:
    return actions.queue_for(fleet.world.teams[team], None)


def written() -> tuple[Any, ...]:
    """Everything a quota page may write."""
    rows = list(Quota.objects.order_by("pk").values_list("pk", "nominal", "borrowing_limit", "lending_limit"))
    policies = list(Queue.objects.order_by("pk").values_list("pk", "flavor_order", "weight", "reclaim", "cohort"))
    audited = AuditLog.objects.exclude(action__startswith="auth.").count()  # signing in is audited too
    return rows, policies, QuotaChange.objects.count(), audited, Cohort.objects.count()


@pytest.fixture
def governed(fleet: Fleet) -> Fleet:
    """Vision has 16 H100 (8 may be borrowed on top) and runs 4; Robotics has 8."""
    adam = fleet.user("adam")
    quotas.set_quota(adam, team_queue(fleet), flavor=H100, nominal=16, borrowing_limit=8, reason="Q4 plan")
    quotas.set_quota(adam, team_queue(fleet, "robotics"), flavor=H100, nominal=8, reason="Q4 plan")
    fleet.submit("alice", name="running-one", accelerators=4)
    fleet.cycle()
    fleet.submit("alice", name="waiting-one", accelerators=8)
    return fleet


def url(fleet: Fleet, team: str = "vision", rest: str = "") -> str:
    return f"/teams/{fleet.world.teams[team].pk}/quotas/{rest}"


def cell_url(fleet: Fleet, queue: Queue) -> str:
    return url(fleet, queue.team.slug, f"queues/{queue.pk}/quota/")


def test_the_team_page_shows_quotas_usage_chart_jobs_and_history(governed: Fleet) -> None:
    response = signed_in(governed, "alice").get(url(governed))
    assert response.status_code == 200
    body = response.content.decode()
    row = re.search(r'<tr data-testid="quota-row" data-queue="vision" data-flavor="H100-SXM-80GB".*?</tr>', body, re.S)
    assert row is not None
    cells = dict(re.findall(r'data-cell="(\w+)">(.*?)</td>', row.group(0), re.S))
    assert cells["nominal"] == "16"
    assert cells["borrowing_limit"] == "8"
    assert cells["used"].startswith("4 ")
    assert "8" in cells["pending"]
    assert 'data-testid="edit-quota"' not in body  # a researcher edits nothing
    # The chart's figure, the queue's own polled partial with its jobs, and the history.
    figure = response.context["chart"]
    assert [trace["name"] for trace in figure["data"]] == [
        "Used within nominal",
        "Borrowed",
        "Nominal",
        "Pending demand",
    ]
    assert figure["data"][0]["x"] == [f"vision · {H100}"]
    assert [trace["y"] for trace in figure["data"]] == [[4.0], [0.0], [16.0], [8.0]]
    assert 'id="team-chart-figure"' in body
    assert 'hx-get="/jobs/queues/' in body
    assert "running-one" in body
    assert "waiting-one" in body
    assert body.count('data-testid="history-row"') == 1  # Robotics' change is not Vision's history


def test_a_lead_edits_the_teams_lending_limit_in_place(governed: Fleet) -> None:
    lena, queue = signed_in(governed, "lena"), team_queue(governed)
    form = lena.get(cell_url(governed, queue), {"edit": "1", "flavor": H100, "resource": "accelerator"})
    body = form.content.decode()
    assert form.status_code == 200
    assert 'data-testid="quota-row-form"' in body
    assert re.findall(r'<input form="[^"]+" name="(\w+)"', body) == ["lending_limit", "reason"]
    response = lena.post(
        cell_url(governed, queue),
        {"flavor": H100, "resource": "accelerator", "lending_limit": "4", "reason": "Robotics may use our nights"},
    )
    assert response.status_code == 200
    assert response["HX-Trigger"] == "quotas-changed"
    assert 'data-testid="quota-row"' in response.content.decode()
    quota = Quota.objects.get(queue=queue, flavor__name=H100)
    assert [quota.nominal, quota.borrowing_limit, quota.lending_limit] == [16, 8, 4]  # the others kept
    change = QuotaChange.objects.first()
    assert change is not None
    assert (change.actor_name, change.before, change.after) == ("lena", {"lending_limit": None}, {"lending_limit": "4"})
    history = lena.get(url(governed, rest="history/")).content.decode()
    assert "may lend: no limit → <strong>4</strong>" in history
    assert "Robotics may use our nights" in history


@pytest.mark.parametrize(
    ("posted", "field", "message"),
    [
        ({"lending_limit": "17"}, "lending_limit", "cannot lend more than its nominal quota"),
        ({"lending_limit": "lots"}, "lending_limit", "is not a number"),
        ({"lending_limit": "-1"}, "lending_limit", "Must be zero or more"),
        ({"lending_limit": "1.0001"}, "lending_limit", "At most three decimal places"),
        ({"lending_limit": "2", "reason": " "}, "reason", "Say why"),
        ({"lending_limit": "2", "flavor": "TPU v9"}, "other", "Unknown accelerator type"),
        ({"lending_limit": "2", "resource": "disk"}, "other", "Unknown resource"),
    ],
)
def test_bad_values_come_back_by_their_field_with_400_and_write_nothing(
    governed: Fleet, posted: dict[str, str], field: str, message: str
) -> None:
    before = written()
    data = {"flavor": H100, "resource": "accelerator", "reason": "try", **posted}
    response = signed_in(governed, "lena").post(cell_url(governed, team_queue(governed)), data)
    assert response.status_code == 400
    body = response.content.decode()
    errors = re.search(rf'data-testid="errors-{field}">(.*?)</div>', body, re.S)
    assert errors is not None
    assert message in errors.group(1)
    if field != "other":
        assert f'value="{posted["lending_limit"]}"' in body  # what was typed stays in the form
    assert written() == before


def test_what_the_user_may_not_change_is_403_and_writes_nothing(governed: Fleet) -> None:
    before = written()
    queue = team_queue(governed)
    data = {"flavor": H100, "resource": "accelerator", "nominal": "64", "reason": "more"}
    refused = signed_in(governed, "lena").post(cell_url(governed, queue), data)  # the team's own nominal: admins'
    assert refused.status_code == 403
    assert "set by an organization admin" in refused.content.decode()
    for username in ("alice", "fiona"):
        assert (
            signed_in(governed, username)
            .post(cell_url(governed, queue), {**data, "nominal": "16", "lending_limit": "1"})
            .status_code
            == 403
        )
    assert signed_in(governed, "bob").post(cell_url(governed, queue), data).status_code == 404
    assert written() == before
    # An admin may: the nominal and borrowing limit of any team's queue.
    assert signed_in(governed, "adam").post(cell_url(governed, queue), data).status_code == 200
    assert Quota.objects.get(queue=queue).nominal == 64


def test_a_lead_gives_a_project_a_sub_quota_and_edits_it(governed: Fleet) -> None:
    lena = signed_in(governed, "lena")
    project = Project.objects.get(team=governed.world.teams["vision"], slug="detection")
    page = lena.get(url(governed)).content.decode()
    assert 'data-testid="quota-new-form"' in page
    assert f'value="project:{project.pk}"' in page
    assert 'value="team"' not in page
    before = written()
    data = {
        "target": f"project:{project.pk}",
        "flavor": H100,
        "resource": "accelerator",
        "nominal": "20",
        "borrowing_limit": "",
        "lending_limit": "",
        "reason": "detection's share",
    }
    refused = lena.post(url(governed, rest="new/"), data)
    assert refused.status_code == 400
    assert "at most 16 is left" in refused.content.decode()
    assert written() == before
    assert not Queue.objects.filter(project=project).exists()  # the refused quota left no queue behind

    response = lena.post(url(governed, rest="new/"), {**data, "nominal": "10"})
    assert response.status_code == 302
    queue = Queue.objects.get(project=project)
    assert Quota.objects.get(queue=queue).nominal == 10
    # The project's row: the lead may change all three of its limits.
    form = lena.get(cell_url(governed, queue), {"edit": "1", "flavor": H100}).content.decode()
    assert re.findall(r'<input form="[^"]+" name="(\w+)"', form) == [
        "nominal",
        "borrowing_limit",
        "lending_limit",
        "reason",
    ]
    assert (
        lena.post(
            cell_url(governed, queue), {"flavor": H100, "nominal": "12", "borrowing_limit": "2", "reason": "more"}
        ).status_code
        == 200
    )
    changed = Quota.objects.get(queue=queue)
    assert [changed.nominal, changed.borrowing_limit] == [12, 2]
    # The team page: the team's row keeps what the project was not given.
    body = lena.get(url(governed)).content.decode()
    assert "keeps 4; its projects the rest" in body


def test_the_team_form_refuses_bad_input_by_field_and_others_outright(governed: Fleet) -> None:
    before = written()
    project = Project.objects.get(team=governed.world.teams["vision"], slug="detection")
    data = {"target": f"project:{project.pk}", "flavor": H100, "resource": "accelerator", "nominal": "", "reason": ""}
    response = signed_in(governed, "lena").post(url(governed, rest="new/"), data)
    assert response.status_code == 400
    assert set(response.context["quota_form"].errors) == {"nominal", "reason"}
    lead_on_team = {**data, "target": "team", "nominal": "4", "reason": "x"}
    assert (
        "target"
        in signed_in(governed, "lena").post(url(governed, rest="new/"), lead_on_team).context["quota_form"].errors
    )
    assert signed_in(governed, "alice").post(url(governed, rest="new/"), {**data, "nominal": "4"}).status_code == 403
    assert signed_in(governed, "fiona").post(url(governed, rest="new/"), {**data, "nominal": "4"}).status_code == 403
    assert signed_in(governed, "trent").post(url(governed, rest="new/"), {**data, "nominal": "4"}).status_code == 404
    assert written() == before


def test_queue_policy_in_place_the_lead_the_flavor_order_an_admin_the_rest(governed: Fleet) -> None:
    queue = team_queue(governed)
    policy = url(governed, rest=f"queues/{queue.pk}/policy/")
    lena, adam = signed_in(governed, "lena"), signed_in(governed, "adam")
    form = lena.get(policy, {"edit": 1}).content.decode()
    assert re.findall(r'<(?:input|select) form="[^"]+" name="(\w+)"', form) == ["flavor_order", "reason"]
    ok = lena.post(policy, {"flavor_order": H100, "reason": "H100 first"})
    assert ok.status_code == 200
    assert ok["HX-Trigger"] == "quotas-changed"
    assert Queue.objects.get(pk=queue.pk).flavor_order == [H100]
    before = written()
    assert lena.post(policy, {"weight": "3", "reason": "more"}).status_code == 403
    bad = lena.post(policy, {"flavor_order": "H100, nope", "reason": "x"})
    assert bad.status_code == 400
    assert "Unknown accelerator type(s): H100, nope" in bad.content.decode()
    for field, value in (("weight", "heavy"), ("reclaim", "sometimes"), ("cohort", "999999")):
        refused = adam.post(policy, {field: value, "reason": "try"})
        assert refused.status_code == 400, field
        assert field in refused.context["errors"], field
    assert written() == before
    research = quotas.create_cohort(governed.user("adam"), governed.org, name="research", reason="pool")
    done = adam.post(policy, {"weight": "2.5", "reclaim": "any", "cohort": str(research.pk), "reason": "pool"})
    assert done.status_code == 200
    queue.refresh_from_db()
    assert (queue.weight, queue.reclaim, queue.cohort) == (2.5, "any", research)


def test_the_history_is_paged_newest_first(governed: Fleet) -> None:
    for step in range(1, 23):
        quotas.set_quota(
            governed.user("lena"),
            team_queue(governed),
            flavor=H100,
            nominal=16,
            borrowing_limit=8,
            lending_limit=step % 2,
            reason=f"step {step}",
        )
    lena = signed_in(governed, "lena")
    first = lena.get(url(governed)).content.decode()
    assert first.count('data-testid="history-row"') == 20
    assert first.index("step 22") < first.index("step 21")
    second = lena.get(url(governed, rest="history/"), {"page": 2}).content.decode()
    assert second.count('data-testid="history-row"') == 3  # 22 changes and the first quota
    assert "step 2<" in second
    assert "Q4 plan" in second


def test_the_organization_page_for_admins_and_finance(governed: Fleet) -> None:
    for username in ("alice", "lena", "bob", "trent"):
        assert signed_in(governed, username).get("/quotas/").status_code == 403
    fiona = signed_in(governed, "fiona").get("/quotas/")
    assert fiona.status_code == 200
    body = fiona.content.decode()
    assert body.count('data-testid="org-team"') == 3
    assert "Intruders" not in body
    assert 'data-testid="edit-quota"' not in body
    assert 'data-testid="cohort-form"' not in body
    assert signed_in(governed, "adam").get("/quotas/").content.decode().count('data-testid="edit-quota"') == 2
    mallory = signed_in(governed, "mallory").get("/quotas/").content.decode()
    assert "Intruders" in mallory
    assert "Vision" not in mallory


def test_admins_shape_the_cohort_tree_and_its_quotas(governed: Fleet) -> None:
    adam, org = signed_in(governed, "adam"), governed.org.pk
    before = written()
    for username, status in (("fiona", 403), ("lena", 403), ("mallory", 404)):
        response = signed_in(governed, username).post(
            "/quotas/cohorts/", {"organization": org, "name": "x", "reason": "x"}
        )
        assert response.status_code == status, username
    clash = adam.post("/quotas/cohorts/", {"organization": org, "name": "vision", "reason": "clash"})
    assert clash.status_code == 400
    assert "name" in clash.context["sections"][0]["cohort_form"].errors
    assert written() == before
    assert adam.post("/quotas/cohorts/", {"organization": org, "name": "research", "reason": "pool"}).status_code == 302
    research = Cohort.objects.get(name="research")
    data = {
        "organization": org,
        "cohort": research.pk,
        "flavor": H100,
        "resource": "accelerator",
        "nominal": "8",
        "reason": "a shared reserve",
    }
    assert signed_in(governed, "fiona").post("/quotas/cohorts/quotas/", data).status_code == 403
    assert adam.post("/quotas/cohorts/quotas/", data).status_code == 302
    # In place: the cohort's row, as a team's.
    cell = f"/quotas/cohorts/{research.pk}/quota/"
    bad = adam.post(cell, {"flavor": H100, "nominal": "8", "lending_limit": "9", "reason": "x"})
    assert bad.status_code == 400
    assert "cannot lend more" in bad.content.decode()
    assert signed_in(governed, "fiona").post(cell, {"flavor": H100, "nominal": "9", "reason": "x"}).status_code == 403
    assert signed_in(governed, "mallory").post(cell, {"flavor": H100, "nominal": "9", "reason": "x"}).status_code == 404
    assert Quota.objects.get(cohort=research).nominal == 8
    assert adam.post(cell, {"flavor": H100, "nominal": "9", "reason": "more"}).status_code == 200
    assert Quota.objects.get(cohort=research).nominal == 9
