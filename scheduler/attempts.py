"""A job's attempts as people read them: where each stands or why it ended, in words, and how many checkpoints
it reported. Shared by the job page and the API, so both say the same thing."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable

from scheduler.models import Attempt, Checkpoint

#: ``Attempt.reason`` codes in words (the backends' ``Failure`` codes and Quartermaster's own).
REASON_WORDS = {
    "refused": "the cluster refused the job",
    "invalid": "the cluster rejected the job",
    "image_pull": "the image could not be pulled",
    "unschedulable": "its workers could not be scheduled",
    "oom_killed": "a worker ran out of memory",
    "exit_code": "the program exited with an error",
    "node_lost": "a node failed under it",
    "node_failed": "a node failed under it",
    "time_limit": "it reached its time limit",
    "preempted": "it was preempted",
    "drain": "its node was drained",
    "failover": "its cluster stopped answering; it was restarted elsewhere",
    "withdrawn": "withdrawn: an earlier copy was reattached",
    "start_timeout": "it did not start in time",
    "no_capacity": "the cluster had no capacity for it",
}


#: Reasons whose ``Attempt.message`` is the cluster's own words, not a sentence of ours: they get their label.
CLUSTERS_WORDS = frozenset({"refused", "invalid", "image_pull", "no_capacity"})


def reason_words(attempt: Attempt) -> str:
    """Why ``attempt`` ended (or is being stopped), in words: the reason, the cluster's own message and the exit
    code, where known; empty when nothing is known. A message of ours already says why, so it stands alone."""
    parts: list[str] = []
    if attempt.reason and (attempt.reason in CLUSTERS_WORDS or not attempt.message):
        parts.append(REASON_WORDS.get(attempt.reason, attempt.reason.replace("_", " ")))
    elif not attempt.reason and attempt.stop_reason:
        parts.append(Attempt.Stop(attempt.stop_reason).label.lower())
    if attempt.message:
        parts.append(attempt.message)
    if attempt.exit_code is not None and f"code {attempt.exit_code}" not in attempt.message:
        parts.append(f"exit code {attempt.exit_code}")
    text = "; ".join(parts)
    return text[:1].upper() + text[1:]


def state_words(attempt: Attempt) -> str:
    """Where ``attempt`` stands, in a few words: its outcome once ended, else placing, running, being stopped
    or unknown (its cluster does not answer)."""
    if attempt.outcome != Attempt.Outcome.ACTIVE:
        return str(Attempt.Outcome(attempt.outcome).label)
    if attempt.unknown_since is not None:
        return f"Unknown: its cluster has not answered since {attempt.unknown_since:%Y-%m-%d %H:%M} UTC"
    if attempt.stop_reason:
        return f"Stopping ({Attempt.Stop(attempt.stop_reason).label.lower()})"
    if attempt.started_at is not None:
        return "Running"
    if attempt.submitted_at is not None:
        return "Submitted, waiting to start on the cluster"
    return "Placing"


def checkpoint_counts(checkpoints: Iterable[Checkpoint]) -> Counter[int]:
    """Checkpoints kept, by the number of the attempt that reported them."""
    return Counter(c.attempt for c in checkpoints)
