"""The Kubernetes backend through the official client against a faithful local API server (kube_server.py)."""

from __future__ import annotations

import ipaddress
import json
import re
import socket
import ssl
from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest

from clusters.backends.base import (
    RECLAIM,
    AuthenticationFailed,
    BackendError,
    BadResponse,
    DryRun,
    Failure,
    InvalidJob,
    JobSpec,
    JobState,
    NotFound,
    Refused,
    Unreachable,
    permanent,
)
from clusters.backends.kinds import load
from clusters.backends.kubernetes.backend import KubernetesBackend
from clusters.backends.kubernetes.jobs import JOB_ID_ANNOTATION, KUEUE_QUEUE_LABEL, job_name
from clusters.backends.kubernetes.nodes import parse_quantity
from tests.clusters.kube_server import (
    READONLY_TOKEN,
    TOKEN,
    ApiError,
    KubeServer,
    disrupted,
    terminated,
    unschedulable,
    waiting,
)

NOW = datetime(2026, 11, 21, 12, 0, tzinfo=UTC)
NS = "research"


@pytest.fixture
def kube():
    with KubeServer() as server:
        yield server


def backend(kube, *, token=TOKEN, dry_run=False, **options):
    return KubernetesBackend(kube.url, {"token": token}, {"namespace": NS, **options}, dry_run=dry_run, timeout=5.0)


def spec(job_id="42", **overrides):
    values = {
        "id": job_id,
        "name": "llama-finetune",
        "workers": 2,
        "accelerators_per_worker": 8,
        "cpu_per_worker": 96000,
        "memory_per_worker": 512 * 1024,
        "nodes": ("h100-a", "h100-b"),
        "time_limit": 3600,
        "image": "ghcr.io/acme/train:1.4",
        "command": ("torchrun", "train.py"),
        "env": {"EPOCHS": "3"},
        "queue": "team-nlp",
    }
    return JobSpec(**{**values, **overrides})


def test_loaded_lazily_by_kind():
    assert load("kubernetes") is KubernetesBackend


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("500m", "0.5"),
        ("64", "64"),
        ("256Gi", str(256 * 2**30)),
        ("1000Ki", "1024000"),
        ("128G", "128e9"),
        ("1e3", "1000"),
        ("2Ti", str(2 * 2**40)),
    ],
)
def test_quantities(text, value):
    assert parse_quantity(text) == Decimal(value)


def test_inventory_maps_quantities_labels_and_readiness(kube):
    inventory = backend(kube).inventory()
    nodes = {node.name: node for node in inventory.nodes}
    assert sorted(nodes) == ["a100-a", "cpu-a", "h100-a", "h100-b", "tpu-a"]

    h100 = nodes["h100-a"]
    assert (h100.accelerator, h100.accelerators, h100.accelerators_allocatable) == ("NVIDIA-H100-80GB-HBM3", 8, 8)
    assert (h100.cpu, h100.cpu_allocatable) == (192_000, 191_500)
    assert (h100.memory, h100.memory_allocatable) == (2 * 1024 * 1024, 2_096_128)  # 2Ti; 2146435072Ki
    assert dict(h100.topology) == {"zone": "eu-west-1a", "block": "b1", "rack": "r01"}
    assert h100.ready
    assert h100.schedulable
    assert h100.labels["nvidia.com/gpu.family"] == "hopper"
    assert h100.heartbeat is not None
    assert h100.heartbeat.tzinfo is not None
    # where it is reached: its status.addresses, in the API's order (a replica may report only these)
    assert h100.addresses[0].startswith("10.0.0.")
    assert h100.addresses[1:] == ("h100-a",)

    # In use: what the bound, unfinished pods request (the notebook's init container counts as its 4 cores).
    assert (h100.accelerators_used, h100.cpu_used, h100.memory_used) == (
        4,
        48_000 + 4_000 + 100 + 100 + 500,
        262_144 + 8_192 + 64 + 1_024,
    )
    assert (nodes["h100-b"].accelerators_used, nodes["h100-b"].cpu_used) == (4, 48_000)
    assert (nodes["cpu-a"].accelerators_used, nodes["cpu-a"].cpu_used, nodes["cpu-a"].memory_used) == (0, 0, 0)

    cordoned = nodes["h100-b"]
    assert not cordoned.schedulable
    assert cordoned.ready
    assert cordoned.accelerators_allocatable == 7

    down = nodes["a100-a"]
    assert not down.ready
    assert (down.accelerator, down.accelerators) == ("NVIDIA-A100-SXM4-40GB", 4)
    assert (down.cpu, down.memory, down.memory_allocatable) == (64_000, 256 * 1024, 250 * 1024)
    assert dict(down.topology) == {"zone": "eu-west-1b", "block": "pg-7", "rack": "r11"}

    cpu = nodes["cpu-a"]
    assert (cpu.accelerator, cpu.accelerators) == ("", 0)
    assert (cpu.cpu_allocatable, cpu.memory) == (31_750, 122_070)  # 128e9 bytes, in whole MiB
    assert dict(cpu.topology) == {"zone": "eu-west-1b"}

    tpu = nodes["tpu-a"]
    assert (tpu.accelerator, tpu.accelerators, tpu.accelerators_allocatable) == ("tpu-v5p-slice", 4, 4)

    models = {a.model: a for a in inventory.accelerators}
    assert set(models) == {"NVIDIA-H100-80GB-HBM3", "NVIDIA-A100-SXM4-40GB", "tpu-v5p-slice"}
    assert (models["NVIDIA-H100-80GB-HBM3"].memory_gib, models["NVIDIA-H100-80GB-HBM3"].generation) == (79, "hopper")


