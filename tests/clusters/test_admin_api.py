"""The fleet API: clusters, nodes, cordon, drain and resume, maintenance windows.

Every member of the organization reads its clusters and nodes; only its admins change them (403 for the others,
whatever they sent); another organization's cluster, node or window is a 404 for every verb and absent from
every list; bad input is a 400 naming the field and changes nothing; each change is in the audit log.
"""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from django.core.exceptions import PermissionDenied, ValidationError
from django.utils import timezone

from clusters import actions as cluster_actions
from clusters import maintenance
from clusters.models import Cluster, Drain, MaintenanceWindow, Node
from tenancy import actions as tenancy_actions
from tenancy.models import AuditLog, ServiceAccount
from tests.clusters.factories import simulated_cluster
from tests.conftest import World, api_client

READERS = ["alice", "lena", "fiona", "adam"]
NOT_ADMINS = ["alice", "lena", "fiona"]


@pytest.fixture
def fleet(world: World, tmp_path: Path) -> dict[str, Cluster]:
    """Two clusters of the demo organization (8 H100 nodes on prem, 4 TPU-like A100 nodes on Slurm with a
    host path in its options) and one of the rival organization."""
    east = simulated_cluster(world.org, "east", tmp_path)
    west = simulated_cluster(world.org, "west", tmp_path, profile="a100-slurm", nodes=4, runs=["batch_scripts"])
    rival = simulated_cluster(world.other_org, "rival", tmp_path, nodes=2)
    return {"east": east, "west": west, "rival": rival}


def node(cluster: Cluster, index: int = 3) -> Node:
    found: Node = Node.objects.filter(cluster=cluster).order_by("name")[index]
    return found


def unchanged() -> tuple[Any, ...]:
    """Nodes' states, drains, windows and the audit log but for API tokens (each client here issues one)."""
    states = tuple(Node.objects.order_by("pk").values_list("state", flat=True))
    audited = AuditLog.objects.exclude(action__startswith="token.").count()
    return states, Drain.objects.count(), MaintenanceWindow.objects.count(), audited


def errors(response: Any) -> dict[str, Any]:
    body = response.json()
    assert set(body) == {"error"}, body
    return dict(body["error"])


# --- Clusters -------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("username", READERS)
def test_every_member_lists_the_organizations_clusters_and_no_other(
    world: World, api: Any, fleet: dict[str, Cluster], username: str
) -> None:
    response = api(username).get("/api/v1/clusters/")
    assert response.status_code == 200
    assert [c["slug"] for c in response.json()["results"]] == ["east", "west"]
    assert api(username).get(f"/api/v1/clusters/{fleet['rival'].pk}/").status_code == 404


def test_a_cluster_says_what_it_runs_its_nodes_and_accelerators(world: World, api: Any, fleet: dict[str, Cluster]):
    Node.objects.filter(pk=node(fleet["east"]).pk).update(state=Node.State.CORDONED)
    body = api("alice").get(f"/api/v1/clusters/{fleet['east'].pk}/").json()
    assert body["kind"] == "simulated"
    assert body["status"] == "healthy"
    assert body["organization"] == "demo"
    assert body["capabilities"] == {
        "runs": ["batch_scripts", "containers"],
        "described": ["container images (simulated)", "batch scripts"],
        "container_runtime": "simulated",
    }
    assert body["nodes"] == {"total": 8, "by_state": {"schedulable": 7, "cordoned": 1}}
    nodes = Node.objects.filter(cluster=fleet["east"])
    assert body["accelerators"]["total"] == sum(n.accelerators for n in nodes) == 64
    assert body["accelerators"]["used"] == sum(n.accelerators_used for n in nodes)
    assert (body["failover_after"], body["start_timeout"]) == (900, 900)
    west = api("alice").get(f"/api/v1/clusters/{fleet['west'].pk}/").json()
    assert west["capabilities"]["runs"] == ["batch_scripts"]
    assert "credentials" not in body
    assert "credentials_ciphertext" not in body


