"""The Slurm lab (``deploy/slurm-lab/``) for tests: its handle, a JWT minter, and starting it with the scripts.

Without the lab (not root, Slurm not installed, the start failed) the tests skip, except in CI
(``CI=true``) where they fail. The ``slurm_lab`` fixture in ``conftest.py`` decides when to start and stop.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import os
import shutil
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

import pytest
import requests

from clusters.backends.slurm import SlurmBackend

SCRIPTS = Path(__file__).resolve().parents[2] / "deploy" / "slurm-lab"
LAB = Path(os.environ.get("QM_SLURM_LAB", "/tmp/slurm-lab"))  # noqa: S108 (the lab scripts' default)
ENDPOINT = os.environ.get("QM_SLURM_LAB_ENDPOINT", "http://127.0.0.1:17080")  # another lab: its RESTD_PORT
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


def unavailable(reason: str) -> None:
    if os.environ.get("CI", "").lower() in ("true", "1"):
        pytest.fail(f"the Slurm lab is required in CI: {reason}", pytrace=False)
    pytest.skip(f"Slurm lab not available: {reason}")


def missing_prerequisite() -> str:
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


def lab_token() -> str:
    return mint_token((LAB / "etc" / "jwt_hs256.key").read_bytes())


def healthy() -> bool:
    """slurmrestd answers with the lab's key and every node is up."""
    if not (LAB / "etc" / "jwt_hs256.key").exists():
        return False
    try:
        nodes = SlurmLab(LAB, ENDPOINT, lab_token()).backend().inventory().nodes
    except Exception:  # noqa: BLE001 (any failure means "start it")
        return False
    return {node.name for node in nodes} == set(NODES) and all(node.ready for node in nodes)


def run_script(script: str, log: TextIO, **env: str) -> None:
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


def start(log: TextIO) -> float:
    started = time.monotonic()
    run_script("stop.sh", log)  # whatever is left of an earlier lab (stale pid files, a half-started one)
    run_script("setup.sh", log)
    run_script("start.sh", log, CLEAN="1", RESTD="1")
    STARTED_BY_TESTS.touch()
    return time.monotonic() - started
