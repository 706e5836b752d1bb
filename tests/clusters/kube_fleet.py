"""The cluster the fake Kubernetes API server (``kube_server.py``) starts with: five nodes, pods, a budget."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tests.clusters.kube_server import KubeServer


def timestamp(when: datetime) -> str:
    return when.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def seed_fleet(kube: KubeServer, now: datetime) -> None:
    """Five nodes and a few pods:

    - ``h100-a`` (8 x H100, zone eu-west-1a, block b1, rack r01): a training pod, a bare notebook pod, a
      DaemonSet pod, a mirror pod, a finished pod, and ``serving/web-0`` which a PDB protects;
    - ``h100-b`` (8 x H100, one not allocatable, rack r02): cordoned; one training pod;
    - ``a100-a`` (4 x A100-40GB, eu-west-1b, a GKE placement group for its block): NotReady, heartbeat an hour
      old, under memory pressure;
    - ``cpu-a`` (no accelerators, decimal memory ``128G``); ``tpu-a`` (4 TPU v5p chips, capacity only).
    """
    # A kubelet renews its Lease every ~10 s but rewrites an unchanged status only every 5 minutes.
    fresh, stale = now - timedelta(minutes=4), now - timedelta(hours=1)
    h100 = {
        "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3",
        "nvidia.com/gpu.count": "8",
        "nvidia.com/gpu.memory": "81559",
        "nvidia.com/gpu.family": "hopper",
    }
    a100 = {
        "nvidia.com/gpu.product": "NVIDIA-A100-SXM4-40GB",
        "nvidia.com/gpu.count": "4",
        "nvidia.com/gpu.memory": "40960",
        "nvidia.com/gpu.family": "ampere",
    }
    add_node(
        kube,
        "h100-a",
        {
            **h100,
            "topology.kubernetes.io/zone": "eu-west-1a",
            "topology.kubernetes.io/block": "b1",
            "topology.kubernetes.io/rack": "r01",
        },
        capacity={"cpu": "192", "memory": "2Ti", "nvidia.com/gpu": "8", "pods": "110"},
        allocatable={"cpu": "191500m", "memory": "2146435072Ki", "nvidia.com/gpu": "8", "pods": "110"},
        heartbeat=fresh,
    )
    add_node(
        kube,
        "h100-b",
        {
            **h100,
            "topology.kubernetes.io/zone": "eu-west-1a",
            "topology.kubernetes.io/block": "b1",
            "topology.kubernetes.io/rack": "r02",
        },
        capacity={"cpu": "192", "memory": "2Ti", "nvidia.com/gpu": "8"},
        allocatable={"cpu": "191500m", "memory": "2146435072Ki", "nvidia.com/gpu": "7"},
        heartbeat=fresh,
        unschedulable=True,
    )
    add_node(
        kube,
        "a100-a",
        {
            **a100,
            "topology.kubernetes.io/zone": "eu-west-1b",
            "cloud.google.com/gke-placement-group": "pg-7",
            "topology.kubernetes.io/rack": "r11",
        },
        capacity={"cpu": "64", "memory": "256Gi", "nvidia.com/gpu": "4"},
        allocatable={"cpu": "63", "memory": "250Gi", "nvidia.com/gpu": "4"},
        heartbeat=stale,
        ready=("False", "KubeletNotReady", "container runtime is down"),
        memory_pressure=True,
    )
    add_node(
        kube,
        "cpu-a",
        {"topology.kubernetes.io/zone": "eu-west-1b"},
        capacity={"cpu": "32", "memory": "128G"},
        allocatable={"cpu": "31750m", "memory": "125G"},
        heartbeat=fresh,
    )
    add_node(
        kube,
        "tpu-a",
        {"cloud.google.com/gke-tpu-accelerator": "tpu-v5p-slice", "topology.kubernetes.io/zone": "us-east5-a"},
        capacity={"cpu": "208", "memory": "448Gi", "google.com/tpu": "4"},
        allocatable={"cpu": "207", "memory": "440Gi", "google.com/tpu": "4"},
        heartbeat=fresh,
    )
    job_owner = [{"apiVersion": "batch/v1", "kind": "Job", "name": "train", "uid": "u-train", "controller": True}]
    ds_owner = [
        {
            "apiVersion": "apps/v1",
            "kind": "DaemonSet",
            "name": "nvidia-device-plugin",
            "uid": "u-ds",
            "controller": True,
        }
    ]
    rs_owner = [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web-5d9", "uid": "u-rs", "controller": True}]
    node_owner = [{"apiVersion": "v1", "kind": "Node", "name": "h100-a", "uid": "u-node", "controller": True}]
    train = {"cpu": "48", "memory": "256Gi", "nvidia.com/gpu": "4"}
    add_pod(kube, "research", "train-0", "h100-a", owners=job_owner, labels={"job": "train"}, requests=train)
    # Counted as its init container's 4 cores (the larger), not 2 + 4.
    add_pod(kube, "research", "notebook", "h100-a", requests={"cpu": "2", "memory": "8Gi"}, init={"cpu": "4"})
    ds = {"cpu": "100m", "memory": "64Mi"}
    add_pod(kube, "kube-system", "nvidia-device-plugin-h100a", "h100-a", owners=ds_owner, requests=ds)
    add_pod(
        kube,
        "kube-system",
        "kube-proxy-h100-a",
        "h100-a",
        owners=node_owner,
        annotations={"kubernetes.io/config.mirror": "c0ffee"},
        requests={"cpu": "100m"},
    )
    done = {"cpu": "8", "nvidia.com/gpu": "2"}  # finished: holds nothing
    add_pod(kube, "research", "finished", "h100-a", owners=job_owner, phase="Succeeded", requests=done)
    web = {"cpu": "500m", "memory": "1Gi"}
    add_pod(kube, "serving", "web-0", "h100-a", owners=rs_owner, labels={"app": "web"}, requests=web)
    add_pod(kube, "research", "train-1", "h100-b", owners=job_owner, labels={"job": "train"}, requests=train)
    kube.pdbs[("serving", "web-pdb")] = {
        "metadata": {"name": "web-pdb", "namespace": "serving"},
        "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "web"}}},
        "status": {"disruptionsAllowed": 0, "currentHealthy": 1, "desiredHealthy": 1, "expectedPods": 1},
    }


def add_node(
    kube: KubeServer,
    name: str,
    labels: dict[str, str],
    *,
    capacity: dict[str, str],
    allocatable: dict[str, str],
    heartbeat: datetime,
    ready: tuple[str, str, str] = ("True", "KubeletReady", "kubelet is posting ready status"),
    memory_pressure: bool = False,
    unschedulable: bool = False,
) -> None:
    def condition(kind: str, status: str, reason: str, message: str) -> dict[str, str]:
        return {
            "type": kind,
            "status": status,
            "reason": reason,
            "message": message,
            "lastHeartbeatTime": timestamp(heartbeat),
            "lastTransitionTime": timestamp(heartbeat - timedelta(days=1)),
        }

    pressure = ("True", "KubeletHasInsufficientMemory", "kubelet has insufficient memory available")
    node: dict[str, Any] = {
        "metadata": {
            "name": name,
            "uid": f"u-{name}",
            "labels": {"kubernetes.io/hostname": name, "kubernetes.io/os": "linux", **labels},
            "annotations": {"node.alpha.kubernetes.io/ttl": "0"},
            "creationTimestamp": "2026-01-05T09:00:00Z",
        },
        "spec": {"podCIDR": "10.244.0.0/24", **({"unschedulable": True} if unschedulable else {})},
        "status": {
            "capacity": capacity,
            "allocatable": allocatable,
            "addresses": [
                {"type": "InternalIP", "address": f"10.0.0.{10 + len(kube.nodes)}"},
                {"type": "Hostname", "address": name},
            ],
            "conditions": [
                condition(
                    "MemoryPressure", *(pressure if memory_pressure else ("False", "KubeletHasSufficientMemory", ""))
                ),
                condition("DiskPressure", "False", "KubeletHasNoDiskPressure", ""),
                condition("PIDPressure", "False", "KubeletHasSufficientPID", ""),
                condition("Ready", *ready),
            ],
            "nodeInfo": {
                "architecture": "amd64",
                "bootID": f"boot-{name}",
                "containerRuntimeVersion": "containerd://2.0.5",
                "kernelVersion": "6.8.0-60-generic",
                "kubeProxyVersion": "",
                "kubeletVersion": "v1.33.2",
                "machineID": f"machine-{name}",
                "operatingSystem": "linux",
                "osImage": "Ubuntu 24.04.2 LTS",
                "systemUUID": f"uuid-{name}",
            },
        },
    }
    kube.nodes[name] = node
    kube._bump(node)
    renewed = heartbeat if ready[0] != "True" else datetime.now(UTC) - timedelta(seconds=5)
    kube.leases[name] = {
        "metadata": {
            "name": name,
            "namespace": "kube-node-lease",
            "ownerReferences": [{"apiVersion": "v1", "kind": "Node", "name": name, "uid": f"u-{name}"}],
        },
        "spec": {
            "holderIdentity": name,
            "leaseDurationSeconds": 40,
            "renewTime": renewed.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ"),  # a MicroTime
        },
    }


def add_pod(
    kube: KubeServer,
    namespace: str,
    name: str,
    node: str,
    *,
    owners: list[dict[str, Any]] | None = None,
    labels: dict[str, str] | None = None,
    annotations: dict[str, str] | None = None,
    phase: str = "Running",
    requests: dict[str, str] | None = None,
    init: dict[str, str] | None = None,
) -> None:
    meta: dict[str, Any] = {"name": name, "namespace": namespace, "uid": f"u-{namespace}-{name}"}
    if owners:
        meta["ownerReferences"] = owners
    if labels:
        meta["labels"] = labels
    if annotations:
        meta["annotations"] = annotations
    kube.pods[(namespace, name)] = {
        "metadata": meta,
        "spec": {"nodeName": node, "containers": [container("main", requests)]},
        "status": {"phase": phase},
    }
    if init:
        kube.pods[(namespace, name)]["spec"]["initContainers"] = [container("setup", init)]


def container(name: str, requests: dict[str, str] | None) -> dict[str, Any]:
    """A container as stored: the API server defaults limits of extended resources into requests and back."""
    made: dict[str, Any] = {"name": name, "image": "busybox", "resources": {}}
    if requests:
        made["resources"]["requests"] = requests
        extended = {k: v for k, v in requests.items() if "/" in k}
        if extended:
            made["resources"]["limits"] = extended
    return made
