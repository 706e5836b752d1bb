"""Fair share with memory: the organization's setting (admins), and the queues' recent use the meter keeps.

``set_fair_share`` changes the half-life and the weight of recent use, with a reason, in the quota history and the
audit log, like every governance change. A new half-life makes what was kept meaningless: ``kept_with`` then
differs and the meter's next run rebuilds every queue's recent use from the usage records (``lock`` tells it).

``lock`` and ``keep`` are the meter's (``billing.actions.metering``): inside its transaction it locks the
organization's row (metering runs and repairs take turns on it, so no change is counted twice), values the
records it replaces and writes with ``scheduler.engine.fairshare.hours``, and hands the difference per queue to
``keep``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from datetime import datetime
from typing import TYPE_CHECKING, Any

from django.core.exceptions import ValidationError
from django.db import transaction

from governance.actions.quotas import check_reason, record
from governance.fairshare import decay, words
from governance.models import FairShare, QueueUsage, QuotaChange
from tenancy import policy

if TYPE_CHECKING:
    from django.contrib.auth.models import User
    from django.http import HttpRequest

    from tenancy.models import Organization

FIELDS = ("half_life", "usage_weight")


def setting(organization: Organization) -> FairShare:
    """The organization's fair-share setting (unsaved defaults when it has none)."""
    found = FairShare.objects.filter(organization=organization).first()
    return found or FairShare(organization=organization)


def set_fair_share(
    actor: User,
    organization: Organization,
    *,
    half_life: Any = None,
    usage_weight: Any = None,
    reason: str,
    http: HttpRequest | None = None,
) -> QuotaChange | None:
    """Set how fair sharing remembers (admins): ``half_life`` in seconds (an hour to a year), ``usage_weight``
    from 0 (shares forget) to 10; a value left out (None) keeps its current one. Returns the history entry, or
    None if nothing changed; ``ValidationError`` names each bad field and nothing is written."""
    policy.require(actor, "fair_share.set", organization)
    errors: dict[str, str] = {}
    reason = check_reason(reason, errors)
    new: dict[str, Any] = {}
    if half_life is not None:
        low, high = FairShare.HALF_LIFE_RANGE
        number = _number(half_life)
        if number is None or number != int(number) or not low <= number <= high:
            errors["half_life"] = f"A whole number of seconds from {low} (an hour) to {high} (a year)."
        else:
            new["half_life"] = int(number)
    if usage_weight is not None:
        low_w, high_w = FairShare.USAGE_WEIGHT_RANGE
        number = _number(usage_weight)
        if number is None or not low_w <= number <= high_w:
            errors["usage_weight"] = f"A number from {low_w:g} (shares forget) to {high_w:g}."
        else:
            new["usage_weight"] = number
    if errors:
        raise ValidationError(errors)
    with transaction.atomic():
        row = lock(organization)
        before = {k: getattr(row, k) for k in FIELDS}
        after = {**before, **new}
        if after == before:
            return None
        for k, v in new.items():
            setattr(row, k, v)
        row.save(update_fields=list(new))
        keys = [k for k in FIELDS if before[k] != after[k]]
        return record(
            actor,
            organization=organization,
            team=None,
            queue=None,
            cohort=None,
            kind=QuotaChange.Kind.FAIR_SHARE,
            subject=f"fair share: half-life {words(after['half_life'])}, "
            f"weight of recent use {after['usage_weight']:g}",
            before={k: before[k] for k in keys},
            after={k: after[k] for k in keys},
            reason=reason,
            target=organization,
            action="fair_share.changed",
            http=http,
        )


def _number(raw: Any) -> float | None:
    if isinstance(raw, bool):
        return None
    try:
        number = float(str(raw).strip())
    except ValueError:
        return None
    return number if math.isfinite(number) else None


def lock(organization: Organization) -> FairShare:
    """The organization's setting, locked for the rest of the transaction (created with the defaults)."""
    FairShare.objects.get_or_create(organization=organization)
    row: FairShare = FairShare.objects.select_for_update().get(organization=organization)
    return row


def keep(row: FairShare, changes: Mapping[int, float], at: datetime, *, rebuilt: bool = False) -> None:
    """Add ``changes`` (accelerator-hours valued at ``at``, per queue id) to the queues' recent use, each decayed
    to ``at`` first; ``rebuilt``: they are the whole of it (every queue's use, from the records), so the queues
    left out used nothing. Inside the transaction that holds ``lock``."""
    kept = {u.queue_id: u for u in QueueUsage.objects.filter(queue__team__organization=row.organization_id)}
    for queue_id in set(changes) | set(kept):
        usage = kept.get(queue_id)
        before = 0.0 if usage is None or rebuilt else decay(usage.accelerator_hours, usage.as_of, at, row.half_life)
        total = max(0.0, before + changes.get(queue_id, 0.0))  # rounding must not make use negative
        if usage is None:
            QueueUsage.objects.create(queue_id=queue_id, accelerator_hours=total, as_of=at)
        else:
            QueueUsage.objects.filter(pk=queue_id).update(accelerator_hours=total, as_of=at)
    if rebuilt and row.kept_with != row.half_life:
        FairShare.objects.filter(pk=row.pk).update(kept_with=row.half_life)
        row.kept_with = row.half_life
