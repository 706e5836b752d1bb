"""Closed months: finance closes a month, its statements are kept as issued, and a later correction of it is booked
as an adjustment in the next open month, never by rewriting it.

- ``close``: the month's attribution as it stands is frozen (``attribution.freeze``) and every team's statement and
  the fleet summary are issued, as CSV and XLSX, numbered, with the price book and overhead in force; from then on
  every page, export and API answer of the month reads them (``attribution.kept``, ``issued``).
- ``adjust`` (hourly after the meter's reconciliation, and after every change of the price book): for each closed
  month whose inputs changed (usage or capacity metered late, a price or overhead corrected, a reservation), the
  month is attributed again and what differs from what it was closed with, less the corrections already booked,
  becomes ``Adjustment`` rows in the next open month, at the grain of a statement's lines (so a team's corrections
  are on its statement, and the fleet's total grows by exactly them).
- ``reopen``: a deliberate, audited act with a reason, only for the latest closed month (later ones would hold
  corrections of it): its statements are superseded, the corrections of it booked in open months are withdrawn
  (its own figures now carry them), and the next close issues it again under new numbers.

Only finance and organization admins close and reopen (``period.close``); both are in the audit log.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
from collections import defaultdict
from collections.abc import Iterator
from decimal import Decimal
from typing import Any

from django.contrib.auth.models import User
from django.core.exceptions import ValidationError
from django.db import transaction
from django.db.models import Max, Q
from django.http import HttpRequest
from django.utils import timezone

from billing import attribution, params, reports
from billing.actions import prices
from billing.attribution import Attribution, JobCost, money, month_bounds
from billing.models import Adjustment, CapacityRecord, Overhead, Period, Price, Statement, UsageRecord
from common.types import AnyUser
from tenancy import policy
from tenancy.actions import audit
from tenancy.models import Organization

#: The grain at which a closed month is compared with itself and corrected: a statement's line.
GRAIN = ("team", "project", "user", "cluster", "flavor", "capacity_type")
AMOUNTS = ("milli_seconds", "usage", "idle", "overhead")
#: What each input of a month is called in an adjustment's reason.
INPUTS = {
    "usage": "usage metered late",
    "capacity": "capacity metered late",
    "prices": "the price book changed",
    "overhead": "overhead changed",
    "reservations": "reservations changed",
}
REASON_MOST = 500


def closed_months(organization_id: int) -> set[dt.date]:
    return set(Period.objects.filter(organization_id=organization_id, closed=True).values_list("month", flat=True))


def open_after(organization_id: int, month: dt.date) -> dt.date:
    """The first open month after ``month`` (this month is never closed, so there is one)."""
    shut = closed_months(organization_id)
    candidate = month_bounds(month)[1]
    while candidate in shut:
        candidate = month_bounds(candidate)[1]
    return candidate


# --- what a month is computed from -------------------------------------------------------------------------------


def _digest(value: Any) -> str:
    return hashlib.sha256(json.dumps(value, default=str, sort_keys=True).encode()).hexdigest()[:16]


def inputs(organization_id: int, month: dt.date) -> dict[str, str]:
    """A digest of each input of the month's attribution, to tell which changed since it was last compared
    (utilization samples only split usage into idle and unmeasured parts, so they are not an input of money)."""
    start, end = month_bounds(month)
    usage = (
        UsageRecord.objects.filter(organization_id=organization_id, day__gte=start, day__lt=end)
        .values_list("team_id", "project_id", "user_id", "cluster_id", "flavor_id", "capacity_type")
        .annotate(ms=attribution.product_sum("seconds", "milli"))
        .order_by("team_id", "project_id", "user_id", "cluster_id", "flavor_id", "capacity_type")
    )
    capacity = (
        CapacityRecord.objects.filter(organization_id=organization_id, day__gte=start, day__lt=end)
        .values_list("cluster_id", "flavor_id", "capacity_type")
        .annotate(ms=attribution.product_sum("seconds", "accelerators"))
        .order_by("cluster_id", "flavor_id", "capacity_type")
    )
    book = Price.objects.filter(organization_id=organization_id, effective_from__lt=end).values_list(
        "cluster_id", "flavor_id", "capacity_type", "effective_from", "rate"
    )
    reserved = attribution.booked(organization_id, start, end)
    return {
        "usage": _digest(list(usage)),
        "capacity": _digest(list(capacity)),
        "prices": _digest(sorted(book)),
        "overhead": _digest(str(attribution.overhead_of(organization_id, start))),
        "reservations": _digest(sorted(reserved.items())),
    }


def in_force(organization_id: int, month: dt.date) -> tuple[list[reports.Row], list[reports.Row]]:
    """The price book's rows that applied on some day of the month (with the day each stopped applying) and the
    overhead of the month: what an issued statement lists as the prices it was made with."""
    start, end = month_bounds(month)
    rows = list(
        Price.objects.filter(organization_id=organization_id, effective_from__lt=end)
        .select_related("cluster", "flavor")
        .order_by("cluster__name", "flavor__name", "capacity_type", "effective_from")
    )
    book: list[reports.Row] = []
    for i, row in enumerate(rows):
        following = rows[i + 1] if i + 1 < len(rows) else None
        same = following is not None and (following.cluster_id, following.flavor_id, following.capacity_type) == (
            row.cluster_id,
            row.flavor_id,
            row.capacity_type,
        )
        until = following.effective_from if same and following is not None else None
        if until is not None and until <= start:
            continue  # replaced before the month began
        book.append(
            [
                row.cluster.name,
                row.flavor.name,
                row.get_capacity_type_display(),
                row.rate,
                row.effective_from,
                until - dt.timedelta(days=1) if until else "",
            ]
        )
    overhead: list[reports.Row] = [
        [row.name, row.amount]
        for row in Overhead.objects.filter(organization_id=organization_id, starts__lte=start)
        .filter(Q(ends=None) | Q(ends__gte=start))
        .order_by("name")
    ]
    return book, overhead


# --- closing and reopening ---------------------------------------------------------------------------------------


def parse_month(value: Any) -> dt.date:
    """A month given as YYYY-MM (or a date in it); a ``ValidationError`` naming ``month`` otherwise."""
    if isinstance(value, dt.date):
        return value.replace(day=1)
    if value in (None, ""):
        raise ValidationError({"month": "Name the month (YYYY-MM)."})
    return params.month(value)


def _issue_number(organization_id: int, month: dt.date) -> Iterator[tuple[str, int]]:
    """Statement numbers that follow the organization's last one (called under the organization's lock)."""
    last = Statement.objects.filter(organization_id=organization_id).aggregate(last=Max("serial"))["last"] or 0
    serial = last
    while True:
        serial += 1
        yield f"{month:%Y-%m}-{serial:05d}", serial


def close(actor: User, organization: Organization, month: Any, http: HttpRequest | None = None) -> Period:
    """Close ``month``: freeze its attribution and issue its statements. The month must have ended and be open."""
    policy.require(actor, "period.close", organization)
    first = parse_month(month)
    today = timezone.now().astimezone(dt.UTC).date()
    if month_bounds(first)[1] > today:
        raise ValidationError(
            {"month": f"{reports.month_label(first)} has not ended: it can be closed from {month_bounds(first)[1]}."}
        )
    with transaction.atomic():
        Organization.objects.select_for_update().filter(pk=organization.pk).first()  # one close or reopen at a time
        period = Period.objects.filter(organization=organization, month=first).first()
        if period is not None and period.closed:
            by = period.closed_by.username if period.closed_by else "someone"
            raise ValidationError(
                {"month": f"{reports.month_label(first)} is already closed (on {period.closed_at:%Y-%m-%d} by {by})."}
            )
        result = attribution.attribute(organization.pk, first)
        jobs = attribution.job_costs(organization.pk, first)
        now = timezone.now()
        if period is None:
            period = Period(organization=organization, month=first, revision=1)
        else:
            period.revision += 1
        period.closed, period.closed_at, period.closed_by = True, now, actor
        period.snapshot = attribution.freeze(result, jobs)
        period.inputs = inputs(organization.pk, first)
        period.save()
        issued = _issue(period, result, jobs, actor)
        audit.record(
            "period.closed",
            actor=actor,
            target=period,
            organization=organization,
            changes={
                "month": [None, reports.month_label(first)],
                "revision": [None, period.revision],
                "fleet_total": [None, str(money(result.fleet_total))],
                "statements": [None, sorted({s.number for s in issued})],
            },
            request=http,
        )
        prices.changed(organization.pk)
    return period


def _issue(period: Period, result: Attribution, jobs: list[JobCost], actor: User) -> list[Statement]:
    """Every team's statement of the month (teams with lines) and the fleet summary, each under its own number in
    two formats (CSV and XLSX, the same figures), kept as they were made."""
    org_id = period.organization_id
    book, overhead = in_force(org_id, period.month)
    numbers = _issue_number(org_id, period.month)
    teams = sorted({line.team for line in result.lines}, key=lambda t: result.names.of("team", t))
    made: list[Statement] = []
    for team in [*teams, None]:
        number, serial = next(numbers)
        issue = reports.Issue(number, period.closed_at, actor.username, book, overhead)
        for fmt in Statement.Format:
            content = _render(result, jobs, team, fmt, issue)
            made.append(
                Statement.objects.create(
                    organization_id=org_id,
                    period=period,
                    team_id=team,
                    format=fmt,
                    number=number,
                    serial=serial,
                    revision=period.revision,
                    content=content,
                    sha256=hashlib.sha256(content).hexdigest(),
                    issued_at=period.closed_at,
                )
            )
    return made


def _render(result: Attribution, jobs: list[JobCost], team: int | None, fmt: str, issue: reports.Issue) -> bytes:
    """A team's statement (or the fleet summary, no team) as the bytes of one file."""
    if fmt == Statement.Format.CSV:
        if team is None:
            rows = reports.csv_stream(reports.FLEET_HEADER, reports.fleet_rows(result))
        else:
            rows = reports.csv_stream(reports.STATEMENT_HEADER, reports.statement_rows(result, team))
        return "".join(rows).encode()
    if team is None:
        return reports.fleet_xlsx(result, issue).read()
    return reports.statement_xlsx(result, team, [j for j in jobs if j.team == team], issue).read()


