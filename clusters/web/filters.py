"""FilterSets of the cluster pages (and, later, the API and exports): one definition per model."""

from __future__ import annotations

import django_filters

from clusters.models import Node


class NodeFilter(django_filters.FilterSet):
    state = django_filters.ChoiceFilter(choices=Node.State.choices, empty_label="any state")
    q = django_filters.CharFilter(field_name="name", lookup_expr="icontains", label="Name contains")

    class Meta:
        model = Node
        fields = ["state", "q"]
