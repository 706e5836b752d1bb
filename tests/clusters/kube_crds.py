"""Kueue, KubeRay and cluster-autoscaler's provisioning requests in the local Kubernetes API server
(``kube_server.py``): their custom resources, and the steps their controllers take, as they document them
(``autoscale`` and ``scale_down`` for cluster-autoscaler: see their docstrings). Tests drive the controllers
(``kueue_step``, ``ray_start``, ``ray_run``, ``ray_finish``) the way ``kube_fleet.py`` and the kubelet helpers drive
pods.

Resources (served under their CRD paths, with the API server's verbs and ``Status`` errors):
- ``kueue.x-k8s.io/v1beta1``: ``ResourceFlavor`` and ``ClusterQueue`` (cluster-scoped), ``LocalQueue`` and
  ``Workload`` (namespaced; ``labelSelector`` on lists);
- ``ray.io/v1``: ``RayJob`` (namespaced). Deleting one, or a Job, deletes what it owns (the garbage collector):
  its Workload, its Ray cluster's pods.

Kueue's controller step (``kueue_step``), after kubernetes-sigs/kueue (``pkg/controller/jobframework``,
``pkg/controller/core/workload_controller.go``, ``pkg/scheduler``, ``pkg/workload``):
1. a Job or RayJob labelled ``kueue.x-k8s.io/queue-name`` gets a Workload named ``<kind>-<name>-<hash>``,
   owned by it (controller reference) and labelled ``kueue.x-k8s.io/job-uid``, with one pod set per group
   of identical pods (a Job's ``main``; a RayJob's ``head`` and each worker group);
2. a Workload whose LocalQueue does not exist stays pending: ``QuotaReserved`` False, reason
   ``Inadmissible``, "LocalQueue <name> doesn't exist" (the same for a missing ClusterQueue);
3. pending Workloads are admitted in creation order when their ClusterQueue's nominal quota has room in one
   flavor of each resource group (no borrowing, cohorts or preemption here): ``status.admission`` with
   the pod sets' flavors and usage, ``QuotaReserved`` True ("Quota reserved in ClusterQueue <cq>") and
   ``Admitted`` True ("The workload is admitted"); the Job or RayJob is unsuspended and the flavor's
   ``nodeLabels`` are added to its pod templates' ``nodeSelector``. Without room: ``QuotaReserved`` False,
   reason ``Pending``, with the flavor assigner's words ("couldn't assign flavors to pod set main:
   insufficient unused quota for nvidia.com/gpu in flavor h100, 8 more needed");
4. a Workload whose Job finished (its ``Complete`` or ``Failed`` condition; a RayJob's Complete or Failed
   deployment) gets ``Finished`` True and frees its quota.
``kueue_evict`` is Kueue evicting an admitted Workload: ``Evicted`` True with the reason and message (and
``Preempted`` True for a preemption), quota released (``QuotaReserved`` and ``Admitted`` False, no
admission), the Job suspended again with its pods deleted and the injected node selector taken back; a
``Deactivated`` Workload also gets ``spec.active`` false, and Kueue does not admit it again.

KubeRay's RayJob lifecycle (ray-project/kuberay ``ray-operator/controllers/ray/rayjob_controller.go``,
``apis/ray/v1/rayjob_types.go``): ``ray_start`` moves a new RayJob to ``Initializing`` (or, while
``spec.suspend`` is set, to ``Suspended``), names its RayCluster ``<rayjob>-<5 characters>`` and makes its
head and worker pods from the templates (``ray.io/cluster``, ``ray.io/node-type``, ``ray.io/group`` labels),
unbound until the test binds them; ``ray_run`` is the cluster ready and the entrypoint submitted:
``dashboardURL`` set to the head service's ``host:port``, ``Running``/``RUNNING``, and the submitter: a batch Job
named as the RayJob, owned by it (``ray.io/originated-from-cr-name``, ``ray.io/originated-from-crd`` labels),
whose one pod runs ``ray job submit`` in container ``ray-job-submitter`` (``common/job.go``); ``ray_finish`` ends the
Ray job as Ray reports it (SUCCEEDED, or FAILED with Ray's message, e.g. "Job entrypoint command failed with
exit code 3") and, with ``shutdownAfterJobFinishes``, deletes the Ray cluster's pods.
"""

from __future__ import annotations

