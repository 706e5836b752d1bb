"""A job's states, the moves between them and the sets the rest of the code asks about (docs/architecture.md
§Job states).

    pending -> admitted -> placing -> running -> succeeded | failed | cancelled
    running/placing/admitted -> preempting -> requeued          (graceful preemption)
    failed -> requeued                                          (retry policy, resume from checkpoint)
    requeued -> running                                         (failed over, then reattached to the old copy)

Plain definitions, imported by the model (``Job.State``) and by ``actions/lifecycle.py``, which makes the moves.
"""

from __future__ import annotations

from django.db import models


class JobState(models.TextChoices):
    PENDING = "pending", "Pending"
    ADMITTED = "admitted", "Admitted"  # the engine placed it; not yet handed to the cluster
    PLACING = "placing", "Placing"  # handed to the cluster, not running yet
    RUNNING = "running", "Running"
    PREEMPTING = "preempting", "Preempting"  # told to checkpoint and stop, within its grace period
    REQUEUED = "requeued", "Requeued"  # waiting to run again (after preemption or a failure)
    SUCCEEDED = "succeeded", "Succeeded"
    FAILED = "failed", "Failed"
    CANCELLED = "cancelled", "Cancelled"


S = JobState

TRANSITIONS: dict[str, frozenset[str]] = {
    S.PENDING: frozenset({S.ADMITTED, S.CANCELLED, S.FAILED}),
    S.REQUEUED: frozenset({S.ADMITTED, S.RUNNING, S.CANCELLED, S.FAILED}),  # running: reattached
    S.ADMITTED: frozenset({S.PLACING, S.RUNNING, S.PREEMPTING, S.REQUEUED, S.FAILED, S.CANCELLED}),
    S.PLACING: frozenset({S.RUNNING, S.PREEMPTING, S.REQUEUED, S.SUCCEEDED, S.FAILED, S.CANCELLED}),
    S.RUNNING: frozenset({S.PREEMPTING, S.REQUEUED, S.SUCCEEDED, S.FAILED, S.CANCELLED}),
    S.PREEMPTING: frozenset({S.REQUEUED, S.SUCCEEDED, S.FAILED, S.CANCELLED}),
    S.FAILED: frozenset({S.REQUEUED}),
    S.SUCCEEDED: frozenset(),
    S.CANCELLED: frozenset(),
}

#: Waiting to be placed: what the engine sees as pending.
WAITING = frozenset({S.PENDING, S.REQUEUED})
#: Holding capacity on a cluster: what the engine sees as running.
PLACED = frozenset({S.ADMITTED, S.PLACING, S.RUNNING, S.PREEMPTING})
ACTIVE = WAITING | PLACED
#: No move leads out (a failed job may still be requeued by the retry policy in the same step).
FINAL = frozenset({S.SUCCEEDED, S.FAILED, S.CANCELLED})
