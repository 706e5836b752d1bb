"""Checkpoints and the exit code a running job reports, and the job token it reports them with (docs/jobs.md).

Each attempt is handed a token in its environment (``QM_JOB_TOKEN``, with ``env_for``) that authorizes three
things: reporting checkpoints of that job's attempt (``POST /api/v1/jobs/{id}/checkpoints/``, or ``qm
checkpoint`` inside the job), reporting how far each worker got (``POST /api/v1/jobs/{id}/progress/``, ``qm
progress``: steps and seconds per step, which the straggler and hang detectors read; ``report_progress``),
and reporting how its program ended (``POST /api/v1/jobs/{id}/report/``,
``report_exit``: once per attempt), which is how Quartermaster learns that a job ended on a cluster that
cannot tell (a Cloud TPU queued resource stays ACTIVE after its program exits; ``placement/follow.py``).

The token is stateless: ``qmj_<job>.<attempt>.<mac>``, the MAC an HMAC-SHA256 of ``job:attempt`` under a key derived
from ``SECRET_KEY`` for this purpose alone, so nothing is stored and nothing can be forged without the key. It never
expires by itself; it is *fenced* instead: a report is taken only from the job's current attempt while that attempt
is active (placed, running, or stopping within its grace period, when checkpointing matters most). A token of an
earlier attempt, or of an attempt that has ended, is refused — a copy left running on a cluster that was cut off
cannot move the point a restart resumes from.

A report is one row (``Checkpoint``); the job keeps its last ``KEEP`` of them. An attempt may report once every
``MIN_INTERVAL`` (``STOPPING_INTERVAL`` while it is being stopped, so that a job checkpointing in its grace period
is never turned away), so a job looping on ``qm checkpoint`` cannot flood the table. A restart resumes from the last
checkpoint's location (``resume_from``, ``QM_RESUME_FROM``); the job's own ``checkpoint_location`` stays what was
asked for — the directory it saves into (``QM_CHECKPOINT_DIR``).
"""

from __future__ import annotations

import hmac
import math
import unicodedata
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.conf import settings
from django.core.exceptions import PermissionDenied, ValidationError
from django.db import transaction
from django.db.models import Max
from django.utils import timezone
from django.utils.crypto import salted_hmac

from common import params
from common.validation import check_max_length, check_range, required
from scheduler.models import Attempt, Checkpoint, Job, Progress
from scheduler.states import PLACED, JobState

#: Job tokens start so, which tells them from personal API tokens (``qm_``) at a glance and in a header.
TOKEN_PREFIX = "qmj_"  # noqa: S105 - a prefix, not a secret
#: What the token's MAC key is derived for: a MAC made for anything else under SECRET_KEY never matches.
TOKEN_PURPOSE = "quartermaster.scheduler.checkpoints.job-token"  # noqa: S105 - a salt, not a secret
#: Checkpoints kept per job, newest first; older ones are deleted as new ones come.
KEEP = 50
#: The shortest time between two reports of one attempt; and while the attempt is being stopped.
MIN_INTERVAL = timedelta(seconds=10)
STOPPING_INTERVAL = timedelta(seconds=1)
LOCATION_MAX = Checkpoint._meta.get_field("location").max_length or 500


@dataclass(frozen=True)
class JobToken:
    """What a verified job token names: a job and one of its attempts. It is ``request.auth`` for the API."""

    job_id: int
    attempt: int


#: The exit codes a report may give: a process's (128 + n for a signal n).
EXIT_CODES = (0, 255)


class AlreadyReported(Exception):
    """The attempt reported its exit code before: the first report stands."""


class TooSoon(Exception):
    """A report came before ``MIN_INTERVAL`` (``STOPPING_INTERVAL``) had passed since the attempt's last one."""

    def __init__(self, retry_after: int, interval: timedelta = MIN_INTERVAL) -> None:
        super().__init__(f"Checkpoints are taken once every {int(interval.total_seconds())} s per attempt.")
        self.retry_after = retry_after


# --- the token ---------------------------------------------------------------------------------------------


def _mac(job_id: int, attempt: int, secret: str) -> str:
    return salted_hmac(TOKEN_PURPOSE, f"{job_id}:{attempt}", secret=secret, algorithm="sha256").hexdigest()


def token_for(attempt: Attempt) -> str:
    """The job token of ``attempt`` (``QM_JOB_TOKEN``): the same every time it is asked for."""
    return (
        f"{TOKEN_PREFIX}{attempt.job_id}.{attempt.number}.{_mac(attempt.job_id, attempt.number, settings.SECRET_KEY)}"
    )


