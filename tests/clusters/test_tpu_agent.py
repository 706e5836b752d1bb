"""The TPU slice agent (``deploy/tpu_agent.py``) as real processes, one per host of a slice lent to a team,
each reading its host's metadata server (``tests/clusters/tpu_server.py`` ``MetadataServer``): a job the backend
gives the slice runs on every host, worker 0 reports its exit code through the job's token, a stop request
reaches the program as SIGTERM, cancelling kills a program that ignores it, and a restarted agent neither runs
a finished run again nor starts a second copy of a running one."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from clusters.backends.tpu.backend import TEAM_LABEL
from tests.clusters.test_tpu_backend import backend, job
from tests.clusters.tpu_server import MetadataServer, TpuServer, _endpoints

AGENT = Path(__file__).resolve().parents[2] / "deploy" / "tpu_agent.py"
HOSTS = 2


class Reports:
    """Quartermaster's report endpoint as far as the program's report goes: what was posted, and how."""

    def __init__(self) -> None:
        self.posted: list[tuple[str, str, Any]] = []
        reports = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *_: Any) -> None:
                pass

            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                reports.posted.append((self.path, self.headers.get("Authorization", ""), json.loads(body)))
                self.send_response(202)
                self.send_header("Content-Length", "0")
                self.end_headers()

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}"


class Slice:
    """A lent v5p-16 slice of two hosts on the fake API, a metadata server and an agent per host."""

    def __init__(self, server: TpuServer, stack: ExitStack, tmp: Path) -> None:
        self.server, self.tmp = server, tmp
        server.add_node(
            "lab-b",
            acceleratorType="v5p-16",
            acceleratorConfig={"type": "V5P", "topology": "2x2x2"},
            state="READY",
            health="HEALTHY",
            labels={TEAM_LABEL: "vision"},
            metadata={},
            networkEndpoints=_endpoints(HOSTS, 9),
        )
        self.metadata = [stack.enter_context(MetadataServer(server, "lab-b", worker)) for worker in range(HOSTS)]
        self.agents: list[subprocess.Popen[bytes] | None] = [None] * HOSTS
        for worker in range(HOSTS):
            self.start_agent(worker)
        stack.callback(self.stop_agents)

    def start_agent(self, worker: int) -> None:
        env = {**os.environ, "GCE_METADATA_HOST": self.metadata[worker].host}
        state = self.tmp / f"agent-{worker}"
        log = open(self.tmp / f"agent-{worker}.log", "ab")  # noqa: SIM115 - the agent keeps it
        self.agents[worker] = subprocess.Popen(
            [sys.executable, str(AGENT), "--state-dir", str(state), "--grace", "1"], env=env, stdout=log, stderr=log
        )
        log.close()

    def stop_agents(self) -> None:
        for agent in self.agents:
            if agent is not None and agent.poll() is None:
                agent.kill()
                agent.wait()

    def agent_log(self) -> str:
        return "".join((self.tmp / f"agent-{w}.log").read_text() for w in range(HOSTS))


@pytest.fixture
def lab(tmp_path: Path) -> Iterator[tuple[Slice, Reports]]:
    with ExitStack() as stack, TpuServer(page_size=50) as server:
        reports = Reports()
        stack.callback(reports.httpd.shutdown)
        yield Slice(server, stack, tmp_path), reports


def until(check: Callable[[], Any], what: str, seconds: float = 20.0) -> Any:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        found = check()
        if found:
            return found
        time.sleep(0.05)
    raise AssertionError(f"not within {seconds} s: {what}")


def spec(lab: tuple[Slice, Reports], script: str, job_id: str = "42-1-a1b2c3") -> Any:
    slice_, reports = lab
    env = {"QM_JOB_TOKEN": "qmj_secret", "QM_API_URL": reports.url, "QM_JOB_ID": job_id, "MARKS": str(slice_.tmp)}
    return job(
        id=job_id,
        nodes=("lab-b",),
        tpu_type="v5p-16",
        accelerators_per_worker=8,
        script=script,
        command=(),
        env=env,
    )


def lines(path: Path) -> list[str]:
    return path.read_text().splitlines() if path.exists() else []


def test_every_host_runs_the_job_and_worker_0_reports_its_exit_code(lab: tuple[Slice, Reports]) -> None:
    slice_, reports = lab
    ran = slice_.tmp / "ran"
    backend_id = backend(slice_.server).submit(spec(lab, f'echo "$QM_SLICE $QM_JOB_ID" >> {ran}\nexit 3\n'))
    until(lambda: len(reports.posted) == 1 and len(lines(ran)) == HOSTS, "both hosts ran it, one report")
    assert lines(ran) == ["0 42-1-a1b2c3"] * HOSTS
    time.sleep(0.5)  # worker 1 reports nothing, even later
    assert reports.posted == [("/api/v1/jobs/42/report/", "Bearer qmj_secret", {"exit_code": 3})]
    # The slice keeps the run until Quartermaster cleans it up: the agents do not run it again meanwhile.
    slice_.server.set_metadata("lab-b", {**slice_.server.metadata("lab-b"), "owner-note": "a change"})
    time.sleep(0.5)
    assert len(lines(ran)) == HOSTS
    backend(slice_.server).cancel(str(backend_id))
    assert slice_.server.metadata("lab-b") == {"owner-note": "a change"}


def test_a_stop_request_reaches_the_program_as_sigterm(lab: tuple[Slice, Reports]) -> None:
    slice_, _ = lab
    marks = slice_.tmp / "term"
    script = f"trap 'echo checkpointed >> {marks}; exit 0' TERM\nwhile true; do sleep 0.1; done\n"
    backend_id = str(backend(slice_.server).submit(spec(lab, script)))
    until(lambda: "starting" in slice_.agent_log(), "the agents started it")
    time.sleep(0.3)
    backend(slice_.server).signal(backend_id, 30)
    until(lambda: len(lines(marks)) == HOSTS, "every host's program was told to stop")


def test_cancel_kills_a_program_that_ignores_sigterm(lab: tuple[Slice, Reports]) -> None:
    slice_, _ = lab
    pids = slice_.tmp / "pids"
    script = f"trap '' TERM\necho $$ >> {pids}\nwhile true; do sleep 0.1; done\n"
    backend_id = str(backend(slice_.server).submit(spec(lab, script)))
    running = [int(p) for p in until(lambda: len(lines(pids)) == HOSTS and lines(pids), "both programs running")]
    backend(slice_.server).cancel(backend_id)

    def gone() -> bool:
        for pid in running:
            try:
                os.kill(pid, 0)
            except ProcessLookupError:
                continue
            return False
        return True

    until(gone, "the programs were killed after their grace (1 s)", seconds=10)
    assert "was taken off this slice: stopping it" in slice_.agent_log()


def test_a_restarted_agent_neither_runs_a_finished_run_again_nor_copies_a_running_one(
    lab: tuple[Slice, Reports],
) -> None:
    slice_, reports = lab
    done = slice_.tmp / "done"
    backend_id = str(backend(slice_.server).submit(spec(lab, f"echo ran >> {done}\n")))
    until(lambda: len(lines(done)) == HOSTS and len(reports.posted) == 1, "the first run ended")
    for worker in range(HOSTS):  # agents restarted while the slice still holds the finished run
        agent = slice_.agents[worker]
        assert agent is not None
        agent.send_signal(signal.SIGKILL)
        agent.wait()
        slice_.start_agent(worker)
    time.sleep(1.5)
    assert len(lines(done)) == HOSTS
    backend(slice_.server).cancel(backend_id)

    # A second run, whose programs outlive their agents (as under systemd's KillMode=process): the new agents
    # watch them rather than start second copies.
    starts = slice_.tmp / "starts"
    script = f"echo $$ >> {starts}\nwhile true; do sleep 0.1; done\n"
    second = str(backend(slice_.server).submit(spec(lab, script, job_id="43-1-d4e5f6")))
    until(lambda: len(lines(starts)) == HOSTS, "the second run started on both hosts")
    for worker in range(HOSTS):
        agent = slice_.agents[worker]
        assert agent is not None
        agent.send_signal(signal.SIGKILL)
        agent.wait()
        slice_.start_agent(worker)
    until(lambda: slice_.agent_log().count("still runs: watching it") == HOSTS, "the new agents adopted them")
    assert len(lines(starts)) == HOSTS
    backend(slice_.server).cancel(second)  # and they can still stop them
    until(lambda: slice_.agent_log().count("was taken off this slice") == HOSTS, "stopped", seconds=10)
