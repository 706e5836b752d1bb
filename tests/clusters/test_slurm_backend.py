"""The Slurm backend against two real Slurms, 22.05 and 24.11 (the labs in ``deploy/slurm-lab/``: 4 nodes x 8
fake H100s, slurmrestd with JWT; every test marked ``slurm`` runs on each), and against a tiny local server
for answers no real slurmrestd gives.

Tests that change the lab each use their own node, so they can run side by side under xdist:
lab-node1 runs jobs to completion, lab-node2 cancels, lab-node3 takes only dry runs, lab-node4 drains.
"""

from __future__ import annotations

import json
import re
import socket
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import replace
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from clusters.actions.sync import reported_levels
from clusters.backends.base import (
    AuthenticationFailed,
    BackendError,
    BadResponse,
    DryRun,
    Failure,
    InvalidJob,
    Inventory,
    JobSpec,
    JobState,
    JobStatus,
    NodeInfo,
    NotFound,
    Unreachable,
    permanent,
)
from clusters.backends.kinds import load
from clusters.backends.slurm import backend as slurm_backend
from clusters.backends.slurm import versions
from clusters.backends.slurm.backend import InvalidJob as SlurmInvalidJob
from clusters.backends.slurm.backend import SlurmBackend, invalid_options
from clusters.backends.slurm.parse import expand_hostlist, failure, gpu_gres, job_state, topology
from clusters.backends.slurm.script import apptainer_image, batch_script, enroot_image
from tests.clusters.slurm_lab import NODES, SlurmLab, mint_token

slurm = pytest.mark.slurm


def spec(node: str, *command: str, gpus: int = 1, workers: int = 1, **fields: Any) -> JobSpec:
    values: dict[str, Any] = {
        "id": f"t{uuid.uuid4().hex[:12]}",
        "name": "slurm backend test",
        "workers": workers,
        "accelerators_per_worker": gpus,
        "cpu_per_worker": 2000,
        "memory_per_worker": 2048,
        "nodes": (node,) * workers,
        "time_limit": 600,
        "command": command or ("true",),
        **fields,
    }
    return JobSpec(**values)


def wait_for(backend: SlurmBackend, job: str, *states: JobState, seconds: float = 15) -> JobStatus:
    deadline = time.monotonic() + seconds
    while True:
        status = backend.status(job)
        if status.state in states or time.monotonic() > deadline:
            assert status.state in states, status
            return status
        time.sleep(0.2)


def node(backend: SlurmBackend, name: str) -> NodeInfo:
    return next(n for n in backend.inventory().nodes if n.name == name)


def wait_node(backend: SlurmBackend, name: str, check: Callable[[NodeInfo], bool], seconds: float = 10) -> NodeInfo:
    deadline = time.monotonic() + seconds
    while not check(info := node(backend, name)):
        assert time.monotonic() < deadline, info
        time.sleep(0.2)
    return info


# ----------------------------------------------------------------------------------- the real lab


@slurm
def test_inventory_reports_the_four_nodes_with_eight_h100_each(slurm_lab: SlurmLab) -> None:
    inventory = slurm_lab.backend().inventory()

    assert sorted(n.name for n in inventory.nodes) == list(NODES)
    assert [a.model for a in inventory.accelerators] == ["h100"]
    for info in inventory.nodes:
        assert (info.accelerator, info.accelerators, info.accelerators_allocatable) == ("h100", 8, 8)
        assert (info.cpu, info.cpu_allocatable, info.memory, info.memory_allocatable) == (32000, 32000, 256000, 256000)
        assert 0 <= info.accelerators_used <= 8
        assert info.labels["partition"] == "gpu"
        assert info.labels["state"] in ("idle", "mixed", "allocated")
        assert info.addresses == ("127.0.0.1", "localhost")  # the lab's NodeAddr and NodeHostname
    assert node(slurm_lab.backend(), "lab-node3").ready  # only dry runs touch lab-node3
    assert node(slurm_lab.backend(), "lab-node3").schedulable
    assert load("slurm") is SlurmBackend


@slurm
def test_the_backend_speaks_the_newest_api_the_lab_serves_and_reads_its_topology(slurm_lab: SlurmLab) -> None:
    backend = slurm_lab.backend()
    assert backend.api_version == slurm_lab.spec.api  # v0.0.38 on 22.05; v0.0.42 (of v0.0.40-42) on 24.11
    assert backend.rest_node_updates is (slurm_lab.version != "22.05")  # POST node/{name}: 24.11 and later
    domains = {n.name: dict(n.topology) for n in backend.inventory().nodes}
    if slurm_lab.version == "22.05":  # topology/tree: leaf switches under a spine
        assert domains["lab-node1"] == domains["lab-node2"] == {"spine": "spine1", "leaf": "leaf1"}
        assert domains["lab-node3"] == domains["lab-node4"] == {"spine": "spine1", "leaf": "leaf2"}
    else:  # topology/block
        assert domains["lab-node1"] == domains["lab-node2"] == {"block": "block1"}
        assert domains["lab-node3"] == domains["lab-node4"] == {"block": "block2"}
    assert all(list(levels) == list(slurm_lab.spec.levels) for levels in domains.values())  # widest first
    assert all(n.topology == {} for n in slurm_lab.backend(topology="none").inventory().nodes)


@slurm
def test_every_data_parser_of_the_lab_runs_a_job_to_its_exit_code(slurm_lab: SlurmLab) -> None:
    """24.11 serves v0.0.40, v0.0.41 and v0.0.42: each, pinned, reads the nodes and runs a job to its end."""
    for version in ("v0.0.40", "v0.0.41", "v0.0.42") if slurm_lab.version == "24.11" else ("v0.0.38",):
        backend = slurm_lab.backend(api_version=version)
        assert {n.name for n in backend.inventory().nodes} == set(NODES)
        job = backend.submit(spec("lab-node1", "bash", "-c", "exit 5", gpus=1))
        assert isinstance(job, str)
        status = wait_for(backend, job, JobState.FAILED, JobState.SUCCEEDED)
        assert (status.state, status.reason, status.exit_code, status.nodes) == (
            JobState.FAILED,
            Failure.EXIT_CODE,
            5,
            ("lab-node1",),
        ), version