def test_inventory_pages_through_large_clusters(kube, monkeypatch):
    whole = {node.name: node for node in backend(kube).inventory().nodes}
    kube.requests.clear()
    monkeypatch.setattr("clusters.backends.kubernetes.backend.PAGE", 2)
    paged = {node.name: node for node in backend(kube).inventory().nodes}
    assert paged == whole
    assert [path for _method, path, *_ in kube.requests if "nodes" in path] == [
        "/api/v1/nodes?limit=2",
        "/api/v1/nodes?continue=2&limit=2",
        "/api/v1/nodes?continue=4&limit=2",
    ]
    assert len([path for _method, path, *_ in kube.requests if "/pods" in path]) == 3  # 6 pods in use, 2 a page


def test_a_pod_asking_for_nonsense_is_bad_response(kube):
    kube.pods[("serving", "web-0")]["spec"]["containers"][0]["resources"]["requests"]["cpu"] = "half"
    with pytest.raises(BadResponse, match=r"pod serving/web-0: requests\[cpu\] is 'half'"):
        backend(kube).inventory()


def test_gpu_count_from_feature_discovery_before_the_device_plugin_registers(kube):
    status = kube.nodes["h100-a"]["status"]
    del status["capacity"]["nvidia.com/gpu"], status["allocatable"]["nvidia.com/gpu"]
    node = next(n for n in backend(kube).inventory().nodes if n.name == "h100-a")
    assert (node.accelerator, node.accelerators, node.accelerators_allocatable) == ("NVIDIA-H100-80GB-HBM3", 8, 0)


def test_topology_labels_are_options(kube):
    node = next(n for n in backend(kube, rack_label="nvidia.com/gpu.family").inventory().nodes if n.name == "h100-a")
    assert node.topology["rack"] == "hopper"
    listed = backend(kube, block_label=["no/such-label", "topology.kubernetes.io/rack"]).inventory().nodes
    assert next(n for n in listed if n.name == "h100-a").topology["block"] == "r01"  # the first label present


def test_cordon_and_resume_round_trip(kube):
    cluster = backend(kube)
    assert cluster.cordon("h100-a", "GPU 3 XID 79") is None
    node = kube.nodes["h100-a"]
    assert node["spec"]["unschedulable"] is True
    assert node["metadata"]["annotations"]["quartermaster.io/cordon-reason"] == "GPU 3 XID 79"
    assert node["metadata"]["annotations"]["node.alpha.kubernetes.io/ttl"] == "0"  # merged, not replaced
    method, _path, content_type, _body = kube.mutations()[-1]
    assert (method, content_type) == ("PATCH", "application/strategic-merge-patch+json")
    assert not next(n for n in cluster.inventory().nodes if n.name == "h100-a").schedulable

    assert cluster.resume("h100-a") is None
    node = kube.nodes["h100-a"]
    assert "unschedulable" not in node["spec"]
    assert "quartermaster.io/cordon-reason" not in node["metadata"]["annotations"]
    assert next(n for n in cluster.inventory().nodes if n.name == "h100-a").schedulable


def test_cordon_unknown_node_is_not_found(kube):
    with pytest.raises(NotFound, match='nodes "h100-z" not found'):
        backend(kube).cordon("h100-z", "why")


