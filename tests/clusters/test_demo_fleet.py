"""The demo fleet: three simulated clusters, seeded idempotently and synced into nodes."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from clusters.models import Cluster, Node
from demo.fleet import DEMO_CLUSTERS, seed_demo_fleet, sync_demo_fleet
from tenancy.models import Organization

pytestmark = pytest.mark.django_db


def test_the_demo_fleet_is_seeded_once_and_synced(settings: Any, tmp_path: Path) -> None:
    settings.VAR_DIR = tmp_path
    org = Organization.objects.create(name="Demo", slug="demo")
    seed_demo_fleet(org)
    seed_demo_fleet(org)
    assert Cluster.objects.filter(organization=org).count() == len(DEMO_CLUSTERS)
    sync_demo_fleet(org)
    assert set(Cluster.objects.values_list("status", flat=True)) == {Cluster.Status.HEALTHY}
    per_cluster = {c.slug: c.nodes.count() for c in Cluster.objects.all()}
    assert per_cluster == {"onprem-h100": 64, "slurm-a100": 32, "tpu-v5p": 4}
    # The TPU cluster's nodes are whole v5p-32 slices, as the TPU backend reports them: a job naming the slice
    # type takes one whole (a used slice is used entirely).
    for slice_ in Node.objects.filter(cluster__slug="tpu-v5p"):
        assert slice_.labels["tpu/accelerator-type"] == "v5p-32"
        assert slice_.accelerators == 16
        assert slice_.accelerators_used in (0, 16)
    # No invented load: every accelerator is free until the demo's jobs take some.
    assert set(Node.objects.values_list("accelerators_used", flat=True)) == {0}


def test_a_cluster_of_an_older_demo_loses_its_invented_load(settings: Any, tmp_path: Path) -> None:
    settings.VAR_DIR = tmp_path
    org = Organization.objects.create(name="Demo", slug="demo")
    seed_demo_fleet(org)
    old = Cluster.objects.get(organization=org, slug="onprem-h100")
    old.options = {**old.options, "busy": 0.4}
    old.save(update_fields=["options"])
    seed_demo_fleet(org)
    old.refresh_from_db()
    assert "busy" not in old.options
    assert old.options["profile"] == "h100-onprem"
