"""Service replicas through the scheduler: what ``serving``'s request may be (bad input names the field, nothing
written), the public job API refusing the kind, the endpoint report (its token, its address, a fenced attempt),
and the whole path on the simulated fleet behind a live server: submitted with ``actions.submit_job``, placed
by the loop, started for real, its address reported by its own script, answering from the real process, kept
past its time limit, and gone (connection refused) once ``actions.cancel_job`` stopped it; and the same on the
real Slurm 22.05 lab, where the batch script Slurm runs is ``slurm/service.py``'s."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests
from django.core.exceptions import ValidationError

from clusters.actions import sync
from clusters.backends.simulated import replicas as simulated_replicas
from clusters.models import Cluster
from common import outbound
from scheduler import actions
from scheduler.actions import replicas
from scheduler.actions.checkpoints import token_for
from scheduler.models import Attempt, Job
from scheduler.placement import feasibility, follow
from tests.clusters.conftest import slurm_lab_2205  # noqa: F401 - the Slurm 22.05 lab
from tests.clusters.slurm_lab import SlurmLab
from tests.conftest import api_client
from tests.scheduler.conftest import Fleet

JOBS = "/api/v1/jobs/"
REPLICA: dict[str, Any] = {
    "kind": "service",
    "image": "",
    "command": ["python3", "-m", "http.server", "--bind", "127.0.0.1", "$PORT"],
    "serve_health_path": "/",
    "spread_group": "service-7",
    "accelerators": 0,
    "cpu": 500,
    "memory": 512,
    "time_limit": 3600,
    "max_retries": 0,
}


@pytest.fixture
def no_leftovers(fleet: Fleet) -> Iterator[Fleet]:
    """Every replica process the test's simulated clusters started is gone after it, whatever it asserted."""
    yield fleet
    for path in fleet.state_dir.glob("*.json"):
        text = path.read_text()
        for job in json.loads(text)["jobs"].values() if text.strip() else ():
            simulated_replicas.forget(job)


def replica(fleet: Fleet, **fields: Any) -> Job:
    return fleet.submit(**{**REPLICA, **fields})


def job_token(attempt: Attempt) -> Any:
    client = api_client()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {token_for(attempt)}")
    return client


# --- what a replica request may be --------------------------------------------------------------------------


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("fields", "field", "words"),
    [
        ({"serve_port": 70000}, "serve_port", "from 1 to 65535, or 0"),
        ({"serve_port": -1}, "serve_port", "from 1 to 65535, or 0"),
        ({"serve_health_path": "healthz"}, "serve_health_path", "starts with /"),
        ({"serve_health_path": "/a b"}, "serve_health_path", "starts with /"),
        ({"command": []}, "command", "needs a command"),
        ({"workers": 2}, "workers", "one worker"),
        ({"script": "#!/bin/sh\nserve"}, "image", "leave the script empty"),
        ({"kind": "job", "serve_port": 8080, "image": "x"}, "serve_port", "Only a service replica"),
        ({"kind": "job", "serve_health_path": "/h", "image": "x"}, "serve_health_path", "Only a service replica"),
    ],
)
def test_bad_replica_input_names_the_field_and_writes_nothing(
    fleet: Fleet, fields: dict[str, Any], field: str, words: str
) -> None:
    with pytest.raises(ValidationError) as raised:
        replica(fleet, **fields)
    assert words in " ".join(raised.value.message_dict[field]), raised.value.message_dict
    assert not Job.objects.exists()


@pytest.mark.django_db
def test_people_cannot_submit_a_replica_on_the_job_api(fleet: Fleet, api: Any) -> None:
    body = {"team": "vision", "name": "web", "time_limit": "1h", "kind": "service", "command": ["serve"]}
    response = api("alice").post(JOBS, body, format="json")
    assert response.status_code == 400, response.json()
    assert "/api/v1/services/" in response.json()["error"]["fields"]["kind"][0]
    assert not Job.objects.exists()


# --- the endpoint report -------------------------------------------------------------------------------------


