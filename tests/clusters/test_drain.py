"""Drain and resume: who may, what they must say, what is recorded, and what the cluster is told."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from django.core.exceptions import PermissionDenied, ValidationError
from django.utils import timezone

from clusters import actions
from clusters.actions import sync
from clusters.models import Cluster, Drain, Node
from demo.fleet import seed_demo_fleet, sync_demo_fleet
from scheduler.placement import recover
from tenancy.models import AuditLog
from tests.conftest import World


@pytest.fixture
def fleet(world: World, settings: Any, tmp_path: Path) -> Cluster:
    settings.VAR_DIR = tmp_path
    seed_demo_fleet(world.org)
    sync_demo_fleet(world.org)
    return Cluster.objects.get(slug="onprem-h100")


def node(cluster: Cluster, name: str = "h100-00003") -> Node:
    return Node.objects.get(cluster=cluster, name=name)


def test_an_admin_drains_a_node_and_the_cluster_is_told(
    world: World, fleet: Cluster, django_capture_on_commit_callbacks: Any
) -> None:
    with django_capture_on_commit_callbacks(execute=True):
        drain = actions.drain_node(world.users["adam"], node(fleet), "ECC errors on GPU 3")
    drain.refresh_from_db()
    assert (drain.state, drain.automatic, drain.requested_by) == (Drain.State.DRAINING, False, world.users["adam"])
    assert node(fleet).state == Node.State.DRAINING
    # No work of ours is left on it (none was there): the drain is done.
    assert recover.finish_drains(None, timezone.now()) == 1
    drain.refresh_from_db()
    assert drain.state == Drain.State.DRAINED
    assert node(fleet).state == Node.State.DRAINED
    entry = AuditLog.objects.get(action="node.drained")
    assert (entry.actor, entry.reason, entry.target_repr) == (world.users["adam"], "ECC errors on GPU 3", "h100-00003")
    # The simulated cluster cordoned it: the next sync reports it unschedulable and keeps it drained.
    info = next(n for n in sync.backend_for(fleet).inventory().nodes if n.name == "h100-00003")
    assert not info.schedulable
    sync.sync_cluster(fleet.pk)
    assert node(fleet).state == Node.State.DRAINED


def test_resume_puts_the_node_back_everywhere(
    world: World, fleet: Cluster, django_capture_on_commit_callbacks: Any
) -> None:
    with django_capture_on_commit_callbacks(execute=True):
        drain = actions.drain_node(world.users["adam"], node(fleet), "firmware update")
    with django_capture_on_commit_callbacks(execute=True):
        actions.resume_node(world.users["adam"], node(fleet), "firmware updated")
    assert node(fleet).state == Node.State.SCHEDULABLE
    drain.refresh_from_db()
    assert drain.state == Drain.State.RESUMED
    info = next(n for n in sync.backend_for(fleet).inventory().nodes if n.name == "h100-00003")
    assert info.schedulable
    assert AuditLog.objects.filter(action="node.resumed", reason="firmware updated").exists()


@pytest.mark.parametrize("username", ["alice", "lena", "fiona", "mallory"])
def test_only_the_organizations_admins_may_drain(world: World, fleet: Cluster, username: str) -> None:
    with pytest.raises(PermissionDenied):
        actions.drain_node(world.users[username], node(fleet), "because")
    assert node(fleet).state == Node.State.SCHEDULABLE
    assert not Drain.objects.exists()
    assert not AuditLog.objects.filter(action="node.drained").exists()


@pytest.mark.parametrize(("reason", "message"), [("", "Say why"), (" ", "Say why"), ("x" * 2001, "at most 2000")])
def test_a_drain_needs_a_reason(world: World, fleet: Cluster, reason: str, message: str) -> None:
    with pytest.raises(ValidationError) as raised:
        actions.drain_node(world.users["adam"], node(fleet), reason)
    assert message in raised.value.message_dict["reason"][0]
    assert not Drain.objects.exists()


def test_draining_twice_or_resuming_a_working_node_is_refused(
    world: World, fleet: Cluster, django_capture_on_commit_callbacks: Any
) -> None:
    with pytest.raises(ValidationError, match="not drained"):
        actions.resume_node(world.users["adam"], node(fleet), "nothing to resume")
    with django_capture_on_commit_callbacks(execute=True):
        actions.drain_node(world.users["adam"], node(fleet), "first")
    with pytest.raises(ValidationError, match="already draining"):
        actions.drain_node(world.users["adam"], node(fleet), "second")
    assert Drain.objects.count() == 1


def test_a_drain_the_cluster_cannot_carry_out_ends_failed_with_the_reason(
    world: World, fleet: Cluster, django_capture_on_commit_callbacks: Any
) -> None:
    ghost = Node.objects.create(cluster=fleet, name="ghost-1", accelerators=8)
    with django_capture_on_commit_callbacks(execute=True):
        drain = actions.drain_node(None, ghost, "auto: heartbeat stale")
    drain.refresh_from_db()
    assert drain.automatic
    assert drain.state == Drain.State.FAILED
    assert "no node 'ghost-1'" in drain.message
    assert AuditLog.objects.get(action="node.drained").actor_name == "system"
