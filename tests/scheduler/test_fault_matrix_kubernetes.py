"""The fault-injection matrix on Kubernetes: every fault driven through the real loop (submit, cycle, dispatch,
follow, recover, sync) against the faithful API server of ``tests/clusters/kube_server.py``, plus a cluster
in Kueue mode.

No controllers run in that server, so the test plays them: Kueue (``kube_crds.kueue_step``: Workloads,
quota, admission, eviction, as Kueue documents them) admits a suspended Job, the kubelet makes the Job's pods
Running on the nodes the Job is pinned to (in Kueue mode, nodes of the flavor Kueue chose), then Succeeded,
OOM-killed, ErrImagePull or Unschedulable as the fault wants, and the Job controller writes the Job's
conditions; KubeRay (``kube_crds.ray_*``) runs a RayJob's Ray cluster and entrypoint. The cluster ``k8s``
(two 8-GPU nodes) is preferred; the fleet's simulated ``west`` is where work goes when ``k8s`` will not run
it (``east`` is taken out of the way).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest
from django.test import Client
from django.utils import timezone

from clusters import actions as cluster_actions
from clusters.backends.kubernetes.jobs import KUEUE_QUEUE_LABEL
from clusters.models import Cluster
from governance.models import Queue
from scheduler.models import Attempt, Job
from tests.clusters import kube_crds
from tests.clusters.factories import kubernetes_cluster
from tests.clusters.kube_fleet import add_node
from tests.clusters.kube_server import TOKEN, ApiError, KubeServer, disrupted, terminated, unschedulable, waiting
from tests.scheduler.conftest import Fleet
from tests.scheduler.fault_harness import HOUR, Row, Scenario, events, record

pytestmark = pytest.mark.django_db

NS = "research"
GPU = "nvidia.com/gpu"
JOBS = f"/apis/batch/v1/namespaces/{NS}/jobs"
H100 = {
    "nvidia.com/gpu.count": "8",
    "nvidia.com/gpu.memory": "81559",
    "topology.kubernetes.io/zone": "eu-west-1a",
}
#: What a pod's status is once the kubelet started it: a function of the worker's index.
Kubelet = Callable[[int], dict[str, Any]]


def running(_index: int) -> dict[str, Any]:
    return {"phase": "Running"}


def add_gpu_nodes(
    server: KubeServer, product: str = "H100-SXM-80GB", names: tuple[str, ...] = ("gpu-1", "gpu-2")
) -> None:
    """Ready 8-GPU nodes, their GPUs labelled ``product`` by feature discovery (by default the simulated
    clusters' type: one price, one queue, so that the cluster's preference decides where work goes)."""
    now = datetime.now(UTC)
    for name in names:
        labels = {**H100, "nvidia.com/gpu.product": product, "topology.kubernetes.io/rack": f"r-{name}"}
        add_node(
            server,
            name,
            labels,
            capacity={"cpu": "192", "memory": "2Ti", "nvidia.com/gpu": "8", "pods": "110"},
            allocatable={"cpu": "190", "memory": "2000Gi", "nvidia.com/gpu": "8", "pods": "110"},
            heartbeat=now,
        )


@pytest.fixture
def kube() -> Iterator[KubeServer]:
    with KubeServer(seed=False) as server:
        add_gpu_nodes(server)
        yield server


def play(kube: KubeServer, kubelet: Kubelet = running, *, admit: bool = True) -> None:
    """Kueue takes its step (when ``admit``): it admits what fits its quota; the kubelet starts the pods of
    running Jobs that have none, on the nodes each Job is pinned to, with the status ``kubelet`` gives each
    worker."""
    if admit:
        kube_crds.kueue_step(kube)
    with kube.lock:
        for (_ns, name), job in sorted(kube.jobs.items()):
            spec = job["spec"]
            if spec.get("suspend") or _pods(kube, name) or job["status"].get("conditions"):
                continue
            nodes = _pinned(kube, job)
            for index in range(int(spec.get("parallelism") or 1)):
                status = kubelet(index)
                placed = status.get("conditions", [{}])[0].get("reason") != "Unschedulable"
                kube.add_job_pod(NS, name, index, nodes[index] if placed else "", status=status)


def _pods(kube: KubeServer, name: str) -> list[dict[str, Any]]:
    return [p for _, p in sorted(kube.pods.items()) if p["metadata"]["name"].startswith(f"{name}-")]


def _pinned(kube: KubeServer, job: dict[str, Any]) -> list[str]:
    """The nodes a Job is pinned to, one per worker (as the scheduler would bind them); in Kueue mode, where
    nothing is pinned, the nodes its node selector (the flavor's labels) allows, one worker on each."""
    pod = job["spec"]["template"]["spec"]
    selector = pod.get("nodeSelector", {}).get("kubernetes.io/hostname")
    if selector:
        return [selector] * 8
    if "affinity" not in pod:
        wanted = pod.get("nodeSelector", {})
        fits = [n for n, node in sorted(kube.nodes.items()) if wanted.items() <= node["metadata"]["labels"].items()]
        return fits * 8
    terms = pod["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    return list(terms[0]["matchExpressions"][0]["values"]) * 8


class KubeScenario(Scenario):
    """The ``k8s`` cluster on the fake API server, preferred; ``west`` (simulated) beside it."""

    backend = "kubernetes"

    def __init__(self, fleet: Fleet, capture: Any, kube: KubeServer, **options: Any) -> None:
        super().__init__(fleet, capture)
        self.kube = kube
        Cluster.objects.filter(slug="east").update(status=Cluster.Status.DISABLED)
        Cluster.objects.filter(slug="west").update(preference=0)
        self.west = Cluster.objects.get(slug="west")
        self.k8s = self.added(kubernetes_cluster(fleet.org, "k8s", kube.url, TOKEN, **options), preference=100)
        #: How the kubelet starts pods; ``admit`` is whether Kueue admits suspended Jobs.
        self.kubelet: Kubelet = running
        self.admit = True

    # the cluster's part

    def job(self, name: str) -> dict[str, Any]:
        return self.kube.jobs[(NS, name)]

    def pods(self, name: str) -> list[dict[str, Any]]:
        return _pods(self.kube, name)

    def play(self) -> None:
        play(self.kube, self.kubelet, admit=self.admit)

    def complete(self) -> None:
        """Every running worker exits 0 and the Job controller marks the Job Complete."""
        with self.kube.lock:
            for (_ns, name), job in self.kube.jobs.items():
                pods = self.pods(name)
                if not pods or job["status"].get("conditions"):
                    continue
                for pod in pods:
                    pod["status"] = terminated(0)
                job["status"] = {
                    "succeeded": len(pods),
                    "conditions": [{"type": "Complete", "status": "True", "reason": "CompletionsReached"}],
                }

    def exit_on_sigterm(self, code: int = 143) -> None:
        """Workers whose pods are being deleted (signalled) checkpoint and exit ``code``; the Job controller
        marks the Job Failed, or Complete when every index exited 0."""
        with self.kube.lock:
            for (_ns, name), job in self.kube.jobs.items():
                pods = self.pods(name)
                if not any("deletionTimestamp" in p["metadata"] for p in pods):
                    continue
                for pod in pods:
                    del self.kube.pods[(NS, pod["metadata"]["name"])]
                if code == 0:
                    condition = {"type": "Complete", "status": "True", "reason": "CompletionsReached"}
                    job["status"] = {"succeeded": len(pods), "conditions": [condition]}
                else:
                    condition = {"type": "Failed", "status": "True", "reason": "BackoffLimitExceeded"}
                    job["status"] = {"failed": len(pods), "conditions": [condition]}

    def fail_job(self, name: str, status: dict[str, Any]) -> None:
        """Every pod of the Job ends with ``status``; the Job controller marks it Failed."""
        with self.kube.lock:
            for pod in self.pods(name):
                pod["status"] = status
            self.job(name)["status"] = {
                "failed": 1,
                "conditions": [{"type": "Failed", "status": "True", "reason": "PodFailurePolicy"}],
            }

    def finish(self) -> None:
        """Every cluster runs its jobs to their end: the kubelet's workers exit 0, the simulated ones' hour passes."""
        self.complete()
        self.fleet.run_for(HOUR + 1)
        self.follow(self.later(HOUR + 1))

    def graces(self) -> list[int]:
        """The grace periods pods were deleted with (the kubelet's SIGTERM, then SIGKILL at the end)."""
        graces = []
        for method, path, _, _ in self.kube.requests:
            query = parse_qs(urlsplit(path).query)
            if method == "DELETE" and "/pods/" in path and "gracePeriodSeconds" in query:
                graces.append(int(query["gracePeriodSeconds"][0]))
        return graces

    def assert_signalled(self, job: Job) -> None:
        """The job's pods were deleted with what is left of its grace (until its attempt's stop deadline)."""
        deadline = Attempt.objects.get(job=job, outcome=Attempt.Outcome.ACTIVE).stop_deadline
        assert deadline is not None
        left = (deadline - timezone.now()).total_seconds()
        assert self.graces(), self.kube.requests[-5:]
        assert all(left - 5 <= g <= left for g in self.graces()), (left, self.graces())

    def with_kueue(self, gpus: int = 16) -> None:
        """Kueue mode, set up as an admin would: a LocalQueue ``lq-<queue>`` for each of the organization's
        queues (the cluster's ``local_queues``), all in one ClusterQueue with ``gpus`` GPUs of flavor ``h100``
        (the nodes whose feature discovery says H100-SXM-80GB)."""
        names = sorted(Queue.objects.filter(team__organization=self.fleet.org).values_list("name", flat=True))
        options = {**self.k8s.options, "kueue": True, "local_queues": {n: f"lq-{n}" for n in names}}
        Cluster.objects.filter(pk=self.k8s.pk).update(options=options)
        self.k8s.refresh_from_db()
        kube_crds.add_flavor(self.kube, "h100", {"nvidia.com/gpu.product": "H100-SXM-80GB"})
        kube_crds.add_cluster_queue(self.kube, "cq-lab", {"h100": {"cpu": "1000", "memory": "8Ti", GPU: str(gpus)}})
        for name in names:
            kube_crds.add_local_queue(self.kube, NS, f"lq-{name}", "cq-lab")

    def created(self) -> list[dict[str, Any]]:
        """The Jobs the API server was asked to create (the recorded request bodies)."""
        return [body for method, path, _, body in self.kube.requests if method == "POST" and path == JOBS]


def invalid(message: str) -> ApiError:
    return ApiError(422, "Invalid", message, {"kind": "Job", "group": "batch"})


# ------------------------------------------------------------------------------------------------ faults


def refused_at_submit(s: KubeScenario) -> Row:
    s.kube.fail_requests(
        "POST", JOBS, invalid('Job.batch "x" is invalid: spec.template.spec.priorityClassName: Not found')
    )
    job = s.submit()
    s.cycle()  # k8s refuses: placed elsewhere
    s.place_again(job)
    first = job.attempts.get(number=1)
    assert (first.cluster, first.outcome) == (s.k8s, Attempt.Outcome.REFUSED), events(job)
    assert "priorityClassName" in first.message
    s.finish()
    return s.row("refusal at submit (one cluster)", job, state="succeeded", retries=0, copies=1)


def refused_everywhere(s: KubeScenario) -> Row:
    s.kube.fail_requests("POST", JOBS, invalid("spec.template.spec.priorityClassName: Not found"))
    s.refuse_on_simulated("account lab-x is not allowed here")
    return s.refused_by_every_cluster("refusal at submit (every cluster)", ("priorityClassName", "not allowed here"))


def transient_error(s: KubeScenario) -> Row:
    s.kube.fail_requests("POST", JOBS, ApiError(503, "ServiceUnavailable", "etcdserver: leader changed"), times=2)
    job = s.submit()
    s.cycle()
    assert Attempt.objects.get(job=job).dispatch_tries == 1
    s.cycle(s.later(15))  # its 10 s backoff ran out: sent again, fails again
    assert Attempt.objects.get(job=job).dispatch_tries == 2
    s.cycle(s.later(40))  # after 20 s more: taken
    s.play()
    s.follow(s.later(40))
    assert Attempt.objects.get(job=job).cluster == s.k8s
    s.finish()
    return s.row("transient error at submit", job, state="succeeded", retries=0, copies=1)


def partition(seconds: int, failed_syncs: int) -> Callable[[KubeScenario], Row]:
    def run(s: KubeScenario) -> Row:
        job = s.start()
        endpoint = s.cut_off(s.k8s)
        s.sync(s.k8s, failed_syncs)
        s.follow(s.later(seconds))
        s.recover(s.later(seconds))
        moved = seconds > s.k8s.failover_after
        if moved:
            s.cycle(s.later(seconds))  # restarted on west
            s.follow(s.later(seconds))
        s.reconnect(s.k8s, endpoint)
        s.sync(s.k8s)
        s.follow(s.later(seconds))  # k8s answers: the old copy is stopped (its replacement runs) or kept
        if moved:
            assert not s.kube.jobs, "the old copy was deleted"
        s.finish()
        return s.row(f"cluster unreachable {_span(seconds)}", job, state="succeeded", retries=0, copies=1)

    return run


def node_lost(s: KubeScenario) -> Row:
    job = s.start()
    (name,) = [n for (_, n) in s.kube.jobs]
    s.fail_job(name, disrupted("DeletionByTaintManager", "Taint manager: deleting due to NoExecute taint"))
    s.follow()
    s.place_again(job)
    s.finish()
    return s.row("node lost mid-run", job, state="succeeded", retries=1, copies=1)


def bad_image(s: KubeScenario) -> Row:
    s.kubelet = lambda _i: waiting("ErrImagePull", 'pull access denied for "lab/train", repository does not exist')
    job = s.submit()
    s.cycle()
    s.play()
    s.follow()  # k8s cannot pull it: cancelled there, placed elsewhere
    first = job.attempts.get(number=1)
    assert (first.cluster, first.reason) == (s.k8s, "image_pull"), events(job)
    assert not s.kube.jobs, "the Job was deleted"
    s.place_again(job)
    s.finish()
    return s.row("bad image (one cluster)", job, state="succeeded", retries=0, copies=1)


def oom(s: KubeScenario) -> Row:
    job = s.start(max_retries=0)
    (name,) = [n for (_, n) in s.kube.jobs]
    s.fail_job(name, terminated(137, "OOMKilled"))
    s.follow()
    job.refresh_from_db()
    assert "out of memory" in job.message, events(job)
    return s.row("bad script (OOM-killed)", job, state="failed", retries=0, copies=0, note="no retries left")


def partial_gang(s: KubeScenario) -> Row:
    s.kubelet = lambda i: (
        running(i) if i == 0 else unschedulable("0/2 nodes are available: 2 Insufficient nvidia.com/gpu.")
    )
    job = s.submit(workers=2)
    s.cycle()
    s.play()
    s.follow()
    assert Job.objects.get(pk=job.pk).state == Job.State.PLACING, events(job)  # one of two workers: not running
    s.kubelet = running
    s.follow(s.later(s.k8s.start_timeout + 1))  # requeued whole, its Job deleted
    assert not s.kube.jobs
    s.place_again(job)
    s.finish()
    return s.row("partial gang", job, state="succeeded", retries=0, copies=1)


def time_limit(s: KubeScenario) -> Row:
    job = s.start(time_limit=600)
    s.follow(s.later(601))  # signalled: its pods deleted with the tier's grace
    s.assert_signalled(job)
    s.exit_on_sigterm()  # the workers checkpoint and exit
    s.follow(s.later(611))
    return s.row("time limit reached", job, state="failed", retries=0, copies=0)


def cordon(s: KubeScenario) -> Row:
    job = s.start()
    node = job.attempts.get().assignments.get().node
    with s.capture(execute=True):
        cluster_actions.cordon_node(s.fleet.user("adam"), node, "fan noise")
    assert s.kube.nodes[node.name]["spec"].get("unschedulable") is True
    s.recover()
    s.finish()
    return s.row("cordon", job, state="succeeded", retries=0, copies=1)


def drain(s: KubeScenario) -> Row:
    job = s.start()
    node = job.attempts.get().assignments.get().node
    with s.capture(execute=True):
        cluster_actions.drain_node(s.fleet.user("adam"), node, "PSU swap", grace_seconds=120)
    s.recover()  # signalled
    s.assert_signalled(job)
    s.exit_on_sigterm(0)  # it checkpointed and exited 0: its Job is Complete, yet it was interrupted
    s.follow(s.later(10))  # requeued
    s.place_again(job)
    s.finish()
    note = "the workers checkpoint on SIGTERM and exit 0 (the Job Complete): requeued all the same"
    return s.row("graceful drain", job, note=note, state="succeeded", retries=0, copies=1)


def kueue(s: KubeScenario) -> Row:
    s.with_kueue()
    s.admit = False
    job = s.submit()
    s.cycle()
    s.follow()
    assert Job.objects.get(pk=job.pk).state == Job.State.PLACING  # suspended, waiting for Kueue
    (body,) = s.created()
    assert body["metadata"]["labels"][KUEUE_QUEUE_LABEL] == f"lq-{job.queue.name}"
    assert body["spec"]["suspend"] is True
    assert {"nodeSelector", "affinity"}.isdisjoint(body["spec"]["template"]["spec"]), "Kueue chooses the nodes"
    job.refresh_from_db()
    assert job.pending_message == f"Kueue: waiting for Kueue to create its Workload (LocalQueue lq-{job.queue.name})"
    s.admit = True
    s.play()  # Kueue admits it in cq-lab on the cluster Quartermaster chose; the kubelet runs it
    s.follow()
    job.refresh_from_db()
    assert (job.state, job.pending_message) == (Job.State.RUNNING, ""), events(job)
    (workload,) = kube_crds.workloads(s.kube)
    assert workload["status"]["admission"]["clusterQueue"] == "cq-lab"
    assert job.attempts.get().cluster == s.k8s
    s.finish()
    note = "Kueue mode: created suspended in LocalQueue lq-<its queue>, unpinned; admitted by Kueue in cq-lab, ran"
    return s.row("Kueue admission", job, note=note, state="succeeded", retries=0, copies=1)


def kueue_pending(s: KubeScenario) -> Row:
    s.with_kueue(gpus=4)  # less than the job's 8 GPUs: Kueue will never admit it here
    job = s.submit()
    s.cycle()
    s.play()
    s.follow()
    job.refresh_from_db()
    assert job.state == Job.State.PLACING
    assert job.pending_message == (
        "Kueue: couldn't assign flavors to pod set main: insufficient quota for nvidia.com/gpu in flavor h100, "
        "previously considered podsets requests (0) + current podset request (8) > maximum capacity (4)"
    ), job.pending_message
    owner = Client()
    owner.force_login(job.submitted_by)
    page = owner.get(f"/jobs/{job.pk}/").content.decode()  # the job's page says why it has not started
    assert "Kueue: couldn&#x27;t assign flavors to pod set main: insufficient quota for nvidia.com/gpu" in page
    s.follow(s.later(s.k8s.start_timeout + 1))  # not started in time: taken back, deleted there, requeued whole
    assert not s.kube.jobs
    assert not kube_crds.workloads(s.kube)
    first = job.attempts.get(number=1)
    assert (first.reason, first.cluster) == ("start_timeout", s.k8s)
    assert "insufficient quota" in first.message
    s.place_again(job)
    s.finish()
    note = "pending with Kueue's words until the start timeout; requeued whole, ran on west"
    return s.row("Kueue cannot admit it", job, note=note, state="succeeded", retries=0, copies=1)


def kueue_eviction(s: KubeScenario) -> Row:
    s.with_kueue()
    job = s.start()
    (name,) = [n for (_, n) in s.kube.jobs]
    words = "Preempted to accommodate a workload (UID: 5c1e, JobUID: 77ad) due to prioritization in the ClusterQueue"
    kube_crds.kueue_evict(s.kube, s.job(name)["metadata"]["uid"], "Preempted", words)
    s.follow()  # Kueue suspended it to requeue it: Quartermaster takes it back and deletes it there
    first = job.attempts.get(number=1)
    assert (first.outcome, first.reason) == (Attempt.Outcome.PREEMPTED, "preempted_by_cluster"), events(job)
    assert first.message == f"Kueue evicted it (Preempted): {words}"
    assert (NS, name) not in s.kube.jobs, "the evicted Job was deleted, so Kueue cannot run it again"
    assert Job.objects.get(pk=job.pk).state == Job.State.REQUEUED
    s.place_again(job)
    assert job.attempts.get(number=2).cluster == s.k8s
    s.finish()
    note = "Kueue evicted it (Preempted): deleted there, requeued by Quartermaster (no retry spent), ran again"
    return s.row("Kueue eviction", job, note=note, state="succeeded", retries=0, copies=1)


def ray_failed(s: KubeScenario) -> Row:
    job = s.submit(max_retries=0, image="rayproject/ray:2.49.2", command=[])
    Job.objects.filter(pk=job.pk).update(
        kind=Job.Kind.RAY,
        entrypoint="python rl.py",
        runtime_env={"pip": ["gymnasium"]},
        head_cpu=2000,
        head_memory=8192,
    )
    s.cycle()
    (name,) = [n for (_, n) in s.kube.custom["rayjobs"]]
    rayjob = kube_crds.rayjob(s.kube, NS, name)
    assert rayjob["spec"]["entrypoint"] == "python rl.py"
    kube_crds.ray_start(s.kube, NS, name, nodes={})
    with s.kube.lock:
        for pod in s.kube.pods.values():  # the kube-scheduler binds the Ray cluster's pods
            if pod["metadata"].get("labels", {}).get("ray.io/cluster", "").startswith(f"{name}-"):
                pod["spec"]["nodeName"], pod["status"] = "gpu-1", {"phase": "Running"}
    kube_crds.ray_run(s.kube, NS, name)
    s.follow()
    assert Job.objects.get(pk=job.pk).state == Job.State.RUNNING, events(job)
    kube_crds.ray_finish(s.kube, NS, name, exit_code=3)
    s.follow()
    job.refresh_from_db()
    attempt = job.attempts.get()
    assert (attempt.reason, attempt.exit_code) == ("exit_code", 3), events(job)
    assert "Job entrypoint command failed with exit code 3" in job.message
    note = "a RayJob whose entrypoint exits 3: failed with code 3 (no retries left); its Ray cluster shut down"
    return s.row("Ray job fails", job, note=note, state="failed", retries=0, copies=0)


def kueue_without_local_queue(s: KubeScenario) -> Row:
    job = s.submit()
    s.cycle()
    first = job.attempts.get(number=1)
    assert (first.cluster, first.outcome) == (s.k8s, Attempt.Outcome.REFUSED), events(job)
    assert "local_queue" in first.message
    assert not s.created(), "nothing was sent"
    s.place_again(job)
    s.finish()
    note = "refused (InvalidJob naming local_queue) before anything is sent; ran on west"
    return s.row("Kueue without local_queue", job, note=note, state="succeeded", retries=0, copies=1)


def kueue_without_local_queue_alone(s: KubeScenario) -> Row:
    s.refuse_on_simulated("account lab-x is not allowed here")
    note = "every other cluster refuses too: failed with the clusters' words"
    fault = "Kueue without local_queue (no other cluster)"
    return s.refused_by_every_cluster(fault, ("local_queue", "not allowed here"), note)


def _span(seconds: int) -> str:
    return f"{seconds // 60} min" if seconds >= 120 else f"{seconds} s"


FAULTS: dict[str, tuple[Callable[[KubeScenario], Row], dict[str, Any]]] = {
    "refused": (refused_at_submit, {}),
    "refused_everywhere": (refused_everywhere, {}),
    "transient": (transient_error, {}),
    "unreachable_30s": (partition(30, 1), {}),
    "unreachable_2min": (partition(120, 3), {}),
    "unreachable_15min": (partition(15 * 60 + 1, 3), {}),
    "node_lost": (node_lost, {}),
    "bad_image": (bad_image, {}),
    "oom": (oom, {}),
    "partial_gang": (partial_gang, {}),
    "time_limit": (time_limit, {}),
    "cordon": (cordon, {}),
    "drain": (drain, {}),
    "kueue": (kueue, {}),
    "kueue_pending": (kueue_pending, {}),
    "kueue_eviction": (kueue_eviction, {}),
    # Kueue mode with a LocalQueue for another queue only (the form refuses Kueue mode with none at all).
    "kueue_no_local_queue": (kueue_without_local_queue, {"kueue": True, "local_queues": {"other": "lq-other"}}),
    "kueue_no_local_queue_alone": (
        kueue_without_local_queue_alone,
        {"kueue": True, "local_queues": {"other": "lq-other"}},
    ),
    "ray_failed": (ray_failed, {}),
}


@pytest.mark.parametrize("fault", FAULTS)
def test_fault_matrix_kubernetes(
    fleet: Fleet, django_capture_on_commit_callbacks: Any, kube: KubeServer, fault: str
) -> None:
    scenario, options = FAULTS[fault]
    record(scenario(KubeScenario(fleet, django_capture_on_commit_callbacks, kube, **options)), fault)
