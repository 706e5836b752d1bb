"""The TPU backend: the real ``google-cloud-tpu`` client (v2, REST) against the local server in ``tpu_server.py``."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, HTTPServer
from typing import Any, ClassVar

import pytest

from clusters.backends import kinds
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
from clusters.backends.tpu.accelerators import UnknownAcceleratorType, chips
from clusters.backends.tpu.backend import JOB_LABEL, TEAM_LABEL, TpuBackend, queued_resource_id
from tests.clusters.tpu_server import ACCELERATOR_CONFIG_TYPE, ApiError, TpuServer


@pytest.fixture
def server() -> Iterator[TpuServer]:
    with TpuServer() as tpu:
        yield tpu


#: The slices the test cluster may hold: two v5p-8, two v5p-32 of topology 2x2x4, one v5litepod-8.
SLICES = {"v5p-8": 2, "v5p-32/2x2x4": 2, "v5litepod-8": 1}


def backend(server: TpuServer, credentials: dict[str, str] | None = None, **options: Any) -> TpuBackend:
    dry_run = options.pop("dry_run", False)
    return TpuBackend(
        server.url,
        credentials,
        {"project": server.project, "zone": server.zone, "slices": SLICES, **options},
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
        "time_limit": 3600,
        "command": ("python", "train.py", "--steps", "10"),
        "env": {"WANDB_MODE": "offline"},
        "tpu_type": "v5p-8",
        "nodes": ("qm-v5p-8-1",),
        "team": "vision",
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
    assert kinds.load("tpu") is TpuBackend


def test_project_and_zone_are_required() -> None:
    with pytest.raises(BackendError, match="project and zone"):
        TpuBackend("http://127.0.0.1:1", options={"project": "p"})


# reads
def test_inventory_maps_slices_to_nodes(server: TpuServer) -> None:
    inventory = backend(server, host_cpu=208_000, host_memory_mib=458_752).inventory()
    nodes = {node.name: node for node in inventory.nodes}
    assert list(nodes) == [
        "train-a",
        "train-b",
        "serve-c",
        "qm-v5litepod-8-1",
        "qm-v5p-32-2x2x4-1",
        "qm-v5p-32-2x2x4-2",
        "qm-v5p-8-1",
        "qm-v5p-8-2",
    ]

    existing = nodes["train-a"]  # a slice Quartermaster did not make: its owner's, never used
    assert (existing.accelerator, existing.accelerators, existing.accelerators_allocatable) == ("v5p", 8, 0)
    assert (existing.cpu, existing.memory) == (2 * 208_000, 2 * 458_752)  # two hosts
    assert existing.ready
    assert not existing.schedulable
    assert existing.topology == {"zone": server.zone, "slice": "train-a"}
    assert existing.labels["team"] == "vision"
    assert existing.labels["tpu/accelerator-type"] == "v5p-16"
    assert existing.labels["tpu/topology"] == "2x2x2"
    assert existing.labels["tpu/provisioned"] == "true"
    assert existing.accelerators_used == 0
    assert existing.addresses == ("10.0.1.2", "10.0.1.3")  # its two hosts' network endpoints

    repairing = nodes["train-b"]
    assert (repairing.accelerators, repairing.accelerators_allocatable) == (4, 0)
    assert not repairing.ready
    assert not repairing.schedulable
    assert repairing.labels["tpu/health"] == "UNHEALTHY_MAINTENANCE"

    by_name = nodes["serve-c"]  # no acceleratorConfig: chips from the type's name
    assert (by_name.accelerator, by_name.accelerators) == ("v6e", 8)
    assert by_name.labels["tpu/spot"] == "true"
    assert "tpu/topology" not in by_name.labels

    slot = nodes["qm-v5p-32-2x2x4-1"]  # room for a slice: what it would be, idle and schedulable
    assert (slot.accelerator, slot.accelerators, slot.accelerators_allocatable, slot.accelerators_used) == (
        "v5p",
        16,
        16,
        0,
    )
    assert (slot.cpu, slot.memory) == (4 * 208_000, 4 * 458_752)  # four hosts of four chips
    assert slot.ready
    assert slot.schedulable
    assert slot.addresses == ()  # not made yet: nowhere to be reached
    assert slot.labels == {
        "tpu/accelerator-type": "v5p-32",
        "tpu/topology": "2x2x4",
        "tpu/provisioned": "false",
        "tpu/hosts": "4",
    }
    assert (nodes["qm-v5litepod-8-1"].accelerators, nodes["qm-v5litepod-8-1"].labels["tpu/hosts"]) == (8, "1")

    models = {a.model: a for a in inventory.accelerators}
    assert set(models) == {"v4", "v5p", "v5e", "v6e"}
    assert (models["v5p"].generation, models["v5p"].interconnect, models["v5p"].memory_gib) == ("tpu-v5p", "ici", 95)
    # Both lists came in pages of two: the client followed nextPageToken.
    assert [r.query.get("pageToken") for r in server.requests if r.path.endswith("/nodes")] == [None, "2"]


@pytest.mark.parametrize(
    ("slices", "words"),
    [
        ({"v9x-8": 1}, "no chip-count rule"),
        ({"v5p-32/2x2x2": 1}, "topology 2x2x2 is 8 chips; a v5p-32 slice has 16"),
        ({"v5p-8": -1}, "whole number"),
        ({"v5p-8": True}, "whole number"),
        (["v5p-8"], "mapping of slice shape to count"),
    ],
)
def test_a_bad_slices_option_is_named(server: TpuServer, slices: Any, words: str) -> None:
    with pytest.raises(BackendError, match=words):
        backend(server, slices=slices)


def test_a_cluster_without_slices_offers_no_slots(server: TpuServer) -> None:
    names = [node.name for node in backend(server, slices=None).inventory().nodes]
    assert names == ["train-a", "train-b", "serve-c"]


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
    assert (spec["parent"], spec["nodeId"]) == (server.parent, "qm-v5p-8-1")  # the slot the engine chose
    node = spec["node"]
    assert node["acceleratorType"] == "v5p-8"
    assert "acceleratorConfig" not in node
    assert node["runtimeVersion"] == "v2-alpha-tpuv5"
    assert node["schedulingConfig"] == {"reserved": True}
    assert node["labels"] == {JOB_LABEL: "42", TEAM_LABEL: "vision"}
    script = node["metadata"]["startup-script"].splitlines()
    assert script[:4] == [
        "#!/bin/bash",
        "export WANDB_MODE=offline",
        "export QM_SLICE=0 QM_SLICES=1",
        "python train.py --steps 10",
    ]
    assert script[-1] == 'exit "$code"'
    assert any("/report/" in line for line in script)


def test_submit_spot_asks_for_the_spot_tier(server: TpuServer) -> None:
    spot = job(spot=True, image="ghcr.io/lab/jax:1", tpu_type="v5litepod-8", nodes=("qm-v5litepod-8-1",))
    backend(server).submit(spot)
    body = created(server)
    assert body["spot"] == {}
    assert "guaranteed" not in body
    node = body["tpu"]["nodeSpec"][0]["node"]
    assert "schedulingConfig" not in node
    assert node["runtimeVersion"] == "v2-alpha-tpuv5-lite"
    assert node["metadata"]["startup-script"].splitlines()[3] == (
        "docker run --rm --net=host --privileged --env=WANDB_MODE --env=QM_SLICE --env=QM_SLICES "
        "ghcr.io/lab/jax:1 python train.py --steps 10"
    )


def test_submit_on_demand_when_the_cluster_has_no_reservation(server: TpuServer) -> None:
    backend(server, reserved="false").submit(job())
    body = created(server)
    assert body["guaranteed"] == {}
    assert "reservationName" not in body
    assert "schedulingConfig" not in body["tpu"]["nodeSpec"][0]["node"]


def test_a_job_queue_may_name_a_reservation(server: TpuServer) -> None:
    backend(server, reserved="false").submit(job(queue="lab-v5p"))
    body = created(server)
    assert body["reservationName"] == f"{server.parent}/reservations/lab-v5p"
    node = body["tpu"]["nodeSpec"][0]["node"]
    assert (node["acceleratorType"], node["schedulingConfig"]) == ("v5p-8", {"reserved": True})
    with pytest.raises(InvalidJob, match="spot job cannot use reservation"):
        backend(server).submit(job("43", queue="lab-v5p", spot=True))


def test_multislice_is_one_queued_resource_of_several_slices(server: TpuServer) -> None:
    """Two v5p-32 slices of topology 2x2x4 on the two slots the engine chose: one queued resource, two node
    specs, provisioned together; each slice's script knows which it is."""
    tpu = backend(server)
    multi = job(
        "7", workers=2, accelerators_per_worker=16, tpu_type="v5p-32", tpu_topology="2x2x4",
        nodes=("qm-v5p-32-2x2x4-2", "qm-v5p-32-2x2x4-1"),
    )  # fmt: skip
    assert tpu.submit(multi) == "qm-7"
    specs = created(server)["tpu"]["nodeSpec"]
    assert [s["nodeId"] for s in specs] == ["qm-v5p-32-2x2x4-2", "qm-v5p-32-2x2x4-1"]
    for index, spec in enumerate(specs):
        node = spec["node"]
        assert node["acceleratorConfig"] == {"type": ACCELERATOR_CONFIG_TYPE["V5P"], "topology": "2x2x4"}
        assert "acceleratorType" not in node
        assert f"export QM_SLICE={index} QM_SLICES=2" in node["metadata"]["startup-script"].splitlines()
    seen = [tpu.status("qm-7") for _ in range(4)]
    assert seen[-1].state == JobState.RUNNING
    assert seen[-1].nodes == ("qm-v5p-32-2x2x4-2", "qm-v5p-32-2x2x4-1")
    inventory = {n.name: n for n in tpu.inventory().nodes}
    for name in seen[-1].nodes:  # the slots are now the slices, held whole by the job
        made = inventory[name]
        assert (made.accelerators, made.accelerators_used, made.labels["tpu/provisioned"]) == (16, 16, "true")
        assert (made.labels["tpu/accelerator-type"], made.labels["tpu/topology"]) == ("v5p-32", "2x2x4")
        assert made.labels[JOB_LABEL] == "7"
        assert made.schedulable


