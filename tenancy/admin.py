"""The raw Django admin, for superusers. Audit entries are read-only here as everywhere."""

from typing import Any

from django.contrib import admin
from django.http import HttpRequest

from tenancy.models import ApiToken, AuditLog, Membership, Organization, Project, Team


@admin.register(Organization)
class OrganizationAdmin(admin.ModelAdmin[Organization]):
    list_display = ["name", "slug"]
    prepopulated_fields = {"slug": ["name"]}


@admin.register(Team)
class TeamAdmin(admin.ModelAdmin[Team]):
    list_display = ["name", "organization", "slug"]
    list_filter = ["organization"]


@admin.register(Project)
class ProjectAdmin(admin.ModelAdmin[Project]):
    list_display = ["name", "team", "archived"]
    list_filter = ["team", "archived"]


@admin.register(Membership)
class MembershipAdmin(admin.ModelAdmin[Membership]):
    list_display = ["user", "role", "team", "organization"]
    list_filter = ["role", "organization", "team"]
    raw_id_fields = ["user"]


@admin.register(ApiToken)
class ApiTokenAdmin(admin.ModelAdmin[ApiToken]):
    list_display = ["name", "user", "hint", "created_at", "expires_at", "last_used_at", "revoked_at"]
    readonly_fields = ["key_hash", "hint"]


@admin.register(AuditLog)
class AuditLogAdmin(admin.ModelAdmin[AuditLog]):
    list_display = ["created_at", "actor_name", "action", "target_repr", "ip_address"]
    list_filter = ["action", "organization"]

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False
