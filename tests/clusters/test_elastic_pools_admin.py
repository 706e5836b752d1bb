"""Elastic pools as their admins set them (docs/scheduling.md §Elastic pools): the API (create, change, switch off,
list with this month's spend and what the budget has left, the asks of the cloud), the cluster's page and its forms,
and ``qm pools``. Only the organization's admins change a pool (403 for its other members, whatever they sent);
another organization's cluster or pool is a 404; bad input is a 400 naming the field and changes nothing; every
change is in the audit log with its fields before and after."""

from __future__ import annotations

import json
from datetime import timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from django.core.exceptions import PermissionDenied, ValidationError
from django.test import Client
from django.utils import timezone

from clusters import elastic
from clusters.actions import elastic as elastic_actions
from clusters.models import AcceleratorType, Cluster, ElasticGrant, ElasticPool
from tenancy.models import AuditLog
from tests.clusters.factories import simulated_cluster
from tests.clusters.test_cli_admin import as_user, qm
from tests.conftest import World, api_client

H100 = "H100-SXM-80GB"
BODY = {
    "name": "burst",
    "flavor": H100,
    "capacity_type": "spot",
    "node_accelerators": 8,
    "node_cpu": "110",
    "node_memory_gib": "1953.125",
    "max_nodes": 4,
    "lead_time": 300,
    "monthly_budget": "2000.00",
}


@pytest.fixture
def fleet(world: World) -> dict[str, Cluster]:
    """A cluster of the demo organization and one of the rival's (their state in this process's memory)."""
    return {
        "east": simulated_cluster(world.org, "east", None, nodes=2),
        "rival": simulated_cluster(world.other_org, "rival", None, nodes=2),
    }


def make_pool(world: World, cluster: Cluster, **fields: Any) -> ElasticPool:
    values: dict[str, Any] = {
        "name": "burst",
        "flavor": H100,
        "node_accelerators": 8,
        "node_cpu": 110_000,
        "node_memory": 2_000_000,
        "max_nodes": 4,
        **fields,
    }
    admin = world.users["adam"] if cluster.organization_id == world.org.pk else world.users["mallory"]
    return elastic_actions.create_pool(admin, cluster, **values)


def pools_url(cluster: Cluster, pool: ElasticPool | None = None) -> str:
    return f"/api/v1/clusters/{cluster.pk}/elastic-pools/" + (f"{pool.pk}/" if pool is not None else "")


def error_fields(response: Any) -> dict[str, Any]:
    body = response.json()
    assert set(body) == {"error"}, body
    return dict(body["error"]["fields"])


def unchanged() -> tuple[Any, ...]:
    """The pools as stored, and the audit log but for API tokens and sign-ins (each client here makes one)."""
    pools = tuple(ElasticPool.objects.order_by("pk").values_list())
    return pools, AuditLog.objects.exclude(action__startswith="token.").exclude(action__startswith="auth.").count()


def spent_span(now: Any) -> timedelta:
    """How long this month's test grant ran: two hours, unless the month is younger than that."""
    first = now.replace(day=1, hour=0, minute=0, second=0, microsecond=0)
    return timedelta(hours=2) if now - first > timedelta(hours=3) else timedelta(seconds=36)


