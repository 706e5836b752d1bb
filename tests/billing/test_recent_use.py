"""Fair share with memory in the product: the meter keeps each queue's recent use exactly (the value of every
usage record at the run's moment, whatever runs repeat, crash or trim), a new half-life rebuilds it, and the
placement loop orders queues by it."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from django.core.exceptions import PermissionDenied, ValidationError

from billing.actions import metering
from billing.models import MeterState, UsageRecord
from governance.actions import fairshare
from governance.fairshare import decay
from governance.models import FairShare, Queue, QueueUsage, QuotaChange
from scheduler.engine import fairshare as engine_fairshare
from scheduler.models import Attempt, Job
from scheduler.placement import feasibility, snapshot
from tenancy.models import AuditLog
from tests.billing.conftest import placed
from tests.scheduler.conftest import Fleet

T0 = datetime(2026, 11, 10, 22, 0, 0, tzinfo=UTC)
DAY = 86400


def kept(fleet: Fleet) -> dict[str, tuple[float, datetime]]:
    return {
        name: (hours, as_of)
        for name, hours, as_of in QueueUsage.objects.filter(queue__team__organization=fleet.org).values_list(
            "queue__name", "accelerator_hours", "as_of"
        )
    }


def valued(fleet: Fleet, at: datetime, half_life: float) -> dict[str, float]:
    """Every usage record of the organization valued at ``at``, per queue: what the meter must have kept."""
    out: dict[str, float] = {}
    for name, milli, start, end in UsageRecord.objects.filter(organization=fleet.org).values_list(
        "job__queue__name", "milli", "start", "end"
    ):
        out[name] = out.get(name, 0.0) + engine_fairshare.hours(
            milli, start.timestamp(), end.timestamp(), at.timestamp(), half_life
        )
    return out


def assert_kept_is_every_record(fleet: Fleet, at: datetime) -> None:
    half_life = FairShare.objects.get(organization=fleet.org).half_life
    expected = valued(fleet, at, half_life)
    got = {name: hours for name, (hours, as_of) in kept(fleet).items() if as_of == at}
    assert set(got) >= set(expected)
    for name, hours in got.items():
        assert hours == pytest.approx(expected.get(name, 0.0), rel=1e-9, abs=1e-9), name


def test_the_meter_keeps_each_queues_recent_use_as_the_value_of_its_records(fleet: Fleet) -> None:
    done = placed(fleet, admitted=T0, ended=T0 + timedelta(hours=3), accelerators=4)
    running = placed(fleet, admitted=T0 + timedelta(hours=1), ended=None, accelerators=2, name="long")
    other = placed(fleet, admitted=T0, ended=T0 + timedelta(hours=1), accelerators=1, username="bob")
    assert done.job.queue_id == running.job.queue_id != other.job.queue_id

    for hours in (4, 5, 30):  # across midnights: records split and extended
        metering.meter(fleet.org, T0 + timedelta(hours=hours))
        assert_kept_is_every_record(fleet, T0 + timedelta(hours=hours))
    # Four accelerators for 3 h and two for 29 h, a day and a bit ago at a half-life of a week: about 60 hours.
    vision = kept(fleet)["vision"][0]
    assert 55 < vision < 4 * 3 + 2 * 29

    # The end of the long one is written late, before the last run: its records shrink, and so does what is kept.
    Attempt.objects.filter(pk=running.pk).update(ended_at=T0 + timedelta(hours=2), outcome="lost")
    metering.meter(fleet.org, T0 + timedelta(hours=31))
    assert_kept_is_every_record(fleet, T0 + timedelta(hours=31))
    assert kept(fleet)["vision"][0] < vision


def test_a_run_repeated_or_started_over_after_a_crash_counts_nothing_twice(fleet: Fleet) -> None:
    placed(fleet, admitted=T0, ended=T0 + timedelta(hours=2), accelerators=1)
    placed(fleet, admitted=T0, ended=None, accelerators=1, name="long")
    now = T0 + timedelta(hours=4)
    metering.meter(fleet.org, now)
    first = kept(fleet)
    metering.meter(fleet.org, now)
    MeterState.objects.all().delete()  # a worker died before it recorded its run
    metering.meter(fleet.org, now)
    assert kept(fleet).keys() == first.keys()
    for name, (hours, _) in kept(fleet).items():
        assert hours == pytest.approx(first[name][0], rel=1e-12)


def test_reconciliation_repairs_records_and_recent_use_together(fleet: Fleet) -> None:
    attempt = placed(fleet, admitted=T0, ended=T0 + timedelta(hours=2), accelerators=2)
    metering.meter(fleet.org, T0 + timedelta(hours=3))
    UsageRecord.objects.filter(attempt=attempt).update(seconds=10)  # a record damaged behind the meter's back
    UsageRecord.objects.filter(attempt=attempt).delete()  # or lost altogether
    metering.reconcile(fleet.org, since=T0 - timedelta(days=1))
    assert_kept_is_every_record(fleet, T0 + timedelta(hours=3))


def test_a_new_half_life_rebuilds_recent_use_from_the_records(fleet: Fleet) -> None:
    placed(fleet, admitted=T0, ended=T0 + timedelta(hours=6), accelerators=4)
    metering.meter(fleet.org, T0 + timedelta(days=2))
    week = kept(fleet)["vision"][0]

    adam = fleet.user("adam")
    change = fairshare.set_fair_share(adam, fleet.org, half_life=DAY, reason="a conference month: remember less")
    assert change is not None
    assert change.kind == QuotaChange.Kind.FAIR_SHARE
    assert (change.before, change.after) == ({"half_life": 7 * DAY}, {"half_life": DAY})
    assert AuditLog.objects.filter(action="fair_share.changed").exists()

    metering.meter(fleet.org, T0 + timedelta(days=2, minutes=1))
    day = kept(fleet)["vision"][0]
    assert_kept_is_every_record(fleet, T0 + timedelta(days=2, minutes=1))
    assert day < week / 3  # 24 h ago at a half-life of a day counts about half; at a week, about nine tenths
    assert FairShare.objects.get(organization=fleet.org).kept_with == DAY


def test_only_an_admin_sets_fair_share_and_each_bad_value_is_named(fleet: Fleet) -> None:
    with pytest.raises(PermissionDenied):
        fairshare.set_fair_share(fleet.user("lena"), fleet.org, half_life=DAY, reason="mine")
    with pytest.raises(ValidationError) as bad:
        fairshare.set_fair_share(fleet.user("adam"), fleet.org, half_life=60, usage_weight="lots", reason="")
    assert set(bad.value.message_dict) == {"half_life", "usage_weight", "reason"}
    assert not FairShare.objects.filter(organization=fleet.org).exists()
    assert fairshare.set_fair_share(fleet.user("adam"), fleet.org, usage_weight=1.0, reason="same") is None


def test_the_queue_that_used_less_lately_is_placed_first(fleet: Fleet) -> None:
    # A gang only the east cluster (4 nodes of 8) can hold, for each of two teams: robotics asked first, but
    # vision used nothing lately and robotics used a lot.
    placed(fleet, admitted=T0 - timedelta(days=1), ended=T0, accelerators=8, username="bob")
    metering.meter(fleet.org, T0)
    now = T0 + timedelta(minutes=5)
    feasibility.forget(fleet.org)
    snap, _ = snapshot.build(fleet.org, now)
    robotics = Queue.objects.get(team__slug="robotics", project=None).name
    assert snap.usage[robotics] == pytest.approx(decay(kept(fleet)[robotics][0], T0, now, 7 * DAY), rel=1e-12)
    assert snap.usage[robotics] > 150  # 8 accelerators for a day, a day ago
    assert snap.config.usage_weight == 1.0
    first = fleet.submit("bob", name="robotics-wants-all", accelerators=8, workers=4)
    second = fleet.submit("alice", name="vision-wants-all", accelerators=8, workers=4)
    fleet.cycle()
    states = dict(Job.objects.filter(pk__in=[first.pk, second.pk]).values_list("name", "state"))
    assert states["vision-wants-all"] != "pending"
    assert states["robotics-wants-all"] == "pending"
