"""The SLOs as the portal computes them from its own rows: jobs admitted in time (those that waited for their
quota left out), attempts running in time, the minute samples of the loop and the clusters (a minute without
a sample is bad for the loop); the error budget and burn rates; and the SLO page, for organization admins
only, each seeing their own organization."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.test import Client
from django.utils import timezone

from observability import slo
from observability.actions import sampling
from observability.models import SloSample
from scheduler.models import Attempt, Job, JobEvent, LoopState
from scheduler.placement import outcomes
from serving import actions as serving_actions
from serving.models import ServiceSample
from tests.scheduler.conftest import Fleet, fleet  # noqa: F401 - the fleet fixture
from tests.serving.harness import service_fields


def back(seconds: float) -> Any:
    return timezone.now() - timedelta(seconds=seconds)


def test_admissions_in_time_and_late_ones_and_jobs_still_waiting_count(fleet: Fleet) -> None:  # noqa: F811
    jobs = [fleet.submit(accelerators=8, name=f"j{i}") for i in range(8)]  # the fleet holds six
    fleet.cycle()
    since, until = back(3600), timezone.now() + timedelta(seconds=1)
    assert slo.count_admissions(fleet.org, since, until) == (6, 6)  # the two waiting have not waited 60 s yet

    waiting = list(Job.objects.filter(pk__in=[j.pk for j in jobs], state=Job.State.PENDING).order_by("pk"))
    assert len(waiting) == 2
    Job.objects.filter(pk=waiting[0].pk).update(submitted_at=back(300))  # waited 5 min for capacity: bad
    Job.objects.filter(pk=waiting[1].pk).update(submitted_at=back(300), pending_reason="quota_exhausted")  # left out
    assert slo.count_admissions(fleet.org, since, until) == (6, 7)

    admitted = Job.objects.filter(pk__in=[j.pk for j in jobs], state=Job.State.PLACING).order_by("pk")
    late, over_quota = admitted[0], admitted[1]
    Job.objects.filter(pk=late.pk).update(submitted_at=back(200))  # admitted over 60 s after its submission
    Job.objects.filter(pk=over_quota.pk).update(submitted_at=back(200))
    JobEvent.objects.filter(job=over_quota, reason="admitted").update(detail={"waited_for": "quota_exhausted"})
    assert slo.count_admissions(fleet.org, since, until) == (4, 6)
    # Another organization's jobs are its own.
    assert slo.count_admissions(fleet.world.other_org, since, until) == (0, 0)


def test_the_admitted_event_says_what_the_job_waited_for(fleet: Fleet) -> None:  # noqa: F811
    jobs = [fleet.submit(accelerators=8, name=f"j{i}") for i in range(7)]
    fleet.cycle()
    fleet.follow()
    last = Job.objects.get(pk__in=[j.pk for j in jobs], state=Job.State.PENDING)
    assert last.pending_reason in ("capacity", "reserved")
    running = Attempt.objects.filter(job__state=Job.State.RUNNING).select_related("job").first()
    assert running is not None
    assert outcomes.end(running, "succeeded", "Finished.", timezone.now())  # its accelerators are free again
    fleet.cycle()
    event = JobEvent.objects.get(job=last, reason="admitted")
    assert event.detail["waited_for"] == last.pending_reason


def test_attempts_running_in_time_late_and_never(fleet: Fleet) -> None:  # noqa: F811
    [fleet.submit(accelerators=8, name=f"j{i}") for i in range(3)]
    fleet.cycle()
    fleet.follow()
    since, until = back(3600), timezone.now() + timedelta(seconds=1)
    assert slo.count_starts(fleet.org, since, until) == (3, 3)
    attempts = list(Attempt.objects.filter(job__team__organization=fleet.org).order_by("pk"))
    Attempt.objects.filter(pk=attempts[0].pk).update(admitted_at=back(900))  # ran 15 min after its admission
    Attempt.objects.filter(pk=attempts[1].pk).update(admitted_at=back(900), started_at=None)  # never ran
    assert slo.count_starts(fleet.org, since, until) == (1, 3)
    # Cancelled before it ran: not the service's failure.
    Attempt.objects.filter(pk=attempts[1].pk).update(outcome=Attempt.Outcome.CANCELLED)
    assert slo.count_starts(fleet.org, since, until) == (1, 2)


def test_samples_of_the_loop_and_the_clusters_and_a_missing_minute(fleet: Fleet) -> None:  # noqa: F811
    start = timezone.now().replace(second=0, microsecond=0) - timedelta(minutes=10)
    assert sampling.sample(start + timedelta(seconds=5)) >= 2
    sampling.sample(start + timedelta(seconds=30))  # the same minute again: nothing new
    assert SloSample.objects.filter(organization=fleet.org, minute=start).count() == 2
    loop_counter, sync_counter = slo.BY_NAME["loop"].count, slo.BY_NAME["cluster_sync"].count
    assert loop_counter(fleet.org, start, start + timedelta(minutes=1)) == (1, 1)
    assert sync_counter(fleet.org, start, start + timedelta(minutes=1)) == (2, 2)

    # Jobs wait and the loop stopped two minutes ago; the sample at minute 3 finds it silent. Minutes 1 and 2
    # have no sample at all (no beat: no loop either), so they count as bad too.
    jobs = [fleet.submit(accelerators=8) for _ in range(7)]
    fleet.cycle()
    LoopState.objects.filter(organization=fleet.org).update(last_cycle_at=start)
    Job.objects.filter(pk__in=[j.pk for j in jobs], state=Job.State.PENDING).update(state_changed_at=start)
    sampling.sample(start + timedelta(minutes=3, seconds=5))
    assert loop_counter(fleet.org, start, start + timedelta(minutes=4)) == (1, 4)
    # The clusters count only in the minutes sampled (both fresh: the fixture synced them just now).
    assert sync_counter(fleet.org, start, start + timedelta(minutes=4)) == (4, 4)


def test_inference_requests_count_from_the_services_samples(fleet: Fleet) -> None:  # noqa: F811
    """What the control loop sampled of each service's load: the errors (server errors) are the bad events."""
    service = serving_actions.create_service(
        fleet.user("alice"), team=fleet.world.teams["vision"], name="chat", **service_fields()
    )
    now = timezone.now()
    for minutes, requests, errors in ((1, 100, 2), (2, 50, 0), (30, 10, 10)):
        at = now - timedelta(minutes=minutes)
        ServiceSample.objects.create(service=service, at=at, requests=requests, errors=errors)
    count = slo.BY_NAME["serving"].count
    assert count(fleet.org, now - timedelta(minutes=10), now) == (148, 150)
    assert count(fleet.org, now - timedelta(hours=1), now) == (148, 160)
    assert count(fleet.world.other_org, now - timedelta(hours=1), now) == (0, 0)  # another organization's


