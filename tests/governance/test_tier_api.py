"""The priority tiers API: every member of the organization reads its tiers, only its admins create or change
one (403 for the rest, 404 for another organization), bad input is a 400 naming each field, and a refusal
writes nothing."""

from __future__ import annotations

from typing import Any

import pytest

from governance.models import PriorityTier, QuotaChange
from tests.conftest import World, api_client

pytestmark = pytest.mark.django_db


def written() -> tuple[Any, ...]:
    tiers = list(PriorityTier.objects.order_by("pk").values_list("pk", "name", "value", "preemptible", "is_default"))
    return tiers, QuotaChange.objects.count()


def test_members_read_their_organizations_tiers_only(world: World) -> None:
    PriorityTier.objects.create(organization=world.org, name="normal", value=0, is_default=True)
    PriorityTier.objects.create(organization=world.other_org, name="theirs", value=5)
    for username in ("alice", "lena", "fiona", "adam"):
        names = [t["name"] for t in api_client(world.users[username]).get("/api/v1/tiers/").json()["results"]]
        assert names == ["normal"], username
    theirs = PriorityTier.objects.get(name="theirs")
    assert api_client(world.users["alice"]).get(f"/api/v1/tiers/{theirs.pk}/").status_code == 404


def test_an_admin_creates_then_changes_a_tier(world: World) -> None:
    adam = api_client(world.users["adam"])
    body = {
        "name": "deadline",
        "value": 500,
        "preemptible": False,
        "grace_seconds": 0,
        "teams": ["vision"],
        "reason": "conference week",
    }
    created = adam.post("/api/v1/tiers/", body, format="json")
    assert created.status_code == 201, created.json()
    assert (created.json()["teams"], created.json()["preemptible"]) == (["vision"], False)
    changed = adam.post("/api/v1/tiers/", {**body, "value": 600, "reason": "higher"}, format="json")
    assert changed.status_code == 200
    assert PriorityTier.objects.get(name="deadline").value == 600
    assert [c.kind for c in QuotaChange.objects.all()] == ["tier", "tier"]
    bounded = adam.post("/api/v1/tiers/", {**body, "value": 600, "max_wait": 6 * 3600, "reason": "6 h"}, format="json")
    assert (bounded.status_code, bounded.json()["max_wait"]) == (200, 6 * 3600)
    too_short = adam.post("/api/v1/tiers/", {**body, "max_wait": 60, "reason": "1 min"}, format="json")
    assert too_short.status_code == 400
    assert set(too_short.json()["error"]["fields"]) == {"max_wait"}
    assert PriorityTier.objects.get(name="deadline").max_wait == 6 * 3600


@pytest.mark.parametrize("username", ["alice", "lena", "fiona"])
def test_only_admins_change_tiers(world: World, username: str) -> None:
    before = written()
    response = api_client(world.users[username]).post(
        "/api/v1/tiers/", {"name": "mine", "value": 1, "reason": "x"}, format="json"
    )
    assert response.status_code == 403
    assert written() == before


def test_another_organization_is_not_found(world: World) -> None:
    before = written()
    response = api_client(world.users["mallory"]).post(
        "/api/v1/tiers/", {"organization": world.org.slug, "name": "x", "value": 1, "reason": "x"}, format="json"
    )
    assert response.status_code == 404
    assert written() == before


def test_bad_input_names_each_field_and_writes_nothing(world: World) -> None:
    adam, before = api_client(world.users["adam"]), written()
    response = adam.post(
        "/api/v1/tiers/",
        {"name": "x", "value": "high", "grace_seconds": -5, "teams": ["nobody"], "colour": "red", "reason": "x"},
        format="json",
    )
    assert response.status_code == 400
    assert set(response.json()["error"]["fields"]) == {"value", "colour"}
    response = adam.post("/api/v1/tiers/", {"name": "x", "value": 1, "grace_seconds": -5, "reason": ""}, format="json")
    assert response.status_code == 400
    assert set(response.json()["error"]["fields"]) == {"grace_seconds", "reason"}
    response = adam.post("/api/v1/tiers/", {"name": "x", "value": 1, "teams": ["nobody"], "reason": "y"}, format="json")
    assert response.status_code == 400
    assert "No team nobody" in response.json()["error"]["fields"]["teams"][0]
    assert written() == before


def test_a_tier_sets_its_own_failover_delay_or_takes_each_clusters(world: World) -> None:
    adam = api_client(world.users["adam"])
    body = {"name": "long-runs", "value": 10, "failover_after": 3600, "reason": "multi-day training"}
    answer = adam.post("/api/v1/tiers/", body, format="json")
    assert answer.status_code == 201, answer.json()
    assert answer.json()["failover_after"] == 3600
    assert PriorityTier.objects.get(name="long-runs").failover_after == 3600
    before = written()
    refused = adam.post("/api/v1/tiers/", {**body, "failover_after": 5}, format="json")
    assert refused.status_code == 400
    assert "failover_after" in refused.json()["error"]["fields"]
    assert written() == before
    cleared = adam.post("/api/v1/tiers/", {**body, "failover_after": None}, format="json")
    assert cleared.status_code == 200, cleared.json()
    assert PriorityTier.objects.get(name="long-runs").failover_after is None
