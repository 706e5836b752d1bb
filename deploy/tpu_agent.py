#!/usr/bin/env python3
"""Quartermaster's TPU slice agent: runs Quartermaster's jobs on a TPU slice its owner lends to a team.

A slice that Quartermaster did not make is never used by it, unless its owner lends it: labels it
``quartermaster-team=<team slug>`` and runs this agent on every host of the slice (as a systemd service, say;
Python 3.9+, nothing else). The agent reads the slice's metadata from the host's metadata server
(``http://metadata.google.internal``, or ``GCE_METADATA_HOST``) with the server's long poll, so it hears of
a change at once and costs nothing while nothing changes. Quartermaster writes, through the Cloud TPU API:

- ``quartermaster-run``: the run (the job's id on the cluster); its ``quartermaster-script``: the program,
  which reports its own exit code to Quartermaster through the job's token;
- ``quartermaster-stop``: ``term`` when the job must stop soon (preempted, drained, at its time limit): the
  program gets SIGTERM, to checkpoint and exit;
- and removes them when the job is over or cancelled: a program still running gets SIGTERM, then SIGKILL
  ``--grace`` seconds later.

The agent runs a run's program once per host, in a process group of its own, its output in
``<state dir>/<hash of the run>.log``. What it started and what ended is kept in the state directory, so a
restarted agent neither runs a finished run again nor forgets one: a program that outlived the agent (run it
under systemd with ``KillMode=process``) is watched again, and one cut short with it or by a reboot is
started again, as after a preemption (a program resumes from its checkpoint).

    python3 tpu_agent.py [--state-dir /var/lib/quartermaster-agent] [--grace 30]
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

RUN_KEY = "quartermaster-run"
SCRIPT_KEY = "quartermaster-script"
STOP_KEY = "quartermaster-stop"
POLL_SECONDS = 60
# Runs the program ($0) and records its exit code in the run's .done file ($1) itself, so that a program that
# ends while no agent watches it (killed or restarting) is known to have ended, not to have been cut short.
# A stop's SIGTERM reaches the whole group: this shell only notes it (a trap, reset in the program) and waits on.
RECORDER = 'trap : TERM INT HUP; bash "$0"; code=$?; [ -e "$1" ] || echo "$code" > "$1"; exit "$code"'


def log(message: str) -> None:
    print(f"{time.strftime('%Y-%m-%dT%H:%M:%S')} {message}", flush=True)


class Metadata:
    """The host's metadata server: the instance attributes, waiting for a change (the server's long poll)."""

    def __init__(self, host: str) -> None:
        self.base = f"http://{host}/computeMetadata/v1/instance/attributes/"
        self.etag = ""

    def wait(self, timeout: int) -> dict[str, str]:
        """The attributes once they differ from the last answer's (its ETag); at once the first time."""
        query = "?recursive=true"
        if self.etag:
            query += f"&wait_for_change=true&timeout_sec={timeout}&last_etag={self.etag}"
        # The host's metadata server, always http (GCE_METADATA_HOST names a host and port, not a scheme).
        request = urllib.request.Request(self.base + query, headers={"Metadata-Flavor": "Google"})  # noqa: S310
        with urllib.request.urlopen(request, timeout=timeout + 10) as answer:  # noqa: S310 - the metadata server
            self.etag = answer.headers.get("ETag", "")
            attributes = json.loads(answer.read() or b"{}")
        return {str(k): str(v) for k, v in attributes.items()} if isinstance(attributes, dict) else {}


