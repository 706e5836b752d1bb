"""A Ray job (``JobSpec.kind == "ray"``) as a KubeRay ``RayJob`` (``ray.io/v1``), and a RayJob as a ``JobStatus``.
Pure; no network.

One RayJob per Quartermaster job (``ray-operator/apis/ray/v1/rayjob_types.go`` in ray-project/kuberay):
``spec.entrypoint`` and ``spec.runtimeEnvYAML`` (the runtime environment as JSON, which is YAML too),
``spec.rayClusterSpec`` with a head group (the head's shape, ``JobSpec.head``) and one worker group of
``replicas = workers`` pods of the worker shape, both running ``JobSpec.image`` (else the cluster's
``ray_image``, else ``DEFAULT_RAY_IMAGE``). ``shutdownAfterJobFinishes`` deletes the Ray cluster when the
entrypoint ends, and ``activeDeadlineSeconds`` is the job's time limit. KubeRay submits the entrypoint from a
submitter Job once every pod of the Ray cluster is ready, so the Ray cluster starts as a gang.

Placement. Outside Kueue the head goes to ``JobSpec.head_node`` (where the engine put it; where Kubernetes
chooses when that is "") and the workers are pinned to ``JobSpec.nodes`` as a Job's are (``jobs.pinned``).
In Kueue mode nothing is pinned: the RayJob is created suspended with the LocalQueue's label, and Kueue
admits the head and workers together.

Status comes from ``status.jobDeploymentStatus`` (what KubeRay did: Initializing, Running, Complete, Failed,
ValidationFailed, Suspending, Suspended, Retrying, Waiting) and ``status.jobStatus`` (what Ray says of the
entrypoint: PENDING, RUNNING, SUCCEEDED, FAILED, STOPPED), with ``status.reason`` and ``status.message``;
``status.dashboardURL`` (``host:port`` of the head's dashboard) becomes ``JobStatus.dashboard_url``.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

from clusters.backends.base import Failure, InvalidJob, JobSpec, JobState, JobStatus
from clusters.backends.kubernetes.jobs import (
    IMAGE_PULL_REASONS,
    JOB_ID_ANNOTATION,
    JOB_LABEL,
    JOB_NAME_ANNOTATION,
    KUEUE_QUEUE_LABEL,
    job_name,
    pinned,
    resources,
)

GROUP, VERSION, PLURAL = "ray.io", "v1", "rayjobs"
#: A RayJob's ``backend_id`` is this prefix and its name, so that status and cancel know it is no Job.
BACKEND_PREFIX = "rayjob/"
#: KubeRay's limit, so that the RayCluster's name (the RayJob's and 6 more) stays valid (MaxRayJobNameLength).
MAX_RAYJOB_NAME = 47
DEFAULT_RAY_IMAGE = "rayproject/ray:2.49.2"
WORKER_GROUP = "workers"
#: Labels KubeRay puts on a Ray cluster's pods.
CLUSTER_LABEL, NODE_TYPE_LABEL = "ray.io/cluster", "ray.io/node-type"
DASHBOARD_PORT = 8265
#: Ray's words when the entrypoint exits non-zero ("Job entrypoint command failed with exit code 3, ...").
EXIT_CODE = re.compile(r"exit code (-?\d+)")


def rayjob_name(job_id: str) -> str:
    return job_name(job_id, MAX_RAYJOB_NAME)


def is_rayjob(backend_id: str) -> bool:
    return backend_id.startswith(BACKEND_PREFIX)


def name_of(backend_id: str) -> str:
    return backend_id.removeprefix(BACKEND_PREFIX)


def rayjob_manifest(
    spec: JobSpec,
    *,
    namespace: str,
    local_queue: str = "",
    accelerator_resource: str = "nvidia.com/gpu",
    image: str = DEFAULT_RAY_IMAGE,
) -> dict[str, Any]:
    """The RayJob to create for ``spec``, as the API server's JSON (see the module docstring). ``local_queue``
    is the Kueue LocalQueue in Kueue mode, "" outside Kueue. A spec that cannot become one is ``InvalidJob``."""
    if not spec.entrypoint.strip():
        raise InvalidJob(f"job {spec.id}: a Ray job needs an entrypoint (the command Ray runs on its head)")
    if spec.workers < 0:
        raise InvalidJob(f"job {spec.id}: a Ray job cannot have {spec.workers} workers")
    if spec.nodes and len(spec.nodes) != spec.workers:
        raise InvalidJob(f"job {spec.id}: {spec.workers} workers but {len(spec.nodes)} nodes placed")
    name = rayjob_name(spec.id)
    image = spec.image or image
    values = {"QM_JOB_ID": spec.id, "QM_WORKERS": str(spec.workers), **spec.env}
    env = [{"name": key, "value": value} for key, value in values.items()]
    kueue = bool(local_queue)

    def pod(kind: str, shape: tuple[int, int, int], placement: dict[str, Any]) -> dict[str, Any]:
        shaped = resources(*shape, accelerator_resource)
        container = {"name": f"ray-{kind}", "image": image, "env": env, "resources": shaped}
        return {
            "metadata": {"labels": {JOB_LABEL: name}},
            "spec": {"containers": [container], **placement},
        }

    head_node = spec.head_node if spec.head_node and not kueue else ""
    head = pod("head", spec.head, {"nodeSelector": {"kubernetes.io/hostname": head_node}} if head_node else {})
    worker_shape = (spec.accelerators_per_worker, spec.cpu_per_worker, spec.memory_per_worker)
    worker_pods = {JOB_LABEL: name, NODE_TYPE_LABEL: "worker"}
    worker = pod("worker", worker_shape, {} if kueue else pinned(spec.nodes, worker_pods))
    cluster: dict[str, Any] = {
        # KubeRay starts the head's dashboard on every address itself (dashboard-host), so it is left out.
        "headGroupSpec": {"rayStartParams": {}, "template": head},
        "workerGroupSpecs": [],
    }
    if spec.workers:
        cluster["workerGroupSpecs"].append(
            {
                "groupName": WORKER_GROUP,
                "replicas": spec.workers,
                "minReplicas": spec.workers,
                "maxReplicas": spec.workers,
                "rayStartParams": {},
                "template": worker,
            }
        )
    rayjob_spec: dict[str, Any] = {
        "entrypoint": spec.entrypoint,
        "shutdownAfterJobFinishes": True,
        "rayClusterSpec": cluster,
    }
    if spec.runtime_env:
        rayjob_spec["runtimeEnvYAML"] = json.dumps(dict(spec.runtime_env), sort_keys=True)
    if spec.time_limit > 0:
        rayjob_spec["activeDeadlineSeconds"] = spec.time_limit
    labels = {JOB_LABEL: name}
    if kueue:
        labels[KUEUE_QUEUE_LABEL] = local_queue
        rayjob_spec["suspend"] = True  # Kueue unsuspends it when it admits the workload
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "RayJob",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": labels,
            "annotations": {JOB_ID_ANNOTATION: spec.id, JOB_NAME_ANNOTATION: spec.name},
        },
        "spec": rayjob_spec,
    }


def dashboard_url(rayjob: Mapping[str, Any]) -> str:
    """Where the Ray dashboard is: KubeRay writes ``host:port`` of the head service, without a scheme."""
    url = str((rayjob.get("status") or {}).get("dashboardURL") or "")
    if url and "://" not in url:
        url = f"http://{url}"
    return url


def rayjob_status(backend_id: str, rayjob: Mapping[str, Any], pods: list[Any]) -> JobStatus:
    """What a RayJob (the API server's JSON) and its Ray cluster's pods say of the job (module docstring)."""
    status = rayjob.get("status") or {}
    deployment = str(status.get("jobDeploymentStatus") or "")
    ray = str(status.get("jobStatus") or "")
    said = str(status.get("message") or "").strip()
    nodes = tuple(sorted({pod.spec.node_name for pod in pods if pod.spec and pod.spec.node_name}))
    workers = [pod for pod in pods if (pod.metadata.labels or {}).get(NODE_TYPE_LABEL) == "worker"]
    running = sum(1 for pod in workers if pod.status is not None and pod.status.phase == "Running")
    if (rayjob.get("metadata") or {}).get("deletionTimestamp"):
        state, message, reason, exit_code, run = JobState.CANCELLED, "the RayJob is being deleted", "", None, None
    elif deployment in ("Complete", "Failed", "ValidationFailed"):
        state, message, reason, exit_code = _ended(deployment, ray, str(status.get("reason") or ""), said)
        run = None
    elif deployment == "Running" and ray == "RUNNING":
        state, message, reason, exit_code, run = JobState.RUNNING, "the Ray job is running", "", None, None
    else:
        state, exit_code, run = JobState.PENDING, None, running
        message, reason = _waiting(deployment, ray, said, pods)
    return JobStatus(backend_id, state, message, nodes, reason, exit_code, run, dashboard_url(rayjob))


def _ended(deployment: str, ray: str, reason: str, said: str) -> tuple[JobState, str, str, int | None]:
    """(state, words, ``Failure`` code, exit code) of a RayJob KubeRay is done with."""
    first_line = said.splitlines()[0] if said else ""
    if deployment == "ValidationFailed":  # KubeRay will never start it
        return JobState.PENDING, f"KubeRay refused the RayJob: {first_line or 'invalid'}", Failure.INVALID, None
    if ray == "STOPPED":
        return JobState.CANCELLED, "the Ray job was stopped" + (f": {first_line}" if first_line else ""), "", None
    if deployment == "Complete" or ray == "SUCCEEDED":
        return JobState.SUCCEEDED, first_line or "the Ray job succeeded", "", None
    words = ": ".join(part for part in (reason, first_line) if part) or "the RayJob failed"
    if reason == "DeadlineExceeded":
        return JobState.FAILED, words, Failure.TIME_LIMIT, None
    code = EXIT_CODE.search(said)
    if reason == "AppFailed" and code:
        return JobState.FAILED, words, Failure.EXIT_CODE, int(code.group(1))
    return JobState.FAILED, words, "", None


def _waiting(deployment: str, ray: str, said: str, pods: list[Any]) -> tuple[str, str]:
    """(words, ``Failure`` code) of a RayJob not running yet: its pods' troubles first (an image that cannot be
    pulled, a pod the scheduler cannot place), else how far KubeRay got."""
    if deployment in ("Suspended", "Suspending"):
        return "suspended", ""
    for pod in pods:
        for container in (pod.status.container_statuses or []) if pod.status is not None else []:
            waiting = container.state.waiting if container.state else None
            if waiting is not None and waiting.reason in IMAGE_PULL_REASONS:
                why = f": {waiting.message}" if waiting.message else ""
                return f"{waiting.reason} for image {container.image}{why}", Failure.IMAGE_PULL
    for pod in pods:
        for condition in (pod.status.conditions or []) if pod.status is not None else []:
            if condition.type == "PodScheduled" and condition.status == "False" and condition.reason == "Unschedulable":
                words = f"Ray cluster pod {pod.metadata.name} unschedulable: {condition.message or 'no node fits'}"
                return words, Failure.UNSCHEDULABLE
    stage = {"": "not started by KubeRay yet", "Initializing": "starting its Ray cluster", "Running": "submitted"}
    words = f"RayJob {stage.get(deployment, deployment.lower())}"
    if ray:
        words += f"; the Ray job is {ray.lower()}"
    first_line = said.splitlines()[0] if said else ""
    return words + (f": {first_line}" if first_line else ""), ""


__all__ = [
    "BACKEND_PREFIX",
    "DEFAULT_RAY_IMAGE",
    "dashboard_url",
    "is_rayjob",
    "name_of",
    "rayjob_manifest",
    "rayjob_name",
    "rayjob_status",
]