import copy
import hashlib
import uuid
from datetime import UTC, datetime
from decimal import Decimal
from typing import TYPE_CHECKING, Any

from tests.clusters.kube_fleet import add_node, timestamp

if TYPE_CHECKING:
    from tests.clusters.kube_server import KubeServer

KUEUE = "kueue.x-k8s.io"
KUEUE_VERSION = f"{KUEUE}/v1beta1"
RAY = "ray.io"
RAY_VERSION = f"{RAY}/v1"
AUTOSCALING = "autoscaling.x-k8s.io"
AUTOSCALING_VERSION = f"{AUTOSCALING}/v1"
QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
JOB_UID_LABEL = "kueue.x-k8s.io/job-uid"
#: (group, plural) -> (kind, namespaced)
RESOURCES = {
    (KUEUE, "resourceflavors"): ("ResourceFlavor", False),
    (KUEUE, "clusterqueues"): ("ClusterQueue", False),
    (KUEUE, "localqueues"): ("LocalQueue", True),
    (KUEUE, "workloads"): ("Workload", True),
    (RAY, "rayjobs"): ("RayJob", True),
    (AUTOSCALING, "provisioningrequests"): ("ProvisioningRequest", True),
}
VERSIONS = {KUEUE: KUEUE_VERSION, RAY: RAY_VERSION, AUTOSCALING: AUTOSCALING_VERSION}
#: A RayJob name longer than this makes an invalid RayCluster name (KubeRay's MaxRayJobNameLength).
MAX_RAYJOB_NAME = 47


def now() -> str:
    return timestamp(datetime.now(UTC))


# --------------------------------------------------------------------------------------------- the admin's part


def add_flavor(kube: KubeServer, name: str, node_labels: dict[str, str] | None = None) -> None:
    """A ResourceFlavor; its ``nodeLabels`` are what Kueue adds to an admitted job's node selector."""
    with kube.lock:
        _store(kube, "resourceflavors")[("", name)] = {
            "apiVersion": KUEUE_VERSION,
            "kind": "ResourceFlavor",
            "metadata": {"name": name, "uid": str(uuid.uuid4())},
            "spec": {"nodeLabels": node_labels or {}},
        }


def add_cluster_queue(kube: KubeServer, name: str, quotas: dict[str, dict[str, str]]) -> None:
    """A ClusterQueue with one resource group: ``{flavor: {resource: nominalQuota}}``, flavors in order."""
    resources = sorted({resource for quota in quotas.values() for resource in quota})
    flavors = [
        {"name": flavor, "resources": [{"name": r, "nominalQuota": q} for r, q in sorted(quota.items())]}
        for flavor, quota in quotas.items()
    ]
    with kube.lock:
        _store(kube, "clusterqueues")[("", name)] = {
            "apiVersion": KUEUE_VERSION,
            "kind": "ClusterQueue",
            "metadata": {"name": name, "uid": str(uuid.uuid4())},
            "spec": {
                "namespaceSelector": {},
                "resourceGroups": [{"coveredResources": resources, "flavors": flavors}],
            },
        }


def add_local_queue(kube: KubeServer, namespace: str, name: str, cluster_queue: str) -> None:
    with kube.lock:
        _store(kube, "localqueues")[(namespace, name)] = {
            "apiVersion": KUEUE_VERSION,
            "kind": "LocalQueue",
            "metadata": {"name": name, "namespace": namespace, "uid": str(uuid.uuid4())},
            "spec": {"clusterQueue": cluster_queue},
        }


def _store(kube: KubeServer, plural: str) -> dict[tuple[str, str], dict[str, Any]]:
    return kube.custom.setdefault(plural, {})


def workloads(kube: KubeServer) -> list[dict[str, Any]]:
    with kube.lock:
        return [w for _, w in sorted(_store(kube, "workloads").items())]


def workload_of(kube: KubeServer, uid: str) -> dict[str, Any] | None:
    return next((w for w in workloads(kube) if w["metadata"]["labels"].get(JOB_UID_LABEL) == uid), None)


# ---------------------------------------------------------------------------------------------- Kueue's part


