"""The TPU backend: the real ``google-cloud-tpu`` client (v2, REST) against the local server in ``tpu_server.py``."""

from __future__ import annotations

import json
import socket
from collections.abc import Iterator
from typing import Any

import pytest

from clusters.backends import base
from clusters.backends.base import (
    AuthenticationFailed,
    BackendError,
    BadResponse,
    DryRun,
    Failure,
    InvalidJob,
    JobSpec,
    JobState,
    NotFound,
    Unreachable,
    permanent,
)
from clusters.backends.tpu import TpuBackend
from clusters.backends.tpu.accelerators import UnknownAcceleratorType, chips
from clusters.backends.tpu.backend import JOB_LABEL, queued_resource_id
from tests.clusters.tpu_server import TpuServer


@pytest.fixture
def server() -> Iterator[TpuServer]:
    with TpuServer() as tpu:
        yield tpu


def backend(server: TpuServer, credentials: dict[str, str] | None = None, **options: Any) -> TpuBackend:
    dry_run = options.pop("dry_run", False)
    return TpuBackend(
        server.url,
        credentials,
        {"project": server.project, "zone": server.zone, **options},
        dry_run=dry_run,
        timeout=5,
    )


def job(job_id: str = "42", **fields: Any) -> JobSpec:
    values: dict[str, Any] = {
        "id": job_id,
        "name": "train resnet",
        "workers": 1,
        "accelerators_per_worker": 4,
        "cpu_per_worker": 0,
        "memory_per_worker": 0,
        "nodes": (),
        "time_limit": 3600,
        "command": ("python", "train.py", "--steps", "10"),
        "env": {"WANDB_MODE": "offline"},
        "queue": "v5p-8",
        **fields,
    }
    return JobSpec(**values)


def created(server: TpuServer) -> Any:
    """The body of the one queued resource the server was asked to create."""
    (post,) = [r for r in server.requests if r.method == "POST"]
    return post.body


# the chip-count rule
@pytest.mark.parametrize(
    ("accelerator_type", "topology", "expected"),
    [
        ("v2-8", "", 4),
        ("v3-32", "", 16),
        ("v4-8", "", 4),
        ("v5p-8", "", 4),
        ("v5p-16", "", 8),
        ("v5litepod-8", "", 8),
        ("v5litepod-256", "", 256),
        ("v6e-8", "", 8),
        ("v5p-8", "2x2x1", 4),
        ("v6e-16", "4x4", 16),
    ],
)
def test_chips_follow_each_generations_rule(accelerator_type: str, topology: str, expected: int) -> None:
    assert chips(accelerator_type, topology) == expected


@pytest.mark.parametrize("bad", ["v9z-8", "v5p", "tpu", "v5p-0"])
def test_types_without_a_rule_are_refused(bad: str) -> None:
    with pytest.raises(UnknownAcceleratorType):
        chips(bad)


def test_queued_resource_ids_are_dns_safe_and_stable() -> None:
    assert queued_resource_id("42") == "qm-42"
    assert queued_resource_id("job-7") == "qm-job-7"
    odd = queued_resource_id("Job_1/ä")
    assert odd == queued_resource_id("Job_1/ä")
    assert odd.startswith("qm-job-1-")
    assert odd != queued_resource_id("job-1")
    long = queued_resource_id("x" * 200)
    assert len(long) <= 63
    assert long[-1].isalnum()
    for made in (odd, long, queued_resource_id("--")):
        assert made[0].isalpha()
        assert set(made) <= set("abcdefghijklmnopqrstuvwxyz0123456789-")


def test_loads_lazily_by_kind() -> None:
    assert base.load("tpu") is TpuBackend


def test_project_and_zone_are_required() -> None:
    with pytest.raises(BackendError, match="project and zone"):
        TpuBackend("http://127.0.0.1:1", options={"project": "p"})


