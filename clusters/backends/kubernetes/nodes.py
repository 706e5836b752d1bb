"""Kubernetes Node objects as ``NodeInfo`` and health signals: quantities, GPU labels, topology, conditions,
and what the pods bound to each node request.

Pure functions over the client's ``V1Node``/``V1Pod`` models; no network. Anything a node must report and does
not (a name, CPU and memory capacity, a quantity we can parse) is a ``BadResponse`` naming the object and field.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from decimal import ROUND_CEILING, Decimal
from typing import Any

from kubernetes.utils import quantity as _quantity

from clusters.backends.base import RECLAIM, AcceleratorInfo, BackendError, BadResponse, HealthSignal, NodeInfo

#: Extended resources that count as accelerators, in order of preference.
ACCELERATOR_RESOURCES = ("nvidia.com/gpu", "google.com/tpu", "amd.com/gpu")

#: Labels naming the accelerator model, per resource: NVIDIA GPU feature discovery, GKE TPU node pools, AMD's.
MODEL_LABELS = {
    "nvidia.com/gpu": ("nvidia.com/gpu.product",),
    "google.com/tpu": ("cloud.google.com/gke-tpu-accelerator",),
    "amd.com/gpu": ("amd.com/gpu.product-name",),
}
#: The accelerator count when the device plugin has not (yet) reported capacity.
COUNT_LABELS = {"nvidia.com/gpu": "nvidia.com/gpu.count"}

#: Topology levels, widest first, and the labels tried for each (the first present wins). Only the zone label
#: is a Kubernetes well-known label; block and rack are whatever the cluster's admins or cloud put on nodes
#: (the ``topology.kubernetes.io/...`` names by convention, GKE's topology and placement-group labels), so the
#: ``zone_label``, ``block_label`` and ``rack_label`` options (a label or a list of them) replace these.
TOPOLOGY_LABELS: dict[str, tuple[str, ...]] = {
    "zone": ("topology.kubernetes.io/zone",),
    "block": (
        "topology.kubernetes.io/block",
        "cloud.google.com/gce-topology-block",
        "cloud.google.com/gke-placement-group",
    ),
    "rack": ("topology.kubernetes.io/rack", "cloud.google.com/gce-topology-subblock"),
}

#: Node conditions that are healthy when False, and the check each one reports as.
#: Taints that announce the node is being taken back, and by whom: GKE's graceful shutdown of a spot or
#: preemptible VM, the AWS node termination handler's spot interruption notice, Karpenter's disruption.
RECLAIM_TAINTS = {
    "cloud.google.com/impending-node-termination": "GKE is shutting the VM down",
    "aws-node-termination-handler/spot-itn": "AWS sent a spot interruption notice",
    "karpenter.sh/disrupted": "Karpenter is taking the node away",
    "karpenter.sh/disruption": "Karpenter is taking the node away",
}
PRESSURE_CONDITIONS = {
    "MemoryPressure": "memory_pressure",
    "DiskPressure": "disk_pressure",
    "PIDPressure": "pid_pressure",
    "NetworkUnavailable": "network_unavailable",
}

MIB = 1024 * 1024

#: The client's parser (``Ki``..``Ei``, ``n``..``E``, exponents), typed.
parse_quantity: Callable[[Any], Decimal] = _quantity.parse_quantity


def quantity(value: Any, *, where: str, field: str) -> Decimal:
    """A Kubernetes quantity (``500m``, ``64``, ``256Gi``, ``1000Ki``, ``1e3``) as a number."""
    try:
        number = parse_quantity(value)
    except (ValueError, ArithmeticError) as e:
        raise BadResponse(f"{where}: {field} is {value!r}, not a Kubernetes quantity") from e
    if not number.is_finite() or number < 0:
        raise BadResponse(f"{where}: {field} is {value!r}, not a Kubernetes quantity")
    return number


def millicores(value: Any, *, where: str, field: str) -> int:
    return int(quantity(value, where=where, field=field) * 1000)


def mebibytes(value: Any, *, where: str, field: str) -> int:
    return int(quantity(value, where=where, field=field) / MIB)


def whole(value: Any, *, where: str, field: str) -> int:
    return int(quantity(value, where=where, field=field))


@dataclass(frozen=True, slots=True)
class NodeLabels:
    """Which labels and resources this cluster uses, from the backend's options."""

    accelerator_resources: tuple[str, ...] = ACCELERATOR_RESOURCES
    topology: tuple[tuple[str, tuple[str, ...]], ...] = tuple(TOPOLOGY_LABELS.items())

    @classmethod
    def from_options(cls, options: Mapping[str, Any]) -> NodeLabels:
        topology = []
        for level, defaults in TOPOLOGY_LABELS.items():
            given = options.get(f"{level}_label")
            topology.append((level, defaults if given is None else _names(f"{level}_label", given)))
        resources = options.get("accelerator_resources")
        return cls(
            accelerator_resources=ACCELERATOR_RESOURCES
            if resources is None
            else _names("accelerator_resources", resources),
            topology=tuple(topology),
        )