def test_options_are_shown_to_admins_only(world: World, api: Any, fleet: dict[str, Cluster]):
    path = f"/api/v1/clusters/{fleet['east'].pk}/"
    assert api("alice").get(path).json()["options"] is None
    assert api("fiona").get(path).json()["options"] is None
    options = api("adam").get(path).json()["options"]
    assert options["profile"] == "h100-onprem"
    assert options["state_file"].endswith("east.json")  # a host path: why the others do not see it
    Cluster.objects.filter(pk=fleet["east"].pk).update(options={"profile": "h100-onprem", "api_token": "s3cret"})
    assert api("adam").get(path).json()["options"]["api_token"] == "(hidden)"


def test_the_cluster_list_keeps_to_its_query_budget(
    world: World, api: Any, fleet: dict[str, Cluster], tmp_path: Path, django_assert_max_num_queries: Any
):
    for i in range(5):
        simulated_cluster(world.org, f"more-{i}", tmp_path, nodes=2)
    client = api("adam")
    with django_assert_max_num_queries(12):
        response = client.get("/api/v1/clusters/")
    assert response.json()["count"] == 7


# --- Nodes ----------------------------------------------------------------------------------------------------


def test_nodes_list_filters_by_cluster_state_and_health(world: World, api: Any, fleet: dict[str, Cluster]):
    client = api("alice")
    everything = client.get("/api/v1/nodes/?page_size=500").json()
    assert everything["count"] == 12
    assert {n["cluster"] for n in everything["results"]} == {"east", "west"}
    by_slug = client.get("/api/v1/nodes/?cluster=west").json()
    by_id = client.get(f"/api/v1/nodes/?cluster={fleet['west'].pk}").json()
    assert by_slug == by_id
    assert by_slug["count"] == 4
    sick = node(fleet["east"], 2)
    Node.objects.filter(pk=sick.pk).update(healthy=False, state=Node.State.DRAINED)
    assert [n["name"] for n in client.get("/api/v1/nodes/?healthy=false").json()["results"]] == [sick.name]
    assert client.get("/api/v1/nodes/?healthy=true").json()["count"] == 11
    drained = client.get("/api/v1/nodes/?cluster=east&state=drained").json()["results"]
    assert [n["id"] for n in drained] == [sick.pk]


@pytest.mark.parametrize(
    ("query", "field"),
    [("state=sleeping", "state"), ("healthy=maybe", "healthy"), ("cluster=nowhere", "cluster"), ("page=0", "page")],
)
def test_an_unknown_filter_value_is_400_naming_it(
    world: World, api: Any, fleet: dict[str, Cluster], query: str, field: str
):
    response = api("alice").get(f"/api/v1/nodes/?{query}")
    assert response.status_code == 400
    assert field in errors(response)["fields"]


def test_another_organizations_cluster_as_a_filter_is_answered_as_one_that_does_not_exist(
    world: World, api: Any, fleet: dict[str, Cluster]
):
    client = api("adam")
    rival, missing = (client.get(f"/api/v1/nodes/?cluster={ref}") for ref in (fleet["rival"].pk, 987654))
    assert rival.status_code == missing.status_code == 400
    assert errors(rival)["fields"]["cluster"] == [f"No cluster '{fleet['rival'].pk}'."]
    assert errors(missing)["fields"]["cluster"] == ["No cluster '987654'."]
    assert client.get("/api/v1/nodes/?cluster=rival").status_code == 400


def test_a_node_in_peoples_units(world: World, api: Any, fleet: dict[str, Cluster]):
    n = node(fleet["east"])
    body = api("alice").get(f"/api/v1/nodes/{n.pk}/").json()
    assert (body["name"], body["cluster"], body["state"], body["accelerator"]) == (
        n.name,
        "east",
        "schedulable",
        "H100-SXM-80GB",
    )
    assert body["accelerators"] == n.accelerators == 8
    assert body["cpu"] == pytest.approx(n.cpu / 1000)
    assert body["memory_gib"] == pytest.approx(n.memory / 1024, abs=0.001)
    assert body["open_drain"] is None
    assert set(body) >= {"ready", "healthy", "topology", "heartbeat_at", "probe_reported_at", "accelerators_used"}