# reads
def test_inventory_maps_slices_to_nodes(server: TpuServer) -> None:
    inventory = backend(server, host_cpu=208_000, host_memory_mib=458_752).inventory()
    nodes = {node.name: node for node in inventory.nodes}
    assert list(nodes) == ["train-a", "train-b", "serve-c"]

    ready = nodes["train-a"]
    assert (ready.accelerator, ready.accelerators, ready.accelerators_allocatable) == ("v5p", 8, 8)
    assert (ready.cpu, ready.memory) == (2 * 208_000, 2 * 458_752)  # two hosts
    assert ready.ready
    assert ready.schedulable
    assert ready.topology == {"zone": server.zone, "slice": "train-a"}
    assert ready.labels["team"] == "vision"
    assert ready.labels["tpu/accelerator-type"] == "v5p-16"
    assert ready.accelerators_used == 0

    repairing = nodes["train-b"]
    assert (repairing.accelerators, repairing.accelerators_allocatable) == (4, 0)
    assert not repairing.ready
    assert not repairing.schedulable
    assert repairing.labels["tpu/health"] == "UNHEALTHY_MAINTENANCE"

    by_name = nodes["serve-c"]  # no acceleratorConfig: chips from the type's name
    assert (by_name.accelerator, by_name.accelerators) == ("v6e", 8)
    assert by_name.labels["tpu/spot"] == "true"

    models = {a.model: a for a in inventory.accelerators}
    assert set(models) == {"v4", "v5p", "v5e", "v6e"}
    assert (models["v5p"].generation, models["v5p"].interconnect, models["v5p"].memory_gib) == ("tpu-v5p", "ici", 95)
    # Both lists came in pages of two: the client followed nextPageToken.
    assert [r.query.get("pageToken") for r in server.requests if r.path.endswith("/nodes")] == [None, "2"]


def test_health_signals_from_state_health_and_symptoms(server: TpuServer) -> None:
    signals = backend(server).health()
    failing = {(s.node, s.check): s for s in signals if not s.ok}
    assert set(failing) == {("train-b", "ready"), ("train-b", "tpu_health"), ("train-b", "tpu_symptom")}
    assert "maintenance event" in failing["train-b", "tpu_health"].message
    symptom = failing["train-b", "tpu_symptom"]
    assert "HBM_OUT_OF_MEMORY" in symptom.message
    assert symptom.observed_at is not None
    assert {(s.node, s.check) for s in signals if s.ok} >= {("train-a", "ready"), ("train-a", "tpu_health")}


# submit, status, cancel
def test_submit_reserved_asks_for_a_guaranteed_reserved_slice(server: TpuServer) -> None:
    assert backend(server, reservation="team-res").submit(job()) == "qm-42"
    body = created(server)
    (post,) = server.mutations()
    assert post.path == f"/v2/{server.parent}/queuedResources"
    assert post.query["queuedResourceId"] == "qm-42"
    assert body["guaranteed"] == {}
    assert "spot" not in body
    assert body["reservationName"] == f"{server.parent}/reservations/team-res"
    (spec,) = body["tpu"]["nodeSpec"]
    assert (spec["parent"], spec["nodeId"]) == (server.parent, "qm-42")
    node = spec["node"]
    assert node["acceleratorType"] == "v5p-8"
    assert node["runtimeVersion"] == "v2-alpha-tpuv5"
    assert node["schedulingConfig"] == {"reserved": True}
    assert node["labels"] == {JOB_LABEL: "42"}
    script = node["metadata"]["startup-script"]
    assert script.splitlines() == ["#!/bin/bash", "export WANDB_MODE=offline", "python train.py --steps 10"]


def test_submit_spot_asks_for_the_spot_tier(server: TpuServer) -> None:
    backend(server).submit(job(spot=True, image="ghcr.io/lab/jax:1", queue="v5litepod-8", accelerators_per_worker=8))
    body = created(server)
    assert body["spot"] == {}
    assert "guaranteed" not in body
    node = body["tpu"]["nodeSpec"][0]["node"]
    assert "schedulingConfig" not in node
    assert node["runtimeVersion"] == "v2-alpha-tpuv5-lite"
    assert node["metadata"]["startup-script"].splitlines()[-1] == (
        "docker run --rm --net=host --privileged --env=WANDB_MODE ghcr.io/lab/jax:1 python train.py --steps 10"
    )


def test_submit_on_demand_when_the_cluster_has_no_reservation(server: TpuServer) -> None:
    backend(server, reserved="false").submit(job())
    body = created(server)
    assert body["guaranteed"] == {}
    assert "reservationName" not in body
    assert "schedulingConfig" not in body["tpu"]["nodeSpec"][0]["node"]


def test_a_job_queue_may_name_a_reservation(server: TpuServer) -> None:
    backend(server, accelerator_type="v5p-8", reserved="false").submit(job(queue="lab-v5p"))
    body = created(server)
    assert body["reservationName"] == f"{server.parent}/reservations/lab-v5p"
    node = body["tpu"]["nodeSpec"][0]["node"]
    assert (node["acceleratorType"], node["schedulingConfig"]) == ("v5p-8", {"reserved": True})
    with pytest.raises(InvalidJob, match="spot job cannot use reservation"):
        backend(server, accelerator_type="v5p-8").submit(job("43", queue="lab-v5p", spot=True))


