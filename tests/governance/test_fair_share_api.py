"""Fair share with memory through the API and the team's page: every member reads the organization's setting and
where each visible queue stands (its share, its recent use, why); only admins change the setting (403 for the
rest, 404 for another organization), bad input is a 400 naming each field, and a refusal writes nothing."""

from __future__ import annotations

import pytest
from django.test import Client
from django.utils import timezone

from governance.models import FairShare, Queue, QueueUsage, QuotaChange
from scheduler.placement import feasibility
from tests.conftest import World, api_client

pytestmark = pytest.mark.django_db


def remember(world: World, **hours: float) -> None:
    """The meter's work, done by hand: each team queue's recent use as of now."""
    for slug, amount in hours.items():
        queue = Queue.objects.get(team__slug=slug, project=None)
        QueueUsage.objects.update_or_create(
            queue=queue, defaults={"accelerator_hours": amount, "as_of": timezone.now()}
        )
    feasibility.forget(world.org)


def test_a_lead_sees_where_the_teams_queue_stands_and_why(world: World) -> None:
    remember(world, vision=300.0, robotics=100.0, language=0.0)
    body = api_client(world.users["lena"]).get("/api/v1/queues/").json()["results"]
    assert {q["team"] for q in body} == {"vision"}  # another team's queue is not there
    vision = next(q for q in body if q["project"] is None)["fair_share"]
    assert vision["recent_accelerator_hours"] == pytest.approx(300.0, rel=1e-3)
    assert vision["portion"] == pytest.approx(0.75, rel=1e-3)
    assert 0 < vision["entitlement"] < 0.75
    assert vision["memory"] > 0
    assert vision["share"] == pytest.approx(vision["borrowing"] + vision["memory"])
    assert vision["rank"] == vision["of"]  # it used most: its jobs come last
    assert "It used 75% of the recent accelerator-hours of the queues beside it" in vision["why"]
    assert "half-life 7 days" in vision["why"]

    robotics = api_client(world.users["bob"]).get("/api/v1/queues/").json()["results"]
    assert next(q for q in robotics if q["project"] is None)["fair_share"]["rank"] < vision["rank"]


def test_members_read_the_setting_of_their_organization_only(world: World) -> None:
    for username in ("alice", "lena", "fiona", "adam"):
        got = api_client(world.users[username]).get("/api/v1/fair-share/").json()
        assert got == [{"organization": "demo", "half_life": 7 * 86400, "usage_weight": 1.0}], username


def test_an_admin_changes_the_setting_with_a_reason(world: World) -> None:
    adam = api_client(world.users["adam"])
    changed = adam.post("/api/v1/fair-share/", {"half_life": 86400, "reason": "remember a day"}, format="json")
    assert changed.status_code == 200, changed.json()
    assert changed.json() == {"organization": "demo", "half_life": 86400, "usage_weight": 1.0}
    assert FairShare.objects.get(organization=world.org).half_life == 86400
    assert QuotaChange.objects.get(kind="fair_share").reason == "remember a day"


@pytest.mark.parametrize("username", ["alice", "lena", "fiona"])
def test_only_admins_change_it(world: World, username: str) -> None:
    response = api_client(world.users[username]).post(
        "/api/v1/fair-share/", {"usage_weight": 0, "reason": "mine"}, format="json"
    )
    assert response.status_code == 403
    assert not FairShare.objects.exists()
    assert not QuotaChange.objects.exists()


def test_bad_input_is_named_and_another_organization_is_not_found(world: World) -> None:
    adam = api_client(world.users["adam"])
    bad = adam.post(
        "/api/v1/fair-share/", {"half_life": 60, "usage_weight": 11, "colour": "red", "reason": "x"}, format="json"
    )
    assert bad.status_code == 400
    assert set(bad.json()["error"]["fields"]) >= {"colour"}
    bad = adam.post("/api/v1/fair-share/", {"half_life": 60, "usage_weight": 11, "reason": ""}, format="json")
    assert bad.status_code == 400
    assert set(bad.json()["error"]["fields"]) == {"half_life", "usage_weight", "reason"}
    theirs = adam.post(
        "/api/v1/fair-share/", {"organization": "rival", "usage_weight": 0, "reason": "x"}, format="json"
    )
    assert theirs.status_code == 404
    mallory = api_client(world.users["mallory"])
    assert (
        mallory.post("/api/v1/fair-share/", {"organization": "demo", "reason": "x"}, format="json").status_code == 404
    )
    assert not FairShare.objects.exists()
    assert not QuotaChange.objects.exists()


def test_the_team_page_says_where_its_queue_stands_and_why(world: World) -> None:
    remember(world, vision=300.0, robotics=100.0, language=0.0)
    client = Client()
    client.force_login(world.users["lena"])
    page = client.get(f"/teams/{world.teams['vision'].pk}/quotas/").content.decode()
    assert 'data-testid="fair-share-table"' in page
    assert "3 of 3" in page
    assert "75%" in page
    assert "33%" in page
    assert "It used 75% of the recent accelerator-hours of the queues beside it (half-life 7 days)" in page


def test_an_admin_sets_it_on_the_organizations_page_and_bad_input_is_named(world: World) -> None:
    remember(world, vision=300.0, robotics=100.0)
    adam = Client()
    adam.force_login(world.users["adam"])
    page = adam.get("/quotas/").content.decode()
    assert 'data-testid="org-fair-share-table"' in page
    assert "half-life" in page.lower()
    assert 'data-testid="fair-share-form"' in page
    form = {"organization": world.org.pk, "half_life_days": "2", "usage_weight": "0.5", "reason": "shorter memory"}
    bad = adam.post("/quotas/fair-share/", {**form, "half_life_days": "900", "reason": ""})
    assert bad.status_code == 400
    assert "Ensure this value is less than or equal to 365" in bad.content.decode()
    assert not FairShare.objects.exists()
    done = adam.post("/quotas/fair-share/", form)
    assert done.status_code == 302
    setting = FairShare.objects.get(organization=world.org)
    assert (setting.half_life, setting.usage_weight) == (2 * 86400, 0.5)
    lena = Client()
    lena.force_login(world.users["lena"])
    assert lena.post("/quotas/fair-share/", form).status_code == 403
