"""The Slurm backend against a real Slurm 22.05 (the lab in ``deploy/slurm-lab/``: 4 nodes x 8 fake H100s,
slurmrestd with JWT), and against a tiny local server for answers no real slurmrestd gives.

Tests that change the lab each use their own node, so they can run side by side under xdist:
lab-node1 runs jobs to completion, lab-node2 cancels, lab-node3 takes only dry runs, lab-node4 drains.
"""

from __future__ import annotations

import json
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

from clusters.backends.base import (
    AuthenticationFailed,
    BackendError,
    BadResponse,
    DryRun,
    Failure,
    InvalidJob,
    JobSpec,
    JobState,
    JobStatus,
    NodeInfo,
    NotFound,
    Unreachable,
    load,
    permanent,
)
from clusters.backends.slurm import SlurmBackend
from clusters.backends.slurm.backend import InvalidJob as SlurmInvalidJob
from clusters.backends.slurm.parse import expand_hostlist, failure, gpu_gres, job_state
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
    assert node(slurm_lab.backend(), "lab-node3").ready  # only dry runs touch lab-node3
    assert node(slurm_lab.backend(), "lab-node3").schedulable
    assert load("slurm") is SlurmBackend


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
    assert output.split() == ["lab-node1", "0,1", job_spec.id]  # ran there, with the 2 GPUs asked for
    assert backend.submit(job_spec) == job  # still the same job once it has finished


@slurm
def test_a_gang_runs_one_worker_on_each_of_its_nodes(slurm_lab: SlurmLab) -> None:
    backend = slurm_lab.backend()
    job_spec = spec("", "bash", "-c", 'echo "$SLURMD_NODENAME $CUDA_VISIBLE_DEVICES"', workers=2)
    job = backend.submit(replace(job_spec, nodes=("lab-node1", "lab-node3")))
    assert isinstance(job, str)

    status = wait_for(backend, job, JobState.SUCCEEDED, JobState.FAILED)
    assert status.state is JobState.SUCCEEDED, status
    assert status.nodes == ("lab-node1", "lab-node3")
    output = Path(slurm_lab.options["workdir"], f"slurm-{job}.out").read_text()
    workers = sorted(line.split() for line in output.splitlines())
    assert [node for node, _ in workers] == ["lab-node1", "lab-node3"]  # one worker each, one GPU each
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
        assert wait_node(backend, "lab-node4", lambda n: n.schedulable).labels.get("reason") is None
        assert backend.resume("lab-node4") is None  # resuming a node in service is not an error

        assert backend.cordon("lab-node4", "") is None  # Slurm insists on a reason; the backend gives one
        assert node(backend, "lab-node4").labels["reason"] == "cordoned by Quartermaster"

        # a node Slurm marks down is not ready (a failed node would be; the lab cannot fail one quickly)
        backend.cancel(job)
        backend._scontrol("update", "NodeName=lab-node4", "State=DOWN", "Reason=qm test: down", what="lab-node4")
        assert not node(backend, "lab-node4").ready
        ready = {s.node: s for s in backend.health() if s.check == "ready"}
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
    assert would.detail["job"]["nodelist"] == "lab-node3"
    assert would.detail["job"]["gpus_per_task"] == "2"
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
        assert drain.detail["scontrol"] == ["update", "NodeName=lab-node3", "State=DRAIN", "Reason=dry"]

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
    # Slurm creates this one and answers an error (it would pend for ever, PartitionConfig): it is cancelled
    too_big = spec("lab-node1", cpu_per_worker=1_000_000)
    with pytest.raises(InvalidJob, match="Requested partition configuration not available"):
        backend.submit(too_big)
    created = backend.find(too_big.id)
    assert created is not None  # Slurm did create it, and answered the error
    wait_for(backend, created, JobState.CANCELLED)
    with pytest.raises(BackendError, match="scontrol not found"):
        slurm_lab.backend(scontrol="/nonexistent/scontrol").cordon("lab-node3", "never happens")


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


@pytest.fixture
def fake_restd() -> Iterator[Callable[..., SlurmBackend]]:
    """A local HTTP server answering every request with the status, content type and body given."""
    answer: dict[str, Any] = {}

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body = answer["body"].encode()
            self.send_response(answer["status"])
            self.send_header("Content-Type", answer["type"])
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_POST(self) -> None:
            status, text = answer.get("post", (answer["status"], answer["body"]))
            body = text.encode()
            self.send_response(status)
            self.send_header("Content-Type", answer["type"])
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        do_DELETE = do_GET

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()

    def serve(status: int, content_type: str, body: str, post: tuple[int, str] | None = None) -> SlurmBackend:
        """Every request answered ``status`` and ``body``; a POST ``post`` (status, body) when given."""
        answer.update(status=status, type=content_type, body=body)
        if post is not None:
            answer["post"] = post
        return SlurmBackend(f"http://127.0.0.1:{server.server_port}", {"user": "root", "token": TOKEN}, timeout=5)

    yield serve
    server.shutdown()
    server.server_close()


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
        {**NODE, "gres_used": "gpu:a100:3(IDX:0-2)", "alloc_cpus": 2, "alloc_memory": 300},
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
