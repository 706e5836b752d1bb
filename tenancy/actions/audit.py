"""The one way to write the audit log: `record(...)`, called by every privileged action; and the way it reads,
in words (`action_words`, `change_lines`), on its page and in its CSV export.

An entry's ``changes`` are a dict of fields: a value ``[old, new]`` (a list of two) is a change, written
``field: old → new``; anything else is a value the action set, written ``field: value``. The few fields that
hold lists of their own (``LIST_FIELDS``) are never read as changes.
"""

from __future__ import annotations

import csv
import io
import itertools
from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING, Any

from django.contrib.auth.models import User
from django.contrib.contenttypes.models import ContentType
from django.db import models

from common.client import client_address
from tenancy.models import AuditLog, Organization

if TYPE_CHECKING:
    from django.http import HttpRequest

    from common.types import AnyUser


def organization_of(obj: models.Model | None) -> Organization | None:
    """The organization an object belongs to, by the path its `Tenancy` declares."""
    if obj is None:
        return None
    if isinstance(obj, Organization):
        return obj
    for path in ("organization", "team__organization", "project__team__organization"):
        current: Any = obj
        for part in path.split("__"):
            current = getattr(current, part, None)
            if current is None:
                break
        if isinstance(current, Organization):
            return current
    return None


def home_organization(user: AnyUser | None) -> Organization | None:
    """The organization of a user's first membership: where entries about the user themselves belong."""
    if user is None or not user.is_authenticated:
        return None
    membership = user.memberships.select_related("organization").order_by("pk").first()
    return membership.organization if membership is not None else None


def record(
    action: str,
    *,
    actor: AnyUser | None,
    target: models.Model | None = None,
    organization: Organization | None = None,
    changes: dict[str, Any] | None = None,
    reason: str = "",
    request: HttpRequest | None = None,
) -> AuditLog:
    """Record that `actor` did `action` (a dotted verb such as `membership.role_changed`) to `target`.

    Call it inside the action's transaction, so the entry exists exactly when the change does.
    """
    user = actor if isinstance(actor, User) else None
    return AuditLog.objects.create(
        organization=organization or organization_of(target),
        actor=user,
        actor_name=user.get_username() if user is not None else "system",
        action=action,
        target_type=ContentType.objects.get_for_model(target) if target is not None else None,
        target_id=str(target.pk) if target is not None else "",
        target_repr=str(target)[:200] if target is not None else "",
        changes=changes or {},
        reason=reason,
        ip_address=client_address(request) if request is not None else None,
        user_agent=(request.META.get("HTTP_USER_AGENT", "")[:300] if request is not None else ""),
    )


# --- reading it ---------------------------------------------------------------------------------------------

#: Fields whose value is a list in itself, not ``[old, new]``.
LIST_FIELDS = frozenset({"nodes", "drains", "recipients", "groups", "accelerator_types", "command", "regions"})
#: Actions whose words are not their name's (``membership.role_changed`` reads "Membership role changed").
ACTION_WORDS = {
    "auth.login": "Signed in",
    "auth.logout": "Signed out",
    "auth.login_failed": "Sign-in failed",
}


def action_words(action: str) -> str:
    """An action as a sentence: ``job.submitted`` is "Job submitted", ``probe_token.revoked`` "Probe token
    revoked"."""
    if action in ACTION_WORDS:
        return ACTION_WORDS[action]
    text = action.replace(".", " ").replace("_", " ").strip()
    return text[:1].upper() + text[1:]


def value_words(value: Any) -> str:
    """A recorded value as read: none, yes/no, lists joined, mappings as ``key: value`` pairs."""
    if value is None or value == "":
        return "none"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, dict):
        return "; ".join(f"{key}: {value_words(item)}" for key, item in value.items()) or "none"
    if isinstance(value, list | tuple):
        return ", ".join(value_words(item) for item in value) or "none"
    return str(value)


def _field_words(name: str) -> str:
    return name.replace("_", " ")


def change_lines(changes: Any) -> list[str]:
    """An entry's ``changes`` as lines, by field name (the database keeps no order of its own):
    ``state: pending → cancelled``, ``name: nightly``."""
    if not isinstance(changes, dict):
        return [value_words(changes)] if changes else []
    lines = []
    for name, value in sorted(changes.items()):
        if isinstance(value, list) and len(value) == 2 and name not in LIST_FIELDS:
            lines.append(f"{_field_words(name)}: {value_words(value[0])} → {value_words(value[1])}")
        else:
            lines.append(f"{_field_words(name)}: {value_words(value)}")
    return lines


#: A cell a spreadsheet would run as a formula starts with one of these: such a cell is written after a quote.
FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")
CSV_HEADER = ("when (UTC)", "who", "action", "what", "object", "changes", "reason", "from")


def csv_rows(entries: Iterable[AuditLog]) -> Iterable[tuple[str, ...]]:
    """The entries as the CSV export's rows (``CSV_HEADER``): the page's words, one cell per column."""
    for entry in entries:
        yield (
            f"{entry.created_at:%Y-%m-%d %H:%M:%S}",
            entry.actor_name,
            entry.action,
            action_words(entry.action),
            entry.target_repr,
            "\n".join(change_lines(entry.changes)),
            entry.reason,
            entry.ip_address or "",
        )


def _cell(value: str) -> str:
    return "'" + value if value.startswith(FORMULA_STARTS) else value


def csv_stream(entries: Iterable[AuditLog]) -> Iterator[str]:
    """The CSV export, line by line: ``CSV_HEADER``, then ``csv_rows``; no cell a spreadsheet runs."""
    buffer = io.StringIO()
    writer = csv.writer(buffer)
    for row in itertools.chain([CSV_HEADER], csv_rows(entries)):
        writer.writerow([_cell(str(cell)) for cell in row])
        yield buffer.getvalue()
        buffer.seek(0)
        buffer.truncate()