# --- Cordon, drain, resume ------------------------------------------------------------------------------------


def test_an_admin_cordons_drains_and_resumes_a_node(
    world: World, api: Any, fleet: dict[str, Cluster], django_capture_on_commit_callbacks: Any
):
    client = api("adam")
    n = node(fleet["east"])
    with django_capture_on_commit_callbacks(execute=False) as told:
        response = client.post(f"/api/v1/nodes/{n.pk}/cordon/", {"reason": "flaky NVLink, watch it"})
    assert response.status_code == 200, response.json()
    body = response.json()
    assert body["state"] == "cordoned"
    drain = body["open_drain"]
    assert {k: drain[k] for k in ("kind", "state", "reason", "grace_seconds", "requested_by", "automatic")} == {
        "kind": "cordon",
        "state": "cordoned",
        "reason": "flaky NVLink, watch it",
        "grace_seconds": None,
        "requested_by": "adam",
        "automatic": False,
    }
    assert len(told) == 1  # the cluster is told once this commits
    entry = AuditLog.objects.get(action="node.cordoned")
    assert (entry.actor, entry.reason, entry.target_repr) == (world.users["adam"], "flaky NVLink, watch it", n.name)

    response = client.post(f"/api/v1/nodes/{n.pk}/drain/", {"reason": "replace the board", "grace_seconds": 600})
    assert response.status_code == 200, response.json()
    assert response.json()["state"] == "draining"
    assert (response.json()["open_drain"]["kind"], response.json()["open_drain"]["grace_seconds"]) == ("drain", 600)
    assert AuditLog.objects.get(action="node.drained").changes["grace_seconds"] == 600

    response = client.post(f"/api/v1/nodes/{n.pk}/resume/", {"reason": "board replaced"})
    assert response.status_code == 200
    assert (response.json()["state"], response.json()["open_drain"]) == ("schedulable", None)
    assert set(Drain.objects.filter(node=n).values_list("state", flat=True)) == {Drain.State.RESUMED}
    assert AuditLog.objects.get(action="node.resumed").reason == "board replaced"


def test_a_drain_without_grace_leaves_it_to_each_jobs_tier(world: World, api: Any, fleet: dict[str, Cluster]):
    n = node(fleet["east"])
    response = api("adam").post(f"/api/v1/nodes/{n.pk}/drain/", {"reason": "reboot"})
    assert response.status_code == 200
    assert Drain.objects.get(node=n).grace_seconds is None


@pytest.mark.parametrize("username", NOT_ADMINS)
def test_members_who_may_only_look_get_403_and_nothing_changes(
    world: World, api: Any, fleet: dict[str, Cluster], username: str
):
    client = api(username)
    n = node(fleet["east"])
    assert client.get(f"/api/v1/nodes/{n.pk}/").status_code == 200
    before = unchanged()
    for verb, body in [("cordon", {"reason": "mine"}), ("drain", {"reason": ""}), ("resume", {"bogus": 1})]:
        response = client.post(f"/api/v1/nodes/{n.pk}/{verb}/", body)
        assert response.status_code == 403, (verb, response.json())
        assert errors(response)["code"] == "permission_denied"
    assert unchanged() == before


def test_another_organizations_node_is_404_for_every_verb(world: World, api: Any, fleet: dict[str, Cluster]):
    rival = node(fleet["rival"], 0)
    before = unchanged()
    for username in ["adam", "alice"]:
        client = api(username)
        assert client.get(f"/api/v1/nodes/{rival.pk}/").status_code == 404
        for verb in ("cordon", "drain", "resume"):
            assert client.post(f"/api/v1/nodes/{rival.pk}/{verb}/", {"reason": "x"}).status_code == 404
        listed = client.get("/api/v1/nodes/?page_size=500").json()["results"]
        assert rival.pk not in {n["id"] for n in listed}
    # And the rival's admin cannot reach ours.
    ours = node(fleet["east"])
    assert api("mallory").post(f"/api/v1/nodes/{ours.pk}/drain/", {"reason": "x"}).status_code == 404
    assert unchanged() == before


