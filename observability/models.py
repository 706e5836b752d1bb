"""The history the portal keeps for its time-based SLOs (``observability/slo.py``): one row per organization,
SLO and minute, with the good and total units of that minute (the loop: 1 of 1 when it was not silent; the
clusters: how many of them were freshly synced)."""

from __future__ import annotations

from django.db import models

from tenancy.models import Organization


class SloSample(models.Model):
    organization = models.ForeignKey(Organization, on_delete=models.CASCADE, related_name="+")
    slo = models.CharField(max_length=40)
    minute = models.DateTimeField()
    good = models.PositiveIntegerField()
    total = models.PositiveIntegerField()

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["organization", "slo", "minute"], name="slo_sample_unique_minute"),
        ]

    def __str__(self) -> str:
        return f"{self.slo} of {self.organization_id} at {self.minute:%Y-%m-%d %H:%M}: {self.good}/{self.total}"
