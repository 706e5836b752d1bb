"""Cohorts, queues, quotas and priority tiers in the Django admin (leads and admins use the portal's pages).
Jobs are shown read-only here: they change only through their lifecycle."""

from typing import Any

from django.contrib import admin
from django.http import HttpRequest

from governance.models import Cohort, PriorityTier, Queue, Quota, QuotaChange
from scheduler.models import Job, JobEvent


class QuotaInline(admin.TabularInline[Quota, Any]):
    model = Quota
    extra = 1


@admin.register(Cohort)
class CohortAdmin(admin.ModelAdmin[Cohort]):
    list_display = ["name", "organization", "parent"]
    list_filter = ["organization"]
    inlines = [QuotaInline]


@admin.register(Queue)
class QueueAdmin(admin.ModelAdmin[Queue]):
    list_display = ["name", "team", "project", "cohort", "reclaim", "weight"]
    list_filter = ["team__organization", "cohort"]
    inlines = [QuotaInline]


@admin.register(PriorityTier)
class PriorityTierAdmin(admin.ModelAdmin[PriorityTier]):
    list_display = ["name", "organization", "value", "preemptible", "grace_seconds", "is_default"]
    list_filter = ["organization"]
    filter_horizontal = ["teams"]


class JobEventInline(admin.TabularInline[JobEvent, Any]):
    model = JobEvent
    extra = 0
    can_delete = False
    readonly_fields = ["created_at", "from_state", "to_state", "reason", "message", "attempt", "actor"]

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


@admin.register(Job)
class JobAdmin(admin.ModelAdmin[Job]):
    list_display = ["pk", "name", "team", "state", "submitted_at"]
    list_filter = ["state", "team__organization", "team"]
    search_fields = ["name"]
    inlines = [JobEventInline]

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


@admin.register(QuotaChange)
class QuotaChangeAdmin(admin.ModelAdmin[QuotaChange]):
    """The quota history, read-only: it is written by ``governance/actions/quotas.py`` alongside each change."""

    list_display = ["created_at", "actor_name", "subject", "reason"]
    list_filter = ["organization", "kind", "team"]
    search_fields = ["subject", "reason", "actor_name"]

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False