def parse_token(raw: str) -> JobToken | None:
    """The job and attempt a token names if its MAC is right (under ``SECRET_KEY`` or one of its
    ``SECRET_KEY_FALLBACKS``, so rotating the key does not cut running jobs off); None for anything else."""
    if not raw.startswith(TOKEN_PREFIX):
        return None
    parts = raw[len(TOKEN_PREFIX) :].split(".")
    if len(parts) != 3 or not all(part.isascii() and part.isdigit() for part in parts[:2]):
        return None
    job_id, attempt = int(parts[0]), int(parts[1])
    if job_id > params.MAX_ID or attempt > params.MAX_ID:
        return None
    secrets = [settings.SECRET_KEY, *getattr(settings, "SECRET_KEY_FALLBACKS", [])]
    # Every key is tried, whichever matches, so the time taken says nothing of which one did.
    matched = [hmac.compare_digest(_mac(job_id, attempt, secret), parts[2]) for secret in secrets]
    return JobToken(job_id, attempt) if any(matched) else None


# --- reporting ---------------------------------------------------------------------------------------------


def check_report(location: str, step: int | None) -> dict[str, str]:
    """What is wrong with a report, by field (empty when nothing is)."""
    errors: dict[str, str] = {}
    if not location.strip():
        errors["location"] = required().messages[0]
    elif any(unicodedata.category(c) == "Cc" for c in location):
        errors["location"] = "One line of text: no control characters (tabs, line breaks, escapes)."
    else:
        try:
            check_max_length(location, LOCATION_MAX)
        except ValidationError as error:
            errors["location"] = " ".join(error.messages)
    if step is not None:
        try:
            check_range(step, 0, params.MAX_ID)
        except ValidationError as error:
            errors["step"] = " ".join(error.messages)
    return errors


def fence(job: Job, attempt_number: int, what: str = "checkpoints") -> Attempt:
    """The attempt a report of ``attempt_number`` comes from, if it may report now; else ``PermissionDenied``
    saying why (``what`` it may not report). ``job`` is read (and locked) by the caller."""
    if attempt_number != job.attempt:
        raise PermissionDenied(
            f"This token is of attempt {attempt_number} of job #{job.pk}, which is now on attempt {job.attempt}: "
            f"only the current attempt reports {what}."
        )
    attempt: Attempt | None = Attempt.objects.filter(job=job, number=attempt_number).first()
    if attempt is None or attempt.outcome != Attempt.Outcome.ACTIVE or job.state not in PLACED:
        outcome = attempt.get_outcome_display().lower() if attempt else "not started"
        raise PermissionDenied(
            f"Attempt {attempt_number} of job #{job.pk} has ended ({outcome}): it reports no more {what}."
        )
    return attempt


def report_exit(job: Job, attempt_number: int, exit_code: int, *, at: datetime | None = None) -> Attempt:
    """Record how attempt ``attempt_number`` of ``job`` ended: its program's ``exit_code`` (0 to 255). Refused
    with a ``ValidationError`` naming ``exit_code``, with ``PermissionDenied`` when the attempt may not report
    (``fence``: an earlier attempt's token, an attempt that ended), and with ``AlreadyReported`` when it
    reported before (the first report stands: the TPU startup script reports from several hosts at most once
    each, and a failure reported first is not undone by a later success). The attempt is ended by the
    placement loop's next follow round (``placement/follow.py``), not here."""
    low, high = EXIT_CODES
    if isinstance(exit_code, bool) or not isinstance(exit_code, int) or not low <= exit_code <= high:
        raise ValidationError({"exit_code": f"An exit code is a whole number from {low} to {high}."})
    now = at or timezone.now()
    with transaction.atomic():
        locked = Job.objects.select_for_update().get(pk=job.pk)
        attempt = fence(locked, attempt_number, "its exit code")
        if attempt.reported_at is not None:
            raise AlreadyReported(
                f"Attempt {attempt_number} of job #{job.pk} reported exit code {attempt.reported_exit_code} "
                "already; the first report stands."
            )
        Attempt.objects.filter(pk=attempt.pk).update(reported_exit_code=exit_code, reported_at=now)
        attempt.reported_exit_code, attempt.reported_at = exit_code, now
    return attempt