def grants_for(pool: ElasticPool) -> dict[str, ElasticGrant]:
    """A released grant of this month (10 an hour), a refused one (costs nothing), one of last month (gone before
    this month began), and one on its way (newest)."""
    now = timezone.now()
    first = now.replace(day=1, hour=0, minute=0, second=0, microsecond=0)
    span = spent_span(now)
    made = {
        "last_month": ElasticGrant.objects.create(
            pool=pool,
            count=1,
            state="released",
            cost_per_hour=Decimal(50),
            asked_at=first - timedelta(days=3),
            up_at=first - timedelta(days=3),
            released_at=first - timedelta(days=2),
        ),
        "released": ElasticGrant.objects.create(
            pool=pool,
            count=1,
            state="released",
            cost_per_hour=Decimal(10),
            asked_at=first,
            up_at=first,
            released_at=first + span,
            nodes=["h100-burst-0000"],
            jobs=[41, 42],
        ),
        "refused": ElasticGrant.objects.create(
            pool=pool,
            count=2,
            state="refused",
            cost_per_hour=Decimal(20),
            asked_at=first + span,
            up_at=first + span,
            message="stock-out: no H100 in eu",
        ),
        "coming": ElasticGrant.objects.create(
            pool=pool,
            count=1,
            state="coming",
            cost_per_hour=Decimal(10),
            asked_at=now,
            up_at=now + timedelta(minutes=10),
            nodes=["h100-burst-0001"],
            jobs=[43],
        ),
    }
    return made


# --- the API -------------------------------------------------------------------------------------------------


def test_an_admin_adds_a_pool_and_every_member_reads_it_with_its_spend(world: World, fleet: dict[str, Cluster]):
    east = fleet["east"]
    response = api_client(world.users["adam"]).post(pools_url(east), BODY, format="json")
    assert response.status_code == 201, response.content
    made = response.json()
    pool = ElasticPool.objects.get()
    assert made["id"] == pool.pk
    assert {
        k: made[k] for k in ("cluster", "name", "flavor", "capacity_type", "enabled", "min_nodes", "max_nodes")
    } == {
        "cluster": "east",
        "name": "burst",
        "flavor": H100,
        "capacity_type": "spot",
        "enabled": True,
        "min_nodes": 0,
        "max_nodes": 4,
    }
    assert (made["node_cpu"], made["node_memory_gib"], made["lead_time"], made["idle_release"]) == (
        110,
        1953.125,
        300,
        1800,
    )
    assert (pool.node_cpu, pool.node_memory, pool.accelerator.name) == (110_000, 2_000_000, H100)
    assert (made["monthly_budget"], made["spent_this_month"], made["budget_left"]) == ("2000.00", "0.00", "2000.00")
    entry = AuditLog.objects.get(action="elastic.pool.created")
    assert entry.actor == world.users["adam"]
    assert entry.organization == world.org
    assert entry.changes["max_nodes"] == [None, 4]
    assert entry.changes["flavor"] == [None, H100]
    assert entry.changes["monthly_budget"] == [None, "2000.00"]

    grants_for(pool)
    hours = Decimal(spent_span(timezone.now()).total_seconds()) / 3600
    spent = (10 * hours).quantize(Decimal("0.01"))
    for reader in ("alice", "lena", "fiona", "adam"):
        response = api_client(world.users[reader]).get(pools_url(east))
        assert response.status_code == 200, reader
        (row,) = response.json()["results"]
        assert (row["spent_this_month"], row["budget_left"]) == (f"{spent}", f"{Decimal(2000) - spent}")
        detail = api_client(world.users[reader]).get(pools_url(east, pool)).json()
        assert detail == row
    # Without a budget, nothing is left of one.
    elastic_actions.change_pool(world.users["adam"], pool, monthly_budget=None)
    row = api_client(world.users["alice"]).get(pools_url(east, pool)).json()
    assert (row["monthly_budget"], row["spent_this_month"], row["budget_left"]) == (None, f"{spent}", None)


