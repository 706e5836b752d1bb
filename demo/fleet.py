"""The demo fleet: three simulated clusters, as an organization with several kinds of hardware has them."""

from __future__ import annotations

from decimal import Decimal

from django.conf import settings
from django.contrib.auth import get_user_model

from clusters.actions import elastic, sync
from clusters.models import Cluster, ElasticPool
from tenancy.models import Organization

#: slug: (name, region, topology levels, simulated options, preference)
DEMO_CLUSTERS = {
    "onprem-h100": ("On-prem H100", "eu-west", ["ib_block", "rack"], {"profile": "h100-onprem", "nodes": 64}, 80),
    "slurm-a100": ("A100 Slurm partition", "eu-west", ["rack"], {"profile": "a100-slurm", "nodes": 32}, 60),
    # Cloud capacity, billed on demand (billing's price book prices it so).
    "tpu-v5p": (
        "Cloud TPU v5p",
        "us-central",
        [],
        {"profile": "tpu-slices", "nodes": 4, "capacity_type": "on_demand"},
        40,
    ),
}


def seed_demo_fleet(org: Organization) -> list[Cluster]:
    """Create the demo clusters (idempotent). Their state file lives under the var directory so that the
    web server, the worker and beat see one simulated cluster.

    The fleet carries no invented background load: what is busy is what the demo's jobs hold, the seeded
    ones and the background work that comes and goes (``demo/background.py``). A cluster seeded by an older
    demo with a static ``busy`` share has it taken out."""
    clusters: list[Cluster] = []
    for slug, (name, region, levels, options, preference) in DEMO_CLUSTERS.items():
        state_file = str(settings.VAR_DIR / "simulated" / f"{slug}.json")
        cluster, _ = Cluster.objects.get_or_create(
            organization=org,
            slug=slug,
            defaults={
                "name": name,
                "kind": "simulated",
                "endpoint": f"sim://{slug}",
                "region": region,
                "levels": levels,
                "options": {**options, "seed": len(clusters), "state_file": state_file},
                "preference": preference,
            },
        )
        if cluster.options.get("busy"):
            cluster.options = {key: value for key, value in cluster.options.items() if key != "busy"}
            cluster.save(update_fields=["options"])
        clusters.append(cluster)
    return clusters


def sync_demo_fleet(org: Organization) -> None:
    """Read the demo clusters' inventories now, rather than at the first beat."""
    for cluster in Cluster.objects.filter(organization=org, kind="simulated"):
        sync.sync_cluster(cluster.pk)


def seed_elastic_pool(org: Organization) -> None:
    """A cloud burst pool beside the on-prem H100s: up to four 8-GPU nodes, up five minutes after an ask, given back
    after fifteen idle, 5,000.00 a month at most (docs/scheduling.md §Elastic pools). Added by adam, once."""
    cluster = Cluster.objects.filter(organization=org, slug="onprem-h100").first()
    adam = get_user_model().objects.filter(username="adam").first()
    if cluster is None or adam is None or ElasticPool.objects.filter(cluster=cluster).exists():
        return
    elastic.create_pool(
        adam,
        cluster,
        name="cloud-burst",
        flavor="H100-SXM-80GB",
        node_accelerators=8,
        node_cpu=110_000,
        node_memory=1_900 * 1024,
        max_nodes=4,
        lead_time=300,
        idle_release=900,
        monthly_budget=Decimal("5000.00"),
    )
