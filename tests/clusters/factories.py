"""Simulated clusters for tests: created, optionally synced, with their cluster-side state in a file of
the test's own (so that the backend's state is fresh per test and shared by every process in it)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from clusters.actions import sync
from clusters.models import Cluster
from tenancy.models import Organization


def simulated_cluster(
    org: Organization,
    slug: str,
    state_dir: Path | None,
    *,
    synced: bool = True,
    levels: tuple[str, ...] = (),
    **options: Any,
) -> Cluster:
    """A simulated cluster (``options`` as the simulated backend takes them; 8 H100 nodes by default). With
    no ``state_dir`` its cluster-side state lives in this process's memory."""
    state = {"state_file": str(state_dir / f"{slug}.json")} if state_dir else {}
    cluster = Cluster.objects.create(
        organization=org,
        name=slug,
        slug=slug,
        kind="simulated",
        endpoint=f"sim://{slug}",
        region="eu",
        levels=list(levels),
        options={"profile": "h100-onprem", "nodes": 8, **state, **options},
    )
    if synced:
        result = sync.sync_cluster(cluster.pk)
        assert result.ok, result.error
    return cluster


def kubernetes_cluster(
    org: Organization,
    slug: str,
    url: str,
    token: str,
    *,
    synced: bool = True,
    **options: Any,
) -> Cluster:
    """A Kubernetes cluster whose API server is ``url`` (the fake in ``kube_server.py``), namespace
    ``research`` unless ``options`` say otherwise."""
    cluster = Cluster.objects.create(
        organization=org,
        name=slug,
        slug=slug,
        kind="kubernetes",
        endpoint=url,
        region="eu",
        options={"namespace": "research", **options},
    )
    cluster.set_credentials({"token": token})
    cluster.save()
    if synced:
        result = sync.sync_cluster(cluster.pk)
        assert result.ok, result.error
    return cluster


def tpu_cluster(org: Organization, slug: str, url: str, *, synced: bool = True, **options: Any) -> Cluster:
    """A Cloud TPU cluster whose API is ``url`` (the fake in ``tpu_server.py``, anonymous); ``options`` need
    ``project`` and ``zone``."""
    cluster = Cluster.objects.create(
        organization=org, name=slug, slug=slug, kind="tpu", endpoint=url, region="eu", options=options
    )
    if synced:
        result = sync.sync_cluster(cluster.pk)
        assert result.ok, result.error
    return cluster


def slurm_cluster(
    org: Organization, slug: str, endpoint: str, token: str, *, synced: bool = True, **options: Any
) -> Cluster:
    """A Slurm cluster through slurmrestd at ``endpoint`` (the lab in ``slurm_lab.py``) as root."""
    cluster = Cluster.objects.create(
        organization=org,
        name=slug,
        slug=slug,
        kind="slurm",
        endpoint=endpoint,
        region="eu",
        options=options,
    )
    cluster.set_credentials({"user": "root", "token": token})
    cluster.save()
    if synced:
        result = sync.sync_cluster(cluster.pk)
        assert result.ok, result.error
    return cluster