class Program:
    """A run's program on this host, in a process group of its own: one this agent started (``process``), or
    one a previous agent started and that outlived it (adopted by its pid), stopped by signalling its group."""

    def __init__(self, run: str, pid: int, process: subprocess.Popen | None = None) -> None:  # type: ignore[type-arg]
        self.run = run
        self.pid = pid
        self.process = process
        self.termed = False

    def running(self) -> bool:
        if self.process is not None:
            return self.process.poll() is None
        try:
            os.kill(self.pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            return True
        return True

    def wait(self, timeout: float | None = None) -> int | None:
        """Its exit code once it ended (None for an adopted one, whose code only its parent saw); raises
        ``subprocess.TimeoutExpired`` if it still runs after ``timeout`` seconds."""
        if self.process is not None:
            return self.process.wait(timeout)
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.running():
            if deadline is not None and time.monotonic() > deadline:
                raise subprocess.TimeoutExpired(str(self.pid), timeout or 0)
            time.sleep(0.2)
        return None

    def signal(self, signum: int) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.pid, signum)

    def stop(self, grace: float) -> None:
        """SIGTERM to its group, then SIGKILL if any of it still runs ``grace`` seconds later; returns once the
        whole group is gone (a program's own children too, whatever became of its first process)."""
        self.signal(signal.SIGTERM)
        deadline = time.monotonic() + grace
        while self.group_alive():
            if time.monotonic() > deadline:
                self.signal(signal.SIGKILL)
                deadline = float("inf")
            time.sleep(0.05)

    def group_alive(self) -> bool:
        if self.process is not None:
            self.process.poll()  # reaped once it ended: a zombie still counts as one of the group
        try:
            os.killpg(self.pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            return True
        return True


class Agent:
    def __init__(self, metadata: Metadata, state_dir: Path, grace: float) -> None:
        self.metadata = metadata
        self.state = state_dir
        self.grace = grace
        self.program: Program | None = None
        self.lock = threading.Lock()
        state_dir.mkdir(parents=True, exist_ok=True)

    def path(self, run: str, suffix: str) -> Path:
        return self.state / (hashlib.sha256(run.encode()).hexdigest()[:20] + suffix)

    def finished(self, run: str) -> bool:
        return self.path(run, ".done").exists()

    def apply(self, attributes: dict[str, str]) -> None:
        """Make this host run what the metadata says: start a new run, stop one taken away, pass a stop on."""
        run = attributes.get(RUN_KEY, "")
        with self.lock:
            program = self.program
            if program is not None and not program.running():
                program = self.program = None  # ended; its waiter marked it done
            if program is not None and program.run != run:
                log(f"run {program.run} was taken off this slice: stopping it")
                program.stop(self.grace)
                self.path(program.run, ".done").write_text("stopped\n")
                program = self.program = None
            if program is None and run and not self.finished(run):
                program = self.adopt(run)
                script = attributes.get(SCRIPT_KEY, "")
                if program is None and script:
                    program = self.start(run, script)
                self.program = program
            if program is not None and attributes.get(STOP_KEY) and not program.termed:
                log(f"run {program.run}: asked to stop; SIGTERM")
                program.termed = True
                program.signal(signal.SIGTERM)

    def adopt(self, run: str) -> Program | None:
        """The run's program if a previous agent started it and it still runs (an agent restarted while the
        program went on, as with systemd's KillMode=process); None if it never started or was cut short."""
        try:
            pid = int(self.path(run, ".pid").read_text())
        except (OSError, ValueError):
            return None
        program_file = str(self.path(run, ".sh"))
        try:
            command = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        except OSError:
            return None
        if program_file.encode() not in command:  # the pid was reused by something else
            return None
        log(f"run {run}: its program (pid {pid}) still runs: watching it")
        program = Program(run, pid)
        threading.Thread(target=self.waiter, args=(program,), daemon=True).start()
        return program

    def start(self, run: str, script: str) -> Program:
        again = self.path(run, ".started").exists()
        log(f"run {run}: {'starting again (cut short before)' if again else 'starting'}")
        program_file = self.path(run, ".sh")
        program_file.write_text(script)
        program_file.chmod(0o700)
        self.path(run, ".started").write_text(run + "\n")
        output = open(self.path(run, ".log"), "ab")  # noqa: SIM115 - the child keeps it
        process = subprocess.Popen(  # noqa: S603 - the program Quartermaster was given for this slice
            ["/bin/bash", "-c", RECORDER, str(program_file), str(self.path(run, ".done"))],
            stdout=output,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        output.close()
        self.path(run, ".pid").write_text(f"{process.pid}\n")
        program = Program(run, process.pid, process)
        threading.Thread(target=self.waiter, args=(program,), daemon=True).start()
        return program

    def waiter(self, program: Program) -> None:
        code = program.wait()
        with self.lock:
            if not self.finished(program.run):
                self.path(program.run, ".done").write_text(f"{code}\n")
            elif code is None:  # an adopted program: its recorder wrote the code its parent saw
                with contextlib.suppress(OSError, ValueError):
                    code = int(self.path(program.run, ".done").read_text())
        log(f"run {program.run}: its program ended (exit code {'unknown' if code is None else code})")

    def serve(self, once: bool = False) -> int:
        backoff = 1.0
        while True:
            try:
                attributes = self.metadata.wait(POLL_SECONDS)
                backoff = 1.0
            except (OSError, ValueError) as error:  # the metadata server restarting, a network blip
                log(f"metadata server: {error}; again in {backoff:.0f} s")
                self.metadata.etag = ""  # read it afresh: a change may have come meanwhile
                time.sleep(backoff)
                backoff = min(backoff * 2, 30.0)
                continue
            self.apply(attributes)
            if once:
                return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--state-dir", default="/var/lib/quartermaster-agent", help="Where runs are kept.")
    parser.add_argument("--grace", type=float, default=30.0, help="Seconds between SIGTERM and SIGKILL.")
    args = parser.parse_args(argv)
    host = os.environ.get("GCE_METADATA_HOST", "metadata.google.internal")
    agent = Agent(Metadata(host), Path(args.state_dir), args.grace)
    for signum in (signal.SIGTERM, signal.SIGINT):  # the agent stops; its program goes on (see the docstring)
        signal.signal(signum, lambda *_: sys.exit(0))
    log(f"watching the metadata of this host at {host}")
    return agent.serve()


if __name__ == "__main__":
    sys.exit(main())