@slurm
def test_a_job_is_charged_to_its_teams_account_with_its_tiers_qos(slurm_lab: SlurmLab) -> None:
    """Slurm without slurmdbd (the labs) takes any account and keeps it; it keeps no QOS (there is no
    accounting to look one up in), so the QOS is checked in what the backend sends."""
    options: dict[str, Any] = {
        "accounts": {"physics": "phys", "physics/lhc": "phys-lhc"},
        "default_account": "general",
        "qos": {"standard": "normal", "urgent": "high"},
    }
    backend = slurm_lab.backend(**options)
    dry = slurm_lab.backend(dry_run=True, **options)
    lhc = spec("lab-node1", "true", gpus=0, team="physics", project="lhc", tier="urgent")
    plain = spec("lab-node1", "true", gpus=0, team="physics", project="other", tier="standard")
    chem = spec("lab-node1", "true", gpus=0, team="chemistry", tier="batch")

    sent = {}
    for job_spec in (lhc, plain, chem):
        would = dry.submit(job_spec)
        assert isinstance(would, DryRun)
        sent[job_spec.id] = would.detail["job"]
    assert (sent[lhc.id]["account"], sent[lhc.id]["qos"]) == ("phys-lhc", "high")
    assert (sent[plain.id]["account"], sent[plain.id]["qos"]) == ("phys", "normal")
    assert sent[chem.id]["account"] == "general"
    assert "qos" not in sent[chem.id]  # a tier without a QOS: Slurm's default
    spot = dry.submit(replace(chem, spot=True))
    assert isinstance(spot, DryRun)
    assert "qos" not in spot.detail["job"]  # no spot_qos configured
    spot = slurm_lab.backend(dry_run=True, spot_qos="scavenger", **options).submit(replace(lhc, spot=True))
    assert isinstance(spot, DryRun)
    assert spot.detail["job"]["qos"] == "scavenger"

    for job_spec, account in ((lhc, "phys-lhc"), (chem, "general")):
        job = backend.submit(job_spec)
        assert isinstance(job, str)
        shown = slurm_lab.command("scontrol", "show", "job", job)
        assert f"Account={account} " in shown, shown
        assert wait_for(backend, job, JobState.SUCCEEDED, JobState.FAILED).state is JobState.SUCCEEDED


@slurm
def test_a_pinned_job_runs_there_and_succeeds_and_resubmitting_returns_the_same_job(slurm_lab: SlurmLab) -> None:
    backend = slurm_lab.backend()
    job_spec = spec("lab-node1", "bash", "-c", 'echo "$SLURMD_NODENAME $CUDA_VISIBLE_DEVICES $QM_JOB_ID"', gpus=2)

    job = backend.submit(job_spec)
    assert isinstance(job, str)
    assert backend.submit(job_spec) == job  # idempotent on JobSpec.id

    status = wait_for(backend, job, JobState.SUCCEEDED, JobState.FAILED)
    assert status.state is JobState.SUCCEEDED, status
    assert status.nodes == ("lab-node1",)
    assert "exit code 0" in status.message
    output = Path(slurm_lab.options["workdir"], f"slurm-{job}.out").read_text()
    node_name, gpus, job_id = output.split()
    assert (node_name, job_id) == ("lab-node1", job_spec.id)
    assert len(set(gpus.split(","))) == 2, gpus  # ran there, with the 2 GPUs asked for (whichever were free)
    assert backend.submit(job_spec) == job  # still the same job once it has finished


@slurm
def test_a_gang_runs_one_worker_on_each_of_its_nodes(slurm_lab: SlurmLab) -> None:
    backend = slurm_lab.backend()
    job_spec = spec("", "bash", "-c", 'echo "$SLURMD_NODENAME $CUDA_VISIBLE_DEVICES"', workers=2)
    # topology/block (24.11) refuses a job that fits in one block on nodes of two: lab-node1 and 2 share one
    pair = ("lab-node1", "lab-node3") if slurm_lab.version == "22.05" else ("lab-node1", "lab-node2")
    job = backend.submit(replace(job_spec, nodes=pair))
    assert isinstance(job, str)

    status = wait_for(backend, job, JobState.SUCCEEDED, JobState.FAILED)
    assert status.state is JobState.SUCCEEDED, status
    assert status.nodes == pair
    output = Path(slurm_lab.options["workdir"], f"slurm-{job}.out").read_text()
    workers = sorted(line.split() for line in output.splitlines())
    assert tuple(node for node, _ in workers) == pair  # one worker each, one GPU each
    assert all(gpus.isdigit() for _, gpus in workers)


@slurm
def test_a_failing_job_is_failed_with_its_exit_code(slurm_lab: SlurmLab) -> None:
    backend = slurm_lab.backend()
    job = backend.submit(spec("lab-node1", "bash", "-c", "exit 3", gpus=0))
    assert isinstance(job, str)

    status = wait_for(backend, job, JobState.FAILED, JobState.SUCCEEDED)
    assert (status.state, status.reason, status.exit_code) == (JobState.FAILED, Failure.EXIT_CODE, 3)
    assert "exit code 3" in status.message


@slurm
def test_a_job_that_succeeds_has_no_failure(slurm_lab: SlurmLab) -> None:
    backend = slurm_lab.backend()
    job = backend.submit(spec("lab-node1", "true", gpus=0))
    assert isinstance(job, str)
    status = wait_for(backend, job, JobState.SUCCEEDED, JobState.FAILED)
    assert (status.state, status.reason, status.exit_code) == (JobState.SUCCEEDED, "", None)


@slurm
def test_a_pending_job_that_will_never_start_says_so(slurm_lab: SlurmLab) -> None:
    backend = slurm_lab.backend()
    # more GPUs than the node has free, never more than it has: Slurm accepts it; it waits for Resources
    blocker = backend.submit(spec("lab-node2", "sleep", "600", gpus=8))
    waiting = backend.submit(spec("lab-node2", "sleep", "600", gpus=8))
    assert isinstance(blocker, str)
    assert isinstance(waiting, str)
    try:
        wait_for(backend, blocker, JobState.RUNNING)
        deadline = time.monotonic() + 15
        while (status := backend.status(waiting)).reason == "" and time.monotonic() < deadline:
            time.sleep(0.3)
        assert (status.state, status.reason) == (JobState.PENDING, Failure.UNSCHEDULABLE), status
        assert "reason Resources" in status.message or "reason ReqNodeNotAvail" in status.message
    finally:
        backend.cancel(waiting)
        backend.cancel(blocker)


