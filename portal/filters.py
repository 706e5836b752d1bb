"""FilterSets shared by the portal's list pages, the API and exports: one definition per model."""

from __future__ import annotations

import django_filters

from portal.models import AuditLog, Membership, Project, Role, Team


class TeamFilter(django_filters.FilterSet):
    organization = django_filters.NumberFilter(field_name="organization")

    class Meta:
        model = Team
        fields = ["organization", "slug"]


def strict_boolean(field_name: str) -> django_filters.TypedChoiceFilter:
    """`true` or `false`, and nothing else: an unknown value is a 400, not silently ignored."""
    return django_filters.TypedChoiceFilter(
        field_name=field_name, choices=[("true", "true"), ("false", "false")], coerce=lambda value: value == "true"
    )


class ProjectFilter(django_filters.FilterSet):
    archived = strict_boolean("archived")

    class Meta:
        model = Project
        fields = ["team", "archived", "slug"]


class MembershipFilter(django_filters.FilterSet):
    role = django_filters.ChoiceFilter(choices=Role.choices)
    username = django_filters.CharFilter(field_name="user__username")

    class Meta:
        model = Membership
        fields = ["organization", "team", "role", "username"]


class AuditLogFilter(django_filters.FilterSet):
    action = django_filters.CharFilter(lookup_expr="startswith", help_text="e.g. `membership` or `auth.login`")
    actor = django_filters.CharFilter(field_name="actor_name", help_text="The actor's username.")
    since = django_filters.IsoDateTimeFilter(field_name="created_at", lookup_expr="gte")
    until = django_filters.IsoDateTimeFilter(field_name="created_at", lookup_expr="lt")
    q = django_filters.CharFilter(field_name="target_repr", lookup_expr="icontains", help_text="Target contains.")

    class Meta:
        model = AuditLog
        fields = ["organization", "action", "actor", "since", "until", "q"]
