"""Kueue as a partner (docs/kueue.md): which LocalQueue a job goes to, and what Kueue's ``Workload`` says of it.
Pure; no network.

On a cluster in Kueue mode Quartermaster chooses the cluster and the LocalQueue; Kueue chooses when the job
starts and on which nodes (its ClusterQueue's quota, flavors and topology-aware scheduling). Kueue keeps one
``Workload`` (``kueue.x-k8s.io/v1beta1``) per Job or RayJob it manages, owned by it and labelled
``kueue.x-k8s.io/job-uid`` with the owner's uid, and writes its decisions there as conditions
(``apis/kueue/v1beta1/workload_types.go`` in kubernetes-sigs/kueue):

- ``QuotaReserved`` False: waiting; its message is Kueue's reason ("LocalQueue lq-a doesn't exist",
  "couldn't assign flavors to pod set main: insufficient unused quota ...");
- ``QuotaReserved`` and ``Admitted`` True, ``status.admission`` set: admitted (Kueue unsuspends the job);
- ``Evicted`` True with a reason (``Preempted``, ``PodsReadyTimeout``, ``AdmissionCheck``,
  ``ClusterQueueStopped``, ``LocalQueueStopped``, ``NodeFailures``, ``Deactivated``; ``InactiveWorkload``
  in Kueue before 0.10): Kueue suspended the job again and would requeue it itself. Quartermaster reads that
  as *pending again, preempted* (``Failure.PREEMPTED``): the placement loop takes the job back, deletes it
  there and places it anew (no retry spent), so Kueue and Quartermaster never both requeue it. A deactivated
  Workload (``spec.active`` false: an admin, or Kueue's requeuing limit) will not run again: *cancelled*;
- ``Finished`` True: the job ended (its own status says how).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from clusters.backends.base import Failure, InvalidJob, JobSpec, JobState

GROUP, VERSION = "kueue.x-k8s.io", "v1beta1"
WORKLOADS = "workloads"
#: Kueue's label on a Workload: the uid of the Job (or RayJob) it stands for.
JOB_UID_LABEL = "kueue.x-k8s.io/job-uid"

#: Eviction reasons after which the job will not come back on its own here: it was deactivated
#: (``spec.active`` false, by an admin or after Kueue's requeuing limit). Quartermaster treats the job as
#: stopped by the cluster. Every other eviction is a preemption: requeued by Quartermaster, no retry spent.
DEACTIVATED = frozenset({"Deactivated", "InactiveWorkload"})


def local_queue(spec: JobSpec, options: Mapping[str, Any]) -> str:
    """The LocalQueue for ``spec`` on a cluster in Kueue mode: the one the job names (``JobSpec.queue``), else the
    one ``options["local_queues"]`` maps its Quartermaster queue to, else ``options["local_queue"]``;
    ``InvalidJob`` when there is none (the job may still run on another cluster)."""
    mapped = options.get("local_queues") or {}
    if not isinstance(mapped, Mapping):
        raise InvalidJob('the cluster option local_queues must map queue names to LocalQueues, {"nlp": "lq-nlp"}')
    chosen = spec.queue or str(mapped.get(spec.team_queue) or "") or str(options.get("local_queue") or "")
    if not chosen:
        raise InvalidJob(
            f"job {spec.id}: the cluster runs Kueue, and neither its option local_queues (for queue "
            f"{spec.team_queue or '(none)'}) nor its option local_queue names a LocalQueue"
        )
    return chosen


@dataclass(frozen=True, slots=True)
class Verdict:
    """What Kueue says of a job: its state for Quartermaster, Kueue's words, a ``Failure`` code."""

    state: JobState
    message: str
    reason: str = ""
    #: Kueue admitted it: the job's own status (its pods) says the rest.
    admitted: bool = False


def verdict(workload: Mapping[str, Any] | None, queue: str) -> Verdict:
    """Kueue's word on a job from its ``Workload`` (as the API server's JSON; None before Kueue made one)."""
    if workload is None:
        return Verdict(JobState.PENDING, f"Kueue: waiting for Kueue to create its Workload (LocalQueue {queue})")
    status = workload.get("status") or {}
    conditions = {c.get("type"): c for c in status.get("conditions") or [] if isinstance(c, Mapping)}

    def true(kind: str) -> Mapping[str, Any] | None:
        condition = conditions.get(kind)
        return condition if condition is not None and condition.get("status") == "True" else None

    if true("Finished"):
        return Verdict(JobState.RUNNING, "Kueue: finished", admitted=True)
    evicted = true("Evicted")
    if evicted is not None and not true("QuotaReserved"):
        why = str(evicted.get("reason") or "")
        words = f"Kueue evicted it ({why}): {evicted.get('message') or 'no reason given'}"
        if why in DEACTIVATED:
            return Verdict(JobState.CANCELLED, words)
        return Verdict(JobState.PENDING, words, Failure.PREEMPTED)
    if true("Admitted") or (true("QuotaReserved") and status.get("admission")):
        cluster_queue = (status.get("admission") or {}).get("clusterQueue", "")
        return Verdict(JobState.RUNNING, f"Kueue: admitted in ClusterQueue {cluster_queue}", admitted=True)
    reserved = conditions.get("QuotaReserved")
    if reserved is not None and reserved.get("message"):
        return Verdict(JobState.PENDING, f"Kueue: {reserved['message']}")
    return Verdict(JobState.PENDING, f"Kueue: waiting for admission in LocalQueue {queue}")


def owned_by(workload: Mapping[str, Any], uid: str) -> bool:
    """Whether ``workload`` stands for the object with ``uid``: Kueue's label, else its owner reference."""
    meta = workload.get("metadata") or {}
    if (meta.get("labels") or {}).get(JOB_UID_LABEL) == uid:
        return True
    return any(owner.get("uid") == uid for owner in meta.get("ownerReferences") or [] if isinstance(owner, Mapping))


__all__ = ["GROUP", "JOB_UID_LABEL", "VERSION", "WORKLOADS", "Verdict", "local_queue", "owned_by", "verdict"]