@slurm
def test_a_job_with_an_image_runs_through_the_clusters_container_runtime(slurm_lab: SlurmLab) -> None:
    """Apptainer is not installed in the lab: a stand-in program where the option says apptainer is, which
    records how it was called and runs the command, shows that Slurm ran the job through the runtime."""
    workdir = Path(slurm_lab.options["workdir"])
    calls = workdir / f"apptainer-calls-{time.time_ns()}"
    runtime = workdir / f"apptainer-{time.time_ns()}"
    runtime.write_text(f'#!/bin/bash\necho "$@" >> {calls}\nshift 2\nexec "$@"\n')
    runtime.chmod(0o755)
    backend = slurm_lab.backend(container_runtime="apptainer", apptainer=str(runtime))

    job = backend.submit(spec("lab-node1", "bash", "-c", "exit 4", gpus=0, image="ghcr.io/acme/train:1.4"))
    assert isinstance(job, str)
    status = wait_for(backend, job, JobState.FAILED, JobState.SUCCEEDED)
    assert (status.state, status.reason, status.exit_code) == (JobState.FAILED, Failure.EXIT_CODE, 4)
    assert calls.read_text() == "exec docker://ghcr.io/acme/train:1.4 bash -c exit 4\n"

    with pytest.raises(InvalidJob, match="runs no containers \\(no container runtime is configured\\)"):
        slurm_lab.backend().submit(spec("lab-node1", "true", gpus=0, image="ghcr.io/acme/train:1.4"))


@slurm
def test_cancel_stops_a_running_job_and_frees_its_node(slurm_lab: SlurmLab) -> None:
    backend = slurm_lab.backend()
    job = backend.submit(spec("lab-node2", "sleep", "600", gpus=3))
    assert isinstance(job, str)
    wait_for(backend, job, JobState.RUNNING)
    busy = node(backend, "lab-node2")
    assert (busy.accelerators_used, busy.cpu_used, busy.memory_used) == (3, 2000, 2048)

    assert backend.cancel(job) is None
    assert wait_for(backend, job, JobState.CANCELLED).nodes == ("lab-node2",)
    assert backend.cancel(job) is None  # cancelling an ended job is not an error
    wait_node(backend, "lab-node2", lambda n: n.accelerators_used == 0)
    with pytest.raises(NotFound, match="job 987654"):
        backend.cancel("987654")
    with pytest.raises(NotFound, match="not a Slurm job id"):
        backend.status("not-a-number")


@slurm
def test_signal_lets_a_job_checkpoint_and_exit_by_itself(slurm_lab: SlurmLab) -> None:
    backend = slurm_lab.backend()
    checkpoint = Path(slurm_lab.options["workdir"]) / f"ckpt-{time.time_ns()}"
    script = f"trap 'echo saved > {checkpoint}; exit 0' TERM; sleep 600 & wait"
    job = backend.submit(spec("lab-node3", "bash", "-c", script, gpus=1))
    assert isinstance(job, str)
    wait_for(backend, job, JobState.RUNNING)
    time.sleep(1)  # let bash install its trap

    assert backend.signal(job, grace_seconds=60) is None
    status = wait_for(backend, job, JobState.SUCCEEDED, JobState.FAILED, JobState.CANCELLED)
    assert status.state is JobState.SUCCEEDED, status  # it caught SIGTERM, saved, and exited cleanly
    assert checkpoint.read_text().strip() == "saved"
    assert backend.signal(job, grace_seconds=60) is None  # signalling an ended job is not an error


@slurm
def test_drain_requeues_the_running_job_resume_undoes_it_and_a_down_node_is_not_ready(slurm_lab: SlurmLab) -> None:
    backend = slurm_lab.backend()
    job = backend.submit(spec("lab-node4", "sleep", "600"))
    assert isinstance(job, str)
    wait_for(backend, job, JobState.RUNNING)
    try:
        assert backend.drain("lab-node4", "qm test: bad GPU") is None

        drained = node(backend, "lab-node4")
        assert not drained.schedulable
        assert drained.ready
        assert drained.labels["reason"] == "qm test: bad GPU"
        assert "DRAIN" in drained.labels["state_flags"]
        signals = {(s.node, s.check): s for s in backend.health()}
        assert len(signals) == len(NODES)
        # drained is not unhealthy: the signal passes (else the health policy would never resume it)
        assert signals["lab-node4", "ready"].ok
        assert signals["lab-node4", "ready"].message == "drained by root: qm test: bad GPU"
        requeued = wait_for(backend, job, JobState.PENDING)  # off the node, waiting for it
        assert requeued.nodes == ()

        assert backend.resume("lab-node4") is None
        # in service again, it shows no reason (24.11 keeps the drain's reason; the backend does not show it)
        assert wait_node(backend, "lab-node4", lambda n: n.schedulable and n.ready).labels.get("reason") is None
        assert backend.resume("lab-node4") is None  # resuming a node in service is not an error

        assert backend.cordon("lab-node4", "") is None  # Slurm insists on a reason; the backend gives one
        assert node(backend, "lab-node4").labels["reason"] == "cordoned by Quartermaster"

        # a node Slurm marks down is not ready (a failed node would be; the lab cannot fail one quickly). The lab
        # returns a down node to service when its slurmd registers again (ReturnToService=2), which may happen
        # between two reads: each read is judged when Slurm still says down in it.
        backend.cancel(job)
        for _ in range(5):
            backend._scontrol("update", "NodeName=lab-node4", "State=DOWN", "Reason=qm test: down", what="lab-node4")
            down = node(backend, "lab-node4")
            ready = {s.node: s for s in backend.health() if s.check == "ready"}
            if down.labels["state"].startswith("down") and ready["lab-node4"].message.startswith("down"):
                break
        assert down.labels["state"].startswith("down"), down.labels
        assert not down.ready
        assert not ready["lab-node4"].ok
        assert ready["lab-node4"].message.startswith("down")  # "down (NOT_RESPONDING)" just after a resume
        assert ready["lab-node4"].message.endswith(": qm test: down")
    finally:
        backend.resume("lab-node4")
        backend.cancel(job)
    wait_node(backend, "lab-node4", lambda n: n.ready and n.schedulable)
    with pytest.raises(NotFound, match="lab-node9"):
        backend.drain("lab-node9", "no such node")