def test_submit_takes_the_clusters_accelerator_type_and_checks_the_job_fits(server: TpuServer) -> None:
    tpu = backend(server, accelerator_type="v5p-16", runtime_version="v2-alpha-tpuv5-custom")
    tpu.submit(job(queue="", workers=2))
    node = created(server)["tpu"]["nodeSpec"][0]["node"]
    assert (node["acceleratorType"], node["runtimeVersion"]) == ("v5p-16", "v2-alpha-tpuv5-custom")
    with pytest.raises(InvalidJob, match="asks for 16 chips"):
        tpu.submit(job("43", queue="v5p-16", workers=4))
    with pytest.raises(InvalidJob, match="no TPU accelerator type"):  # not transient: it would loop for ever
        backend(server).submit(job("44", queue=""))
    with pytest.raises(InvalidJob, match="no chip-count rule"):
        backend(server).submit(job("45", queue="v9x-8"))
    with pytest.raises(InvalidJob, match="environment variable"):
        backend(server).submit(job("46", env={"A;rm -rf /": "x"}))
    assert len(server.mutations()) == 1


def test_submit_is_idempotent_on_the_job_id(server: TpuServer) -> None:
    tpu = backend(server)
    assert tpu.submit(job()) == "qm-42"
    assert tpu.submit(job()) == "qm-42"  # the server answered 409 ALREADY_EXISTS
    assert len(server.mutations()) == 2
    assert list(server.queued_resources) == ["qm-42"]


def test_a_409_that_is_not_already_exists_is_transient(server: TpuServer) -> None:
    aborted = {"error": {"code": 409, "message": "concurrent change", "status": "ABORTED"}}
    server.canned = (409, json.dumps(aborted).encode())
    with pytest.raises(BackendError, match="concurrent change") as caught:
        backend(server).submit(job())
    assert not permanent(caught.value)


def test_an_accelerator_type_the_zone_does_not_offer_is_refused_for_good(server: TpuServer) -> None:
    with pytest.raises(InvalidJob, match="Unknown accelerator type 'v5p-8192' in us-east5-a") as caught:
        backend(server).submit(job(queue="v5p-8192"))
    assert permanent(caught.value)


@pytest.mark.parametrize(
    ("code", "status", "message", "raised"),
    [
        (400, "INVALID_ARGUMENT", "runtime version v2-nope is not supported", InvalidJob),
        (400, "FAILED_PRECONDITION", "the reservation has no capacity of that type", InvalidJob),
        (403, "PERMISSION_DENIED", "Permission 'tpu.queuedResources.create' denied on reservation", InvalidJob),
        (404, "NOT_FOUND", "Reservation lab-v5p not found", InvalidJob),
        (429, "RESOURCE_EXHAUSTED", "Quota 'TPUV5PPerProjectPerZone' exceeded", BackendError),
        (500, "INTERNAL", "internal error", BackendError),
        (503, "UNAVAILABLE", "try again", Unreachable),
        (504, "DEADLINE_EXCEEDED", "deadline exceeded", Unreachable),
    ],
)
def test_create_errors_are_permanent_or_transient(
    server: TpuServer, code: int, status: str, message: str, raised: type[BackendError]
) -> None:
    server.canned = (code, json.dumps({"error": {"code": code, "message": message, "status": status}}).encode())
    with pytest.raises(BackendError, match=message) as caught:
        backend(server).submit(job())
    assert type(caught.value) is raised
    assert permanent(caught.value) is (raised is InvalidJob)


def test_status_follows_the_queued_resource_to_active(server: TpuServer) -> None:
    server.operations_done = True  # a done Operation carries the QueuedResource: parsed all the same
    tpu = backend(server)
    backend_id = tpu.submit(job())
    assert isinstance(backend_id, str)
    seen = [tpu.status(backend_id) for _ in range(4)]
    assert [(s.state, s.message) for s in seen] == [
        (JobState.PENDING, "ACCEPTED"),
        (JobState.PENDING, "WAITING_FOR_RESOURCES"),
        (JobState.PENDING, "PROVISIONING"),
        (JobState.RUNNING, "ACTIVE"),
    ]
    assert seen[-1].nodes == ("qm-42",)
    assert seen[0].nodes == ()
    # The full resource name works as well as the short id.
    assert tpu.status(f"{server.parent}/queuedResources/qm-42").state == JobState.RUNNING
    # The provisioned slice shows in the inventory, held by the job.
    slice_ = {n.name: n for n in tpu.inventory().nodes}["qm-42"]
    assert (slice_.accelerators, slice_.accelerators_used, slice_.labels[JOB_LABEL]) == (4, 4, "42")
    assert slice_.labels["tpu/queued-resource"] == "qm-42"


