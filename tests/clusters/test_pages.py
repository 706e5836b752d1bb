"""The cluster pages: list, detail, live view, node detail with its drain and resume forms.

Every member of the organization views its clusters, only its admins drain and resume; another
organization's cluster or node is a 404; a form with bad input is a 400 with the field named and nothing
changed; the list and live pages keep to a query budget however many clusters and nodes there are.
"""

from __future__ import annotations

import json
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from django.test import Client
from django.utils import timezone

from clusters.actions import sync
from clusters.live import allocation_class, domain_label
from clusters.models import Cluster, Drain, HealthCheckResult, Node
from demo.fleet import seed_demo_fleet, sync_demo_fleet
from scheduler.placement import recover
from tenancy.models import AuditLog
from tests.conftest import World, api_client

MEMBERS = ["alice", "lena", "fiona", "adam"]


@pytest.fixture
def fleet(world: World, settings: Any, tmp_path: Path) -> dict[str, Cluster]:
    """The demo fleet synced (64 H100 nodes in IB blocks and racks, 32 A100, 16 TPU hosts), and one small
    cluster of the rival organization."""
    settings.VAR_DIR = tmp_path
    seed_demo_fleet(world.org)
    sync_demo_fleet(world.org)
    rival = Cluster.objects.create(
        organization=world.other_org,
        name="Rival secret cluster",
        slug="rival",
        kind="simulated",
        endpoint="sim://rival-pages",
        region="mars-1",
        levels=["rack"],
        options={"profile": "a100-slurm", "nodes": 8},
    )
    assert sync.sync_cluster(rival.pk).ok
    return {c.slug: c for c in Cluster.objects.all()}


def signed_in(world: World, username: str) -> Client:
    client = Client()
    client.force_login(world.users[username])
    return client


def h100(name: str = "h100-00005") -> Node:
    return Node.objects.get(cluster__slug="onprem-h100", cluster__organization__slug="demo", name=name)


def pages(cluster: Cluster, node: Node) -> list[str]:
    return [
        "/clusters/",
        f"/clusters/{cluster.pk}/",
        f"/clusters/{cluster.pk}/live/",
        f"/clusters/{cluster.pk}/live/tiles/",
        f"/clusters/nodes/{node.pk}/",
    ]


def unchanged(node: Node) -> tuple[Any, ...]:
    node.refresh_from_db()
    return node.state, Drain.objects.count(), AuditLog.objects.count()


# --- Who sees what --------------------------------------------------------------------------------------


@pytest.mark.parametrize("username", MEMBERS)
def test_every_member_of_the_organization_sees_every_page(world: World, fleet: dict[str, Cluster], username: str):
    client = signed_in(world, username)
    for path in pages(fleet["onprem-h100"], h100()):
        assert client.get(path).status_code == 200, path


def test_anonymous_is_sent_to_sign_in(world: World, fleet: dict[str, Cluster]):
    for path in pages(fleet["onprem-h100"], h100()):
        response = Client().get(path)
        assert response.status_code == 302
        assert response["Location"] == f"/login/?next={path}"


def test_a_poll_after_the_session_ran_out_sends_the_page_to_sign_in(world: World, fleet: dict[str, Cluster]):
    cluster = fleet["onprem-h100"]
    page = f"http://testserver/clusters/{cluster.pk}/live/"
    response = Client().get(
        f"/clusters/{cluster.pk}/live/tiles/", headers={"HX-Request": "true", "HX-Current-URL": page}
    )
    assert response.status_code == 200
    assert response["HX-Redirect"] == f"/login/?next=%2Fclusters%2F{cluster.pk}%2Flive%2F"
    assert response.content == b""


def test_another_organizations_clusters_and_nodes_are_404(world: World, fleet: dict[str, Cluster]):
    mallory = signed_in(world, "mallory")  # admin of Rival Labs
    for path in pages(fleet["onprem-h100"], h100())[1:]:
        assert mallory.get(path).status_code == 404, path
    listed = mallory.get("/clusters/").content.decode()
    assert "Rival secret cluster" in listed
    assert "On-prem H100" not in listed

    rival_node = Node.objects.filter(cluster=fleet["rival"]).first()
    assert rival_node is not None
    adam = signed_in(world, "adam")
    for path in pages(fleet["rival"], rival_node)[1:]:
        assert adam.get(path).status_code == 404, path
    assert "Rival secret cluster" not in adam.get("/clusters/").content.decode()


