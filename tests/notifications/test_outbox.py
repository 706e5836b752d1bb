"""Job events become notifications once, as each user chose, and are delivered until taken."""

from __future__ import annotations

import threading
from datetime import datetime, timedelta
from typing import Any

import pytest
from django.core import mail
from django.core.exceptions import ValidationError
from django.db import connection
from django.utils import timezone

from common import webhooks
from notifications import events, tasks
from notifications.actions import outbox, preferences
from notifications.models import Notification, OutboxCursor, Preference
from scheduler.actions import lifecycle
from scheduler.models import Attempt, Job
from scheduler.watch.rounds import HUNG, STRAGGLER
from tenancy.models import Membership
from tests.conftest import Hook
from tests.scheduler.conftest import Fleet

S = Job.State


def run_to(job: Job, *moves: tuple[str, str]) -> Job:
    """Move ``job`` through ``moves`` (state, reason), as the placement loop and the follow loop would."""
    for state, reason in moves:
        job.refresh_from_db()
        assert lifecycle.move(job, state, reason, f"moved to {state}")
    return job


STARTED = ((S.ADMITTED, "admitted"), (S.PLACING, "dispatched"), (S.RUNNING, "started"))


def sent(user: Any) -> list[tuple[str, str]]:
    return sorted(Notification.objects.filter(user=user).values_list("event", "channel"))


def settle() -> datetime:
    """A moment after every event so far has settled (the cursor moves past them)."""
    return timezone.now() + outbox.SETTLE + timedelta(seconds=1)


def test_job_events_become_notifications_once_and_are_sent_once(
    fleet: Fleet, cursor: OutboxCursor, hook: tuple[str, type[Hook]], queued: list[int]
) -> None:
    url, receiver = hook
    alice = fleet.user("alice")
    preferences.set_own(alice, events={"started": ["email"], "succeeded": ["email", "webhook"]}, webhook_url=url)
    job = run_to(fleet.submit("alice", name="resnet <sweep>"), *STARTED, (S.SUCCEEDED, "succeeded"))

    made = outbox.collect()
    assert sent(alice) == [("started", "email"), ("succeeded", "email"), ("succeeded", "webhook")]
    assert sorted(queued) == sorted(made)
    # Read again (the cursor has not moved past events this young), and again after they settled: nothing twice.
    assert outbox.collect() == []
    assert outbox.collect(settle()) == []
    cursor.refresh_from_db()
    assert cursor.last_id == job.events.order_by("-pk").first().pk  # type: ignore[union-attr]
    OutboxCursor.objects.filter(pk=cursor.pk).update(last_id=0)  # a cursor lost: everything read again
    assert outbox.collect(settle()) == []
    assert Notification.objects.count() == 3

    for pk in made:
        assert outbox.deliver(pk)
        assert outbox.deliver(pk)  # a retried task: sent once
    assert sorted(m.subject for m in mail.outbox) == [
        f"[Quartermaster] Job {job.pk} (resnet <sweep>) started",
        f"[Quartermaster] Job {job.pk} (resnet <sweep>) succeeded",
    ]
    assert all(m.to == ["alice@demo.example"] for m in mail.outbox)
    assert f"/jobs/{job.pk}/" in mail.outbox[0].body
    ((headers, body),) = receiver.received
    hooked = Notification.objects.get(channel="webhook")
    assert headers["Idempotency-Key"] == f"quartermaster-notification-{hooked.pk}"
    assert body["text"].startswith(f"Job {job.pk} (resnet <sweep>) succeeded (team Vision).")
    assert body["blocks"][0] == {
        "type": "section",
        "text": {"type": "mrkdwn", "text": body["text"].split("\n")[0].replace("<", "&lt;").replace(">", "&gt;")},
    }
    assert f"/jobs/{job.pk}/|Open job {job.pk}>" in body["blocks"][1]["elements"][0]["text"]
    assert set(Notification.objects.values_list("sent_to", flat=True)) == {
        "alice@demo.example",
        webhooks.host_of(url),
    }
    assert "secret-token" not in hooked.sent_to