def test_an_admin_changes_a_pool_and_switches_it_off(world: World, fleet: dict[str, Cluster]):
    east = fleet["east"]
    pool = make_pool(world, east, monthly_budget="100")
    adam = api_client(world.users["adam"])
    response = adam.patch(pools_url(east, pool), {"max_nodes": 6, "min_nodes": 1, "enabled": False}, format="json")
    assert response.status_code == 200, response.content
    assert (response.json()["max_nodes"], response.json()["min_nodes"], response.json()["enabled"]) == (6, 1, False)
    pool.refresh_from_db()
    assert (pool.max_nodes, pool.min_nodes, pool.enabled) == (6, 1, False)
    entry = AuditLog.objects.get(action="elastic.pool.changed")
    assert entry.changes == {"max_nodes": [4, 6], "min_nodes": [0, 1], "enabled": [True, False]}
    assert entry.actor == world.users["adam"]

    # Renamed, a new flavor and budget; a change to nothing writes nothing.
    AcceleratorType.objects.get_or_create(organization=world.org, name="A100-SXM-80GB")
    body = {"name": "burst-2", "flavor": "A100-SXM-80GB", "monthly_budget": "250.50", "node_memory_gib": 1024}
    response = adam.patch(pools_url(east, pool), body, format="json")
    assert response.status_code == 200, response.content
    changed = AuditLog.objects.filter(action="elastic.pool.changed").latest("pk")
    assert changed.changes == {
        "name": ["burst", "burst-2"],
        "flavor": [H100, "A100-SXM-80GB"],
        "node_memory": [2_000_000, 1_048_576],
        "monthly_budget": ["100.00", "250.50"],
    }
    before = AuditLog.objects.filter(action="elastic.pool.changed").count()
    response = adam.patch(pools_url(east, pool), {"max_nodes": 6, "enabled": False}, format="json")
    assert response.status_code == 200
    assert AuditLog.objects.filter(action="elastic.pool.changed").count() == before
    response = adam.patch(pools_url(east, pool), {"enabled": True}, format="json")
    assert response.json()["enabled"] is True


BAD = [
    ({"flavor": "H200-NOPE"}, "flavor"),
    ({"capacity_type": "on_prem"}, "capacity_type"),
    ({"capacity_type": "preemptible"}, "capacity_type"),
    ({"node_accelerators": 0}, "node_accelerators"),
    ({"node_accelerators": "8"}, "node_accelerators"),
    ({"node_cpu": "0"}, "node_cpu"),
    ({"node_cpu": "-4"}, "node_cpu"),
    ({"node_cpu": "lots"}, "node_cpu"),
    ({"node_memory_gib": "0"}, "node_memory_gib"),
    ({"node_memory_gib": "NaN"}, "node_memory_gib"),
    ({"max_nodes": 0}, "max_nodes"),
    ({"min_nodes": 5}, "min_nodes"),  # more than max_nodes (4)
    ({"min_nodes": -1}, "min_nodes"),
    ({"lead_time": -1}, "lead_time"),
    ({"idle_release": -60}, "idle_release"),
    ({"idle_release": 1.5}, "idle_release"),
    ({"monthly_budget": "-5"}, "monthly_budget"),
    ({"monthly_budget": "1.234"}, "monthly_budget"),
    ({"monthly_budget": "1e20"}, "monthly_budget"),
    ({"name": "Bad Name"}, "name"),
    ({"name": ""}, "name"),
    ({"name": 7}, "name"),
    ({"enabled": "maybe"}, "enabled"),
    ({"colour": "blue"}, "colour"),
]


@pytest.mark.parametrize(("change", "field"), BAD)
def test_bad_input_is_a_400_naming_the_field_and_changes_nothing(
    world: World, fleet: dict[str, Cluster], change: dict[str, Any], field: str
):
    east = fleet["east"]
    pool = make_pool(world, east, name="kept")
    adam = api_client(world.users["adam"])
    before = unchanged()
    response = adam.post(pools_url(east), {**BODY, **change}, format="json")
    assert response.status_code == 400, response.content
    assert field in error_fields(response), response.json()
    assert unchanged() == before
    response = adam.patch(pools_url(east, pool), change, format="json")
    assert response.status_code == 400, response.content
    assert field in error_fields(response), response.json()
    assert unchanged() == before


