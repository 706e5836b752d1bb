"""FilterSets of the quotas API: queues and the history of quota changes (``governance/api/quotas.py``)."""

from __future__ import annotations

import django_filters

from governance.models import Queue, QuotaChange
from tenancy.filters import IdFilter, SlugOrIdFilter


class QueueFilter(django_filters.FilterSet):
    team = SlugOrIdFilter(field_name="team", help_text="A team's slug or id.")

    class Meta:
        model = Queue
        fields = ["team"]


class QuotaChangeFilter(django_filters.FilterSet):
    team = SlugOrIdFilter(field_name="team", help_text="A team's slug or id.")
    queue = IdFilter(field_name="queue", help_text="A queue's id.")
    kind = django_filters.ChoiceFilter(choices=QuotaChange.Kind.choices)

    class Meta:
        model = QuotaChange
        fields = ["team", "queue", "kind"]