@pytest.mark.parametrize(
    ("verb", "body", "field"),
    [
        ("cordon", {"reason": ""}, "reason"),
        ("cordon", {}, "reason"),
        ("cordon", {"reason": 7}, "reason"),
        ("drain", {"reason": "x" * 2001}, "reason"),
        ("drain", {"reason": "ok", "grace_seconds": -1}, "grace_seconds"),
        ("drain", {"reason": "ok", "grace_seconds": 24 * 3600 + 1}, "grace_seconds"),
        ("drain", {"reason": "ok", "grace_seconds": "soon"}, "grace_seconds"),
        ("drain", {"reason": "ok", "grace": 60}, "grace"),
        ("resume", {"reason": "nothing to resume"}, "node"),
    ],
)
def test_bad_input_is_400_naming_the_field_and_changes_nothing(
    world: World, api: Any, fleet: dict[str, Cluster], verb: str, body: dict[str, Any], field: str
):
    n = node(fleet["east"])
    before = unchanged()
    response = api("adam").post(f"/api/v1/nodes/{n.pk}/{verb}/", body, format="json")
    assert response.status_code == 400, response.json()
    assert field in errors(response)["fields"], response.json()
    assert unchanged() == before


def test_draining_a_draining_node_is_400_and_changes_nothing(world: World, api: Any, fleet: dict[str, Cluster]):
    n = node(fleet["east"])
    client = api("adam")
    assert client.post(f"/api/v1/nodes/{n.pk}/drain/", {"reason": "first"}).status_code == 200
    before = unchanged()
    for verb in ("drain", "cordon"):
        response = client.post(f"/api/v1/nodes/{n.pk}/{verb}/", {"reason": "again"})
        assert response.status_code == 400
        assert errors(response)["fields"]["node"] == [f"{n.name} is already draining."]
    assert unchanged() == before


def test_service_account_tokens_keep_to_their_scope(world: World, fleet: dict[str, Cluster]):
    n = node(fleet["east"])
    for scope in (ServiceAccount.Scope.READ, ServiceAccount.Scope.ADMIN):
        _, raw = tenancy_actions.create_service_account(
            world.users["lena"], world.teams["vision"], name=f"oncall-{scope}", scope=scope
        )
        client = api_client()
        client.credentials(HTTP_AUTHORIZATION=f"Bearer {raw}")
        assert client.get("/api/v1/clusters/").json()["count"] == 2
        assert client.get(f"/api/v1/nodes/{n.pk}/").status_code == 200
        # Read: no writes at all; admin: what the team's lead may do, and a lead does not drain nodes.
        assert client.post(f"/api/v1/nodes/{n.pk}/cordon/", {"reason": "bot"}).status_code == 403
    assert Drain.objects.count() == 0


# --- Maintenance windows ----------------------------------------------------------------------------------------


def plan(client: Any, **fields: Any) -> Any:
    start = timezone.now() + timedelta(hours=3)
    body = {
        "cluster": "east",
        "starts_at": start.isoformat(),
        "ends_at": (start + timedelta(hours=2)).isoformat(),
        "reason": "PDU swap in row 4",
        **fields,
    }
    return client.post("/api/v1/maintenance-windows/", body, format="json")


