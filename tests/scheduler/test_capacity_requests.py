"""Capacity requests end to end (docs/scheduling.md §Bookings): a lead asks for a reservation or more quota, an
admin approves or refuses it with a reason (the audit log says each step), another team cannot see it; an
approved reservation books whole nodes that the team's jobs take back from other teams' preemptible work and
other teams' work that cannot be stopped stays off; a temporary quota counts while it holds, its leads are told
ahead, and it lapses on its date; more quota for good raises the quota itself."""

from __future__ import annotations

from datetime import timedelta
from decimal import Decimal
from typing import Any

import pytest
from django.core import mail
from django.test import Client
from django.utils import timezone

from billing import attribution
from governance.actions import capacity, quotas
from governance.models import CapacityRequest, Queue, Quota, QuotaChange
from scheduler.models import Attempt, Job, JobEvent
from scheduler.placement import snapshot
from tenancy.models import AuditLog
from tests.conftest import api_client
from tests.scheduler.conftest import Fleet

pytestmark = pytest.mark.django_db

H100 = "H100-SXM-80GB"


def iso(delta: timedelta) -> str:
    return (timezone.now() + delta).isoformat()


def ask_reservation(fleet: Fleet, start: timedelta, end: timedelta, accelerators: int = 8) -> dict[str, Any]:
    body = {
        "team": "vision",
        "kind": "reservation",
        "flavor": H100,
        "accelerators": accelerators,
        "starts_at": iso(start),
        "ends_at": iso(end),
        "reason": "CVPR deadline",
    }
    answer = api_client(fleet.user("lena")).post("/api/v1/capacity-requests/", body, format="json")
    assert answer.status_code == 201, answer.json()
    return dict(answer.json())


def approve(fleet: Fleet, pk: object, **body: object) -> dict[str, Any]:
    answer = api_client(fleet.user("adam")).post(
        f"/api/v1/capacity-requests/{pk}/decide/",
        {"approve": True, "reason": "the deadline matters", **body},
        format="json",
    )
    assert answer.status_code == 200, answer.json()
    return dict(answer.json())


def test_a_lead_asks_an_admin_approves_and_the_reservation_books_whole_nodes(fleet: Fleet) -> None:
    asked = ask_reservation(fleet, timedelta(days=1), timedelta(days=3), accelerators=12)
    assert (asked["state"], asked["nodes"], asked["requested_by_name"]) == ("pending", [], "lena")
    # a researcher of the team reads it but may not decide; another team does not see it at all
    alice = api_client(fleet.user("alice"))
    assert alice.get(f"/api/v1/capacity-requests/{asked['id']}/").status_code == 200
    refused = alice.post(
        f"/api/v1/capacity-requests/{asked['id']}/decide/", {"approve": True, "reason": "x"}, format="json"
    )
    assert refused.status_code == 403
    bob = api_client(fleet.user("bob"))
    assert bob.get(f"/api/v1/capacity-requests/{asked['id']}/").status_code == 404
    assert bob.get("/api/v1/capacity-requests/").json()["results"] == []

    decided = approve(fleet, asked["id"], cluster="east")
    assert decided["state"] == "approved"
    assert decided["cluster"] == "east"
    assert len(decided["nodes"]) == 2  # twelve H100: two whole nodes of eight
    assert decided["decision"] == "the deadline matters"
    again = api_client(fleet.user("adam")).post(
        f"/api/v1/capacity-requests/{asked['id']}/decide/", {"approve": False, "reason": "no"}, format="json"
    )
    assert again.status_code == 400
    assert "already approved" in str(again.json())
    actions = list(AuditLog.objects.filter(action__startswith="capacity.").values_list("action", flat=True))
    assert sorted(actions) == ["capacity.approved", "capacity.requested"]

    # The loop sees the booking: the nodes, the team, the window.
    snap, _ = snapshot.build(fleet.org, timezone.now() + timedelta(days=1))
    (booking,) = snap.bookings
    assert (booking.team, booking.cluster) == ("vision", "east")
    assert sorted(booking.nodes) == sorted(f"east/{n}" for n in decided["nodes"])

    # A second reservation over the same window cannot have the same nodes: east has two of its four left.
    second = ask_reservation(fleet, timedelta(days=2), timedelta(days=4), accelerators=24)
    too_many = api_client(fleet.user("adam")).post(
        f"/api/v1/capacity-requests/{second['id']}/decide/",
        {"approve": True, "reason": "also", "cluster": "east"},
        format="json",
    )
    assert too_many.status_code == 400
    assert "Only 16 H100-SXM-80GB can be booked on east" in str(too_many.json())
    assert CapacityRequest.objects.get(pk=second["id"]).state == "pending"  # nothing written


