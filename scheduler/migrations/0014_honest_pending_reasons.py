"""A job that is not waiting keeps no pending reason, queue position or estimated start (``lifecycle.move``
clears them as a job leaves the waiting states; this clears the ones left by moves before that), and the
queue positions already stored are counted from 1 (``loop.queue_places``)."""

from __future__ import annotations

from typing import Any

from django.db import migrations
from django.db.models import F

WAITING = ("pending", "requeued")


def forwards(apps: Any, schema_editor: Any) -> None:
    Job = apps.get_model("scheduler", "Job")
    Job.objects.exclude(state__in=WAITING).exclude(state="placing").update(
        pending_reason="", pending_message="", queue_position=None, estimated_start=None
    )
    Job.objects.filter(state="placing").update(pending_reason="", queue_position=None, estimated_start=None)
    Job.objects.filter(state__in=WAITING, queue_position__isnull=False).update(queue_position=F("queue_position") + 1)


class Migration(migrations.Migration):
    dependencies = [("scheduler", "0013_sessions")]

    operations = [migrations.RunPython(forwards, migrations.RunPython.noop)]
