"""The demo's model and service: robotics' ``grasp-policy`` with two stored versions, and the public service
``grasp-policy`` that serves version 1, so the Models and Services pages have something alive after
``make demo`` (docs/services.md, docs/models.md).

The versions are small JSON files (the model server reads their ``scale``), written into the artifact store
through ``registry.actions.publish_upload``, each recorded as coming from one of robotics' finished jobs (the
billing history's, when it was seeded) with evaluation metrics. The service runs ``deploy/model_server.py`` on
the version's bytes (which it fetches with its job token and checks), one to three replicas scaled on requests
per second; on the simulated cluster each replica is a real process on this machine. Its load comes from
``demo/traffic.py``.

Seeding is idempotent: the model, its versions and the service are found by name, and a version's bytes are
the same on every run (so the store keeps them once).
"""

from __future__ import annotations

import io
import json
import random
import sys

from django.conf import settings
from django.contrib.auth import get_user_model

from governance.models import PriorityTier
from registry import actions as registry
from registry.models import Model, ModelVersion
from scheduler.models import Job
from serving import actions as serving
from serving.models import Service
from tenancy.models import Organization, Team

TEAM = "robotics"
MODEL = "grasp-policy"
SERVICE = "grasp-policy"
#: Who publishes and runs them: robotics' researcher.
OWNER = "bob"
#: version: (metrics, notes, the model's ``scale``)
VERSIONS = {
    "1": ({"success_rate": 0.81, "grasps_per_hour": 412.0}, "First policy from the grasp gang.", 1.0),
    "2": ({"success_rate": 0.87, "grasps_per_hour": 455.0}, "Fine-tuned on the warehouse bins.", 1.5),
}
#: The service's scaling: requests per second each replica should take, and the replicas' bounds.
TARGET_RPS, MIN_REPLICAS, MAX_REPLICAS = 1.5, 1, 3
#: What one prediction "computes" in the model server (a sleep), in milliseconds.
LATENCY_MS = 40


def artifact(version: str, scale: float) -> bytes:
    """A version's bytes: the model server's parameters and some weights (about 20 KB, the same every run)."""
    rng = random.Random(f"{MODEL}-{version}")  # noqa: S311 - made-up weights, not a secret
    weights = [round(rng.gauss(0, 0.1), 5) for _ in range(2_000)]
    return json.dumps({"model": MODEL, "version": version, "scale": scale, "weights": weights}).encode()


def seed_model(org: Organization) -> Model:
    """The model and its versions, published by ``OWNER`` from robotics' latest finished jobs (if any)."""
    team = Team.objects.get(organization=org, slug=TEAM)
    owner = get_user_model().objects.get(username=OWNER)
    model = Model.objects.filter(team=team, name=MODEL).first() or registry.create_model(
        owner, team, MODEL, "Grasp policy for the lab's arms: image in, grasp pose out."
    )
    finished = list(
        Job.objects.filter(team=team, state=Job.State.SUCCEEDED).exclude(finished_at=None).order_by("-finished_at")[:2]
    )
    for index, (name, (metrics, notes, scale)) in enumerate(VERSIONS.items()):
        if ModelVersion.objects.filter(model=model, version=name).exists():
            continue
        # The older job for the first version, the newer for the second.
        job = finished[len(finished) - 1 - index] if len(finished) > index else None
        what = registry.Publication(version=name, metrics=metrics, notes=notes)
        stream = io.BytesIO(artifact(name, scale))
        registry.publish_upload(owner, model, stream, f"{MODEL}-{name}.json", what, job=job)
    return model


def model_server_command() -> list[str]:
    """The replica's program: this checkout's model server on the port the replica is given (it fetches the
    version's bytes with the replica's job token, and checks them, before it answers its health check)."""
    server = settings.BASE_DIR / "deploy" / "model_server.py"
    return [sys.executable, str(server), "--host", "127.0.0.1", "--port", "$PORT"]


def seed_service(org: Organization, model: Model) -> Service:
    """The public service serving version 1 (created once; left as people changed it afterwards)."""
    team = Team.objects.get(organization=org, slug=TEAM)
    found: Service | None = Service.objects.filter(team=team, name=SERVICE).first()
    if found is not None:
        return found
    owner = get_user_model().objects.get(username=OWNER)
    # Not preemptible by the background's batch jobs of lower tiers.
    tier = PriorityTier.objects.filter(organization=org, name="high").first()
    created: Service = serving.create_service(
        owner,
        team=team,
        name=SERVICE,
        tier=tier,
        command=model_server_command(),
        env={"MODEL_LATENCY_MS": str(LATENCY_MS), "MODEL_CONCURRENCY": "8"},
        health_path="/health",
        cpu=1000,
        memory=1024,
        model_version=ModelVersion.objects.get(model=model, version="1"),
        min_replicas=MIN_REPLICAS,
        max_replicas=MAX_REPLICAS,
        metric=Service.Metric.RPS,
        target=TARGET_RPS,
        scale_down_window=180,
        public=True,
    )
    return created


def seed_inference(org: Organization) -> Service:
    return seed_service(org, seed_model(org))
