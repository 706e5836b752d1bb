"""FilterSets shared by the portal's list pages, the API and exports: one definition per model.

A filter that names a tenant object (a team, an organization) filters by its id (`IdFilter`) within what the
list already shows the user: another organization's team then matches nothing, exactly as one that does not
exist, so a filter is no way to learn which ids exist.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

import django_filters
from django import forms
from django.db import models
from django.db.models import QuerySet
from drf_spectacular.utils import extend_schema_field

from common import params
from tenancy.models import AuditLog, Membership, Project, Role, Team

# --- filters that parse through ``common.params``: ASCII digits, ids in the database's range -----------------


@extend_schema_field({"type": "integer", "minimum": 1, "maximum": params.MAX_ID})
class IdFilter(django_filters.Filter):
    """An object by id (``params.id_``); an id that names nothing matches nothing."""

    field_class = params.IdField


@extend_schema_field({"type": "string", "format": "date-time"})
class DateTimeFilter(django_filters.Filter):
    """An ISO 8601 date and time (``params.datetime_``): as UTC, within what the database stores."""

    field_class = params.DateTimeField


class SlugOrIdFilter(django_filters.CharFilter):
    """A related object by its slug (or ``slug_field``), or by its id when the value is one (``params.as_id``):
    ``team=vision`` or ``team=3``."""

    def __init__(self, *args: Any, slug_field: str = "slug", **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.slug_field = slug_field

    def filter(self, qs: QuerySet[Any], value: Any) -> QuerySet[Any]:
        if value in django_filters.constants.EMPTY_VALUES:
            return qs
        return qs.filter(params.slug_or_id(value, self.field_name, self.slug_field))


class FilterSet(django_filters.FilterSet):
    """django-filter's, with foreign keys named in ``Meta.fields`` filtered by id through ``IdFilter``
    (its ModelChoiceFilter took ``²`` to ``int()`` and an id past 2**63 to the database)."""

    FILTER_DEFAULTS = {
        **django_filters.FilterSet.FILTER_DEFAULTS,
        models.ForeignKey: {"filter_class": IdFilter},
        models.OneToOneField: {"filter_class": IdFilter},
    }


# --- the portal's FilterSets --------------------------------------------------------------------------------


class TeamFilter(FilterSet):
    organization = IdFilter(field_name="organization")

    class Meta:
        model = Team
        fields = ["organization", "slug"]


@extend_schema_field({"type": "boolean"})
class StrictBooleanFilter(django_filters.TypedChoiceFilter):
    """`true` or `false`, and nothing else: an unknown value is a 400, not silently ignored."""

    def __init__(self, field_name: str, **kwargs: Any) -> None:
        choices = [("true", "true"), ("false", "false")]
        super().__init__(field_name=field_name, choices=choices, coerce=lambda value: value == "true", **kwargs)


class ProjectFilter(FilterSet):
    archived = StrictBooleanFilter("archived")

    class Meta:
        model = Project
        fields = ["team", "archived", "slug"]


class MembershipFilter(FilterSet):
    role = django_filters.ChoiceFilter(choices=Role.choices)
    username = django_filters.CharFilter(field_name="user__username")

    class Meta:
        model = Membership
        fields = ["organization", "team", "role", "username"]


class AuditLogFilter(FilterSet):
    action = django_filters.CharFilter(lookup_expr="startswith", help_text="e.g. `membership` or `auth.login`")
    actor = django_filters.CharFilter(field_name="actor_name", help_text="The actor's username.")
    since = DateTimeFilter(field_name="created_at", lookup_expr="gte")
    until = DateTimeFilter(field_name="created_at", lookup_expr="lt")
    q = django_filters.CharFilter(field_name="target_repr", lookup_expr="icontains", help_text="Target contains.")

    class Meta:
        model = AuditLog
        fields = ["organization", "action", "actor", "since", "until", "q"]


class DayFilter(django_filters.DateFilter):
    """A calendar day (``2026-05-01``, UTC) from a date picker: ``since`` from its first instant, ``until`` to
    its last (the day included)."""

    def __init__(self, *args: Any, through: bool = False, **kwargs: Any) -> None:
        kwargs.setdefault("widget", forms.DateInput(attrs={"type": "date"}))
        super().__init__(*args, **kwargs)
        self.through = through

    def filter(self, qs: QuerySet[Any], value: Any) -> QuerySet[Any]:
        if value in django_filters.constants.EMPTY_VALUES:
            return qs
        start = dt.datetime.combine(value, dt.time(), tzinfo=dt.UTC)
        if self.through:
            try:
                return qs.filter(**{f"{self.field_name}__lt": start + dt.timedelta(days=1)})
            except OverflowError:  # the last day there is: nothing after it to leave out
                return qs
        return qs.filter(**{f"{self.field_name}__gte": start})


class AuditPageFilter(AuditLogFilter):
    """The audit page's and its CSV export's filters: the API's, with days picked from a calendar for
    ``since`` and ``until`` (both included) instead of instants."""

    since = DayFilter(field_name="created_at", label="From (day, UTC)")
    until = DayFilter(field_name="created_at", through=True, label="Until (day, UTC, included)")
