"""FilterSets of the cluster pages and the API: one definition per model."""

from __future__ import annotations

from typing import Any

import django_filters
from django.db.models import QuerySet
from django.utils import timezone

from clusters.models import Cluster, MaintenanceWindow, Node
from common import params
from tenancy.filters import StrictBooleanFilter
from tenancy.scoping import Action


class ClusterRefFilter(django_filters.CharFilter):
    """A cluster by slug or id, among those the user sees; one they do not see is a 400 naming the parameter,
    the same answer as for one that does not exist (so it tells nothing about other organizations)."""

    def filter(self, qs: QuerySet[Any], value: Any) -> QuerySet[Any]:
        if value in django_filters.constants.EMPTY_VALUES:
            return qs
        request = self.parent.request if self.parent is not None else None
        user = getattr(request, "user", None)
        if user is None:
            return qs.none()
        clusters = Cluster.objects.for_user(user, Action.VIEW).filter(params.slug_or_id(value))
        if not clusters.exists():
            raise params.BadParameter(self.field_name, f"No cluster {str(value)[:60]!r}.")
        return qs.filter(cluster__in=clusters)


class NodeFilter(django_filters.FilterSet):
    state = django_filters.ChoiceFilter(choices=Node.State.choices, empty_label="any state")
    q = django_filters.CharFilter(field_name="name", lookup_expr="icontains", label="Name contains")

    class Meta:
        model = Node
        fields = ["state", "q"]


class FleetNodeFilter(NodeFilter):
    """The nodes API's filters: the cluster page's, and the cluster and health (the page is one cluster's)."""

    cluster = ClusterRefFilter(field_name="cluster", help_text="A cluster's slug or id.")
    healthy = StrictBooleanFilter("healthy", help_text="`true` or `false`.")

    class Meta:
        model = Node
        fields = ["cluster", "state", "healthy", "q"]


class MaintenanceWindowFilter(django_filters.FilterSet):
    cluster = ClusterRefFilter(field_name="cluster", help_text="A cluster's slug or id.")
    ended = StrictBooleanFilter("ended", method="filter_ended", help_text="`false`: upcoming and in progress.")

    class Meta:
        model = MaintenanceWindow
        fields = ["cluster", "ended"]

    def filter_ended(
        self, queryset: QuerySet[MaintenanceWindow], name: str, value: bool
    ) -> QuerySet[MaintenanceWindow]:
        now = timezone.now()
        return queryset.filter(ends_at__lte=now) if value else queryset.filter(ends_at__gt=now)
