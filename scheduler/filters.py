"""FilterSets for jobs, shared by the job pages, the API and the ``qm`` CLI (through the API); and for queues
and the history of quota changes (the quotas API)."""

from __future__ import annotations

from typing import Any

import django_filters
from django.db.models import Q, QuerySet

from scheduler.lifecycle import ACTIVE, FINAL
from scheduler.models import Job, Queue, QuotaChange

#: Names for groups of states, usable beside the states themselves: ``?state=active``.
STATE_GROUPS: dict[str, frozenset[str]] = {"active": ACTIVE, "final": FINAL}


class StateInFilter(django_filters.BaseInFilter, django_filters.ChoiceFilter):
    """A comma-separated list of states (or groups); an unknown one is a 400 naming ``state``."""


def _slug_or_id(queryset: QuerySet[Job], field: str, value: str) -> QuerySet[Job]:
    match = Q(**{f"{field}__slug": value})
    if value.isdigit():
        match |= Q(**{f"{field}_id": int(value)})
    return queryset.filter(match)


class JobFilter(django_filters.FilterSet):
    state = StateInFilter(
        choices=[*Job.State.choices, *((g, g.capitalize()) for g in STATE_GROUPS)],
        method="filter_state",
        help_text="Comma-separated states, or `active` / `final`.",
    )
    team = django_filters.CharFilter(method="filter_team", help_text="A team's slug or id.")
    project = django_filters.CharFilter(method="filter_project", help_text="A project's slug or id.")
    queue = django_filters.CharFilter(field_name="queue__name", help_text="A queue's name.")
    tier = django_filters.CharFilter(field_name="tier__name", help_text="A priority tier's name.")
    submitted_by = django_filters.CharFilter(method="filter_submitted_by", help_text="A username, or `me`.")
    q = django_filters.CharFilter(field_name="name", lookup_expr="icontains", help_text="Name contains.")

    class Meta:
        model = Job
        fields = ["state", "team", "project", "queue", "tier", "submitted_by", "q"]

    def filter_state(self, queryset: QuerySet[Job], name: str, value: list[str]) -> QuerySet[Job]:
        states: set[str] = set()
        for item in value:
            states |= STATE_GROUPS.get(item, {item})
        return queryset.filter(state__in=sorted(states))

    def filter_team(self, queryset: QuerySet[Job], name: str, value: str) -> QuerySet[Job]:
        return _slug_or_id(queryset, "team", value)

    def filter_project(self, queryset: QuerySet[Job], name: str, value: str) -> QuerySet[Job]:
        return _slug_or_id(queryset, "project", value)

    def filter_submitted_by(self, queryset: QuerySet[Job], name: str, value: str) -> QuerySet[Job]:
        if value == "me":
            return queryset.filter(submitted_by=self.request.user) if self.request else queryset.none()
        return queryset.filter(submitted_by__username=value)


# --- quotas: the queues API and the history of quota changes (``scheduler/quota_api.py``) -------------------


def _of_team(queryset: QuerySet[Any], value: str) -> QuerySet[Any]:
    match = Q(team__slug=value)
    if value.isdigit():
        match |= Q(team_id=int(value))
    return queryset.filter(match)


class QueueFilter(django_filters.FilterSet):
    team = django_filters.CharFilter(method="filter_team", help_text="A team's slug or id.")

    class Meta:
        model = Queue
        fields = ["team"]

    def filter_team(self, queryset: QuerySet[Queue], name: str, value: str) -> QuerySet[Queue]:
        return _of_team(queryset, value)


class QuotaChangeFilter(django_filters.FilterSet):
    team = django_filters.CharFilter(method="filter_team", help_text="A team's slug or id.")
    queue = django_filters.NumberFilter(field_name="queue_id", help_text="A queue's id.")
    kind = django_filters.ChoiceFilter(choices=QuotaChange.Kind.choices)

    class Meta:
        model = QuotaChange
        fields = ["team", "queue", "kind"]

    def filter_team(self, queryset: QuerySet[QuotaChange], name: str, value: str) -> QuerySet[QuotaChange]:
        return _of_team(queryset, value)
