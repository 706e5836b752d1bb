"""The placement loop's guarantees: decisions apply only to the fleet they were made on; quotas hold;
preemption is graceful and its victims come back."""

from __future__ import annotations

from datetime import timedelta
from decimal import Decimal
from typing import Any

import pytest
from django.utils import timezone

from clusters.actions.sync import backend_for
from clusters.backends.base import JobState
from clusters.models import AcceleratorType
from governance.models import Quota
from scheduler import actions, tasks
from scheduler.engine import schedule
from scheduler.models import Attempt, Job, LoopState
from scheduler.placement import loop, snapshot
from tests.scheduler.conftest import Fleet

pytestmark = pytest.mark.django_db


def test_decisions_made_on_an_older_fleet_are_not_applied(fleet: Fleet) -> None:
    for _ in range(3):
        fleet.submit(accelerators=8)
    old, index = snapshot.build(fleet.org)
    assert loop.run_cycle(fleet.org).admitted == 3  # another loop got there first
    assert loop.apply(fleet.org, index, schedule(old), timezone.now()) is None
    assert Attempt.objects.count() == 3
    assert LoopState.objects.get(organization=fleet.org).generation == 1


def test_a_job_cancelled_after_the_snapshot_is_not_admitted(fleet: Fleet) -> None:
    job = fleet.submit()
    state, index = snapshot.build(fleet.org)
    actions.cancel_job(fleet.user("alice"), job)
    applied = loop.apply(fleet.org, index, schedule(state), timezone.now())
    assert applied is not None
    assert applied[1:] == (0, 0, 1)  # nothing admitted, one decision skipped
    job.refresh_from_db()
    assert job.state == Job.State.CANCELLED
    assert not Attempt.objects.exists()


def test_a_queue_never_runs_past_its_quota(fleet: Fleet) -> None:
    h100 = AcceleratorType.objects.get(organization=fleet.org)
    vision = actions.queue_for(fleet.world.teams["vision"], None)
    Quota.objects.create(queue=vision, flavor=h100, nominal=Decimal(16))
    jobs = [fleet.submit(accelerators=4) for _ in range(8)]
    fleet.cycle()
    fleet.cycle()
    running = Job.objects.filter(pk__in=[j.pk for j in jobs], state=Job.State.PLACING)
    assert running.count() == 4
    waiting = Job.objects.filter(pk__in=[j.pk for j in jobs], state=Job.State.PENDING)
    assert {j.pending_reason for j in waiting} == {"quota_exhausted"}


def test_a_burst_is_admitted_over_back_to_back_cycles_of_the_admission_limit(fleet: Fleet, settings: Any) -> None:
    settings.PLACEMENT_MAX_ADMISSIONS = 2
    jobs = [fleet.submit(name=f"burst-{i}") for i in range(5)]
    first = loop.run_cycle(fleet.org)
    assert (first.admitted, first.more) == (2, True)
    waiting = Job.objects.filter(state=Job.State.PENDING).order_by("pk")
    assert [(j.name, j.pending_reason, j.queue_position) for j in waiting] == [
        (f"burst-{i}", "not_considered", i - 1) for i in range(2, 5)
    ]  # the place among the jobs left waiting: burst-2 is next (#1), although the cycle admitted two before it
    generation = LoopState.objects.get(organization=fleet.org).generation
    tasks.placement_cycle()  # eager: it queues the next cycle itself while one stopped at the limit
    assert Attempt.objects.filter(job__in=jobs).count() == 5
    assert LoopState.objects.get(organization=fleet.org).generation == generation + 2
    assert not Job.objects.filter(state=Job.State.PENDING).exists()


def test_preemption_is_graceful_and_the_victim_comes_back(fleet: Fleet) -> None:
    low = [fleet.submit(accelerators=8, name=f"low-{i}", checkpoint_location="s3://ckpt/low") for i in range(6)]
    fleet.cycle()
    fleet.follow()
    assert Job.objects.filter(state=Job.State.RUNNING).count() == 6
    urgent = fleet.submit(accelerators=8, name="urgent", tier=fleet.tiers["high"])

    assert fleet.cycle().preempted == 1
    victim = Job.objects.get(state=Job.State.PREEMPTING)
    assert victim.pk in {j.pk for j in low}
    urgent.refresh_from_db()
    assert urgent.pending_reason == "waiting_for_preemption"
    attempt = victim.attempts.get()
    assert attempt.stop_deadline is not None
    event = victim.events.order_by("pk").last()
    assert event is not None
    assert event.reason == "preempted_priority"

    fleet.follow()  # within the grace period: still stopping, still holding its GPUs
    victim.refresh_from_db()
    assert victim.state == Job.State.PREEMPTING
    assert fleet.cycle().admitted == 0

    after = attempt.stop_deadline + timedelta(seconds=1)
    fleet.follow(after)
    victim.refresh_from_db()
    attempt.refresh_from_db()
    assert victim.state == Job.State.REQUEUED
    assert attempt.outcome == Attempt.Outcome.PREEMPTED
    assert victim.retries == 0  # a preemption is not the job's failure
    assert "s3://ckpt/low" in victim.events.order_by("pk").last().message  # type: ignore[union-attr]
    assert backend_for(attempt.cluster).status(attempt.backend_id).state == JobState.CANCELLED

    fleet.cycle(after)
    urgent.refresh_from_db()
    assert urgent.state == Job.State.PLACING
    victim.refresh_from_db()
    assert victim.state == Job.State.REQUEUED  # waits for room, first in line among the low jobs


def test_a_signalled_victim_that_exits_early_is_requeued_at_once(
    fleet: Fleet, django_capture_on_commit_callbacks: Any
) -> None:
    for i in range(6):
        fleet.submit(accelerators=8, name=f"low-{i}")
    fleet.cycle()
    fleet.follow()
    fleet.submit(accelerators=8, name="urgent", tier=fleet.tiers["high"])
    with django_capture_on_commit_callbacks(execute=True):  # the cycle's on-commit tasks: signal the victim
        fleet.cycle()
    victim = Job.objects.get(state=Job.State.PREEMPTING)
    attempt = victim.attempts.get()
    fleet.run_for(5)  # the simulated job checkpoints for 5 s after SIGTERM, then exits
    fleet.follow()  # long before its 300 s grace period ends
    victim.refresh_from_db()
    assert victim.state == Job.State.REQUEUED
    assert attempt.stop_deadline is not None
    assert timezone.now() < attempt.stop_deadline
