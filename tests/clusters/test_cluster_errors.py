"""Bad input end to end: a cluster registered with wrong credentials, a closed port or a server that
answers garbage, synced through ``clusters.actions.sync.sync_cluster`` against the real Slurm lab and the faithful
Kubernetes and TPU servers.

Each time the cluster says what went wrong in words (authentication, unreachable, bad response) on its
page, the nodes synced earlier from a healthy state stay as they were, the credentials appear nowhere (the
page, the error, the audit log), and another cluster of the organization still syncs.
"""

from __future__ import annotations

import html
import json
import socket
from collections.abc import Iterator
from typing import Any

import pytest
from django.test import Client

from clusters import actions
from clusters.actions import sync
from clusters.backends.simulated import backend as simulated
from clusters.models import Cluster, Node
from tenancy.models import AuditLog
from tests.clusters.kube_server import TOKEN, KubeServer
from tests.clusters.slurm_lab import SlurmLab, mint_token
from tests.clusters.tpu_server import TpuServer
from tests.conftest import World

WRONG_KUBE_TOKEN = "wrong-kube-token-0xdeadbeef"
TPU_TOKEN = "ya29.tpu-access-token-s3cr3t"


@pytest.fixture(autouse=True)
def fresh_simulated_state() -> Iterator[None]:
    simulated._MEMORY.clear()
    yield
    simulated._MEMORY.clear()


@pytest.fixture
def healthy(world: World, operator: Any) -> Cluster:
    """Another cluster of the organization, which keeps syncing whatever happens to the broken one."""
    return actions.create_cluster(
        operator,
        world.org,
        name="Healthy sim",
        kind="simulated",
        endpoint="sim://errors-healthy",
        region="eu",
        options={"profile": "a100-slurm", "nodes": 8},
    )


@pytest.fixture
def kube() -> Iterator[KubeServer]:
    with KubeServer() as server:
        yield server


@pytest.fixture
def tpu() -> Iterator[TpuServer]:
    with TpuServer(token=TPU_TOKEN) as server:
        yield server


def nodes_of(cluster: Cluster) -> list[dict[str, Any]]:
    return list(Node.objects.filter(cluster=cluster).order_by("name").values())


def synced_healthy(cluster: Cluster) -> list[dict[str, Any]]:
    """Sync from a healthy state; the nodes as they are then."""
    result = sync.sync_cluster(cluster.pk)
    assert result.ok, result.error
    nodes = nodes_of(cluster)
    assert nodes
    return nodes


def assert_failed_well(
    world: World, cluster: Cluster, nodes: list[dict[str, Any]], healthy: Cluster, words: str, *secrets: str
) -> str:
    """The sync failed with ``words`` in its error, changed no node, leaked no secret; the other cluster
    still syncs. Returns the error."""
    result = sync.sync_cluster(cluster.pk)
    assert not result.ok
    cluster.refresh_from_db()
    assert cluster.status == Cluster.Status.DEGRADED
    assert words in cluster.last_error, cluster.last_error
    assert nodes_of(cluster) == nodes
    page = Client()
    page.force_login(world.users["adam"])
    body = page.get(f"/clusters/{cluster.pk}/").content.decode()
    assert html.escape(cluster.last_error) in body
    listed = page.get("/clusters/").content.decode()
    assert html.escape(cluster.last_error) in listed
    audit = json.dumps(list(AuditLog.objects.values("changes", "reason", "target_repr", "user_agent")))
    for secret in secrets:
        assert secret not in cluster.last_error
        assert secret not in result.error
        assert secret not in body
        assert secret not in listed
        assert secret not in audit
    other = sync.sync_cluster(healthy.pk)
    assert other.ok, other.error
    healthy.refresh_from_db()
    assert healthy.status == Cluster.Status.HEALTHY
    return cluster.last_error


def test_kubernetes_with_a_wrong_token_is_an_authentication_error(
    world: World, kube: KubeServer, healthy: Cluster
) -> None:
    adam = world.users["adam"]
    cluster = actions.create_cluster(
        adam,
        world.org,
        name="Kube",
        kind="kubernetes",
        endpoint=kube.url,
        region="eu",
        options={"namespace": "research"},
        credentials={"token": TOKEN},
    )
    nodes = synced_healthy(cluster)
    actions.update_cluster(adam, cluster, credentials={"token": WRONG_KUBE_TOKEN})
    error = assert_failed_well(world, cluster, nodes, healthy, "refused the token", WRONG_KUBE_TOKEN, TOKEN)
    assert "(Unauthorized)" in error