def test_an_admin_plans_lists_and_cancels_a_window(world: World, api: Any, fleet: dict[str, Cluster]):
    client = api("adam")
    east = fleet["east"]
    first, second = node(east, 0), node(east, 1)
    response = plan(client, nodes=[first.name, second.pk], drain_ahead_minutes=30)
    assert response.status_code == 201, response.json()
    window = response.json()
    assert (window["cluster"], window["reason"], window["created_by"]) == ("east", "PDU swap in row 4", "adam")
    assert sorted(window["nodes"]) == sorted([first.name, second.name])
    assert window["drain_ahead_minutes"] == 30
    assert AuditLog.objects.get(action="maintenance.planned").actor == world.users["adam"]

    for username in READERS:
        listed = api(username).get("/api/v1/maintenance-windows/").json()["results"]
        assert [w["id"] for w in listed] == [window["id"]]
    assert client.get("/api/v1/maintenance-windows/?ended=true").json()["count"] == 0
    assert client.get("/api/v1/maintenance-windows/?cluster=west").json()["count"] == 0
    assert client.get(f"/api/v1/maintenance-windows/{window['id']}/").json() == window

    response = client.delete(f"/api/v1/maintenance-windows/{window['id']}/")
    assert response.status_code == 204
    assert not MaintenanceWindow.objects.exists()
    assert client.get(f"/api/v1/maintenance-windows/{window['id']}/").status_code == 404
    entry = AuditLog.objects.get(action="maintenance.cancelled")
    assert (entry.actor, entry.changes["resumed"]) == (world.users["adam"], [])


def test_cancelling_a_window_resumes_the_nodes_drained_for_it_and_no_others(
    world: World, api: Any, fleet: dict[str, Cluster]
):
    client = api("adam")
    east = fleet["east"]
    response = plan(client, nodes=[node(east, 0).name, node(east, 1).name])
    window = MaintenanceWindow.objects.get(pk=response.json()["id"])
    # node 1 was cordoned by an admin before the window drained it: it stays out when the window goes.
    assert client.post(f"/api/v1/nodes/{node(east, 1).pk}/cordon/", {"reason": "watch it"}).status_code == 200
    applied = maintenance.apply_windows(window.starts_at - timedelta(minutes=30))
    assert applied.drained == 2
    assert set(Node.objects.filter(cluster=east, state=Node.State.DRAINING).values_list("name", flat=True)) == {
        node(east, 0).name,
        node(east, 1).name,
    }
    assert client.delete(f"/api/v1/maintenance-windows/{window.pk}/").status_code == 204
    assert node(east, 0).state == Node.State.SCHEDULABLE
    assert node(east, 1).state == Node.State.DRAINING  # its admin's cordon still holds it out
    entry = AuditLog.objects.get(action="maintenance.cancelled")
    assert (entry.changes["resumed"], entry.changes["kept_out"]) == ([node(east, 0).name], [node(east, 1).name])
    resumed = AuditLog.objects.get(action="node.resumed")
    assert (resumed.actor, resumed.target_repr) == (world.users["adam"], node(east, 0).name)


def test_a_window_that_has_ended_cannot_be_cancelled(world: World, api: Any, fleet: dict[str, Cluster]):
    now = timezone.now()
    window = MaintenanceWindow.objects.create(
        cluster=fleet["east"], starts_at=now - timedelta(hours=2), ends_at=now - timedelta(hours=1), reason="done"
    )
    before = unchanged()
    response = api("adam").delete(f"/api/v1/maintenance-windows/{window.pk}/")
    assert response.status_code == 409
    assert "ends_at" in errors(response)["fields"]
    assert unchanged() == before


@pytest.mark.parametrize("username", NOT_ADMINS)
def test_only_admins_plan_or_cancel_windows(world: World, api: Any, fleet: dict[str, Cluster], username: str):
    window = plan(api("adam")).json()
    before = unchanged()
    client = api(username)
    assert plan(client).status_code == 403
    assert plan(client, reason="").status_code == 403  # asked before the body is judged
    assert client.delete(f"/api/v1/maintenance-windows/{window['id']}/").status_code == 403
    assert unchanged() == before


def test_another_organizations_windows_are_invisible(world: World, api: Any, fleet: dict[str, Cluster]):
    rival = plan(api("mallory"), cluster="rival").json()
    ours = plan(api("adam")).json()
    before = unchanged()
    assert [w["id"] for w in api("adam").get("/api/v1/maintenance-windows/").json()["results"]] == [ours["id"]]
    assert api("adam").get(f"/api/v1/maintenance-windows/{rival['id']}/").status_code == 404
    assert api("adam").delete(f"/api/v1/maintenance-windows/{rival['id']}/").status_code == 404
    assert api("mallory").delete(f"/api/v1/maintenance-windows/{ours['id']}/").status_code == 404
    # Planning on the rival's cluster by slug or id: as if it did not exist.
    for ref in ("rival", fleet["rival"].pk):
        response = plan(api("adam"), cluster=ref)
        assert response.status_code == 400
        assert errors(response)["fields"]["cluster"] == [f"No cluster '{ref}'."]
    assert unchanged() == before