@pytest.mark.django_db
def test_the_endpoint_report_takes_the_current_attempts_address_only(no_leftovers: Fleet, settings: Any) -> None:
    settings.PUBLIC_URL = "http://127.0.0.1:9/"  # nobody listens: the replica's own report fails, ours counts
    fleet = no_leftovers
    job = replica(fleet)
    fleet.cycle()
    fleet.follow()
    job.refresh_from_db()
    assert job.state == Job.State.RUNNING, list(job.events.values_list("message", flat=True))
    assert "Service replica submitted" in job.events.first().message  # type: ignore[union-attr]
    attempt = job.attempts.get(number=job.attempt)
    port = attempt.serve_port  # handed out at its dispatch, from SERVE_REPLICA_PORTS
    first, last = settings.SERVE_REPLICA_PORTS
    assert first <= port <= last
    client = job_token(attempt)
    url = f"{JOBS}{job.pk}/endpoint/"

    bad = client.post(url, {"url": "ftp://10.0.0.7/"}, format="json")
    assert bad.status_code == 400
    assert "url" in bad.json()["error"]["fields"], bad.json()
    assert client.post(url, {}, format="json").status_code == 400
    assert replicas.current_url(job) == ""

    taken = client.post(url, {"url": f"http://127.0.0.1:{port}"}, format="json")  # its node's, on its port
    assert taken.status_code == 201, taken.json()
    assert replicas.current_url(job) == f"http://127.0.0.1:{port}/"

    other = replica(fleet, name="other", spread_group="")
    fleet.cycle()
    other_attempt = other.attempts.get()
    assert other_attempt.serve_port not in (0, port)  # each active replica a port of its own
    wrong = job_token(other_attempt).post(url, {"url": "http://10.0.0.8:1/"}, format="json")
    assert wrong.status_code == 403
    assert api_client().post(url, {"url": "http://10.0.0.8:1/"}, format="json").status_code == 401

    actions.cancel_job(fleet.user("alice"), job, "done")
    fenced = client.post(url, {"url": "http://10.0.0.9:1/"}, format="json")
    assert fenced.status_code == 403, fenced.json()
    assert Attempt.objects.get(pk=attempt.pk).serve_url == f"http://127.0.0.1:{port}/"


