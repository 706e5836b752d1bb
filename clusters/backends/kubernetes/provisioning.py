"""Elastic pools on Kubernetes (docs/backends.md, Kubernetes, "Elastic pools"): what the backend sends the cluster's
autoscaler. Pure functions building and reading objects; no network.

A pool's nodes are those its node group makes (a GKE node pool, a Karpenter ``NodePool``, an EKS node group)
labelled ``qm/elastic-pool: <pool>`` in its template. ``provision`` asks the autoscaler for them with a
``ProvisioningRequest`` (``autoscaling.x-k8s.io/v1``; cluster-autoscaler, and GKE's dynamic workload scheduler with
the class ``queued-provisioning.gke.io``): ``count`` placeholder pods of a ``PodTemplate``, each asking a whole
node's accelerators on the pool's label. No pod of a job is ever pinned to a node that does not exist: the
autoscaler adds the nodes, they join the inventory, and Quartermaster places work on them once they are there.
A request names no node, so the placement loop takes the pool's new nodes for the ask (``scheduler.placement.
elastic._claim``).

``release`` cordons the nodes and marks them released (``RELEASED``); the inventory leaves such a node out, and the
autoscaler takes it away once it is empty (cluster-autoscaler's scale-down of unneeded nodes, Karpenter's
consolidation). The pool's finished requests (provisioned, or failed) go with their templates.
"""

from __future__ import annotations

import uuid
from typing import Any

from clusters.backends.base import ELASTIC_POOL

GROUP = "autoscaling.x-k8s.io"
VERSION = "v1"
PLURAL = "provisioningrequests"
#: cluster-autoscaler's class that scales up all of a request's nodes or none.
DEFAULT_CLASS = "best-effort-atomic-scale-up.autoscaling.x-k8s.io"
#: What the placeholder pods run (they never run: the request books capacity for them).
PAUSE_IMAGE = "registry.k8s.io/pause:3.10"
#: Marks a node Quartermaster gave back: out of the inventory until the autoscaler removes it.
RELEASED = "quartermaster.io/released"


def request_name(pool: str) -> str:
    """A new request's name (and its template's): ``qm-<pool>-<8 hex>``, a DNS label."""
    return f"qm-{pool.lower().replace('_', '-')[:50]}-{uuid.uuid4().hex[:8]}"


def pod_template(name: str, pool: str, accelerators: int, resource: str) -> dict[str, Any]:
    """The placeholder pod of one node of ``pool``: the node's accelerators, on the pool's nodes only."""
    requests = {resource: str(accelerators)} if accelerators else {}
    return {
        "apiVersion": "v1",
        "kind": "PodTemplate",
        "metadata": {"name": name, "labels": {ELASTIC_POOL: pool}},
        "template": {
            "metadata": {"labels": {ELASTIC_POOL: pool}},
            "spec": {
                "nodeSelector": {ELASTIC_POOL: pool},
                # GPU node groups are usually tainted so that only pods asking for GPUs land there
                "tolerations": [{"key": resource, "operator": "Exists", "effect": "NoSchedule"}],
                "containers": [
                    {"name": "capacity", "image": PAUSE_IMAGE, "resources": {"requests": requests, "limits": requests}}
                ],
            },
        },
    }


def provisioning_request(name: str, pool: str, count: int, klass: str) -> dict[str, Any]:
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "ProvisioningRequest",
        "metadata": {"name": name, "labels": {ELASTIC_POOL: pool}},
        "spec": {"provisioningClassName": klass, "podSets": [{"count": count, "podTemplateRef": {"name": name}}]},
    }


def finished(request: dict[str, Any]) -> bool:
    """Whether the autoscaler is done with a request: its nodes provisioned, or it failed."""
    conditions = (request.get("status") or {}).get("conditions") or []
    return any(c.get("type") in ("Provisioned", "Failed") and c.get("status") == "True" for c in conditions)


def released(node: Any) -> bool:
    """Whether a node (the client's ``V1Node``) is one Quartermaster gave back."""
    return bool(node.metadata and RELEASED in (node.metadata.annotations or {}))