def test_the_built_in_defaults_mail_failures_and_preemptions_only(fleet: Fleet, cursor: OutboxCursor) -> None:
    alice = fleet.user("alice")
    run_to(fleet.submit("alice"), *STARTED, (S.PREEMPTING, "preempted_priority"), (S.REQUEUED, "preempted"))
    run_to(fleet.submit("alice"), *STARTED, (S.SUCCEEDED, "succeeded"))
    run_to(fleet.submit("alice"), *STARTED, (S.FAILED, "exit_code"))
    # Reaching the time limit moves a job to preempting too: that is not a preemption (its failure is told).
    run_to(fleet.submit("alice"), *STARTED, (S.PREEMPTING, Attempt.Stop.TIME_LIMIT))
    outbox.collect()
    assert sent(alice) == [("failed", "email"), ("preempted", "email")]


def test_a_users_choice_overrides_the_team_default_which_overrides_the_built_in(
    fleet: Fleet, cursor: OutboxCursor, hook: tuple[str, type[Hook]], queued: list[int]
) -> None:
    url, receiver = hook
    alice, bob, lena = fleet.user("alice"), fleet.user("bob"), fleet.user("lena")
    vision = fleet.world.teams["vision"]
    # Vision's lead: its members are told of successes by the team's webhook, and not of failures.
    preferences.set_team_defaults(lena, vision, events={"succeeded": ["webhook"], "failed": []}, webhook_url=url)
    # Alice wants her failures by e-mail all the same.
    preferences.set_own(alice, events={"failed": ["email"]})
    run_to(fleet.submit("alice"), *STARTED, (S.SUCCEEDED, "succeeded"))
    run_to(fleet.submit("alice"), *STARTED, (S.FAILED, "exit_code"))
    run_to(fleet.submit("lena"), *STARTED, (S.FAILED, "exit_code"))  # the team's default for its lead too
    # Bob is in robotics: vision's defaults are nothing to him.
    run_to(
        fleet.submit("bob"),
        *STARTED,
        (S.SUCCEEDED, "succeeded"),
    )
    outbox.collect()
    assert sent(alice) == [("failed", "email"), ("succeeded", "webhook")]
    assert sent(lena) == []
    assert sent(bob) == []
    for pk in queued:
        outbox.deliver(pk)
    ((_, body),) = receiver.received  # alice's success, to the team's webhook (she set none of her own)
    assert "succeeded (team Vision)" in body["text"]
    resolved = preferences.for_user(alice, vision)
    assert resolved.channels("failed") == {"email"}
    assert resolved.channels("preempted") == {"email"}  # built in


def test_only_the_submitter_is_told_while_a_member_of_the_jobs_team(fleet: Fleet, cursor: OutboxCursor) -> None:
    alice, lena = fleet.user("alice"), fleet.user("lena")
    preferences.set_own(lena, events={"failed": ["email"], "succeeded": ["email"]})
    first = fleet.submit("alice")
    second = fleet.submit("alice")
    Membership.objects.filter(user=alice).delete()  # she left the team
    run_to(first, *STARTED, (S.FAILED, "exit_code"))
    outbox.collect(settle())  # read, and past: what was nobody's news stays so
    assert Notification.objects.count() == 0  # not alice, who left; not lena, whose job it is not
    Membership.objects.create(user=alice, organization=fleet.org, team=fleet.world.teams["vision"], role="researcher")
    run_to(second, *STARTED, (S.FAILED, "exit_code"))
    outbox.collect()
    assert sent(alice) == [("failed", "email")]
    assert sent(lena) == []


