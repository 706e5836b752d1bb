"""``manage.py bench_admission``: the placement loop's admission rate on the database, Kueue's test shape.

Kueue's scalability test submits 15,000 workloads of three sizes to 30 ClusterQueues in 5 cohorts and
measures how fast they are admitted. Here: a fresh organization ``bench`` with one simulated H100 cluster
per cohort, 30 team queues spread over the cohorts (each with a nominal share of its cohort's
accelerators and free borrowing inside the cohort), and ``jobs`` submitted through ``submit_job`` (the
same path as the form and the API: validation, the never-fits check, the insert, the event) in three
size classes: small (1 GPU), medium (4 GPUs) and large (2 workers x 8 GPUs). The fleet holds about 20%
more than all of them ask for, so it is the loop, not capacity, that sets the pace. The loop then runs
cycle after cycle (snapshot, engine, apply, pending reasons) until a cycle admits nothing.

Reported: ``admitted_per_second`` (admissions over the loop's wall time), time to admission per size
class (from the start of the loop, when every job was already waiting: the submissions are timed
separately), and per-cycle seconds split into snapshot, engine, apply and pending-reason writes. The
clusters are not told (dispatch is the clusters' pace, not the loop's); everything else is the
production code.
"""

from __future__ import annotations

import random
import statistics
import time
from datetime import datetime
from decimal import Decimal
from typing import Any

from django.contrib.auth import get_user_model
from django.db import transaction
from django.utils import timezone

from clusters.actions import sync
from clusters.models import AcceleratorType, Cluster, Node
from governance.models import Cohort, PriorityTier, Queue, Quota
from scheduler import actions, submission
from scheduler.models import Attempt, Job
from scheduler.placement import feasibility, loop
from tenancy.models import Membership, Organization, Team
from tenancy.scoping import Role

#: (name, workers, accelerators per worker, share of the jobs)
CLASSES = (("small", 1, 1, 0.6), ("medium", 1, 4, 0.3), ("large", 2, 8, 0.1))
GPUS_PER_NODE = 8


def _reset() -> None:
    org = Organization.objects.filter(slug="bench").first()
    if org is None:
        return
    Job.objects.filter(team__organization=org).delete()
    Quota.objects.filter(flavor__organization=org).delete()
    Queue.objects.filter(team__organization=org).delete()
    Cohort.objects.filter(organization=org, parent__isnull=False).delete()
    Cohort.objects.filter(organization=org).delete()
    PriorityTier.objects.filter(organization=org).delete()
    Cluster.objects.filter(organization=org).delete()
    AcceleratorType.objects.filter(organization=org).delete()
    Membership.objects.filter(organization=org).delete()
    Team.objects.filter(organization=org).delete()
    org.delete()