def test_tpu_at_a_closed_port_is_unreachable(world: World, tpu: TpuServer, healthy: Cluster) -> None:
    adam = world.users["adam"]
    cluster = actions.create_cluster(
        adam,
        world.org,
        name="TPU",
        kind="tpu",
        endpoint=tpu.url,
        region="us-east5",
        options={"project": tpu.project, "zone": tpu.zone, "slices": {"v5p-8": 1}},
        credentials={"access_token": TPU_TOKEN},
    )
    nodes = synced_healthy(cluster)
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        closed = sock.getsockname()[1]
    actions.update_cluster(adam, cluster, endpoint=f"http://127.0.0.1:{closed}")
    error = assert_failed_well(world, cluster, nodes, healthy, "did not answer", TPU_TOKEN)
    assert "Connection refused" in error


@pytest.mark.slurm
def test_slurm_with_a_wrong_jwt_is_an_authentication_error(
    world: World, slurm_lab: SlurmLab, healthy: Cluster, operator: Any
) -> None:
    adam = world.users["adam"]
    # slurm_conf names a file on the Quartermaster host: its operator (a superuser) registers the lab.
    cluster = actions.create_cluster(
        operator,
        world.org,
        name="Slurm lab",
        kind="slurm",
        endpoint=slurm_lab.endpoint,
        region="lab",
        options=slurm_lab.options,
        credentials={"user": "root", "token": slurm_lab.token},
    )
    nodes = synced_healthy(cluster)
    assert len(nodes) == 4
    wrong = mint_token(b"not the lab's key, but long enough" * 2)
    actions.update_cluster(adam, cluster, credentials={"token": wrong})
    assert_failed_well(world, cluster, nodes, healthy, "rejected the token", wrong, slurm_lab.token)


@pytest.mark.parametrize(
    "body", [b"{broken json", b'{"kind": "NodeList", "items": "not a list"}'], ids=["not-json", "wrong-shape"]
)
def test_kubernetes_answering_garbage_is_a_bad_response(
    world: World, kube: KubeServer, healthy: Cluster, body: bytes
) -> None:
    cluster = actions.create_cluster(
        world.users["adam"],
        world.org,
        name="Kube",
        kind="kubernetes",
        endpoint=kube.url,
        region="eu",
        options={"namespace": "research"},
        credentials={"token": TOKEN},
    )
    nodes = synced_healthy(cluster)
    kube.canned[("GET", "/api/v1/nodes")] = (200, "application/json", body)
    words = f"the API server at {kube.url} answered listing nodes with"
    assert_failed_well(world, cluster, nodes, healthy, words, TOKEN)


def test_tpu_answering_garbage_is_a_bad_response(world: World, tpu: TpuServer, healthy: Cluster) -> None:
    cluster = actions.create_cluster(
        world.users["adam"],
        world.org,
        name="TPU",
        kind="tpu",
        endpoint=tpu.url,
        region="us-east5",
        options={"project": tpu.project, "zone": tpu.zone, "slices": {"v5p-8": 1}},
        credentials={"access_token": TPU_TOKEN},
    )
    nodes = synced_healthy(cluster)
    tpu.canned = (200, b"{not json at all")
    assert_failed_well(world, cluster, nodes, healthy, "answered something that is not a TPU API response", TPU_TOKEN)


def test_three_failures_in_a_row_make_the_cluster_unreachable_and_sync_now_retries_it(
    world: World, kube: KubeServer, healthy: Cluster, django_capture_on_commit_callbacks: Any
) -> None:
    adam = world.users["adam"]
    cluster = actions.create_cluster(
        adam,
        world.org,
        name="Kube",
        kind="kubernetes",
        endpoint=kube.url,
        region="eu",
        options={"namespace": "research"},
        credentials={"token": WRONG_KUBE_TOKEN},
    )
    for _ in range(3):
        assert not sync.sync_cluster(cluster.pk).ok
    cluster.refresh_from_db()
    assert (cluster.status, cluster.next_sync_at is not None) == (Cluster.Status.UNREACHABLE, True)
    # The admin fixes the token and asks for a sync now: it runs at once, not after the backoff.
    actions.update_cluster(adam, cluster, credentials={"token": TOKEN})
    with django_capture_on_commit_callbacks(execute=True):
        actions.request_sync(adam, cluster)
    cluster.refresh_from_db()
    assert (cluster.status, cluster.last_error) == (Cluster.Status.HEALTHY, "")
    assert Node.objects.filter(cluster=cluster).exists()
