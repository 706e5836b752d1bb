"""``qm logs`` against a live server (``live_server``) and the simulated fleet: a page, a tail, a worker,
following the output with offsets until the job ends (every line once, in order), the server's errors."""

from __future__ import annotations

from typing import Any

import pytest

from scheduler.models import Job
from tests.scheduler.conftest import Fleet
from tests.scheduler.test_cli import qm, server  # noqa: F401 - the live server fixture, with qm pointed at it

pytestmark = pytest.mark.django_db(transaction=True)


def running(fleet: Fleet, **fields: Any) -> Job:
    job = fleet.submit("alice", **fields)
    fleet.cycle()
    fleet.follow()
    return job


def test_logs_prints_the_output_a_tail_and_a_workers(server: Fleet, capsys: Any) -> None:  # noqa: F811
    job = running(server, workers=2)
    status, out, err = qm(capsys, "logs", str(job.pk))
    assert (status, err) == (0, "")
    assert "worker 0 of 2 started on node" in out
    assert out.endswith("\n")
    status, out, _ = qm(capsys, "logs", str(job.pk), "--tail", "1")
    assert (status, out.count("\n")) == (0, 1)
    status, out, _ = qm(capsys, "logs", str(job.pk), "-w", "1")
    assert "worker 1 of 2 started" in out


def test_follow_prints_every_line_once_until_the_job_ends(server: Fleet, capsys: Any) -> None:  # noqa: F811
    job = running(server)

    def sleep(_seconds: float) -> None:  # the simulated job moves on between polls
        server.run_for(700)
        server.follow()

    status, out, err = qm(capsys, "logs", str(job.pk), "-f", "--interval", "0.1", sleep=sleep)
    assert (status, err) == (0, "")
    lines = out.splitlines()
    progress = [line.split("progress ")[1].split("%")[0] for line in lines if "progress" in line]
    assert progress == [str(p) for p in range(10, 100, 10)]  # each once, in order
    assert lines[-1].endswith("finished: exit code 0 after 3600 s")
    assert Job.objects.get(pk=job.pk).state == Job.State.SUCCEEDED


def test_the_servers_words_on_errors(server: Fleet, capsys: Any) -> None:  # noqa: F811
    job = running(server)
    status, _, err = qm(capsys, "logs", str(job.pk), "-w", "5")
    assert status == 1
    assert "workers 0 to 0" in err
    status, _, err = qm(capsys, "logs", str(job.pk), "--tail", "-3")
    assert status == 2
    assert "tail:" in err
    status, _, err = qm(capsys, "logs", "999999")
    assert status == 1
    assert "No job 999999" in err