def _names(option: str, value: Any) -> tuple[str, ...]:
    """A label or resource name option: one name, or a list of them."""
    if isinstance(value, str) and value:
        return (value,)
    if isinstance(value, list | tuple) and value and all(isinstance(v, str) and v for v in value):
        return tuple(value)
    raise BackendError(f"option {option} is {value!r}; use a name or a list of names")


def _name(node: Any) -> str:
    name = node.metadata.name if node.metadata is not None else None
    if not name:
        raise BadResponse("the API server listed a node without metadata.name")
    return str(name)


def _conditions(node: Any) -> dict[str, Any]:
    status = node.status
    return {c.type: c for c in (status.conditions or [])} if status is not None else {}


def _addresses(node: Any) -> tuple[str, ...]:
    """The node's ``status.addresses`` (InternalIP, ExternalIP, Hostname, InternalDNS ...), in the API's order."""
    status = node.status
    found = [a.address for a in (status.addresses or [])] if status is not None else []
    return tuple(dict.fromkeys(a for a in found if isinstance(a, str) and a))


@dataclass(frozen=True, slots=True)
class Usage:
    """What the pods bound to a node request: accelerators, millicores, MiB (rounded up)."""

    accelerators: int = 0
    cpu: int = 0
    memory: int = 0


def pod_usage(pods: Sequence[Any], accelerator_resources: Sequence[str]) -> dict[str, Usage]:
    """Per node, the sum of its pods' effective requests, as the scheduler counts them: the larger of the
    app containers' sum and the largest init container, plus the pod's overhead. Pods not yet bound, and
    finished ones, hold nothing. (Native sidecars, init containers that keep running, are counted with the
    app containers.)"""
    totals: dict[str, list[Decimal]] = {}
    for pod in pods:
        spec, status = pod.spec, pod.status
        if spec is None or not spec.node_name or (status is not None and status.phase in ("Succeeded", "Failed")):
            continue
        meta = pod.metadata
        where = f"pod {meta.namespace}/{meta.name}" if meta is not None else "a pod"
        node_total = totals.setdefault(spec.node_name, [Decimal(0)] * 3)
        for i, amount in enumerate(_pod_requests(spec, accelerator_resources, where)):
            node_total[i] += amount
    return {
        node: Usage(int(accelerators), int((cpu * 1000).to_integral_value(ROUND_CEILING)), -int(-memory // MIB))
        for node, (accelerators, cpu, memory) in totals.items()
    }


Amounts = tuple[Decimal, Decimal, Decimal]  # accelerators, cores, bytes
ZERO: Amounts = (Decimal(0), Decimal(0), Decimal(0))


def _pod_requests(spec: Any, accelerator_resources: Sequence[str], where: str) -> Amounts:
    def amounts(asked: Mapping[str, Any] | None, field: str) -> Amounts:
        asked = asked or {}

        def read(resource: str) -> Decimal:
            return (
                quantity(asked[resource], where=where, field=f"{field}[{resource}]")
                if resource in asked
                else Decimal(0)
            )

        return (sum((read(r) for r in accelerator_resources), Decimal(0)), read("cpu"), read("memory"))

    def plus(a: Amounts, b: Amounts) -> Amounts:
        return (a[0] + b[0], a[1] + b[1], a[2] + b[2])

    def larger(a: Amounts, b: Amounts) -> Amounts:
        return (max(a[0], b[0]), max(a[1], b[1]), max(a[2], b[2]))

    def requests(container: Any) -> Amounts:
        return amounts(container.resources.requests if container.resources else None, "requests")

    running, largest_init = ZERO, ZERO
    for container in spec.containers or []:
        running = plus(running, requests(container))
    for container in spec.init_containers or []:
        if container.restart_policy == "Always":  # a native sidecar runs beside the app containers
            running = plus(running, requests(container))
        else:
            largest_init = larger(largest_init, requests(container))
    return plus(larger(running, largest_init), amounts(spec.overhead, "overhead"))


def node_info(
    node: Any, labels_used: NodeLabels, used: Usage | None = None, lease: datetime | None = None
) -> tuple[NodeInfo, AcceleratorInfo | None]:
    """One ``V1Node`` as ``NodeInfo``, with the accelerator model it offers (None without accelerators).
    ``lease`` is when the node's kubelet last renewed its Lease, if we could read it (see ``heartbeat``)."""
    used = used or Usage()
    name = _name(node)
    labels: dict[str, str] = dict(node.metadata.labels or {})
    status = node.status
    if status is None or not status.capacity:
        raise BadResponse(f"node {name} reports no status.capacity")
    capacity: Mapping[str, Any] = status.capacity
    allocatable: Mapping[str, Any] = status.allocatable or {}
    for required in ("cpu", "memory"):
        if required not in capacity:
            raise BadResponse(f"node {name} reports no {required} in status.capacity")

    resource = next((r for r in labels_used.accelerator_resources if r in capacity), None)
    if resource is None:  # the device plugin may not have registered yet: fall back to GPU feature discovery
        resource = next((r for r, label in COUNT_LABELS.items() if label in labels), None)
    accelerators = accelerators_allocatable = 0
    model = ""
    if resource is not None:
        if resource in capacity:
            accelerators = whole(capacity[resource], where=f"node {name}", field=f"capacity[{resource}]")
        else:
            accelerators = whole(
                labels[COUNT_LABELS[resource]], where=f"node {name}", field=f"label {COUNT_LABELS[resource]}"
            )
        if resource in allocatable:
            accelerators_allocatable = whole(
                allocatable[resource], where=f"node {name}", field=f"allocatable[{resource}]"
            )
        model = next((labels[label] for label in MODEL_LABELS.get(resource, ()) if labels.get(label)), "")
        if accelerators and not model:
            model = resource

    ready = _conditions(node).get("Ready")
    info = NodeInfo(
        name=name,
        accelerator=model if accelerators else "",
        accelerators=accelerators,
        accelerators_allocatable=accelerators_allocatable,
        cpu=millicores(capacity["cpu"], where=f"node {name}", field="capacity[cpu]"),
        cpu_allocatable=millicores(
            allocatable.get("cpu", capacity["cpu"]), where=f"node {name}", field="allocatable[cpu]"
        ),
        memory=mebibytes(capacity["memory"], where=f"node {name}", field="capacity[memory]"),
        memory_allocatable=mebibytes(
            allocatable.get("memory", capacity["memory"]), where=f"node {name}", field="allocatable[memory]"
        ),
        accelerators_used=used.accelerators,
        cpu_used=used.cpu,
        memory_used=used.memory,
        topology=_topology(labels, labels_used.topology),
        ready=ready is not None and ready.status == "True",
        schedulable=not (node.spec is not None and node.spec.unschedulable),
        labels=labels,
        addresses=_addresses(node),
        heartbeat=heartbeat(ready, lease),
    )
    return info, (_accelerator(model, labels) if info.accelerator else None)


def _topology(labels: Mapping[str, str], levels: Sequence[tuple[str, tuple[str, ...]]]) -> dict[str, str]:
    topology = {}
    for level, candidates in levels:
        value = next((labels[label] for label in candidates if labels.get(label)), None)
        if value is not None:
            topology[level] = value
    return topology


def _accelerator(model: str, labels: Mapping[str, str]) -> AcceleratorInfo:
    """What GPU feature discovery says about the model: memory (MiB in ``nvidia.com/gpu.memory``), family."""
    memory_mib = labels.get("nvidia.com/gpu.memory", "")
    return AcceleratorInfo(
        model=model,
        memory_gib=int(memory_mib) // 1024 if memory_mib.isdigit() else 0,
        generation=labels.get("nvidia.com/gpu.family", ""),
    )


#: How often a kubelet rewrites its node status when nothing changed (``nodeStatusReportFrequency``).
STATUS_REPORT_PERIOD = timedelta(minutes=5)


def heartbeat(ready: Any, lease: datetime | None) -> datetime | None:
    """When the node last reported: its Lease in ``kube-node-lease`` (renewed every ~10 s) when we have it, the
    Ready condition's ``lastHeartbeatTime`` otherwise (refreshed only every ``STATUS_REPORT_PERIOD`` while
    nothing changes), whichever is later."""
    condition = ready.last_heartbeat_time if ready is not None else None
    return max((t for t in (lease, condition) if t is not None), default=None)


def health_signals(
    node: Any, now: datetime, stale_after: timedelta, lease: datetime | None = None
) -> list[HealthSignal]:
    """What the node's conditions say: Ready, how old its heartbeat is, and the pressure conditions. Without a
    Lease a healthy node's heartbeat may be ``STATUS_REPORT_PERIOD`` old, so that much more is allowed."""
    name = _name(node)
    conditions = _conditions(node)
    signals = []
    ready = conditions.get("Ready")
    if ready is None:
        signals.append(HealthSignal(name, "ready", False, "the node reports no Ready condition", now))
    else:
        ok = ready.status == "True"
        why = ": ".join(part for part in (ready.reason, ready.message) if part)
        message = "" if ok else f"Ready is {ready.status}" + (f" ({why})" if why else "")
        signals.append(HealthSignal(name, "ready", ok, message, ready.last_heartbeat_time or now))
        beat = heartbeat(ready, lease)
        if lease is None:
            stale_after += STATUS_REPORT_PERIOD
        if beat is None:
            signals.append(HealthSignal(name, "heartbeat", False, "the node has never reported a heartbeat", now))
        else:
            age = now - beat
            stale = age > stale_after
            message = f"last heartbeat {int(age.total_seconds())} s ago" if stale else ""
            signals.append(HealthSignal(name, "heartbeat", not stale, message, beat))
    for condition_type, check in PRESSURE_CONDITIONS.items():
        condition = conditions.get(condition_type)
        if condition is None:
            continue
        ok = condition.status == "False"
        message = (
            ""
            if ok
            else f"{condition_type} is {condition.status}" + (f" ({condition.message})" if condition.message else "")
        )
        signals.append(HealthSignal(name, check, ok, message, condition.last_heartbeat_time or now))
    taints = {t.key for t in (getattr(node.spec, "taints", None) or []) if t is not None}
    for key in sorted(taints & set(RECLAIM_TAINTS)):
        message = f"reclaim notice: {RECLAIM_TAINTS[key]} (taint {key})"
        signals.append(HealthSignal(name, RECLAIM, False, message, now))
    return signals
