"""A job's output on Slurm: submitted with ``standard_output``/``standard_error`` in the cluster's ``log_dir``
and read back page by page, on both real labs (each data parser: v0.0.38 on 22.05, v0.0.42 on 24.11), a Ray
job's entrypoint included (on 22.05, whose nodes have the host's Python and Ray)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from clusters.backends.base import BadOffset, JobState, LogsUnavailable, NotFound, Unreachable
from clusters.backends.slurm.backend import SlurmBackend, invalid_options
from tests.clusters.slurm_lab import SlurmLab, mint_token
from tests.clusters.test_slurm_backend import spec, wait_for
from tests.clusters.test_slurm_ray import PROGRAM, RAY_OPTIONS, ended, ray_spec, wait_until
from tests.clusters.test_slurm_ray import ray_venv as ray_venv  # the fixture

SCRIPT = "for i in $(seq 1 200); do echo \"line $i\"; done; echo 'to stderr' >&2; echo 'done: é'; exit 3"


def test_submit_puts_both_streams_in_one_file_of_log_dir_in_each_data_parsers_words() -> None:
    backend = SlurmBackend("http://127.0.0.1:1", {"user": "root", "token": "t"}, {"log_dir": "/shared/logs/"})
    props = backend._job_properties(spec("lab-node1", "true"))
    assert props["standard_output"] == props["standard_error"] == "/shared/logs/qm-%j.out"
    without = SlurmBackend("http://127.0.0.1:1", {"user": "root", "token": "t"}, {})._job_properties(spec("n", "true"))
    assert "standard_output" not in without
    assert "standard_error" not in without


def test_the_admin_forms_take_absolute_directories_only() -> None:
    assert invalid_options({"log_dir": "/shared/logs", "log_mount": "/mnt/hpc/logs"}) == ""
    assert "log_dir is an absolute directory" in invalid_options({"log_dir": "logs"})
    assert "log_mount is an absolute directory" in invalid_options({"log_mount": 3})


def test_the_output_is_read_while_slurmrestd_does_not_answer(tmp_path: Path) -> None:
    """The file is on the shared filesystem: it reads without slurmrestd, only whether the job ended is unknown."""
    (tmp_path / "qm-12.out").write_text("epoch 1\nepoch 2\n")
    token = mint_token(b"k" * 32)
    backend = SlurmBackend(
        "http://127.0.0.1:1", {"user": "root", "token": token}, {"log_dir": str(tmp_path)}, timeout=2
    )
    chunk = backend.logs("12", tail=1)
    assert (chunk.text, chunk.complete) == ("epoch 2\n", False)
    with pytest.raises(Unreachable, match="no output file"):
        backend.logs("13")


def test_no_log_dir_says_what_an_admin_can_do() -> None:
    backend = SlurmBackend("http://127.0.0.1:1", {"user": "root", "token": "t"}, {})
    with pytest.raises(LogsUnavailable, match="no log_dir option"):
        backend.logs("12")


@pytest.mark.slurm
def test_a_jobs_output_is_read_in_pages_from_the_start_from_an_offset_and_as_a_tail(
    slurm_lab: SlurmLab, tmp_path: Path
) -> None:
    (tmp_path / "logs").mkdir()
    backend = slurm_lab.backend(log_dir=str(tmp_path / "logs"), workdir=str(tmp_path))
    job = backend.submit(spec("lab-node1", "bash", "-c", SCRIPT, gpus=0))
    assert isinstance(job, str)
    wait_for(backend, job, JobState.FAILED, seconds=30)
    path = tmp_path / "logs" / f"qm-{job}.out"
    whole = path.read_text()
    assert whole.startswith("line 1\n")
    assert "to stderr\n" in whole
    assert whole.endswith("done: é\n")

    first = backend.logs(job, limit=1000)
    assert first.more
    assert not first.complete
    assert first.text.endswith("\n")
    assert len(first.text) <= 1000
    assert first.source == str(path)
    pages, chunk = [first.text], first
    while chunk.more:
        chunk = backend.logs(job, offset=chunk.next_offset, limit=1000)
        pages.append(chunk.text)
    assert "".join(pages) == whole
    assert chunk.complete
    assert int(chunk.next_offset) == path.stat().st_size

    tail = backend.logs(job, tail=2)
    assert (tail.text, tail.more, tail.complete) == ("to stderr\ndone: é\n", False, True)
    assert backend.logs(job, offset=tail.next_offset).text == ""

    with pytest.raises(NotFound, match="one output file"):
        backend.logs(job, "1")
    with pytest.raises(BadOffset):
        backend.logs(job, offset="1764151200.5~1")
    # The same directory mounted elsewhere on the portal's machine: log_mount.
    elsewhere = slurm_lab.backend(log_dir="/cluster/shared/logs", log_mount=str(tmp_path / "logs"))
    assert elsewhere.logs(job, tail=1).text == "done: é\n"


@pytest.mark.slurm
def test_a_running_job_grows_and_is_complete_once_it_ends(slurm_lab: SlurmLab, tmp_path: Path) -> None:
    backend = slurm_lab.backend(log_dir=str(tmp_path), workdir=str(tmp_path))
    gate = tmp_path / "go"
    script = f"echo started; while [ ! -e {gate} ]; do sleep 0.1; done; echo finished"
    job = backend.submit(spec("lab-node2", "bash", "-c", script, gpus=0))
    assert isinstance(job, str)
    wait_for(backend, job, JobState.RUNNING, seconds=30)
    deadline = time.monotonic() + 20
    while not (chunk := backend.logs(job)).text and time.monotonic() < deadline:
        time.sleep(0.2)
    assert (chunk.text, chunk.complete) == ("started\n", False)
    gate.touch()
    wait_for(backend, job, JobState.SUCCEEDED, seconds=30)
    rest = backend.logs(job, offset=chunk.next_offset)
    assert (rest.text, rest.complete) == ("finished\n", True)


@pytest.mark.slurm
def test_a_job_without_an_output_file_says_where_slurm_writes_it(slurm_lab: SlurmLab, tmp_path: Path) -> None:
    """Submitted before log_dir was set (Slurm's default file in the working directory), read after."""
    job = slurm_lab.backend(workdir=str(tmp_path)).submit(spec("lab-node1", "true", gpus=0))
    assert isinstance(job, str)
    wait_for(slurm_lab.backend(), job, JobState.SUCCEEDED, seconds=30)
    with pytest.raises(LogsUnavailable, match="no output file"):
        slurm_lab.backend(log_dir=str(tmp_path / "logs")).logs(job)
    with pytest.raises(NotFound, match="does not know job 999999"):
        slurm_lab.backend(log_dir=str(tmp_path)).logs("999999")


@pytest.mark.slurm
def test_a_ray_jobs_output_holds_its_entrypoints_and_is_the_heads(
    slurm_lab_2205: SlurmLab, ray_venv: Any, tmp_path: Path
) -> None:
    (tmp_path / "main.py").write_text(PROGRAM)
    backend = slurm_lab_2205.backend(workdir=str(tmp_path), log_dir=str(tmp_path), **RAY_OPTIONS)
    ray = ray_spec(
        f"ray-logs-{time.time_ns()}",
        nodes=("lab-node2", "lab-node3"),
        head_node="lab-node2",
        entrypoint=f"python {tmp_path / 'main.py'} 0",
    )
    job = backend.submit(ray)
    assert isinstance(job, str)
    status = wait_until(backend, job, ended)
    output = backend.logs(job, limit=1 << 20)
    assert status.state is JobState.SUCCEEDED, output.text[-2000:]
    assert "qm-ray-nodes 2 used 2 greeting hello" in output.text
    assert output.complete
    assert backend.logs(job, "head", limit=1 << 20).text == output.text
    with pytest.raises(NotFound, match="or head"):
        backend.logs(job, "0")
