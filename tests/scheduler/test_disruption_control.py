"""Disruption control in the product (docs/scheduling.md §Disruption): a tier's minimum runtime keeps its young
jobs running, its cap on disruption counts what the last hour's preemptions of its jobs lost (their timeline
says it), and both are set with the tier (each bad value named, nothing written)."""

from __future__ import annotations

from datetime import timedelta
from decimal import Decimal
from typing import Any

import pytest
from django.core.exceptions import ValidationError
from django.utils import timezone

from governance.actions import quotas
from governance.models import PriorityTier
from scheduler.models import Attempt, Job, JobEvent
from scheduler.placement import snapshot
from tests.conftest import api_client
from tests.scheduler.conftest import Fleet

pytestmark = pytest.mark.django_db


def busy_fleet(fleet: Fleet, ran: timedelta) -> list[Job]:
    """The fleet full of normal-tier jobs of 8 GPUs that started ``ran`` ago, and a high-tier job that wants one."""
    low = [fleet.submit(accelerators=8, name=f"low-{i}") for i in range(6)]
    fleet.cycle()
    fleet.follow()
    Attempt.objects.filter(job__in=low).update(admitted_at=timezone.now() - ran)
    fleet.submit(accelerators=8, name="urgent", tier=fleet.tiers["high"])
    return low


def set_normal(fleet: Fleet, **values: Any) -> None:
    tier = fleet.tiers["normal"]
    quotas.set_tier(
        fleet.user("adam"),
        fleet.org,
        name="normal",
        value=tier.value,
        grace_seconds=tier.grace_seconds,
        is_default=True,
        reason="disruption control",
        **values,
    )


def test_a_young_job_of_a_tier_with_a_minimum_runtime_is_not_preempted(fleet: Fleet) -> None:
    set_normal(fleet, min_runtime=3600)
    busy_fleet(fleet, ran=timedelta(minutes=10))
    assert fleet.cycle().preempted == 0
    assert Job.objects.get(name="urgent").state == Job.State.PENDING


def test_an_old_enough_victim_is_preempted_and_its_timeline_says_what_that_cost(fleet: Fleet) -> None:
    set_normal(fleet, min_runtime=3600)
    busy_fleet(fleet, ran=timedelta(hours=2))
    assert fleet.cycle().preempted == 1
    event = JobEvent.objects.get(reason="preempted_priority")
    # Eight GPUs for two hours, no checkpoint: about 16 accelerator-hours redone.
    assert "the work since its start (it has no checkpoint), about 16.0" in event.message
    assert event.detail["lost_accelerator_seconds"] == pytest.approx(8 * 7200, rel=0.01)


def test_a_tiers_cap_counts_what_the_last_hours_preemptions_of_its_jobs_lost(fleet: Fleet) -> None:
    set_normal(fleet, max_disruption=Decimal("20"))
    busy_fleet(fleet, ran=timedelta(hours=2))
    caps = {"normal": Decimal("20")}
    now = timezone.now()
    assert snapshot.disruption_left(fleet.org, now, caps) == {"normal": 20 * 3600}
    assert fleet.cycle().preempted == 1  # 16 of its 20 accelerator-hours
    left = snapshot.disruption_left(fleet.org, timezone.now(), caps)["normal"]
    assert left == pytest.approx((20 - 16) * 3600, rel=0.01)
    assert snapshot.disruption_left(fleet.org, timezone.now() + timedelta(hours=1, seconds=5), caps) == {
        "normal": 20 * 3600
    }

    # The victim stops; the urgent job starts in its place.
    deadline = Attempt.objects.get(stop_deadline__isnull=False).stop_deadline
    assert deadline is not None
    after = deadline + timedelta(seconds=1)
    fleet.follow(after)
    fleet.cycle(after)
    assert Job.objects.get(name="urgent").state != Job.State.PENDING
    fleet.submit(accelerators=8, name="urgent-2", tier=fleet.tiers["high"])
    assert fleet.cycle(after).preempted == 0  # another 16 would pass the cap
    waiting = Job.objects.get(name="urgent-2")
    assert "cap on disruption" in waiting.pending_message


def test_bad_values_are_named_and_change_nothing(fleet: Fleet) -> None:
    with pytest.raises(ValidationError) as bad:
        set_normal(fleet, min_runtime=5, max_disruption="-1")
    assert set(bad.value.message_dict) == {"min_runtime", "max_disruption"}
    tier = PriorityTier.objects.get(pk=fleet.tiers["normal"].pk)
    assert (tier.min_runtime, tier.max_disruption) == (None, None)
    adam = api_client(fleet.user("adam"))
    body = {"name": "normal", "value": 50, "is_default": True, "reason": "api"}
    done = adam.post("/api/v1/tiers/", {**body, "min_runtime": 1800, "max_disruption": "12.5"}, format="json")
    assert done.status_code == 200, done.json()
    assert (done.json()["min_runtime"], done.json()["max_disruption"]) == (1800, "12.500")
    refused = adam.post("/api/v1/tiers/", {**body, "min_runtime": 10}, format="json")
    assert refused.status_code == 400
    assert set(refused.json()["error"]["fields"]) == {"min_runtime"}
