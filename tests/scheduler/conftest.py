"""A small fleet to schedule on: the demo organization, simulated H100 clusters, tiers and team queues."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.utils import timezone

from clusters.models import Cluster
from governance.models import PriorityTier
from scheduler import actions, submission
from scheduler.models import Attempt, Job
from scheduler.placement import dispatch, feasibility, follow, loop
from tests.clusters.conftest import slurm_lab  # noqa: F401 - the Slurm lab fixture, for the path on real Slurm
from tests.clusters.factories import simulated_cluster
from tests.conftest import World


@dataclass
class Fleet:
    world: World
    clusters: dict[str, Cluster]
    tiers: dict[str, PriorityTier]
    state_dir: Path
    clock: list[datetime] = field(default_factory=list)

    @property
    def org(self) -> Any:
        return self.world.org

    def user(self, name: str) -> User:
        return self.world.users[name]

    def submit(self, username: str = "alice", team: str | None = None, **fields: Any) -> Job:
        user = self.user(username)
        team_obj = self.world.teams[team] if team else actions.teams_for_submission(user)[0]
        defaults: dict[str, Any] = {
            "name": "train",
            "time_limit": 3600,
            "image": "ghcr.io/lab/train:1",
            "command": ["python", "train.py"],
            "accelerators": 1,
        }
        request = submission.JobRequest(team=team_obj, **{**defaults, **fields})
        job, _ = actions.submit_job(user, request)
        return job

    def cycle(self, at: datetime | None = None) -> loop.CycleReport:
        """One placement cycle, then every admitted attempt dispatched (what the on-commit tasks would do)."""
        report = loop.run_cycle(self.org, at)
        for attempt_id in Attempt.objects.filter(outcome="active", backend_id="").values_list("pk", flat=True):
            dispatch.dispatch(attempt_id, at)
        return report

    def follow(self, at: datetime | None = None) -> None:
        for cluster in self.clusters.values():
            follow.follow(cluster.pk, at)

    def run_for(self, seconds: float) -> None:
        """Let the simulated clusters' jobs run ``seconds`` longer (their clock is the wall clock)."""
        for path in self.state_dir.glob("*.json"):
            if not path.read_text().strip():
                continue
            state = json.loads(path.read_text())
            for job in state["jobs"].values():
                job["submitted"] -= seconds
                if job.get("exits_at") is not None:
                    job["exits_at"] -= seconds
            path.write_text(json.dumps(state))

    def later(self, seconds: float) -> datetime:
        return timezone.now() + timedelta(seconds=seconds)


@pytest.fixture
def fleet(world: World, tmp_path: Path) -> Iterator[Fleet]:
    feasibility.forget(world.org)
    clusters = {
        "east": simulated_cluster(world.org, "east", tmp_path, nodes=4, job_seconds=3600, levels=("ib_block", "rack")),
        "west": simulated_cluster(world.org, "west", tmp_path, nodes=2, job_seconds=3600, levels=("ib_block", "rack")),
    }
    Cluster.objects.filter(slug="west").update(region="us")
    tiers = {
        "high": PriorityTier.objects.create(organization=world.org, name="high", value=100, grace_seconds=60),
        "normal": PriorityTier.objects.create(organization=world.org, name="normal", value=50, is_default=True),
        "urgent": PriorityTier.objects.create(
            organization=world.org, name="urgent", value=1000, preemptible=False, grace_seconds=0
        ),
    }
    tiers["urgent"].teams.set([world.teams["language"]])
    yield Fleet(world, clusters, tiers, tmp_path)
    feasibility.forget(world.org)


def states(*jobs: Job) -> list[str]:
    return [Job.objects.get(pk=j.pk).state for j in jobs]