def kueue_step(kube: KubeServer) -> None:
    """One pass of Kueue's controllers (module docstring, steps 1-4)."""
    with kube.lock:
        for queued in _queued_owners(kube):
            if workload_of(kube, queued["metadata"]["uid"]) is None:
                _create_workload(kube, queued)
        for workload in workloads(kube):
            owner = _owner(kube, workload)
            if owner is None:
                continue
            if _finished(owner) and not _true(workload, "Finished"):
                succeeded = _finished(owner) == "Succeeded"
                words = "Job finished successfully" if succeeded else "Job failed"
                _set(workload, "Finished", "True", _finished(owner), words)  # its quota is free again
            elif _waiting(workload) and not _finished(owner):
                _try_admit(kube, workload, owner)


def kueue_evict(kube: KubeServer, uid: str, reason: str, message: str) -> None:
    """Kueue evicts the admitted Workload of the object with ``uid`` (module docstring)."""
    with kube.lock:
        workload = workload_of(kube, uid)
        assert workload is not None, "no Workload to evict"
        _set(workload, "Evicted", "True", reason, message)
        if reason == "Preempted":
            _set(workload, "Preempted", "True", "InClusterQueue", message)
        _set(workload, "QuotaReserved", "False", "Pending", message)
        _set(workload, "Admitted", "False", "NoReservation", "The workload has no reservation")
        _set(workload, "Requeued", "True" if reason == "Preempted" else "False", reason, message)
        workload["status"].pop("admission", None)
        if reason in ("Deactivated", "InactiveWorkload"):  # spec.active false: Kueue will not admit it again
            workload["spec"]["active"] = False
        owner = _owner(kube, workload)
        if owner is not None:
            _suspend(kube, owner)


def _waiting(workload: dict[str, Any]) -> bool:
    """Active, not admitted, not finished: Kueue considers it for admission."""
    active = workload["spec"].get("active", True)
    return bool(active) and not workload["status"].get("admission") and not _true(workload, "Finished")


def _queued_owners(kube: KubeServer) -> list[dict[str, Any]]:
    jobs = [job for _, job in sorted(kube.jobs.items())]
    rayjobs = [r for _, r in sorted(_store(kube, "rayjobs").items())]
    return [o for o in jobs + rayjobs if QUEUE_LABEL in (o["metadata"].get("labels") or {})]


def _owner(kube: KubeServer, workload: dict[str, Any]) -> dict[str, Any] | None:
    uid = workload["metadata"]["labels"].get(JOB_UID_LABEL)
    return next((o for o in _queued_owners(kube) if o["metadata"]["uid"] == uid), None)


def _finished(owner: dict[str, Any]) -> str:
    """ "Succeeded" or "Failed" once the job ended, else ""."""
    status = owner.get("status") or {}
    if owner["kind"] == "RayJob":
        return {"Complete": "Succeeded", "Failed": "Failed"}.get(status.get("jobDeploymentStatus", ""), "")
    for condition in status.get("conditions") or []:
        if condition.get("status") == "True" and condition["type"] in ("Complete", "Failed"):
            return "Succeeded" if condition["type"] == "Complete" else "Failed"
    return ""


def _pod_sets(owner: dict[str, Any]) -> list[dict[str, Any]]:
    spec = owner["spec"]
    if owner["kind"] == "Job":
        count = int(spec.get("parallelism") or 1)
        return [{"name": "main", "count": count, "template": copy.deepcopy(spec["template"])}]
    cluster = spec["rayClusterSpec"]
    sets = [{"name": "head", "count": 1, "template": copy.deepcopy(cluster["headGroupSpec"]["template"])}]
    for group in cluster.get("workerGroupSpecs") or []:
        sets.append(
            {
                "name": group["groupName"],
                "count": int(group.get("replicas") or 0),
                "template": copy.deepcopy(group["template"]),
            }
        )
    return sets