def test_a_name_is_unique_in_its_cluster_and_required_fields_are_named(world: World, fleet: dict[str, Cluster]):
    east = fleet["east"]
    make_pool(world, east, name="burst")
    other = make_pool(world, east, name="other")
    adam = api_client(world.users["adam"])
    before = unchanged()
    response = adam.post(pools_url(east), BODY, format="json")
    assert response.status_code == 400
    assert "already has an elastic pool called 'burst'" in error_fields(response)["name"][0]
    response = adam.patch(pools_url(east, other), {"name": "burst"}, format="json")
    assert response.status_code == 400
    assert "name" in error_fields(response)
    response = adam.post(pools_url(east), {"name": "bare"}, format="json")
    assert response.status_code == 400
    assert set(error_fields(response)) == {"flavor", "node_accelerators", "node_cpu", "node_memory_gib", "max_nodes"}
    response = adam.post(pools_url(east), "[1, 2]", content_type="application/json")
    assert response.status_code == 400
    assert unchanged() == before
    # The same name on another cluster is another pool.
    west = simulated_cluster(world.org, "west", None, nodes=1)
    assert adam.post(pools_url(west), BODY, format="json").status_code == 201


def test_members_who_are_not_admins_read_but_do_not_change(world: World, fleet: dict[str, Cluster]):
    east = fleet["east"]
    pool = make_pool(world, east)
    before = unchanged()
    for username in ("alice", "lena", "fiona"):
        client = api_client(world.users[username])
        assert client.get(pools_url(east, pool)).status_code == 200
        response = client.post(pools_url(east), {**BODY, "name": "mine"}, format="json")
        assert response.status_code == 403, username
        assert client.post(pools_url(east), {"nonsense": 1}, format="json").status_code == 403  # before the body
        assert client.patch(pools_url(east, pool), {"enabled": False}, format="json").status_code == 403
    assert unchanged() == before
    with pytest.raises(PermissionDenied):
        elastic_actions.change_pool(world.users["lena"], pool, enabled=False)
    with pytest.raises(PermissionDenied):
        elastic_actions.create_pool(world.users["alice"], east, name="mine", flavor=H100)
    assert api_client().get(pools_url(east)).status_code == 401


def test_another_organizations_cluster_or_pool_is_not_found(world: World, fleet: dict[str, Cluster]):
    east, rival = fleet["east"], fleet["rival"]
    pool = make_pool(world, east)
    theirs = make_pool(world, rival, name="theirs")
    before = unchanged()
    mallory = api_client(world.users["mallory"])
    for response in (
        mallory.get(pools_url(east)),
        mallory.post(pools_url(east), {**BODY, "name": "heist"}, format="json"),
        mallory.get(pools_url(east, pool)),
        mallory.patch(pools_url(east, pool), {"enabled": False}, format="json"),
        mallory.get(f"/api/v1/clusters/{east.pk}/elastic-grants/"),
    ):
        assert response.status_code == 404, response.content
    adam = api_client(world.users["adam"])
    assert adam.get(pools_url(east, theirs)).status_code == 404  # their pool under our cluster
    assert adam.patch(pools_url(rival, theirs), {"enabled": False}, format="json").status_code == 404
    assert adam.get(pools_url(east, pool)).status_code == 200
    assert unchanged() == before
    # The action refuses a flavor of another organization, by name.
    AcceleratorType.objects.create(organization=world.other_org, name="RIVAL-ONLY")
    with pytest.raises(ValidationError) as refused:
        elastic_actions.change_pool(world.users["adam"], pool, flavor="RIVAL-ONLY")
    assert "flavor" in refused.value.message_dict


