"""Failures: a node fails or is drained, a cluster becomes unreachable, a dispatch dies half-way, a job is
cancelled while it is being handed over. Nothing is lost, nothing runs twice."""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Any

import pytest
from django.utils import timezone

from clusters.actions.sync import backend_for
from clusters.backends.base import JobState, NotFound
from clusters.models import Cluster, Node
from governance.models import PriorityTier
from scheduler import actions
from scheduler.models import Attempt, Job
from scheduler.placement import dispatch, follow, loop, recover
from tests.conftest import broker_down
from tests.scheduler.conftest import Fleet, states

pytestmark = pytest.mark.django_db


def _running(fleet: Fleet, **fields: Any) -> tuple[Job, Attempt]:
    job = fleet.submit(**fields)
    fleet.cycle()
    fleet.follow()
    job.refresh_from_db()
    assert job.state == Job.State.RUNNING
    return job, job.attempts.get()


def test_a_dead_node_requeues_its_job_which_runs_again_elsewhere(fleet: Fleet) -> None:
    job, first = _running(fleet, accelerators=8, checkpoint_location="s3://ckpt/run-1")
    node = first.assignments.get().node
    Node.objects.filter(pk=node.pk).update(ready=False)

    counts = recover.recover(fleet.org)
    assert counts["node_failed"] == 1
    job.refresh_from_db()
    first.refresh_from_db()
    assert job.state == Job.State.REQUEUED
    assert job.retries == 1
    assert job.not_before is not None
    assert first.outcome == Attempt.Outcome.LOST
    assert [e.reason for e in job.events.order_by("pk")][-2:] == ["node_failed", "retry"]
    assert "s3://ckpt/run-1" in job.events.order_by("pk").last().message  # type: ignore[union-attr]

    assert fleet.cycle().admitted == 0  # backing off
    fleet.cycle(job.not_before)
    job.refresh_from_db()
    second = job.attempts.get(number=2)
    assert job.state == Job.State.PLACING
    assert second.assignments.get().node != node
    # The lost attempt is stopped on its cluster, the new one runs: one copy of the job, never two.
    fleet.follow()
    first.refresh_from_db()
    assert not first.cleanup_pending
    backend = backend_for(first.cluster)
    assert backend.status(first.backend_id).state == JobState.CANCELLED
    assert backend.status(second.backend_id).state == JobState.RUNNING


def test_no_retries_left_leaves_the_job_failed(fleet: Fleet) -> None:
    job, first = _running(fleet, max_retries=0)
    Node.objects.filter(pk=first.assignments.get().node_id).update(state=Node.State.DOWN)
    recover.recover(fleet.org)
    job.refresh_from_db()
    assert job.state == Job.State.FAILED
    assert "No retries left" in job.message


def _partition(fleet: Fleet, attempt: Attempt) -> Cluster:
    """Cut the attempt's cluster off: it last answered now."""
    cluster = attempt.cluster
    Cluster.objects.filter(pk=cluster.pk).update(status=Cluster.Status.UNREACHABLE, last_sync_at=timezone.now())
    return cluster


def _heal(cluster: Cluster) -> None:
    Cluster.objects.filter(pk=cluster.pk).update(status=Cluster.Status.HEALTHY, last_sync_at=timezone.now())


def test_a_short_partition_costs_a_running_job_nothing(fleet: Fleet) -> None:
    job, first = _running(fleet, accelerators=8)
    lost = _partition(fleet, first)
    counts = recover.recover(fleet.org, fleet.later(120))  # two minutes without an answer
    assert counts["unknown"] == 1
    assert counts["failed_over"] == 0
    first.refresh_from_db()
    assert first.outcome == Attempt.Outcome.ACTIVE
    assert first.unknown_since is not None
    assert states(job) == [Job.State.RUNNING]

    _heal(lost)
    fleet.follow()
    first.refresh_from_db()
    job.refresh_from_db()
    assert first.outcome == Attempt.Outcome.ACTIVE
    assert first.unknown_since is None
    assert job.state == Job.State.RUNNING
    assert job.attempt == 1
    assert job.retries == 0
    assert backend_for(lost).status(first.backend_id).state == JobState.RUNNING


def test_past_the_failover_delay_work_moves_and_the_old_copy_is_stopped_once_the_new_one_runs(fleet: Fleet) -> None:
    job, first = _running(fleet, accelerators=8, regions=[])
    lost = _partition(fleet, first)
    counts = recover.recover(fleet.org, fleet.later(lost.failover_after + 1))
    assert counts["failed_over"] == 1
    job.refresh_from_db()
    assert job.state == Job.State.REQUEUED
    assert job.retries == 0
    assert job.events.order_by("pk").last().reason == "failover"  # type: ignore[union-attr]
    fleet.cycle()
    second = job.attempts.get(number=2)
    assert second.cluster != lost  # the other cluster took it
    follow.follow(second.cluster_id)  # the replacement runs
    first.refresh_from_db()
    assert first.cleanup_pending  # it may still run over there

    _heal(lost)
    fleet.follow()
    first.refresh_from_db()
    job.refresh_from_db()
    assert not first.cleanup_pending
    assert first.outcome == Attempt.Outcome.LOST
    assert backend_for(lost).status(first.backend_id).state == JobState.CANCELLED
    assert job.state == Job.State.RUNNING
    assert job.attempt == 2