@pytest.mark.django_db
def test_a_replica_may_report_only_its_nodes_address_on_the_port_it_was_handed(
    no_leftovers: Fleet, settings: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The review's attack: a replica's own token pointed the public endpoint at another listener of the
    portal's host (127.0.0.1:8227) and at the cloud metadata service. Each is refused, naming why, and nothing is
    stored; a DNS name the cluster reports for the node counts with what it resolves to."""
    settings.PUBLIC_URL = "http://127.0.0.1:9/"
    fleet = no_leftovers
    job = replica(fleet)
    fleet.cycle()
    fleet.follow()
    attempt = Job.objects.get(pk=job.pk).attempts.get()
    node = attempt.assignments.get().node
    assert node.addresses == ["127.0.0.1"]  # the simulated cluster's nodes are this machine
    port = attempt.serve_port
    client = job_token(attempt)
    url = f"{JOBS}{job.pk}/endpoint/"

    def refused(address: str, words: str) -> None:
        answer = client.post(url, {"url": address}, format="json")
        assert answer.status_code == 400, answer.json()
        assert words in answer.json()["error"]["fields"]["url"][0], answer.json()
        assert Attempt.objects.get(pk=attempt.pk).serve_url == ""

    refused("http://127.0.0.1:8227/", f"handed port {port} to listen on, not 8227")
    refused("http://127.0.0.1/", f"handed port {port} to listen on, not 80")
    metadata = f"169.254.169.254 is not an address of the node(s) this replica runs on ({node.name}"
    refused(f"http://169.254.169.254:{port}/", metadata)
    refused(f"http://10.0.0.7:{port}/", "their addresses: 127.0.0.1")
    refused(f"http://localhost:{port}/", "localhost is not an address")  # a name is not its node's address

    # The cluster reports the node by a DNS name: an address it resolves to is the node's.
    node.addresses = ["gpu-07.cluster.internal"]
    node.save(update_fields=["addresses"])
    resolved = {"gpu-07.cluster.internal": ["10.20.0.7"]}
    monkeypatch.setattr(outbound, "resolver", lambda host, port: resolved[host])
    refused(f"http://10.20.0.8:{port}/", "their addresses: gpu-07.cluster.internal")
    taken = client.post(url, {"url": f"http://10.20.0.7:{port}/"}, format="json")
    assert taken.status_code == 201, taken.json()
    assert client.post(url, {"url": f"http://gpu-07.cluster.internal:{port}/"}, format="json").status_code == 201

    # A node the inventory knows no address of: nothing is taken, and the message says why.
    node.addresses = []
    node.save(update_fields=["addresses"])
    answer = client.post(url, {"url": f"http://10.20.0.7:{port}/"}, format="json")
    assert answer.status_code == 400
    assert "reports no address for them" in answer.json()["error"]["fields"]["url"][0]


@pytest.mark.django_db
def test_a_retried_dispatch_keeps_the_port_and_a_service_port_is_the_services(no_leftovers: Fleet) -> None:
    fleet = no_leftovers
    fixed = replica(fleet, serve_port=8080)
    free = replica(fleet, name="other", spread_group="")
    fleet.cycle()
    fixed_attempt, free_attempt = (Job.objects.get(pk=j.pk).attempts.get() for j in (fixed, free))
    assert fixed_attempt.serve_port == 8080
    assert replicas.hand_out_port(free_attempt) == free_attempt.serve_port != 0  # kept, not handed again
    plain = fleet.submit(name="batch", accelerators=0, cpu=500, memory=512)
    fleet.cycle()
    assert Job.objects.get(pk=plain.pk).attempts.get().serve_port == 0


# --- the whole path --------------------------------------------------------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_a_replica_is_placed_reports_answers_outlives_its_limit_and_is_gone_after_a_cancel(
    no_leftovers: Fleet, live_server: Any, settings: Any
) -> None:
    settings.PUBLIC_URL = live_server.url  # where the replica's script reports its address
    fleet = no_leftovers
    job = replica(fleet, time_limit=60)
    fleet.cycle()
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and not replicas.current_url(job):
        fleet.follow()
        job.refresh_from_db()
        assert job.state not in (Job.State.FAILED, Job.State.SUCCEEDED), list(job.events.values_list("message"))
        time.sleep(0.5)
    url = replicas.current_url(job)
    assert url.startswith("http://127.0.0.1:"), url
    assert requests.get(url, timeout=5).status_code == 200  # the real program

    fleet.follow(fleet.later(3600))  # an hour past its time limit: not signalled, still running
    job.refresh_from_db()
    assert job.state == Job.State.RUNNING
    assert not job.attempts.get(number=job.attempt).stop_deadline

    actions.cancel_job(fleet.user("alice"), job, "scaled down")
    fleet.follow()  # the loop's sweep cancels it on the cluster: its processes end
    job.refresh_from_db()
    assert job.state == Job.State.CANCELLED
    with pytest.raises(requests.ConnectionError):
        requests.get(url, timeout=5)


@pytest.mark.slurm
@pytest.mark.django_db(transaction=True)
def test_a_replica_runs_on_the_real_slurm_lab_reports_answers_and_is_gone_after_a_cancel(
    fleet: Fleet,
    slurm_lab_2205: SlurmLab,  # noqa: F811
    live_server: Any,
    settings: Any,
    tmp_path: Path,
) -> None:
    settings.PUBLIC_URL = live_server.url
    cluster = Cluster.objects.create(
        organization=fleet.org,
        name="Slurm lab",
        slug="slurm-lab",
        kind="slurm",
        endpoint=slurm_lab_2205.endpoint,
        region="eu",
        options={**slurm_lab_2205.options, "workdir": str(tmp_path)},
    )
    cluster.set_credentials({"user": "root", "token": slurm_lab_2205.token})
    cluster.save()
    assert sync.sync_cluster(cluster.pk).ok
    feasibility.forget(fleet.org)
    job = fleet.submit(**{**REPLICA, "cpu": 1000, "memory": 512, "clusters": [cluster]})  # the lab is shared
    fleet.cycle()
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline and not replicas.current_url(job):
        if not job.attempts.exists():  # its node was busy with another test's job: placed once it frees
            sync.sync_cluster(cluster.pk)
            fleet.cycle()
        follow.follow(cluster.pk)
        job.refresh_from_db()
        assert job.state not in (Job.State.FAILED, Job.State.SUCCEEDED), list(job.events.values_list("message"))
        time.sleep(1)
    url = replicas.current_url(job)
    assert url.startswith("http://127.0.0.1:"), (url, list(job.events.values_list("message")))
    assert requests.get(url, timeout=5).status_code == 200  # the real program, started by Slurm

    actions.cancel_job(fleet.user("alice"), job, "scaled down")
    gone = time.monotonic() + 60
    while time.monotonic() < gone:
        follow.follow(cluster.pk)  # the sweep cancels it on the cluster: scancel, SIGTERM to the script
        try:
            requests.get(url, timeout=2)
        except requests.ConnectionError:
            break
        time.sleep(1)
    with pytest.raises(requests.ConnectionError):
        requests.get(url, timeout=2)
    job.refresh_from_db()
    assert job.state == Job.State.CANCELLED