@slurm
def test_dry_run_changes_nothing(slurm_lab: SlurmLab) -> None:
    real, dry = slurm_lab.backend(), slurm_lab.backend(dry_run=True)
    job_spec = spec("lab-node3", "sleep", "600", gpus=2)

    would = dry.submit(job_spec)
    assert isinstance(would, DryRun)
    assert (would.action, would.target) == ("submit", job_spec.id)
    if slurm_lab.version == "22.05":
        assert (would.detail["job"]["nodelist"], would.detail["job"]["gpus_per_task"]) == ("lab-node3", "2")
        assert would.detail["script"].startswith("#!/bin/bash")
    else:  # v0.0.4x: the script inside the job, GPUs as TRES, the node list a list
        assert (would.detail["job"]["required_nodes"], would.detail["job"]["tres_per_task"]) == (
            ["lab-node3"],
            "gres/gpu:2",
        )
        assert would.detail["job"]["script"].startswith("#!/bin/bash")
    assert "qm-" + job_spec.id not in slurm_lab.job_names()

    job = real.submit(job_spec)
    assert isinstance(job, str)
    try:
        wait_for(real, job, JobState.RUNNING)
        again = dry.submit(job_spec)
        assert isinstance(again, DryRun)
        assert again.detail["existing_job"] == job
        assert dry.cancel(job) == DryRun("cancel", job)
        for action, would_do in (
            ("cordon", dry.cordon("lab-node3", "dry")),
            ("drain", dry.drain("lab-node3", "dry")),
            ("resume", dry.resume("lab-node3")),
        ):
            assert isinstance(would_do, DryRun)
            assert (would_do.action, would_do.target) == (action, "lab-node3")
        drain = dry.drain("lab-node3", "dry")
        assert isinstance(drain, DryRun)
        assert job in drain.detail["requeue"]  # (with any other test's job running there)
        if slurm_lab.version == "22.05":
            assert drain.detail["scontrol"] == ["update", "NodeName=lab-node3", "State=DRAIN", "Reason=dry"]
        else:
            assert drain.detail["rest"] == {"state": ["DRAIN"], "reason": "dry"}

        assert real.status(job).state is JobState.RUNNING
        assert node(real, "lab-node3").schedulable
        with pytest.raises(NotFound):
            dry.cordon("lab-node9", "reads still read in a dry run")
    finally:
        real.cancel(job)


@slurm
def test_a_wrong_or_expired_token_is_an_authentication_failure(slurm_lab: SlurmLab) -> None:
    wrong_key = slurm_lab.backend(token=mint_token(b"not the lab's key" * 2))
    with pytest.raises(AuthenticationFailed, match="rejected the token"):
        wrong_key.inventory()
    with pytest.raises(AuthenticationFailed, match="expired"):
        slurm_lab.backend(token=mint_token(b"k" * 32, lifespan=-60)).inventory()
    with pytest.raises(AuthenticationFailed, match="not a JWT"):
        slurm_lab.backend(token="garbage").status("1")
    with pytest.raises(AuthenticationFailed, match="need a 'user' and a 'token'"):
        SlurmBackend(slurm_lab.endpoint, {}).inventory()


@slurm
def test_slurm_refusals_and_bad_specs(slurm_lab: SlurmLab) -> None:
    backend = slurm_lab.backend()
    assert SlurmInvalidJob is InvalidJob  # the base contract's, still importable from the backend
    with pytest.raises(InvalidJob, match=r"the nodes of job t\w+ \(lab-node9\): Invalid node name"):
        backend.submit(spec("lab-node9"))
    with pytest.raises(InvalidJob, match="neither a script nor a command"):
        backend.submit(spec("lab-node1", command=()))
    with pytest.raises(InvalidJob, match="names 1 nodes for 2 workers"):
        backend.submit(spec("lab-node1", nodes=("lab-node1",), workers=2))
    with pytest.raises(InvalidJob, match="Invalid partition name specified") as refused:
        backend.submit(spec("lab-node1", queue="no-such-partition"))
    assert permanent(refused.value)
    with pytest.raises(InvalidJob, match="Requested node configuration is not available"):
        backend.submit(spec("lab-node1", gpus=9))
    too_big = spec("lab-node1", cpu_per_worker=1_000_000)
    if slurm_lab.version == "22.05":
        # Slurm creates this one and answers an error (it would pend for ever, PartitionConfig): it is cancelled
        with pytest.raises(InvalidJob, match="Requested partition configuration not available"):
            backend.submit(too_big)
        created = backend.find(too_big.id)
        assert created is not None  # Slurm did create it, and answered the error
        wait_for(backend, created, JobState.CANCELLED)
    else:  # 24.11 refuses it outright
        with pytest.raises(InvalidJob, match="Requested node configuration is not available"):
            backend.submit(too_big)
        assert backend.find(too_big.id) is None
        # and a gang that fits in one block, on nodes of two blocks (topology/block)
        with pytest.raises(InvalidJob, match="Requested node configuration is not available"):
            backend.submit(spec("", workers=2, nodes=("lab-node1", "lab-node3")))
    with pytest.raises(BackendError, match="scontrol not found"):  # it reads the topology
        slurm_lab.backend(scontrol="/nonexistent/scontrol").inventory()


# -------------------------------------------------------------------------------- no cluster needed


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


TOKEN = mint_token(b"k" * 32)


def test_an_endpoint_nobody_listens_on_is_unreachable() -> None:
    backend = SlurmBackend(f"http://127.0.0.1:{free_port()}", {"user": "root", "token": TOKEN}, timeout=2)
    with pytest.raises(Unreachable, match="connection refused"):
        backend.inventory()
    dry = SlurmBackend(f"http://127.0.0.1:{free_port()}", {"user": "root", "token": TOKEN}, dry_run=True)
    with pytest.raises(Unreachable):
        dry.cancel("1")  # a dry run still reads


def openapi(*served: str, node_updates: bool = False) -> dict[str, Any]:
    """An ``/openapi/v3`` document as slurmrestd serves it: a ping (and node paths) per data parser."""
    paths: dict[str, Any] = {}
    for version in served:
        paths[f"/slurm/{version}/ping" + ("/" if version != "v0.0.38" else "")] = {"get": {}}
        paths[f"/slurm/{version}/node/{{node_name}}"] = {"get": {}, **({"post": {}} if node_updates else {})}
    return {"openapi": "3.0.2", "paths": paths}