def test_stragglers_and_hangs_flagged_by_the_watch_round_are_told(fleet: Fleet, cursor: OutboxCursor) -> None:
    alice = fleet.user("alice")
    job = run_to(fleet.submit("alice"), *STARTED)
    straggler = lifecycle.note(job, STRAGGLER, "worker 3 is 40% slower than the others")
    hang = lifecycle.note(job, HUNG, "no progress for 30 minutes")
    assert (events.classify(straggler), events.classify(hang)) == (events.STRAGGLER_FLAGGED, events.HANG_FLAGGED)
    outbox.collect(settle())
    assert sent(alice) == [("hang", "email")]  # a straggler is told only to who asked
    preferences.set_own(alice, events={"straggler": ["email"]})
    lifecycle.note(job, STRAGGLER, "worker 2 is slower")
    outbox.collect()
    assert sent(alice) == [("hang", "email"), ("straggler", "email")]
    n = Notification.objects.get(event="straggler")
    assert "worker 2 is slower" in n.message
    assert n.job_event is not None


def test_a_job_waiting_longer_than_its_submitters_hours_is_told_once(fleet: Fleet, cursor: OutboxCursor) -> None:
    alice, bob = fleet.user("alice"), fleet.user("bob")
    preferences.set_own(alice, wait_hours=2)
    long_ago, lately = fleet.submit("alice"), fleet.submit("alice")
    bobs = fleet.submit("bob")  # bob keeps the built-in 24 hours
    now = timezone.now()
    Job.objects.filter(pk__in=[long_ago.pk, bobs.pk]).update(submitted_at=now - timedelta(hours=3))
    Job.objects.filter(pk=lately.pk).update(submitted_at=now - timedelta(hours=1))
    outbox.collect(now)
    assert list(Notification.objects.values_list("job", "user", "event")) == [(long_ago.pk, alice.pk, "waiting")]
    assert "submitted 3 hours ago and is still pending" in Notification.objects.get().message
    outbox.collect(now + timedelta(minutes=5))
    assert Notification.objects.count() == 1  # once
    outbox.collect(now + timedelta(hours=2))  # lately passes alice's 2 hours
    assert sorted(Notification.objects.values_list("job", flat=True)) == sorted([long_ago.pk, lately.pk])
    outbox.collect(now + timedelta(hours=22))  # bob's passes 24
    assert Notification.objects.filter(user=bob).count() == 1
    assert Notification.objects.count() == 3


def test_a_failing_webhook_is_retried_until_it_answers_then_given_up_after_the_last_attempt(
    fleet: Fleet, cursor: OutboxCursor, hook: tuple[str, type[Hook]], queued: list[int]
) -> None:
    url, receiver = hook
    alice = fleet.user("alice")
    preferences.set_own(alice, events={"failed": ["webhook"], "succeeded": ["webhook"]}, webhook_url=url)
    run_to(fleet.submit("alice"), *STARTED, (S.FAILED, "exit_code"))
    (pk,) = outbox.collect()
    receiver.status = 503
    with pytest.raises(outbox.DeliveryFailed):
        outbox.deliver(pk)
    n = Notification.objects.get(pk=pk)
    assert (n.attempts, n.sent_at, n.last_error, outbox.state(n)) == (1, None, webhooks.FAILED, "retrying")
    later = timezone.now() + timedelta(minutes=3)
    assert outbox.undelivered(now=later) == [pk]  # the beat queues it again if its task was lost
    receiver.status = 200
    assert outbox.deliver(pk)
    n.refresh_from_db()
    assert (n.attempts, outbox.state(n), n.last_error) == (2, "sent", "")
    assert outbox.undelivered(now=later) == []
    assert len(receiver.received) == 2  # the failed try and the one that was taken

    run_to(fleet.submit("alice"), *STARTED, (S.SUCCEEDED, "succeeded"))
    (pk,) = outbox.collect()
    receiver.status = 500
    for _ in range(outbox.MAX_ATTEMPTS - 1):
        with pytest.raises(outbox.DeliveryFailed):
            outbox.deliver(pk)
    assert outbox.deliver(pk) is False  # the last attempt: given up, with its error
    assert outbox.deliver(pk) is False
    n = Notification.objects.get(pk=pk)
    assert (n.attempts, outbox.state(n), n.last_error) == (outbox.MAX_ATTEMPTS, "failed", webhooks.FAILED)
    assert outbox.undelivered(now=later) == []
    assert len(receiver.received) == 2 + outbox.MAX_ATTEMPTS


