"""The demo's background work: jobs that come and go, and now and then a node that falls ill or is drained,
so a demo shows placement, backfill, preemption, health checks and drains rather than a still fleet.

``manage.py demo_background`` (a child of ``manage.py demo``) calls ``tick`` every ``--interval`` seconds.
Each tick, through the same actions people use:

1. **Jobs.** While the fleet's accelerators in use (every placement, as the node pages count them) plus what
   the background jobs waiting for the fleet ask for are under ``LOW`` of the fleet, it submits jobs until they
   reach it (at most ``PER_TICK``); between ``LOW`` and ``HIGH`` one at a time, on a coin toss; at ``HIGH``
   or over, none, nor while ``MAX_WAITING`` background jobs wait. The jobs (``RECIPES``) are submitted by
   three background researchers, one per team, with ``submit_job``: mixed sizes and tiers, preemptible or
   not, time limits of minutes, and each runs for a share of its limit (the simulated cluster reads
   ``SIM_RUN_SECONDS``), so backfill has gaps to fill. The placement loop places them; the simulated
   clusters finish them.
2. **Health.** With chance ``SICK_CHANCE`` per tick, when no node is ill, one node that runs a background job
   reports a failing GPU check (the simulated cluster's ``unhealthy`` fault) for ``SICK_SECONDS``: the health
   round auto-drains it, its jobs move, and once the check passes again the policy resumes it.
3. **Drains.** With the rarer ``DRAIN_CHANCE``, when no demo drain is open, the demo admin drains a busy node
   for a firmware update (``clusters.actions.drain_node``) and resumes it ``DRAIN_SECONDS`` later.

It is bounded: at most ``PER_TICK`` submissions a tick (a few a minute), never past ``HIGH`` of the fleet, one
ill node and one drain at a time. Choices come from the ``random.Random`` it is given, so a test replays
them.
"""

from __future__ import annotations

import datetime as dt
import random
from dataclasses import dataclass, field
from typing import Any

from django.contrib.auth import get_user_model
from django.contrib.auth.models import User
from django.core.exceptions import ValidationError
from django.db.models import F, Q, Sum

from clusters import actions as cluster_actions
from clusters import occupancy
from clusters.actions import sync
from clusters.backends.simulated.backend import RUN_SECONDS_ENV, SimulatedBackend
from clusters.models import OPEN_DRAINS, Cluster, Drain, Node
from governance.models import PriorityTier
from scheduler import actions, submission
from scheduler.engine.model import PendingReason
from scheduler.models import Assignment, Attempt, Job
from scheduler.states import WAITING
from tenancy.models import Membership, Organization, Team
from tenancy.scoping import Role

from .jobs import A100, GIB, H100

#: The share of the fleet's accelerators the background keeps in use: it fills to ``LOW`` quickly, then
#: drifts between ``LOW`` and ``HIGH``.
LOW, HIGH = 0.65, 0.85
PER_TICK = 6
MAX_WAITING = 6
SICK_CHANCE, SICK_SECONDS = 0.04, 240
DRAIN_CHANCE, DRAIN_SECONDS = 0.015, 300
DRAIN_REASON = "Firmware update (demo)"
SICK_MESSAGE = "GPU fell off the bus (simulated XID 79)"
ADMIN = "adam"
#: Reasons a job waits for the fleet itself (or is not yet looked at): what it asks for counts as in use.
FOR_FLEET = (
    "",
    PendingReason.CAPACITY,
    PendingReason.RESERVED,
    PendingReason.WAITING_FOR_PREEMPTION,
    PendingReason.BACKFILL_BLOCKED,
    PendingReason.NOT_CONSIDERED,
    PendingReason.TOPOLOGY,
)

#: The background researchers: username -> (full name, team).
RESEARCHERS = {
    "noah": ("Noah Berg", "vision"),
    "mia": ("Mia Santos", "robotics"),
    "kai": ("Kai Tanaka", "language"),
}


@dataclass(frozen=True)
class Recipe:
    """One kind of background job; its time limit is drawn from ``minutes`` and it runs a share of it."""

    name: str
    user: str
    minutes: tuple[int, int]
    tier: str
    fields: dict[str, Any] = field(default_factory=dict)


