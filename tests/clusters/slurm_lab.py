"""The Slurm labs (``deploy/slurm-lab/``) for tests: their handles, a JWT minter, and starting them.

Two real Slurms: 22.05 (Debian 12's packages, on the host) and 24.11 (Debian 13's, in a root filesystem
of its own that ``rootfs.sh`` builds once and caches). Without a lab (not root, Slurm or debootstrap not
installed, the start failed) its tests skip, except in CI (``CI=true``) where they fail. The
``slurm_lab`` fixture in ``conftest.py`` runs every Slurm test on each lab, and decides when to start and
stop them. ``QM_SLURM_VERSIONS=24.11`` keeps a local run to one lab; ``QM_SLURM_LAB``/``QM_SLURM_BASEPORT``
(22.05) and ``QM_SLURM_LAB_2411``/``QM_SLURM_BASEPORT_2411`` move a lab away from another session's.
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

from clusters.backends.slurm.backend import SlurmBackend

SCRIPTS = Path(__file__).resolve().parents[2] / "deploy" / "slurm-lab"
NODES = ("lab-node1", "lab-node2", "lab-node3", "lab-node4")
#: The lab's cloud nodes (State=CLOUD, feature qm-pool-burst): powered down, and so in no inventory, until a test
#: powers them up (``tests/scheduler/test_elastic_slurm.py``).
CLOUD_NODES = ("lab-cloud1", "lab-cloud2")


@dataclass(frozen=True)
class LabSpec:
    """Where one lab lives: its version, directory and ports (slurmrestd on ``baseport + 80``)."""

    version: str
    lab: Path
    baseport: int
    api: str  # the newest data parser its slurmrestd serves
    levels: tuple[str, ...]  # the topology levels setup.sh gives it, widest first

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.baseport + 80}"

    @property
    def started_by_tests(self) -> Path:
        return self.lab / ".qm-started-by-tests"

    @property
    def env(self) -> dict[str, str]:
        return {"VERSION": self.version, "LAB": str(self.lab), "BASEPORT": str(self.baseport)}

    @property
    def root(self) -> Path | None:
        """The root filesystem the lab's daemons and jobs run in (24.11), as ``setup.sh`` wrote it down; None
        for a lab on the host (22.05) or one not set up."""
        try:
            written = (self.lab / "etc" / "lab.env").read_text()
        except FileNotFoundError:
            return None
        root = next((line[5:] for line in written.splitlines() if line.startswith("ROOT=")), "")
        return Path(root) if root else None

    def path(self, path: str | Path) -> Path:
        """Where the lab's jobs' ``path`` is, seen from the host (inside the root filesystem, if any)."""
        root = self.root
        return Path(f"{root}{path}") if root else Path(path)


def _env(name: str, default: str) -> str:
    return os.environ.get(name) or default


LABS = {
    "22.05": LabSpec(
        "22.05",
        Path(_env("QM_SLURM_LAB", "/tmp/slurm-lab")),  # noqa: S108 (the lab scripts' default)
        int(_env("QM_SLURM_BASEPORT", "17000")),
        "v0.0.38",
        ("spine", "leaf"),
    ),
    "24.11": LabSpec(
        "24.11",
        Path(_env("QM_SLURM_LAB_2411", "/tmp/slurm-lab-24.11")),  # noqa: S108 (the lab scripts' default)
        int(_env("QM_SLURM_BASEPORT_2411", "17100")),
        "v0.0.42",
        ("block",),
    ),
}
#: The 22.05 lab's directory and slurmrestd, as before there were two labs.
LAB = LABS["22.05"].lab
ENDPOINT = LABS["22.05"].endpoint
#: The labs the Slurm tests run on (all of them unless ``QM_SLURM_VERSIONS`` names some, comma-separated).
VERSIONS = tuple(v for v in _env("QM_SLURM_VERSIONS", ",".join(LABS)).split(",") if v in LABS)


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
    spec: LabSpec
    token: str

    @property
    def lab(self) -> Path:
        return self.spec.lab

    @property
    def endpoint(self) -> str:
        return self.spec.endpoint

    @property
    def version(self) -> str:
        return self.spec.version

    @property
    def options(self) -> dict[str, Any]:
        # the lab's own scontrol: 24.11's runs inside its root filesystem (a 22.05 client cannot talk to it)
        return {
            "slurm_conf": str(self.lab / "etc" / "slurm.conf"),
            "scontrol": str(self.lab / "bin" / "scontrol"),
            "workdir": str(self.lab / "jobs"),
        }

    def command(self, program: str, *args: str) -> str:
        """Run one of the lab's Slurm commands (``$LAB/bin``) and return its output; read-only uses."""
        done = subprocess.run(
            [str(self.lab / "bin" / program), *args], capture_output=True, text=True, timeout=15, check=True
        )
        return done.stdout

    def settle(self, *nodes: str, seconds: float = 60) -> None:
        """Wait until no job is on ``nodes`` (read with the lab's squeue): an earlier test's job may still be
        completing there (its epilog, KillWait), holding CPUs and GPUs a test expects free."""
        deadline = time.monotonic() + seconds
        while jobs := self.command(
            "squeue", "--noheader", f"--nodelist={','.join(nodes)}", "--format=%i %T %N"
        ).strip():
            assert time.monotonic() < deadline, f"jobs still on {', '.join(nodes)} after {seconds} s:\n{jobs}"
            time.sleep(0.5)

    def backend(self, *, dry_run: bool = False, token: str | None = None, **options: Any) -> SlurmBackend:
        credentials = {"user": "root", "token": self.token if token is None else token}
        return SlurmBackend(self.endpoint, credentials, {**self.options, **options}, dry_run=dry_run, timeout=15)

    def job_names(self) -> set[str]:
        """Every job name slurmctld knows, read directly (not through the backend under test)."""
        headers = {"X-SLURM-USER-NAME": "root", "X-SLURM-USER-TOKEN": self.token}
        answer = requests.get(f"{self.endpoint}/slurm/{self.spec.api}/jobs", headers=headers, timeout=10).json()
        return {job["name"] for job in answer["jobs"]}


