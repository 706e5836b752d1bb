"""``qm`` for arrays and pipelines against a real server: an array from a job file or ``--array``, a pipeline
YAML file, ``qm array show|cancel|requeue``, ``qm list --array``; the server's refusals on stderr."""

from __future__ import annotations

from pathlib import Path

import pytest

from scheduler.models import Dependency, Job, JobArray
from tests.scheduler.conftest import Fleet
from tests.scheduler.test_cli import JOB, job_file, qm, server  # noqa: F401 - the live server fixture

pytestmark = pytest.mark.django_db(transaction=True)

PIPELINE = """\
steps:
  - name: preprocess
    job: {team: vision, name: pre, time_limit: 1h, image: "ghcr.io/lab/pre:1"}
  - name: train
    after: [preprocess]
    array: {grid: {lr: [0.1, 0.01]}, max_running: 1}
    job: {team: vision, name: train, time_limit: 2h, image: "ghcr.io/lab/train:1"}
  - name: evaluate
    after: [{step: train, kind: after_any}]
    on_dependency_failure: hold
    job: {team: vision, name: eval, time_limit: 1h, image: "ghcr.io/lab/eval:1"}
"""


def test_an_array_is_submitted_shown_requeued_and_cancelled(
    server: Fleet,  # noqa: F811
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    status, out, err = qm(capsys, "submit", job_file(tmp_path), "--array", "0-4", "--max-running", "2")
    assert status == 0, err
    made = JobArray.objects.get()
    assert out == f"Submitted array {made.pk} (train): 5 tasks, at most 2 at once.\n"
    Job.objects.filter(array=made, array_index=3).update(state=Job.State.FAILED, message="Exit code 1.")
    status, out, _ = qm(capsys, "array", "show", str(made.pk))
    assert status == 0
    lines = out.splitlines()
    # The submission woke the loop (tasks run eagerly here): no more than two placed, as the limit allows (none,
    # if another test's cycle held the placement lock just then).
    done, _, counted = lines[1].strip().partition(": ")
    counts = {state: int(n) for state, n in (part.split() for part in counted.split(", "))}
    assert (done, counts["failed"], sum(counts.values())) == ("1 of 5 done", 1, 5)
    assert counts.get("placing", 0) + counts.get("running", 0) <= 2
    assert lines[3].split()[:3] == ["3", str(Job.objects.get(array=made, array_index=3).pk), "failed"]
    status, out, _ = qm(capsys, "list", "--array", str(made.pk), "--state", "failed")
    assert status == 0
    assert len(out.splitlines()) == 2  # the header and the failed task
    assert qm(capsys, "array", "requeue", str(made.pk))[1] == f"Requeued 1 task of array {made.pk}.\n"
    assert qm(capsys, "array", "cancel", str(made.pk), "--reason", "enough")[1] == (
        f"Cancelled 5 tasks of array {made.pk}.\n"
    )
    status, _, err = qm(capsys, "array", "cancel", str(made.pk))
    assert status != 0
    assert "nothing to cancel" in err


def test_a_pipeline_file_and_a_bad_array(
    server: Fleet,  # noqa: F811
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    status, out, err = qm(capsys, "submit", job_file(tmp_path, PIPELINE, "pipeline.yaml"))
    assert status == 0, err
    assert out.startswith("Submitted a pipeline of 3 steps (preprocess: job ")
    evaluate = Job.objects.get(name="eval")
    assert evaluate.on_dependency_failure == "hold"
    assert Dependency.objects.get(job=evaluate).kind == "after_any"
    status, _, err = qm(capsys, "submit", job_file(tmp_path, JOB + "array: 9-1\n", "bad.yaml"))
    assert status != 0
    assert "range" in err
    assert "goes nowhere" in err