def test_failed_and_suspended_queued_resources(server: TpuServer) -> None:
    tpu = backend(server)
    for job_id in ("1", "2", "3"):
        tpu.submit(job(job_id))
    server.fail("qm-1", "Insufficient capacity for v5p-8 in us-east5-a")
    server.suspend("qm-2", "SERVICE")
    server.suspend("qm-3", "USER")
    failed = tpu.status("qm-1")
    assert (failed.state, failed.reason) == (JobState.FAILED, Failure.UNSCHEDULABLE)  # RESOURCE_EXHAUSTED
    assert failed.message == "FAILED: Insufficient capacity for v5p-8 in us-east5-a"
    taken = tpu.status("qm-2")
    assert (taken.state, taken.reason) == (JobState.FAILED, Failure.PREEMPTED)
    assert "Cloud TPU took the slice back" in taken.message
    released = tpu.status("qm-3")
    assert (released.state, released.reason) == (JobState.CANCELLED, "")


def test_a_queued_resource_failed_as_invalid(server: TpuServer) -> None:
    tpu = backend(server)
    tpu.submit(job())
    server.fail("qm-42", "Runtime version is not compatible with the accelerator type", code=9)
    failed = tpu.status("qm-42")
    assert (failed.state, failed.reason) == (JobState.FAILED, Failure.INVALID)
    assert "not compatible" in failed.message


def test_signal_does_nothing_but_checks_the_job_exists(server: TpuServer) -> None:
    tpu = backend(server)
    tpu.submit(job())
    before = len(server.mutations())
    assert tpu.signal("qm-42", 30) is None
    assert len(server.mutations()) == before  # Cloud TPU cannot signal a workload
    with pytest.raises(NotFound):
        tpu.signal("qm-404", 30)


def test_cancel_deletes_the_queued_resource_with_force(server: TpuServer) -> None:
    tpu = backend(server)
    tpu.submit(job())
    for _ in range(4):
        tpu.status("qm-42")  # ACTIVE: only a forced delete is allowed
    assert tpu.cancel("qm-42") is None
    delete = server.mutations()[-1]
    assert (delete.method, delete.path) == ("DELETE", f"/v2/{server.parent}/queuedResources/qm-42")
    assert delete.query["force"] == "true"
    assert tpu.status("qm-42").state == JobState.CANCELLED  # DELETING
    with pytest.raises(NotFound):
        tpu.status("qm-42")  # gone, and its slice with it
    assert "qm-42" not in {n.name for n in tpu.inventory().nodes}
    with pytest.raises(NotFound):
        tpu.cancel("qm-42")
    with pytest.raises(NotFound):
        tpu.status("../nodes/train-a")  # not an id: refused before any request


# cordon, drain, resume
def test_cordon_drain_resume_change_nothing_on_the_cluster(server: TpuServer) -> None:
    tpu = backend(server)
    assert tpu.cordon("train-a", "bad ICI link") is None
    assert tpu.drain("train-a", "bad ICI link") is None
    assert tpu.resume("train-a") is None
    assert server.mutations() == []
    assert [r.path for r in server.requests] == [f"/v2/{server.parent}/nodes/train-a"] * 3
    for verb in (tpu.cordon, tpu.drain):
        with pytest.raises(NotFound, match="nope"):
            verb("nope", "typo")
    with pytest.raises(NotFound):
        tpu.resume("nope")


# dry run
def test_dry_run_calls_nothing(server: TpuServer) -> None:
    tpu = backend(server, dry_run=True)
    planned = tpu.submit(job(spot=True))
    assert isinstance(planned, DryRun)
    assert (planned.action, planned.target) == ("submit", f"{server.parent}/queuedResources/qm-42")
    assert planned.detail["queued_resource"]["spot"] == {}
    assert planned.detail["queued_resource"]["tpu"]["nodeSpec"][0]["node"]["acceleratorType"] == "v5p-8"
    assert tpu.cancel("qm-42") == DryRun("cancel", f"{server.parent}/queuedResources/qm-42", {"force": True})
    for result in (tpu.cordon("train-a", "x"), tpu.drain("train-a", "x"), tpu.resume("train-a")):
        assert isinstance(result, DryRun)
        assert result.target == f"{server.parent}/nodes/train-a"
    assert server.requests == []
    assert server.queued_resources == {}
    with pytest.raises(BackendError, match="asks for"):
        tpu.submit(job(accelerators_per_worker=8))  # arguments are still checked
    assert len(tpu.inventory().nodes) == 3  # reads still read


