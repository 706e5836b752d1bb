"""The quotas API: queues with their quotas and usage, a queue's quota and policy changed (200 with what
changed, 400 naming each bad field, 403 for what the user may not change, 404 beyond what they see, nothing
written on refusal), and the history of quota changes."""

from __future__ import annotations

from typing import Any

import pytest

from governance.actions import quotas
from governance.models import Cohort, Queue, Quota, QuotaChange
from scheduler import actions
from tenancy.models import AuditLog
from tests.conftest import api_client
from tests.scheduler.conftest import Fleet

pytestmark = pytest.mark.django_db

H100 = "H100-SXM-80GB"


def team_queue(fleet: Fleet, team: str = "vision") -> Queue:
    return actions.queue_for(fleet.world.teams[team], None)


def written() -> tuple[Any, ...]:
    rows = list(Quota.objects.order_by("pk").values_list("pk", "nominal", "borrowing_limit", "lending_limit"))
    policies = list(Queue.objects.order_by("pk").values_list("pk", "flavor_order", "weight", "reclaim", "cohort"))
    audited = AuditLog.objects.exclude(action__startswith="auth.").exclude(action__startswith="token.").count()
    return rows, policies, QuotaChange.objects.count(), audited


@pytest.fixture
def governed(fleet: Fleet) -> Fleet:
    adam = fleet.user("adam")
    quotas.set_quota(adam, team_queue(fleet), flavor=H100, nominal=16, borrowing_limit=8, reason="Q4 plan")
    quotas.set_quota(adam, team_queue(fleet, "robotics"), flavor=H100, nominal=8, reason="Q4 plan")
    fleet.submit("alice", name="running-one", accelerators=4)
    fleet.cycle()
    fleet.submit("alice", name="waiting-one", accelerators=8)
    return fleet


def client(fleet: Fleet, username: str) -> Any:
    return api_client(fleet.user(username))


def test_queues_are_listed_with_their_quotas_and_usage(governed: Fleet) -> None:
    alice = client(governed, "alice")
    listed = alice.get("/api/v1/queues/").json()["results"]
    assert [q["name"] for q in listed] == ["vision"]
    (vision,) = listed
    assert (vision["team"], vision["project"], vision["cohort"], vision["flavor_order"]) == ("vision", None, None, [])
    assert vision["quotas"] == [
        {
            "flavor": H100,
            "resource": "accelerator",
            "nominal": "16.000",
            "borrowing_limit": "8.000",
            "lending_limit": None,
            "own": "16.000",
            "used": "4.000",
            "borrowed": "0.000",
            "lent": "0.000",
            "pending": "8.000",
            "governed": True,
        },
    ]
    assert alice.get(f"/api/v1/queues/{vision['id']}/").json()["quotas"] == vision["quotas"]
    assert alice.get("/api/v1/queues/?team=robotics").json()["count"] == 0
    fiona = client(governed, "fiona").get("/api/v1/queues/?page_size=50").json()["results"]
    assert sorted(q["name"] for q in fiona) == ["language", "robotics", "vision"]
    assert [q["name"] for q in client(governed, "fiona").get("/api/v1/queues/?team=robotics").json()["results"]] == [
        "robotics"
    ]
    assert client(governed, "mallory").get("/api/v1/queues/").json()["results"][0]["name"] == "intruders"


def test_a_lead_sets_the_teams_lending_limit(governed: Fleet) -> None:
    queue = team_queue(governed)
    response = client(governed, "lena").post(
        f"/api/v1/queues/{queue.pk}/quotas/", {"flavor": H100, "lending_limit": 4, "reason": "nights"}
    )
    assert response.status_code == 200
    body = response.json()
    assert (body["nominal"], body["borrowing_limit"], body["lending_limit"]) == ("16.000", "8.000", "4.000")
    change = QuotaChange.objects.first()
    assert change is not None
    assert (change.actor_name, change.after, change.reason) == ("lena", {"lending_limit": "4"}, "nights")
    history = client(governed, "alice").get("/api/v1/quota-changes/").json()["results"]
    assert history[0]["after"] == {"lending_limit": "4"}
    assert history[0]["queue"] == "vision"
    assert history[0]["actor"] == "lena"


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"flavor": H100, "nominal": "lots", "reason": "x"}, "nominal"),
        ({"flavor": H100, "nominal": -1, "reason": "x"}, "nominal"),
        ({"flavor": H100, "nominal": 16, "lending_limit": 17, "reason": "x"}, "lending_limit"),
        ({"flavor": H100, "nominal": 16, "borrowing_limit": "1.0001", "reason": "x"}, "borrowing_limit"),
        ({"flavor": "TPU v9", "nominal": 4, "reason": "x"}, "flavor"),
        ({"flavor": H100, "resource": "disk", "nominal": 4, "reason": "x"}, "resource"),
        ({"flavor": H100, "nominal": 4}, "reason"),
        ({"flavor": H100, "nominal": 4, "lend": 2, "reason": "x"}, "lend"),
        ({"nominal": 4, "reason": "x"}, "flavor"),
    ],
)
def test_bad_quotas_are_400_naming_the_field_and_change_nothing(
    governed: Fleet, body: dict[str, Any], field: str
) -> None:
    adam = client(governed, "adam")
    before = written()
    response = adam.post(f"/api/v1/queues/{team_queue(governed).pk}/quotas/", body)
    assert response.status_code == 400
    error = response.json()["error"]
    assert field in error["fields"], error
    assert written() == before


