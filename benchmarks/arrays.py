"""``manage.py bench_arrays``: how long an array takes to submit, and what a big array costs the placement loop.

A fresh organization ``bench-arrays`` with one simulated H100 cluster of ``nodes`` nodes (8 GPUs each: far
fewer than the tasks ask for, so nearly all of them stay waiting) and one team. Measured:

- ``submit_seconds``: ``arrays.submit_array`` (the path of the form, the API and ``qm``: validation, the
  never-fits check once, the array, its tasks and their events in bulk, one audit record) for 1,000 and
  10,000 one-GPU tasks;
- ``cycle_seconds``: the placement loop's cycle (``loop.run_cycle``: gates, snapshot, engine, apply, pending
  reasons; the clusters not told) with 10,000 tasks waiting, in three shapes: one array with no limit, one
  array with ``max_running`` 100, and 10,000 separate jobs of the same request (the array's tasks detached
  from it, so exactly the same rows). The first cycle fills the cluster; the figures are the median of the
  next ``cycles`` cycles, the steady state of a long queue, split into its phases.
"""

from __future__ import annotations

import statistics
import time
from typing import Any

from django.contrib.auth import get_user_model
from django.utils import timezone

from clusters.actions import sync
from clusters.models import AcceleratorType, Cluster
from governance.models import PriorityTier, Queue
from scheduler import submission
from scheduler.actions import arrays
from scheduler.models import Job, JobArray
from scheduler.placement import feasibility, loop
from scheduler.sweeps import ArrayRequest
from tenancy.models import AuditLog, Membership, Organization, Team
from tenancy.scoping import Role

SLUG = "bench-arrays"


def _reset() -> None:
    org = Organization.objects.filter(slug=SLUG).first()
    if org is None:
        return
    Job.objects.filter(team__organization=org).delete()
    JobArray.objects.filter(team__organization=org).delete()
    AuditLog.objects.filter(organization=org).delete()
    Queue.objects.filter(team__organization=org).delete()
    PriorityTier.objects.filter(organization=org).delete()
    Cluster.objects.filter(organization=org).delete()
    AcceleratorType.objects.filter(organization=org).delete()
    Membership.objects.filter(organization=org).delete()
    Team.objects.filter(organization=org).delete()
    org.delete()


def setup(nodes: int) -> tuple[Organization, Team, Any]:
    _reset()
    org = Organization.objects.create(name="Arrays bench", slug=SLUG)
    user, _ = get_user_model().objects.get_or_create(username="bench-arrays-researcher")
    PriorityTier.objects.create(organization=org, name="normal", value=50, is_default=True)
    cluster = Cluster.objects.create(
        organization=org,
        name="bench-arrays",
        slug="bench-arrays",
        kind="simulated",
        endpoint="sim://bench-arrays",
        region="eu",
        levels=["ib_block", "rack"],
        options={"profile": "h100-onprem", "nodes": nodes, "seed": 1},
    )
    result = sync.sync_cluster(cluster.pk)
    assert result.ok, result.error
    team = Team.objects.create(organization=org, name="Sweepers", slug="sweepers")
    Membership.objects.create(user=user, organization=org, team=team, role=Role.RESEARCHER)
    feasibility.forget(org)
    return org, team, user


def _request(team: Team, tasks: int, max_running: int | None) -> ArrayRequest:
    job = submission.JobRequest(
        team=team, name=f"sweep-{tasks}", time_limit=3600, image="bench:1", accelerators=1, cpu=4000, memory=16384
    )
    return ArrayRequest(job=job, range=f"0-{tasks - 1}", max_running=max_running)


def _clear(org: Organization) -> None:
    Job.objects.filter(team__organization=org).delete()
    JobArray.objects.filter(team__organization=org).delete()


def _submit(team: Team, user: Any, tasks: int, max_running: int | None = None) -> tuple[JobArray, float]:
    started = time.perf_counter()
    array, _ = arrays.submit_array(user, _request(team, tasks, max_running), wake=False)
    return array, time.perf_counter() - started


def _cycles(org: Organization, cycles: int) -> dict[str, Any]:
    first = loop.run_cycle(org, timezone.now(), tell_clusters=False)
    runs = [loop.run_cycle(org, timezone.now(), tell_clusters=False) for _ in range(cycles)]
    phases = sorted({k for r in runs for k in r.seconds})
    return {
        "first_cycle_admitted": first.admitted,
        "first_cycle_seconds": round(sum(first.seconds.values()), 3),
        "engine_saw_pending": runs[-1].pending,
        "median_cycle_seconds": round(statistics.median(sum(r.seconds.values()) for r in runs), 3),
        "median_phase_seconds": {p: round(statistics.median(r.seconds.get(p, 0.0) for r in runs), 3) for p in phases},
    }


def run(nodes: int = 4, cycles: int = 5, big: int = 10_000, small: int = 1_000) -> dict[str, Any]:
    org, team, user = setup(nodes)
    result: dict[str, Any] = {"nodes": nodes, "gpus": nodes * 8, "submit_seconds": {}, "cycle_seconds": {}}
    for tasks in (small, big):
        _clear(org)
        _, seconds = _submit(team, user, tasks)
        result["submit_seconds"][str(tasks)] = round(seconds, 3)
    # The big array is still there: one array of ``big`` tasks, no limit.
    result["cycle_seconds"][f"one array of {big}, no limit"] = _cycles(org, cycles)
    _clear(org)
    _submit(team, user, big, max_running=100)
    result["cycle_seconds"][f"one array of {big}, at most 100 at once"] = _cycles(org, cycles)
    _clear(org)
    array, _ = _submit(team, user, big)
    Job.objects.filter(array=array).update(array=None, array_index=None)  # the same rows, as separate jobs
    result["cycle_seconds"][f"{big} separate jobs"] = _cycles(org, cycles)
    _reset()
    return result


__all__ = ["run"]