def _create_workload(kube: KubeServer, owner: dict[str, Any]) -> None:
    meta = owner["metadata"]
    kind, name, uid = owner["kind"], meta["name"], meta["uid"]
    digest = hashlib.sha256(f"{name}{uid}{kind}".encode()).hexdigest()[:5]
    workload_name = f"{kind.lower()}-{name}"[:57] + f"-{digest}"
    queue = meta["labels"][QUEUE_LABEL]
    api_version = owner.get("apiVersion", "batch/v1")
    workload: dict[str, Any] = {
        "apiVersion": KUEUE_VERSION,
        "kind": "Workload",
        "metadata": {
            "name": workload_name,
            "namespace": meta["namespace"],
            "uid": str(uuid.uuid4()),
            "creationTimestamp": now(),
            "labels": {JOB_UID_LABEL: uid},
            "ownerReferences": [
                {
                    "apiVersion": api_version,
                    "kind": kind,
                    "name": name,
                    "uid": uid,
                    "controller": True,
                    "blockOwnerDeletion": True,
                }
            ],
        },
        "spec": {"queueName": queue, "podSets": _pod_sets(owner), "active": True},
        "status": {"conditions": []},
    }
    kube._bump(workload)
    _store(kube, "workloads")[(meta["namespace"], workload_name)] = workload


def _try_admit(kube: KubeServer, workload: dict[str, Any], owner: dict[str, Any]) -> None:
    namespace, queue = workload["metadata"]["namespace"], workload["spec"]["queueName"]
    local = _store(kube, "localqueues").get((namespace, queue))
    if local is None:
        _set(workload, "QuotaReserved", "False", "Inadmissible", f"LocalQueue {queue} doesn't exist")
        return
    cq_name = local["spec"]["clusterQueue"]
    cluster_queue = _store(kube, "clusterqueues").get(("", cq_name))
    if cluster_queue is None:
        _set(workload, "QuotaReserved", "False", "Inadmissible", f"ClusterQueue {cq_name} doesn't exist")
        return
    assignments, problem = _assign(kube, cluster_queue, workload["spec"]["podSets"])
    if problem:
        _set(workload, "QuotaReserved", "False", "Pending", problem)
        return
    workload["status"]["admission"] = {"clusterQueue": cq_name, "podSetAssignments": assignments}
    _set(workload, "QuotaReserved", "True", "QuotaReserved", f"Quota reserved in ClusterQueue {cq_name}")
    _set(workload, "Admitted", "True", "Admitted", "The workload is admitted")
    for condition in workload["status"]["conditions"]:  # SetQuotaReservation resets an earlier eviction
        if condition["type"] in ("Evicted", "Preempted") and condition["status"] == "True":
            condition.update(status="False", reason="QuotaReserved", message="Previously: " + condition["message"])
    flavors = {a["name"]: next(iter(a["flavors"].values()), "") for a in assignments}
    _start(kube, owner, flavors)
    kube._bump(workload)


def _assign(
    kube: KubeServer, cluster_queue: dict[str, Any], pod_sets: list[dict[str, Any]]
) -> tuple[list[dict[str, Any]], str]:
    """The pod sets' flavor assignments in ``cluster_queue`` (its first resource group), or Kueue's words."""
    group = cluster_queue["spec"]["resourceGroups"][0]
    used = _usage(kube, cluster_queue["metadata"]["name"])
    assignments: list[dict[str, Any]] = []
    taken: dict[tuple[str, str], Decimal] = {}
    for pod_set in pod_sets:
        need = {r: q * pod_set["count"] for r, q in _requests(pod_set["template"]).items()}
        for resource in need:
            if resource not in group["coveredResources"]:
                where = f"couldn't assign flavors to pod set {pod_set['name']}"
                return [], f"{where}: resource {resource} unavailable in ClusterQueue"
        reasons: list[str] = []
        chosen = ""
        for flavor in group["flavors"]:
            quota = {r["name"]: _quantity(r["nominalQuota"]) for r in flavor["resources"]}
            fits = True
            for resource, amount in need.items():
                so_far = used.get((flavor["name"], resource), Decimal(0)) + taken.get(
                    (flavor["name"], resource), Decimal(0)
                )
                nominal = quota.get(resource, Decimal(0))
                if amount > nominal:
                    reasons.append(
                        f"insufficient quota for {resource} in flavor {flavor['name']}, previously considered podsets "
                        f"requests ({_text(so_far)}) + current podset request ({_text(amount)}) > maximum capacity "
                        f"({_text(nominal)})"
                    )
                    fits = False
                elif so_far + amount > nominal:
                    more = so_far + amount - nominal
                    words = f"insufficient unused quota for {resource} in flavor {flavor['name']}"
                    reasons.append(f"{words}, {_text(more)} more needed")
                    fits = False
            if fits:
                chosen = flavor["name"]
                break
        if not chosen:
            return [], f"couldn't assign flavors to pod set {pod_set['name']}: {', '.join(sorted(reasons))}"
        for resource, amount in need.items():
            taken[(chosen, resource)] = taken.get((chosen, resource), Decimal(0)) + amount
        assignments.append(
            {
                "name": pod_set["name"],
                "count": pod_set["count"],
                "flavors": dict.fromkeys(need, chosen),
                "resourceUsage": {resource: _text(amount) for resource, amount in need.items()},
            }
        )
    return assignments, ""