def test_who_may_not_change_a_quota_is_told_so_before_their_input_is_judged(governed: Fleet) -> None:
    queue = team_queue(governed)
    path = f"/api/v1/queues/{queue.pk}/quotas/"
    clients = {name: client(governed, name) for name in ("alice", "fiona", "lena", "bob", "trent", "mallory")}
    before = written()
    assert clients["lena"].post(path, {"flavor": H100, "nominal": 32, "reason": "more"}).status_code == 403
    for name in ("alice", "fiona"):
        assert clients[name].post(path, {"flavor": H100, "nominal": "lots"}).status_code == 403, name
    for name in ("bob", "trent", "mallory"):
        assert clients[name].post(path, {"flavor": H100, "nominal": 32, "reason": "x"}).status_code == 404, name
    assert written() == before


def test_queue_policy_by_patch(governed: Fleet) -> None:
    queue = team_queue(governed)
    path = f"/api/v1/queues/{queue.pk}/"
    lena, adam, alice = client(governed, "lena"), client(governed, "adam"), client(governed, "alice")
    research = quotas.create_cohort(governed.user("adam"), governed.org, name="research", reason="pool")
    Cohort.objects.create(organization=governed.world.other_org, name="theirs")
    ok = lena.patch(path, {"flavor_order": [H100], "reason": "H100 first"})
    assert ok.status_code == 200
    assert ok.json()["flavor_order"] == [H100]
    before = written()
    assert lena.patch(path, {"weight": 3, "reason": "more"}).status_code == 403
    assert alice.patch(path, {"weight": "x"}).status_code == 403
    cases: list[tuple[dict[str, Any], str]] = [
        ({"weight": "heavy"}, "weight"),
        ({"weight": 0}, "weight"),
        ({"reclaim": "sometimes"}, "reclaim"),
        ({"within_queue": "always"}, "within_queue"),
        ({"cohort": "theirs"}, "cohort"),
        ({"flavor_order": H100}, "flavor_order"),
        ({"flavor_order": ["nope"]}, "flavor_order"),
        ({"colour": "red"}, "colour"),
        ({"weight": 2}, "reason"),
    ]
    for body, field in cases:
        response = adam.patch(path, {"reason": "try", **body} if field != "reason" else body)
        assert response.status_code == 400, body
        assert field in response.json()["error"]["fields"], body
    assert client(governed, "bob").patch(path, {"flavor_order": [], "reason": "x"}).status_code == 404
    assert written() == before
    done = adam.patch(path, {"weight": 2.5, "cohort": "research", "reclaim": "any", "reason": "pool"})
    assert done.status_code == 200
    assert (done.json()["weight"], done.json()["cohort"], done.json()["reclaim"]) == (2.5, "research", "any")
    queue.refresh_from_db()
    assert queue.cohort == research
    assert adam.patch(path, {"cohort": None, "reason": "alone"}).json()["cohort"] is None


def test_the_history_is_scoped_and_filtered(governed: Fleet) -> None:
    quotas.create_cohort(governed.user("adam"), governed.org, name="research", reason="pool")
    alice = client(governed, "alice").get("/api/v1/quota-changes/").json()["results"]
    assert [c["team"] for c in alice] == ["vision"]
    assert client(governed, "alice").get("/api/v1/quota-changes/?team=robotics").json()["count"] == 0
    fiona = client(governed, "fiona")
    assert [c["kind"] for c in fiona.get("/api/v1/quota-changes/").json()["results"]] == ["cohort", "quota", "quota"]
    assert [c["team"] for c in fiona.get("/api/v1/quota-changes/?team=robotics").json()["results"]] == ["robotics"]
    assert client(governed, "mallory").get("/api/v1/quota-changes/").json()["count"] == 0
