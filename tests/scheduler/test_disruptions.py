"""Graceful disruption: a cordon lets running work finish, a drain signals it, gives it its grace and moves
it elsewhere without spending a retry, a dead node loses its work at once, and Quartermaster enforces time
limits itself (signal, the tier's grace, stop)."""

from __future__ import annotations

from typing import Any

import pytest

from clusters import actions as cluster_actions
from clusters.actions.sync import backend_for
from clusters.backends import simulated
from clusters.backends.base import JobState
from clusters.models import Drain, Node
from scheduler.models import Attempt, Job
from scheduler.placement import recover
from tests.scheduler.conftest import Fleet

pytestmark = pytest.mark.django_db


def _running(fleet: Fleet, **fields: Any) -> tuple[Job, Attempt, Node]:
    job = fleet.submit(**fields)
    fleet.cycle()
    fleet.follow()
    job.refresh_from_db()
    assert job.state == Job.State.RUNNING
    attempt = job.attempts.get()
    return job, attempt, attempt.assignments.get().node


def _reasons(job: Job) -> list[str]:
    return list(job.events.order_by("pk").values_list("reason", flat=True))


def test_a_cordon_keeps_running_work_and_takes_no_new_work(
    fleet: Fleet, django_capture_on_commit_callbacks: Any
) -> None:
    job, attempt, node = _running(fleet, accelerators=8)
    with django_capture_on_commit_callbacks(execute=True):
        drain = cluster_actions.cordon_node(fleet.user("adam"), node, "flaky fan, replace next week")
    assert drain.kind == Drain.Kind.CORDON
    node.refresh_from_db()
    assert node.state == Node.State.CORDONED
    recover.recover(fleet.org)
    fleet.follow()
    job.refresh_from_db()
    attempt.refresh_from_db()
    assert job.state == Job.State.RUNNING
    assert attempt.stop_deadline is None
    # The cluster was told to take no new work there (the simulated cluster reports it unschedulable).
    reported = {n.name: n for n in backend_for(node.cluster).inventory().nodes}
    assert not reported[node.name].schedulable
    # New work lands elsewhere.
    other = fleet.submit(accelerators=8)
    fleet.cycle()
    assert other.attempts.get().assignments.get().node != node


def test_a_drain_signals_the_job_gives_it_its_grace_and_requeues_it_without_a_retry(
    fleet: Fleet, django_capture_on_commit_callbacks: Any
) -> None:
    job, attempt, node = _running(fleet, accelerators=8, checkpoint_location="s3://ckpt/run-7")
    with django_capture_on_commit_callbacks(execute=True):
        cluster_actions.drain_node(fleet.user("adam"), node, "PSU swap", grace_seconds=30)
    counts = recover.recover(fleet.org)  # signals it (the eager task runs at once)
    assert counts["drain_signalled"] == 1
    job.refresh_from_db()
    attempt.refresh_from_db()
    assert job.state == Job.State.PREEMPTING
    assert attempt.stop_reason == Attempt.Stop.DRAIN
    assert attempt.stop_deadline is not None
    assert (attempt.stop_deadline - job.state_changed_at).total_seconds() == 30
    assert "PSU swap" in job.events.order_by("pk").last().message  # type: ignore[union-attr]

    fleet.run_for(10)  # the simulated job checkpoints and exits 5 s after SIGTERM
    fleet.follow()
    job.refresh_from_db()
    attempt.refresh_from_db()
    assert job.state == Job.State.REQUEUED
    assert job.retries == 0  # a drain is not the job's fault
    assert attempt.outcome == Attempt.Outcome.PREEMPTED
    assert attempt.reason == "drain"
    assert _reasons(job)[-2:] == ["drain", "drain"]
    assert "s3://ckpt/run-7" in job.events.order_by("pk").last().message  # type: ignore[union-attr]

    assert recover.recover(fleet.org)["drains_done"] == 1
    node.refresh_from_db()
    assert node.state == Node.State.DRAINED
    assert node.drains.get().state == Drain.State.DRAINED

    fleet.cycle()
    job.refresh_from_db()
    assert job.attempts.get(number=2).assignments.get().node != node


def test_a_drained_job_that_ignores_its_signal_is_stopped_when_its_grace_ends(
    fleet: Fleet, django_capture_on_commit_callbacks: Any
) -> None:
    job, attempt, node = _running(fleet, accelerators=8)
    with django_capture_on_commit_callbacks(execute=True):
        cluster_actions.drain_node(fleet.user("adam"), node, "firmware", grace_seconds=0)
    recover.recover(fleet.org)
    fleet.follow(fleet.later(1))
    job.refresh_from_db()
    attempt.refresh_from_db()
    assert job.state == Job.State.REQUEUED
    assert attempt.reason == "drain"
    assert "grace period ended" in attempt.message
    assert backend_for(node.cluster).status(attempt.backend_id).state == JobState.CANCELLED