def _usage(kube: KubeServer, cluster_queue: str) -> dict[tuple[str, str], Decimal]:
    """What the admitted, unfinished Workloads of ``cluster_queue`` hold, by (flavor, resource)."""
    used: dict[tuple[str, str], Decimal] = {}
    for workload in workloads(kube):
        admission = workload["status"].get("admission")
        if not admission or admission["clusterQueue"] != cluster_queue or _true(workload, "Finished"):
            continue
        for assignment in admission["podSetAssignments"]:
            for resource, flavor in assignment["flavors"].items():
                amount = _quantity(assignment["resourceUsage"][resource])
                used[(flavor, resource)] = used.get((flavor, resource), Decimal(0)) + amount
    return used


def _requests(template: dict[str, Any]) -> dict[str, Decimal]:
    """What one pod of a template requests: its containers' requests added up (limits for extended resources
    that give only a limit, as the API server defaults them)."""
    total: dict[str, Decimal] = {}
    for container in template.get("spec", {}).get("containers") or []:
        resources = container.get("resources") or {}
        asked = {
            **{k: v for k, v in (resources.get("limits") or {}).items() if "/" in k},
            **(resources.get("requests") or {}),
        }
        for resource, quantity in asked.items():
            total[resource] = total.get(resource, Decimal(0)) + _quantity(quantity)
    return total


def _quantity(text: Any) -> Decimal:
    from clusters.backends.kubernetes.nodes import parse_quantity

    return parse_quantity(str(text))


def _text(amount: Decimal) -> str:
    return str(amount.normalize()) if amount == amount.to_integral() else str(amount)


def _start(kube: KubeServer, owner: dict[str, Any], flavors: dict[str, str]) -> None:
    """Unsuspend an admitted job, its pod templates given the flavors' node labels (RunWithPodSetsInfo)."""
    flavor_store = _store(kube, "resourceflavors")

    def inject(template: dict[str, Any], flavor: str) -> None:
        labels = (flavor_store.get(("", flavor)) or {}).get("spec", {}).get("nodeLabels") or {}
        if labels:
            spec = template.setdefault("spec", {})
            spec["nodeSelector"] = {**(spec.get("nodeSelector") or {}), **labels}

    kube.kueue_originals.setdefault(owner["metadata"]["uid"], copy.deepcopy(owner["spec"]))
    if owner["kind"] == "Job":
        inject(owner["spec"]["template"], flavors.get("main", ""))
    else:
        cluster = owner["spec"]["rayClusterSpec"]
        inject(cluster["headGroupSpec"]["template"], flavors.get("head", ""))
        for group in cluster.get("workerGroupSpecs") or []:
            inject(group["template"], flavors.get(group["groupName"], ""))
    owner["spec"]["suspend"] = False
    kube._bump(owner)


def _suspend(kube: KubeServer, owner: dict[str, Any]) -> None:
    """Stop an evicted job: suspended again, its templates as before admission, its pods gone."""
    original = kube.kueue_originals.pop(owner["metadata"]["uid"], None)
    if original is not None:
        owner["spec"] = original
    owner["spec"]["suspend"] = True
    uid = owner["metadata"]["uid"]
    if owner["kind"] == "Job":
        for key, pod in list(kube.pods.items()):
            if any(o.get("uid") == uid for o in pod["metadata"].get("ownerReferences", [])):
                del kube.pods[key]
        owner["status"] = {}
    else:
        _delete_ray_cluster(kube, owner)
        owner["status"] = {"jobDeploymentStatus": "Suspended", "jobStatus": ""}
    kube._bump(owner)