def reopen(actor: User, organization: Organization, month: Any, reason: Any, http: HttpRequest | None = None) -> Period:
    """Reopen a closed month, saying why: its statements are superseded and the corrections of it withdrawn."""
    policy.require(actor, "period.close", organization)
    first = parse_month(month)
    why = str(reason or "").strip()
    if not why:
        raise ValidationError({"reason": "Say why the month is reopened (it goes in the audit log)."})
    if len(why) > REASON_MOST:
        raise ValidationError({"reason": f"At most {REASON_MOST} characters."})
    with transaction.atomic():
        Organization.objects.select_for_update().filter(pk=organization.pk).first()
        period: Period | None = Period.objects.filter(organization=organization, month=first, closed=True).first()
        if period is None:
            raise ValidationError({"month": f"{reports.month_label(first)} is not closed."})
        later = Period.objects.filter(organization=organization, month__gt=first, closed=True).order_by("month")
        if later.exists():
            months = ", ".join(reports.month_label(p.month) for p in later)
            raise ValidationError(
                {"month": f"Later months are closed ({months}); reopen them first, the latest first."}
            )
        withdrawn = Adjustment.objects.filter(organization=organization, corrects=first)
        total = sum(a.usage + a.idle + a.overhead for a in withdrawn)
        count = withdrawn.count()
        withdrawn.delete()
        now = timezone.now()
        Statement.objects.filter(period=period, superseded_at=None).update(superseded_at=now)
        period.closed, period.snapshot, period.inputs = False, b"", {}
        period.save(update_fields=["closed", "snapshot", "inputs"])
        audit.record(
            "period.reopened",
            actor=actor,
            target=period,
            organization=organization,
            changes={
                "month": [reports.month_label(first), reports.month_label(first)],
                "closed": [True, False],
                "corrections_withdrawn": [None, f"{count} ({money(total)})"],
            },
            reason=why,
            request=http,
        )
        prices.changed(organization.pk)
    return period


