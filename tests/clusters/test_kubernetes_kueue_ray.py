"""Kueue as a partner and Ray jobs as KubeRay RayJobs: the Kubernetes backend through the official client
against the local API server with Kueue's and KubeRay's resources and controller steps (kube_crds.py)."""

from __future__ import annotations

import json

import pytest

from clusters.backends.base import DryRun, Failure, InvalidJob, JobState, NotFound, Refused
from clusters.backends.kubernetes.backend import KubernetesBackend
from clusters.backends.kubernetes.jobs import JOB_ID_ANNOTATION, KUEUE_QUEUE_LABEL
from clusters.backends.kubernetes.rayjobs import DEFAULT_RAY_IMAGE
from tests.clusters import kube_crds
from tests.clusters.kube_server import TOKEN, KubeServer, waiting
from tests.clusters.test_kubernetes_backend import spec as base_spec

NS = "research"
GPU = "nvidia.com/gpu"


@pytest.fixture
def kube():
    with KubeServer() as server:
        yield server


@pytest.fixture
def kueue_cluster(kube):
    """Kueue set up as an admin would: flavor h100 (its nodes labelled pool=h100), ClusterQueue cq-research
    with 16 GPUs of it, LocalQueues lq-nlp and lq-vision in the namespace."""
    kube_crds.add_flavor(kube, "h100", {"pool": "h100"})
    kube_crds.add_cluster_queue(kube, "cq-research", {"h100": {"cpu": "400", "memory": "4Ti", GPU: "16"}})
    kube_crds.add_local_queue(kube, NS, "lq-nlp", "cq-research")
    kube_crds.add_local_queue(kube, NS, "lq-vision", "cq-research")
    return kube


def backend(kube, *, dry_run=False, **options):
    return KubernetesBackend(kube.url, {"token": TOKEN}, {"namespace": NS, **options}, dry_run=dry_run, timeout=5.0)


def kueue_backend(kube, **options):
    return backend(kube, kueue=True, local_queues={"nlp": "lq-nlp", "vision": "lq-vision"}, **options)


def spec(job_id="42", **overrides):
    """The Kubernetes tests' job, from the team nlp's queue and with no LocalQueue of its own."""
    values = {"env": {}, "queue": "", "team": "nlp", "team_queue": "nlp", **overrides}
    return base_spec(job_id, **values)


def ray_spec(job_id="42", **overrides):
    values = {
        "kind": "ray",
        "image": "",
        "command": (),
        "entrypoint": "python rl.py --iterations 3",
        "runtime_env": {"pip": ["gymnasium==1.0.0"], "env_vars": {"SEED": "7"}},
        "head": (0, 4000, 16384),
        "head_node": "cpu-a",
        "env": {"QM_JOB_TOKEN": "t0k"},
    }
    return spec(job_id, **{**values, **overrides})


def started(kube, name):
    """The kubelet runs every pod of the Job on the nodes Kueue's flavor allows (h100-a, h100-b)."""
    with kube.lock:
        for index, node in enumerate(("h100-a", "h100-b")):
            kube.add_job_pod(NS, name, index, node)


def uid_of(kube, name):
    return kube.jobs[(NS, name)]["metadata"]["uid"]


# ---------------------------------------------------------------------------------------- which LocalQueue


def test_the_local_queue_comes_from_the_jobs_quartermaster_queue(kueue_cluster):
    cluster = kueue_backend(kueue_cluster, local_queue="lq-default")
    nlp = cluster.submit(spec("1"))
    vision = cluster.submit(spec("2", team_queue="vision"))
    other = cluster.submit(spec("3", team_queue="speech"))  # not mapped: the cluster's local_queue
    labels = {
        name: kueue_cluster.jobs[(NS, name)]["metadata"]["labels"][KUEUE_QUEUE_LABEL] for name in (nlp, vision, other)
    }
    assert labels == {nlp: "lq-nlp", vision: "lq-vision", other: "lq-default"}


def test_a_queue_nothing_maps_is_refused_before_anything_is_sent(kueue_cluster):
    with pytest.raises(InvalidJob, match=r"local_queues \(for queue speech\) nor its option local_queue"):
        kueue_backend(kueue_cluster).submit(spec(team_queue="speech"))
    assert kueue_cluster.mutations() == []


