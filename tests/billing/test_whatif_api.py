"""The what-ifs API: finance and admins ask (201 with the queued row) and read; everyone else lists nothing, gets
404 for a what-if and 403 on POST; bad values and unknown fields answer 400 naming each field."""

from __future__ import annotations

from typing import Any

import pytest

from billing.actions import whatif
from billing.models import WhatIf
from clusters.models import Cluster
from tests.billing import whatif_history as h
from tests.conftest import World

pytestmark = pytest.mark.django_db
URL = "/api/v1/what-ifs/"


def _done(world: World, cluster: Cluster) -> WhatIf:
    what_if = whatif.submit_what_if(world.users["fiona"], world.org, cluster=cluster, flavor=h.H100, nodes=1, days=1)
    assert whatif.run(what_if.pk) == "done"
    return what_if


@pytest.mark.parametrize("user", ["fiona", "adam"])
def test_finance_and_admins_ask_and_get_the_queued_row(world: World, api: Any, user: str) -> None:
    cluster, _ = h.cluster(world.org)
    answer = api(user).post(URL, {"cluster": "gpu", "flavor": h.H100, "nodes": 2, "days": 7}, format="json")
    assert answer.status_code == 201, answer.json()
    body = answer.json()
    assert body["status"] == "queued"
    assert body["progress"] == 0.0
    assert body["result"] == {}
    assert (body["cluster"], body["flavor"], body["nodes"], body["days"]) == ("gpu", h.H100, 2, 7)
    assert body["organization"] == "demo"
    assert body["requested_by"] == user
    row = WhatIf.objects.get(pk=body["id"])
    assert (row.cluster, row.nodes, row.days) == (cluster, 2, 7)


def test_ids_name_the_cluster_and_flavor_too_and_days_default_to_thirty(world: World, api: Any) -> None:
    cluster, kind = h.cluster(world.org)
    answer = api("fiona").post(URL, {"cluster": cluster.pk, "flavor": kind.pk, "nodes": -1}, format="json")
    assert answer.status_code == 201, answer.json()
    assert answer.json()["days"] == 30


@pytest.mark.parametrize(
    ("body", "fields"),
    [
        ({}, {"cluster", "flavor", "nodes"}),
        ({"cluster": "nowhere", "flavor": "TPU-v9", "nodes": 0, "days": 91}, {"cluster", "flavor", "nodes", "days"}),
        ({"cluster": "gpu", "flavor": h.H100, "nodes": "two", "days": 0}, {"nodes", "days"}),
        ({"cluster": "gpu", "flavor": h.H100, "nodes": -5}, {"nodes"}),
        ({"cluster": ["gpu"], "flavor": {"name": h.H100}, "nodes": 1.5}, {"cluster", "flavor", "nodes"}),
        (
            {"cluster": 2**70, "flavor": "9" * 30, "nodes": 2**70, "days": -(2**70), "lead_days": 2**70, "kind": 7},
            set(whatif.FIELDS) - {"pool", "grow_quotas"},
        ),
        ({"cluster": "gpu", "flavor": h.H100, "nodes": 1, "node": 2}, {"node"}),
    ],
)
def test_bad_values_answer_400_naming_each_field(
    world: World, api: Any, body: dict[str, Any], fields: set[str]
) -> None:
    h.cluster(world.org)
    answer = api("fiona").post(URL, body, format="json")
    assert answer.status_code == 400
    assert set(answer.json()["error"]["fields"]) == fields
    assert not WhatIf.objects.exists()


@pytest.mark.parametrize("user", ["alice", "lena"])
def test_team_roles_are_refused_and_see_nothing(world: World, api: Any, user: str) -> None:
    cluster, _ = h.cluster(world.org)
    what_if = _done(world, cluster)
    client = api(user)
    answer = client.post(URL, {"cluster": "gpu", "flavor": h.H100, "nodes": 1}, format="json")
    assert answer.status_code == 403
    assert client.post(URL, {"bogus": 1}, format="json").status_code == 403  # asked before the body is judged
    assert client.get(URL).json()["results"] == []
    assert client.get(f"{URL}{what_if.pk}/").status_code == 404
    assert WhatIf.objects.count() == 1


def test_another_organization_gets_404_and_cannot_name_our_cluster(world: World, api: Any) -> None:
    cluster, _ = h.cluster(world.org)
    what_if = _done(world, cluster)
    mallory = api("mallory")
    assert mallory.get(f"{URL}{what_if.pk}/").status_code == 404
    assert mallory.get(URL).json()["results"] == []
    answer = mallory.post(URL, {"cluster": cluster.pk, "flavor": h.H100, "nodes": 1}, format="json")
    assert answer.status_code == 400
    assert set(answer.json()["error"]["fields"]) == {"cluster", "flavor"}
    assert mallory.post(URL, {"organization": "demo", "cluster": "gpu"}, format="json").status_code == 404
    assert api("trent").post(URL, {"cluster": "gpu"}, format="json").status_code == 403


def test_the_detail_has_status_progress_and_result(world: World, api: Any) -> None:
    cluster, _ = h.cluster(world.org)
    h.crowded(world.teams["vision"], world.users["alice"], cluster, jobs=6)
    what_if = _done(world, cluster)
    body = api("adam").get(f"{URL}{what_if.pk}/").json()
    assert body["status"] == "done"
    assert body["progress"] == 1.0
    assert body["error"] == ""
    assert body["result"]["today"]["jobs"] == body["result"]["changed"]["jobs"] == 6
    assert {"mean_wait_s", "p50_wait_s", "p95_wait_s", "max_wait_s", "utilisation"} <= set(body["result"]["today"])


def test_the_list_filters_by_status_and_cluster_and_refuses_a_bad_status(world: World, api: Any) -> None:
    cluster, _ = h.cluster(world.org)
    done = _done(world, cluster)
    queued = whatif.submit_what_if(world.users["adam"], world.org, cluster=cluster, flavor=h.H100, nodes=-1)
    client = api("fiona")
    assert [r["id"] for r in client.get(URL).json()["results"]] == [queued.pk, done.pk]
    assert [r["id"] for r in client.get(URL, {"status": "done"}).json()["results"]] == [done.pk]
    assert len(client.get(URL, {"cluster": "gpu"}).json()["results"]) == 2
    assert client.get(URL, {"cluster": "elsewhere"}).json()["results"] == []
    assert client.get(URL, {"cluster": "9" * 30}).json()["results"] == []  # an id past any column's range
    answer = client.get(URL, {"status": "finished"})
    assert answer.status_code == 400
    assert set(answer.json()["error"]["fields"]) == {"status"}