def test_posts_against_another_organizations_node_are_404_and_change_nothing(world: World, fleet: dict[str, Cluster]):
    node = h100()
    mallory = signed_in(world, "mallory")  # (signing in is audited too)
    before = unchanged(node)
    assert mallory.post(f"/clusters/nodes/{node.pk}/drain/", {"reason": "mine now"}).status_code == 404
    assert mallory.post(f"/clusters/nodes/{node.pk}/resume/", {"reason": "mine now"}).status_code == 404
    assert unchanged(node) == before


# --- The clusters list ----------------------------------------------------------------------------------


def test_list_shows_status_sync_nodes_by_state_and_accelerators(world: World, fleet: dict[str, Cluster]):
    Node.objects.filter(pk=h100().pk).update(state=Node.State.DOWN)
    Cluster.objects.filter(pk=fleet["tpu-v5p"].pk).update(
        status=Cluster.Status.DEGRADED, last_error="TPU API: 503 Service Unavailable (try again)"
    )
    response = signed_in(world, "alice").get("/clusters/")
    body = response.content.decode()
    for name in ("On-prem H100", "A100 Slurm partition", "Cloud TPU v5p"):
        assert name in body
    assert "Degraded" in body
    assert "TPU API: 503 Service Unavailable (try again)" in body
    assert "ago" in body  # last sync, relative
    assert "63 schedulable" in body
    assert "1 down" in body
    rows = {row["cluster"].slug: row for row in response.context["rows"]}
    expected = {
        slug: (
            sum(n.accelerators_used for n in Node.objects.filter(cluster=cluster)),
            sum(n.accelerators for n in Node.objects.filter(cluster=cluster)),
        )
        for slug, cluster in fleet.items()
        if slug != "rival"
    }
    assert {slug: (row["used"], row["total"]) for slug, row in rows.items()} == expected
    assert rows["onprem-h100"]["total"] == 64 * 8
    assert rows["onprem-h100"]["nodes"] == 64


def test_list_keeps_to_its_query_budget_whatever_the_number_of_clusters(
    world: World, fleet: dict[str, Cluster], django_assert_max_num_queries: Any
):
    client = signed_in(world, "adam")
    client.get("/clusters/")  # the session is read once
    # (One of them reads our placements, which every cluster's counts include.)
    with django_assert_max_num_queries(6):
        assert client.get("/clusters/").status_code == 200
    for i in range(5):
        Cluster.objects.create(
            organization=world.org, name=f"Extra {i}", slug=f"extra-{i}", kind="simulated", region="x"
        )
    with django_assert_max_num_queries(6):
        assert "Extra 4" in client.get("/clusters/").content.decode()


# --- One cluster ----------------------------------------------------------------------------------------


def test_detail_shows_sync_options_and_accelerators_but_never_credentials(world: World, fleet: dict[str, Cluster]):
    cluster = fleet["slurm-a100"]
    cluster.set_credentials({"token": "s3cr3t-jwt-value"})
    cluster.options = {**cluster.options, "api_token": "leaked-into-options"}
    cluster.save()
    body = signed_in(world, "adam").get(f"/clusters/{cluster.pk}/").content.decode()
    assert "credentials set" in body
    assert "s3cr3t-jwt-value" not in body
    assert "leaked-into-options" not in body
    assert "a100-slurm" in body  # the other options are shown
    assert "A100-SXM-40GB" in body
    assert "Healthy" in body
    no_credentials = signed_in(world, "adam").get(f"/clusters/{fleet['tpu-v5p'].pk}/").content.decode()
    assert 'data-testid="credentials">none<' in no_credentials


