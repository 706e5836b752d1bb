"""Builders for the what-if tests: a cluster of one flavor, and a job history of jobs and attempts."""

from __future__ import annotations

from datetime import datetime, timedelta

from django.contrib.auth.models import User
from django.utils import timezone

from clusters.models import AcceleratorType, Cluster, Node
from governance.models import PriorityTier, Queue
from scheduler.models import Attempt, Job
from tenancy.models import Organization, Team

H100 = "H100-SXM-80GB"


def cluster(
    org: Organization, slug: str = "gpu", *, nodes: int = 2, accelerators: int = 8, flavor: str = H100
) -> tuple[Cluster, AcceleratorType]:
    """A healthy cluster of ``nodes`` nodes of ``accelerators`` accelerators of ``flavor`` each."""
    row = Cluster.objects.create(
        organization=org,
        name=slug,
        slug=slug,
        kind="simulated",
        endpoint=f"sim://{slug}",
        region="eu-west",
        levels=["rack"],
        status=Cluster.Status.HEALTHY,
    )
    kind, _ = AcceleratorType.objects.get_or_create(organization=org, name=flavor)
    for i in range(nodes):
        Node.objects.create(
            cluster=row,
            name=f"n{i:02d}",
            accelerator=kind,
            accelerators=accelerators,
            accelerators_allocatable=accelerators,
            cpu=64_000,
            cpu_allocatable=64_000,
            memory=512 * 1024,
            memory_allocatable=512 * 1024,
            topology={"rack": f"r{i // 4}"},
        )
    return row, kind


def tier(org: Organization) -> PriorityTier:
    found, _ = PriorityTier.objects.get_or_create(
        organization=org, name="normal", defaults={"value": 50, "is_default": True}
    )
    return found


def job(
    team: Team,
    user: User,
    submitted: datetime,
    *,
    ran: float | None = 7200.0,
    wait: float = 0.0,
    accelerators: int = 8,
    workers: int = 1,
    state: str = Job.State.SUCCEEDED,
    where: Cluster | None = None,
    time_limit: int = 4 * 3600,
    accelerator_types: list[str] | None = None,
) -> Job:
    """A job submitted at ``submitted`` that, unless ``ran`` is None, ran ``ran`` seconds after ``wait``."""
    row = Job.objects.create(
        team=team,
        queue=Queue.objects.get(team=team, project=None),
        submitted_by=user,
        name="history",
        accelerators=accelerators,
        workers=workers,
        time_limit=time_limit,
        tier=tier(team.organization),
        state=state,
        state_changed_at=timezone.now(),
        submitted_at=submitted,
        accelerator_types=accelerator_types or [],
    )
    if ran is not None:
        assert where is not None
        start = submitted + timedelta(seconds=wait)
        Attempt.objects.create(
            job=row,
            number=1,
            cluster=where,
            flavor=H100,
            admitted_at=start,
            started_at=start,
            ended_at=start + timedelta(seconds=ran),
            outcome=Attempt.Outcome.SUCCEEDED,
        )
    return row


def crowded(team: Team, user: User, where: Cluster, *, jobs: int = 48, every: float = 1800.0) -> list[Job]:
    """A job of 8 accelerators that runs 2 hours every ``every`` seconds over the last day: four times what
    two 8-accelerator nodes can serve."""
    now = timezone.now()
    first = now - timedelta(seconds=jobs * every + 3600)
    return [job(team, user, first + timedelta(seconds=i * every), where=where) for i in range(jobs)]
