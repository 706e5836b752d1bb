"""Slices their owners lend to a team (``quartermaster-team``), against the local Cloud TPU API: reported as
that team's capacity, given a job through their metadata (which the slice's agent, ``deploy/tpu_agent.py``,
reads), followed, stopped and taken back; beside Quartermaster's own slots in one multislice job."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from clusters.backends.base import LENT_TO, BackendError, Failure, InvalidJob, JobState, NotFound
from clusters.backends.tpu.backend import RUN_KEY, SCRIPT_KEY, STOP_KEY, TEAM_LABEL, Run
from tests.clusters.test_tpu_backend import backend, job
from tests.clusters.tpu_server import ApiError, TpuServer, _endpoints

OWNERS_SCRIPT = {"startup-script": "#!/bin/bash\nsystemctl start quartermaster-agent\n"}


@pytest.fixture
def server() -> Iterator[TpuServer]:
    with TpuServer() as tpu:
        tpu.add_node(
            "lab-a",
            acceleratorType="v5p-8",
            acceleratorConfig={"type": "V5P", "topology": "2x2x1"},
            state="READY",
            health="HEALTHY",
            labels={TEAM_LABEL: "vision", "owner": "vision-infra"},
            metadata=dict(OWNERS_SCRIPT),
            networkEndpoints=_endpoints(1, 7),
        )
        yield tpu


def lent(**fields: Any) -> Any:
    return job(nodes=("lab-a",), **fields)


def patches(server: TpuServer) -> list[Any]:
    return [r for r in server.requests if r.method == "PATCH"]


def test_a_lent_slice_is_its_teams_capacity_and_busy_while_it_runs_a_job(server: TpuServer) -> None:
    nodes = {n.name: n for n in backend(server).inventory().nodes}
    slice_ = nodes["lab-a"]
    assert (slice_.accelerators_allocatable, slice_.accelerators_used, slice_.schedulable) == (4, 0, True)
    assert slice_.labels[LENT_TO] == "vision"
    # A slice lent to no one stays out of reach, as before.
    assert (nodes["serve-c"].schedulable, nodes["serve-c"].accelerators_allocatable) == (False, 0)
    assert LENT_TO not in nodes["serve-c"].labels
    assert LENT_TO not in nodes["qm-v5p-8-1"].labels

    backend(server).submit(lent())
    busy = {n.name: n for n in backend(server).inventory().nodes}["lab-a"]
    assert busy.accelerators_used == 4
    assert busy.labels["tpu/running"] == "qm-42=lab-a"


def test_a_job_on_a_lent_slice_is_told_through_its_metadata_the_owners_keys_kept(server: TpuServer) -> None:
    backend_id = str(backend(server).submit(lent()))
    assert backend_id == "qm-42=lab-a"
    assert not server.queued_resources  # nothing is provisioned
    (patch,) = patches(server)
    assert patch.query["updateMask"] == "metadata"
    metadata = server.metadata("lab-a")
    assert metadata["startup-script"] == OWNERS_SCRIPT["startup-script"]
    assert metadata[RUN_KEY] == "qm-42=lab-a"
    script = metadata[SCRIPT_KEY]
    assert "export WANDB_MODE=offline" in script
    assert "python train.py --steps 10" in script
    assert "export QM_SLICE=0 QM_SLICES=1" in script
    assert "/report/" in script

    status = backend(server).status(backend_id)
    assert (status.state, status.nodes) == (JobState.RUNNING, ("lab-a",))
    # Submitting again (a dispatch cut short) finds it told, and tells it nothing more.
    assert backend(server).submit(lent()) == backend_id
    assert len(patches(server)) == 1
    assert backend(server).find("42") == backend_id


@pytest.mark.parametrize(
    ("fields", "words"),
    [
        ({"team": "speech"}, "lent to team vision, not to team speech"),
        ({"tpu_type": "v5p-16", "accelerators_per_worker": 8}, "slice lab-a is v5p-8/2x2x1"),
        ({"tpu_topology": "4x1x1"}, "4x1x1"),
    ],
)
def test_a_lent_slice_refuses_another_teams_job_or_shape(server: TpuServer, fields: dict[str, Any], words: str) -> None:
    with pytest.raises(InvalidJob, match=words):
        backend(server).submit(lent(**fields))
    assert not patches(server)


def test_a_busy_or_restarting_lent_slice_is_a_wait_not_a_refusal(server: TpuServer) -> None:
    backend(server).submit(lent())
    with pytest.raises(BackendError, match="still runs qm-42=lab-a") as busy:
        backend(server).submit(lent(id="43"))
    assert not isinstance(busy.value, InvalidJob)
    backend(server).cancel("qm-42=lab-a")
    server.nodes["lab-a"]["state"] = "RESTARTING"
    with pytest.raises(BackendError, match="RESTARTING, not READY") as restarting:
        backend(server).submit(lent(id="43"))
    assert not isinstance(restarting.value, InvalidJob)


def test_cancel_takes_the_job_off_and_signal_asks_it_to_stop(server: TpuServer) -> None:
    backend_id = str(backend(server).submit(lent()))
    backend(server).signal(backend_id, 30)
    assert server.metadata("lab-a")[STOP_KEY] == "term"
    assert backend(server).status(backend_id).state == JobState.RUNNING
    backend(server).cancel(backend_id)
    assert server.metadata("lab-a") == OWNERS_SCRIPT
    # Cancelling again, or a run the slice no longer holds, changes nothing.
    before = len(patches(server))
    backend(server).cancel(backend_id)
    assert len(patches(server)) == before
    assert backend(server).find("42") is None


def test_a_slice_taken_back_by_its_owner_preempts_the_job(server: TpuServer) -> None:
    backend_id = str(backend(server).submit(lent()))
    server.set_metadata("lab-a", OWNERS_SCRIPT)  # the owner cleared it: the agent has stopped the program
    status = backend(server).status(backend_id)
    assert (status.state, status.reason) == (JobState.FAILED, Failure.PREEMPTED)
    assert "owner of slice lab-a took it back" in status.message


@pytest.mark.parametrize("state", ["PREEMPTED", "REPAIRING", "STOPPED"])
def test_a_lent_slice_that_breaks_loses_the_job(server: TpuServer, state: str) -> None:
    backend_id = str(backend(server).submit(lent()))
    server.break_node("lab-a", state, "host maintenance")
    status = backend(server).status(backend_id)
    assert (status.state, status.reason) == (JobState.FAILED, Failure.NODE_LOST)
    assert f"lab-a is {state}" in status.message


def test_a_lent_slice_deleted_under_the_job_loses_it(server: TpuServer) -> None:
    backend_id = str(backend(server).submit(lent()))
    del server.nodes["lab-a"]
    status = backend(server).status(backend_id)
    assert (status.state, status.reason, status.message) == (
        JobState.FAILED,
        Failure.NODE_LOST,
        "its lent slice lab-a is gone",
    )


def test_multislice_over_a_slot_and_a_lent_slice(server: TpuServer) -> None:
    spec = job(workers=2, nodes=("lab-a", "qm-v5p-8-1"))
    # The queued resource fails once (transient) after the lent slice was told: the run is not all there, so
    # it is not found, and submitting again completes it.
    server.fail_requests("POST", "queuedResources", ApiError(503, "try later"), times=1)
    with pytest.raises(BackendError):
        backend(server).submit(spec)
    assert server.metadata("lab-a")[RUN_KEY] == "qm-42:lab-a"
    assert backend(server).find("42") is None
    backend_id = str(backend(server).submit(spec))
    assert backend_id == "qm-42:lab-a"
    assert backend(server).find("42") == backend_id
    (qr,) = server.queued_resources.values()
    assert [s["nodeId"] for s in qr.body["tpu"]["nodeSpec"]] == ["qm-v5p-8-1"]
    # Each slice knows its index among the job's: the lent one is slice 0, the slot slice 1.
    assert "QM_SLICE=0 QM_SLICES=2" in server.metadata("lab-a")[SCRIPT_KEY]
    startup = qr.body["tpu"]["nodeSpec"][0]["node"]["metadata"]["startup-script"]
    assert "QM_SLICE=1 QM_SLICES=2" in startup
    while backend(server).status(backend_id).state == JobState.PENDING:  # Google's queue
        pass
    status = backend(server).status(backend_id)
    assert (status.state, set(status.nodes)) == (JobState.RUNNING, {"lab-a", "qm-v5p-8-1"})
    backend(server).cancel(backend_id)
    assert RUN_KEY not in server.metadata("lab-a")
    assert all(qr.deleting for qr in server.queued_resources.values())


def test_an_invalid_queued_resource_takes_the_job_off_its_lent_slices(server: TpuServer) -> None:
    server.fail_requests("POST", "queuedResources", ApiError(400, "Invalid runtime version"))
    with pytest.raises(InvalidJob):
        backend(server).submit(job(workers=2, nodes=("lab-a", "qm-v5p-8-1")))
    assert server.metadata("lab-a") == OWNERS_SCRIPT


@pytest.mark.parametrize("backend_id", ["qm-42:", "qm-42=lab a", "QM=lab-a", "qm-42=lab-a,"])
def test_backend_ids_that_are_not_runs_are_not_found(server: TpuServer, backend_id: str) -> None:
    assert Run.parse(backend_id) is None
    with pytest.raises(NotFound):
        backend(server).status(backend_id)


def test_the_fake_apis_update_node_takes_only_the_documented_fields(server: TpuServer) -> None:
    with server._lock, pytest.raises(ApiError, match="Invalid update_mask"):
        server.handle("PATCH", f"/v2/{server.parent}/nodes/lab-a", {"updateMask": "acceleratorType"}, {})
