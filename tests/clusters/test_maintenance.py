"""Maintenance windows: planned by admins (validated, audited), nodes drained ahead of time and resumed
when the window ends; the health policy does not resume them early."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from django.core.exceptions import PermissionDenied, ValidationError
from django.utils import timezone

from clusters import actions, maintenance
from clusters.actions import health
from clusters.models import Cluster, Drain, MaintenanceWindow, Node
from tenancy.models import AuditLog
from tests.clusters.factories import simulated_cluster
from tests.conftest import World


@pytest.fixture
def cluster(world: World, tmp_path: Path) -> Cluster:
    return simulated_cluster(world.org, "a100", tmp_path, profile="a100-slurm", nodes=6)


def states(cluster: Cluster) -> dict[str, str]:
    return dict(Node.objects.filter(cluster=cluster).values_list("name", "state"))


def test_a_window_drains_its_nodes_ahead_and_resumes_them_after(
    world: World, cluster: Cluster, django_capture_on_commit_callbacks: Any
) -> None:
    start = timezone.now() + timedelta(hours=3)
    two = list(Node.objects.filter(cluster=cluster, name__in=["a100-00001", "a100-00002"]))
    window = actions.plan_maintenance(
        world.users["adam"],
        cluster,
        starts_at=start,
        ends_at=start + timedelta(hours=2),
        reason="PDU swap",
        nodes=two,
        drain_ahead_minutes=60,
    )
    assert AuditLog.objects.filter(action="maintenance.planned", reason="PDU swap").exists()
    with django_capture_on_commit_callbacks(execute=True):
        assert maintenance.apply_windows(start - timedelta(minutes=90)) == maintenance.Applied(0, 0)
    with django_capture_on_commit_callbacks(execute=True):
        assert maintenance.apply_windows(start - timedelta(minutes=59)) == maintenance.Applied(2, 0)
        assert maintenance.apply_windows(start) == maintenance.Applied(0, 0)  # idempotent
    assert states(cluster)["a100-00001"] == Node.State.DRAINING
    assert states(cluster)["a100-00003"] == Node.State.SCHEDULABLE
    assert Drain.objects.filter(window=window).count() == 2
    # Good health during the window resumes nothing.
    for _ in range(health.RESUME_AFTER + 1):
        with django_capture_on_commit_callbacks(execute=True):
            health.check_cluster(cluster.pk)
    assert states(cluster)["a100-00001"] == Node.State.DRAINING
    with django_capture_on_commit_callbacks(execute=True):
        assert maintenance.apply_windows(start + timedelta(hours=2, minutes=1)) == maintenance.Applied(0, 2)
    assert set(states(cluster).values()) == {Node.State.SCHEDULABLE}


def test_a_window_without_nodes_takes_the_whole_cluster(
    world: World, cluster: Cluster, django_capture_on_commit_callbacks: Any
) -> None:
    start = timezone.now() + timedelta(minutes=30)
    actions.plan_maintenance(
        world.users["adam"], cluster, starts_at=start, ends_at=start + timedelta(hours=1), reason="OS upgrade"
    )
    with django_capture_on_commit_callbacks(execute=True):
        assert maintenance.apply_windows().drained == 6


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"ends_at": timezone.now() + timedelta(hours=1)}, "ends_at"),  # before it starts
        ({"starts_at": timezone.now() - timedelta(hours=3), "ends_at": timezone.now() - timedelta(hours=2)}, "ends_at"),
        ({"reason": " "}, "reason"),
        ({"drain_ahead_minutes": -5}, "drain_ahead_minutes"),
    ],
)
def test_a_bad_window_is_refused_naming_the_field(
    world: World, cluster: Cluster, change: dict[str, Any], field: str
) -> None:
    args: dict[str, Any] = {
        "starts_at": timezone.now() + timedelta(hours=2),
        "ends_at": timezone.now() + timedelta(hours=4),
        "reason": "work",
        **change,
    }
    with pytest.raises(ValidationError) as raised:
        actions.plan_maintenance(world.users["adam"], cluster, **args)
    assert field in raised.value.message_dict
    assert not MaintenanceWindow.objects.exists()


def test_another_clusters_node_cannot_join_a_window(world: World, cluster: Cluster, tmp_path: Path) -> None:
    other = Node.objects.create(
        cluster=Cluster.objects.create(organization=world.org, name="x", slug="x", kind="simulated", region="eu"),
        name="x-1",
    )
    with pytest.raises(ValidationError, match="must belong"):
        actions.plan_maintenance(
            world.users["adam"],
            cluster,
            starts_at=timezone.now() + timedelta(hours=1),
            ends_at=timezone.now() + timedelta(hours=2),
            reason="r",
            nodes=[other],
        )


def test_only_admins_plan_maintenance(world: World, cluster: Cluster) -> None:
    with pytest.raises(PermissionDenied):
        actions.plan_maintenance(
            world.users["lena"],
            cluster,
            starts_at=timezone.now() + timedelta(hours=1),
            ends_at=timezone.now() + timedelta(hours=2),
            reason="r",
        )


def test_a_window_with_the_longest_reason_still_drains(world: World, cluster: Cluster) -> None:
    start = timezone.now() + timedelta(minutes=30)
    node = Node.objects.get(cluster=cluster, name="a100-00001")
    actions.plan_maintenance(
        world.users["adam"],
        cluster,
        starts_at=start,
        ends_at=start + timedelta(hours=1),
        reason="x" * actions.MAX_REASON,
        nodes=[node],
    )
    assert maintenance.apply_windows() == maintenance.Applied(1, 0)
    drain = Drain.objects.get(node=node)
    assert len(drain.reason) == actions.MAX_REASON
    assert drain.reason.startswith("maintenance from ")