# --- corrections -------------------------------------------------------------------------------------------------


def _sums(result: Attribution) -> dict[tuple[Any, ...], list[int]]:
    """The month's lines summed per statement line (``GRAIN``), and what stayed unallocated (no team)."""
    sums: dict[tuple[Any, ...], list[int]] = defaultdict(lambda: [0, 0, 0, 0])
    for line in result.lines:
        acc = sums[tuple(getattr(line, d) for d in GRAIN)]
        for i, name in enumerate(AMOUNTS):
            acc[i] += getattr(line, name)
    sums[(None,) * len(GRAIN)] = [0, 0, result.unallocated_idle, result.unallocated_overhead]
    return sums


def adjust(organization: Organization | int, now: dt.datetime | None = None) -> list[Adjustment]:
    """Book the corrections of every closed month whose inputs changed since it was last compared."""
    org_id = organization if isinstance(organization, int) else organization.pk
    now = now or timezone.now()
    booked: list[Adjustment] = []
    for month in sorted(closed_months(org_id)):
        booked += _adjust_month(org_id, month, now)
    if booked:
        prices.changed(org_id)
    return booked


def _adjust_month(org_id: int, month: dt.date, now: dt.datetime) -> list[Adjustment]:
    with transaction.atomic():
        period = Period.objects.select_for_update().filter(organization_id=org_id, month=month, closed=True).first()
        if period is None:
            return []
        current = inputs(org_id, month)
        before = period.inputs or {}
        if current == before:
            return []
        changed = [words for name, words in INPUTS.items() if before.get(name) != current.get(name)]
        live = _sums(attribution.attribute(org_id, month))
        expected = _sums(attribution.thaw(bytes(period.snapshot))[0])
        for row in Adjustment.objects.filter(organization_id=org_id, corrects=month):
            key: tuple[Any, ...] = (
                (row.team_id, row.project_id, row.user_id, row.cluster_id, row.flavor_id, row.capacity_type or None)
                if row.team_id is not None
                else (None,) * len(GRAIN)
            )
            acc = expected.setdefault(key, [0, 0, 0, 0])
            for i, name in enumerate(AMOUNTS):
                acc[i] += getattr(row, name)
        book_in = open_after(org_id, month)
        last_day = month_bounds(book_in)[1] - dt.timedelta(days=1)
        day = min(now.astimezone(dt.UTC).date(), last_day)
        reason = f"{reports.month_label(month)} corrected: {', '.join(changed)}"[:200]
        rows = []
        for key in sorted(set(live) | set(expected), key=lambda k: tuple((v is None, str(v)) for v in k)):
            got, had = live.get(key, [0, 0, 0, 0]), expected.get(key, [0, 0, 0, 0])
            delta = [g - h for g, h in zip(got, had, strict=True)]
            if not any(delta):
                continue
            team, project, user, cluster, flavor, kind = key
            rows.append(
                Adjustment(
                    organization_id=org_id,
                    corrects=month,
                    month=book_in,
                    day=day,
                    team_id=team,
                    project_id=project,
                    user_id=user,
                    cluster_id=cluster,
                    flavor_id=flavor,
                    capacity_type=kind or "",
                    created_at=now,
                    reason=reason,
                    **dict(zip(AMOUNTS, delta, strict=True)),
                )
            )
        Adjustment.objects.bulk_create(rows)
        period.inputs = current
        period.save(update_fields=["inputs"])
    return rows


