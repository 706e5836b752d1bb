"""Fixtures of the cluster tests: the Slurm lab, started once however many xdist workers ask.

Workers serialize on an exclusive ``flock`` of ``$LAB/.qm-start.lock``: the first finds no healthy lab and
starts one, the others find it healthy and reuse it. While a session uses the lab it holds a shared lock
on ``$LAB/.qm-users.lock``; at its end it stops the lab only if it can then take that lock exclusively (no
other session is using it) and the lab was started by a test session, never one started by hand.
"""

from __future__ import annotations

import fcntl
import subprocess
from collections.abc import Iterator

import pytest

from tests.clusters.slurm_lab import (
    ENDPOINT,
    LAB,
    STARTED_BY_TESTS,
    SlurmLab,
    healthy,
    lab_token,
    missing_prerequisite,
    run_script,
    start,
    unavailable,
)


@pytest.fixture(scope="session")
def slurm_lab() -> Iterator[SlurmLab]:
    problem = missing_prerequisite()
    if problem:
        unavailable(problem)
    LAB.mkdir(parents=True, exist_ok=True)
    with open(LAB / ".qm-start.lock", "a") as start_lock, open(LAB / ".qm-users.lock", "a") as users:
        fcntl.flock(start_lock, fcntl.LOCK_EX)
        try:
            if not healthy():
                with open(LAB / "qm-fixture.log", "a") as log:
                    attempt = log.tell()
                    try:
                        seconds = start(log)
                    except (subprocess.CalledProcessError, subprocess.TimeoutExpired) as exc:
                        run_script("stop.sh", log)  # leave no half-started lab behind
                        log.flush()
                        with open(LAB / "qm-fixture.log") as written:
                            written.seek(attempt)
                            output = written.read()[-1000:]
                        unavailable(f"{exc}; its output ({LAB / 'qm-fixture.log'}):\n{output}")
                    log.write(f"--- lab ready in {seconds:.2f} s\n")
            fcntl.flock(users, fcntl.LOCK_SH)  # taken while starts are serialized: no stop can slip in
        finally:
            fcntl.flock(start_lock, fcntl.LOCK_UN)
        yield SlurmLab(LAB, ENDPOINT, lab_token())
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
                    run_script("stop.sh", log)
        finally:
            fcntl.flock(users, fcntl.LOCK_UN)
            fcntl.flock(start_lock, fcntl.LOCK_UN)