def test_budget_left_and_burn_rates(fleet: Fleet, monkeypatch: pytest.MonkeyPatch) -> None:  # noqa: F811
    counts = {timedelta(days=30): (9990, 10000), timedelta(hours=1): (90, 100)}

    def count(organization: Any, since: Any, until: Any) -> tuple[int, int]:
        return counts.get(until - since, (0, 0))

    target = slo.Slo("t", "T", "test", 0.99, "1", "1", count)
    now = timezone.now()
    standing = slo.standing(target, fleet.org, now)
    assert standing.budget_left == pytest.approx(0.9)  # 10 bad of 100 allowed in 10,000
    assert standing.attained_percent == pytest.approx(99.9)
    rates = {b.window: b.rate for b in standing.burns}
    assert rates["1h"] == pytest.approx(10.0)  # 10% bad over the hour: ten times the budget's pace
    assert rates["6h"] is None  # no events: no rate


def test_the_slo_page_is_for_organization_admins_each_seeing_their_own(fleet: Fleet) -> None:  # noqa: F811
    [fleet.submit(accelerators=8, name=f"j{i}") for i in range(3)]
    fleet.cycle()
    client = Client()
    assert client.get("/slo/").status_code == 302  # sign in first
    for name in ("alice", "lena", "fiona"):
        client.force_login(fleet.user(name))
        assert client.get("/slo/").status_code == 403, name

    client.force_login(fleet.user("adam"))
    page = client.get("/slo/")
    assert page.status_code == 200
    html = page.content.decode()
    assert 'data-testid="slo-demo"' in html
    assert 'data-testid="slo-rival"' not in html
    for definition in slo.SLOS:
        assert f'data-slo="{definition.name}"' in html
    assert "3 / 3" in html  # three admissions, all in time
    assert "SLOs" in html  # the navigation's link

    client.force_login(fleet.user("mallory"))  # the other organization's admin
    html = client.get("/slo/").content.decode()
    assert 'data-testid="slo-rival"' in html
    assert 'data-testid="slo-demo"' not in html