def test_the_asks_of_the_cloud_newest_first_with_their_jobs_for_admins(world: World, fleet: dict[str, Cluster]):
    east = fleet["east"]
    pool = make_pool(world, east)
    made = grants_for(pool)
    url = f"/api/v1/clusters/{east.pk}/elastic-grants/"
    rows = api_client(world.users["adam"]).get(url).json()["results"]
    assert [r["id"] for r in rows] == [made[k].pk for k in ("coming", "refused", "released", "last_month")]
    coming, refused = rows[0], rows[1]
    assert {k: coming[k] for k in ("pool", "state", "count", "nodes", "jobs", "cost_per_hour", "released_at")} == {
        "pool": "burst",
        "state": "coming",
        "count": 1,
        "nodes": ["h100-burst-0001"],
        "jobs": [43],
        "cost_per_hour": "10.0000",
        "released_at": None,
    }
    assert set(coming) >= {"hold", "asked_at", "up_at", "message"}
    assert refused["message"] == "stock-out: no H100 in eu"
    others = api_client(world.users["alice"]).get(url).json()["results"]
    assert [r["id"] for r in others] == [r["id"] for r in rows]
    assert all(r["jobs"] is None for r in others)  # which jobs: for the cluster's admins, as on its page


def test_spend_counts_this_month_of_the_grants_that_ran(world: World, fleet: dict[str, Cluster]):
    pool = make_pool(world, fleet["east"], monthly_budget="15")
    now = timezone.now().replace(day=15, hour=12, minute=0, second=0, microsecond=0)
    first = now.replace(day=1, hour=0)
    ElasticGrant.objects.create(
        pool=pool,
        count=1,
        state="up",
        cost_per_hour=Decimal("7.5"),
        asked_at=first - timedelta(hours=3),
        up_at=first - timedelta(hours=1),
        nodes=["n0"],
    )
    ElasticGrant.objects.create(
        pool=pool,
        count=1,
        state="refused",
        cost_per_hour=Decimal(100),
        asked_at=first,
        up_at=first,
    )
    ElasticGrant.objects.create(
        pool=pool,
        count=1,
        state="released",
        cost_per_hour=Decimal(4),
        asked_at=now - timedelta(hours=3),
        up_at=now - timedelta(hours=3),
        released_at=now - timedelta(minutes=30),
    )
    found = elastic.spend([pool], now)[pool.pk]
    up_hours = (now - first).total_seconds() / 3600  # counted from the start of the month, not from when it came up
    expected = (Decimal("7.5") * Decimal(up_hours) + 4 * Decimal("2.5")).quantize(Decimal("0.01"))
    assert found.spent == expected
    assert found.left == Decimal(15) - expected  # far below zero: past its budget
    assert elastic.spend([]) == {}


# --- the pages -----------------------------------------------------------------------------------------------


def page_client(world: World, username: str) -> Client:
    client = Client()
    client.force_login(world.users[username])
    return client


def form_of(**changes: Any) -> dict[str, Any]:
    body = {
        "name": "burst",
        "flavor": H100,
        "capacity_type": "on_demand",
        "node_accelerators": "8",
        "node_cpu": "110",
        "node_memory_gib": "1953.125",
        "min_nodes": "0",
        "max_nodes": "4",
        "lead_time": "10m",
        "idle_release": "30m",
        "monthly_budget": "1000",
        "enabled": "on",
    }
    return {**body, **changes}


def test_the_cluster_page_shows_spend_and_the_forms_to_its_admins_only(world: World, fleet: dict[str, Cluster]):
    east = fleet["east"]
    page = page_client(world, "adam").get(f"/clusters/{east.pk}/").content.decode()
    assert 'data-testid="elastic-pools"' in page  # no pool yet: an admin may add one
    assert f'href="/clusters/{east.pk}/elastic-pools/new/"' in page
    assert (
        'data-testid="elastic-pools"' not in page_client(world, "alice").get(f"/clusters/{east.pk}/").content.decode()
    )

    pool = make_pool(world, east, monthly_budget="2000")
    grants_for(pool)
    hours = Decimal(spent_span(timezone.now()).total_seconds()) / 3600
    spent = (10 * hours).quantize(Decimal("0.01"))
    admin_page = page_client(world, "adam").get(f"/clusters/{east.pk}/").content.decode()
    assert f'<td data-testid="pool-spent">{spent}</td>' in admin_page
    assert f'<td data-testid="pool-left">{Decimal(2000) - spent}</td>' in admin_page
    assert f'href="/clusters/{east.pk}/elastic-pools/{pool.pk}/edit/"' in admin_page
    researcher_page = page_client(world, "alice").get(f"/clusters/{east.pk}/").content.decode()
    assert f'<td data-testid="pool-spent">{spent}</td>' in researcher_page
    assert "/elastic-pools/new/" not in researcher_page
    assert "/edit/" not in researcher_page.split('data-testid="elastic-pools"')[1].split("</section>")[0]