def test_drain_evicts_but_skips_daemonsets_and_mirrors_and_names_the_pdb_protected_pod(kube):
    with pytest.raises(Refused) as refused:
        backend(kube).drain("h100-a", "rack maintenance")
    assert "serving/web-0" in str(refused.value)
    assert "disruption budget web-pdb" in str(refused.value)

    assert kube.nodes["h100-a"]["spec"]["unschedulable"] is True
    left = sorted(f"{ns}/{name}" for (ns, name), pod in kube.pods.items() if pod["spec"]["nodeName"] == "h100-a")
    assert left == [
        "kube-system/kube-proxy-h100-a",  # mirror pod
        "kube-system/nvidia-device-plugin-h100a",  # DaemonSet
        "research/finished",  # already done
        "serving/web-0",  # its budget allows no disruption
    ]
    assert ("research", "train-1") in kube.pods  # on another node
    evictions = [path for method, path, *_ in kube.mutations() if path.endswith("/eviction")]
    assert evictions == [
        "/api/v1/namespaces/research/pods/notebook/eviction",
        "/api/v1/namespaces/research/pods/train-0/eviction",
        "/api/v1/namespaces/serving/pods/web-0/eviction",
    ]


def test_drain_of_a_node_without_protected_pods_succeeds(kube):
    assert backend(kube).drain("h100-b", "swap") is None
    assert ("research", "train-1") not in kube.pods


def test_submit_creates_an_indexed_job_pinned_to_its_nodes(kube):
    name = backend(kube).submit(spec())
    assert name == "qm-42"
    job = kube.jobs[(NS, name)]
    assert job["metadata"]["annotations"][JOB_ID_ANNOTATION] == "42"
    job_spec = job["spec"]
    assert (job_spec["completionMode"], job_spec["completions"], job_spec["parallelism"]) == ("Indexed", 2, 2)
    assert job_spec["activeDeadlineSeconds"] == 3600
    assert job_spec["suspend"] is False
    pod = job_spec["template"]["spec"]
    container = pod["containers"][0]
    assert container["image"] == "ghcr.io/acme/train:1.4"
    assert container["command"] == ["torchrun", "train.py"]
    assert {"name": "EPOCHS", "value": "3"} in container["env"]
    assert container["resources"] == {
        "requests": {"cpu": "96000m", "memory": "524288Mi", "nvidia.com/gpu": "8"},
        "limits": {"nvidia.com/gpu": "8"},
    }
    terms = pod["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    assert terms == [
        {"matchExpressions": [{"key": "kubernetes.io/hostname", "operator": "In", "values": ["h100-a", "h100-b"]}]}
    ]
    (spread,) = pod["topologySpreadConstraints"]
    assert (spread["maxSkew"], spread["whenUnsatisfiable"]) == (1, "DoNotSchedule")
    assert KUEUE_QUEUE_LABEL not in job["metadata"]["labels"]


def test_submit_on_one_node_uses_a_node_selector(kube):
    name = backend(kube).submit(spec(workers=2, accelerators_per_worker=4, nodes=("h100-a", "h100-a")))
    pod = kube.jobs[(NS, name)]["spec"]["template"]["spec"]
    assert pod["nodeSelector"] == {"kubernetes.io/hostname": "h100-a"}
    assert "affinity" not in pod


def test_submit_is_idempotent(kube):
    cluster = backend(kube)
    assert cluster.submit(spec()) == cluster.submit(spec()) == "qm-42"
    assert list(kube.jobs) == [(NS, "qm-42")]
    assert list(_post_statuses(kube)) == ["jobs", "jobs"]  # the second POST was answered 409


def _post_statuses(kube):
    return [path.rsplit("/", 1)[-1] for method, path, *_ in kube.mutations() if method == "POST"]


def test_submit_refuses_a_same_named_job_of_another_id(kube):
    backend(kube).submit(spec())
    kube.jobs[(NS, "qm-42")]["metadata"]["annotations"][JOB_ID_ANNOTATION] = "someone-else"
    with pytest.raises(Refused, match="was not created for Quartermaster job 42"):
        backend(kube).submit(spec())


def test_job_names_are_dns_safe_and_distinct():
    assert job_name("42") == "qm-42"
    odd = job_name("Team_NLP/Run#7")
    assert odd.startswith("qm-team-nlp-run-7-")
    assert odd == job_name("Team_NLP/Run#7")
    assert job_name("team-nlp-run-7") != odd
    long = job_name("x" * 200)
    assert len(long) <= 52
    assert long != job_name("x" * 199)


def test_kueue_mode_labels_and_suspends(kube):
    name = backend(kube, kueue=True).submit(spec())
    job = kube.jobs[(NS, name)]
    assert job["metadata"]["labels"][KUEUE_QUEUE_LABEL] == "team-nlp"
    assert job["spec"]["suspend"] is True
    status = backend(kube, kueue=True).status(name)
    assert status.state is JobState.PENDING
    assert "Kueue" in status.message


