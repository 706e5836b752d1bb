"""What a round of the notifications' outbox costs (``notifications/actions/outbox.py``): the admission benchmark's
organization, ``jobs`` jobs of ``users`` researchers across its teams, each job with a full life of job events
(admitted, placing, running, then succeeded or failed), and every researcher told of every event by e-mail.
The rounds that read them are timed with their queries counted, then a round with nothing new (the steady state
of the beat), then one that re-reads everything from a lost cursor (nothing is made twice)."""

from __future__ import annotations

import statistics
import time
from datetime import timedelta
from typing import Any
from unittest import mock

from django.contrib.auth import get_user_model
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from benchmarks import admission
from notifications.actions import outbox
from notifications.events import EVENTS
from notifications.models import Notification, OutboxCursor, Preference
from scheduler.models import Job, JobEvent
from tenancy.models import Membership
from tenancy.scoping import Role

LIFE = (("pending", "admitted", "admitted"), ("admitted", "placing", "dispatched"), ("placing", "running", "started"))


def _build(jobs: int, users: int) -> int:
    """The jobs and their events; returns how many events were written."""
    organization, plan, user = admission.setup(10, 1, 1, seed=1)
    admission.submit_all(plan, user)
    template = Job.objects.get(team__organization=organization)
    teams = list(organization.teams.order_by("pk"))
    model = get_user_model()
    people = []
    for i in range(users):
        person, _ = model.objects.get_or_create(username=f"bench-notify-{i}", defaults={"email": f"n{i}@bench.example"})
        Membership.objects.get_or_create(
            user=person, organization=organization, team=teams[i % len(teams)], role=Role.RESEARCHER
        )
        Preference.objects.update_or_create(
            user=person, defaults={"events": {code: ["email"] for code in EVENTS}, "updated_at": timezone.now()}
        )
        people.append(person)
    fields = {
        f.attname: getattr(template, f.attname)
        for f in Job._meta.concrete_fields
        if not f.primary_key and f.attname not in ("idempotency_key", "team_id", "submitted_by_id")
    }
    newest = JobEvent.objects.order_by("-pk").values_list("pk", flat=True).first() or 0
    OutboxCursor.objects.update_or_create(name=outbox.CURSOR, defaults={"last_id": newest})
    at = timezone.now() - timedelta(minutes=10)  # settled: the cursor may move past them
    written = 0
    batch = 2000
    for start in range(0, jobs, batch):
        rows = []
        for i in range(start, min(jobs, start + batch)):
            person = people[i % users]
            rows.append(
                Job(**{**fields, "name": f"notify-{i}", "team": teams[(i % users) % len(teams)],
                       "submitted_by": person, "submitted_at": timezone.now()})
            )  # fmt: skip
        made = Job.objects.bulk_create(rows)
        events = []
        for i, job in enumerate(made):
            end = ("running", "succeeded", "succeeded") if i % 4 else ("running", "failed", "exit_code")
            for frm, to, reason in (*LIFE, end):
                events.append(JobEvent(job=job, created_at=at, from_state=frm, to_state=to, reason=reason))
        JobEvent.objects.bulk_create(events)
        written += len(events)
    return written


def _round(now: Any) -> tuple[float, int, int]:
    """One round of the beat (deliveries counted, not sent): seconds, queries, notifications made."""
    with mock.patch("common.enqueue.send"), CaptureQueriesContext(connection) as captured:
        started = time.perf_counter()
        made = outbox.collect(now)
        return time.perf_counter() - started, len(captured.captured_queries), len(made)


def run(jobs: int, users: int) -> dict[str, Any]:
    written = _build(jobs, users)
    reverse_once = outbox.job_link(1)  # the URL resolver loads once per process, not per round
    assert reverse_once
    now = timezone.now()
    rounds: list[dict[str, Any]] = []
    while True:
        seconds, queries, made = _round(now)
        rounds.append({"seconds": round(seconds, 3), "queries": queries, "made": made})
        if made == 0:
            break
    steady = [_round(now) for _ in range(5)]
    OutboxCursor.objects.filter(name=outbox.CURSOR).update(last_id=0)
    lost, at = [], -1
    while (cursor := OutboxCursor.objects.get(name=outbox.CURSOR).last_id) != at:  # until it stops moving
        at = cursor
        lost.append(_round(now))
    made = Notification.objects.filter(user__username__startswith="bench-notify-").count()
    reading = [r for r in rounds if r["made"]]
    return {
        "jobs": jobs,
        "users": users,
        "job_events": written,
        "notifications": made,
        "rounds_to_read_all": len(reading),
        "seconds_to_read_all": round(sum(r["seconds"] for r in reading), 3),
        "notifications_per_second": round(made / max(1e-9, sum(r["seconds"] for r in reading))),
        "rounds": reading,
        "idle_round_seconds_median": round(statistics.median(s for s, _, _ in steady), 4),
        "idle_round_queries": steady[-1][1],
        "lost_cursor_rounds": len(lost),
        "lost_cursor_seconds": round(sum(s for s, _, _ in lost), 3),
        "lost_cursor_made": sum(m for _, _, m in lost),
    }