def test_the_forms_add_and_change_a_pool(world: World, fleet: dict[str, Cluster]):
    east = fleet["east"]
    adam = page_client(world, "adam")
    assert adam.get(f"/clusters/{east.pk}/elastic-pools/new/").status_code == 200
    response = adam.post(f"/clusters/{east.pk}/elastic-pools/new/", form_of())
    assert response.status_code == 302
    pool = ElasticPool.objects.get()
    assert (pool.name, pool.node_cpu, pool.node_memory, pool.lead_time, pool.idle_release) == (
        "burst",
        110_000,
        2_000_000,
        600,
        1800,
    )
    assert pool.monthly_budget == Decimal(1000)
    assert AuditLog.objects.filter(action="elastic.pool.created", actor=world.users["adam"]).exists()

    edit = f"/clusters/{east.pk}/elastic-pools/{pool.pk}/edit/"
    page = adam.get(edit).content.decode()
    assert 'value="burst"' in page
    assert 'data-testid="elastic-pool-form"' in page
    # Switched off (the box left unticked), a budget no more, two more nodes.
    response = adam.post(edit, {k: v for k, v in form_of(max_nodes="6", monthly_budget="").items() if k != "enabled"})
    assert response.status_code == 302
    stored = ElasticPool.objects.values_list("enabled", "max_nodes", "monthly_budget").get(pk=pool.pk)
    assert stored == (False, 6, None)
    entry = AuditLog.objects.get(action="elastic.pool.changed")
    assert entry.changes == {"enabled": [True, False], "max_nodes": [4, 6], "monthly_budget": ["1000.00", None]}

    # Bad input: 400 with the error beside its field, nothing changed.
    before = unchanged()
    response = adam.post(edit, form_of(min_nodes="9", max_nodes="6"))
    assert response.status_code == 400
    assert "At most the pool&#x27;s maximum" in response.content.decode()
    response = adam.post(f"/clusters/{east.pk}/elastic-pools/new/", form_of(name="Not A Slug"))
    assert response.status_code == 400
    assert unchanged() == before


def test_the_forms_are_for_the_clusters_admins(world: World, fleet: dict[str, Cluster]):
    east, rival = fleet["east"], fleet["rival"]
    pool = make_pool(world, east)
    theirs = make_pool(world, rival, name="theirs")
    before = unchanged()
    alice = page_client(world, "alice")
    assert alice.get(f"/clusters/{east.pk}/elastic-pools/new/").status_code == 403
    assert alice.post(f"/clusters/{east.pk}/elastic-pools/new/", form_of(name="mine")).status_code == 403
    assert alice.post(f"/clusters/{east.pk}/elastic-pools/{pool.pk}/edit/", form_of()).status_code == 403
    mallory = page_client(world, "mallory")
    assert mallory.get(f"/clusters/{east.pk}/elastic-pools/new/").status_code == 404
    assert mallory.post(f"/clusters/{east.pk}/elastic-pools/{pool.pk}/edit/", form_of()).status_code == 404
    adam = page_client(world, "adam")
    assert adam.get(f"/clusters/{east.pk}/elastic-pools/{theirs.pk}/edit/").status_code == 404
    assert unchanged() == before