def test_a_private_webhook_is_refused_when_saved_and_again_when_sent(
    fleet: Fleet, cursor: OutboxCursor, settings: Any, queued: list[int]
) -> None:
    settings.WEBHOOKS_ALLOW_PRIVATE = False
    alice = fleet.user("alice")
    with pytest.raises(ValidationError) as refused:
        preferences.set_own(alice, events={"failed": ["webhook"]}, webhook_url="http://10.1.2.3/hook")
    assert "private network" in refused.value.message_dict["webhook_url"][0]
    with pytest.raises(ValidationError) as refused:
        preferences.set_own(alice, events={"failed": ["webhook"]}, webhook_url="http://169.254.169.254/latest")
    assert "metadata" in refused.value.message_dict["webhook_url"][0]
    assert not Preference.objects.exists()
    # One saved before the rule (or a name that resolves elsewhere today) is refused at the send.
    Preference.objects.create(
        user=alice, events={"failed": ["webhook"]}, webhook_url="http://127.0.0.1:9/hook", updated_at=timezone.now()
    )
    run_to(fleet.submit("alice"), *STARTED, (S.FAILED, "exit_code"))
    (pk,) = outbox.collect()
    with pytest.raises(outbox.DeliveryFailed):
        outbox.deliver(pk)
    assert Notification.objects.get(pk=pk).last_error == webhooks.FAILED


def test_a_user_without_an_address_is_told_why_and_not_retried(fleet: Fleet, cursor: OutboxCursor) -> None:
    alice = fleet.user("alice")
    alice.email = ""
    alice.save()
    run_to(fleet.submit("alice"), *STARTED, (S.FAILED, "exit_code"))
    (pk,) = outbox.collect()
    assert outbox.deliver(pk) is False  # given up at once: there is nowhere to send it
    n = Notification.objects.get(pk=pk)
    assert (outbox.state(n), n.last_error) == ("failed", "Your account has no e-mail address.")
    assert outbox.undelivered(now=timezone.now() + timedelta(hours=1)) == []