def test_only_its_admins_see_a_cluster_s_server_paths_and_endpoint(world: World, fleet: dict[str, Cluster]):
    cluster = fleet["slurm-a100"]
    cluster.options = {**cluster.options, "log_dir": "/srv/slurm/qm-logs", "log_mount": "/mnt/lab-logs"}
    cluster.endpoint = "https://slurm.internal.example:6820"
    cluster.set_credentials({"token": "s3cr3t-jwt-value"})
    cluster.save()
    for username in ("alice", "lena", "fiona"):
        page = signed_in(world, username).get(f"/clusters/{cluster.pk}/").content.decode()
        for internal in ("/srv/slurm/qm-logs", "/mnt/lab-logs", "slurm.internal.example", "credentials set"):
            assert internal not in page, (username, internal)
        assert 'data-testid="settings-note"' in page
        api = api_client(world.users[username]).get(f"/api/v1/clusters/{cluster.pk}/").json()
        assert api["options"] is None
        assert "/srv/slurm" not in json.dumps(api)
    admin = signed_in(world, "adam").get(f"/clusters/{cluster.pk}/").content.decode()
    assert "/srv/slurm/qm-logs" in admin
    assert "slurm.internal.example" in admin
    assert 'data-testid="settings-note"' not in admin


def test_detail_pages_filters_and_searches_nodes(world: World, fleet: dict[str, Cluster]):
    cluster = fleet["onprem-h100"]
    client = signed_in(world, "alice")
    first = client.get(f"/clusters/{cluster.pk}/")
    assert first.context["page"].paginator.count == 64
    assert len(first.context["page"]) == 50
    assert len(client.get(f"/clusters/{cluster.pk}/?page=2").context["page"]) == 14

    Node.objects.filter(pk=h100("h100-00012").pk).update(state=Node.State.CORDONED)
    cordoned = client.get(f"/clusters/{cluster.pk}/?state=cordoned")
    assert [n.name for n in cordoned.context["page"]] == ["h100-00012"]
    searched = client.get(f"/clusters/{cluster.pk}/?q=h100-0001")
    assert [n.name for n in searched.context["page"]] == [f"h100-{i:05d}" for i in range(10, 20)]

    bad = client.get(f"/clusters/{cluster.pk}/?state=exploded")
    assert bad.status_code == 400
    assert "state" in bad.context["filter"].errors


def test_detail_lists_recent_drains(world: World, fleet: dict[str, Cluster]):
    node = h100()
    adam = signed_in(world, "adam")
    adam.post(f"/clusters/nodes/{node.pk}/drain/", {"reason": "GPU 3 fell off the bus"})
    body = adam.get(f"/clusters/{fleet['onprem-h100'].pk}/").content.decode()
    assert "GPU 3 fell off the bus" in body
    assert "h100-00005" in body


# --- The live view --------------------------------------------------------------------------------------


def test_live_view_groups_nodes_by_topology_and_marks_their_state(world: World, fleet: dict[str, Cluster]):
    cluster = fleet["onprem-h100"]
    Node.objects.filter(pk=h100("h100-00001").pk).update(state=Node.State.DRAINED)
    Node.objects.filter(pk=h100("h100-00002").pk).update(state=Node.State.DOWN, healthy=False)
    response = signed_in(world, "alice").get(f"/clusters/{cluster.pk}/live/")
    live = response.context["live"]
    # 64 nodes: 2 InfiniBand blocks of 8 racks of 4.
    assert [s.path for s in live.sections] == ["ib-block-000", "ib-block-001"]
    assert [len(s.domains) for s in live.sections] == [8, 8]
    assert live.sections[0].domains[0].name == "rack-000"
    assert all(len(d.tiles) == 4 for s in live.sections for d in s.domains)
    assert live.nodes == 64
    assert live.states == {"schedulable": 62, "drained": 1, "down": 1}
    body = response.content.decode()
    assert body.count('class="t ') == 64 + 6 + 4 + 1  # the tiles, then the legend's samples
    assert body.count('data-domain="rack-') == 16
    assert f'href="/clusters/nodes/{h100("h100-00001").pk}/"' in body
    assert 'drained" href=' in body
    assert "h100-00002: " in body
    assert "down sick" in body
    # It polls its partial, only while the tab is visible.
    assert f'hx-get="/clusters/{cluster.pk}/live/tiles/"' in body
    assert 'hx-trigger="every 5s, qm-visible" data-poll-while-visible' in body  # held while hidden: portal.js
    assert "vendor/htmx/htmx.min.js" in body


def test_live_partial_is_the_tiles_alone(world: World, fleet: dict[str, Cluster]):
    cluster = fleet["slurm-a100"]  # 32 nodes in racks of 8
    body = signed_in(world, "fiona").get(f"/clusters/{cluster.pk}/live/tiles/").content.decode()
    assert "<html" not in body
    assert body.count('data-domain="rack-') == 4
    assert body.count('class="t ') == 32