# --- qm pools ------------------------------------------------------------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_qm_pools_create_list_set_and_grants(
    world: World, tmp_path: Path, live_server: Any, monkeypatch: pytest.MonkeyPatch, capsys: Any
):
    monkeypatch.setenv("QM_URL", live_server.url)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    east = simulated_cluster(world.org, "east", tmp_path, nodes=2)
    create = ["pools", "create", "--cluster", "east", "--name", "burst", "--flavor", H100, "--node-accelerators", "8"]
    shape = ["--node-cpu", "110", "--node-memory", "1953.125", "--max-nodes", "4", "--capacity-type", "spot"]
    more = ["--lead-time", "5m", "--idle-release", "1h", "--monthly-budget", "2000"]

    as_user(world, monkeypatch, "alice")
    status, _, err = qm(capsys, *create, *shape, *more)
    assert status == 1
    assert "Only admins of" in err
    assert not ElasticPool.objects.exists()

    as_user(world, monkeypatch, "adam")
    status, _, err = qm(capsys, *create, "--node-cpu", "110")
    assert status == 1
    assert "--node-memory" in err
    assert "--max-nodes" in err
    status, out, err = qm(capsys, *create, *shape, *more)
    assert (status, err) == (0, "")
    assert "Elastic pool burst added to east: up to 4 nodes of 8 H100-SXM-80GB (spot)." in out
    pool = ElasticPool.objects.get()
    assert (pool.lead_time, pool.idle_release, pool.monthly_budget, pool.node_memory) == (
        300,
        3600,
        Decimal(2000),
        2_000_000,
    )
    status, _, err = qm(capsys, *create, *shape)  # the same name again
    assert status == 2
    assert "  name: east already has an elastic pool called 'burst'." in err
    status, _, err = qm(capsys, "pools", "set", "burst", "--cluster", "east", "--min-nodes", "9")
    assert status == 2
    assert "  min_nodes: At most the pool's maximum (4 nodes)." in err

    grants_for(pool)
    as_user(world, monkeypatch, "alice")  # any member reads
    status, out, err = qm(capsys, "pools", "--cluster", "east")
    assert (status, err) == (0, "")
    lines = out.splitlines()
    assert lines[0].split()[:4] == ["ID", "POOL", "STATE", "NODES"]
    (row,) = lines[1:]
    assert row.split()[:4] == [str(pool.pk), "burst", "on", "0-4"]
    assert "2000.00" in row
    status, out, _ = qm(capsys, "pools", "list", "--cluster", str(east.pk), "--json")
    (listed,) = json.loads(out)
    assert (listed["name"], listed["monthly_budget"]) == ("burst", "2000.00")
    assert Decimal(listed["spent_this_month"]) + Decimal(listed["budget_left"]) == Decimal(2000)
    status, out, _ = qm(capsys, "pools", "grants", "--cluster", "east")
    assert status == 0
    lines = out.splitlines()
    assert lines[0].split()[:5] == ["ID", "ASKED", "POOL", "NODES", "STATE"]
    assert len(lines) == 5
    assert "stock-out: no H100 in eu" in out
    status, out, _ = qm(capsys, "pools", "grants", "--cluster", "east", "--json")
    assert [g["state"] for g in json.loads(out)] == ["coming", "refused", "released", "released"]
    status, _, err = qm(capsys, "pools", "--cluster", "rival-nowhere")
    assert status == 1
    assert "no cluster 'rival-nowhere'" in err

    as_user(world, monkeypatch, "adam")
    status, out, err = qm(
        capsys, "pools", "set", "burst", "--cluster", "east", "--disabled", "--monthly-budget", "none"
    )
    assert (status, err) == (0, "")
    assert "is off" in out
    pool.refresh_from_db()
    assert (pool.enabled, pool.monthly_budget) == (False, None)
    status, out, _ = qm(capsys, "pools", "set", "burst", "--cluster", "east", "--enabled", "--max-nodes", "8")
    assert status == 0
    pool.refresh_from_db()
    assert (pool.enabled, pool.max_nodes) == (True, 8)
    status, _, err = qm(capsys, "pools", "set", "nope", "--cluster", "east", "--disabled")
    assert status == 1
    assert "east has no elastic pool 'nope'" in err
