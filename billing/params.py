"""What finance's pages and API take from a query string, checked one way: a ``ValidationError`` naming the
parameter (a 400), or what it names, found through ``for_user`` (another team's is a 404)."""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from typing import Any

from django.core.exceptions import ValidationError
from django.http import Http404
from django.utils import timezone

from billing.attribution import DIMENSIONS
from common import params as strict
from common.types import AnyUser
from tenancy.models import Organization, Team
from tenancy.scoping import Action

MOST_JOBS = 10_000


def month(value: Any, default: dt.date | None = None) -> dt.date:
    """``YYYY-MM`` as the first day of that month; empty: ``default``, else this month (UTC)."""
    if value in (None, ""):
        return default or timezone.now().astimezone(dt.UTC).date().replace(day=1)
    try:
        first = dt.datetime.strptime(str(value), "%Y-%m").date()
    except ValueError:
        raise ValidationError({"month": f"{value!r} is not a month (YYYY-MM)."}) from None
    if first.year < 2000:
        raise ValidationError({"month": "Must be in the year 2000 or later."})
    return first


def group_by(value: Any, default: tuple[str, ...] = ("team",)) -> tuple[str, ...]:
    """Comma-separated dimensions among ``attribution.DIMENSIONS``, each once."""
    if value in (None, ""):
        return default
    names = tuple(part.strip() for part in str(value).split(","))
    unknown = [n for n in names if n not in DIMENSIONS]
    if unknown:
        raise ValidationError(
            {"group_by": f"Unknown {', '.join(map(repr, unknown))}; choose from {', '.join(DIMENSIONS)}."}
        )
    if len(set(names)) != len(names):
        raise ValidationError({"group_by": "Name each dimension once."})
    return names


def team(user: AnyUser, value: Any, organization_id: int) -> Team | None:
    """A team of the organization the user may see, by id or slug; None when not given."""
    if value in (None, ""):
        return None
    teams = Team.objects.for_user(user, Action.VIEW).filter(organization_id=organization_id)
    text = str(value)
    pk = strict.as_id(text)
    found: Team | None = teams.filter(pk=pk).first() if pk is not None else teams.filter(slug=text).first()
    if found is None:
        raise Http404("No such team.")
    return found


def limit(value: Any, default: int = 50) -> int:
    if value in (None, ""):
        return default
    return strict.integer(value, "limit", low=1, high=MOST_JOBS)


def unknown(query: Mapping[str, Any], known: set[str]) -> None:
    extra = sorted(set(query) - known)
    if extra:
        raise ValidationError(dict.fromkeys(extra, "Unknown parameter."))


def organization(user: AnyUser, value: Any = None) -> Organization:
    """The organization asked for (by id or slug), else the user's first; one the user is not in is a 404."""
    mine = Organization.objects.for_user(user, Action.VIEW).order_by("pk")
    if value not in (None, ""):
        text = str(value)
        pk = strict.as_id(text)
        mine = mine.filter(pk=pk) if pk is not None else mine.filter(slug=text)
    found: Organization | None = mine.first()
    if found is None:
        raise Http404("No such organization.")
    return found