def test_in_kueue_mode_nothing_is_pinned_and_the_job_waits_suspended(kueue_cluster):
    name = kueue_backend(kueue_cluster).submit(spec())
    job = kueue_cluster.jobs[(NS, name)]
    pod = job["spec"]["template"]["spec"]
    assert job["spec"]["suspend"] is True
    assert "nodeSelector" not in pod
    assert "affinity" not in pod
    assert "topologySpreadConstraints" not in pod
    assert pod["containers"][0]["resources"]["limits"] == {GPU: "8"}
    # Outside Kueue the same job is pinned to the engine's nodes.
    pinned = backend(kueue_cluster).submit(spec("43"))
    affinity = kueue_cluster.jobs[(NS, pinned)]["spec"]["template"]["spec"]["affinity"]
    terms = affinity["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    assert terms[0]["matchExpressions"][0]["values"] == ["h100-a", "h100-b"]


# ------------------------------------------------------------------------------------------ Kueue's words


def test_kueue_admits_on_the_cluster_quartermaster_chose_and_the_pods_say_the_rest(kueue_cluster):
    cluster = kueue_backend(kueue_cluster)
    name = cluster.submit(spec())
    kube_crds.kueue_step(kueue_cluster)
    (workload,) = kube_crds.workloads(kueue_cluster)
    assert workload["metadata"]["name"].startswith(f"job-{name}-")
    assert workload["metadata"]["labels"] == {kube_crds.JOB_UID_LABEL: uid_of(kueue_cluster, name)}
    assert workload["metadata"]["ownerReferences"][0]["kind"] == "Job"
    admission = workload["status"]["admission"]
    assert admission["clusterQueue"] == "cq-research"
    assert admission["podSetAssignments"][0]["resourceUsage"][GPU] == "16"
    job = kueue_cluster.jobs[(NS, name)]
    assert job["spec"]["suspend"] is False
    assert job["spec"]["template"]["spec"]["nodeSelector"] == {"pool": "h100"}  # the flavor's nodes

    status = cluster.status(name)
    assert (status.state, status.reason) == (JobState.PENDING, "")
    assert status.message == "no pods yet"
    started(kueue_cluster, name)
    status = cluster.status(name)
    assert (status.state, status.workers_running) == (JobState.RUNNING, 2)


def test_a_job_kueue_cannot_admit_is_pending_with_kueues_words(kueue_cluster):
    cluster = kueue_backend(kueue_cluster)
    first = cluster.submit(spec("1"))
    second = cluster.submit(spec("2", team_queue="vision"))  # the same ClusterQueue: 16 GPUs in all
    kube_crds.kueue_step(kueue_cluster)
    assert kueue_cluster.jobs[(NS, first)]["spec"]["suspend"] is False
    status = cluster.status(second)
    assert (status.state, status.workers_running) == (JobState.PENDING, 0)
    assert status.message == (
        "Kueue: couldn't assign flavors to pod set main: insufficient unused quota for nvidia.com/gpu in flavor "
        "h100, 16 more needed"
    )
    assert kueue_cluster.jobs[(NS, second)]["spec"]["suspend"] is True
    # The first one finishes: Kueue marks its Workload Finished, and the second fits.
    with kueue_cluster.lock:
        kueue_cluster.jobs[(NS, first)]["status"] = {
            "succeeded": 2,
            "conditions": [{"type": "Complete", "status": "True", "reason": "CompletionsReached"}],
        }
    kube_crds.kueue_step(kueue_cluster)
    assert cluster.status(first).state is JobState.SUCCEEDED
    finished = kube_crds.workload_of(kueue_cluster, uid_of(kueue_cluster, first))
    assert finished is not None
    assert finished["status"]["conditions"][-1]["type"] == "Finished"
    kube_crds.kueue_step(kueue_cluster)
    assert kueue_cluster.jobs[(NS, second)]["spec"]["suspend"] is False
    assert cluster.status(second).message == "no pods yet"


def test_a_job_larger_than_the_cluster_queue_says_so(kueue_cluster):
    cluster = kueue_backend(kueue_cluster)
    name = cluster.submit(spec(workers=3, nodes=()))
    kube_crds.kueue_step(kueue_cluster)
    assert cluster.status(name).message == (
        "Kueue: couldn't assign flavors to pod set main: insufficient quota for nvidia.com/gpu in flavor h100, "
        "previously considered podsets requests (0) + current podset request (24) > maximum capacity (16)"
    )


def test_a_local_queue_that_does_not_exist_leaves_the_job_pending_with_kueues_words(kueue_cluster):
    cluster = backend(kueue_cluster, kueue=True, local_queue="lq-typo")
    name = cluster.submit(spec())
    kube_crds.kueue_step(kueue_cluster)
    status = cluster.status(name)
    assert (status.state, status.reason) == (JobState.PENDING, "")
    assert status.message == "Kueue: LocalQueue lq-typo doesn't exist"
    assert kueue_cluster.jobs[(NS, name)]["spec"]["suspend"] is True


@pytest.mark.parametrize(
    ("reason", "message", "state", "failure"),
    [
        (
            "Preempted",
            "Preempted to accommodate a workload (UID: 7f3c, JobUID: 91ab) due to prioritization in the ClusterQueue",
            JobState.PENDING,
            Failure.PREEMPTED,
        ),
        ("PodsReadyTimeout", "Exceeded the PodsReady timeout research/job-x", JobState.PENDING, Failure.PREEMPTED),
        ("ClusterQueueStopped", "The ClusterQueue is stopped", JobState.PENDING, Failure.PREEMPTED),
        ("Deactivated", "The workload is deactivated", JobState.CANCELLED, ""),
        ("InactiveWorkload", "The workload is deactivated", JobState.CANCELLED, ""),
    ],
)
def test_an_eviction_is_read_back_with_kueues_reason_and_words(kueue_cluster, reason, message, state, failure):
    cluster = kueue_backend(kueue_cluster)
    name = cluster.submit(spec())
    kube_crds.kueue_step(kueue_cluster)
    started(kueue_cluster, name)
    assert cluster.status(name).state is JobState.RUNNING
    kube_crds.kueue_evict(kueue_cluster, uid_of(kueue_cluster, name), reason, message)
    job = kueue_cluster.jobs[(NS, name)]
    assert job["spec"]["suspend"] is True  # Kueue stopped it: suspended, its pods gone, its selector taken back
    assert "nodeSelector" not in job["spec"]["template"]["spec"]
    assert not [p for (_, p) in kueue_cluster.pods if p.startswith(name)]
    status = cluster.status(name)
    assert (status.state, status.reason) == (state, failure)
    assert status.message == f"Kueue evicted it ({reason}): {message}"
    assert status.exit_code is None
    kube_crds.kueue_step(kueue_cluster)  # Kueue requeued it itself, unless deactivated
    assert job["spec"]["suspend"] is (state is JobState.CANCELLED)


def test_without_kueues_resources_the_jobs_own_words_stand(kueue_cluster):
    kueue_cluster.kueue_installed = False  # no CRDs here (or a token that may not read them)
    cluster = kueue_backend(kueue_cluster)
    name = cluster.submit(spec())
    status = cluster.status(name)
    assert status.state is JobState.PENDING
    assert status.message == "waiting for Kueue admission (suspended in LocalQueue lq-nlp)"


def test_cancelling_deletes_the_job_and_kueue_forgets_its_workload(kueue_cluster):
    cluster = kueue_backend(kueue_cluster)
    name = cluster.submit(spec())
    kube_crds.kueue_step(kueue_cluster)
    cluster.cancel(name)
    assert kube_crds.workloads(kueue_cluster) == []


# ------------------------------------------------------------------------------------------------- RayJobs


def test_a_ray_job_becomes_one_rayjob_placed_as_a_gang(kube):
    cluster = backend(kube)
    backend_id = cluster.submit(ray_spec())
    assert backend_id == "rayjob/qm-42"
    rayjob = kube_crds.rayjob(kube, NS, "qm-42")
    assert (rayjob["apiVersion"], rayjob["kind"]) == ("ray.io/v1", "RayJob")
    assert rayjob["metadata"]["annotations"][JOB_ID_ANNOTATION] == "42"
    spec_ = rayjob["spec"]
    assert spec_["entrypoint"] == "python rl.py --iterations 3"
    assert json.loads(spec_["runtimeEnvYAML"]) == {"env_vars": {"SEED": "7"}, "pip": ["gymnasium==1.0.0"]}
    assert spec_["shutdownAfterJobFinishes"] is True
    assert spec_["activeDeadlineSeconds"] == 3600
    assert "suspend" not in spec_

    head = spec_["rayClusterSpec"]["headGroupSpec"]["template"]["spec"]
    assert head["nodeSelector"] == {"kubernetes.io/hostname": "cpu-a"}  # where the engine put the head
    (container,) = head["containers"]
    assert container["image"] == DEFAULT_RAY_IMAGE
    assert container["resources"] == {"requests": {"cpu": "4000m", "memory": "16384Mi"}}
    assert {"name": "QM_JOB_TOKEN", "value": "t0k"} in container["env"]

    (group,) = spec_["rayClusterSpec"]["workerGroupSpecs"]
    assert (group["groupName"], group["replicas"], group["minReplicas"], group["maxReplicas"]) == ("workers", 2, 2, 2)
    worker = group["template"]["spec"]
    assert worker["containers"][0]["resources"]["limits"] == {GPU: "8"}
    terms = worker["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    assert terms[0]["matchExpressions"][0]["values"] == ["h100-a", "h100-b"]
    assert worker["topologySpreadConstraints"][0]["labelSelector"]["matchLabels"]["ray.io/node-type"] == "worker"


def test_a_ray_jobs_image_and_head_follow_the_job_and_the_cluster(kube):
    cluster = backend(kube, ray_image="registry.lab/ray:2.49-cu12")
    cluster.submit(ray_spec("1", head_node=""))
    head = kube_crds.rayjob(kube, NS, "qm-1")["spec"]["rayClusterSpec"]["headGroupSpec"]["template"]["spec"]
    assert "nodeSelector" not in head  # the engine placed no head: Kubernetes chooses
    assert head["containers"][0]["image"] == "registry.lab/ray:2.49-cu12"
    cluster.submit(ray_spec("2", image="ghcr.io/acme/rl:3"))
    head = kube_crds.rayjob(kube, NS, "qm-2")["spec"]["rayClusterSpec"]["headGroupSpec"]["template"]["spec"]
    assert head["containers"][0]["image"] == "ghcr.io/acme/rl:3"


def test_submitting_a_ray_job_is_idempotent(kube):
    cluster = backend(kube)
    first = cluster.submit(ray_spec())
    assert cluster.submit(ray_spec()) == first
    assert len(kube.custom["rayjobs"]) == 1
    assert cluster.find("42") == first
    assert cluster.find("43") is None
    with kube.lock:
        kube_crds.rayjob(kube, NS, "qm-42")["metadata"]["annotations"][JOB_ID_ANNOTATION] = "someone-else"
    with pytest.raises(Refused, match="RayJob named qm-42 already exists"):
        cluster.submit(ray_spec())


def test_a_ray_job_through_its_life(kube):
    cluster = backend(kube)
    backend_id = cluster.submit(ray_spec())
    status = cluster.status(backend_id)
    assert (status.state, status.message) == (JobState.PENDING, "RayJob not started by KubeRay yet")

    kube_crds.ray_start(kube, NS, "qm-42", nodes={})  # pods made, none bound yet
    status = cluster.status(backend_id)
    assert (status.state, status.workers_running) == (JobState.PENDING, 0)
    assert status.message == "RayJob starting its Ray cluster"

    with kube.lock:
        for pod in kube.pods.values():
            if pod["metadata"].get("labels", {}).get("ray.io/cluster", "").startswith("qm-42-"):
                node = "cpu-a" if pod["metadata"]["labels"]["ray.io/node-type"] == "head" else "h100-a"
                pod["spec"]["nodeName"], pod["status"] = node, {"phase": "Running"}
    assert cluster.status(backend_id).workers_running == 2

    kube_crds.ray_run(kube, NS, "qm-42")
    status = cluster.status(backend_id)
    assert (status.state, status.workers_running) == (JobState.RUNNING, None)
    assert status.nodes == ("cpu-a", "h100-a")
    cluster_name = kube_crds.rayjob(kube, NS, "qm-42")["status"]["rayClusterName"]
    assert status.dashboard_url == f"http://{cluster_name}-head-svc.research.svc.cluster.local:8265"

    kube_crds.ray_finish(kube, NS, "qm-42", exit_code=3)
    status = cluster.status(backend_id)
    assert (status.state, status.reason, status.exit_code) == (JobState.FAILED, Failure.EXIT_CODE, 3)
    assert status.message == (
        "AppFailed: Job entrypoint command failed with exit code 3, last available logs (truncated to 20,000 chars):"
    )
    assert not [p for (_, p) in kube.pods if p.startswith(cluster_name)]  # shutdownAfterJobFinishes


def test_a_ray_job_that_succeeds_or_runs_out_of_time(kube):
    cluster = backend(kube)
    for job_id, finish, state, reason in (
        ("1", {"exit_code": 0}, JobState.SUCCEEDED, ""),
        ("2", {"reason": "DeadlineExceeded"}, JobState.FAILED, Failure.TIME_LIMIT),
    ):
        backend_id = cluster.submit(ray_spec(job_id))
        kube_crds.ray_start(kube, NS, f"qm-{job_id}")
        kube_crds.ray_run(kube, NS, f"qm-{job_id}")
        kube_crds.ray_finish(kube, NS, f"qm-{job_id}", **finish)
        status = cluster.status(backend_id)
        assert (status.state, status.reason) == (state, reason)


def test_a_ray_cluster_whose_image_cannot_be_pulled_will_not_start(kube):
    cluster = backend(kube)
    backend_id = cluster.submit(ray_spec(image="ghcr.io/acme/nope:1"))
    kube_crds.ray_start(kube, NS, "qm-42")
    with kube.lock:
        head = next(p for p in kube.pods.values() if p["metadata"].get("labels", {}).get("ray.io/node-type") == "head")
        head["status"] = waiting("ErrImagePull", "manifest unknown", image="ghcr.io/acme/nope:1")
    status = cluster.status(backend_id)
    assert (status.state, status.reason) == (JobState.PENDING, Failure.IMAGE_PULL)
    assert "manifest unknown" in status.message


def test_cancel_deletes_the_rayjob_and_its_ray_cluster(kube):
    cluster = backend(kube)
    backend_id = cluster.submit(ray_spec())
    kube_crds.ray_start(kube, NS, "qm-42")
    assert backend(kube, dry_run=True).cancel(backend_id) == DryRun("cancel", backend_id, {"namespace": NS})
    assert cluster.cancel(backend_id) is None
    assert kube.deleted_custom[-1]["metadata"]["deletedWith"] == "Background"
    assert not [p for (_, p) in kube.pods if p.startswith("qm-42-")]
    with pytest.raises(NotFound, match=r'rayjobs\.ray\.io "qm-42" not found'):
        cluster.status(backend_id)
    assert cluster.find("42") is None


def test_a_ray_job_is_checked_before_anything_is_sent(kube):
    with pytest.raises(InvalidJob, match="needs an entrypoint"):
        backend(kube).submit(ray_spec(entrypoint=" "))
    dry = backend(kube, dry_run=True).submit(ray_spec())
    assert isinstance(dry, DryRun)
    assert dry.detail["rayjob"]["spec"]["entrypoint"] == "python rl.py --iterations 3"
    assert kube.mutations() == []


def test_a_cluster_without_kuberay_refuses_ray_jobs_for_good(kube):
    kube.kuberay_installed = False
    with pytest.raises(InvalidJob, match="is KubeRay installed"):
        backend(kube).submit(ray_spec())


def test_in_kueue_mode_a_rayjob_waits_suspended_and_kueue_admits_head_and_workers_together(kueue_cluster):
    cluster = kueue_backend(kueue_cluster)
    backend_id = cluster.submit(ray_spec())
    rayjob = kube_crds.rayjob(kueue_cluster, NS, "qm-42")
    assert rayjob["spec"]["suspend"] is True
    assert rayjob["metadata"]["labels"][KUEUE_QUEUE_LABEL] == "lq-nlp"
    cluster_spec = rayjob["spec"]["rayClusterSpec"]
    assert "nodeSelector" not in cluster_spec["headGroupSpec"]["template"]["spec"]
    assert "affinity" not in cluster_spec["workerGroupSpecs"][0]["template"]["spec"]
    kube_crds.ray_start(kueue_cluster, NS, "qm-42")  # KubeRay: suspended
    assert cluster.status(backend_id).message == "Kueue: waiting for Kueue to create its Workload (LocalQueue lq-nlp)"

    kube_crds.kueue_step(kueue_cluster)
    (workload,) = kube_crds.workloads(kueue_cluster)
    assert [p["name"] for p in workload["spec"]["podSets"]] == ["head", "workers"]
    assert [a["count"] for a in workload["status"]["admission"]["podSetAssignments"]] == [1, 2]
    rayjob = kube_crds.rayjob(kueue_cluster, NS, "qm-42")
    assert rayjob["spec"]["suspend"] is False
    assert rayjob["spec"]["rayClusterSpec"]["workerGroupSpecs"][0]["template"]["spec"]["nodeSelector"] == {
        "pool": "h100"
    }
    # KubeRay goes on from Suspended once unsuspended.
    with kueue_cluster.lock:
        rayjob["status"] = {}
    kube_crds.ray_start(kueue_cluster, NS, "qm-42")
    kube_crds.ray_run(kueue_cluster, NS, "qm-42")
    assert cluster.status(backend_id).state is JobState.RUNNING