def test_options_are_read_strictly(kube):
    assert backend(kube, kueue="true")._flag("kueue")
    assert not backend(kube, kueue="false")._flag("kueue")
    with pytest.raises(BackendError, match="option kueue is 'ture'"):
        backend(kube, kueue="ture").submit(spec())
    with pytest.raises(BackendError, match="option heartbeat_stale_seconds is 'soon'"):
        backend(kube, heartbeat_stale_seconds="soon").health()
    with pytest.raises(BackendError, match="option rack_label is 7"):
        backend(kube, rack_label=7).inventory()
    assert kube.mutations() == []


def test_kueue_mode_needs_a_queue(kube):
    with pytest.raises(InvalidJob, match="local_queue"):
        backend(kube, kueue=True).submit(spec(queue=""))
    assert kube.mutations() == []


def test_kueue_mode_takes_the_clusters_local_queue_when_the_job_names_none(kube):
    name = backend(kube, kueue=True, local_queue="lq-research").submit(spec(queue=""))
    assert kube.jobs[(NS, name)]["metadata"]["labels"][KUEUE_QUEUE_LABEL] == "lq-research"
    # the job's own queue comes first
    other = backend(kube, kueue=True, local_queue="lq-research").submit(spec("43"))
    assert kube.jobs[(NS, other)]["metadata"]["labels"][KUEUE_QUEUE_LABEL] == "team-nlp"
    status = backend(kube, kueue=True).status(name)
    assert (status.state, status.reason) == (JobState.PENDING, "")
    assert status.message == "Kueue: waiting for Kueue to create its Workload (LocalQueue lq-research)"


def test_a_job_without_an_image_is_invalid_before_anything_is_sent(kube):
    with pytest.raises(InvalidJob, match="names no image"):
        backend(kube).submit(spec(image=""))
    assert kube.mutations() == []


def _refuse_jobs(kube, error):
    body = json.dumps(error.status()).encode()
    kube.canned[("POST", f"/apis/batch/v1/namespaces/{NS}/jobs")] = (error.code, "application/json", body)


@pytest.mark.parametrize(
    ("error", "raised", "words"),
    [
        (
            ApiError(422, "Invalid", 'Job.batch "qm-42" is invalid: spec.template.spec.containers[0].image: Required'),
            InvalidJob,
            "refused job qm-42 as invalid: Job.batch",
        ),
        (ApiError(400, "BadRequest", "the body must be a batch/v1 Job"), InvalidJob, "as invalid"),
        (ApiError(404, "NotFound", f'namespaces "{NS}" not found'), InvalidJob, f'namespaces "{NS}" not found'),
        (
            ApiError(
                403,
                "Forbidden",
                'admission webhook "validate.kyverno.svc" denied the request: images must come from registry.acme',
            ),
            InvalidJob,
            "an admission policy refused job qm-42: admission webhook",
        ),
        (
            ApiError(
                403,
                "Forbidden",
                "jobs.batch \"qm-42\" is forbidden: ValidatingAdmissionPolicy 'gpu-limit' with binding 'b' denied "
                "request: at most 8 GPUs",
            ),
            InvalidJob,
            "ValidatingAdmissionPolicy",
        ),
        (
            ApiError(
                403,
                "Forbidden",
                'jobs.batch is forbidden: User "system:serviceaccount:quartermaster:qm" cannot create resource "jobs"',
            ),
            AuthenticationFailed,
            "forbade creating job",
        ),
        (
            ApiError(
                403,
                "Forbidden",
                'jobs.batch is forbidden: User "qm" cannot create resource "jobs" in API group "batch": access denied',
            ),
            AuthenticationFailed,
            "grant the token's service account",
        ),
        (
            ApiError(403, "Forbidden", 'jobs.batch "qm-42" is forbidden: exceeded quota: jobs, requested: count=1'),
            BackendError,
            "exceeded quota",
        ),
        (ApiError(429, "TooManyRequests", "too many requests"), Unreachable, "HTTP 429"),
        (ApiError(500, "InternalError", "etcd timed out"), Unreachable, "HTTP 500"),
        (ApiError(401, "Unauthorized", "Unauthorized"), AuthenticationFailed, "refused the token"),
    ],
)
def test_submit_classifies_the_api_servers_refusals(kube, error, raised, words):
    _refuse_jobs(kube, error)
    with pytest.raises(BackendError, match=re.escape(words)) as caught:
        backend(kube).submit(spec())
    assert type(caught.value) is raised
    assert permanent(caught.value) is (raised is InvalidJob)