RECIPES = (
    Recipe("vit-finetune", "noah", (6, 14), "normal", {"accelerator_types": [H100], "accelerators": 8}),
    Recipe(
        "detr-ablation",
        "noah",
        (8, 16),
        "high",
        {"accelerator_types": [H100], "accelerators": 8, "workers": 2, "topology_level": "rack"},
    ),
    Recipe(
        "eval-notebook",
        "noah",
        (5, 12),
        "spot",
        {"accelerator_types": [A100], "accelerators": 1, "accelerator_milli": 250, "memory": 16 * GIB},
    ),
    Recipe("policy-eval", "mia", (4, 10), "spot", {"accelerator_types": [A100], "accelerators": 4}),
    Recipe(
        "grasp-gang",
        "mia",
        (8, 15),
        "normal",
        {"accelerator_types": [H100], "accelerators": 8, "workers": 12, "topology_level": "ib_block"},
    ),
    Recipe("sim-rollouts", "mia", (3, 8), "spot", {"accelerators": 0, "workers": 2, "cpu": 16_000}),
    Recipe(
        "llm-pretrain",
        "kai",
        (12, 20),
        "production",
        {
            "accelerator_types": [H100],
            "accelerators": 8,
            "workers": 16,
            "topology_level": "ib_block",
            "preemptible": False,
        },
    ),
    Recipe("sft-sweep", "kai", (5, 12), "normal", {"accelerator_types": [A100], "accelerators": 8, "workers": 2}),
    Recipe("tokenizer-bench", "kai", (3, 6), "spot", {"accelerator_types": [H100], "accelerators": 2}),
    Recipe("jax-v5p-probe", "kai", (6, 12), "normal", {"tpu_type": "v5p-32"}),
)
#: How often each recipe is drawn (small and medium jobs often, the big gangs rarely). The big gangs want
#: half an InfiniBand block each: on a busy fleet the production one preempts, the normal one waits with a
#: reservation that smaller jobs backfill around.
WEIGHTS = (6, 3, 4, 5, 2, 3, 2, 3, 4, 2)


@dataclass
class TickResult:
    submitted: list[Job] = field(default_factory=list)
    refused: list[str] = field(default_factory=list)
    utilization: float = 0.0
    waiting: int = 0
    sick: str = ""  # the node made ill this tick
    healed: str = ""
    drained: str = ""
    resumed: str = ""

    def __str__(self) -> str:
        parts = [f"{100 * self.utilization:.0f}% in use", f"{self.waiting} waiting"]
        if self.submitted:
            parts.append("submitted " + ", ".join(j.name for j in self.submitted))
        if self.refused:
            parts.append("refused: " + " | ".join(self.refused))
        for what in ("sick", "healed", "drained", "resumed"):
            if getattr(self, what):
                parts.append(f"{what} {getattr(self, what)}")
        return "; ".join(parts)


def seed_researchers(org: Organization) -> dict[str, User]:
    """The background researchers, one per team (idempotent). They never sign in: no usable password."""
    users = {}
    teams = {team.slug: team for team in Team.objects.filter(organization=org)}
    for username, (full_name, team) in RESEARCHERS.items():
        first, last = full_name.split(" ", 1)
        user, created = get_user_model().objects.get_or_create(
            username=username,
            defaults={"first_name": first, "last_name": last, "email": f"{username}@demo.example"},
        )
        if created:
            user.set_unusable_password()
            user.save(update_fields=["password"])
        Membership.objects.get_or_create(user=user, organization=org, team=teams[team], role=Role.RESEARCHER)
        users[username] = user
    return users


def _fleet(org: Organization) -> Q:
    return Q(cluster__organization=org, cluster__kind="simulated", present=True, accelerators__gt=0)


def utilization(org: Organization) -> tuple[int, int]:
    """(accelerators in use, accelerators) over the organization's simulated fleet, every placement counted."""
    where = _fleet(org)
    ours = occupancy.held(where)
    used = total = 0
    for pk, reported, accelerators in Node.objects.filter(where).values_list("pk", "accelerators_used", "accelerators"):
        used += occupancy.in_use(reported, ours.get(pk, occupancy.NOTHING).accelerators)
        total += accelerators
    return used, total


def background_jobs(org: Organization) -> Any:
    return Job.objects.filter(team__organization=org, submitted_by__username__in=list(RESEARCHERS))


def submit_one(org: Organization, rng: random.Random, users: dict[str, User]) -> Job:
    """Submit one background job drawn from ``RECIPES`` through ``submit_job``."""
    recipe = rng.choices(RECIPES, weights=WEIGHTS)[0]
    user = users[recipe.user]
    team = actions.teams_for_submission(user)[0]
    limit = rng.randint(*recipe.minutes) * 60
    runs = int(limit * rng.uniform(0.4, 0.95))
    tier = PriorityTier.objects.filter(organization=org, name=recipe.tier).first()
    fields = {"cpu": 8_000, "memory": 64 * GIB, **recipe.fields}
    if "tpu_type" not in fields and fields.get("accelerators", 1) > 0:
        fields["cpu"] = 4_000 * int(fields.get("accelerators", 1))
    request = submission.JobRequest(
        team=team,
        name=f"{recipe.name}-{rng.randrange(16**4):04x}",
        time_limit=limit,
        tier=tier,
        image="ghcr.io/demo/background:1.0",
        command=["python", "-m", recipe.name.replace("-", "_")],
        env={RUN_SECONDS_ENV: str(runs)},
        max_retries=1,
        **fields,
    )
    job, _ = actions.submit_job(user, request)
    return job