def test_without_a_grace_of_its_own_a_drain_gives_each_job_its_tier_grace(fleet: Fleet) -> None:
    job, attempt, node = _running(fleet, accelerators=8, tier=fleet.tiers["high"])  # 60 s grace
    cluster_actions.drain_node(None, node, "auto-drain: gpu_xid: 79")
    recover.recover(fleet.org)
    attempt.refresh_from_db()
    assert attempt.stop_deadline is not None
    job.refresh_from_db()
    grace = (attempt.stop_deadline - job.state_changed_at).total_seconds()
    assert grace == 60


def test_a_dead_node_loses_its_work_at_once_and_spends_a_retry(fleet: Fleet) -> None:
    job, attempt, node = _running(fleet, accelerators=8)
    Node.objects.filter(pk=node.pk).update(ready=False, state=Node.State.DOWN)
    assert recover.recover(fleet.org)["node_failed"] == 1
    job.refresh_from_db()
    attempt.refresh_from_db()
    assert attempt.outcome == Attempt.Outcome.LOST
    assert job.state == Job.State.REQUEUED
    assert job.retries == 1


def test_an_unhealthy_node_is_drained_gracefully_not_lost(fleet: Fleet) -> None:
    job, _, node = _running(fleet, accelerators=8)
    Node.objects.filter(pk=node.pk).update(healthy=False)  # e.g. an XID error; the health round drains it
    assert recover.recover(fleet.org)["node_failed"] == 0
    assert Job.objects.get(pk=job.pk).state == Job.State.RUNNING


def test_quartermaster_enforces_the_time_limit_signal_grace_then_stop(fleet: Fleet) -> None:
    job, attempt, _ = _running(fleet, accelerators=8, time_limit=600, tier=fleet.tiers["high"])
    fleet.follow(fleet.later(599))
    assert Job.objects.get(pk=job.pk).state == Job.State.RUNNING
    fleet.follow(fleet.later(601))
    job.refresh_from_db()
    attempt.refresh_from_db()
    assert job.state == Job.State.PREEMPTING
    assert attempt.stop_reason == Attempt.Stop.TIME_LIMIT
    assert "time limit of 10 min" in job.events.order_by("pk").last().message  # type: ignore[union-attr]

    fleet.follow(fleet.later(601 + 61))  # it ignored the signal: stopped when its 60 s grace ended
    job.refresh_from_db()
    attempt.refresh_from_db()
    assert job.state == Job.State.FAILED
    assert job.retries == 0  # a time limit is final
    assert attempt.outcome == Attempt.Outcome.FAILED
    assert attempt.reason == "time_limit"
    assert _reasons(job)[-2:] == ["time_limit", "time_limit"]
    assert backend_for(attempt.cluster).status(attempt.backend_id).state == JobState.CANCELLED


def _on_spot(node: Node) -> None:
    """``node`` is spot capacity, as Karpenter labels it."""
    Node.objects.filter(pk=node.pk).update(labels={**(node.labels or {}), "karpenter.sh/capacity-type": "spot"})


def test_a_spot_node_taken_back_is_a_preemption_by_the_cluster_not_a_lost_node(fleet: Fleet) -> None:
    job, attempt, node = _running(fleet, accelerators=8)
    _on_spot(node)
    Node.objects.filter(pk=node.pk).update(present=False)  # the cloud reclaimed it
    assert recover.recover(fleet.org)["node_failed"] == 1
    job.refresh_from_db()
    attempt.refresh_from_db()
    assert attempt.outcome == Attempt.Outcome.PREEMPTED
    assert (job.state, job.retries) == (Job.State.REQUEUED, 0)
    said = job.events.order_by("pk").last()
    assert said is not None
    assert said.reason == "preempted_by_cluster"
    assert f"The cloud took back its spot node {node.name}" in said.message


def test_a_job_that_its_cluster_says_lost_a_spot_node_is_requeued_without_spending_a_retry(fleet: Fleet) -> None:
    east = fleet.clusters["east"]
    simulated.inject(east.endpoint, "node_lost", state_file=east.options["state_file"], after=60)
    job, attempt, node = _running(fleet, accelerators=8, clusters=[east])
    simulated.clear(east.endpoint, state_file=east.options["state_file"])
    _on_spot(node)
    fleet.run_for(61)
    fleet.follow(fleet.later(61))
    job.refresh_from_db()
    attempt.refresh_from_db()
    assert attempt.outcome == Attempt.Outcome.PREEMPTED
    assert (job.state, job.retries) == (Job.State.REQUEUED, 0)
