"""Health checks and the auto-drain policy: drain on a failing signal, resume only after several passing
rounds in a row, never resume what an admin drained."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from django.utils import timezone

from clusters import actions
from clusters.actions import health
from clusters.backends import simulated
from clusters.backends.base import RECLAIM, HealthSignal
from clusters.models import Cluster, Drain, HealthCheckResult, Node
from tenancy.models import Organization
from tests.clusters.factories import simulated_cluster

pytestmark = pytest.mark.django_db
State = Node.State
BAD = [HealthSignal("n", "ready", False, "node not ready")]


def test_a_failing_signal_drains_with_the_checks_as_the_reason() -> None:
    verdict = health.decide(BAD, State.SCHEDULABLE, 7, auto_drained=False)
    assert verdict == health.Verdict(healthy=False, passing_checks=0, drain="auto-drain: ready: node not ready")
    assert health.decide(BAD, State.DRAINED, 0, auto_drained=True).drain == ""  # already out of service


def test_resume_needs_several_passing_rounds_in_a_row() -> None:
    passes, state = 0, State.DRAINED
    for round_ in range(1, health.RESUME_AFTER + 1):
        verdict = health.decide([], state, passes, auto_drained=True)
        passes = verdict.passing_checks
        assert verdict.resume is (round_ == health.RESUME_AFTER)
    # One bad round in between starts the count again.
    assert health.decide(BAD, state, health.RESUME_AFTER - 1, auto_drained=True).passing_checks == 0


def test_a_reclaim_notice_drains_within_the_notice() -> None:
    notice = [HealthSignal("n", RECLAIM, False, "reclaim notice: AWS sent a spot interruption notice")]
    verdict = health.decide(notice, State.SCHEDULABLE, 3, auto_drained=False, notice=120)
    assert verdict.grace == 120
    assert verdict.drain == "auto-drain: reclaim: reclaim notice: AWS sent a spot interruption notice"
    assert health.decide(BAD, State.SCHEDULABLE, 3, auto_drained=False).grace is None  # each job's tier's


def test_what_an_admin_drained_is_never_resumed_automatically() -> None:
    assert not health.decide([], State.DRAINED, 100, auto_drained=False).resume


@pytest.fixture
def cluster(tmp_path: Path) -> Cluster:
    return simulated_cluster(Organization.objects.create(name="Acme", slug="acme"), "h100", tmp_path)


def set_down(cluster: Cluster, *names: str) -> None:
    cluster.options = {**cluster.options, "down": list(names)}
    cluster.save()


def node(name: str = "h100-00002") -> Node:
    return Node.objects.get(name=name)


def test_a_node_the_cluster_reports_down_is_drained_then_resumed_after_three_good_rounds(
    cluster: Cluster, django_capture_on_commit_callbacks: Any
) -> None:
    set_down(cluster, "h100-00002")
    with django_capture_on_commit_callbacks(execute=True):
        result = health.check_cluster(cluster.pk)
    assert (result.checked, result.failing, result.drained) == (8, 1, 1)
    assert (node().state, node().healthy) == (State.DRAINING, False)
    drain = Drain.objects.get()
    assert drain.automatic
    assert drain.reason == "auto-drain: ready: node not ready"
    assert HealthCheckResult.objects.filter(node=node(), ok=False, name="ready").count() == 1
    # Still down next round: no second drain, no second history row.
    with django_capture_on_commit_callbacks(execute=True):
        health.check_cluster(cluster.pk)
    assert Drain.objects.count() == 1
    assert HealthCheckResult.objects.count() == 1
    set_down(cluster)
    for round_ in range(1, health.RESUME_AFTER + 1):
        with django_capture_on_commit_callbacks(execute=True):
            result = health.check_cluster(cluster.pk)
        assert result.resumed == (round_ == health.RESUME_AFTER)
    assert node().state == State.SCHEDULABLE
    assert node().healthy
    assert HealthCheckResult.objects.filter(node=node(), ok=True).count() == 1


def test_a_flapping_node_stays_drained(cluster: Cluster, django_capture_on_commit_callbacks: Any) -> None:
    for round_ in range(8):
        set_down(cluster, *(["h100-00002"] if round_ % 2 == 0 else []))
        with django_capture_on_commit_callbacks(execute=True):
            health.check_cluster(cluster.pk)
    assert node().state == State.DRAINING
    assert Drain.objects.count() == 1


def test_a_stale_heartbeat_drains(cluster: Cluster, django_capture_on_commit_callbacks: Any) -> None:
    Node.objects.filter(name="h100-00005").update(heartbeat_at=timezone.now() - timedelta(minutes=12))
    with django_capture_on_commit_callbacks(execute=True):
        health.check_cluster(cluster.pk)
    assert node("h100-00005").state == State.DRAINING
    assert Drain.objects.get().reason == "auto-drain: heartbeat: last heartbeat 12 min ago"


def test_an_admin_drain_is_not_resumed_by_good_health(
    cluster: Cluster, django_capture_on_commit_callbacks: Any
) -> None:
    with django_capture_on_commit_callbacks(execute=True):
        actions.drain_node(None, node(), "x")  # recorded as automatic: make it an admin's
    Drain.objects.update(automatic=False)
    for _ in range(health.RESUME_AFTER + 2):
        with django_capture_on_commit_callbacks(execute=True):
            health.check_cluster(cluster.pk)
    assert node().state == State.DRAINING


def test_a_reclaim_notice_from_the_cluster_drains_the_node_with_the_notice_as_grace(
    cluster: Cluster, django_capture_on_commit_callbacks: Any
) -> None:
    cluster.options = {**cluster.options, "reclaim_notice_seconds": 90}
    cluster.save()
    state_file = cluster.options["state_file"]
    simulated.inject(
        cluster.endpoint, "unhealthy", state_file=state_file, node="h100-00003", check=RECLAIM, message="spot"
    )
    with django_capture_on_commit_callbacks(execute=True):
        health.check_cluster(cluster.pk)
    drain = Drain.objects.get()
    assert (drain.node.name, drain.grace_seconds, drain.automatic) == ("h100-00003", 90, True)
    assert drain.reason == "auto-drain: reclaim: spot"
