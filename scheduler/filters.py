"""FilterSets for jobs, shared by the job pages, the API and the ``qm`` CLI (through the API)."""

from __future__ import annotations

import django_filters
from django.db.models import QuerySet

from scheduler.models import Job
from scheduler.states import ACTIVE, FINAL
from tenancy.filters import IdFilter, SlugOrIdFilter

#: Names for groups of states, usable beside the states themselves: ``?state=active``.
STATE_GROUPS: dict[str, frozenset[str]] = {"active": ACTIVE, "final": FINAL}


class StateInFilter(django_filters.BaseInFilter, django_filters.ChoiceFilter):
    """A comma-separated list of states (or groups); an unknown one is a 400 naming ``state``."""


class JobFilter(django_filters.FilterSet):
    state = StateInFilter(
        choices=[*Job.State.choices, *((g, g.capitalize()) for g in STATE_GROUPS)],
        method="filter_state",
        help_text="Comma-separated states, or `active` / `final`.",
    )
    team = SlugOrIdFilter(field_name="team", help_text="A team's slug or id.")
    project = SlugOrIdFilter(field_name="project", help_text="A project's slug or id.")
    queue = django_filters.CharFilter(field_name="queue__name", help_text="A queue's name.")
    tier = django_filters.CharFilter(field_name="tier__name", help_text="A priority tier's name.")
    submitted_by = django_filters.CharFilter(method="filter_submitted_by", help_text="A username, or `me`.")
    q = django_filters.CharFilter(field_name="name", lookup_expr="icontains", help_text="Name contains.")
    array = IdFilter(field_name="array", help_text="An array's id: its tasks.")

    class Meta:
        model = Job
        fields = ["state", "team", "project", "queue", "tier", "submitted_by", "q", "array"]

    def filter_state(self, queryset: QuerySet[Job], name: str, value: list[str]) -> QuerySet[Job]:
        states: set[str] = set()
        for item in value:
            states |= STATE_GROUPS.get(item, {item})
        return queryset.filter(state__in=sorted(states))

    def filter_submitted_by(self, queryset: QuerySet[Job], name: str, value: str) -> QuerySet[Job]:
        if value == "me":
            return queryset.filter(submitted_by=self.request.user) if self.request else queryset.none()
        return queryset.filter(submitted_by__username=value)