@pytest.mark.parametrize(
    ("status", "state"),
    [
        ({}, JobState.PENDING),
        ({"active": 2, "ready": 0}, JobState.PENDING),
        ({"active": 2, "ready": 2}, JobState.RUNNING),
        ({"succeeded": 2, "conditions": [{"type": "Complete", "status": "True"}]}, JobState.SUCCEEDED),
        (
            {
                "failed": 1,
                "conditions": [
                    {
                        "type": "Failed",
                        "status": "True",
                        "reason": "DeadlineExceeded",
                        "message": "Job was active longer than specified deadline",
                    }
                ],
            },
            JobState.FAILED,
        ),
        ({"active": 2, "ready": 2, "conditions": [{"type": "Failed", "status": "False"}]}, JobState.RUNNING),
    ],
)
def test_status_mapping(kube, status, state):
    cluster = backend(kube)
    name = cluster.submit(spec())
    with kube.lock:
        kube.jobs[(NS, name)]["status"] = status
    assert cluster.status(name).state is state


def test_status_reports_the_reason_and_nodes(kube):
    cluster = backend(kube)
    name = cluster.submit(spec())
    with kube.lock:
        kube.add_job_pod(NS, name, 0, "h100-a")
        kube.add_job_pod(NS, name, 1, "h100-b")
        kube.jobs[(NS, name)]["status"] = {
            "failed": 1,
            "conditions": [{"type": "Failed", "status": "True", "reason": "DeadlineExceeded", "message": "too long"}],
        }
    status = cluster.status(name)
    assert (status.state, status.message, status.nodes) == (
        JobState.FAILED,
        "DeadlineExceeded: too long",
        ("h100-a", "h100-b"),
    )


def _job_with_pods(kube, *statuses, workers=2):
    cluster = backend(kube)
    name = cluster.submit(spec(workers=workers, nodes=("h100-a", "h100-b")[:workers]))
    with kube.lock:
        for index, status in enumerate(statuses):
            node = "" if status.get("phase") == "Pending" else ("h100-a", "h100-b")[index % 2]
            kube.add_job_pod(NS, name, index, node, status=status)
    return cluster, name


def _fail(kube, name, reason="BackoffLimitExceeded", message="Job has reached the specified backoff limit"):
    with kube.lock:
        kube.jobs[(NS, name)]["status"] = {
            "failed": 1,
            "conditions": [{"type": "Failed", "status": "True", "reason": reason, "message": message}],
        }


def test_an_image_that_cannot_be_pulled_is_pending_with_the_kubelets_words(kube):
    said = 'failed to pull and unpack image "ghcr.io/acme/train:1.4": not found'
    cluster, name = _job_with_pods(kube, waiting("ErrImagePull", said), waiting("ImagePullBackOff", "Back-off"))
    status = cluster.status(name)
    assert (status.state, status.reason, status.workers_running) == (JobState.PENDING, Failure.IMAGE_PULL, 0)
    assert status.message == f"ErrImagePull for image ghcr.io/acme/train:1.4: {said}"


def test_invalid_image_name_is_an_image_pull_failure(kube):
    cluster, name = _job_with_pods(kube, waiting("InvalidImageName", 'invalid reference format: "UPPER"'))
    assert cluster.status(name).reason == Failure.IMAGE_PULL


def test_unschedulable_workers_are_pending_with_the_schedulers_words(kube):
    said = "0/5 nodes are available: 5 Insufficient nvidia.com/gpu."
    cluster, name = _job_with_pods(kube, unschedulable(said), unschedulable(said))
    status = cluster.status(name)
    assert (status.state, status.reason, status.workers_running) == (JobState.PENDING, Failure.UNSCHEDULABLE, 0)
    assert status.message == f"unschedulable: {said}"


def test_a_gang_that_started_in_part_is_pending_and_says_how_many_run(kube):
    said = "0/5 nodes are available: 1 node(s) were unschedulable."
    cluster, name = _job_with_pods(kube, {"phase": "Running"}, unschedulable(said))
    with kube.lock:  # the Job controller counts the running pod as active and ready
        kube.jobs[(NS, name)]["status"] = {"active": 2, "ready": 1}
    status = cluster.status(name)
    assert (status.state, status.reason, status.workers_running) == (JobState.PENDING, Failure.UNSCHEDULABLE, 1)
    assert status.message == f"1 of 2 workers running; others unschedulable: {said}"
    assert status.nodes == ("h100-a",)


def test_a_gang_is_running_when_every_worker_runs(kube):
    cluster, name = _job_with_pods(kube, {"phase": "Running"}, {"phase": "Running"})
    status = cluster.status(name)
    assert (status.state, status.reason, status.workers_running) == (JobState.RUNNING, "", 2)
    assert status.message == "2 of 2 workers running"


def test_an_oom_killed_worker_fails_the_job_as_oom(kube):
    cluster, name = _job_with_pods(kube, {"phase": "Running"}, terminated(137, "OOMKilled"))
    _fail(kube, name)
    status = cluster.status(name)
    assert (status.state, status.reason, status.exit_code) == (JobState.FAILED, Failure.OOM_KILLED, 137)
    assert "was OOM-killed" in status.message


