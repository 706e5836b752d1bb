"""How a node's capacity is paid for, and so how it may be taken back: on-demand, reserved, spot or on-prem.

A node's labels say it when they can (``quartermaster.io/capacity-type``, Karpenter's
``karpenter.sh/capacity-type``, EKS's ``eks.amazonaws.com/capacityType``, GKE's spot, preemptible and reservation
labels); else the cluster's option ``capacity_type``; else on-demand for a cloud cluster (Cloud TPU, or a node
carrying a cloud provider's labels) and on-prem for the rest. The price book prices by it
(``billing.actions.prices``), the meter records it, and a spot node that disappears is the cloud taking it back:
its work was preempted by the cluster, not lost (``scheduler.placement.recover``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from django.db import models

from clusters.backends import kinds


class CapacityType(models.TextChoices):
    ON_DEMAND = "on_demand", "On-demand"
    RESERVED = "reserved", "Reserved"
    SPOT = "spot", "Spot"
    ON_PREM = "on_prem", "On-prem"


_CAPACITY_LABELS = ("quartermaster.io/capacity-type", "karpenter.sh/capacity-type", "eks.amazonaws.com/capacityType")
_SPELLINGS = {
    "on_demand": CapacityType.ON_DEMAND,
    "on-demand": CapacityType.ON_DEMAND,
    "ondemand": CapacityType.ON_DEMAND,
    "spot": CapacityType.SPOT,
    "preemptible": CapacityType.SPOT,
    "reserved": CapacityType.RESERVED,
    "on_prem": CapacityType.ON_PREM,
    "on-prem": CapacityType.ON_PREM,
    "onprem": CapacityType.ON_PREM,
}
_CLOUD_LABEL_PREFIXES = ("cloud.google.com/", "eks.amazonaws.com/", "kubernetes.azure.com/")


def priced_as(labels: Mapping[str, Any], capacity: str) -> dict[str, Any]:
    """``labels`` with ``quartermaster.io/capacity-type`` set to ``capacity`` where they say no capacity type of
    their own (an elastic pool's node, priced as its pool's capacity type); as they are when ``capacity`` is ""."""
    out = dict(labels)
    if capacity and not any(key in out for key in _CAPACITY_LABELS):
        out[_CAPACITY_LABELS[0]] = capacity
    return out


def capacity_type(labels: Mapping[str, Any], cluster_kind: str, cluster_options: Mapping[str, Any]) -> str:
    """Which of the price book's capacity types a node with these labels, on such a cluster, is priced as."""
    for key in _CAPACITY_LABELS:
        spelled = _SPELLINGS.get(str(labels.get(key, "")).lower())
        if spelled is not None:
            return spelled
    if str(labels.get("cloud.google.com/gke-spot", "")).lower() == "true":
        return CapacityType.SPOT
    if str(labels.get("cloud.google.com/gke-preemptible", "")).lower() == "true":
        return CapacityType.SPOT
    if labels.get("cloud.google.com/reservation-name"):
        return CapacityType.RESERVED
    configured = _SPELLINGS.get(str(cluster_options.get("capacity_type", "")).lower())
    if configured is not None:
        return configured
    if kinds.get(cluster_kind).capacity_type == kinds.ON_DEMAND or any(
        k.startswith(_CLOUD_LABEL_PREFIXES) for k in labels
    ):
        return CapacityType.ON_DEMAND
    return CapacityType.ON_PREM
