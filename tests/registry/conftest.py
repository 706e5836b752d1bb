"""The registry's tests: the demo organization's teams (vision: alice, researcher, and lena, lead; robotics:
bob), finance (fiona) and an admin (adam), a rival organization (trent), an artifact store and an import root
of their own, and jobs of vision that ended with a checkpoint."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from django.utils import timezone

from registry import actions
from registry.models import Model
from scheduler.models import Checkpoint, Job
from tests.conftest import World
from tests.scheduler.conftest import Fleet, fleet  # noqa: F401 - the fleet fixture, for real jobs


@dataclass
class Store:
    root: Path  # ARTIFACT_ROOT
    imports: Path  # an ARTIFACT_IMPORT_ROOTS directory
    own: Path  # vision's part of it (<imports>/demo/vision): a team publishes its own files only

    def files(self) -> list[Path]:
        """Every file kept in the store (partial writes included)."""
        return sorted(p for p in self.root.rglob("*") if p.is_file())


@pytest.fixture
def store(settings: Any, tmp_path: Path) -> Store:
    settings.ARTIFACT_ROOT = tmp_path / "store"
    imports = tmp_path / "checkpoints"
    imports.mkdir()
    settings.ARTIFACT_IMPORT_ROOTS = [imports]
    own = imports / "demo" / "vision"
    own.mkdir(parents=True)
    return Store(settings.ARTIFACT_ROOT, imports, own)


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def ended_job(on: Fleet, location: str | None, *, state: str = Job.State.SUCCEEDED, user: str = "alice") -> Job:
    """A job of vision (submitted by ``user``) that ended in ``state``, its latest checkpoint at ``location``."""
    job = on.submit(user, team="vision", name="resnet run")
    Job.objects.filter(pk=job.pk).update(state=state, finished_at=timezone.now())
    if location is not None:
        Checkpoint.objects.create(job=job, attempt=1, location="s3://old/step-1", step=1, reported_at=timezone.now())
        Checkpoint.objects.create(job=job, attempt=1, location=location, step=500, reported_at=timezone.now())
    job.refresh_from_db()
    return job


def vision_model(world: World, name: str = "resnet") -> Model:
    return actions.create_model(world.users["alice"], world.teams["vision"], name)