def test_a_non_zero_exit_fails_the_job_with_its_code(kube):
    cluster, name = _job_with_pods(kube, terminated(0, "Completed"), terminated(3))
    _fail(kube, name)
    status = cluster.status(name)
    assert (status.state, status.reason, status.exit_code) == (JobState.FAILED, Failure.EXIT_CODE, 3)
    assert status.message.startswith("BackoffLimitExceeded: Job has reached the specified backoff limit; pod qm-42-1")
    assert status.message.endswith("exited with code 3")


def test_the_jobs_own_deadline_is_a_time_limit_not_an_exit_code(kube):
    cluster, name = _job_with_pods(kube, terminated(143), terminated(143))
    _fail(kube, name, "DeadlineExceeded", "Job was active longer than specified deadline")
    status = cluster.status(name)
    assert (status.state, status.reason, status.exit_code) == (JobState.FAILED, Failure.TIME_LIMIT, None)


@pytest.mark.parametrize(
    ("reason", "failure"),
    [
        ("PreemptionByScheduler", Failure.PREEMPTED),
        ("EvictionByEvictionAPI", Failure.PREEMPTED),
        ("DeletionByTaintManager", Failure.NODE_LOST),
        ("DeletionByPodGC", Failure.NODE_LOST),
    ],
)
def test_a_worker_the_cluster_ended_is_preempted_or_lost(kube, reason, failure):
    cluster, name = _job_with_pods(kube, disrupted(reason, "by the cluster"), {"phase": "Running"})
    _fail(kube, name)
    status = cluster.status(name)
    assert (status.state, status.reason) == (JobState.FAILED, failure)
    assert f"{reason}: by the cluster" in status.message


def test_a_worker_evicted_by_the_kubelet_is_preempted(kube):
    evicted = {"phase": "Failed", "reason": "Evicted", "message": "The node was low on resource: memory."}
    cluster, name = _job_with_pods(kube, evicted, {"phase": "Running"})
    _fail(kube, name)
    status = cluster.status(name)
    assert (status.state, status.reason) == (JobState.FAILED, Failure.PREEMPTED)
    assert "The node was low on resource: memory." in status.message


def test_signal_deletes_the_running_pods_with_the_grace_and_keeps_the_job(kube):
    cluster, name = _job_with_pods(kube, {"phase": "Running"}, terminated(0, "Completed"))
    kube.requests.clear()
    assert cluster.signal(name, 90) is None
    deletes = [path for method, path, *_ in kube.mutations() if method == "DELETE"]
    assert deletes == [f"/api/v1/namespaces/{NS}/pods/{name}-0-x0000?gracePeriodSeconds=90"]
    pod = kube.pods[(NS, f"{name}-0-x0000")]
    assert pod["metadata"]["deletionGracePeriodSeconds"] == 90  # terminating: SIGTERM now, SIGKILL in 90 s
    assert (NS, name) in kube.jobs  # status still reads how the workers end
    assert cluster.status(name).state is JobState.RUNNING
    kube.requests.clear()
    assert cluster.signal(name, 90) is None  # a terminating pod is not signalled again
    assert [m for m, *_ in kube.mutations()] == []
    assert backend(kube, dry_run=True).signal(name, 5) == DryRun(
        "signal", name, {"grace_period_seconds": 5, "pods": []}
    )
    with pytest.raises(NotFound):
        cluster.signal("qm-missing", 5)


def test_cancel_deletes_the_job_in_the_background(kube):
    cluster = backend(kube)
    name = cluster.submit(spec())
    with kube.lock:
        kube.add_job_pod(NS, name, 0, "h100-a")
    assert cluster.cancel(name) is None
    assert (NS, name) not in kube.jobs
    assert kube.deleted_jobs[-1]["metadata"]["deletedWith"] == "Background"
    assert not any(pod["metadata"]["name"].startswith(name) for pod in kube.pods.values())
    with pytest.raises(NotFound):
        cluster.status(name)
    with pytest.raises(NotFound, match=r'jobs\.batch "qm-42" not found'):
        cluster.cancel(name)