@pytest.mark.parametrize(
    ("fields", "field"),
    [
        ({"cluster": "nowhere"}, "cluster"),
        ({"starts_at": "tomorrow"}, "starts_at"),
        ({"ends_at": "2026-01-01T00:00:00Z"}, "ends_at"),
        ({"reason": ""}, "reason"),
        ({"nodes": ["no-such-node"]}, "nodes"),
        ({"drain_ahead_minutes": 7 * 24 * 60 + 1}, "drain_ahead_minutes"),
        ({"drain_ahead": 60}, "drain_ahead"),
    ],
)
def test_a_bad_window_is_400_naming_the_field_and_changes_nothing(
    world: World, api: Any, fleet: dict[str, Cluster], fields: dict[str, Any], field: str
):
    before = unchanged()
    response = plan(api("adam"), **fields)
    assert response.status_code == 400, response.json()
    assert field in errors(response)["fields"], response.json()
    assert unchanged() == before


def test_a_node_of_another_cluster_cannot_join_a_window(world: World, api: Any, fleet: dict[str, Cluster]):
    before = unchanged()
    response = plan(api("adam"), nodes=[node(fleet["west"], 0).pk])
    assert response.status_code == 400
    assert errors(response)["fields"]["nodes"] == [f"east has no node {node(fleet['west'], 0).pk}."]
    assert unchanged() == before


# --- The actions behind them -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("field", "value"),
    [("failover_after", 59), ("failover_after", 7 * 24 * 3600 + 1), ("start_timeout", True), ("start_timeout", "900")],
)
def test_failover_and_start_timeout_are_whole_seconds_from_a_minute_to_a_week(
    world: World, fleet: dict[str, Cluster], operator: Any, field: str, value: Any
):
    with pytest.raises(ValidationError) as refused:
        cluster_actions.update_cluster(operator, fleet["east"], **{field: value})
    assert field in refused.value.message_dict
    fleet["east"].refresh_from_db()
    assert (fleet["east"].failover_after, fleet["east"].start_timeout) == (900, 900)


def test_a_new_cluster_fails_over_after_15_minutes_unless_told(world: World, operator: Any):
    fields: dict[str, Any] = {"kind": "simulated", "region": "eu", "options": {"nodes": 1}}
    default = cluster_actions.create_cluster(operator, world.org, name="Default", **fields)
    told = cluster_actions.create_cluster(
        operator, world.org, name="Told", failover_after=3600, start_timeout=120, **fields
    )
    assert (default.failover_after, default.start_timeout) == (900, 900)
    assert (told.failover_after, told.start_timeout) == (3600, 120)
    entry = AuditLog.objects.filter(action="cluster.created").latest("pk")
    assert (entry.changes["failover_after"], entry.changes["start_timeout"]) == (3600, 120)


def test_only_admins_cancel_maintenance_and_a_cancelled_window_is_gone(world: World, fleet: dict[str, Cluster]):
    start = timezone.now() + timedelta(hours=1)
    window = cluster_actions.plan_maintenance(
        world.users["adam"], fleet["east"], starts_at=start, ends_at=start + timedelta(hours=1), reason="UPS test"
    )
    for username in NOT_ADMINS:
        with pytest.raises(PermissionDenied):
            cluster_actions.cancel_maintenance(world.users[username], window)
    assert MaintenanceWindow.objects.filter(pk=window.pk).exists()
    cluster_actions.cancel_maintenance(world.users["adam"], window)
    with pytest.raises(ValidationError) as refused:
        cluster_actions.cancel_maintenance(world.users["adam"], window)
    assert "window" in refused.value.message_dict
    assert AuditLog.objects.filter(action="maintenance.cancelled").count() == 1
