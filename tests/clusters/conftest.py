"""Fixtures of the cluster tests: the Slurm labs, each started once however many xdist workers ask.

Workers serialize on an exclusive ``flock`` of ``$LAB/.qm-start.lock``: the first finds no healthy lab and
starts one, the others find it healthy and reuse it. While a session uses the lab it holds a shared lock
on ``$LAB/.qm-users.lock``; at its end it stops the lab only if it can then take that lock exclusively (no
other session is using it) and the lab was started by a test session, never one started by hand.
"""

from __future__ import annotations

import fcntl
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager

import pytest

from tests.clusters.slurm_lab import (
    LABS,
    VERSIONS,
    LabSpec,
    SlurmLab,
    healthy,
    lab_token,
    missing_prerequisite,
    run_script,
    start,
    unavailable,
)


@pytest.fixture(scope="session", params=VERSIONS)
def slurm_lab(request: pytest.FixtureRequest) -> Iterator[SlurmLab]:
    """Each Slurm lab in turn (22.05, then 24.11): every test that uses it runs once per lab, and pytest
    keeps a lab for all of its tests before it moves to the next, so each starts once per session."""
    with lab_session(LABS[request.param]) as lab:
        yield lab


@pytest.fixture(scope="session")
def slurm_lab_2205() -> Iterator[SlurmLab]:
    """The Slurm 22.05 lab alone, for a test one lab is enough for (Ray through the placement loop: real Ray
    runs on both labs in ``test_slurm_ray.py`` and the Slurm fault matrix)."""
    with lab_session(LABS["22.05"]) as lab:
        yield lab


@contextmanager
def lab_session(spec: LabSpec) -> Iterator[SlurmLab]:
    """The lab of ``spec``, healthy, for as long as the block lasts; started here if need be."""
    problem = missing_prerequisite(spec)
    if problem:
        unavailable(f"Slurm {spec.version}: {problem}")
    lab = spec.lab
    lab.mkdir(parents=True, exist_ok=True)
    with open(lab / ".qm-start.lock", "a") as start_lock, open(lab / ".qm-users.lock", "a") as users:
        fcntl.flock(start_lock, fcntl.LOCK_EX)
        try:
            if not healthy(spec):
                with open(lab / "qm-fixture.log", "a") as log:
                    attempt = log.tell()
                    try:
                        seconds = start(spec, log)
                    except (subprocess.CalledProcessError, subprocess.TimeoutExpired) as exc:
                        run_script(spec, "stop.sh", log)  # leave no half-started lab behind
                        log.flush()
                        with open(lab / "qm-fixture.log") as written:
                            written.seek(attempt)
                            output = written.read()[-1000:]
                        unavailable(f"Slurm {spec.version}: {exc}; its output ({lab / 'qm-fixture.log'}):\n{output}")
                    log.write(f"--- Slurm {spec.version} lab ready in {seconds:.2f} s\n")
            fcntl.flock(users, fcntl.LOCK_SH)  # taken while starts are serialized: no stop can slip in
        finally:
            fcntl.flock(start_lock, fcntl.LOCK_UN)
        yield SlurmLab(spec, lab_token(spec))
        fcntl.flock(start_lock, fcntl.LOCK_EX)
        try:
            fcntl.flock(users, fcntl.LOCK_UN)
            try:
                fcntl.flock(users, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                return  # another session still uses the lab; the last one out stops it
            if spec.started_by_tests.exists():
                spec.started_by_tests.unlink()
                with open(lab / "qm-fixture.log", "a") as log:
                    run_script(spec, "stop.sh", log)
        finally:
            fcntl.flock(users, fcntl.LOCK_UN)
            fcntl.flock(start_lock, fcntl.LOCK_UN)
