"""Turning job events into notifications, and sending them: durable, made once, sent until taken.

**The outbox** is the scheduler's own ``JobEvent`` table: every move of a job and every note of the watch round
is a row there before anyone is told. ``collect`` (on the beat) reads the events after its cursor, maps each
to an event code (``events.classify``), and makes one ``Notification`` row per channel the job's submitter
wants (``preferences``). The unique constraint on user, key and channel makes a second reading — a re-run, a
concurrent run, a cursor that did not move — make nothing twice. The cursor moves only past events older than
``SETTLE``: an event written by a transaction that commits late (its id taken before a later one's) is still
read. The same round finds jobs pending longer than their submitter's hours (``waiting``), once per job.

**Delivery** (``deliver``, one task per notification) locks the row, sends by e-mail (Django's ``send_mail``) or
POSTs a Slack-compatible body (``{"text", "blocks"}``) through the webhooks' outbound policy, checked again at
each send (``common/webhooks.py``), and records it sent. A failure is recorded (attempts, last error) and the
task retried with backoff; after ``MAX_ATTEMPTS`` it is given up with its error shown to its user. The beat
queues again what is owed and not given up on (``undelivered``): a task lost with a worker or a broker. A crash
between sending and recording may send one twice, so the webhook carries an ``Idempotency-Key``.

**Who is told**: a job's submitter, while they are an active member of the job's team; never anyone else.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta
from functools import cache
from typing import TYPE_CHECKING, Any

import requests
from django.conf import settings
from django.core.mail import send_mail
from django.db import transaction
from django.db.models import Exists, F, Max, Min, OuterRef, Q
from django.db.models.functions import Greatest
from django.urls import reverse
from django.utils import timezone

from common import enqueue, metrics, outbound, webhooks
from notifications import events as ev
from notifications.actions.preferences import Book, Resolved, home_team
from notifications.models import Channel, Notification, OutboxCursor, Preference
from scheduler.actions import arrays
from scheduler.models import Job, JobArray, JobEvent
from scheduler.states import FINAL
from scheduler.states import JobState as S
from tenancy import policy
from tenancy.scoping import TEAM_ROLES

if TYPE_CHECKING:
    from django.contrib.auth.models import User

log = logging.getLogger(__name__)

CURSOR = "job_events"
#: Events read per round; a longer backlog is read over the next rounds.
BATCH = 5000
#: How old an event must be before the cursor moves past it (a transaction that took its id earlier may still
#: be committing); younger ones are read again next round, and make nothing twice.
SETTLE = timedelta(minutes=2)
#: How many times a notification is tried before it is given up on.
MAX_ATTEMPTS = 8
DELIVER_TASK = "notifications.tasks.deliver_notification"


@dataclass(frozen=True)
class Occurrence:
    """Something a job's submitter may be told: an event's code, its job, the job event (if any) and the key
    that makes it once."""

    code: str
    job: Job
    key: str
    event: JobEvent | None = None
    #: Its own subject and text, where the job's words do not fit (an array's).
    said: tuple[str, str] | None = None


# --- collecting -------------------------------------------------------------------------------------------------


def _cursor() -> OutboxCursor:
    """The cursor; made, the first time, at the newest event (history from before is nobody's news)."""
    newest = JobEvent.objects.order_by("-pk").values_list("pk", flat=True).first() or 0
    cursor, _ = OutboxCursor.objects.get_or_create(name=CURSOR, defaults={"last_id": newest})
    return cursor


#: What a round reads of each job event, its job and team (a job row is wide: its request, its environment).
_READ = (
    *("from_state", "to_state", "reason", "message", "created_at"),
    *("job__name", "job__team_id", "job__submitted_by_id", "job__submitted_at", "job__pending_message"),
    "job__team__name",
)


def collect(now: datetime | None = None) -> list[int]:
    """One round: the notifications owed for new job events and for jobs waiting too long are made, and their
    delivery queued. Returns the ids made now. Safe to run twice at once."""
    with metrics.LoopRound("notifications"):
        return _collect(now or timezone.now())


def _collect(now: datetime) -> list[int]:
    cursor = _cursor()
    after = JobEvent.objects.filter(pk__gt=cursor.last_id)
    rows = list(after.filter(ev.worth_reading()).select_related("job__team").only(*_READ).order_by("pk")[:BATCH])
    # The cursor moves up to the first event not settled yet (or to the last one read, if the batch was full).
    span = after.aggregate(newest=Max("pk"), young=Min("pk", filter=Q(created_at__gt=now - SETTLE)))
    settled = span["young"] - 1 if span["young"] is not None else (span["newest"] or cursor.last_id)
    if len(rows) == BATCH:
        settled = min(settled, rows[-1].pk)
    retried = _retried(rows)
    found = [
        Occurrence(code, row.job, f"event:{row.pk}", row)
        for row in rows
        if (code := ev.classify(row)) is not None
        and not (code == ev.FAILED and (row.job_id, row.created_at) in retried)
    ]
    made = make(found + waiting(now) + arrays_finished(cursor.last_id), now)
    OutboxCursor.objects.filter(pk=cursor.pk, last_id__lt=settled).update(
        last_id=Greatest(F("last_id"), settled), updated_at=now
    )
    for pk in made:
        enqueue.send(DELIVER_TASK, pk)
    metrics.NOTIFICATIONS.labels("made").inc(len(made))
    return made


def _retried(rows: list[JobEvent]) -> set[tuple[int, datetime]]:
    """(job, moment) of the failures among ``rows`` that the retry policy requeued in the same move: the job has
    not failed, it tries again (told as ``requeued``, which the built-in defaults leave quiet)."""
    failed = {row.job_id for row in rows if row.to_state == S.FAILED}
    if not failed:
        return set()
    again = JobEvent.objects.filter(job__in=failed, from_state=S.FAILED, to_state=S.REQUEUED, reason="retry")
    return set(again.values_list("job_id", "created_at"))


def waiting(now: datetime) -> list[Occurrence]:
    """Jobs pending longer than their submitter's hours (``wait_hours``), not yet told of."""
    shortest = min(
        [ev.DEFAULT_WAIT_HOURS]
        + [h for h in Preference.objects.aggregate(h=Min("wait_hours")).values() if h is not None]
    )
    told = Notification.objects.filter(job=OuterRef("pk"), event=ev.WAITING)
    jobs = (
        Job.objects.filter(state=Job.State.PENDING, submitted_at__lte=now - timedelta(hours=shortest))
        .exclude(Exists(told))
        .select_related("team", "submitted_by")
    )
    return [Occurrence(ev.WAITING, job, f"waiting:{job.pk}") for job in jobs]


def arrays_finished(after_id: int) -> list[Occurrence]:
    """Arrays whose last task ended among the events after the cursor: one occurrence each, keyed by that last
    event (read again next round, it makes nothing twice; requeued failed tasks that end again are news again)."""
    ids = set(
        JobEvent.objects.filter(pk__gt=after_id, to_state__in=list(FINAL), job__array__isnull=False).values_list(
            "job__array_id", flat=True
        )
    )
    if not ids:
        return []
    busy = set(Job.objects.filter(array_id__in=ids).exclude(state__in=list(FINAL)).values_list("array_id", flat=True))
    found = []
    for array in JobArray.objects.filter(pk__in=ids - busy):
        last = (
            JobEvent.objects.filter(job__array=array, to_state__in=list(FINAL))
            .select_related("job__team")
            .order_by("-pk")
            .first()
        )
        if last is None:
            continue
        tally = arrays.summary(array)
        ended = (S.SUCCEEDED, S.FAILED, S.CANCELLED)
        counts = ", ".join(f"{tally.counts[s]} {s}" for s in ended if tally.counts.get(s))
        subject = f"Array {array.pk} ({array.name}) finished: {counts}"
        link = f"{settings.PUBLIC_URL.rstrip('/')}{reverse('array-detail', args=[array.pk])}"
        text = f"{subject} (team {last.job.team.name}). All {tally.total} tasks have ended.\n{link}"
        found.append(Occurrence(ev.ARRAY_FINISHED, last.job, f"array:{array.pk}:{last.pk}", last, (subject, text)))
    return found


def _members(jobs: Iterable[Job]) -> set[tuple[int, int]]:
    """(user, team) pairs among the jobs' submitters that still hold a team role in the job's team."""
    jobs = list(jobs)
    teams = {job.team_id: job.team for job in jobs}
    users = {job.submitted_by_id for job in jobs}
    held = set()
    for team_id, team in teams.items():
        rows = policy.members(team, *TEAM_ROLES).filter(user__in=users, user__is_active=True)
        held |= {(user_id, team_id) for user_id in rows.values_list("user_id", flat=True)}
    return held


def make(found: list[Occurrence], now: datetime) -> list[int]:
    """The notifications ``found`` owes, made where not made already; the ids of those made now."""
    if not found:
        return []
    members = _members(o.job for o in found)
    book = Book()
    book.load({o.job.submitted_by_id for o in found}, {o.job.team_id for o in found})
    keys = {o.key for o in found}
    users = {o.job.submitted_by_id for o in found}
    made_before = set(
        Notification.objects.filter(key__in=keys, user__in=users).values_list("user_id", "key", "channel")
    )
    new = []
    for o in found:
        user_id = o.job.submitted_by_id
        if (user_id, o.job.team_id) not in members:
            continue
        wanted = book.of(user_id, o.job.team_id)
        if o.code == ev.WAITING and o.job.submitted_at > now - timedelta(hours=wanted.wait_hours):
            continue
        subject, text = words(o, wanted)
        for channel in sorted(wanted.channels(o.code)):
            if (user_id, o.key, channel) in made_before:
                continue
            new.append(
                Notification(
                    user_id=user_id,
                    team_id=o.job.team_id,
                    job=o.job,
                    job_event=o.event,
                    event=o.code,
                    key=o.key,
                    channel=channel,
                    subject=subject,
                    message=text,
                    created_at=now,
                )
            )
    if not new:
        return []
    Notification.objects.bulk_create(new, ignore_conflicts=True)
    # Those that went in now (a concurrent round may have made some first: queued twice, sent once).
    return list(
        Notification.objects.filter(
            key__in={n.key for n in new}, user__in={n.user_id for n in new}, created_at=now, attempts=0
        ).values_list("pk", flat=True)
    )


def job_link(job_id: int) -> str:
    """The job's page, as a link from outside (``QM_PUBLIC_URL``)."""
    return f"{settings.PUBLIC_URL.rstrip('/')}{_job_path().format(job_id)}"


@cache
def _job_path() -> str:
    """The job page's path with ``{}`` for its id (reversed once: thousands of messages a round)."""
    return reverse("job-detail", args=[987654321]).replace("987654321", "{}")


def words(o: Occurrence, wanted: Resolved) -> tuple[str, str]:
    """The subject and text of a notification of ``o``."""
    if o.said is not None:
        return o.said[0][:300], o.said[1]
    job, kind = o.job, ev.EVENTS[o.code]
    subject = f"Job {job.pk} ({job.name}) {kind.verb}"
    if o.code == ev.WAITING:
        hours = int((timezone.now() - job.submitted_at).total_seconds() // 3600)
        reason = f" {job.pending_message}" if job.pending_message else ""
        detail = f"It was submitted {hours} hours ago and is still pending.{reason}"
    else:
        detail = o.event.message if o.event is not None and o.event.message else ""
    text = f"{subject} (team {job.team.name}). {detail}".strip()
    return subject[:300], f"{text}\n{job_link(job.pk)}"


# --- delivering -------------------------------------------------------------------------------------------------


class DeliveryFailed(Exception):
    """The channel did not take the notification; the task tries again later."""


class Undeliverable(DeliveryFailed):
    """There is nowhere to send it (no e-mail address, no webhook URL): given up at once, not retried."""


def _escape(text: str) -> str:
    """Text as Slack's mrkdwn reads it literally."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def payload(n: Notification) -> dict[str, Any]:
    """A Slack-compatible body: ``text`` for every receiver, ``blocks`` for those that lay it out."""
    first, _, rest = n.message.partition("\n")
    blocks: list[dict[str, Any]] = [{"type": "section", "text": {"type": "mrkdwn", "text": _escape(first)}}]
    if n.job_id is not None:
        link = job_link(n.job_id)
        blocks.append(
            {"type": "context", "elements": [{"type": "mrkdwn", "text": f"<{link}|Open job {n.job_id}> · {n.event}"}]}
        )
    return {"text": n.message if rest else first, "blocks": blocks}


def _webhook_of(n: Notification) -> str:
    """The webhook a notification goes to now: its user's, else their team's default (read at each send: a URL
    changed since it was made is the one used)."""
    team = Preference.objects.filter(team=n.team_id).first() if n.team_id else None
    own = Preference.objects.filter(user=n.user_id).first()
    return next((p.webhook_url for p in (own, team) if p is not None and p.webhook_url), "")


def _send(n: Notification) -> str:
    """Send ``n`` by its channel; where it went. Raises on any failure."""
    if n.channel == Channel.EMAIL:
        if not n.user.email:
            raise Undeliverable("Your account has no e-mail address.")
        send_mail(f"[Quartermaster] {n.subject}", n.message, settings.DEFAULT_FROM_EMAIL, [n.user.email])
        return n.user.email
    url = _webhook_of(n)
    if not url:
        raise Undeliverable("No webhook URL is set.")
    try:
        webhooks.post(url, payload(n), f"quartermaster-notification-{n.pk}")
    except (requests.RequestException, outbound.Refused) as error:
        log.warning("notification %s: the webhook to %s failed: %s", n.pk, webhooks.host_of(url), error)
        raise DeliveryFailed(webhooks.FAILED) from error
    return webhooks.host_of(url)


def deliver(notification_id: int, now: datetime | None = None) -> bool:
    """Send notification ``notification_id`` once: True when it is sent (now or before), False when given up
    on; ``DeliveryFailed`` when this try failed and another is owed."""
    now = now or timezone.now()
    with transaction.atomic():
        n = Notification.objects.select_for_update().select_related("user").filter(pk=notification_id).first()
        if n is None or n.sent_at is not None:
            return n is not None
        if n.attempts >= MAX_ATTEMPTS:
            return False
        n.attempts += 1
        try:
            n.sent_to = _send(n)
            n.sent_at, n.last_error = now, ""
        except Undeliverable as error:
            n.attempts, n.last_error = MAX_ATTEMPTS, str(error)
        except DeliveryFailed as error:
            n.last_error = str(error)
        except Exception as error:  # noqa: BLE001 - any mail failure is retried
            log.warning("notification %s: e-mail failed: %s", n.pk, error)
            n.last_error = f"e-mail: {error}"
        n.save(update_fields=["sent_at", "sent_to", "attempts", "last_error"])
    if n.sent_at is None:
        if n.attempts >= MAX_ATTEMPTS:
            metrics.NOTIFICATIONS.labels("given_up").inc()
            log.warning("notification %s given up after %s attempts: %s", n.pk, n.attempts, n.last_error)
            return False
        metrics.NOTIFICATIONS.labels("retry").inc()
        raise DeliveryFailed(n.last_error)
    metrics.NOTIFICATIONS.labels("sent").inc()
    return True


def undelivered(older_than: timedelta = timedelta(minutes=2), now: datetime | None = None) -> list[int]:
    """Notifications still owed and not given up on, made more than ``older_than`` ago: the beat queues them
    again (a task lost with its worker)."""
    now = now or timezone.now()
    rows = Notification.objects.filter(sent_at=None, attempts__lt=MAX_ATTEMPTS, created_at__lt=now - older_than)
    return list(rows.order_by("pk").values_list("pk", flat=True)[:BATCH])


def state(n: Notification) -> str:
    """Where a notification's delivery stands, in a word: sent, pending, retrying or failed (given up)."""
    if n.sent_at is not None:
        return "sent"
    if n.attempts >= MAX_ATTEMPTS:
        return "failed"
    return "retrying" if n.attempts else "pending"


# --- trying it out ----------------------------------------------------------------------------------------------


def send_test(user: User, now: datetime | None = None) -> list[Notification]:
    """A test notification to ``user`` by each channel they can be told by (e-mail if their account has an
    address; the webhook if they or their team set one), queued at once."""
    now = now or timezone.now()
    team = home_team(user)
    book = Book()
    wanted = book.of(user.pk, team.pk if team else None)
    channels = [c for c, ok in ((Channel.EMAIL, bool(user.email)), (Channel.WEBHOOK, bool(wanted.webhook_url))) if ok]
    key = f"test:{uuid.uuid4().hex}"
    rows = [
        Notification(
            user=user,
            team=team,
            event=ev.TEST,
            key=key,
            channel=channel,
            subject="Test notification",
            message=f"A test notification from Quartermaster to {user.get_username()}: this channel works.",
            created_at=now,
        )
        for channel in channels
    ]
    made = Notification.objects.bulk_create(rows)
    ids = [n.pk for n in made]
    transaction.on_commit(lambda: [enqueue.send(DELIVER_TASK, pk) for pk in ids])
    return made