def test_bad_requests_are_refused_naming_each_field_and_nothing_is_written(fleet: Fleet) -> None:
    lena = api_client(fleet.user("lena"))
    body = {
        "team": "vision",
        "kind": "reservation",
        "flavor": "Z9000",
        "accelerators": 8,
        "starts_at": iso(timedelta(days=-2)),
        "reason": " ",
    }
    answer = lena.post("/api/v1/capacity-requests/", body, format="json")
    assert answer.status_code == 400
    errors = answer.json()
    assert "Unknown accelerator type 'Z9000'" in str(errors)
    assert "ends_at" in str(errors)
    assert "starts_at" in str(errors)
    backwards = {**body, "flavor": H100, "starts_at": iso(timedelta(days=2)), "ends_at": iso(timedelta(days=1))}
    assert "Must be after the start" in str(
        lena.post("/api/v1/capacity-requests/", {**backwards, "reason": "x"}, format="json").json()
    )
    alice = api_client(fleet.user("alice"))
    assert alice.post("/api/v1/capacity-requests/", {**backwards, "reason": "x"}, format="json").status_code == 403
    assert not CapacityRequest.objects.exists()


def test_the_team_takes_its_booked_node_back_and_other_work_that_cannot_stop_stays_off(fleet: Fleet) -> None:
    # robotics fills the fleet with preemptible work of its own tier: without the booking nothing could move it
    theirs = [fleet.submit("bob", accelerators=8, name=f"sim-{i}") for i in range(6)]
    fleet.cycle()
    fleet.follow()
    assert Attempt.objects.filter(job__in=theirs, outcome="active").count() == 6
    asked = ask_reservation(fleet, timedelta(minutes=-1), timedelta(days=1))
    decided = approve(fleet, asked["id"], cluster="east")
    (booked_node,) = decided["nodes"]
    mine = fleet.submit("alice", accelerators=8, name="deadline")
    assert fleet.cycle().preempted == 1
    event = JobEvent.objects.get(reason="preempted_booked")
    assert event.job.team.slug == "robotics"
    assert Attempt.objects.get(job=event.job, outcome="active").assignments.get().node.name == booked_node
    assert "capacity team vision reserved ahead" in event.message
    assert Job.objects.get(pk=mine.pk).state == Job.State.PENDING  # waiting for the victim's grace


def test_a_temporary_quota_counts_while_it_holds_its_leads_are_told_ahead_and_it_lapses(fleet: Fleet) -> None:
    adam, lena = fleet.user("adam"), fleet.user("lena")
    queue = Queue.objects.get(team__slug="vision", project=None)
    quotas.set_quota(adam, queue, flavor=H100, nominal=8, reason="vision's share")
    ends = timezone.now() + timedelta(days=5)
    request = capacity.ask(
        lena, fleet.world.teams["vision"], kind="quota", flavor=H100, accelerators=16, ends_at=ends, reason="ablations"
    )
    capacity.decide(adam, request, approve=True, reason="fine until the 5th")

    def nominal(at: timedelta) -> int:
        snap, _ = snapshot.build(fleet.org, timezone.now() + at)
        return next(q for q in snap.queues if q.name == queue.name).quotas[(H100, "accelerator")].nominal

    assert nominal(timedelta(0)) == 24_000  # 8 + 16 H100, in milli-accelerators
    assert nominal(timedelta(days=6)) == 8_000
    assert capacity.settle(timezone.now()) == {"ended": 0, "told": 0}
    told = capacity.settle(ends - timedelta(days=1))
    assert told == {"ended": 0, "told": 1}
    (message,) = mail.outbox
    assert message.to == ["lena@demo.example"]
    assert "ends at" in message.body
    assert f"capacity request {request.pk} ends soon" in message.subject
    assert capacity.settle(ends - timedelta(hours=12)) == {"ended": 0, "told": 0}  # once
    assert capacity.settle(ends + timedelta(seconds=1)) == {"ended": 1, "told": 0}
    assert CapacityRequest.objects.get(pk=request.pk).state == "ended"
    assert AuditLog.objects.filter(action="capacity.ended").count() == 1
    assert Quota.objects.get(queue=queue, flavor__name=H100).nominal == Decimal(8)  # the quota itself never moved


