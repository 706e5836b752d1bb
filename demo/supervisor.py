"""Keeps a few child processes running until told to stop: `manage.py demo`'s web server, worker and beat.

A child that exits, whatever its status, is logged (its name, pid and status) and started again, alone: the
others keep running, so a crashed worker never takes the portal down. The pause before a restart doubles
with each exit that follows a short run (1 s, 2 s, 4 s, ... at most ``max_backoff``), so a child that cannot
start does not spin, and goes back to the first pause once the child has run for ``stable_after`` seconds.
Stopping sends SIGTERM to every child and SIGKILL to any still running ``stop_timeout`` seconds later.

Processes started outside the tree of children, in sessions of their own (the simulated clusters' service
replicas), are ended by ``stop_replicas``: every process whose working directory lies under the clusters'
directory, by process group, SIGTERM and then SIGKILL.

The children share one directory for their Prometheus metrics (``metrics_directory``: emptied before they
start, so that the counts of an earlier run are not added to this one's; docs/operations.md#metrics).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path


@dataclass
class Child:
    name: str
    argv: Sequence[str]
    process: subprocess.Popen[bytes] | None = None
    started_at: float = 0.0
    restarts: int = 0
    backoff: float = 0.0  # the pause before the next restart; 0 until it first exits
    restart_at: float = 0.0


def describe(status: int) -> str:
    """An exit status as people read it: ``status 1``, or ``signal SIGKILL`` for a negative one."""
    if status < 0:
        try:
            return f"signal {signal.Signals(-status).name}"
        except ValueError:
            return f"signal {-status}"
    return f"status {status}"


def metrics_directory(path: Path) -> dict[str, str]:
    """Empty ``path`` (made if missing) and return the environment that has every child write its metrics
    there (``PROMETHEUS_MULTIPROC_DIR``, read by the client when a process first imports it)."""
    shutil.rmtree(path, ignore_errors=True)
    path.mkdir(parents=True)
    return {**os.environ, "PROMETHEUS_MULTIPROC_DIR": str(path)}


def public_url(bind: str) -> str:
    """The URL at which this machine reaches a web server bound to ``bind`` (``0.0.0.0:8000``: loopback)."""
    host, _, port = bind.rpartition(":")
    if host in ("", "0.0.0.0", "::", "[::]"):  # noqa: S104 - read, not bound
        host = "127.0.0.1"
    return f"http://{host}:{port}"


def _groups_under(root: Path) -> set[int]:
    """The process groups of the live processes whose working directory is under ``root``."""
    groups = set()
    for proc in Path("/proc").glob("[0-9]*"):
        try:
            cwd = Path(os.readlink(proc / "cwd"))
            if cwd == root or root in cwd.parents:
                groups.add(os.getpgid(int(proc.name)))
        except (OSError, ValueError):
            continue
    return groups


def stop_replicas(root: Path, grace: float = 3.0) -> int:
    """End the process groups working under ``root`` (SIGTERM, SIGKILL after ``grace`` seconds); their count."""
    root = root.resolve()
    groups = _groups_under(root) - {os.getpgrp()}
    for group in groups:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(group, signal.SIGTERM)
    deadline = time.monotonic() + grace
    while _groups_under(root) & groups and time.monotonic() < deadline:
        time.sleep(0.1)
    for group in _groups_under(root) & groups:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(group, signal.SIGKILL)
    return len(groups)


class Supervisor:
    def __init__(
        self,
        commands: Mapping[str, Sequence[str]],
        log: Callable[[str], None],
        *,
        env: Mapping[str, str] | None = None,
        first_backoff: float = 1.0,
        max_backoff: float = 30.0,
        stable_after: float = 60.0,
        stop_timeout: float = 10.0,
    ) -> None:
        self.children = [Child(name, argv) for name, argv in commands.items()]
        self.env = env
        self.log = log
        self.first_backoff, self.max_backoff = first_backoff, max_backoff
        self.stable_after, self.stop_timeout = stable_after, stop_timeout

    def run(self, stopping: threading.Event, poll: float = 0.2) -> None:
        """Start every child, keep them running until ``stopping`` is set, then stop them all."""
        try:
            for child in self.children:
                self._start(child)
            while not stopping.wait(poll):
                self.check()
        finally:
            self.stop()

    def check(self) -> None:
        """Restart the children that are due; note those that exited and when they are due."""
        now = time.monotonic()
        for child in self.children:
            if child.process is None:
                if now >= child.restart_at:
                    self._start(child)
                continue
            status = child.process.poll()
            if status is None:
                continue
            ran = now - child.started_at
            if ran >= self.stable_after or not child.backoff:
                child.backoff = self.first_backoff
            else:
                child.backoff = min(child.backoff * 2, self.max_backoff)
            child.restarts += 1
            child.restart_at = now + child.backoff
            self.log(
                f"{child.name} (pid {child.process.pid}) exited with {describe(status)} after {ran:.0f} s; "
                f"restart {child.restarts} in {child.backoff:.1f} s"
            )
            child.process = None

    def stop(self) -> None:
        for child in self.children:
            if child.process is not None and child.process.poll() is None:
                child.process.send_signal(signal.SIGTERM)
        began = time.monotonic()
        for child in self.children:
            if child.process is None:
                continue
            try:
                child.process.wait(timeout=max(0.1, began + self.stop_timeout - time.monotonic()))
            except subprocess.TimeoutExpired:
                self.log(f"{child.name} (pid {child.process.pid}) did not stop in {self.stop_timeout:.0f} s; killed")
                child.process.kill()
                child.process.wait()
            self.log(f"{child.name} stopped with {describe(child.process.returncode)}")
            child.process = None
        self.log(f"stopped in {time.monotonic() - began:.1f} s")

    def _start(self, child: Child) -> None:
        try:
            child.process = subprocess.Popen(child.argv, env=self.env)  # noqa: S603 - our own commands, no shell
        except OSError as exc:  # counted as an exit: retried after the pause
            self.log(f"{child.name} cannot be started: {exc}")
            child.backoff = min(max(child.backoff * 2, self.first_backoff), self.max_backoff)
            child.restart_at = time.monotonic() + child.backoff
            return
        child.started_at = time.monotonic()
        self.log(f"{child.name} started (pid {child.process.pid})")