def test_submit_runs_only_on_free_slots_of_the_jobs_shape(server: TpuServer) -> None:
    tpu = backend(server)
    refusals = {
        "names no TPU type": (job("1", tpu_type=""), "name a TPU type"),
        "unknown generation": (job("2", tpu_type="v9x-8"), "no chip-count rule"),
        "topology not the type's": (job("3", tpu_topology="2x2x2"), "topology 2x2x2 is 8 chips"),
        "another team's slice": (
            job("4", nodes=("train-a",)),
            "train-a is an existing slice Quartermaster did not make",
        ),
        "no such slot": (job("5", nodes=("qm-v5p-8-9",)), "qm-v5p-8-9 is no slot"),
        "a slot of another shape": (job("6", nodes=("qm-v5p-32-2x2x4-1",)), "asks for v5p-8 slices; slot qm-v5p-32"),
        "fewer slots than slices": (job("8", workers=2), "2 slice\\(s\\) need as many different slots"),
        "the same slot twice": (job("9", workers=2, nodes=("qm-v5p-8-1",) * 2), "as many different slots"),
        "a bad variable name": (job("10", env={"A;rm -rf /": "x"}), "environment variable"),
    }
    for case, (spec, words) in refusals.items():
        with pytest.raises(InvalidJob, match=words) as caught:
            tpu.submit(spec)
        assert permanent(caught.value), case
    assert server.mutations() == []  # refused before anything was sent