def _set(workload: dict[str, Any], kind: str, status: str, reason: str, message: str) -> None:
    """Set a condition as ``apimeta.SetStatusCondition`` does: the transition time moves only with the status."""
    conditions = workload.setdefault("status", {}).setdefault("conditions", [])
    existing = next((c for c in conditions if c["type"] == kind), None)
    if existing is None:
        conditions.append(
            {"type": kind, "status": status, "reason": reason, "message": message, "lastTransitionTime": now()}
        )
        return
    if existing["status"] != status:
        existing["lastTransitionTime"] = now()
    existing.update(status=status, reason=reason, message=message)


def _true(workload: dict[str, Any], kind: str) -> bool:
    return any(c["type"] == kind and c["status"] == "True" for c in workload["status"].get("conditions") or [])


# -------------------------------------------------------------------------------------------- KubeRay's part


def rayjob(kube: KubeServer, namespace: str, name: str) -> dict[str, Any]:
    return _store(kube, "rayjobs")[(namespace, name)]


def ray_start(kube: KubeServer, namespace: str, name: str, nodes: dict[str, str] | None = None) -> None:
    """KubeRay takes up a new RayJob: Suspended while ``spec.suspend``; else Initializing, with its RayCluster's
    pods made from the templates, bound to ``nodes`` (pod name -> node; a pod left out stays unbound)."""
    with kube.lock:
        job = rayjob(kube, namespace, name)
        status = job.setdefault("status", {})
        if job["spec"].get("suspend"):
            status.update(jobDeploymentStatus="Suspended", jobStatus="")
            kube._bump(job)
            return
        if status.get("rayClusterName"):
            return
        suffix = hashlib.sha256(job["metadata"]["uid"].encode()).hexdigest()[:5]
        cluster = f"{name}-{suffix}"
        status.update(
            jobDeploymentStatus="Initializing",
            jobStatus="",
            jobId=f"{name}-{suffix[::-1]}",
            rayClusterName=cluster,
            startTime=now(),
        )
        spec = job["spec"]["rayClusterSpec"]
        groups = [("head", "headgroup", 1, spec["headGroupSpec"]["template"])]
        for group in spec.get("workerGroupSpecs") or []:
            groups.append(("worker", group["groupName"], int(group.get("replicas") or 0), group["template"]))
        for node_type, group_name, count, template in groups:
            for index in range(count):
                pod_name = f"{cluster}-head" if node_type == "head" else f"{cluster}-{group_name}-worker-{index}"
                _add_ray_pod(
                    kube, namespace, pod_name, cluster, node_type, group_name, template, (nodes or {}).get(pod_name, "")
                )
        kube._bump(job)


def _add_ray_pod(
    kube: KubeServer,
    namespace: str,
    name: str,
    cluster: str,
    node_type: str,
    group: str,
    template: dict[str, Any],
    node: str,
) -> None:
    labels = {
        **(template.get("metadata", {}).get("labels") or {}),
        "ray.io/cluster": cluster,
        "ray.io/node-type": node_type,
        "ray.io/group": group,
        "ray.io/is-ray-node": "yes",
    }
    owner = {
        "apiVersion": RAY_VERSION,
        "kind": "RayCluster",
        "name": cluster,
        "uid": f"u-{cluster}",
        "controller": True,
    }
    spec = copy.deepcopy(template.get("spec") or {})
    if node:
        spec["nodeName"] = node
    kube.pods[(namespace, name)] = {
        "metadata": {"name": name, "namespace": namespace, "labels": labels, "ownerReferences": [owner]},
        "spec": spec,
        "status": {"phase": "Running" if node else "Pending"},
    }


def ray_run(kube: KubeServer, namespace: str, name: str) -> None:
    """The Ray cluster is ready and the entrypoint submitted: the dashboard is known, the Ray job RUNNING."""
    with kube.lock:
        job = rayjob(kube, namespace, name)
        cluster = job["status"]["rayClusterName"]
        job["status"].update(
            jobDeploymentStatus="Running",
            jobStatus="RUNNING",
            dashboardURL=f"{cluster}-head-svc.{namespace}.svc.cluster.local:8265",
        )
        _add_submitter(kube, namespace, job)
        kube._bump(job)