def test_dry_run_changes_nothing(kube):
    existing = backend(kube).submit(spec(job_id="7"))
    kube.requests.clear()
    cluster = backend(kube, dry_run=True)
    before = (repr(kube.nodes), repr(kube.pods), repr(kube.jobs))
    submitted = cluster.submit(spec())
    assert isinstance(submitted, DryRun)
    assert submitted.detail["job"]["spec"]["completions"] == 2
    assert cluster.cancel(existing) == DryRun("cancel", "qm-7", {"namespace": NS, "propagationPolicy": "Background"})
    assert isinstance(cluster.cordon("h100-a", "why"), DryRun)
    assert isinstance(cluster.resume("h100-b"), DryRun)
    drained = cluster.drain("h100-a", "why")
    assert isinstance(drained, DryRun)
    assert drained.detail["evict"] == ["research/notebook", "research/train-0", "serving/web-0"]
    assert len(cluster.inventory().nodes) == 5  # reads still read
    # Arguments are still checked against the cluster: what does not exist fails as it would for real.
    with pytest.raises(NotFound):
        cluster.cordon("h100-z", "no such node")
    with pytest.raises(NotFound):
        cluster.cancel("qm-42")
    assert kube.mutations() == []
    assert (repr(kube.nodes), repr(kube.pods), repr(kube.jobs)) == before


def test_health_signals(kube):
    signals = {(s.node, s.check): s for s in backend(kube).health()}
    assert signals[("h100-a", "ready")].ok
    assert signals[("h100-a", "heartbeat")].ok
    assert signals[("h100-a", "memory_pressure")].ok
    down = signals[("a100-a", "ready")]
    assert not down.ok
    assert "KubeletNotReady" in down.message
    assert "container runtime is down" in down.message
    assert not signals[("a100-a", "heartbeat")].ok
    assert "s ago" in signals[("a100-a", "heartbeat")].message
    assert not signals[("a100-a", "memory_pressure")].ok
    assert signals[("a100-a", "disk_pressure")].ok
    failing = sorted(key for key, s in signals.items() if not s.ok)
    assert failing == [("a100-a", "heartbeat"), ("a100-a", "memory_pressure"), ("a100-a", "ready")]


def test_a_reclaim_taint_is_a_failing_reclaim_signal(kube):
    # GKE taints a spot VM it is about to shut down; the node is otherwise healthy.
    kube.nodes["h100-a"]["spec"]["taints"] = [
        {"key": "cloud.google.com/impending-node-termination", "effect": "NoSchedule"}
    ]
    signals = {(s.node, s.check): s for s in backend(kube).health()}
    notice = signals[("h100-a", RECLAIM)]
    assert not notice.ok
    assert notice.message == (
        "reclaim notice: GKE is shutting the VM down (taint cloud.google.com/impending-node-termination)"
    )
    assert signals[("h100-a", "ready")].ok
    assert ("h100-b", RECLAIM) not in signals


def test_heartbeat_is_the_node_lease_when_readable(kube):
    nodes = {node.name: node for node in backend(kube).inventory().nodes}
    now = datetime.now(UTC)
    assert now - nodes["h100-a"].heartbeat < timedelta(minutes=1)  # the Lease, not the 4-minute-old condition
    assert now - nodes["a100-a"].heartbeat > timedelta(minutes=59)  # its kubelet is gone: both are old

    kube.forbid_leases = True  # a token that may not list leases: the Ready condition, and no error
    nodes = {node.name: node for node in backend(kube).inventory().nodes}
    assert timedelta(minutes=3) < now - nodes["h100-a"].heartbeat < timedelta(minutes=5)
    signals = {(s.node, s.check): s for s in backend(kube).health()}
    assert signals[("h100-a", "heartbeat")].ok  # 4 minutes is normal without a Lease
    assert not signals[("a100-a", "heartbeat")].ok


def test_a_stale_lease_is_a_failing_heartbeat(kube):
    kube.leases["cpu-a"]["spec"]["renewTime"] = "2026-01-01T00:00:00.000000Z"
    signals = {(s.node, s.check): s for s in backend(kube, heartbeat_stale_seconds=60).health()}
    assert not signals[("cpu-a", "heartbeat")].ok  # its Ready condition (4 minutes) is newer, and still too old
    assert signals[("h100-a", "heartbeat")].ok


def test_unknown_ready_is_unhealthy(kube):
    for condition in kube.nodes["cpu-a"]["status"]["conditions"]:
        if condition["type"] == "Ready":
            condition.update(
                status="Unknown", reason="NodeStatusUnknown", message="Kubelet stopped posting node status."
            )
    signal = next(s for s in backend(kube).health() if (s.node, s.check) == ("cpu-a", "ready"))
    assert not signal.ok
    assert "Unknown" in signal.message


def test_wrong_token_is_authentication_failed(kube):
    with pytest.raises(AuthenticationFailed, match="refused the token"):
        backend(kube, token="wrong").inventory()


def test_forbidden_is_authentication_failed(kube):
    with pytest.raises(AuthenticationFailed, match="forbidden"):
        backend(kube, token=READONLY_TOKEN).cordon("h100-a", "why")
    assert "unschedulable" not in kube.nodes["h100-a"]["spec"]


