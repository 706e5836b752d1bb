"""The node probe endpoint and script: validated readings, the server's thresholds, the cluster's token,
one report per node per interval, and the probe itself posting from a machine without a GPU."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from django.core.cache import cache
from django.utils import timezone
from rest_framework.test import APIClient

from clusters import actions
from clusters.actions import health
from clusters.models import Cluster, HealthCheckResult, Node
from tests.clusters.factories import simulated_cluster
from tests.conftest import World

ROOT = Path(__file__).resolve().parents[2]


def make_cluster(world: World, slug: str, tmp_path: Path, org: Any = None) -> Cluster:
    cluster = simulated_cluster(org or world.org, slug, tmp_path, nodes=4)
    for pk in Node.objects.filter(cluster=cluster).values_list("pk", flat=True):
        cache.delete(f"qm:probe:{pk}")
    return cluster


@pytest.fixture
def cluster(world: World, tmp_path: Path) -> Cluster:
    return make_cluster(world, "h100", tmp_path)


@pytest.fixture
def client(world: World, cluster: Cluster) -> APIClient:
    _, raw = actions.issue_probe_token(world.users["adam"], cluster, "rack 1 image")
    api = APIClient()
    api.credentials(HTTP_AUTHORIZATION=f"Bearer {raw}")
    return api


def gpus(**changes: Any) -> list[dict[str, Any]]:
    readings = [{"index": i, "temperature_c": 45 + i} for i in range(8)]
    for i, reading in enumerate(readings):
        reading.update({k: v[i] for k, v in changes.items() if i in v} if changes else {})
    return readings


def body(node: str = "h100-00001", **extra: Any) -> dict[str, Any]:
    return {"node": node, "observed_at": timezone.now().isoformat(), "gpus": gpus(), **extra}


def test_a_healthy_report_is_accepted_and_remembered(client: APIClient) -> None:
    answer = client.post("/api/v1/probe/health/", body(), format="json")
    assert answer.status_code == 202, answer.content
    assert answer.json() == {"node": "h100-00001", "healthy": True, "failing": []}
    assert Node.objects.get(name="h100-00001").probe_reported_at is not None
    assert not HealthCheckResult.objects.exists()


def test_failing_readings_are_judged_by_the_server_and_drain_the_node(
    client: APIClient, cluster: Cluster, django_capture_on_commit_callbacks: Any
) -> None:
    readings = gpus()[:7]
    readings[0].update(temperature_c=97)
    readings[2].update(ecc_uncorrected=3, xid_errors=[13, 79])
    readings[5].update(nvlink_links_down=2)
    answer = client.post("/api/v1/probe/health/", body(gpus=readings), format="json")
    assert answer.status_code == 202
    failing = {f["check"]: f["message"] for f in answer.json()["failing"]}
    assert failing == {
        "gpu_count": "7 of 8 GPUs visible",
        "gpu_temperature": "GPU 0 at 97 °C",
        "gpu_ecc": "GPU 2: 3 uncorrected ECC errors",
        "gpu_xid": "GPU 2: XID 79",  # 13 is an application error, not the GPU's
        "nvlink": "GPU 5: 2 NVLink links down",
    }
    with django_capture_on_commit_callbacks(execute=True):
        health.check_cluster(cluster.pk)
    node = Node.objects.get(name="h100-00001")
    assert node.state == Node.State.DRAINING  # drained once the work on it has checkpointed and moved
    assert "gpu_xid: GPU 2: XID 79" in node.drains.get().reason


def test_a_probe_that_cannot_read_nvml_fails_the_node(client: APIClient) -> None:
    answer = client.post(
        "/api/v1/probe/health/", body(gpus=[], error="NVML unavailable: driver not loaded"), format="json"
    )
    assert {f["check"] for f in answer.json()["failing"]} == {"nvml", "gpu_count"}


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"node": ""}, "node"),
        ({"observed_at": "yesterday"}, "observed_at"),
        ({"observed_at": (timezone.now() + timedelta(hours=1)).isoformat()}, "observed_at"),
        ({"observed_at": (timezone.now() - timedelta(hours=3)).isoformat()}, "observed_at"),
        ({"gpus": [{"index": 0, "temperature_c": "hot"}]}, "gpus"),
        ({"gpus": [{"index": 0, "temperature_c": 40}, {"index": 0, "temperature_c": 41}]}, "gpus"),
        ({"gpus": [{"index": 0, "temperature_c": 40, "ecc_uncorrected": -1}]}, "gpus"),
    ],
)
def test_bad_readings_get_400_naming_the_field(client: APIClient, change: dict[str, Any], field: str) -> None:
    answer = client.post("/api/v1/probe/health/", {**body(), **change}, format="json")
    assert answer.status_code == 400
    assert field in answer.json()["error"]["fields"]
    assert Node.objects.get(name="h100-00001").probe_reported_at is None


def test_one_report_per_node_per_interval(client: APIClient) -> None:
    assert client.post("/api/v1/probe/health/", body(), format="json").status_code == 202
    again = client.post("/api/v1/probe/health/", body(), format="json")
    assert again.status_code == 429
    assert int(again["Retry-After"]) > 0
    assert client.post("/api/v1/probe/health/", body("h100-00002"), format="json").status_code == 202


def test_the_token_reaches_only_its_own_clusters_nodes(world: World, client: APIClient, tmp_path: Path) -> None:
    rival = make_cluster(world, "rival", tmp_path, org=world.other_org)
    Node.objects.filter(cluster=rival, name="h100-00001").update(name="rival-00001")
    answer = client.post("/api/v1/probe/health/", body("rival-00001"), format="json")
    assert answer.status_code == 404
    assert Node.objects.get(name="rival-00001").probe_reported_at is None


@pytest.mark.parametrize("header", ["", "Bearer qmp_wrong", "Bearer", "Token abc"])
def test_without_a_valid_probe_token_nothing_is_accepted(cluster: Cluster, header: str) -> None:
    api = APIClient()
    if header:
        api.credentials(HTTP_AUTHORIZATION=header)
    answer = api.post("/api/v1/probe/health/", body(), format="json")
    assert answer.status_code in (401, 403)
    assert Node.objects.get(name="h100-00001").probe_reported_at is None


def test_only_an_admin_issues_probe_tokens(world: World, cluster: Cluster) -> None:
    from django.core.exceptions import PermissionDenied

    with pytest.raises(PermissionDenied):
        actions.issue_probe_token(world.users["lena"], cluster, "mine")


@pytest.mark.django_db(transaction=True)
def test_the_probe_script_reports_from_a_machine_without_gpus(world: World, tmp_path: Path, live_server: Any) -> None:
    cluster = make_cluster(world, "probe", tmp_path)
    _, raw = actions.issue_probe_token(world.users["adam"], cluster, "script test")
    run = subprocess.run(
        [
            sys.executable,
            str(ROOT / "deploy" / "node_probe.py"),
            "--url",
            live_server.url,
            "--node",
            "h100-00003",
            "--once",
        ],
        env={**os.environ, "QM_PROBE_TOKEN": raw},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert run.returncode == 0, run.stdout + run.stderr
    answer = json.loads(run.stdout.strip().splitlines()[-1])
    assert answer["status"] == 202
    assert answer["healthy"] is False  # no NVML here: the probe says so, and the node fails its checks
    assert {f["check"] for f in answer["failing"]} == {"nvml", "gpu_count"}
    assert Node.objects.get(cluster=cluster, name="h100-00003").probe_reported_at is not None


def test_a_report_a_real_h200_posted_is_accepted_and_judged_healthy(world: World, tmp_path: Path) -> None:
    """The body the probe posted from a real H200 (``tests/clusters/data/probe-h200.json``), to a one-GPU node."""
    recorded = json.loads((ROOT / "tests/clusters/data/probe-h200.json").read_text())["report"]
    cluster = make_cluster(world, "h200", tmp_path)
    node = Node.objects.filter(cluster=cluster).first()
    assert node is not None
    Node.objects.filter(pk=node.pk).update(accelerators=1)
    _, raw = actions.issue_probe_token(world.users["adam"], cluster, "h200 host")
    api = APIClient()
    api.credentials(HTTP_AUTHORIZATION=f"Bearer {raw}")
    now = timezone.now().isoformat()
    answer = api.post("/api/v1/probe/health/", {**recorded, "node": node.name, "observed_at": now}, format="json")
    assert answer.status_code == 202, answer.content
    assert answer.json()["failing"] == []
    node.refresh_from_db()
    assert node.probe_reported_at is not None