def _simulated(org: Organization) -> list[tuple[Cluster, SimulatedBackend]]:
    out = []
    for cluster in Cluster.objects.filter(organization=org, kind="simulated").order_by("pk"):
        backend = sync.backend_for(cluster)
        if isinstance(backend, SimulatedBackend):
            out.append((cluster, backend))
    return out


def _busy_node(org: Organization, rng: random.Random) -> Node | None:
    """A schedulable, healthy node that runs a background job now, drawn at random; None if there is none."""
    running = background_jobs(org).filter(state=Job.State.RUNNING)
    held = Assignment.objects.filter(attempt__outcome=Attempt.Outcome.ACTIVE, attempt__job__in=running)
    nodes = list(
        Node.objects.filter(_fleet(org), state=Node.State.SCHEDULABLE, healthy=True, pk__in=held.values("node_id"))
        .select_related("cluster")
        .order_by("pk")
    )
    return rng.choice(nodes) if nodes else None


def health_events(org: Organization, now: dt.datetime, rng: random.Random, result: TickResult) -> None:
    """Heal a node whose illness is over; now and then make one busy node ill (one at a time)."""
    ill = False
    for _cluster, backend in _simulated(org):
        sick = backend.faults().get("unhealthy")
        if sick is None:
            continue
        if float(sick.get("until") or 0) <= now.timestamp():
            backend.clear("unhealthy")
            result.healed = str(sick.get("node", ""))
        else:
            ill = True
    if ill or rng.random() >= SICK_CHANCE:
        return
    node = _busy_node(org, rng)
    if node is None:
        return
    simulated = sync.backend_for(node.cluster)
    if isinstance(simulated, SimulatedBackend):
        until = now.timestamp() + SICK_SECONDS
        simulated.inject("unhealthy", node=node.name, check="gpu", message=SICK_MESSAGE, until=until)
        result.sick = node.name


def drains(org: Organization, now: dt.datetime, rng: random.Random, result: TickResult) -> None:
    """Resume the demo's drain once it is over; rarely, drain a busy node (one drain at a time)."""
    admin = get_user_model().objects.filter(username=ADMIN).first()
    if admin is None:
        return
    open_drains = Drain.objects.filter(
        node__cluster__organization=org, reason=DRAIN_REASON, requested_by=admin, state__in=OPEN_DRAINS
    ).select_related("node")
    for drain in open_drains:
        if drain.created_at <= now - dt.timedelta(seconds=DRAIN_SECONDS):
            cluster_actions.resume_node(admin, drain.node, "Firmware updated (demo)")
            result.resumed = drain.node.name
    if open_drains.exists() or rng.random() >= DRAIN_CHANCE:
        return
    node = _busy_node(org, rng)
    if node is not None:
        cluster_actions.drain_node(admin, node, DRAIN_REASON, grace_seconds=60)
        result.drained = node.name


def tick(org: Organization, now: dt.datetime, rng: random.Random) -> TickResult:
    """One round of the background work (the module docstring): submissions, then health events and drains."""
    result = TickResult()
    users = seed_researchers(org)
    used, total = utilization(org)
    waiting = background_jobs(org).filter(state__in=WAITING)
    # What waits for the fleet (not for its queue's quota, a budget or a limit) will soon hold it.
    for_fleet = waiting.filter(pending_reason__in=FOR_FLEET)
    asked = for_fleet.aggregate(n=Sum(F("accelerators") * F("workers")))["n"] or 0
    result.utilization = used / total if total else 0.0
    result.waiting = waiting.count()
    # Under LOW: jobs until what runs and waits reaches it (at most PER_TICK); under HIGH, one now and then.
    wanted = LOW * total - used - asked if total else 0
    tries = PER_TICK if wanted > 0 else (1 if used + asked < HIGH * total and rng.random() < 0.5 else 0)
    for _ in range(max(0, min(tries, MAX_WAITING - result.waiting))):
        try:
            job = submit_one(org, rng, users)
        except ValidationError as refused:  # a budget or limit said no: said, and tried again next tick
            result.refused.append("; ".join(refused.messages))
            continue
        result.submitted.append(job)
        wanted -= job.accelerators * job.workers
        if wanted <= 0:
            break
    health_events(org, now, rng, result)
    drains(org, now, rng, result)
    return result