# --- reading -----------------------------------------------------------------------------------------------------


def issued(organization_id: int, month: dt.date, team_id: int | None, fmt: str) -> Statement | None:
    """The statement in force of a closed month for a team (or the fleet summary, no team), if one was issued."""
    found = Statement.objects.filter(
        organization_id=organization_id,
        period__month=month_bounds(month)[0],
        period__closed=True,
        format=fmt,
        superseded_at=None,
    )
    found = found.filter(team__isnull=True) if team_id is None else found.filter(team_id=team_id)
    return found.select_related("period", "team").first()


def periods(organization: Organization, user: AnyUser, months: int = 12) -> list[dict[str, Any]]:
    """The last ``months`` ended months and this one, newest first: open or closed, with their statements in force
    and the corrections booked in each (for the periods page and the API). Finance and admins only."""
    policy.require(user, "finance.read", organization)
    month = timezone.now().astimezone(dt.UTC).date().replace(day=1)
    listed = []
    for _ in range(months + 1):
        listed.append(month)
        month = (month - dt.timedelta(days=1)).replace(day=1)
    return _described(organization, listed)


def period(organization: Organization, user: AnyUser, month: dt.date) -> dict[str, Any]:
    """One month as ``periods`` lists it."""
    policy.require(user, "finance.read", organization)
    return _described(organization, [month_bounds(month)[0]])[0]


def _described(organization: Organization, months: list[dt.date]) -> list[dict[str, Any]]:
    current = timezone.now().astimezone(dt.UTC).date().replace(day=1)
    rows = {
        p.month: p
        for p in Period.objects.filter(organization=organization, month__in=months)
        .select_related("closed_by")
        .defer("snapshot")
    }
    statements: dict[dt.date, list[Statement]] = defaultdict(list)
    for statement in (
        Statement.objects.filter(organization=organization, period__month__in=months, superseded_at=None)
        .select_related("team", "period")
        .defer("content", "period__snapshot")
        .order_by("serial", "format")
    ):
        statements[statement.period.month].append(statement)
    corrections: dict[dt.date, Decimal] = defaultdict(Decimal)
    for row in Adjustment.objects.filter(organization=organization, month__in=months).values(
        "month", "usage", "idle", "overhead"
    ):
        corrections[row["month"]] += money(row["usage"] + row["idle"] + row["overhead"])
    described = []
    for month in months:
        found = rows.get(month)
        closed = bool(found and found.closed)
        described.append(
            {
                "month": month,
                "period": found,
                "closed": closed,
                "ended": month < current,
                "statements": statements.get(month, []) if closed else [],
                "corrections": corrections.get(month, Decimal(0)),
            }
        )
    return described
