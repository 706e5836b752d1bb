"""A ``JobSpec`` as a ``batch/v1`` Indexed Job, and a Job's status as a ``JobState``. Pure; no network.

One Job per Quartermaster job: ``completions = parallelism = workers``, so each worker is one index
(``JOB_COMPLETION_INDEX`` in its environment) and the Job succeeds when every index has.

Pinning workers to the placed nodes. A Job has one pod template, so index *i* cannot be sent to node *i*.
Instead:
- all workers on one node: a ``nodeSelector`` on ``kubernetes.io/hostname``;
- several nodes: required node affinity ``kubernetes.io/hostname In [nodes]``, and when every node
  carries the same number of workers (the usual gang: one or eight per node), a topology spread constraint
  over hostname with ``maxSkew: 1`` and ``DoNotSchedule`` across this Job's pods. With *k* workers on each
  of *n* nodes the only placement within skew 1 is exactly *k* per node, which is the placement made.
  Uneven placements keep the node set but not the per-node counts; the scheduler fills the named nodes.
Which index lands on which node is the kube-scheduler's choice either way; workers that need a rank read
``JOB_COMPLETION_INDEX``.
"""

from __future__ import annotations

import hashlib
import re
from collections import Counter
from typing import Any

from clusters.backends.base import BackendError, JobSpec, JobState

#: Labels and annotations Quartermaster puts on what it creates.
JOB_LABEL = "quartermaster.io/job"  # the Job's name, on the Job and its pods (label-safe)
JOB_ID_ANNOTATION = "quartermaster.io/job-id"  # Quartermaster's job id, exactly
JOB_NAME_ANNOTATION = "quartermaster.io/job-name"
KUEUE_QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
HOSTNAME_LABEL = "kubernetes.io/hostname"

#: Pod hostnames are ``<job>-<index>`` and must stay a DNS label (63): leave room for the index.
MAX_JOB_NAME = 52


def job_name(job_id: str) -> str:
    """A DNS-safe Job name for Quartermaster's job id, the same every time (submit's idempotency rests on it).
    An id that had to be changed or cut keeps a hash of itself, so two ids never share a name."""
    base = re.sub(r"[^a-z0-9-]+", "-", job_id.lower()).strip("-")
    name = f"qm-{base}"
    if base != job_id or len(name) > MAX_JOB_NAME:
        digest = hashlib.sha256(job_id.encode()).hexdigest()[:10]
        stem = base[: MAX_JOB_NAME - 14].rstrip("-")
        name = f"qm-{stem}-{digest}" if stem else f"qm-{digest}"
    return name