def test_live_partial_is_compressed_for_browsers_that_take_it(world: World, fleet: dict[str, Cluster]):
    client = signed_in(world, "adam")
    path = f"/clusters/{fleet['onprem-h100'].pk}/live/tiles/"
    assert client.get(path, headers={"accept-encoding": "gzip"})["Content-Encoding"] == "gzip"
    assert not client.get(path).has_header("Content-Encoding")


def test_live_view_escapes_names(world: World, fleet: dict[str, Cluster]):
    cluster = fleet["slurm-a100"]
    Node.objects.create(
        cluster=cluster, name='<script>alert("n")</script>', accelerators=8, topology={"rack": "<b>rack</b>"}
    )
    body = signed_in(world, "adam").get(f"/clusters/{cluster.pk}/live/").content.decode()
    assert "<script>alert" not in body
    assert "&lt;script&gt;alert(&quot;n&quot;)&lt;/script&gt;" in body
    assert "<b>rack</b>" not in body
    assert "&lt;b&gt;rack&lt;/b&gt;" in body


def test_live_view_keeps_to_its_query_budget(
    world: World, fleet: dict[str, Cluster], django_assert_max_num_queries: Any
):
    client = signed_in(world, "adam")
    cluster = fleet["onprem-h100"]
    client.get(f"/clusters/{cluster.pk}/live/")
    # (One of them reads our placements, which every node's count includes.)
    with django_assert_max_num_queries(6):
        assert client.get(f"/clusters/{cluster.pk}/live/").status_code == 200
    with django_assert_max_num_queries(6):
        assert client.get(f"/clusters/{cluster.pk}/live/tiles/").status_code == 200


@pytest.mark.parametrize(
    ("used", "total", "step"),
    [
        (0, 8, "a0"),
        (1, 8, "a1"),
        (2, 8, "a1"),
        (3, 8, "a2"),
        (4, 8, "a2"),
        (6, 8, "a3"),
        (7, 8, "a4"),
        (8, 8, "a4"),
        (0, 0, "an"),
    ],
)
def test_tiles_are_coloured_by_the_share_of_accelerators_in_use(used: int, total: int, step: str):
    assert allocation_class(used, total) == step


def test_domains_are_named_by_level_unless_their_name_says_it():
    assert domain_label("rack", "rack-007") == "rack-007"
    assert domain_label("ib_block", "ib-block-000") == "ib-block-000"
    assert domain_label("rack", "r07") == "rack r07"
    assert domain_label("", "(none)") == "(none)"


# --- One node: drain and resume -------------------------------------------------------------------------


def test_node_detail_shows_capacity_topology_health_newest_first(world: World, fleet: dict[str, Cluster]):
    node = h100()
    now = timezone.now()
    HealthCheckResult.objects.create(
        node=node, name="gpu_ecc", ok=True, source="probe", observed_at=now - timedelta(hours=1)
    )
    HealthCheckResult.objects.create(
        node=node, name="gpu_xid", ok=False, message="Xid 79", source="probe", observed_at=now
    )
    response = signed_in(world, "alice").get(f"/clusters/nodes/{node.pk}/")
    assert [h.name for h in response.context["health"]] == ["gpu_xid", "gpu_ecc"]
    body = response.content.decode()
    assert "Xid 79" in body
    assert "H100-SXM-80GB" in body
    assert "ib-block-000" in body
    assert "rack-001" in body
    # A researcher sees no forms.
    assert 'data-testid="drain-form"' not in body
    assert 'data-testid="resume-form"' not in body


def test_admin_drains_a_node_through_the_form(
    world: World, fleet: dict[str, Cluster], django_capture_on_commit_callbacks: Any
):
    node = h100()
    adam = signed_in(world, "adam")
    assert 'data-testid="drain-form"' in adam.get(f"/clusters/nodes/{node.pk}/").content.decode()
    with django_capture_on_commit_callbacks(execute=False) as callbacks:
        response = adam.post(f"/clusters/nodes/{node.pk}/drain/", {"reason": "  ECC errors on GPU 2  "})
    assert response.status_code == 302
    assert response["Location"] == f"/clusters/nodes/{node.pk}/"
    node.refresh_from_db()
    assert node.state == Node.State.DRAINING
    drain = Drain.objects.get(node=node)
    assert (drain.reason, drain.requested_by, drain.state) == ("ECC errors on GPU 2", world.users["adam"], "draining")
    entry = AuditLog.objects.get(action="node.drained")
    assert (entry.actor, entry.reason, entry.target_repr) == (world.users["adam"], "ECC errors on GPU 2", node.name)
    assert entry.ip_address == "127.0.0.1"
    # Once committed the cluster is told (the task runs eagerly here); with no work on it the drain is done.
    for callback in callbacks:
        callback()
    recover.finish_drains(None, timezone.now())
    node.refresh_from_db()
    assert node.state == Node.State.DRAINED
    page = adam.get(f"/clusters/nodes/{node.pk}/").content.decode()
    assert "ECC errors on GPU 2" in page
    assert 'data-testid="drain-form"' not in page
    assert 'data-testid="resume-form"' in page


