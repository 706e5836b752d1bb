"""Demo governance and jobs: priority tiers, the "research" cohort with the three team queues and their
accelerator quotas, budgets, and a few jobs by alice and bob, so the job pages have something to show after
``make demo``. The demo clusters' prices are billing's price book (``demo/billing.py``).

Seeding is idempotent: tiers, cohort, queues, quotas and budgets are found by name, and each demo job carries
an idempotency key, so submitting it again returns the first.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import timedelta
from decimal import Decimal
from typing import Any

from django.contrib.auth import get_user_model
from django.db import transaction
from django.utils import timezone

from clusters.models import AcceleratorType
from governance.actions import capacity
from governance.models import Budget, CapacityRequest, Cohort, PriorityTier, Quota
from scheduler import actions, submission
from scheduler.models import Job
from scheduler.placement import feasibility
from tenancy.models import Organization, Project, Team

H100, A100, V5P = "H100-SXM-80GB", "A100-SXM-40GB", "v5p"

#: name: (value, preemptible, grace seconds, default, teams allowed (none: every team))
TIERS: dict[str, tuple[int, bool, int, bool, tuple[str, ...]]] = {
    "production": (1000, False, 0, False, ("language",)),
    "high": (100, True, 600, False, ()),
    "normal": (50, True, 300, True, ()),
    "spot": (10, True, 60, False, ()),
}
#: Tiers whose jobs run on spot capacity unless they say otherwise (``PriorityTier.accepts_spot``).
SPOT_TIERS = frozenset({"spot"})
COHORT = "research"
#: Accelerator quotas per team queue: type -> (nominal, borrowing limit). The demo fleet has 512 H100,
#: 256 A100 and 64 v5p chips; the nominal quotas add up to that, and each team may borrow on top.
QUOTAS: dict[str, dict[str, tuple[int, int]]] = {
    "vision": {H100: (160, 96), A100: (96, 64), V5P: (16, 16)},
    "robotics": {H100: (96, 64), A100: (96, 64), V5P: (16, 16)},
    "language": {H100: (256, 128), A100: (64, 32), V5P: (32, 32)},
}
#: Monthly budgets: team slug -> (accelerator-hours, money, hard). Vision's alerts; robotics' holds jobs.
BUDGETS: dict[str, tuple[int | None, int | None, bool]] = {
    "vision": (300_000, 750_000, False),
    "robotics": (None, 400_000, True),
}


@dataclass(frozen=True)
class DemoJob:
    key: str
    user: str
    name: str
    hours: float
    fields: dict[str, Any] = field(default_factory=dict)
    project: str | None = None
    tier: str | None = None


GIB = 1024
JOBS = (
    DemoJob(
        "demo-detr-sweep",
        "alice",
        "detr-sweep-lr3e-4",
        6,
        project="detection",
        fields={
            "accelerator_types": [H100],
            "accelerators": 8,
            "workers": 2,
            "cpu": 64_000,
            "memory": 512 * GIB,
            "topology_level": "rack",
            "image": "ghcr.io/demo/vision-train:2.4",
            "command": ["python", "train.py", "--model", "detr", "--lr", "3e-4"],
            "checkpoint_location": "s3://demo-vision/ckpt/detr-sweep",
            "env": {"WANDB_PROJECT": "detr"},
        },
    ),
    DemoJob(
        "demo-segformer",
        "alice",
        "segformer-finetune",
        3,
        project="segmentation",
        tier="high",
        fields={
            "accelerator_types": [A100, H100],
            "accelerators": 4,
            "cpu": 32_000,
            "memory": 256 * GIB,
            "image": "ghcr.io/demo/vision-train:2.4",
            "command": ["python", "finetune.py", "--arch", "segformer"],
        },
    ),
    DemoJob(
        "demo-notebook",
        "alice",
        "eval-notebook",
        2,
        project="detection",
        fields={
            "accelerator_types": [A100],
            "accelerators": 1,
            "accelerator_milli": 250,
            "cpu": 4_000,
            "memory": 16 * GIB,
            "image": "ghcr.io/demo/notebook:latest",
            "command": ["jupyter", "lab"],
        },
    ),
    DemoJob(
        "demo-tpu-policy",
        "bob",
        "policy-pretrain-v5p",
        12,
        project="manipulation",
        fields={
            "tpu_type": "v5p-32",  # one whole v5p-32 slice: 16 chips on 4 hosts
            "image": "ghcr.io/demo/robotics-jax:0.4",
            "command": ["python", "-m", "policy.pretrain"],
            "checkpoint_location": "gs://demo-robotics/ckpt",
        },
    ),
    DemoJob(
        "demo-sim-rollouts",
        "bob",
        "sim-rollouts",
        1,
        project="manipulation",
        tier="spot",
        fields={
            "accelerators": 0,
            "workers": 4,
            "cpu": 32_000,
            "memory": 64 * GIB,
            "script": "#!/bin/bash\nset -euo pipefail\npython rollouts.py --episodes 10000\n",
        },
    ),
    DemoJob(
        "demo-grasp-gang",
        "bob",
        "grasp-gang-16",
        8,
        project="manipulation",
        fields={
            "accelerator_types": [H100],
            "accelerators": 8,
            "workers": 16,
            "cpu": 96_000,
            "memory": 1024 * GIB,
            "topology_level": "ib_block",
            "image": "ghcr.io/demo/robotics-torch:2.4",
            "command": ["torchrun", "--nnodes", "16", "train_grasp.py"],
        },
    ),
)


@transaction.atomic
def seed_governance(org: Organization) -> None:
    """Tiers, the cohort with the team queues and their quotas, and budgets."""
    teams = {team.slug: team for team in Team.objects.filter(organization=org)}
    for name, (value, preemptible, grace, default, only) in TIERS.items():
        tier, _ = PriorityTier.objects.get_or_create(
            organization=org,
            name=name,
            defaults={
                "value": value,
                "preemptible": preemptible,
                "grace_seconds": grace,
                "is_default": default,
                "accepts_spot": name in SPOT_TIERS,
            },
        )
        if only and not tier.teams.exists():
            tier.teams.set([teams[slug] for slug in only if slug in teams])

    cohort, _ = Cohort.objects.get_or_create(organization=org, name=COHORT)
    types = {t.name: t for t in AcceleratorType.objects.filter(organization=org)}
    for slug, quotas in QUOTAS.items():
        team = teams.get(slug)
        if team is None:
            continue
        queue = actions.queue_for(team, None)
        if queue.cohort_id is None:
            queue.cohort = cohort
            queue.save(update_fields=["cohort"])
        for type_name, (nominal, borrowing) in quotas.items():
            if type_name in types:  # only the types the demo clusters' sync reported
                Quota.objects.get_or_create(
                    queue=queue,
                    flavor=types[type_name],
                    resource=Quota.Resource.ACCELERATORS,
                    defaults={"nominal": Decimal(nominal), "borrowing_limit": Decimal(borrowing)},
                )

    for slug, (hours, amount, hard) in BUDGETS.items():
        if slug in teams:
            Budget.objects.get_or_create(
                team=teams[slug],
                project=None,
                defaults={"accelerator_hours": hours, "amount": amount, "hard": hard, "updated_at": timezone.now()},
            )

    feasibility.forget(org)


def seed_jobs(org: Organization) -> list[Job]:
    """The demo jobs, submitted through ``submit_job`` like any other (a second run returns the first)."""
    users = get_user_model().objects.in_bulk([job.user for job in JOBS], field_name="username")
    tiers = {tier.name: tier for tier in PriorityTier.objects.filter(organization=org)}
    jobs = []
    for demo in JOBS:
        user = users[demo.user]
        team = actions.teams_for_submission(user)[0]
        project = Project.objects.filter(team=team, slug=demo.project).first() if demo.project else None
        request = submission.JobRequest(
            team=team,
            name=demo.name,
            time_limit=int(demo.hours * 3600),
            tier=tiers.get(demo.tier) if demo.tier else None,
            project=project,
            idempotency_key=demo.key,
            **demo.fields,
        )
        job, _ = actions.submit_job(user, request)
        jobs.append(job)
    return jobs


def seed_capacity_requests(org: Organization) -> None:
    """Vision's reservation for a deadline next week, approved by adam (it books nodes of the H100 cluster), and its
    request for more A100 quota until the end of next month, waiting for a decision. Once: a second run keeps them."""
    if CapacityRequest.objects.filter(team__organization=org).exists():
        return
    users = get_user_model().objects.in_bulk(["lena", "adam"], field_name="username")
    vision = Team.objects.filter(organization=org, slug="vision").first()
    if vision is None or len(users) < 2:
        return
    lena, adam = users["lena"], users["adam"]
    start = (timezone.now() + timedelta(days=6)).replace(hour=8, minute=0, second=0, microsecond=0)
    reservation = capacity.ask(
        lena,
        vision,
        kind="reservation",
        flavor=H100,
        accelerators=64,
        starts_at=start,
        ends_at=start + timedelta(days=3),
        reason="CVPR camera-ready: the final ablations on 64 H100s",
    )
    capacity.decide(adam, reservation, approve=True, reason="Deadline agreed at the planning meeting.")
    capacity.ask(
        lena,
        vision,
        kind="quota",
        flavor=A100,
        accelerators=32,
        ends_at=start + timedelta(days=40),
        reason="Two new students until the end of term",
    )


def seed_demo_jobs(org: Organization) -> list[Job]:
    """Everything above, after the demo fleet is seeded and synced (the quotas name its accelerator types)."""
    seed_governance(org)
    seed_capacity_requests(org)
    return seed_jobs(org)