@pytest.mark.django_db(transaction=True)
def test_concurrent_rounds_make_each_notification_once(fleet: Fleet, cursor: OutboxCursor, queued: list[int]) -> None:
    if connection.vendor != "postgresql":
        pytest.skip("concurrent writers need PostgreSQL")
    alice = fleet.user("alice")
    preferences.set_own(alice, events={code: ["email"] for code in events.EVENTS})
    for _ in range(5):
        run_to(fleet.submit("alice"), *STARTED, (S.FAILED, "exit_code"))
    barrier = threading.Barrier(4)
    errors: list[BaseException] = []

    def round_() -> None:
        try:
            barrier.wait()
            outbox.collect()
        except BaseException as error:  # noqa: BLE001 - reported below
            errors.append(error)
        finally:
            connection.close()

    threads = [threading.Thread(target=round_) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert Notification.objects.count() == 5 * 2  # started and failed of each job, once
    assert set(queued) == set(Notification.objects.values_list("pk", flat=True))


def test_the_cursor_stops_before_the_first_young_event_and_moves_past_events_nobody_is_told_of(
    fleet: Fleet, cursor: OutboxCursor
) -> None:
    job = run_to(fleet.submit("alice"), (S.ADMITTED, "admitted"), (S.PLACING, "dispatched"))
    first, *_, last = job.events.order_by("pk")
    outbox.collect()
    cursor.refresh_from_db()
    assert cursor.last_id == first.pk - 1  # all too young: read again next round
    outbox.collect(settle())
    cursor.refresh_from_db()
    assert cursor.last_id == last.pk  # none of them is news, and all settled
    assert Notification.objects.count() == 0


def test_the_beat_queues_again_what_is_owed_and_not_given_up_on(
    fleet: Fleet, cursor: OutboxCursor, queued: list[int]
) -> None:
    run_to(fleet.submit("alice"), *STARTED, (S.FAILED, "exit_code"))
    assert tasks.notify() == 1
    (pk,) = queued  # queued once; say its task was lost with its worker
    assert tasks.notify() == 0
    assert queued == [pk]  # not yet: it is young
    Notification.objects.filter(pk=pk).update(created_at=timezone.now() - timedelta(minutes=5))
    tasks.notify()
    assert queued == [pk, pk]
    assert tasks.deliver_notification(pk)
    tasks.notify()
    assert queued == [pk, pk]  # sent: owed no more
    (message,) = mail.outbox
    assert "failed" in message.subject


def test_a_finished_array_is_told_once_when_its_last_task_ends_and_again_after_a_requeue(
    fleet: Fleet, cursor: OutboxCursor
) -> None:
    from scheduler.actions import arrays
    from tests.scheduler.test_arrays import submit

    alice = fleet.user("alice")
    array = submit(fleet, range="0-2")
    first, second, third = Job.objects.filter(array=array).order_by("array_index")
    run_to(first, *STARTED, (S.SUCCEEDED, "succeeded"))
    run_to(second, *STARTED, (S.FAILED, "exit_code"))
    outbox.collect()
    assert ("array_finished", "email") not in sent(alice)  # one task still waits
    run_to(third, *STARTED, (S.SUCCEEDED, "succeeded"))
    outbox.collect()
    outbox.collect(settle())  # read again: nothing twice
    told = Notification.objects.get(user=alice, event="array_finished")
    assert told.subject == f"Array {array.pk} (sweep) finished: 2 succeeded, 1 failed"
    assert f"/jobs/arrays/{array.pk}/" in told.message
    assert outbox.deliver(told.pk)
    assert [m.subject for m in mail.outbox if "Array" in m.subject] == [f"[Quartermaster] {told.subject}"]

    # Its failed task requeued and run again: the array finishing again is news again, once.
    assert arrays.requeue_failed(alice, array) == 1
    run_to(second, (S.ADMITTED, "admitted"), (S.PLACING, "dispatched"), (S.RUNNING, "started"))
    run_to(second, (S.SUCCEEDED, "succeeded"))
    outbox.collect(settle())
    outbox.collect(settle())
    assert list(
        Notification.objects.filter(user=alice, event="array_finished").order_by("pk").values_list("subject", flat=True)
    ) == [told.subject, f"Array {array.pk} (sweep) finished: 3 succeeded"]


def test_a_failed_attempt_that_its_retries_requeue_is_not_told_as_a_failure(fleet: Fleet, cursor: OutboxCursor) -> None:
    from scheduler.placement import outcomes

    alice = fleet.user("alice")
    preferences.set_own(alice, events={"failed": ["email"], "requeued": ["email"]})
    job = run_to(fleet.submit("alice", max_retries=1), *STARTED)
    now = timezone.now()
    cluster = next(iter(fleet.clusters.values()))
    attempt = Attempt.objects.create(job=job, number=1, cluster=cluster, admitted_at=now, started_at=now)
    Job.objects.filter(pk=job.pk).update(attempt=1)
    assert outcomes.end(attempt, "exit_code", "It exited with code 3.", now=now)
    outbox.collect()
    assert sent(alice) == [("requeued", "email")]  # retried: it has not failed
    job.refresh_from_db()
    assert job.state == S.REQUEUED
