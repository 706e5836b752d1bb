"""The Slurm lab (``deploy/slurm-lab/``) as a session fixture, started once however many xdist workers ask.

Workers serialize on an exclusive ``flock`` of ``$LAB/.qm-start.lock``: the first finds no healthy lab and
starts one, the others find it healthy and reuse it. While a session uses the lab it holds a shared lock
on ``$LAB/.qm-users.lock``; at its end it stops the lab only if it can then take that lock exclusively (no
other session is using it) and the lab was started by a test session, never one started by hand.

Without the lab (not root, Slurm not installed, the start failed) the tests skip, except in CI
(``CI=true``) where they fail.
"""

from __future__ import annotations

import base64
import fcntl
import hashlib
import hmac
import json
import os
import shutil
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

import pytest
import requests

from clusters.backends.slurm import SlurmBackend

SCRIPTS = Path(__file__).resolve().parents[2] / "deploy" / "slurm-lab"
LAB = Path(os.environ.get("QM_SLURM_LAB", "/tmp/slurm-lab"))  # noqa: S108 (the lab scripts' default)
ENDPOINT = "http://127.0.0.1:17080"
NODES = ("lab-node1", "lab-node2", "lab-node3", "lab-node4")
STARTED_BY_TESTS = LAB / ".qm-started-by-tests"


def mint_token(key: bytes, user: str = "root", lifespan: int = 3600) -> str:
    """A Slurm JWT (HS256 with the cluster's key, claims ``sun``, ``iat``, ``exp``), as scontrol token makes."""

    def b64(raw: bytes) -> str:
        return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()

    now = int(time.time())
    header = b64(json.dumps({"alg": "HS256", "typ": "JWT"}).encode())
    claims = b64(json.dumps({"exp": now + lifespan, "iat": min(now, now + lifespan) - 1, "sun": user}).encode())
    signature = b64(hmac.new(key, f"{header}.{claims}".encode(), hashlib.sha256).digest())
    return f"{header}.{claims}.{signature}"


@dataclass(frozen=True)
class SlurmLab:
    lab: Path
    endpoint: str
    token: str

    @property
    def options(self) -> dict[str, Any]:
        return {"slurm_conf": str(self.lab / "etc" / "slurm.conf"), "workdir": str(self.lab / "jobs")}

    def backend(self, *, dry_run: bool = False, token: str | None = None, **options: Any) -> SlurmBackend:
        credentials = {"user": "root", "token": self.token if token is None else token}
        return SlurmBackend(self.endpoint, credentials, {**self.options, **options}, dry_run=dry_run, timeout=15)

    def job_names(self) -> set[str]:
        """Every job name slurmctld knows, read directly (not through the backend under test)."""
        headers = {"X-SLURM-USER-NAME": "root", "X-SLURM-USER-TOKEN": self.token}
        answer = requests.get(f"{self.endpoint}/slurm/v0.0.38/jobs", headers=headers, timeout=10).json()
        return {job["name"] for job in answer["jobs"]}


def _unavailable(reason: str) -> None:
    if os.environ.get("CI", "").lower() in ("true", "1"):
        pytest.fail(f"the Slurm lab is required in CI: {reason}", pytrace=False)
    pytest.skip(f"Slurm lab not available: {reason}")


def _missing_prerequisite() -> str:
    if os.geteuid() != 0:
        return "it needs root (munged, slurmd and mknod); run the tests as root or start the lab by hand"
    missing = [b for b in ("slurmctld", "slurmd", "slurmrestd", "munged") if not Path("/usr/sbin", b).exists()]
    missing += [b for b in ("sinfo", "scontrol", "curl") if shutil.which(b) is None]
    if missing:
        return (
            f"{', '.join(missing)} not installed (apt-get install -y --no-install-recommends slurmctld slurmd "
            "slurm-client slurmrestd munge slurm-wlm-jwt-plugin)"
        )
    return ""


def _token() -> str:
    return mint_token((LAB / "etc" / "jwt_hs256.key").read_bytes())


def _healthy() -> bool:
    """slurmrestd answers with the lab's key and every node is up."""
    if not (LAB / "etc" / "jwt_hs256.key").exists():
        return False
    try:
        nodes = SlurmLab(LAB, ENDPOINT, _token()).backend().inventory().nodes
    except Exception:  # noqa: BLE001 (any failure means "start it")
        return False
    return {node.name for node in nodes} == set(NODES) and all(node.ready for node in nodes)


def _run(script: str, log: TextIO, **env: str) -> None:
    log.write(f"--- {script} {env}\n")
    log.flush()
    subprocess.run(
        ["bash", str(SCRIPTS / script)],
        env={**os.environ, "LAB": str(LAB), **env},
        stdout=log,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
        timeout=60,
        check=True,
    )


def _start(log: TextIO) -> float:
    started = time.monotonic()
    _run("stop.sh", log)  # whatever is left of an earlier lab (stale pid files, a half-started one)
    _run("setup.sh", log)
    _run("start.sh", log, CLEAN="1", RESTD="1")
    STARTED_BY_TESTS.touch()
    return time.monotonic() - started


@pytest.fixture(scope="session")
def slurm_lab() -> Iterator[SlurmLab]:
    problem = _missing_prerequisite()
    if problem:
        _unavailable(problem)
    LAB.mkdir(parents=True, exist_ok=True)
    with open(LAB / ".qm-start.lock", "a") as start_lock, open(LAB / ".qm-users.lock", "a") as users:
        fcntl.flock(start_lock, fcntl.LOCK_EX)
        try:
            if not _healthy():
                with open(LAB / "qm-fixture.log", "a") as log:
                    attempt = log.tell()
                    try:
                        seconds = _start(log)
                    except (subprocess.CalledProcessError, subprocess.TimeoutExpired) as exc:
                        _run("stop.sh", log)  # leave no half-started lab behind
                        log.flush()
                        with open(LAB / "qm-fixture.log") as written:
                            written.seek(attempt)
                            output = written.read()[-1000:]
                        _unavailable(f"{exc}; its output ({LAB / 'qm-fixture.log'}):\n{output}")
                    log.write(f"--- lab ready in {seconds:.2f} s\n")
            fcntl.flock(users, fcntl.LOCK_SH)  # taken while starts are serialized: no stop can slip in
        finally:
            fcntl.flock(start_lock, fcntl.LOCK_UN)
        yield SlurmLab(LAB, ENDPOINT, _token())
        fcntl.flock(start_lock, fcntl.LOCK_EX)
        try:
            fcntl.flock(users, fcntl.LOCK_UN)
            try:
                fcntl.flock(users, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                return  # another session still uses the lab; the last one out stops it
            if STARTED_BY_TESTS.exists():
                STARTED_BY_TESTS.unlink()
                with open(LAB / "qm-fixture.log", "a") as log:
                    _run("stop.sh", log)
        finally:
            fcntl.flock(users, fcntl.LOCK_UN)
            fcntl.flock(start_lock, fcntl.LOCK_UN)