# errors
def test_connection_refused_is_unreachable() -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    tpu = TpuBackend(f"http://127.0.0.1:{port}", options={"project": "p", "zone": "z"}, timeout=2)
    with pytest.raises(Unreachable, match="did not answer"):
        tpu.inventory()
    with pytest.raises(Unreachable):
        tpu.submit(job())


def test_a_hung_api_is_unreachable(server: TpuServer) -> None:
    server.delay = 0.5
    tpu = TpuBackend(server.url, options={"project": server.project, "zone": server.zone}, timeout=0.1)
    with pytest.raises(Unreachable, match="Timeout"):
        tpu.status("qm-1")


def test_refused_credentials(server: TpuServer) -> None:
    server.token = "good-token"
    assert backend(server, {"access_token": "good-token"}).inventory().nodes
    with pytest.raises(AuthenticationFailed, match="refused the token"):
        backend(server, {"access_token": "stale-token"}).inventory()
    with pytest.raises(AuthenticationFailed, match="anonymous"):
        backend(server).status("qm-1")
    server.token = None
    other = TpuBackend(server.url, {}, {"project": "someone-else", "zone": server.zone})
    with pytest.raises(AuthenticationFailed, match="HTTP 403"):
        other.inventory()
    with pytest.raises(AuthenticationFailed, match="unknown credential fields password"):
        backend(server, {"password": "hunter2"}).inventory()


def test_a_malformed_service_account_key_is_named_without_its_secret(server: TpuServer) -> None:
    secret = json.dumps({"type": "service_account", "private_key": "-----SECRET-----"})
    with pytest.raises(AuthenticationFailed, match="not a service-account key") as raised:
        backend(server, {"service_account_json": secret}).inventory()
    assert "SECRET" not in str(raised.value)


def test_a_service_account_signs_its_requests(server: TpuServer, monkeypatch: pytest.MonkeyPatch) -> None:
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import rsa
    from google.oauth2.service_account import Credentials

    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    pem = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    ).decode()
    info = {
        "type": "service_account",
        "project_id": server.project,
        "private_key_id": "k1",
        "private_key": pem,
        "client_email": "quartermaster@qm-test.iam.gserviceaccount.com",
        "client_id": "1",
        "token_uri": "https://oauth2.googleapis.com/token",
    }
    # google-auth would also look up the account's regional access boundary at iamcredentials.googleapis.com
    # in a background thread; the tests reach no real Google service.
    monkeypatch.setattr(Credentials, "_is_regional_access_boundary_lookup_required", lambda self: False, raising=False)
    backend(server, {"service_account_json": json.dumps(info)}).inventory()
    # A self-signed JWT: no call to the token endpoint, the key never leaves.
    assert all(r.headers["authorization"].startswith("Bearer ey") for r in server.requests)


@pytest.mark.parametrize(
    "canned",
    [
        (200, b'{"nodes": ['),  # cut off
        (200, b"<html>proxy login</html>"),  # not JSON
        (200, b'{"nodes": "train-a"}'),  # wrong type
        (200, b'{"acceleratorTypes": [{"type": "v5p-8"}], "nodes": [{"name": "x", "state": "NAPPING"}]}'),
    ],
)
def test_malformed_answers_are_bad_responses(server: TpuServer, canned: tuple[int, bytes]) -> None:
    server.canned = canned
    with pytest.raises(BadResponse):
        backend(server).inventory()


def test_a_slice_without_an_accelerator_type_is_a_bad_response(server: TpuServer) -> None:
    server.add_node("mystery", state="READY")
    with pytest.raises(BadResponse, match="mystery reports no accelerator type"):
        backend(server).inventory()
    del server.nodes["mystery"]
    server.canned = (200, b"{not json")
    with pytest.raises(BadResponse):
        backend(server).status("qm-42")


@pytest.mark.parametrize(
    ("status", "error"),
    [(429, BackendError), (400, InvalidJob), (500, BackendError), (503, Unreachable)],
)
def test_http_errors(server: TpuServer, status: int, error: type[BackendError]) -> None:
    server.canned = (status, json.dumps({"error": {"code": status, "message": "nope", "status": "X"}}).encode())
    with pytest.raises(error, match=f"HTTP {status}"):
        backend(server).submit(job())