@pytest.fixture
def fake_restd() -> Iterator[Callable[..., SlurmBackend]]:
    """A local HTTP server answering every request with the status, content type and body given, and
    ``GET /openapi/v3`` with a document that serves ``v0.0.38`` (or the one given). ``requests`` (the
    returned function's attribute) lists what it was asked: (method, path, JSON body or None)."""
    answer: dict[str, Any] = {}
    asked: list[tuple[str, str, Any]] = []

    class Handler(BaseHTTPRequestHandler):
        def _reply(self, status: int, text: str, content_type: str) -> None:
            body = text.encode()
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def _record(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(length) if length else b""
            asked.append((self.command, self.path, json.loads(raw) if raw else None))

        def do_GET(self) -> None:
            self._record()
            if self.path == "/openapi/v3":
                self._reply(200, json.dumps(answer["openapi"]), "application/json")
                return
            routes = answer.get("routes", {})
            if self.path in routes:
                self._reply(200, json.dumps(routes[self.path]), "application/json")
                return
            self._reply(answer["status"], answer["body"], answer["type"])

        def do_POST(self) -> None:
            self._record()
            status, text = answer.get("post", (answer["status"], answer["body"]))
            self._reply(status, text, answer["type"])

        def do_DELETE(self) -> None:
            self._record()
            status, text = answer.get("delete", (answer["status"], answer["body"]))
            self._reply(status, text, answer["type"])

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    slurm_backend._negotiated.clear()  # another test's server may have had this port

    def serve(
        status: int,
        content_type: str,
        body: str,
        post: tuple[int, str] | None = None,
        *,
        served: dict[str, Any] | None = None,
        routes: dict[str, Any] | None = None,
        delete: tuple[int, str] | None = None,
        **options: Any,
    ) -> SlurmBackend:
        """Every request answered ``status`` and ``body``; a POST ``post`` (status, body) and a DELETE
        ``delete`` when given; ``routes`` a JSON answer per path; ``served`` the ``/openapi/v3`` document."""
        answer.update(status=status, type=content_type, body=body, openapi=served or openapi("v0.0.38"))
        answer.update(routes=routes or {})
        if post is not None:
            answer["post"] = post
        if delete is not None:
            answer["delete"] = delete
        endpoint = f"http://127.0.0.1:{server.server_port}"
        return SlurmBackend(endpoint, {"user": "root", "token": TOKEN}, options, timeout=5)

    serve.requests = asked  # type: ignore[attr-defined]
    yield serve
    server.shutdown()
    server.server_close()
    slurm_backend._negotiated.clear()


NODE = {"name": "n1", "state": "idle", "cpus": 8, "real_memory": 1000, "gres": "gpu:a100:4", "partitions": ["p"]}


@pytest.mark.parametrize(
    ("status", "body", "message"),
    [
        (200, '{"nodes": [{"name": "n1"', "not JSON"),
        (200, "[1, 2]", "list instead of a JSON object"),
        (200, '{"errors": []}', "'nodes' missing"),
        (200, json.dumps({"nodes": [{**NODE, "cpus": "8"}]}), "'cpus' a str, expected a int"),
        (200, json.dumps({"nodes": [{k: v for k, v in NODE.items() if k != "state"}]}), "'state' missing"),
        (200, json.dumps({"nodes": ["n1"]}), "is a str, not an object"),
        (200, json.dumps({"nodes": [], "errors": "bad"}), "'errors' that is not a list"),
        (502, "<html>Bad Gateway</html>", "HTTP 502 and a body that is not JSON"),
        (404, "Unable find requested URL.", "is not served"),
        (500, '{"errors": [], "nodes": []}', "HTTP 500 and no error"),
    ],
)
def test_a_malformed_or_partial_answer_is_a_bad_response(
    fake_restd: Callable[..., SlurmBackend], status: int, body: str, message: str
) -> None:
    backend = fake_restd(status, "application/json", body)
    with pytest.raises(BadResponse, match=message):
        backend.inventory()


@pytest.mark.parametrize("status", [401, 403])
def test_slurmrestd_refusing_the_credentials_is_an_authentication_failure(
    fake_restd: Callable[..., SlurmBackend], status: int
) -> None:
    backend = fake_restd(status, "text/plain", "Authentication failure")
    with pytest.raises(AuthenticationFailed, match=f"refused the credentials of user 'root' \\(HTTP {status}\\)"):
        backend.inventory()


def test_a_well_formed_answer_reads_into_node_info(fake_restd: Callable[..., SlurmBackend]) -> None:
    nodes = [
        {
            **NODE,
            "gres_used": "gpu:a100:3(IDX:0-2)",
            "alloc_cpus": 2,
            "alloc_memory": 300,
            "address": "10.1.0.4",
            "hostname": "n1",
        },
        {**NODE, "name": "n2", "state": "down", "state_flags": ["NOT_RESPONDING"], "reason": "dead"},
        {**NODE, "name": "n3", "state": "mixed", "state_flags": ["DRAIN"], "gres": "(null)"},
    ]
    backend = fake_restd(200, "application/json", json.dumps({"nodes": nodes, "errors": []}))
    backend.options["gpu_models"] = {"a100": "A100-40GB"}

    n1, n2, n3 = backend.inventory().nodes

    assert (n1.accelerator, n1.accelerators, n1.accelerators_used, n1.cpu_used, n1.memory_used) == (
        "A100-40GB",
        4,
        3,
        2000,
        300,
    )
    assert (n1.ready, n1.schedulable, dict(n1.labels)) == (True, True, {"state": "idle", "partition": "p"})
    assert (n2.ready, n2.schedulable, n2.labels["reason"]) == (False, True, "dead")
    assert (n3.ready, n3.schedulable, n3.accelerator, n3.accelerators) == (True, False, "", 0)
    # NodeAddr and NodeHostname, where slurm.conf gives them (a replica may report only these)
    assert n1.addresses == ("10.1.0.4", "n1")


JOB = {"job_id": 7, "name": "qm-x", "nodes": "n1", "exit_code": 0, "state_reason": "None"}


@pytest.mark.parametrize(
    ("fields", "state", "reason", "exit_code"),
    [
        ({"job_state": "OUT_OF_MEMORY", "exit_code": 0x9}, JobState.FAILED, Failure.OOM_KILLED, 137),
        ({"job_state": "TIMEOUT", "exit_code": 0xF}, JobState.FAILED, Failure.TIME_LIMIT, 143),
        ({"job_state": "NODE_FAIL", "state_reason": "NodeDown"}, JobState.FAILED, Failure.NODE_LOST, None),
        ({"job_state": "PREEMPTED"}, JobState.FAILED, Failure.PREEMPTED, None),
        ({"job_state": "FAILED", "exit_code": 2 << 8}, JobState.FAILED, Failure.EXIT_CODE, 2),
        ({"job_state": "FAILED", "exit_code": 9}, JobState.FAILED, Failure.EXIT_CODE, 137),
        (
            {"job_state": "PENDING", "state_reason": "PartitionTimeLimit", "nodes": ""},
            JobState.PENDING,
            Failure.INVALID,
            None,
        ),
        ({"job_state": "PENDING", "state_reason": "InvalidQOS", "nodes": ""}, JobState.PENDING, Failure.INVALID, None),
        (
            {"job_state": "PENDING", "state_reason": "ReqNodeNotAvail, UnavailableNodes:n1", "nodes": ""},
            JobState.PENDING,
            Failure.UNSCHEDULABLE,
            None,
        ),
        ({"job_state": "PENDING", "state_reason": "Priority", "nodes": ""}, JobState.PENDING, "", None),
        ({"job_state": "RUNNING"}, JobState.RUNNING, "", None),
    ],
)
def test_status_names_why_a_job_failed_or_waits(
    fake_restd: Callable[..., SlurmBackend],
    fields: dict[str, Any],
    state: JobState,
    reason: str,
    exit_code: int | None,
) -> None:
    backend = fake_restd(200, "application/json", json.dumps({"jobs": [{**JOB, **fields}], "errors": []}))
    status = backend.status("7")
    assert (status.state, status.reason, status.exit_code) == (state, reason, exit_code)
    if fields.get("state_reason", "None") != "None":
        assert f"reason {fields['state_reason']}" in status.message


def test_an_unknown_slurm_error_at_submit_is_transient_and_a_job_refusal_is_permanent(
    fake_restd: Callable[..., SlurmBackend],
) -> None:
    job = spec("n1", "true")
    no_jobs = json.dumps({"jobs": [], "errors": []})
    unknown = {"errors": [{"error_code": 9999, "error": "Something new went wrong"}]}
    with pytest.raises(BackendError, match="Something new went wrong") as caught:
        fake_restd(200, "application/json", no_jobs, post=(500, json.dumps(unknown))).submit(replace(job, nodes=()))
    assert not permanent(caught.value)
    account = {"errors": [{"error_code": 2045, "error": "Invalid account or account/partition combination specified"}]}
    with pytest.raises(InvalidJob, match="Invalid account"):
        fake_restd(200, "application/json", no_jobs, post=(500, json.dumps(account))).submit(replace(job, nodes=()))


def test_the_batch_script_runs_an_image_only_through_a_container_runtime() -> None:
    job = spec("n1", "python", "train.py", "--lr", "0.1", image="ghcr.io/acme/train:1.4")
    with pytest.raises(InvalidJob, match="runs no containers \\(no container runtime is configured\\)"):
        batch_script(job, {})
    with pytest.raises(InvalidJob, match="'docker' is not one of pyxis, apptainer"):
        batch_script(job, {"container_runtime": "docker"})

    assert batch_script(job, {"container_runtime": "pyxis"}).splitlines()[-1] == (
        "exec srun '--container-image=ghcr.io#acme/train:1.4' python train.py --lr 0.1"
    )
    assert batch_script(job, {"container_runtime": "apptainer"}).splitlines()[-1] == (
        "exec apptainer exec docker://ghcr.io/acme/train:1.4 python train.py --lr 0.1"
    )
    gang = replace(job, workers=2, nodes=("n1", "n2"))
    assert batch_script(gang, {"container_runtime": "apptainer"}).splitlines()[-1].startswith("exec srun apptainer")

    scripted = replace(job, command=(), script="#!/usr/bin/env python3\nprint('hi')\n")
    pyxis = batch_script(scripted, {"container_runtime": "pyxis"})
    assert "print('hi')" in pyxis
    assert pyxis.splitlines()[-1] == (
        "exec srun --ntasks=1 --nodes=1 '--container-image=ghcr.io#acme/train:1.4' "
        '--container-mounts="$QM_SCRIPT:$QM_SCRIPT" "$QM_SCRIPT"'
    )
    apptainer = batch_script(scripted, {"container_runtime": "apptainer"})
    assert apptainer.splitlines()[-1] == 'exec apptainer exec docker://ghcr.io/acme/train:1.4 "$QM_SCRIPT"'
    # without an image, a script is the batch script itself, on the host
    assert batch_script(replace(scripted, image=""), {}) == "#!/usr/bin/env python3\nprint('hi')\n"

    assert enroot_image("ubuntu:24.04") == "ubuntu:24.04"
    assert enroot_image("nvcr.io/nvidia/pytorch:24.01-py3") == "nvcr.io#nvidia/pytorch:24.01-py3"
    assert enroot_image("localhost:5000/x") == "localhost:5000#x"
    assert enroot_image("acme/train") == "acme/train"
    assert apptainer_image("/images/train.sif") == "/images/train.sif"
    assert apptainer_image("oras://ghcr.io/acme/train:1") == "oras://ghcr.io/acme/train:1"


def test_slurm_strings() -> None:
    assert gpu_gres("gpu:h100:8") == [("h100", 8)]
    assert gpu_gres("gpu:h100:2(IDX:0-1)") == [("h100", 2)]
    assert gpu_gres("gpu:4(S:0-1),shard:8,gpu:a100:2") == [("", 4), ("a100", 2)]
    assert gpu_gres("(null)") == gpu_gres("") == []
    assert expand_hostlist("lab-node[1-2,4],gpu07") == ("lab-node1", "lab-node2", "lab-node4", "gpu07")
    assert expand_hostlist("n[08-10]") == ("n08", "n09", "n10")
    assert expand_hostlist("r[1-2]n[1-2]") == ("r1n1", "r1n2", "r2n1", "r2n2")
    assert expand_hostlist("") == ()
    with pytest.raises(ValueError, match="unbalanced"):
        expand_hostlist("n[1-2")
    assert job_state("COMPLETED") is JobState.SUCCEEDED
    assert job_state("NODE_FAIL") is JobState.FAILED
    assert job_state("COMPLETING") is JobState.RUNNING
    assert job_state("SOMETHING_NEW") is JobState.UNKNOWN
    assert failure("OUT_OF_MEMORY", "OutOfMemory", 0) == Failure.OOM_KILLED
    assert failure("FAILED", "NonZeroExitCode", 3) == Failure.EXIT_CODE
    assert failure("COMPLETED", "None", 0) == ""
    assert failure("PENDING", "DependencyNeverSatisfied", None) == Failure.INVALID


# ------------------------------------------------------------- the newer data parsers, without a cluster


def test_the_backend_negotiates_the_newest_data_parser_both_sides_speak(
    fake_restd: Callable[..., SlurmBackend],
) -> None:
    nodes = json.dumps({"nodes": [], "errors": []})
    for served, chosen in (
        (("v0.0.38", "v0.0.37", "v0.0.36"), "v0.0.38"),  # Slurm 22.05
        (("v0.0.40", "v0.0.41", "v0.0.42"), "v0.0.42"),  # 24.11
        (("v0.0.41", "v0.0.42", "v0.0.43"), "v0.0.43"),  # 25.05
        (("v0.0.42", "v0.0.43", "v0.0.44"), "v0.0.44"),  # 25.11
        (("v0.0.39", "v0.0.40", "v0.0.45"), "v0.0.40"),  # one it does not know is never chosen
    ):
        backend = fake_restd(200, "application/json", nodes, served=openapi(*served))
        assert backend.api_version == chosen, served
        assert backend.inventory().nodes == ()
        assert fake_restd.requests[-1][:2] == ("GET", f"/slurm/{chosen}/nodes")  # type: ignore[attr-defined]
        slurm_backend._negotiated.clear()

    asked = len(fake_restd.requests)  # type: ignore[attr-defined]
    backend = fake_restd(200, "application/json", nodes, served=openapi("v0.0.42", node_updates=True))
    assert (backend.api_version, backend.rest_node_updates) == ("v0.0.42", True)
    again = SlurmBackend(backend.endpoint, backend.credentials, {})
    assert again.api_version == "v0.0.42"  # a later backend of the same endpoint reuses the choice
    assert sum(path == "/openapi/v3" for _, path, _ in fake_restd.requests[asked:]) == 1  # type: ignore[attr-defined]
    forced = SlurmBackend(backend.endpoint, backend.credentials, {"api_version": "v0.0.40"})
    assert (forced.api_version, forced.rest_node_updates) == ("v0.0.40", True)

    slurm_backend._negotiated.clear()
    with pytest.raises(
        BadResponse, match=re.escape("serves the data parsers v0.0.37, v0.0.36, and this backend speaks")
    ):
        fake_restd(200, "application/json", nodes, served=openapi("v0.0.36", "v0.0.37")).inventory()
    with pytest.raises(BackendError, match=re.escape("api_version'] is 'v0.0.39'")):
        SlurmBackend(backend.endpoint, backend.credentials, {"api_version": "v0.0.39"}).inventory()


NODE_42 = {
    "name": "n1",
    "state": ["MIXED", "DRAIN"],
    "cpus": 64,
    "alloc_cpus": 8,
    "real_memory": 512000,
    "alloc_memory": 4096,
    "gres": "gpu:h200:8",
    "gres_used": "gpu:h200:2(IDX:0-1)",
    "partitions": ["gpu"],
    "reason": "bad fan",
    "reason_set_by_user": "root",
}


def test_newer_parsers_answers_read_as_the_old_ones(fake_restd: Callable[..., SlurmBackend]) -> None:
    """v0.0.40 and later: state lists, {set, infinite, number} numbers, exit codes as objects (the shapes of
    SchedMD/slurm's data_parser v0.0.42 parsers.c, as the 24.11 lab answers them)."""
    down = {**NODE_42, "name": "n2", "state": ["IDLE", "NOT_RESPONDING"], "reason": ""}
    job = {
        "job_id": 7,
        "name": "qm-x",
        "job_state": ["FAILED"],
        "state_reason": "NonZeroExitCode",
        "nodes": "n1",
        "exit_code": {
            "status": ["ERROR"],
            "return_code": {"set": True, "infinite": False, "number": 3},
            "signal": {"id": {"set": False, "infinite": False, "number": 0}, "name": ""},
        },
    }
    served = openapi("v0.0.42", node_updates=True)
    routes = {"/slurm/v0.0.42/nodes": {"nodes": [NODE_42, down], "errors": []}}
    backend = fake_restd(
        200, "application/json", json.dumps({"jobs": [job], "errors": []}), served=served, routes=routes
    )

    n1, n2 = backend.inventory().nodes
    assert (n1.accelerator, n1.accelerators, n1.accelerators_used, n1.cpu_used, n1.memory_used) == (
        "h200",
        8,
        2,
        8000,
        4096,
    )
    assert (n1.ready, n1.schedulable, n1.labels["state"], n1.labels["state_flags"], n1.labels["reason"]) == (
        True,
        False,
        "mixed",
        "DRAIN",
        "bad fan",
    )
    assert (n2.ready, n2.schedulable) == (False, True)
    status = backend.status("7")
    assert (status.state, status.reason, status.exit_code, status.nodes) == (
        JobState.FAILED,
        Failure.EXIT_CODE,
        3,
        ("n1",),
    )
    assert versions.job_state_word(["RUNNING", "COMPLETING"]) == "COMPLETING"
    assert versions.job_state_word(["PENDING", "REQUEUED"]) == "REQUEUED"
    assert versions.job_state_word(["OUT_OF_MEMORY"]) == "OUT_OF_MEMORY"
    killed = {"status": ["SIGNALED"], "return_code": {"set": False}, "signal": {"id": {"set": True, "number": 9}}}
    assert versions.wait_status(killed) == 9
    assert versions.wait_status({"status": ["PENDING"], "return_code": {"set": False, "number": 0}}) is None
    assert versions.number({"set": True, "infinite": True, "number": 0}) is None


def test_newer_parsers_get_the_job_inside_the_submission_and_node_states_over_rest(
    fake_restd: Callable[..., SlurmBackend],
) -> None:
    served = openapi("v0.0.44", node_updates=True)
    routes = {
        "/slurm/v0.0.44/jobs": {"jobs": [], "errors": []},
        "/slurm/v0.0.44/node/n1": {"nodes": [NODE_42], "errors": []},
    }
    ok = json.dumps({"job_id": 12, "errors": [], "warnings": []})
    backend = fake_restd(200, "application/json", ok, post=(200, ok), served=served, routes=routes)
    job_spec = spec("n1", "python", "train.py", gpus=2, workers=2, team="physics", tier="urgent")
    backend.options.update(accounts={"physics": "phys"}, qos={"urgent": "high"}, partition="gpu")

    assert backend.submit(job_spec) == "12"
    method, path, body = fake_restd.requests[-1]  # type: ignore[attr-defined]
    assert (method, path, list(body)) == ("POST", "/slurm/v0.0.44/job/submit", ["job"])
    job = body["job"]
    assert job["script"] == "#!/bin/bash\nexec srun python train.py\n"
    assert job["environment"] == ["PATH=/usr/local/bin:/usr/bin:/bin", f"QM_JOB_ID={job_spec.id}"]
    assert (job["required_nodes"], job["minimum_nodes"], job["maximum_nodes"], job["tasks_per_node"]) == (
        ["n1"],
        1,
        1,
        2,
    )
    assert job["tres_per_task"] == "gres/gpu:2"
    assert job["time_limit"] == {"set": True, "infinite": False, "number": 10}
    assert job["memory_per_cpu"] == {"set": True, "infinite": False, "number": 1024}
    assert (job["account"], job["qos"], job["partition"], job["name"]) == ("phys", "high", "gpu", f"qm-{job_spec.id}")
    assert not {"nodelist", "gpus_per_task", "nodes"} & set(job)

    assert backend.cordon("n1", "fan") is None
    assert fake_restd.requests[-1] == ("POST", "/slurm/v0.0.44/node/n1", {"state": ["DRAIN"], "reason": "fan"})  # type: ignore[attr-defined]
    assert backend.resume("n1") is None
    assert fake_restd.requests[-1] == ("POST", "/slurm/v0.0.44/node/n1", {"state": ["RESUME"]})  # type: ignore[attr-defined]


def test_newer_parsers_report_an_unknown_job_or_node_as_not_found(fake_restd: Callable[..., SlurmBackend]) -> None:
    """24.11 answers ``DELETE job/{id}`` of an unknown job with HTTP 200, no errors and the error in the
    job's status; ``GET node/{name}`` of an unknown node with error 0 ("No error") and no nodes."""
    served = openapi("v0.0.42", node_updates=True)
    status = {"error": {"string": "Invalid job id specified", "code": 2017, "message": "Invalid job id specified"}}
    unknown = {"status": [{**status, "step_id": "987654"}], "errors": [], "warnings": []}
    no_node = {"errors": [{"description": "Failure to query node n9", "error_number": 0, "error": "No error"}]}
    backend = fake_restd(
        200,
        "application/json",
        json.dumps(no_node),
        delete=(200, json.dumps(unknown)),
        served=served,
    )
    with pytest.raises(NotFound, match="job 987654: Invalid job id specified"):
        backend.cancel("987654")
    with pytest.raises(NotFound, match="Slurm does not know node n9"):
        backend.cordon("n9", "no such node")
    done = {"status": [{"error": {"code": 2021, "string": "Job/step already completing or completed"}}], "errors": []}
    assert fake_restd(200, "application/json", "{}", delete=(200, json.dumps(done)), served=served).cancel("5") is None


def test_an_invalid_qos_or_account_is_a_refusal_of_the_job(fake_restd: Callable[..., SlurmBackend]) -> None:
    """With accounting on, Slurm refuses a QOS or account the user may not use (slurm_errno.h:
    ESLURM_INVALID_QOS 2066 "Invalid qos specification", ESLURM_INVALID_ACCOUNT 2045)."""
    no_jobs = json.dumps({"jobs": [], "errors": []})
    for number, words in ((2066, "Invalid qos specification"), (2045, "Invalid account or account/partition")):
        refused = {"job_id": 0, "errors": [{"error_number": number, "error": words, "description": "refused"}]}
        backend = fake_restd(200, "application/json", no_jobs, post=(500, json.dumps(refused)), qos={"": "x"})
        with pytest.raises(InvalidJob, match=words) as caught:
            backend.submit(spec("", "true", nodes=()))
        assert permanent(caught.value)


def test_topology_reads_scontrols_tree_and_block_answers() -> None:
    tree = (
        "SwitchName=leaf1 Level=0 LinkSpeed=1 Nodes=n[1-2]\n"
        "SwitchName=leaf2 Level=0 LinkSpeed=1 Nodes=n[3-4]\n"
        "SwitchName=spine1 Level=1 LinkSpeed=1 Nodes=n[1-4] Switches=leaf[1-2]\n"
    )
    levels, domains = topology(tree)
    assert levels == ("spine", "leaf")
    assert domains["n3"] == {"spine": "spine1", "leaf": "leaf2"}
    assert list(domains["n1"]) == ["spine", "leaf"]  # widest first
    block = (
        "BlockName=b1 BlockIndex=0 Nodes=n[1-2] BlockSize=2\n"
        "BlockName=b2 BlockIndex=1 Nodes=n[3-4] BlockSize=2\n"
        "AggregatedBlock=b[1-2] BlockIndex=2 Nodes=n[1-4] BlockSize=4\n"
    )
    assert topology(block) == (
        ("block",),
        {"n1": {"block": "b1"}, "n2": {"block": "b1"}, "n3": {"block": "b2"}, "n4": {"block": "b2"}},
    )
    deep = "".join(f"SwitchName=s{level} Level={level} Nodes=a1\n" for level in range(4))
    assert topology(deep) == (
        ("level3", "core", "spine", "leaf"),
        {"a1": {"level3": "s3", "core": "s2", "spine": "s1", "leaf": "s0"}},
    )
    assert topology("") == ((), {})
    with pytest.raises(ValueError, match="unbalanced"):
        topology("BlockName=b1 Nodes=n[1-2")


def test_slurm_options_are_checked() -> None:
    assert invalid_options({}) == ""
    good = {"accounts": {"physics": "phys"}, "default_account": "g", "qos": {"urgent": "high"}, "topology": "none"}
    assert invalid_options(good) == ""
    assert "accounts maps names to Slurm names" in invalid_options({"accounts": ["physics"]})
    assert "qos maps names to Slurm names" in invalid_options({"qos": {"urgent": 3}})
    assert "gpu_models maps GRES types to models" in invalid_options({"gpu_models": "h100"})
    assert "default_account is a name" in invalid_options({"default_account": 5})
    assert "api_version must be one of" in invalid_options({"api_version": "v0.0.39"})
    assert "topology must be auto, scontrol or none" in invalid_options({"topology": "yaml"})


def test_the_sync_names_the_levels_the_nodes_report_widest_first() -> None:
    def info(name: str, **topology: str) -> NodeInfo:
        return NodeInfo(name, "", 0, 0, 1000, 1000, 1024, 1024, topology=topology)

    nodes = (info("n0"), info("n1", spine="s1", leaf="l1"), info("n2", leaf="l2"), info("n3", block="b1"))
    assert reported_levels(Inventory(nodes)) == ["spine", "leaf", "block"]
    assert reported_levels(Inventory((info("n0"),))) == []


@pytest.mark.parametrize(
    ("state", "flags", "in_service", "may_power_up"),
    [
        ("idle", [], True, False),  # a fixed node
        ("idle", ["POWERED_DOWN"], True, False),  # a fixed node under the site's own power saving: not ready
        ("idle", ["CLOUD", "POWERED_DOWN"], False, True),
        ("idle", ["CLOUD", "POWERING_UP", "NOT_RESPONDING"], False, False),
        ("idle", ["CLOUD"], True, False),  # up: capacity
        ("mixed", ["CLOUD", "POWER_DOWN"], False, False),  # asked to power down once idle
        ("idle", ["CLOUD", "POWERING_DOWN"], False, False),
        ("down", ["CLOUD", "POWERED_DOWN"], False, False),  # its resume timed out: a person looks first
        ("idle", ["CLOUD", "POWERED_DOWN", "DRAIN"], False, False),
    ],
)
def test_a_cloud_node_is_capacity_only_while_up(
    state: str, flags: list[str], in_service: bool, may_power_up: bool
) -> None:
    raw = {"name": "c1", "state": state, "state_flags": flags, "features": "qm-pool-burst"}
    assert slurm_backend._in_service(raw) is in_service
    assert slurm_backend._powered_down(raw) is may_power_up


def test_newer_parsers_features_read_as_v0_0_38s() -> None:
    raw = {"name": "c1", "state": ["IDLE", "CLOUD", "POWERED_DOWN"], "features": ["qm-pool-burst", "ib"]}
    node = versions.node("v0.0.42", raw)
    assert (node["state"], node["state_flags"], node["features"]) == (
        "idle",
        ["CLOUD", "POWERED_DOWN"],
        "qm-pool-burst,ib",
    )
    assert slurm_backend._features(node) == ["qm-pool-burst", "ib"]
