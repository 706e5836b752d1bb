"""API representations of tenancy, tokens and the audit log."""

from __future__ import annotations

from typing import Any

from django.contrib.auth import get_user_model
from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from tenancy.models import ApiToken, AuditLog, Membership, Organization, Project, Role, ServiceAccount, Team
from tenancy.rest import ScopedRelatedField


class OrganizationSerializer(serializers.ModelSerializer[Organization]):
    class Meta:
        model = Organization
        fields = ["id", "name", "slug", "created_at"]


class TeamSerializer(serializers.ModelSerializer[Team]):
    organization = ScopedRelatedField(queryset=Organization.objects.all())
    slug = serializers.SlugField(max_length=60, required=False)

    class Meta:
        model = Team
        fields = ["id", "organization", "name", "slug", "description", "created_at"]
        read_only_fields = ["created_at"]
        validators: list[Any] = []  # uniqueness is checked by the action, with the field named


class ProjectSerializer(serializers.ModelSerializer[Project]):
    team = ScopedRelatedField(queryset=Team.objects.all())
    slug = serializers.SlugField(max_length=60, required=False)

    class Meta:
        model = Project
        fields = ["id", "team", "name", "slug", "description", "archived", "created_at"]
        read_only_fields = ["archived", "created_at"]
        validators: list[Any] = []


class MembershipSerializer(serializers.ModelSerializer[Membership]):
    username: serializers.Field[Any, Any, Any, Any] = serializers.SlugRelatedField(
        source="user", slug_field="username", read_only=True
    )
    organization = ScopedRelatedField(queryset=Organization.objects.all())
    team = ScopedRelatedField(queryset=Team.objects.all(), required=False, allow_null=True)

    class Meta:
        model = Membership
        fields = ["id", "username", "organization", "team", "role", "source", "created_at"]
        read_only_fields = ["source", "created_at"]
        validators: list[Any] = []


class MembershipCreateSerializer(MembershipSerializer):
    username: serializers.Field[Any, Any, Any, Any] = serializers.CharField(source="user.username", max_length=150)


class RoleChangeSerializer(serializers.Serializer[Any]):
    role = serializers.ChoiceField(choices=Role.choices)
    reason = serializers.CharField(required=False, allow_blank=True, default="", max_length=2000)


class TokenRequestSerializer(serializers.Serializer[Any]):
    username = serializers.CharField(max_length=150)
    password = serializers.CharField(max_length=4096, style={"input_type": "password"}, trim_whitespace=False)
    name = serializers.CharField(max_length=80, required=False, default="api")
    expires_in_days = serializers.IntegerField(required=False, min_value=1, max_value=366)


class TokenSerializer(serializers.ModelSerializer[ApiToken]):
    class Meta:
        model = ApiToken
        fields = ["id", "name", "hint", "created_at", "expires_at", "last_used_at", "revoked_at"]
        read_only_fields = fields


class NewTokenSerializer(TokenSerializer):
    token = serializers.CharField(read_only=True, help_text="Shown once; store it now.")

    class Meta(TokenSerializer.Meta):
        fields = [*TokenSerializer.Meta.fields, "token"]
        read_only_fields = fields


class ServiceAccountSerializer(serializers.ModelSerializer[ServiceAccount]):
    username = serializers.CharField(source="user.username", read_only=True)
    created_by: serializers.SlugRelatedField[Any] = serializers.SlugRelatedField(
        slug_field="username", read_only=True, allow_null=True
    )
    token = serializers.SerializerMethodField(help_text="The account's token, by its first characters.")

    class Meta:
        model = ServiceAccount
        fields = ["id", "team", "name", "scope", "username", "token", "created_by", "created_at", "revoked_at"]
        read_only_fields = fields

    @extend_schema_field(TokenSerializer(allow_null=True))
    def get_token(self, account: ServiceAccount) -> dict[str, Any] | None:
        token = account.user.api_tokens.order_by("-created_at").first()
        return TokenSerializer(token).data if token is not None else None


class ServiceAccountCreateSerializer(serializers.Serializer[Any]):
    team = ScopedRelatedField(queryset=Team.objects.all())
    name = serializers.CharField(max_length=80)
    scope = serializers.ChoiceField(choices=ServiceAccount.Scope.choices)
    expires_in_days = serializers.IntegerField(required=False, min_value=1, max_value=366)


class NewServiceAccountSerializer(ServiceAccountSerializer):
    secret = serializers.CharField(read_only=True, help_text="The token itself, shown once; store it now.")

    class Meta(ServiceAccountSerializer.Meta):
        fields = [*ServiceAccountSerializer.Meta.fields, "secret"]
        read_only_fields = fields


class MeMembershipSerializer(serializers.ModelSerializer[Membership]):
    organization: serializers.SlugRelatedField[Organization] = serializers.SlugRelatedField(
        slug_field="slug", read_only=True
    )
    team: serializers.SlugRelatedField[Team] = serializers.SlugRelatedField(slug_field="slug", read_only=True)

    class Meta:
        model = Membership
        fields = ["id", "organization", "team", "role"]


class MeSerializer(serializers.ModelSerializer[Any]):
    memberships = MeMembershipSerializer(many=True, read_only=True)

    class Meta:
        model = get_user_model()
        fields = ["id", "username", "first_name", "last_name", "email", "memberships"]
        read_only_fields = fields


class AuditLogSerializer(serializers.ModelSerializer[AuditLog]):
    target_type = serializers.SerializerMethodField()

    class Meta:
        model = AuditLog
        fields = [
            "id",
            "created_at",
            "organization",
            "actor_name",
            "action",
            "target_type",
            "target_id",
            "target_repr",
            "changes",
            "reason",
            "ip_address",
            "user_agent",
        ]
        read_only_fields = fields

    def get_target_type(self, entry: AuditLog) -> str | None:
        return f"{entry.target_type.app_label}.{entry.target_type.model}" if entry.target_type else None