def job_manifest(
    spec: JobSpec,
    *,
    namespace: str,
    kueue: bool,
    accelerator_resource: str = "nvidia.com/gpu",
    backoff_limit: int = 0,
) -> dict[str, Any]:
    """The Job to create for ``spec``, as the API server's JSON."""
    if spec.workers < 1:
        raise BackendError(f"job {spec.id}: a job needs at least one worker, not {spec.workers}")
    if not spec.image:
        raise BackendError(f"job {spec.id}: Kubernetes runs containers; the job names no image")
    if spec.nodes and len(spec.nodes) != spec.workers:
        raise BackendError(f"job {spec.id}: {spec.workers} workers but {len(spec.nodes)} nodes placed")
    if kueue and not spec.queue:
        raise BackendError(f"job {spec.id}: the cluster runs Kueue, and the job names no LocalQueue")
    name = job_name(spec.id)

    requests: dict[str, str] = {"cpu": f"{spec.cpu_per_worker}m", "memory": f"{spec.memory_per_worker}Mi"}
    limits: dict[str, str] = {}
    if spec.accelerators_per_worker:
        # Extended resources cannot be overcommitted: the request must equal the limit.
        requests[accelerator_resource] = limits[accelerator_resource] = str(spec.accelerators_per_worker)
    env = {"QM_JOB_ID": spec.id, "QM_WORKERS": str(spec.workers), **spec.env}
    container: dict[str, Any] = {
        "name": "worker",
        "image": spec.image,
        "env": [{"name": key, "value": value} for key, value in env.items()],
        "resources": {"requests": requests, **({"limits": limits} if limits else {})},
    }
    if spec.command:
        container["command"] = list(spec.command)
    pod_spec: dict[str, Any] = {"restartPolicy": "Never", "containers": [container], **_pinning(spec, name)}

    labels = {JOB_LABEL: name}
    if kueue:
        labels[KUEUE_QUEUE_LABEL] = spec.queue
    job_spec: dict[str, Any] = {
        "completionMode": "Indexed",
        "completions": spec.workers,
        "parallelism": spec.workers,
        # A gang: one worker failing fails the job; the scheduler decides whether to run it again.
        "backoffLimit": backoff_limit,
        "template": {"metadata": {"labels": {JOB_LABEL: name}}, "spec": pod_spec},
    }
    if spec.time_limit > 0:
        job_spec["activeDeadlineSeconds"] = spec.time_limit
    if kueue:
        job_spec["suspend"] = True  # Kueue unsuspends it when it admits the workload
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": labels,
            "annotations": {JOB_ID_ANNOTATION: spec.id, JOB_NAME_ANNOTATION: spec.name},
        },
        "spec": job_spec,
    }


def _pinning(spec: JobSpec, name: str) -> dict[str, Any]:
    """Pod spec fields that keep the workers on their placed nodes (see the module docstring)."""
    per_node = Counter(spec.nodes)
    if not per_node:
        return {}
    if len(per_node) == 1:
        return {"nodeSelector": {HOSTNAME_LABEL: spec.nodes[0]}}
    nodes = sorted(per_node)
    pinning: dict[str, Any] = {
        "affinity": {
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [
                        {"matchExpressions": [{"key": HOSTNAME_LABEL, "operator": "In", "values": nodes}]}
                    ]
                }
            }
        }
    }
    if len(set(per_node.values())) == 1:
        pinning["topologySpreadConstraints"] = [
            {
                "maxSkew": 1,
                "topologyKey": HOSTNAME_LABEL,
                "whenUnsatisfiable": "DoNotSchedule",
                "labelSelector": {"matchLabels": {JOB_LABEL: name}},
            }
        ]
    return pinning


def job_state(job: Any) -> tuple[JobState, str]:
    """A ``V1Job``'s state and a message saying why, from its conditions, suspension and pod counts."""
    if job.metadata is not None and job.metadata.deletion_timestamp is not None:
        return JobState.CANCELLED, "the Job is being deleted"
    status = job.status
    conditions = {c.type: c for c in (status.conditions or []) if c.status == "True"} if status else {}
    for condition_type, state in (
        ("Failed", JobState.FAILED),
        ("FailureTarget", JobState.FAILED),
        ("Complete", JobState.SUCCEEDED),
        ("SuccessCriteriaMet", JobState.SUCCEEDED),
    ):
        if condition_type in conditions:
            condition = conditions[condition_type]
            return state, ": ".join(part for part in (condition.reason, condition.message) if part)
    if job.spec is not None and job.spec.suspend:
        if job.metadata is not None and KUEUE_QUEUE_LABEL in (job.metadata.labels or {}):
            queue = job.metadata.labels[KUEUE_QUEUE_LABEL]
            return JobState.PENDING, f"suspended until Kueue admits it from LocalQueue {queue}"
        return JobState.PENDING, "suspended"
    active = (status.active or 0) if status else 0
    ready = status.ready if status else None
    if active and (ready is None or ready > 0):
        return JobState.RUNNING, f"{active} pods active"
    if active:
        return JobState.PENDING, f"{active} pods created, none ready yet"
    return JobState.PENDING, "no pods yet"