def unavailable(reason: str) -> None:
    if os.environ.get("CI", "").lower() in ("true", "1"):
        pytest.fail(f"the Slurm lab is required in CI: {reason}", pytrace=False)
    pytest.skip(f"Slurm lab not available: {reason}")


def missing_prerequisite(spec: LabSpec) -> str:
    if os.geteuid() != 0:
        return "it needs root (munged, slurmd and mknod); run the tests as root or start the lab by hand"
    missing = [b for b in ("curl",) if shutil.which(b) is None]
    if spec.version == "22.05":
        missing += [b for b in ("slurmctld", "slurmd", "slurmrestd", "munged") if not Path("/usr/sbin", b).exists()]
        missing += [b for b in ("sinfo", "scontrol") if shutil.which(b) is None]
        packages = "slurmctld slurmd slurm-client slurmrestd munge slurm-wlm-jwt-plugin"
    else:
        cached = Path(_env("ROOTFS_CACHE", "/var/cache/quartermaster")).glob("slurm-rootfs-*/.qm-rootfs-done")
        if shutil.which("debootstrap") is None and not any(cached):
            missing.append("debootstrap")  # rootfs.sh builds the 24.11 root filesystem with it
        missing += [b for b in ("unshare", "chroot") if shutil.which(b) is None]
        packages = "debootstrap"
    if missing:
        return f"{', '.join(missing)} not installed (apt-get install -y --no-install-recommends {packages})"
    return ""


def lab_token(spec: LabSpec) -> str:
    return mint_token((spec.lab / "etc" / "jwt_hs256.key").read_bytes())


def healthy(spec: LabSpec) -> bool:
    """slurmrestd answers with the lab's key, every node is up, and the lab has the topology and the cloud nodes
    it should."""
    if not (spec.lab / "etc" / "jwt_hs256.key").exists():
        return False
    if "State=CLOUD" not in (spec.lab / "etc" / "slurm.conf").read_text():
        return False  # set up before the labs had cloud nodes
    try:
        nodes = SlurmLab(spec, lab_token(spec)).backend().inventory().nodes
    except Exception:  # noqa: BLE001 (any failure means "start it")
        return False
    root = spec.root
    return (
        # a root filesystem built before it had Python cannot run the lab's Ray jobs: set up again on the new one
        (root is None or (root / "usr" / "bin" / "python3").exists())
        and {node.name for node in nodes} - set(CLOUD_NODES) == set(NODES)
        and all(node.ready for node in nodes)
        and all(tuple(node.topology) == spec.levels for node in nodes)
    )


def run_script(spec: LabSpec, script: str, log: TextIO, timeout: float = 60, **env: str) -> None:
    log.write(f"--- {script} {env}\n")
    log.flush()
    subprocess.run(
        ["bash", str(SCRIPTS / script)],
        env={**os.environ, **spec.env, **env},
        stdout=log,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
        timeout=timeout,
        check=True,
    )


def start(spec: LabSpec, log: TextIO) -> float:
    started = time.monotonic()
    run_script(spec, "stop.sh", log)  # whatever is left of an earlier lab (stale pid files, a half-started one)
    run_script(spec, "setup.sh", log, timeout=900)  # 24.11: builds its root filesystem if none is cached
    run_script(spec, "start.sh", log, CLEAN="1", RESTD="1")
    spec.started_by_tests.touch()
    return time.monotonic() - started
