"""The simulated cluster's state file survives a process that dies while writing it (the chaos tests kill
workers in the middle of a submit): the jobs it held are still there, and the file is still readable."""

from __future__ import annotations

from pathlib import Path

import pytest

from clusters.backends.base import JobSpec
from clusters.backends.simulated.backend import SimulatedBackend


def spec(key: str) -> JobSpec:
    return JobSpec(
        id=key,
        name="train",
        workers=1,
        accelerators_per_worker=1,
        cpu_per_worker=1,
        memory_per_worker=1,
        nodes=(),
        time_limit=60,
        image="img",
        command=("true",),
    )


def test_a_write_that_dies_half_way_leaves_the_previous_state_whole(tmp_path: Path) -> None:
    path = tmp_path / "east.json"
    cluster = SimulatedBackend("east", options={"state_file": str(path)})
    cluster.submit(spec("1-1"))
    cluster.submit(spec("2-1"))

    # The write fails after the file was opened for it, as a killed process's would: here because the new
    # state cannot be serialised, half-way through the jobs.
    with pytest.raises(TypeError), cluster._state(write=True) as state:
        state["jobs"]["3-1"] = {"submitted": object()}

    assert cluster.find("1-1") == "1-1"
    assert cluster.find("2-1") == "2-1"
    assert cluster.find("3-1") is None
    assert sorted(path.parent.glob("*.json")) == [path]
    cluster.submit(spec("3-1"))  # and the cluster goes on
    assert cluster.find("3-1") == "3-1"
