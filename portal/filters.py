"""FilterSets shared by the portal's list pages, the API and exports: one definition per model.

A filter that names a tenant object (a team, an organization) chooses among those the user may see
(`visible`): another organization's team is then refused exactly as one that does not exist, so a filter is
no way to learn which ids exist. The list pages and the API pass the request for that.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import django_filters
from django.db.models import Model, QuerySet

from portal.models import AuditLog, Membership, Organization, Project, Role, Team
from portal.tenancy import Action


def visible(model: type[Model]) -> Callable[[Any], QuerySet[Any]]:
    """The choices of a filter naming a ``model`` object: those the request's user may see (none without one)."""

    def choices(request: Any) -> QuerySet[Any]:
        user = getattr(request, "user", None)
        manager: Any = model._default_manager
        return manager.none() if user is None else manager.for_user(user, Action.VIEW)  # type: ignore[no-any-return]

    return choices


def naming(model: type[Model], **options: Any) -> django_filters.ModelChoiceFilter:
    return django_filters.ModelChoiceFilter(queryset=visible(model), **options)


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
    team = naming(Team)
    archived = strict_boolean("archived")

    class Meta:
        model = Project
        fields = ["team", "archived", "slug"]


class MembershipFilter(django_filters.FilterSet):
    organization = naming(Organization)
    team = naming(Team)
    role = django_filters.ChoiceFilter(choices=Role.choices)
    username = django_filters.CharFilter(field_name="user__username")

    class Meta:
        model = Membership
        fields = ["organization", "team", "role", "username"]


class AuditLogFilter(django_filters.FilterSet):
    organization = naming(Organization)
    action = django_filters.CharFilter(lookup_expr="startswith", help_text="e.g. `membership` or `auth.login`")
    actor = django_filters.CharFilter(field_name="actor_name", help_text="The actor's username.")
    since = django_filters.IsoDateTimeFilter(field_name="created_at", lookup_expr="gte")
    until = django_filters.IsoDateTimeFilter(field_name="created_at", lookup_expr="lt")
    q = django_filters.CharFilter(field_name="target_repr", lookup_expr="icontains", help_text="Target contains.")

    class Meta:
        model = AuditLog
        fields = ["organization", "action", "actor", "since", "until", "q"]