def _add_submitter(kube: KubeServer, namespace: str, rayjob: dict[str, Any]) -> None:
    """KubeRay's submitter Job for ``rayjob`` and the pod the Job controller makes for it, running."""
    name = rayjob["metadata"]["name"]
    if (namespace, name) in kube.jobs:
        return
    uid = str(uuid.uuid4())
    owner = {"apiVersion": RAY_VERSION, "kind": "RayJob", "name": name, "uid": rayjob["metadata"]["uid"]}
    labels = {"ray.io/originated-from-cr-name": name, "ray.io/originated-from-crd": "RayJob"}
    pod_labels = {"batch.kubernetes.io/controller-uid": uid, "batch.kubernetes.io/job-name": name, "job-name": name}
    container = {"name": "ray-job-submitter", "image": "rayproject/ray:2.49.2", "command": ["ray", "job", "submit"]}
    kube.jobs[(namespace, name)] = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "namespace": namespace, "uid": uid, "labels": labels, "ownerReferences": [owner]},
        "spec": {
            "backoffLimit": 2,
            "template": {"metadata": {"labels": pod_labels}, "spec": {"containers": [container]}},
        },
        "status": {"active": 1},
    }
    pod_owner = {"apiVersion": "batch/v1", "kind": "Job", "name": name, "uid": uid, "controller": True}
    kube.pods[(namespace, f"{name}-sub01")] = {
        "metadata": {
            "name": f"{name}-sub01",
            "namespace": namespace,
            "labels": pod_labels,
            "ownerReferences": [pod_owner],
            "creationTimestamp": now(),
        },
        "spec": {"containers": [container], "restartPolicy": "Never"},
        "status": {"phase": "Running"},
    }


def ray_finish(kube: KubeServer, namespace: str, name: str, *, exit_code: int = 0, reason: str = "") -> None:
    """The Ray job ends: SUCCEEDED (exit 0), or FAILED with Ray's words for the exit code, or KubeRay's own
    ``reason`` (``DeadlineExceeded``); the Ray cluster is deleted (``shutdownAfterJobFinishes``)."""
    with kube.lock:
        job = rayjob(kube, namespace, name)
        status = job["status"]
        if reason == "DeadlineExceeded":
            status.update(
                jobDeploymentStatus="Failed",
                reason=reason,
                message=(
                    f"The RayJob has passed the activeDeadlineSeconds. StartTime: {status.get('startTime')}. "
                    f"ActiveDeadlineSeconds: {job['spec'].get('activeDeadlineSeconds')}"
                ),
            )
        elif exit_code == 0:
            status.update(jobDeploymentStatus="Complete", jobStatus="SUCCEEDED", message="Job finished successfully.")
        else:
            status.update(
                jobDeploymentStatus="Failed",
                jobStatus="FAILED",
                reason="AppFailed",
                message=(
                    f"Job entrypoint command failed with exit code {exit_code}, last available logs (truncated to "
                    "20,000 chars):\nTraceback (most recent call last):\nValueError: bad batch"
                ),
            )
        status["endTime"] = now()
        submitter = kube.pods.get((namespace, f"{name}-sub01"))
        if submitter is not None:  # ``ray job submit`` exits with the entrypoint
            submitter["status"] = {"phase": "Succeeded" if exit_code == 0 and not reason else "Failed"}
        if job["spec"].get("shutdownAfterJobFinishes"):
            _delete_ray_cluster(kube, job)
        kube._bump(job)


def _delete_ray_cluster(kube: KubeServer, job: dict[str, Any]) -> None:
    cluster = (job.get("status") or {}).get("rayClusterName")
    if not cluster:
        return
    for key, pod in list(kube.pods.items()):
        if pod["metadata"].get("labels", {}).get("ray.io/cluster") == cluster:
            del kube.pods[key]


# ----------------------------------------------------------------------------------- cluster-autoscaler


