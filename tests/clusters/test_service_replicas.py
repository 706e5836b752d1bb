"""Service replicas on the simulated cluster run for real: the replica script (``slurm/service.py``) starts
``python3 -m http.server`` on 127.0.0.1, waits for its health path and reports its address to a real HTTP
server standing in for Quartermaster's API (the token and the body it sends are checked); the status reads the
process, the inventory counts it, the output is its own; a cancel leaves no process (connection refused), a
program that exits is failed or succeeded by its exit code. And the script itself: ``$PORT`` in the command,
a fixed port, the refusals."""

from __future__ import annotations

import json
import os
import signal
import threading
import time
from collections.abc import Iterator
from dataclasses import replace
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
import requests

from clusters.backends.base import InvalidJob, JobSpec, JobState
from clusters.backends.simulated import replicas
from clusters.backends.simulated.backend import SimulatedBackend
from clusters.backends.slurm import service
from clusters.backends.slurm.script import batch_script


class Api:
    """A real HTTP server taking the replicas' reports (what Quartermaster's endpoint route would receive)."""

    def __init__(self) -> None:
        self.reports: list[tuple[str, str, dict[str, Any]]] = []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                outer.reports.append((self.path, self.headers["Authorization"], body))
                self.send_response(201)
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()


@pytest.fixture
def api() -> Iterator[Api]:
    server = Api()
    yield server
    server.server.shutdown()


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[SimulatedBackend]:
    backend = SimulatedBackend("sim://replicas", options={"state_file": str(tmp_path / "east.json"), "nodes": 2})
    yield backend
    with backend._state() as state:  # no process outlives the test, whatever it asserted
        jobs = list(state["jobs"].values())
    for job in jobs:
        replicas.forget(job)


def replica(key: str, api: Api, **fields: Any) -> JobSpec:
    spec = JobSpec(
        id=key,
        name="web",
        workers=1,
        accelerators_per_worker=0,
        cpu_per_worker=500,
        memory_per_worker=256,
        nodes=("h100-00000",),
        time_limit=0,
        kind="service",
        command=("python3", "-m", "http.server", "--bind", "127.0.0.1", "$PORT"),
        serve_health_path="/",
        env={"QM_API_URL": api.url, "QM_JOB_TOKEN": "qmj_secret", "QM_JOB_ID": key},
    )
    return replace(spec, **fields)


def wait_for(what: str, check: Any, seconds: float = 30) -> Any:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        found = check()
        if found:
            return found
        time.sleep(0.2)
    raise AssertionError(f"{what} did not happen within {seconds} s")


def refused(url: str) -> bool:
    """Nothing listens at ``url`` any more."""
    try:
        requests.get(url, timeout=2)
    except requests.ConnectionError:
        return True
    return False


def test_a_replica_runs_for_real_reports_its_address_and_is_gone_after_a_cancel(
    cluster: SimulatedBackend, api: Api
) -> None:
    spec = replica("41-1-abc", api)
    assert cluster.submit(spec) == spec.id
    assert cluster.submit(spec) == spec.id  # idempotent: one process, not two
    path, token, body = wait_for("the replica's report", lambda: api.reports and api.reports[0])
    assert (path, token) == ("/api/v1/jobs/41/endpoint/", "Bearer qmj_secret")
    url = body["url"]
    assert url.startswith("http://127.0.0.1:")
    assert url.endswith("/")
    assert requests.get(url, timeout=5).status_code == 200  # the real program answers
    assert len(api.reports) == 1
    status = cluster.status(spec.id)
    assert (status.state, status.workers_running) == (JobState.RUNNING, 1)
    node = next(n for n in cluster.inventory().nodes if n.name == "h100-00000")
    assert (node.cpu_used, node.memory_used) == (500, 256)  # counted like any simulated job
    # Said once the report is sent (a moment after the API has it).
    wait_for("the replica's word", lambda: "the replica listens at " + url in cluster.logs(spec.id).text)

    with cluster._state() as state:
        process = dict(state["jobs"][spec.id]["process"])
    cluster.cancel(spec.id)
    assert cluster.status(spec.id).state is JobState.CANCELLED
    assert refused(url)
    assert replicas.members(process["group"]) == []  # nothing of its process group is left
    assert cluster.logs(spec.id).complete


