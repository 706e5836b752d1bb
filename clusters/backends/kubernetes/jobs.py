"""A ``JobSpec`` as a ``batch/v1`` Indexed Job, and a Job with its pods as a ``JobStatus`` (state, the
``Failure`` code, workers running; docs/backends.md). Pure; no network.

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

In Kueue mode nothing is pinned: Quartermaster chose the cluster and the LocalQueue (``kueue.local_queue``),
and Kueue's flavors and topology-aware scheduling choose the nodes (docs/kueue.md). The Job asks only for
what it needs (CPU, memory, accelerators) and waits suspended until Kueue admits it.
"""

from __future__ import annotations

import hashlib
import re
from collections import Counter
from typing import Any

from clusters.backends.base import Failure, InvalidJob, JobSpec, JobState, JobStatus

#: Labels and annotations Quartermaster puts on what it creates.
JOB_LABEL = "quartermaster.io/job"  # the Job's name, on the Job and its pods (label-safe)
JOB_ID_ANNOTATION = "quartermaster.io/job-id"  # Quartermaster's job id, exactly
JOB_NAME_ANNOTATION = "quartermaster.io/job-name"
KUEUE_QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
HOSTNAME_LABEL = "kubernetes.io/hostname"

#: Pod hostnames are ``<job>-<index>`` and must stay a DNS label (63): leave room for the index.
MAX_JOB_NAME = 52


def job_name(job_id: str, limit: int = MAX_JOB_NAME) -> str:
    """A DNS-safe Job name for Quartermaster's job id, the same every time (submit's idempotency rests on it),
    at most ``limit`` characters. An id that had to be changed or cut keeps a hash of itself, so two ids never
    share a name."""
    base = re.sub(r"[^a-z0-9-]+", "-", job_id.lower()).strip("-")
    name = f"qm-{base}"
    if base != job_id or len(name) > limit:
        digest = hashlib.sha256(job_id.encode()).hexdigest()[:10]
        stem = base[: limit - 14].rstrip("-")
        name = f"qm-{stem}-{digest}" if stem else f"qm-{digest}"
    return name


def job_manifest(
    spec: JobSpec,
    *,
    namespace: str,
    local_queue: str = "",
    accelerator_resource: str = "nvidia.com/gpu",
    backoff_limit: int = 0,
) -> dict[str, Any]:
    """The Job to create for ``spec``, as the API server's JSON. ``local_queue`` is the Kueue LocalQueue on a
    cluster in Kueue mode (``kueue.local_queue``), "" outside Kueue; a spec that cannot become a Job is
    ``InvalidJob``."""
    if spec.workers < 1:
        raise InvalidJob(f"job {spec.id}: a job needs at least one worker, not {spec.workers}")
    if not spec.image:
        raise InvalidJob(f"job {spec.id}: Kubernetes runs containers; the job names no image")
    if spec.nodes and len(spec.nodes) != spec.workers:
        raise InvalidJob(f"job {spec.id}: {spec.workers} workers but {len(spec.nodes)} nodes placed")
    kueue = bool(local_queue)
    name = job_name(spec.id)

    env = {"QM_JOB_ID": spec.id, "QM_WORKERS": str(spec.workers), **spec.env}
    container: dict[str, Any] = {
        "name": "worker",
        "image": spec.image,
        "env": [{"name": key, "value": value} for key, value in env.items()],
        "resources": resources(
            spec.accelerators_per_worker, spec.cpu_per_worker, spec.memory_per_worker, accelerator_resource
        ),
    }
    if spec.command:
        container["command"] = list(spec.command)
    pinning = {} if kueue else pinned(spec.nodes, {JOB_LABEL: name})
    pod_spec: dict[str, Any] = {"restartPolicy": "Never", "containers": [container], **pinning}

    labels = {JOB_LABEL: name}
    if kueue:
        labels[KUEUE_QUEUE_LABEL] = local_queue
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