def test_admin_resumes_a_drained_node(world: World, fleet: dict[str, Cluster]):
    node = h100()
    adam = signed_in(world, "adam")
    adam.post(f"/clusters/nodes/{node.pk}/drain/", {"reason": "reseat the cables"})
    response = adam.post(f"/clusters/nodes/{node.pk}/resume/", {"reason": "cables reseated, burn-in passed"})
    assert response.status_code == 302
    node.refresh_from_db()
    assert node.state == Node.State.SCHEDULABLE
    assert Drain.objects.get(node=node).state == Drain.State.RESUMED
    assert AuditLog.objects.get(action="node.resumed").reason == "cables reseated, burn-in passed"


@pytest.mark.parametrize("username", ["alice", "lena", "fiona"])
def test_who_may_not_change_gets_403_and_nothing_changes(world: World, fleet: dict[str, Cluster], username: str):
    node = h100()
    client = signed_in(world, username)
    body = client.get(f"/clusters/nodes/{node.pk}/").content.decode()
    assert 'data-testid="drain-form"' not in body
    before = unchanged(node)
    assert client.post(f"/clusters/nodes/{node.pk}/drain/", {"reason": "I want it"}).status_code == 403
    assert client.post(f"/clusters/nodes/{node.pk}/drain/", {"reason": ""}).status_code == 403
    assert client.post(f"/clusters/nodes/{node.pk}/resume/", {"reason": "I want it"}).status_code == 403
    assert unchanged(node) == before


@pytest.mark.parametrize("reason", ["", "   ", "x" * 2001])
def test_a_bad_reason_is_400_naming_the_field_and_changes_nothing(world: World, fleet: dict[str, Cluster], reason: str):
    node = h100()
    adam = signed_in(world, "adam")
    before = unchanged(node)
    response = adam.post(f"/clusters/nodes/{node.pk}/drain/", {"reason": reason})
    assert response.status_code == 400
    assert "reason" in response.context["drain_form"].errors
    body = response.content.decode()
    assert 'class="field invalid"' in body
    assert 'id="drain_reason"' in body
    assert unchanged(node) == before


def test_draining_twice_is_400_with_the_reason_and_changes_nothing(world: World, fleet: dict[str, Cluster]):
    node = h100()
    adam = signed_in(world, "adam")
    adam.post(f"/clusters/nodes/{node.pk}/drain/", {"reason": "first"})
    before = unchanged(node)
    response = adam.post(f"/clusters/nodes/{node.pk}/drain/", {"reason": "second"})
    assert response.status_code == 400
    assert "h100-00005 is already draining." in response.content.decode()
    assert unchanged(node) == before
    resumed = adam.post(f"/clusters/nodes/{h100('h100-00006').pk}/resume/", {"reason": "nothing to resume"})
    assert resumed.status_code == 400
    assert "not drained" in resumed.content.decode()


# --- Cordon, and a drain's grace --------------------------------------------------------------------------


def test_the_node_page_tells_cordon_from_drain(world: World, fleet: dict[str, Cluster]):
    body = signed_in(world, "adam").get(f"/clusters/nodes/{h100().pk}/").content.decode()
    assert 'data-testid="cordon-form"' in body
    assert "Cordon</strong>: no new work; running jobs finish." in body
    assert "Drain</strong>: running jobs are signalled, get their grace to checkpoint, then move elsewhere." in body
    assert 'id="drain_grace_seconds"' in body
    assert (
        'data-testid="cordon-form"'
        not in signed_in(world, "alice").get(f"/clusters/nodes/{h100().pk}/").content.decode()
    )