def test_a_fixed_port_and_the_exit_code_decide_how_it_ended(
    cluster: SimulatedBackend, api: Api, tmp_path: Path
) -> None:
    failing = replica("42-1-abc", api, command=("sh", "-c", "echo $PORT > served; exit 3"), serve_port=18123)
    cluster.submit(failing)
    status = wait_for("the replica failing", lambda: (s := cluster.status(failing.id)).state is JobState.FAILED and s)
    assert (status.exit_code, status.reason) == (1, "exit_code")  # it never answered: the script gave up, exit 1
    with cluster._state() as state:  # it wrote in its own directory, the one place it may write
        marker = Path(state["jobs"][failing.id]["process"]["dir"]) / "served"
    assert marker.read_text().strip() == "18123"
    assert "ended before it answered" in cluster.logs(failing.id).text
    assert not api.reports

    done = replica("43-1-abc", api, command=("python3", "-c", "import sys; sys.exit(0)"))
    cluster.submit(done)
    wait_for("the replica ending", lambda: cluster.status(done.id).state is not JobState.RUNNING)
    assert cluster.status(done.id).state is JobState.FAILED  # ended before it was healthy: the script says 1


def test_a_signal_stops_it_and_it_ends_cancelled(cluster: SimulatedBackend, api: Api) -> None:
    spec = replica("44-1-abc", api)
    cluster.submit(spec)
    url = wait_for("the replica's report", lambda: api.reports and api.reports[0][2]["url"])
    cluster.signal(spec.id, 30)
    status = wait_for("the replica exiting", lambda: (s := cluster.status(spec.id)).state is not JobState.RUNNING and s)
    assert status.state is JobState.CANCELLED, status
    assert status.message == "exited after SIGTERM"
    assert refused(url)


def test_what_cannot_run_is_refused_before_anything_starts(cluster: SimulatedBackend, api: Api) -> None:
    with pytest.raises(InvalidJob, match="no command"):
        cluster.submit(replica("45-1-abc", api, command=()))
    with pytest.raises(InvalidJob, match="workers"):
        cluster.submit(replica("46-1-abc", api, workers=2, nodes=("h100-00000", "h100-00001")))
    with pytest.raises(InvalidJob, match="job id"):
        cluster.submit(replica("web-1", api))
    assert cluster.find("45-1-abc") is None
    dry = SimulatedBackend("sim://replicas", options=cluster.options, dry_run=True)
    assert dry.submit(replica("47-1-abc", api)).action == "submit"  # type: ignore[union-attr]
    assert cluster.find("47-1-abc") is None


# --- the script ---------------------------------------------------------------------------------------------


def test_the_command_is_quoted_word_by_word_and_only_port_expands() -> None:
    line = service.command_line(("python3", "-m", "srv", "--port=${PORT}", "$PORT", "a b", "$HOME", "`id`", ""))
    assert line == "python3 -m srv --port=\"$PORT\" \"$PORT\" 'a b' '$HOME' '`id`' ''"


def test_slurm_runs_the_same_script_without_a_time_limit_and_refuses_an_image() -> None:
    api = Api()
    try:
        spec = replica("48-1-abc", api, serve_port=8080, serve_health_path="/healthz")
        text = batch_script(spec, {})
        assert text.startswith("#!/bin/sh\n")
        assert "PORT=8080" in text
        assert "/healthz" in text
        assert "QM_SERVE_ADDRESS=$(python3" in text  # the node's address, from its route to the API
        assert "/api/v1/jobs/$2/endpoint/" not in text
        assert '"/api/v1/jobs/" + sys.argv[2] + "/endpoint/"' in text
        with pytest.raises(InvalidJob, match="image"):
            batch_script(replace(spec, image="ghcr.io/lab/web:1"), {})
    finally:
        api.server.shutdown()


def test_sigterm_to_the_script_reaches_the_program_and_it_exits_143(tmp_path: Path) -> None:
    """The script alone, as Slurm runs it: SIGTERM (scancel) is passed on, the exit code is 143."""
    import subprocess

    api = Api()
    try:
        spec = replica("49-1-abc", api)
        script = tmp_path / "replica.sh"
        script.write_text(service.script(spec, address="127.0.0.1"))
        env = {"PATH": os.environ["PATH"], **spec.env}
        process = subprocess.Popen(["/bin/sh", str(script)], env=env, cwd=tmp_path, start_new_session=True)
        try:
            url = wait_for("the report", lambda: api.reports and api.reports[0][2]["url"])
            process.send_signal(signal.SIGTERM)
            assert process.wait(timeout=20) == 143
            assert refused(url)
        finally:
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGKILL)
    finally:
        api.server.shutdown()