def report(job: Job, attempt_number: int, location: str, step: int | None, *, at: datetime | None = None) -> Checkpoint:
    """Store a checkpoint that attempt ``attempt_number`` of ``job`` reports: where it is (``location``) and
    how far it got (``step``). Refused with a ``ValidationError`` naming the field (nothing stored), with
    ``PermissionDenied`` when the attempt may not report (``fence``), and with ``TooSoon`` when the attempt
    reported less than ``MIN_INTERVAL`` ago. Keeps the job's last ``KEEP`` checkpoints."""
    errors = check_report(location, step)
    if errors:
        raise ValidationError(errors)
    now = at or timezone.now()
    with transaction.atomic():
        # The job's row, locked: fencing reads its attempt number, which a restart or failover moves.
        locked = Job.objects.select_for_update().get(pk=job.pk)
        fence(locked, attempt_number)
        interval = STOPPING_INTERVAL if locked.state == JobState.PREEMPTING else MIN_INTERVAL
        last = Checkpoint.objects.filter(job=locked, attempt=attempt_number).aggregate(at=Max("reported_at"))["at"]
        if last is not None and now - last < interval:
            raise TooSoon(max(1, math.ceil((last + interval - now).total_seconds())), interval)
        checkpoint = Checkpoint.objects.create(
            job=locked, attempt=attempt_number, location=location, step=step, reported_at=now
        )
        kept = Checkpoint.objects.filter(job=locked).order_by("-reported_at", "-pk").values("pk")[:KEEP]
        Checkpoint.objects.filter(job=locked).exclude(pk__in=kept).delete()
    return checkpoint


#: How long progress reports are kept: the detectors read the last hours (``scheduler/watch``).
PROGRESS_KEPT = timedelta(hours=24)
#: Seconds per step a report may give: above a day a step is not a step.
MAX_STEP_SECONDS = 86_400.0


def report_progress(
    job: Job, attempt_number: int, worker: int, step: int, step_seconds: float | None, *, at: datetime | None = None
) -> Progress:
    """Store how far worker ``worker`` of attempt ``attempt_number`` got: its ``step`` count and, if it measured
    it, its own ``step_seconds``. Refused with a ``ValidationError`` naming the field (nothing stored), with
    ``PermissionDenied`` when the attempt may not report (``fence``), and with ``TooSoon`` when that worker
    reported less than ``MIN_INTERVAL`` ago. Reports older than ``PROGRESS_KEPT`` are deleted as new ones come."""
    errors: dict[str, str] = {}
    if isinstance(worker, bool) or not isinstance(worker, int) or not 0 <= worker < job.workers:
        errors["worker"] = f"A worker's index, from 0 to {job.workers - 1} (the job has {job.workers})."
    try:
        check_range(step, 0, params.MAX_ID)
    except ValidationError as error:
        errors["step"] = " ".join(error.messages)
    if step_seconds is not None and not (
        isinstance(step_seconds, int | float) and math.isfinite(step_seconds) and 0 < step_seconds <= MAX_STEP_SECONDS
    ):
        errors["step_seconds"] = f"Seconds per step: more than 0, at most {MAX_STEP_SECONDS:.0f}."
    if errors:
        raise ValidationError(errors)
    now = at or timezone.now()
    with transaction.atomic():
        locked = Job.objects.select_for_update().get(pk=job.pk)
        fence(locked, attempt_number, "its progress")
        mine = Progress.objects.filter(job=locked, attempt=attempt_number, worker=worker)
        last = mine.aggregate(at=Max("reported_at"))["at"]
        if last is not None and now - last < MIN_INTERVAL:
            raise TooSoon(max(1, math.ceil((last + MIN_INTERVAL - now).total_seconds())))
        progress = Progress.objects.create(
            job=locked,
            attempt=attempt_number,
            worker=worker,
            step=step,
            step_seconds=None if step_seconds is None else float(step_seconds),
            reported_at=now,
        )
        Progress.objects.filter(job=locked, reported_at__lt=now - PROGRESS_KEPT).delete()
    return progress


# --- reading -----------------------------------------------------------------------------------------------


def last(job: Job) -> Checkpoint | None:
    """The job's latest checkpoint, of any attempt."""
    return Checkpoint.objects.filter(job=job).order_by("-reported_at", "-pk").first()


def resume_from(job: Job) -> str:
    """Where a restart of ``job`` resumes from: its last checkpoint's location, else the location it was
    submitted with (empty: it starts over)."""
    latest = last(job)
    return latest.location if latest else job.checkpoint_location


def env_for(attempt: Attempt) -> dict[str, str]:
    """The variables an attempt is started with, besides the job's own (docs/jobs.md): its token, where to
    report (``PUBLIC_URL``), which attempt of which job it is and where to resume from ("" for a first run,
    with nothing to resume). ``QM_JOB_ID`` is the attempt's key, ``<job id>-<attempt number>-<letters>``, as the
    backends already set it (the name the cluster knows the attempt by); ``qm checkpoint`` reads the job's id
    from it."""
    job = attempt.job
    first_run = attempt.number <= 1 and last(job) is None
    return {
        "QM_JOB_TOKEN": token_for(attempt),
        "QM_API_URL": settings.PUBLIC_URL,
        "QM_JOB_ID": attempt.backend_key,
        "QM_RESUME_FROM": "" if first_run else resume_from(job),
    }