def test_closed_port_is_unreachable():
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    cluster = KubernetesBackend(f"http://127.0.0.1:{port}", {"token": TOKEN}, timeout=2.0)
    with pytest.raises(Unreachable, match="did not answer"):
        cluster.inventory()


def test_malformed_node_is_bad_response(kube):
    kube.nodes["cpu-a"]["status"]["capacity"]["memory"] = "lots"
    with pytest.raises(BadResponse, match="node cpu-a: capacity\\[memory\\] is 'lots'"):
        backend(kube).inventory()


def test_node_of_the_wrong_shape_is_bad_response(kube):
    kube.nodes["cpu-a"]["status"]["conditions"] = [{"type": "Ready"}]  # status is required
    with pytest.raises(BadResponse, match="answered listing nodes with an invalid V1NodeCondition: status: "):
        backend(kube).inventory()


def test_node_without_capacity_is_bad_response(kube):
    del kube.nodes["cpu-a"]["status"]["capacity"]
    with pytest.raises(BadResponse, match=r"cpu-a reports no status\.capacity"):
        backend(kube).inventory()


def test_not_json_is_bad_response(kube):
    kube.canned[("GET", "/api/v1/nodes")] = (200, "application/json", b"<html>proxy login</html>")
    with pytest.raises(BadResponse):
        backend(kube).inventory()


def test_server_error_is_unreachable(kube):
    kube.canned[("GET", "/api/v1/nodes")] = (
        503,
        "application/json",
        b'{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"etcd is down",'
        b'"reason":"ServiceUnavailable","code":503}',
    )
    with pytest.raises(Unreachable, match="etcd is down"):
        backend(kube).inventory()


def test_read_timeout_is_unreachable():
    with socket.socket() as silent:  # accepts connections (the backlog) and never answers
        silent.bind(("127.0.0.1", 0))
        silent.listen(4)
        port = silent.getsockname()[1]
        cluster = KubernetesBackend(f"http://127.0.0.1:{port}", {"token": TOKEN}, timeout=0.3)
        with pytest.raises(Unreachable, match="did not answer listing nodes"):
            cluster.inventory()


@pytest.fixture(scope="module")
def certificates(tmp_path_factory):
    """A CA and a certificate it signed for 127.0.0.1, as PEM files."""
    x509 = pytest.importorskip("cryptography.x509")
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    # A CA as real ones are: key identifiers, and key usage for signing certificates.
    KEY_USAGE_CA = x509.KeyUsage(
        digital_signature=False,
        content_commitment=False,
        key_encipherment=False,
        data_encipherment=False,
        key_agreement=False,
        key_cert_sign=True,
        crl_sign=True,
        encipher_only=False,
        decipher_only=False,
    )

    def name(common_name):
        return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])

    start, end = datetime.now(UTC) - timedelta(days=1), datetime.now(UTC) + timedelta(days=1)
    ca_key, key = ec.generate_private_key(ec.SECP256R1()), ec.generate_private_key(ec.SECP256R1())
    ca = (
        x509.CertificateBuilder(name("test-ca"), name("test-ca"), ca_key.public_key(), 1, start, end)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()), critical=False)
        .add_extension(KEY_USAGE_CA, critical=True)
        .sign(ca_key, hashes.SHA256())
    )
    server = (
        x509.CertificateBuilder(ca.subject, name("kube-apiserver"), key.public_key(), 2, start, end)  # issuer first
        .add_extension(x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), False)
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    folder = tmp_path_factory.mktemp("tls")
    (folder / "server.pem").write_bytes(server.public_bytes(serialization.Encoding.PEM))
    (folder / "server.key").write_bytes(
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    return ca.public_bytes(serialization.Encoding.PEM).decode(), folder


@pytest.fixture
def tls_kube(certificates):
    _ca, folder = certificates
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(folder / "server.pem", folder / "server.key")
    with KubeServer(tls=context) as server:
        yield server


def test_tls_verified_with_the_clusters_ca(tls_kube, certificates):
    ca, _folder = certificates
    cluster = KubernetesBackend(tls_kube.url, {"token": TOKEN, "ca_cert": ca})
    assert len(cluster.inventory().nodes) == 5


def test_tls_with_an_unknown_ca_is_unreachable(tls_kube):
    with pytest.raises(Unreachable, match=r"TLS with .* failed listing nodes: .*CERTIFICATE_VERIFY_FAILED"):
        KubernetesBackend(tls_kube.url, {"token": TOKEN}).inventory()


@pytest.mark.filterwarnings("ignore::urllib3.exceptions.InsecureRequestWarning")
def test_tls_verification_can_be_skipped(tls_kube):
    cluster = KubernetesBackend(tls_kube.url, {"token": TOKEN}, {"insecure_skip_tls_verify": True})
    assert len(cluster.inventory().nodes) == 5
