"""A job's output on Kubernetes: pod logs through the official client against the local API server
(``kube_server.py``'s ``GET .../pods/{name}/log``), for a plain Job's workers and a RayJob's submitter, head and
Ray workers; paged by the kubelet's timestamps, followed as it grows, a restarted container's previous log."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from urllib.parse import parse_qs, urlsplit

import pytest

from clusters.backends.base import BadOffset, LogsUnavailable, NotFound
from clusters.backends.kubernetes import podlogs
from tests.clusters import kube_crds
from tests.clusters.kube_server import KubeServer, rfc3339_nano, terminated, waiting
from tests.clusters.test_kubernetes_kueue_ray import NS, backend, ray_spec, spec


@pytest.fixture
def kube():
    with KubeServer() as server:
        yield server


def job_with_pods(kube, workers=2):
    cluster = backend(kube)
    name = cluster.submit(spec(workers=workers, nodes=("h100-a", "h100-b")[:workers]))
    with kube.lock:
        for index in range(workers):
            kube.add_job_pod(NS, name, index, ("h100-a", "h100-b")[index])
    return cluster, name


def pod_of(name, index):
    return f"{name}-{index}-x{index:04d}"


def log_queries(kube):
    return [
        parse_qs(urlsplit(path).query) for method, path, _, _ in kube.requests if path.split("?")[0].endswith("/log")
    ]


def test_each_worker_reads_its_own_pod_from_the_start_and_follows_on_from_the_offset(kube):
    cluster, name = job_with_pods(kube)
    kube.add_log(NS, pod_of(name, 0), "step 1\n", "step 2\n", step=timedelta(milliseconds=5))
    kube.add_log(NS, pod_of(name, 1), "rank 1 ready\n")

    first = cluster.logs(name)
    assert (first.text, first.more, first.complete, first.worker) == ("step 1\nstep 2\n", False, False, "")
    assert first.source == f"pod {NS}/{pod_of(name, 0)}, container worker"
    assert cluster.logs(name, "1").text == "rank 1 ready\n"

    assert cluster.logs(name, offset=first.next_offset).text == ""  # nothing new yet
    kube.add_log(NS, pod_of(name, 0), "step 3\n")
    following = cluster.logs(name, offset=first.next_offset)
    assert following.text == "step 3\n"
    assert cluster.logs(name, offset=following.next_offset).text == ""
    query = log_queries(kube)[-1]
    assert query["container"] == ["worker"]
    assert query["timestamps"] == ["true"]
    assert int(query["sinceSeconds"][0]) >= podlogs.SLACK


def test_lines_written_at_one_instant_are_neither_lost_nor_repeated_across_pages(kube):
    cluster, name = job_with_pods(kube, workers=1)
    at = datetime.now(UTC).replace(microsecond=250_000)
    lines = [f"line {i:02d} {'x' * 40}\n" for i in range(10)]
    kube.add_log(NS, pod_of(name, 0), *lines, at=at)  # one write: one timestamp for all ten
    stamp = len(rfc3339_nano(at)) + 1
    per_line = stamp + len(lines[0])

    pages, offset, limit = [], "", per_line * 3 + 5
    for _ in range(10):
        chunk = cluster.logs(name, offset=offset, limit=limit)
        pages.append(chunk.text)
        offset = chunk.next_offset
        if not chunk.more:
            break
    assert "".join(pages) == "".join(lines)
    assert len(pages) > 2
    assert all(len(page.encode()) <= limit for page in pages), pages
    assert offset.endswith("~10")


def test_tail_reads_the_last_lines_and_a_page_stops_at_the_byte_limit(kube):
    cluster, name = job_with_pods(kube, workers=1)
    kube.add_log(NS, pod_of(name, 0), *(f"{i}\n" for i in range(100)), step=timedelta(microseconds=10))
    tail = cluster.logs(name, tail=3)
    assert tail.text == "97\n98\n99\n"
    assert log_queries(kube)[-1]["tailLines"] == ["3"]
    end = cluster.logs(name, tail=0)
    assert (end.text, end.more) == ("", False)
    kube.add_log(NS, pod_of(name, 0), "100\n")
    assert cluster.logs(name, offset=end.next_offset).text == "100\n"  # only what came after
    cut = cluster.logs(name, limit=200)
    assert cut.more
    assert cut.text.endswith("\n")
    assert len(cut.text) < 200
    rest = cluster.logs(name, offset=cut.next_offset, limit=1 << 20)
    assert cut.text + rest.text == "".join(f"{i}\n" for i in range(101))


def test_a_worker_that_ended_is_complete_and_one_not_started_yet_is_empty(kube):
    cluster, name = job_with_pods(kube)
    with kube.lock:
        kube.pods[(NS, pod_of(name, 0))]["status"] = terminated(0)
        kube.pods[(NS, pod_of(name, 1))]["status"] = waiting("ContainerCreating")
    kube.add_log(NS, pod_of(name, 0), "done\n")
    done = cluster.logs(name, "0")
    assert (done.text, done.complete) == ("done\n", True)
    pending = cluster.logs(name, "1")
    assert (pending.text, pending.complete, pending.next_offset) == ("", False, "")


def test_a_restarted_container_waiting_to_start_again_shows_its_previous_output(kube):
    cluster, name = job_with_pods(kube, workers=1)
    pod = pod_of(name, 0)
    kube.add_log(NS, pod, "CUDA error: out of memory\n", previous=True)
    with kube.lock:
        crashing = waiting("CrashLoopBackOff", "back-off 40s restarting failed container")
        crashing["phase"] = "Running"
        crashing["containerStatuses"][0]["restartCount"] = 2
        kube.pods[(NS, pod)]["status"] = crashing
    chunk = cluster.logs(name)
    assert (chunk.text, chunk.complete) == ("CUDA error: out of memory\n", False)
    assert log_queries(kube)[-1]["previous"] == ["true"]


def test_no_such_job_worker_or_offset(kube):
    cluster, name = job_with_pods(kube)
    with pytest.raises(NotFound, match="not found"):
        cluster.logs("qm-nope")
    with pytest.raises(NotFound, match="workers 0 to 1"):
        cluster.logs(name, "2")
    with pytest.raises(NotFound, match="numbered from 0"):
        cluster.logs(name, "head")
    with pytest.raises(BadOffset, match="not a position"):
        cluster.logs(name, offset="12")


def test_pods_gone_after_the_job_ended_say_so(kube):
    cluster, name = job_with_pods(kube, workers=1)
    with kube.lock:
        kube.jobs[(NS, name)]["status"] = {"succeeded": 1, "conditions": [{"type": "Complete", "status": "True"}]}
        kube.pods.clear()
    with pytest.raises(LogsUnavailable, match="are gone"):
        cluster.logs(name)


def test_a_ray_job_gives_the_submitters_output_by_default_and_the_head_and_workers_by_name(kube):
    cluster = backend(kube)
    backend_id = cluster.submit(ray_spec(workers=2, nodes=("h100-a", "h100-b")))
    name = backend_id.removeprefix("rayjob/")
    pods = ("head", "workers-worker-0", "workers-worker-1")
    suffix = __import__("hashlib").sha256(kube_crds.rayjob(kube, NS, name)["metadata"]["uid"].encode()).hexdigest()[:5]
    kube_crds.ray_start(kube, NS, name, {f"{name}-{suffix}-{pod}": "h100-a" for pod in pods})
    assert cluster.logs(backend_id).text == ""  # KubeRay has not started the submitter yet
    kube_crds.ray_run(kube, NS, name)
    cluster_name = kube_crds.rayjob(kube, NS, name)["status"]["rayClusterName"]
    kube.add_log(NS, f"{name}-sub01", "Job 'qm-42' submitted successfully\n", "reward 0.93\n")
    kube.add_log(NS, f"{cluster_name}-head", "Ray runtime started.\n")
    kube.add_log(NS, f"{cluster_name}-workers-worker-1", "Ray worker 1 joined\n")

    entrypoint = cluster.logs(backend_id)
    assert entrypoint.text == "Job 'qm-42' submitted successfully\nreward 0.93\n"
    assert entrypoint.source.endswith("container ray-job-submitter")
    assert cluster.logs(backend_id, "submitter").text == entrypoint.text
    assert cluster.logs(backend_id, "head").text == "Ray runtime started.\n"
    assert cluster.logs(backend_id, "1").text == "Ray worker 1 joined\n"
    with pytest.raises(NotFound, match="2 Ray workers"):
        cluster.logs(backend_id, "2")
    assert cluster.find("42") == backend_id  # the submitter Job, named as the RayJob, is not taken for the job

    kube_crds.ray_finish(kube, NS, name, exit_code=0)
    ended = cluster.logs(backend_id, offset=entrypoint.next_offset)
    assert (ended.text, ended.complete) == ("", True)
    with pytest.raises(LogsUnavailable, match="are gone"):
        cluster.logs(backend_id, "head")  # shutdownAfterJobFinishes deleted the Ray cluster


def test_the_fake_api_server_refuses_as_the_real_one_does(kube):
    """The log endpoint's own refusals, read with plain HTTP: a container not in the pod, a missing previous
    instance, both since parameters, no pod."""
    import requests

    cluster, name = job_with_pods(kube, workers=1)
    url = f"{kube.url}/api/v1/namespaces/{NS}/pods/{pod_of(name, 0)}/log"
    headers = {"Authorization": f"Bearer {cluster.credentials['token']}"}
    for query, code, words in (
        ({"container": "sidecar"}, 400, "container sidecar is not valid"),
        ({"previous": "true"}, 400, "previous terminated container"),
        ({"sinceSeconds": "5", "sinceTime": "2026-01-01T00:00:00Z"}, 400, "at most one of"),
        ({"limitBytes": "0"}, 422, "limitBytes"),
    ):
        answer = requests.get(url, params=query, headers=headers, timeout=5)
        assert (answer.status_code, words in answer.json()["message"]) == (code, True), answer.text
    missing = requests.get(url.replace(pod_of(name, 0), "nope"), headers=headers, timeout=5)
    assert (missing.status_code, missing.json()["reason"]) == (404, "NotFound")
    kube.add_log(NS, pod_of(name, 0), "a\n", "b\n")
    plain = requests.get(url, params={"tailLines": "1"}, headers=headers, timeout=5)
    assert (plain.headers["Content-Type"], plain.text) == ("text/plain", "b\n")