def setup(queues: int, cohorts: int, jobs: int, seed: int) -> tuple[Organization, list[tuple[Team, str]], Any]:
    """The bench organization, its fleet and quotas; returns the teams with their size plan and the user."""
    _reset()
    rng = random.Random(seed)  # noqa: S311 - a reproducible workload, not a secret
    classes = rng.choices([c[0] for c in CLASSES], weights=[c[3] for c in CLASSES], k=jobs)
    per_class = {name: workers * gpus for name, workers, gpus, _ in CLASSES}
    demand = sum(per_class[c] for c in classes)
    nodes_per_cluster = -(-int(demand * 1.2) // (GPUS_PER_NODE * cohorts))

    org = Organization.objects.create(name="Admission bench", slug="bench")
    user, _ = get_user_model().objects.get_or_create(username="bench-researcher")
    PriorityTier.objects.create(organization=org, name="normal", value=50, is_default=True)
    cohort_rows = [Cohort.objects.create(organization=org, name=f"cohort-{c}") for c in range(cohorts)]
    for c in range(cohorts):
        cluster = Cluster.objects.create(
            organization=org,
            name=f"bench-{c}",
            slug=f"bench-{c}",
            kind="simulated",
            endpoint=f"sim://bench-{c}",
            region="eu",
            levels=["ib_block", "rack"],
            options={"profile": "h100-onprem", "nodes": nodes_per_cluster, "seed": c},
        )
        result = sync.sync_cluster(cluster.pk)
        assert result.ok, result.error
    h100 = AcceleratorType.objects.get(organization=org)
    teams = []
    per_cohort = -(-queues // cohorts)
    share = Decimal(nodes_per_cluster * GPUS_PER_NODE * cohorts) / queues
    for q in range(queues):
        team = Team.objects.create(organization=org, name=f"Team {q:02d}", slug=f"team-{q:02d}")
        Membership.objects.create(user=user, organization=org, team=team, role=Role.RESEARCHER)
        queue = Queue.objects.get(team=team, project=None)  # made with the team
        queue.cohort = cohort_rows[q // per_cohort]
        queue.save(update_fields=["cohort"])
        Quota.objects.create(queue=queue, flavor=h100, nominal=share.quantize(Decimal(1)))
        teams.append(team)
    feasibility.forget(org)
    plan = [(teams[i % queues], size) for i, size in enumerate(classes)]
    return org, plan, user


def submit_all(plan: list[tuple[Team, str]], user: Any) -> float:
    shapes = {name: (workers, gpus) for name, workers, gpus, _ in CLASSES}
    started = time.perf_counter()
    for i, (team, size) in enumerate(plan):
        workers, gpus = shapes[size]
        request = submission.JobRequest(
            team=team,
            name=f"{size}-{i}",
            time_limit=3600,
            image="bench:1",
            accelerators=gpus,
            workers=workers,
            cpu=4000,
            memory=16384,
        )
        with transaction.atomic():
            actions.submit_job(user, request)
    return time.perf_counter() - started


def run(queues: int, cohorts: int, jobs: int, seed: int = 1, max_cycles: int = 100) -> dict[str, Any]:
    org, plan, user = setup(queues, cohorts, jobs, seed)
    submit_seconds = submit_all(plan, user)

    cycles: list[dict[str, Any]] = []
    #: A cycle's admissions carry its start time; they are done when its apply commits.
    committed_after: dict[datetime, float] = {}
    wall = time.perf_counter()
    for _ in range(max_cycles):
        now = timezone.now()
        report = loop.run_cycle(org, now, tell_clusters=False)
        committed_after[now] = time.perf_counter() - wall - report.seconds.get("pending", 0.0)
        cycles.append({"admitted": report.admitted, **{k: round(v, 3) for k, v in report.seconds.items()}})
        if report.admitted == 0:
            break
    loop_seconds = time.perf_counter() - wall
    admitted = sum(c["admitted"] for c in cycles)

    by_class: dict[str, list[float]] = {name: [] for name, *_ in CLASSES}
    for name, admitted_at in Attempt.objects.filter(job__team__organization=org).values_list(
        "job__name", "admitted_at"
    ):
        by_class[name.split("-")[0]].append(committed_after[admitted_at])
    waiting = Job.objects.filter(team__organization=org, state__in=["pending", "requeued"]).count()
    return {
        "jobs": jobs,
        "queues": queues,
        "cohorts": cohorts,
        "nodes": Node.objects.filter(cluster__organization=org).count(),
        "submitted_per_second": round(jobs / submit_seconds, 1),
        "submit_seconds": round(submit_seconds, 1),
        "admitted": admitted,
        "still_pending": waiting,
        "loop_seconds": round(loop_seconds, 2),
        "admitted_per_second": round(admitted / loop_seconds, 1) if loop_seconds else None,
        "time_to_admission_s": {name: _summary(values) for name, values in by_class.items()},
        "cycles": cycles,
    }


def _summary(values: list[float]) -> dict[str, float | int]:
    if not values:
        return {"count": 0}
    values.sort()
    return {
        "count": len(values),
        "p50": round(statistics.median(values), 2),
        "p90": round(values[int(0.9 * (len(values) - 1))], 2),
        "max": round(values[-1], 2),
    }


__all__ = ["run"]
