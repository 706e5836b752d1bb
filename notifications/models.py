"""What people chose to be told, and each notification owed or sent.

``Preference`` is one row of choices: a user's own (``user`` set) or a team's defaults (``team`` set, set by its
leads). ``Notification`` is one message to one user by one channel; its ``key`` says what it is about (a job
event, a job waiting too long, a test) and the unique constraint on user, key and channel is what makes each be
made once, however often or concurrently the outbox is read. ``OutboxCursor`` is how far the job events have
been read (``notifications/actions/outbox.py``).
"""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.db import models
from django.db.models import Q

from scheduler.models import Job, JobEvent
from tenancy.models import Team


class Channel(models.TextChoices):
    EMAIL = "email", "E-mail"
    WEBHOOK = "webhook", "Webhook"


class Preference(models.Model):
    """Choices of channels per event (``events``: an event's code to a list of channels; an event left out
    follows the team's default, then the built-in one), a webhook URL and how many hours of waiting are worth
    a word. Either a user's own or a team's defaults, never both."""

    user = models.OneToOneField(
        settings.AUTH_USER_MODEL,
        on_delete=models.CASCADE,
        null=True,
        blank=True,
        related_name="notification_preference",
    )
    team = models.OneToOneField(
        Team, on_delete=models.CASCADE, null=True, blank=True, related_name="notification_defaults"
    )
    events: models.JSONField[Any, Any] = models.JSONField(default=dict, blank=True)
    webhook_url = models.CharField(max_length=500, blank=True)
    #: Tell about a job still pending this many hours after it was submitted; None: the team's, or the built-in.
    wait_hours = models.PositiveIntegerField(null=True, blank=True)
    updated_at = models.DateTimeField()

    class Meta:
        constraints = [
            models.CheckConstraint(
                condition=Q(user__isnull=False, team__isnull=True) | Q(user__isnull=True, team__isnull=False),
                name="notification_preference_of_a_user_or_a_team",
            )
        ]

    def __str__(self) -> str:
        return f"notifications of {self.user or self.team}"


class Notification(models.Model):
    """One message to one user by one channel, made once (``key``), sent until it is taken or given up on."""

    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="notifications")
    #: The job's team (whose default webhook it may go to); None for a test.
    team = models.ForeignKey(Team, on_delete=models.CASCADE, null=True, blank=True, related_name="+")
    job = models.ForeignKey(Job, on_delete=models.CASCADE, null=True, blank=True, related_name="notifications")
    job_event = models.ForeignKey(JobEvent, on_delete=models.CASCADE, null=True, blank=True, related_name="+")
    #: The event's code (``notifications.events.EVENTS``), or ``test``.
    event = models.CharField(max_length=40)
    #: What makes it once per user and channel: ``event:<job event id>``, ``waiting:<job id>``, ``test:<uuid>``.
    key = models.CharField(max_length=80)
    channel = models.CharField(max_length=10, choices=Channel.choices)
    subject = models.CharField(max_length=300)
    message = models.TextField()
    created_at = models.DateTimeField(db_index=True)
    sent_at = models.DateTimeField(null=True, blank=True)
    #: Where it went: the e-mail address, or the webhook's host (its URL may be a secret).
    sent_to = models.CharField(max_length=300, blank=True)
    attempts = models.PositiveIntegerField(default=0)
    last_error = models.TextField(blank=True)

    class Meta:
        ordering = ["-created_at", "-pk"]
        constraints = [
            models.UniqueConstraint(fields=["user", "key", "channel"], name="notification_once_per_user_and_channel")
        ]
        indexes = [
            models.Index(fields=["created_at"], condition=Q(sent_at=None), name="notification_owed"),
            models.Index(fields=["job", "event"], name="notification_job_event"),
        ]

    def __str__(self) -> str:
        return f"{self.event} to {self.user} by {self.channel}"


class OutboxCursor(models.Model):
    """How far a reader of the outbox has read: every job event up to ``last_id`` has been turned into the
    notifications it owes."""

    name = models.CharField(max_length=40, unique=True)
    last_id = models.BigIntegerField(default=0)
    updated_at = models.DateTimeField(null=True, blank=True)

    def __str__(self) -> str:
        return f"{self.name} at {self.last_id}"