def test_admin_cordons_a_node_then_drains_it_with_a_grace(world: World, fleet: dict[str, Cluster]):
    node = h100()
    adam = signed_in(world, "adam")
    response = adam.post(f"/clusters/nodes/{node.pk}/cordon/", {"reason": "  flaky NVLink  "})
    assert response.status_code == 302
    node.refresh_from_db()
    assert node.state == Node.State.CORDONED
    cordon = Drain.objects.get(node=node)
    assert (cordon.kind, cordon.state, cordon.reason) == ("cordon", "cordoned", "flaky NVLink")
    assert AuditLog.objects.get(action="node.cordoned").reason == "flaky NVLink"
    page = adam.get(f"/clusters/nodes/{node.pk}/").content.decode()
    assert 'data-testid="cordon-form"' not in page  # already cordoned
    assert 'data-testid="drain-form"' in page  # a cordoned node may be drained
    assert 'data-testid="resume-form"' in page

    response = adam.post(f"/clusters/nodes/{node.pk}/drain/", {"reason": "swap the board", "grace_seconds": "10m"})
    assert response.status_code == 302
    drain = Drain.objects.get(node=node, kind="drain")
    assert drain.grace_seconds == 600
    assert AuditLog.objects.get(action="node.drained").changes["grace_seconds"] == 600
    assert "grace 600 s" in adam.get(f"/clusters/nodes/{node.pk}/").content.decode()


def test_a_drain_without_grace_leaves_it_to_each_jobs_tier(world: World, fleet: dict[str, Cluster]):
    node = h100()
    assert signed_in(world, "adam").post(f"/clusters/nodes/{node.pk}/drain/", {"reason": "reboot"}).status_code == 302
    assert Drain.objects.get(node=node).grace_seconds is None


@pytest.mark.parametrize("grace", ["soon", "-5", "2d", "10 minutes", "1.5h"])
def test_a_bad_grace_is_400_naming_the_field_and_changes_nothing(world: World, fleet: dict[str, Cluster], grace: str):
    node = h100()
    adam = signed_in(world, "adam")
    before = unchanged(node)
    response = adam.post(f"/clusters/nodes/{node.pk}/drain/", {"reason": "ok", "grace_seconds": grace})
    assert response.status_code == 400
    assert "grace_seconds" in response.context["drain_form"].errors
    assert unchanged(node) == before


@pytest.mark.parametrize("username", ["alice", "lena", "fiona"])
def test_who_may_not_change_gets_403_on_cordon_too(world: World, fleet: dict[str, Cluster], username: str):
    node = h100()
    client = signed_in(world, username)
    before = unchanged(node)
    assert client.post(f"/clusters/nodes/{node.pk}/cordon/", {"reason": "mine"}).status_code == 403
    assert unchanged(node) == before


def test_cordoning_twice_is_400_and_changes_nothing(world: World, fleet: dict[str, Cluster]):
    node = h100()
    adam = signed_in(world, "adam")
    adam.post(f"/clusters/nodes/{node.pk}/cordon/", {"reason": "first"})
    before = unchanged(node)
    response = adam.post(f"/clusters/nodes/{node.pk}/cordon/", {"reason": "second"})
    assert response.status_code == 400
    assert "h100-00005 is already cordoned." in response.content.decode()
    assert unchanged(node) == before


# --- The cluster form: failover and start timeout ----------------------------------------------------------


def _edit_form(cluster: Cluster, **changes: str) -> dict[str, str]:
    return {
        "name": cluster.name,
        "slug": cluster.slug,
        "endpoint": cluster.endpoint,
        "region": cluster.region,
        "levels": ", ".join(cluster.levels),
        "options": json.dumps(cluster.options),
        "preference": str(cluster.preference),
        **changes,
    }


def test_the_cluster_form_shows_and_edits_failover_and_start_timeout(
    world: World, fleet: dict[str, Cluster], operator: Any
):
    cluster = fleet["onprem-h100"]  # simulated: changed by the installation's operator
    adam = Client()
    adam.force_login(operator)
    form = adam.get(f"/clusters/{cluster.pk}/edit/").content.decode()
    assert 'name="failover_after" value="900"' in form
    assert 'name="start_timeout" value="900"' in form
    response = adam.post(
        f"/clusters/{cluster.pk}/edit/", _edit_form(cluster, failover_after="30m", start_timeout="600")
    )
    assert response.status_code == 302, response.context["form"].errors
    cluster.refresh_from_db()
    assert (cluster.failover_after, cluster.start_timeout) == (1800, 600)
    entry = AuditLog.objects.filter(action="cluster.updated").latest("pk")
    assert entry.changes["failover_after"] == [900, 1800]
    assert entry.changes["start_timeout"] == [900, 600]
    page = adam.get(f"/clusters/{cluster.pk}/").content.decode()
    assert "1800 s of silence" in page