def test_more_quota_for_good_raises_the_quota_itself_in_the_history(fleet: Fleet) -> None:
    adam, lena = fleet.user("adam"), fleet.user("lena")
    queue = Queue.objects.get(team__slug="vision", project=None)
    quotas.set_quota(adam, queue, flavor=H100, nominal=8, reason="vision's share")
    request = capacity.ask(lena, fleet.world.teams["vision"], kind="quota", flavor=H100, accelerators=4, reason="grow")
    capacity.decide(adam, request, approve=True, reason="the team grew")
    assert Quota.objects.get(queue=queue, flavor__name=H100).nominal == Decimal(12)
    assert QuotaChange.objects.filter(team__slug="vision").latest("pk").reason == (
        f"capacity request {request.pk}: the team grew"
    )
    withdrawn = api_client(lena).post(
        f"/api/v1/capacity-requests/{request.pk}/withdraw/", {"reason": "x"}, format="json"
    )
    assert withdrawn.status_code == 400  # it is the quota now: change that instead


def test_the_quota_pages_ask_list_and_decide(fleet: Fleet) -> None:
    vision = fleet.world.teams["vision"]
    lena, adam = Client(), Client()
    lena.force_login(fleet.user("lena"))
    adam.force_login(fleet.user("adam"))
    url = f"/teams/{vision.pk}/quotas/capacity/"
    start = (timezone.now() + timedelta(days=1)).strftime("%Y-%m-%dT%H:%M")
    bad = lena.post(url, {"kind": "reservation", "flavor": H100, "starts_at": start, "reason": "deadline"})
    assert bad.status_code == 400
    page = bad.content.decode()
    assert "This field is required." in page  # the accelerators
    assert "A reservation needs an end." not in page  # the form's own check comes first; nothing was written
    assert not CapacityRequest.objects.exists()
    end = (timezone.now() + timedelta(days=2)).strftime("%Y-%m-%dT%H:%M")
    body = {"kind": "reservation", "flavor": H100, "accelerators": "8", "starts_at": start, "reason": "deadline"}
    no_end = lena.post(url, body)
    assert no_end.status_code == 400
    assert "A reservation needs an end." in no_end.content.decode()
    made = lena.post(url, {**body, "ends_at": end})
    assert made.status_code == 302
    request = CapacityRequest.objects.get()
    assert "deadline" in lena.get(f"/teams/{vision.pk}/quotas/").content.decode()

    pending = adam.get("/quotas/").content.decode()
    assert f'action="/quotas/capacity/{request.pk}/decide/"' in pending
    refused = adam.post(f"/quotas/capacity/{request.pk}/decide/", {"decision": "refuse", "reason": "no room that week"})
    assert refused.status_code == 302
    assert CapacityRequest.objects.get().state == "refused"
    team_page = lena.get(f"/teams/{vision.pk}/quotas/").content.decode()
    assert "no room that week" in team_page
    assert 'data-state="refused"' in team_page


def test_a_reservation_is_held_for_billing_day_by_day_and_ending_it_early_stops_that(fleet: Fleet) -> None:
    lena, adam = fleet.user("lena"), fleet.user("adam")
    now = timezone.now().replace(microsecond=0)
    start = now - timedelta(hours=30)
    # approved yesterday for a window that began 30 hours ago and ends in two days (the clock of ``now``)
    request = capacity.ask(
        lena,
        fleet.world.teams["vision"],
        kind="reservation",
        flavor=H100,
        accelerators=8,
        starts_at=start,
        ends_at=now + timedelta(days=2),
        reason="deadline",
        now=start,
    )
    capacity.decide(adam, request, approve=True, reason="ok", cluster="east", now=start)
    ended = capacity.withdraw(lena, request, reason="submitted early", now=now)
    assert (ended.state, ended.ends_at) == ("ended", now)
    first, after = attribution.month_bounds(start.date())
    held = attribution.booked(fleet.org.pk, first, after)
    if now.month != start.month:  # the window crosses a month: read both
        held.update(attribution.booked(fleet.org.pk, *attribution.month_bounds(now.date())))
    assert {asker for _, asker in held.values()} == {lena.pk}
    # eight accelerators for the 30 hours it was held, in thousandth-accelerator-seconds, cut at midnights
    assert sum(ms for ms, _ in held.values()) == 8 * 30 * 3600 * 1000
    assert len(held) == len({day for _, _, day in held})  # one team, one pool: a row a day
    withdrawn = capacity.ask(
        lena,
        fleet.world.teams["vision"],
        kind="quota",
        flavor=H100,
        accelerators=2,
        ends_at=now + timedelta(days=9),
        reason="x",
    )
    assert capacity.withdraw(lena, withdrawn, reason="not needed").state == "withdrawn"
