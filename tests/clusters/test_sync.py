"""Inventory sync on the database: bulk, idempotent, only changed rows; failures mark the cluster and touch
no node; credentials stay encrypted."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from django.test.utils import override_settings
from django.utils import timezone

from clusters import actions as cluster_actions
from clusters.actions import sync
from clusters.backends.base import Inventory, NodeInfo
from clusters.backends.kinds import load
from clusters.backends.simulated import backend as simulated
from clusters.models import AcceleratorType, Cluster, Node, TopologyDomain
from tenancy.models import Organization
from tests.clusters.factories import simulated_cluster

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def fresh_simulated_state() -> Iterator[None]:
    simulated._MEMORY.clear()
    yield
    simulated._MEMORY.clear()


def make(org: Organization, slug: str = "h100", **options: Any) -> Cluster:
    return simulated_cluster(org, slug, None, synced=False, levels=("ib_block", "rack"), **{"nodes": 64, **options})


@pytest.fixture
def org() -> Organization:
    return Organization.objects.create(name="Acme", slug="acme")


def test_the_first_sync_creates_nodes_accelerators_and_domains(org: Organization) -> None:
    cluster = make(org)
    result = sync.sync_cluster(cluster.pk)
    assert (result.ok, result.created, result.updated, result.gone) == (True, 64, 0, 0)
    cluster.refresh_from_db()
    assert cluster.status == Cluster.Status.HEALTHY
    assert cluster.last_sync_at is not None
    node = Node.objects.get(cluster=cluster, name="h100-00005")
    assert (node.accelerators, node.cpu, node.topology) == (
        8,
        112_000,
        {"ib_block": "ib-block-000", "rack": "rack-001"},
    )
    assert node.accelerator == AcceleratorType.objects.get(name="H100-SXM-80GB", organization=org)
    assert node.state == Node.State.SCHEDULABLE
    racks = TopologyDomain.objects.filter(cluster=cluster, level="rack")
    assert racks.count() == 16
    assert {r.parent.name for r in racks if r.parent} == {"ib-block-000", "ib-block-001"}


def test_a_second_sync_writes_nothing_that_did_not_change(
    org: Organization, django_assert_max_num_queries: Any
) -> None:
    cluster = make(org)
    sync.sync_cluster(cluster.pk)
    with django_assert_max_num_queries(12):
        result = sync.sync_cluster(cluster.pk)
    assert (result.created, result.updated, result.unchanged) == (0, 0, 64)


def test_cluster_side_changes_reach_the_rows(org: Organization) -> None:
    cluster = make(org)
    sync.sync_cluster(cluster.pk)
    backend = sync.backend_for(cluster)
    backend.cordon("h100-00001", "cable swap")
    cluster.options = {**cluster.options, "down": ["h100-00002"], "nodes": 60}
    cluster.save()
    result = sync.sync_cluster(cluster.pk)
    assert (result.updated, result.gone) == (2, 4)
    states = dict(Node.objects.filter(cluster=cluster).values_list("name", "state"))
    assert states["h100-00001"] == Node.State.CORDONED
    assert states["h100-00002"] == Node.State.DOWN
    assert not Node.objects.get(cluster=cluster, name="h100-00063").present
    # Ready again: down becomes schedulable, the admin-side cordon stays.
    cluster.options = {**cluster.options, "down": []}
    cluster.save()
    sync.sync_cluster(cluster.pk)
    states = dict(Node.objects.filter(cluster=cluster).values_list("name", "state"))
    assert states["h100-00002"] == Node.State.SCHEDULABLE
    assert states["h100-00001"] == Node.State.CORDONED
    # Uncordoned on the cluster: Quartermaster holds no cordon of its own there, so the node is back in service.
    backend.resume("h100-00001")
    sync.sync_cluster(cluster.pk)
    assert Node.objects.get(cluster=cluster, name="h100-00001").state == Node.State.SCHEDULABLE


def test_a_resume_that_a_sync_overtakes_is_not_lost_and_a_cordon_of_quartermasters_own_stays(
    org: Organization, django_capture_on_commit_callbacks: Any
) -> None:
    cluster = make(org)
    sync.sync_cluster(cluster.pk)
    first, second = Node.objects.filter(cluster=cluster).order_by("name")[:2]
    with django_capture_on_commit_callbacks(execute=True):
        cluster_actions.cordon_node(None, first, "bad cable")
        cluster_actions.cordon_node(None, second, "firmware")
    sync.sync_cluster(cluster.pk)
    assert set(Node.objects.filter(pk__in=[first.pk, second.pk]).values_list("state", flat=True)) == {"cordoned"}
    # The first is resumed, and a sync reads the cluster before the resume reaches it: cordoned again, for now.
    with django_capture_on_commit_callbacks(execute=False) as untold:
        cluster_actions.resume_node(None, first, "fixed")
    sync.sync_cluster(cluster.pk)
    assert Node.objects.get(pk=first.pk).state == Node.State.CORDONED
    for tell in untold:  # the resume reaches the cluster: the next sync puts the node back in service
        tell()
    sync.sync_cluster(cluster.pk)
    assert Node.objects.get(pk=first.pk).state == Node.State.SCHEDULABLE
    # Someone uncordons the second on the cluster: it stays cordoned, as Quartermaster's own cordon says, until
    # it is resumed here.
    sync.backend_for(cluster).resume(second.name)
    sync.sync_cluster(cluster.pk)
    assert Node.objects.get(pk=second.pk).state == Node.State.CORDONED


def test_a_failing_backend_marks_the_cluster_and_touches_no_node(org: Organization) -> None:
    cluster = make(org)
    healthy = make(org, "a100", profile="a100-slurm", nodes=8)
    sync.sync_cluster(cluster.pk)
    before = list(Node.objects.filter(cluster=cluster).values_list("name", "state", "accelerators", "present"))
    cluster.options = {**cluster.options, "profile": "no-such-hardware"}
    cluster.save()
    result = sync.sync_cluster(cluster.pk)
    assert not result.ok
    assert "unknown simulated profile 'no-such-hardware'" in result.error
    cluster.refresh_from_db()
    assert (cluster.status, cluster.failures) == (Cluster.Status.DEGRADED, 1)
    assert "unknown simulated profile" in cluster.last_error
    assert cluster.next_sync_at is not None
    assert list(Node.objects.filter(cluster=cluster).values_list("name", "state", "accelerators", "present")) == before
    # Backing off: not due, while the healthy cluster is.
    assert sync.due_clusters() == [healthy.pk]
    assert sync.sync_cluster(healthy.pk).ok


def test_repeated_failures_back_off_and_end_unreachable(org: Organization) -> None:
    cluster = make(org, profile="broken")
    waits = []
    for _ in range(3):
        Cluster.objects.filter(pk=cluster.pk).update(next_sync_at=None)
        started = timezone.now()
        sync.sync_cluster(cluster.pk)
        cluster.refresh_from_db()
        assert cluster.next_sync_at is not None
        assert cluster.last_sync_at is None
        waits.append(round((cluster.next_sync_at - started).total_seconds()))
    assert waits == [30, 60, 120]
    assert cluster.status == Cluster.Status.UNREACHABLE
    assert cluster.failures == 3


def test_a_report_that_contradicts_itself_is_refused_whole(org: Organization, monkeypatch: Any) -> None:
    cluster = make(org)
    twice = NodeInfo("n1", "H100", 8, 8, 1000, 1000, 1024, 1024)
    monkeypatch.setattr(load("simulated"), "inventory", lambda self: Inventory((twice, twice)))
    result = sync.sync_cluster(cluster.pk)
    assert "reported node n1 twice" in result.error
    assert not Node.objects.exists()
    cluster.refresh_from_db()
    assert cluster.status == Cluster.Status.DEGRADED


def test_a_cluster_being_synced_is_left_alone(org: Organization) -> None:
    cluster = make(org)
    Cluster.objects.filter(pk=cluster.pk).update(sync_claimed_until=timezone.now() + sync.CLAIM)
    assert sync.sync_cluster(cluster.pk).skipped
    assert not Node.objects.exists()


def test_credentials_are_encrypted_at_rest_and_unreadable_under_another_key(org: Organization) -> None:
    cluster = make(org)
    cluster.set_credentials({"token": "s3cret-token"})
    cluster.save()
    stored = bytes(Cluster.objects.get(pk=cluster.pk).credentials_ciphertext)
    assert b"s3cret" not in stored
    assert Cluster.objects.get(pk=cluster.pk).credentials() == {"token": "s3cret-token"}
    with override_settings(CREDENTIALS_KEY="another key"):
        result = sync.sync_cluster(cluster.pk)
    assert "cannot be decrypted" in result.error