def resources(accelerators: int, millicores: int, mebibytes: int, accelerator_resource: str) -> dict[str, Any]:
    """A container's ``resources``: what it requests (nothing for a zero), accelerators also as its limit."""
    requests: dict[str, str] = {}
    if millicores:
        requests["cpu"] = f"{millicores}m"
    if mebibytes:
        requests["memory"] = f"{mebibytes}Mi"
    if not accelerators:
        return {"requests": requests}
    # Extended resources cannot be overcommitted: the request must equal the limit.
    requests[accelerator_resource] = str(accelerators)
    return {"requests": requests, "limits": {accelerator_resource: str(accelerators)}}


def pinned(nodes: tuple[str, ...], pods: dict[str, str]) -> dict[str, Any]:
    """Pod spec fields that keep the pods (those labelled ``pods``) on ``nodes``, one entry per pod (see the
    module docstring)."""
    per_node = Counter(nodes)
    if not per_node:
        return {}
    if len(per_node) == 1:
        return {"nodeSelector": {HOSTNAME_LABEL: nodes[0]}}
    names = sorted(per_node)
    pinning: dict[str, Any] = {
        "affinity": {
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [
                        {"matchExpressions": [{"key": HOSTNAME_LABEL, "operator": "In", "values": names}]}
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
                "labelSelector": {"matchLabels": dict(pods)},
            }
        ]
    return pinning


#: Container waiting reasons (the kubelet's) that mean the image cannot be had: waiting will not mend them.
IMAGE_PULL_REASONS = frozenset({"ErrImagePull", "ImagePullBackOff", "InvalidImageName", "ErrImageNeverPull"})
#: A pod's ``DisruptionTarget`` reasons (set when the cluster, not the program, ends a pod), by failure.
DISRUPTIONS = {
    "PreemptionByScheduler": Failure.PREEMPTED,  # a higher-priority pod took its place
    "EvictionByEvictionAPI": Failure.PREEMPTED,  # a drain or an autoscaler evicted it
    "TerminationByKubelet": Failure.PREEMPTED,  # node pressure or a graceful node shutdown
    "DeletionByTaintManager": Failure.NODE_LOST,  # its node went NotReady or unreachable
    "DeletionByPodGC": Failure.NODE_LOST,  # its node was deleted
}


def job_status(backend_id: str, job: Any, pods: list[Any]) -> JobStatus:
    """What a ``V1Job`` and its pods say of the job: its state, a message for the timeline, the ``Failure``
    reason and exit code when it failed or cannot start, and how many workers run.

    The Job's conditions decide whether it ended; its pods say why (OOM kill, exit code, eviction) and why
    it has not started (image pull errors, unschedulable workers). A gang is RUNNING only when every worker
    runs (or has finished); while some run and others wait it is PENDING with ``workers_running`` below
    the Job's parallelism."""
    nodes = tuple(sorted({pod.spec.node_name for pod in pods if pod.spec and pod.spec.node_name}))
    running = sum(1 for pod in pods if _phase(pod) == "Running")
    finished = sum(1 for pod in pods if _phase(pod) == "Succeeded")
    if not pods and job.status is not None:
        running = job.status.ready if job.status.ready is not None else (job.status.active or 0)

    def status(state: JobState, message: str, reason: str = "", exit_code: int | None = None) -> JobStatus:
        return JobStatus(backend_id, state, message, nodes, reason, exit_code, running)

    state, message = job_state(job)
    if state is JobState.FAILED:
        reason, exit_code, why = _failure(job, pods)
        return status(state, f"{message}; {why}" if why else message, reason, exit_code)
    if state is not JobState.PENDING and state is not JobState.RUNNING:
        return status(state, message)
    if job.spec is not None and job.spec.suspend:
        return status(JobState.PENDING, message)
    for pod in pods:
        for container in _containers(pod):
            waiting = container.state.waiting if container.state else None
            if waiting is not None and waiting.reason in IMAGE_PULL_REASONS:
                said = f": {waiting.message}" if waiting.message else ""
                words = f"{waiting.reason} for image {container.image}{said}"
                return status(JobState.PENDING, words, Failure.IMAGE_PULL)
    workers = _workers(job)
    if running and running + finished >= workers:
        return status(JobState.RUNNING, f"{running} of {workers} workers running")
    unschedulable = next(filter(None, (_unschedulable(pod) for pod in pods)), "")
    counted = f"{running} of {workers} workers running" if running else ""
    if unschedulable:
        words = f"{counted}; others unschedulable: {unschedulable}" if counted else f"unschedulable: {unschedulable}"
        return status(JobState.PENDING, words, Failure.UNSCHEDULABLE)
    return status(JobState.PENDING, counted or message)


def _phase(pod: Any) -> str:
    return str(pod.status.phase or "") if pod.status is not None else ""


def _containers(pod: Any) -> list[Any]:
    if pod.status is None:
        return []
    return [*(pod.status.init_container_statuses or []), *(pod.status.container_statuses or [])]


def _workers(job: Any) -> int:
    spec = job.spec
    return max(1, (spec.parallelism or spec.completions or 1) if spec is not None else 1)


def _condition(pod: Any, kind: str) -> Any:
    conditions = (pod.status.conditions or []) if pod.status is not None else []
    return next((c for c in conditions if c.type == kind), None)


def _unschedulable(pod: Any) -> str:
    """The scheduler's words when it cannot place the pod (``PodScheduled`` False, reason Unschedulable)."""
    scheduled = _condition(pod, "PodScheduled")
    if scheduled is None or scheduled.status != "False" or scheduled.reason != "Unschedulable":
        return ""
    return str(scheduled.message or "no node fits")


def _failure(job: Any, pods: list[Any]) -> tuple[str, int | None, str]:
    """(``Failure`` code, exit code, words) of a failed Job, from its condition and its pods, most telling
    first: its own deadline, the cluster ending a pod, an OOM kill, a non-zero exit."""
    conditions = (job.status.conditions or []) if job.status is not None else []
    if any(c.type in ("Failed", "FailureTarget") and c.reason == "DeadlineExceeded" for c in conditions):
        return Failure.TIME_LIMIT, None, ""
    for pod in pods:
        target = _condition(pod, "DisruptionTarget")
        if target is not None and target.status == "True" and target.reason in DISRUPTIONS:
            said = f": {target.message}" if target.message else ""
            return DISRUPTIONS[target.reason], None, f"pod {pod.metadata.name} {target.reason}{said}"
        if pod.status is not None and pod.status.reason == "Evicted":
            said = f": {pod.status.message}" if pod.status.message else ""
            return Failure.PREEMPTED, None, f"pod {pod.metadata.name} evicted{said}"
    ended = [
        (pod, terminated)
        for pod in pods
        for container in _containers(pod)
        for terminated in (container.state.terminated if container.state else None, _last(container))
        if terminated is not None and (terminated.exit_code or terminated.reason == "OOMKilled")
    ]
    for pod, terminated in ended:
        if terminated.reason == "OOMKilled":
            return Failure.OOM_KILLED, terminated.exit_code, f"pod {pod.metadata.name} was OOM-killed"
    for pod, terminated in ended:
        said = f" ({terminated.reason})" if terminated.reason and terminated.reason != "Error" else ""
        code = terminated.exit_code
        return Failure.EXIT_CODE, code, f"pod {pod.metadata.name} exited with code {code}{said}"
    return "", None, ""


def _last(container: Any) -> Any:
    return container.last_state.terminated if container.last_state is not None else None


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
            return JobState.PENDING, f"waiting for Kueue admission (suspended in LocalQueue {queue})"
        return JobState.PENDING, "suspended"
    active = (status.active or 0) if status else 0
    ready = status.ready if status else None
    if active and (ready is None or ready > 0):
        return JobState.RUNNING, f"{active} pods active"
    if active:
        return JobState.PENDING, f"{active} pods created, none ready yet"
    return JobState.PENDING, "no pods yet"