@pytest.mark.parametrize(
    ("field", "value"), [("failover_after", "59"), ("failover_after", "8d"), ("start_timeout", "soon")]
)
def test_a_bad_timeout_is_400_naming_the_field_and_changes_nothing(
    world: World, fleet: dict[str, Cluster], operator: Any, field: str, value: str
):
    cluster = fleet["onprem-h100"]
    adam = Client()
    adam.force_login(operator)
    audited = AuditLog.objects.count()
    response = adam.post(f"/clusters/{cluster.pk}/edit/", _edit_form(cluster, **{field: value}))
    assert response.status_code == 400
    assert field in response.context["form"].errors
    cluster.refresh_from_db()
    assert (cluster.failover_after, cluster.start_timeout, AuditLog.objects.count()) == (900, 900, audited)


# --- Every placement counts -----------------------------------------------------------------------------


def test_node_views_count_a_demo_jobs_placement_before_and_after_the_clusters_report(
    world: World, fleet: dict[str, Cluster]
) -> None:
    """A demo job placed on whole H100 nodes: the pages count it at once from its assignments (the cluster's
    report says 0 until the next sync), and after a sync from the simulated cluster's own report."""
    from demo.jobs import seed_governance, seed_jobs
    from scheduler.models import Assignment, Job
    from scheduler.placement import dispatch, loop

    seed_governance(world.org)
    gang = next(j for j in seed_jobs(world.org) if j.name == "grasp-gang-16")
    loop.run_cycle(world.org)
    gang.refresh_from_db()
    assert gang.state == Job.State.ADMITTED
    held = list(Assignment.objects.filter(attempt__job=gang).select_related("node"))
    assert len(held) == 16
    node = held[0].node
    assert node.accelerators_used == 0  # not in the cluster's report yet
    cluster = fleet["onprem-h100"]
    placed = sum(
        len({i for i, _ in a.accelerators})
        for a in Assignment.objects.filter(attempt__outcome="active", node__cluster=cluster)
    )
    assert placed >= 16 * 8

    def shown() -> tuple[str, str, str, int, int]:
        client = signed_in(world, "adam")
        detail = client.get(f"/clusters/nodes/{node.pk}/").content.decode()
        capacity = detail.split('data-testid="capacity"')[1].split("</table>")[0]
        tiles = client.get(f"/clusters/{cluster.pk}/live/tiles/").content.decode()
        tile = next(t for t in tiles.split("<a ") if f'href="/clusters/nodes/{node.pk}/"' in t)
        listed = client.get(f"/clusters/{cluster.pk}/?name={node.name}")
        row = next(n for n, used in listed.context["nodes"] if n.pk == node.pk)
        used_here = dict(listed.context["nodes"])[row].accelerators
        clusters = {r["cluster"].slug: r["used"] for r in client.get("/clusters/").context["rows"]}
        types = {a.name: a.used for a in listed.context["accelerator_types"]}
        assert types["H100-SXM-80GB"] == clusters["onprem-h100"]
        return capacity, tile, str(used_here), clusters["onprem-h100"], types["H100-SXM-80GB"]

    capacity, tile, used_here, in_cluster, of_type = shown()
    assert "<td>8</td><td>8</td><td>8</td>" in capacity  # capacity, allocatable, used
    assert f"{node.name}: 8/8 used" in tile
    assert "a4" in tile
    assert used_here == "8"
    assert in_cluster == of_type == placed

    # Dispatched, the simulated cluster runs it and reports it: the same counts, not twice.
    for attempt_id in gang.attempts.values_list("pk", flat=True):
        dispatch.dispatch(attempt_id)
    sync.sync_cluster(cluster.pk)
    node.refresh_from_db()
    assert node.accelerators_used == 8
    assert shown() == (capacity, tile, used_here, in_cluster, of_type)