def test_a_failed_over_job_whose_replacement_has_not_started_is_reattached(
    fleet: Fleet, django_capture_on_commit_callbacks: Any
) -> None:
    job, first = _running(fleet, accelerators=8, regions=[])
    lost = _partition(fleet, first)
    recover.recover(fleet.org, fleet.later(lost.failover_after + 1))
    fleet.cycle()  # the replacement is submitted on the other cluster, not running yet
    second = job.attempts.get(number=2)

    _heal(lost)
    with django_capture_on_commit_callbacks(execute=True):
        follow.follow(lost.pk)
    job.refresh_from_db()
    first.refresh_from_db()
    second.refresh_from_db()
    assert job.state == Job.State.RUNNING
    assert job.attempt == 1
    assert first.outcome == Attempt.Outcome.ACTIVE
    assert not first.cleanup_pending
    assert second.outcome == Attempt.Outcome.CANCELLED
    assert second.reason == "withdrawn"
    assert backend_for(second.cluster).status(second.backend_id).state == JobState.CANCELLED  # eager cleanup
    assert job.events.order_by("pk").last().reason == "reattached"  # type: ignore[union-attr]
    # The next attempt gets a number of its own (attempt 2 exists).
    Node.objects.filter(pk=first.assignments.get().node_id).update(ready=False)
    recover.recover(fleet.org)
    job.refresh_from_db()
    fleet.cycle(job.not_before)
    assert sorted(job.attempts.values_list("number", flat=True)) == [1, 2, 3]


def test_work_pinned_to_a_silent_cluster_waits_for_it(fleet: Fleet) -> None:
    job, first = _running(fleet, accelerators=8, clusters=[fleet.clusters["east"]])
    _partition(fleet, first)
    counts = recover.recover(fleet.org, fleet.later(24 * 3600))
    assert counts["failed_over"] == 0
    assert counts["unknown"] == 1
    assert states(job) == [Job.State.RUNNING]


def test_a_tier_may_fail_over_sooner_than_its_cluster(fleet: Fleet) -> None:
    PriorityTier.objects.filter(pk=fleet.tiers["normal"].pk).update(failover_after=120)
    _job, first = _running(fleet, accelerators=8)
    _partition(fleet, first)
    assert recover.recover(fleet.org, fleet.later(60))["failed_over"] == 0
    assert recover.recover(fleet.org, fleet.later(121))["failed_over"] == 1


def test_an_admitted_attempt_whose_dispatch_never_ran_is_sent_again(fleet: Fleet) -> None:
    job = fleet.submit()
    loop.run_cycle(fleet.org)  # admitted; the worker "dies" before the dispatch task runs
    attempt = Attempt.objects.get(job=job)
    assert attempt.backend_id == ""
    counts = recover.recover(fleet.org, timezone.now() + timedelta(minutes=1))
    assert counts["redispatched"] == 1  # the eager task ran it
    attempt.refresh_from_db()
    assert attempt.backend_id == attempt.backend_key


def test_a_dispatch_that_died_after_submitting_finds_its_job_again(fleet: Fleet) -> None:
    job = fleet.submit()
    loop.run_cycle(fleet.org)
    attempt = Attempt.objects.get(job=job)
    backend = backend_for(attempt.cluster)
    backend.submit(dispatch.spec_for(attempt))  # submitted, then the worker died before recording it
    later = timezone.now() + dispatch.DISPATCH_CLAIM * 2
    assert dispatch.dispatch(attempt.pk, later) == "submitted"
    attempt.refresh_from_db()
    assert attempt.backend_id == attempt.backend_key
    assert backend.find(attempt.backend_key) == attempt.backend_key


def test_cancelling_while_placing_stops_the_job_on_its_cluster(
    fleet: Fleet, django_capture_on_commit_callbacks: Any
) -> None:
    job = fleet.submit()
    fleet.cycle()
    attempt = Attempt.objects.get(job=job)
    with django_capture_on_commit_callbacks(execute=True):
        actions.cancel_job(fleet.user("alice"), job, "wrong data set")
    attempt.refresh_from_db()
    assert attempt.outcome == Attempt.Outcome.CANCELLED
    assert not attempt.cleanup_pending  # the eager cleanup task cancelled it on the cluster
    assert backend_for(attempt.cluster).status(attempt.backend_id).state == JobState.CANCELLED


def test_a_job_the_cluster_forgot_is_requeued(fleet: Fleet) -> None:
    job, first = _running(fleet)
    path = fleet.state_dir / f"{first.cluster.slug}.json"
    state = json.loads(path.read_text())
    del state["jobs"][first.backend_id]
    path.write_text(json.dumps(state))
    with pytest.raises(NotFound):
        backend_for(first.cluster).status(first.backend_id)
    fleet.follow()
    job.refresh_from_db()
    assert job.state == Job.State.REQUEUED
    assert job.events.order_by("pk").filter(reason="lost").exists()


def test_a_broker_that_is_down_never_fails_a_committed_change(
    fleet: Fleet, django_capture_on_commit_callbacks: Any
) -> None:
    with broker_down():
        with django_capture_on_commit_callbacks(execute=True):
            job = fleet.submit()  # the wake-up cannot be queued
        with django_capture_on_commit_callbacks(execute=True):
            report = loop.run_cycle(fleet.org)  # nor the dispatch
        assert report.admitted == 1
        attempt = Attempt.objects.get(job=job)
        with django_capture_on_commit_callbacks(execute=True):
            actions.cancel_job(fleet.user("alice"), job)  # nor the cleanup
    job.refresh_from_db()
    attempt.refresh_from_db()
    assert job.state == Job.State.CANCELLED
    assert attempt.outcome == Attempt.Outcome.CANCELLED