def test_a_slot_still_holding_an_old_slice_is_a_wait_not_a_refusal(server: TpuServer) -> None:
    tpu = backend(server)
    tpu.submit(job("1"))
    for _ in range(4):
        tpu.status("qm-1")  # provisioned: qm-v5p-8-1 is job 1's slice
    with pytest.raises(BackendError, match="slot qm-v5p-8-1 still holds the slice of job 1") as caught:
        tpu.submit(job("2"))
    assert not permanent(caught.value)


def test_a_taken_node_id_fails_the_queued_resource(server: TpuServer) -> None:
    """Cloud TPU makes a queued resource's slices all or none: one whose node id is taken FAILS."""
    tpu = backend(server)
    tpu.submit(job("1"))
    server.add_node("qm-v5p-8-1", acceleratorType="v5p-8", state="READY", labels={"made": "by hand"})
    seen = [tpu.status("qm-1") for _ in range(4)]
    assert (seen[-1].state, seen[-1].reason) == (JobState.FAILED, Failure.INVALID)
    assert "already exists" in seen[-1].message


def test_an_active_queued_resource_with_a_broken_slice_has_lost_its_node(server: TpuServer) -> None:
    tpu = backend(server)
    tpu.submit(job())
    for _ in range(4):
        tpu.status("qm-42")
    server.break_node("qm-v5p-8-1", "PREEMPTED", "The TPU was preempted")
    lost = tpu.status("qm-42")
    assert (lost.state, lost.reason) == (JobState.FAILED, Failure.NODE_LOST)
    assert lost.message == "ACTIVE, but its slice qm-v5p-8-1 is PREEMPTED: The TPU was preempted"
    del server.nodes["qm-v5p-8-1"]
    assert tpu.status("qm-42").message == "ACTIVE, but its slice qm-v5p-8-1 is gone"


