"""Interactive sessions (``Job.Kind.SESSION``): JupyterLab, or a shell in JupyterLab's terminal, as a job its
submitter opens from the portal (docs/jobs.md, "Interactive sessions").

A session is placed like any job (preemptible, in the lowest tier its team may use unless it names one, at most
``SESSION_MAX_HOURS``). Each attempt gets a **secret** of its own, made when it is first dispatched
(``secret_for``) and kept encrypted like secret environment values (``clusters.secrets``): the cluster starts
the app with it, and it is shown to nobody, not even in a URL: the link that opens the session (``open_link``:
``/jobs/<id>/open/``, ``qm open``) carries a **one-time code** made from it (``one_time_code``: it expires in
``CODE_SECONDS`` and opens the session once; the app's sign-in on the node, ``clusters/backends/slurm/session.py``,
takes nothing else from a URL), so a link left in a browser's history, a proxy's log or a ``Referer`` opens
nothing. The program the cluster runs (``clusters/backends/slurm/
session.py``) reports where the app listens with the attempt's job token (``report``: ``POST
/api/v1/jobs/{id}/session/``), and, when the app shut itself down after ``session_idle_minutes`` without
activity, that it ended idle: the job then succeeds "after N minutes idle" (``ended_words``).

Only the submitter may open a session (``job.session.open``): a notebook is a shell as that user on the node,
so a teammate or a lead who may see the job may not use it.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import time
from typing import TYPE_CHECKING
from urllib.parse import urlencode, urlsplit

from django.core.exceptions import ValidationError
from django.db import transaction

from clusters.secrets import SESSION_SECRET, CredentialsError, decrypt, encrypt
from scheduler.actions.checkpoints import fence
from scheduler.models import Attempt, Job
from scheduler.states import JobState
from tenancy import policy

if TYPE_CHECKING:
    from common.types import AnyUser

URL_MAX = Attempt._meta.get_field("session_url").max_length or 500
#: Where each app opens: JupyterLab's workspace, or a terminal of it.
OPENS_AT = {Job.SessionApp.JUPYTERLAB: "lab", Job.SessionApp.SHELL: "lab/terminals/1"}


#: How long a link that opens a session works (once).
CODE_SECONDS = 120
#: The link's query parameter holding the code (``session.AUTH`` on the node reads it).
CODE_PARAMETER = "qm_code"


class NotReady(Exception):
    """The session cannot be opened now (not running, or its app has not said where it listens yet)."""


# --- the secret --------------------------------------------------------------------------------------------


def secret_for(attempt: Attempt) -> str:
    """The attempt's secret, made and stored (encrypted) the first time it is asked for: a dispatch tried
    again hands the cluster the same one."""
    if not attempt.session_secret_ciphertext:
        made = encrypt({"secret": secrets.token_urlsafe(32)}, purpose=SESSION_SECRET)
        Attempt.objects.filter(pk=attempt.pk, session_secret_ciphertext=b"").update(session_secret_ciphertext=made)
        stored = Attempt.objects.values_list("session_secret_ciphertext", flat=True).get(pk=attempt.pk)
        attempt.session_secret_ciphertext = bytes(stored)
    return decrypt(bytes(attempt.session_secret_ciphertext), purpose=SESSION_SECRET)["secret"]


# --- what the session reports ---------------------------------------------------------------------------


def check_url(url: object) -> str:
    """An http(s) address with a host, no credentials, query or fragment, of at most ``URL_MAX`` characters;
    ``ValidationError`` naming ``url`` otherwise."""
    text = url.strip() if isinstance(url, str) else ""
    parts = urlsplit(text) if text and text.isascii() and text.isprintable() else None
    if (
        parts is None
        or parts.scheme not in ("http", "https")
        or not parts.hostname
        or parts.username is not None
        or parts.query
        or parts.fragment
        or len(text) > URL_MAX
    ):
        raise ValidationError(
            {"url": f"An http(s) address with a host, e.g. http://10.0.0.7:8888/, at most {URL_MAX} characters."}
        )
    return text if text.endswith("/") else text + "/"


def report(job: Job, attempt_number: int, url: object = None, *, ended_idle: bool = False) -> Attempt:
    """Record what attempt ``attempt_number`` of session ``job`` reports: the address its app listens at, and/or
    that it ended after its idle time. ``ValidationError`` naming the field for bad input (nothing stored),
    ``PermissionDenied`` when the attempt may not report (``checkpoints.fence``) or the job is no session."""
    if job.kind != Job.Kind.SESSION:
        raise ValidationError({"kind": f"Job #{job.pk} is not an interactive session; it reports no address."})
    if url is None and not ended_idle:
        raise ValidationError({"url": "Give the session's address (url), or ended: idle."})
    address = check_url(url) if url is not None else None
    with transaction.atomic():
        locked = Job.objects.select_for_update().get(pk=job.pk)
        attempt = fence(locked, attempt_number, "its session's address")
        changes: dict[str, object] = {}
        if address is not None:
            changes["session_url"] = address
        if ended_idle:
            changes["session_ended_idle"] = True
        Attempt.objects.filter(pk=attempt.pk).update(**changes)
        for name, value in changes.items():
            setattr(attempt, name, value)
    return attempt


def ended_words(attempt: Attempt) -> str:
    """How a session attempt that ended by itself ended, in words, if it said it was idle; "" otherwise (read
    from the row: the report may have come after the attempt was read)."""
    if attempt.job.kind != Job.Kind.SESSION:
        return ""
    if not Attempt.objects.filter(pk=attempt.pk, session_ended_idle=True).exists():
        return ""
    minutes = attempt.job.session_idle_minutes or 0
    return f"The session ended after {minutes} minute{'s' if minutes != 1 else ''} idle; its files are kept."


# --- opening it ----------------------------------------------------------------------------------------------


def current(job: Job) -> Attempt | None:
    """The running attempt of a session whose app has said where it listens; None otherwise."""
    if job.kind != Job.Kind.SESSION or job.state != JobState.RUNNING:
        return None
    return (
        Attempt.objects.filter(job=job, number=job.attempt, outcome=Attempt.Outcome.ACTIVE)
        .exclude(session_url="")
        .first()
    )


def one_time_code(secret: str, now: float | None = None) -> str:
    """A code that opens the session started with ``secret`` once, until ``CODE_SECONDS`` from ``now``:
    ``<expiry>.<nonce>.<HMAC-SHA256 of both, keyed by the secret>`` (checked by ``session.AUTH`` on the node)."""
    expires = int((time.time() if now is None else now) + CODE_SECONDS)
    nonce = secrets.token_urlsafe(16)
    mac = hmac.new(secret.encode(), f"{expires}.{nonce}".encode(), hashlib.sha256).hexdigest()
    return f"{expires}.{nonce}.{mac}"


def open_link(user: AnyUser, job: Job) -> str:
    """The address that opens ``job``'s session once, a one-time code in it (``one_time_code``): for its submitter
    only (``PermissionDenied`` for anyone else; the caller has already made another team's job a 404), and
    only while it runs with an address (``NotReady``)."""
    policy.require(user, "job.session.open", job)
    if job.kind != Job.Kind.SESSION:
        raise NotReady(f"Job #{job.pk} is not an interactive session.")
    attempt = current(job)
    if attempt is None:
        state = job.get_state_display().lower()
        raise NotReady(
            f"Session #{job.pk} is {state}; it opens once it runs and its app has said where it listens."
            if job.state != JobState.RUNNING
            else f"Session #{job.pk} is starting; it opens once its app has said where it listens."
        )
    try:
        secret = secret_for(attempt)
    except CredentialsError:
        raise NotReady(f"Session #{job.pk}'s secret cannot be read with the current key; start it again.") from None
    opens_at = OPENS_AT.get(Job.SessionApp(job.session_app), "lab")
    return f"{attempt.session_url}{opens_at}?{urlencode({CODE_PARAMETER: one_time_code(secret)})}"