def autoscale(kube: KubeServer, *, stock: int | None = None) -> list[str]:
    """cluster-autoscaler's step for ProvisioningRequests (``best-effort-atomic-scale-up``): a new request is
    ``Accepted``; its pod template read, it gets all of its nodes (labelled with the template's node selector, with
    the accelerators its pods ask for) and ``Provisioned`` True, or none and ``Failed`` True when ``stock`` (nodes
    the cloud has left) is short or its template is missing. The new nodes' names."""
    added: list[str] = []
    for (namespace, name), request in sorted(kube.custom.get("provisioningrequests", {}).items()):
        conditions = request["status"].setdefault("conditions", [])
        if any(c["type"] in ("Provisioned", "Failed") for c in conditions):
            continue
        conditions.append(_condition("Accepted", "True", "Accepted", "Provisioning Request was accepted"))
        (pod_set,) = request["spec"]["podSets"]
        template = kube.pod_templates.get((namespace, pod_set["podTemplateRef"]["name"]))
        count = pod_set["count"]
        if template is None or (stock is not None and stock - len(added) < count):
            why = "pod template not found" if template is None else "out of resources in every node group"
            conditions.append(_condition("Failed", "True", "FailedToCreateScaleUpPlan", f"Scale-up failed: {why}"))
            continue
        spec = template["template"]["spec"]
        requests = spec["containers"][0].get("resources", {}).get("requests", {})
        for index in range(count):
            node = f"{name}-{index}"
            capacity = {"cpu": "96", "memory": "1048576Mi", "pods": "110", **requests}
            add_node(
                kube,
                node,
                dict(spec.get("nodeSelector") or {}),
                capacity=capacity,
                allocatable=capacity,
                heartbeat=datetime.now(UTC),
            )
            added.append(node)
        conditions.append(
            _condition("Provisioned", "True", "Provisioned", "Provisioning Request was successfully provisioned.")
        )
        kube._bump(request)
    return added


def scale_down(kube: KubeServer) -> list[str]:
    """cluster-autoscaler's scale-down: cordoned nodes that run no pod are removed (their VMs deleted)."""
    busy = {pod.get("spec", {}).get("nodeName") for pod in kube.pods.values()}
    gone = [n for n, node in kube.nodes.items() if node["spec"].get("unschedulable") and n not in busy]
    for name in gone:
        del kube.nodes[name]
        kube.leases.pop(name, None)
    return gone


def _condition(kind: str, status: str, reason: str, message: str) -> dict[str, str]:
    return {"type": kind, "status": status, "reason": reason, "message": message, "lastTransitionTime": now()}


# ------------------------------------------------------------------------------------------------ the API


def validate(kind: str, body: dict[str, Any], name: str) -> str:
    """What the CRD's schema refuses (the API server answers 422), "" when nothing."""
    if kind == "ProvisioningRequest":
        spec = body.get("spec") or {}
        if not spec.get("provisioningClassName"):
            return "spec.provisioningClassName: Required value"
        sets = spec.get("podSets") or []
        if not 1 <= len(sets) <= 32:
            return "spec.podSets: Invalid value: must have between 1 and 32 items"
        for index, pod_set in enumerate(sets):
            if not isinstance(pod_set.get("count"), int) or pod_set["count"] < 1:
                return f"spec.podSets[{index}].count: Invalid value: must be at least 1"
            if not (pod_set.get("podTemplateRef") or {}).get("name"):
                return f"spec.podSets[{index}].podTemplateRef.name: Required value"
    if kind == "RayJob":
        cluster = (body.get("spec") or {}).get("rayClusterSpec")
        if not isinstance(cluster, dict) or not isinstance(cluster.get("headGroupSpec"), dict):
            return "spec.rayClusterSpec.headGroupSpec: Required value"
        if not (cluster["headGroupSpec"].get("template") or {}).get("spec", {}).get("containers"):
            return "spec.rayClusterSpec.headGroupSpec.template.spec.containers: Required value"
        for index, group in enumerate(cluster.get("workerGroupSpecs") or []):
            if not group.get("groupName"):
                return f"spec.rayClusterSpec.workerGroupSpecs[{index}].groupName: Required value"
        if len(name) > MAX_RAYJOB_NAME:
            return f"metadata.name: Too long: may not be longer than {MAX_RAYJOB_NAME}"
    return ""


def garbage_collect(kube: KubeServer, uid: str) -> None:
    """What the garbage collector deletes with the object ``uid``: the custom objects it owns (its Workload) and
    the Jobs it owns (a RayJob's submitter), with their pods."""
    for key, job in list(kube.jobs.items()):
        if any(o.get("uid") == uid for o in job["metadata"].get("ownerReferences") or []):
            del kube.jobs[key]
            garbage_collect(kube, job["metadata"]["uid"])
    for key, pod in list(kube.pods.items()):
        if any(o.get("uid") == uid for o in pod["metadata"].get("ownerReferences") or []):
            del kube.pods[key]
    for store in kube.custom.values():
        for key, obj in list(store.items()):
            if any(o.get("uid") == uid for o in obj["metadata"].get("ownerReferences") or []):
                del store[key]