def test_submit_is_idempotent_on_the_job_id(server: TpuServer) -> None:
    tpu = backend(server)
    assert tpu.submit(job()) == "qm-42"
    assert tpu.submit(job()) == "qm-42"  # the server answered 409 ALREADY_EXISTS
    assert len(server.mutations()) == 2
    assert list(server.queued_resources) == ["qm-42"]


def test_a_409_that_is_not_already_exists_is_transient(server: TpuServer) -> None:
    server.fail_requests("POST", "queuedResources", ApiError(409, "concurrent change", "ABORTED"))
    with pytest.raises(BackendError, match="concurrent change") as caught:
        backend(server).submit(job())
    assert not permanent(caught.value)


def test_an_accelerator_type_the_zone_does_not_offer_is_refused_for_good(server: TpuServer) -> None:
    del server.accelerator_types["v5p-8"]
    with pytest.raises(InvalidJob, match="Unknown accelerator type 'v5p-8' in us-east5-a") as caught:
        backend(server).submit(job())
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
    server.fail_requests("POST", "queuedResources", ApiError(code, message, status))
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
    assert seen[-1].nodes == ("qm-v5p-8-1",)
    assert seen[0].nodes == ()
    # The full resource name works as well as the short id.
    assert tpu.status(f"{server.parent}/queuedResources/qm-42").state == JobState.RUNNING
    # The provisioned slice shows in the inventory in its slot's place, held by the job.
    slice_ = {n.name: n for n in tpu.inventory().nodes}["qm-v5p-8-1"]
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
    slot = {n.name: n for n in tpu.inventory().nodes}["qm-v5p-8-1"]  # the slot is free again
    assert (slot.labels["tpu/provisioned"], slot.accelerators_used) == ("false", 0)
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
    assert server.mutations() == []  # the slots were read, nothing changed
    assert server.queued_resources == {}
    with pytest.raises(InvalidJob, match="is no slot"):
        tpu.submit(job(nodes=("qm-nope-1",)))  # arguments are still checked
    assert len(tpu.inventory().nodes) == 8  # reads still read


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
    server.fail_requests("POST", "queuedResources", ApiError(status, "nope", "X"))
    with pytest.raises(error, match=f"HTTP {status}"):
        backend(server).submit(job())


# the startup script, run for real
class _Reports(BaseHTTPRequestHandler):
    seen: ClassVar[list[tuple[str, str, Any]]] = []

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        self.seen.append((self.path, self.headers["Authorization"], body))
        self.send_response(201)
        self.send_header("Content-Length", "0")
        self.end_headers()


@pytest.mark.parametrize(
    ("program", "slice_index", "code", "reported"),
    [
        ({"command": ("sh", "-c", "exit 3")}, 0, 3, True),
        ({"command": ("true",)}, 0, 0, True),
        ({"script": "#!/bin/sh\necho step > /dev/null\nexit 7\n"}, 0, 7, True),
        ({"script": '[ "$WANDB_MODE" = offline ] || exit 9\n'}, 0, 0, True),  # no shebang: bash, with the env
        ({"command": ("true",)}, 1, 0, False),  # other slices report only a failure
        ({"command": ("sh", "-c", "exit 2")}, 1, 2, True),
    ],
)
def test_the_startup_script_runs_the_program_and_reports_its_exit_code(
    tmp_path: Any, program: dict[str, Any], slice_index: int, code: int, reported: bool
) -> None:
    """The script as a TPU VM would run it (bash, off Google's network: the worker number is taken as 0),
    reporting to a local stand-in for the report endpoint."""
    _Reports.seen = []
    httpd = HTTPServer(("127.0.0.1", 0), _Reports)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    try:
        env = {
            "WANDB_MODE": "offline",
            "QM_JOB_TOKEN": "qmj_42.1.mac",
            "QM_API_URL": f"http://127.0.0.1:{httpd.server_address[1]}/",
            "QM_JOB_ID": "42-1",
        }
        spec = job("42-1", env=env, **{"command": (), **program})
        script = tmp_path / "startup.sh"
        script.write_text(TpuBackend._startup_script(spec, slice_index, 2))
        done = subprocess.run(["bash", str(script)], capture_output=True, timeout=60, env={"PATH": os.environ["PATH"]})
    finally:
        httpd.shutdown()
    assert done.returncode == code, done.stderr
    expected = [("/api/v1/jobs/42/report/", "Bearer qmj_42.1.mac", {"exit_code": code})]
    assert _Reports.seen == (expected if reported else [])
