"""API endpoints for tenancy, tokens and the audit log. Thin: scoping by `for_user`, changes by actions."""

from __future__ import annotations

from typing import Any

from django.contrib.auth import authenticate
from django.db.models import QuerySet
from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework import mixins, status
from rest_framework.permissions import AllowAny
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from common.api.errors import error_body
from tenancy import actions
from tenancy.api import serializers as s
from tenancy.filters import AuditLogFilter, MembershipFilter, ProjectFilter, TeamFilter
from tenancy.models import ApiToken, AuditLog, Membership, Organization, Project, ServiceAccount, Team
from tenancy.rest import SignedInViewSet, TenantViewSet
from tenancy.scopes import TokenScope


class OrganizationViewSet(TenantViewSet, mixins.ListModelMixin, mixins.RetrieveModelMixin):
    model = Organization
    serializer_class = s.OrganizationSerializer


class TeamViewSet(TenantViewSet, mixins.ListModelMixin, mixins.RetrieveModelMixin, mixins.CreateModelMixin):
    model = Team
    serializer_class = s.TeamSerializer
    filterset_class = TeamFilter

    def get_queryset(self) -> QuerySet[Team]:
        return super().get_queryset().select_related("organization")

    def perform_create(self, serializer: s.TeamSerializer) -> None:  # type: ignore[override]
        data = serializer.validated_data
        serializer.instance = actions.create_team(
            self.actor,
            data["organization"],
            name=data["name"],
            slug=data.get("slug"),
            description=data.get("description", ""),
            http=self.request,
        )


class ProjectViewSet(TenantViewSet, mixins.ListModelMixin, mixins.RetrieveModelMixin, mixins.CreateModelMixin):
    model = Project
    serializer_class = s.ProjectSerializer
    filterset_class = ProjectFilter

    def get_queryset(self) -> QuerySet[Project]:
        return super().get_queryset().select_related("team")

    def perform_create(self, serializer: s.ProjectSerializer) -> None:  # type: ignore[override]
        data = serializer.validated_data
        serializer.instance = actions.create_project(
            self.actor,
            data["team"],
            name=data["name"],
            slug=data.get("slug"),
            description=data.get("description", ""),
            http=self.request,
        )


class MembershipViewSet(
    TenantViewSet,
    mixins.ListModelMixin,
    mixins.RetrieveModelMixin,
    mixins.CreateModelMixin,
    mixins.DestroyModelMixin,
):
    model = Membership
    filterset_class = MembershipFilter
    http_method_names = ["get", "post", "patch", "delete", "head", "options"]

    def get_queryset(self) -> QuerySet[Membership]:
        return super().get_queryset().select_related("user", "team", "organization")

    def get_serializer_class(self) -> type[Any]:
        if self.action == "create":
            return s.MembershipCreateSerializer
        if self.action == "partial_update":
            return s.RoleChangeSerializer
        return s.MembershipSerializer

    def perform_create(self, serializer: s.MembershipCreateSerializer) -> None:  # type: ignore[override]
        data = serializer.validated_data
        serializer.instance = actions.add_member(
            self.actor,
            data["organization"],
            username=data["user"]["username"],
            role=data["role"],
            team=data.get("team"),
            http=self.request,
        )

    @extend_schema(request=s.RoleChangeSerializer, responses=s.MembershipSerializer)
    def partial_update(self, request: Request, pk: str | None = None) -> Response:
        membership = self.get_object()
        change = s.RoleChangeSerializer(data=request.data)
        change.is_valid(raise_exception=True)
        membership = actions.change_role(
            self.actor,
            membership,
            role=change.validated_data["role"],
            reason=change.validated_data["reason"],
            http=request,
        )
        return Response(s.MembershipSerializer(membership, context=self.get_serializer_context()).data)

    def perform_destroy(self, instance: Membership) -> None:
        actions.remove_member(self.actor, instance, http=self.request)


class AuditLogViewSet(TenantViewSet, mixins.ListModelMixin, mixins.RetrieveModelMixin):
    """The audit log of the organizations the user administers."""

    model = AuditLog
    serializer_class = s.AuditLogSerializer
    filterset_class = AuditLogFilter

    def get_queryset(self) -> QuerySet[AuditLog]:
        return super().get_queryset().select_related("target_type")


class MeView(APIView):
    @extend_schema(responses=s.MeSerializer)
    def get(self, request: Request) -> Response:
        return Response(s.MeSerializer(request.user).data)


class TokenView(APIView):
    """Exchange a username and password for a personal API token; DELETE revokes the token in use.

    After too many wrong passwords from one address or for one username, every try is refused for a while,
    even with the right password: 429, with Retry-After in seconds."""

    def get_permissions(self) -> list[Any]:
        # Anybody may ask for a token with a password; a service account's token stays within its scope.
        return [AllowAny(), TokenScope()] if self.request.method == "POST" else list(super().get_permissions())

    @extend_schema(
        request=s.TokenRequestSerializer,
        responses={
            201: s.NewTokenSerializer,
            400: OpenApiResponse(description="`{error: {status, code, message, fields}}`"),
            429: OpenApiResponse(description="Too many failed sign-ins: `{error: …}`, and Retry-After in seconds."),
        },
        auth=[],
    )
    def post(self, request: Request) -> Response:
        form = s.TokenRequestSerializer(data=request.data)
        form.is_valid(raise_exception=True)
        data = form.validated_data
        # A locked-out client is refused here whatever the password, and answered 429 (tenancy/signin.py).
        user = authenticate(request._request, username=data["username"], password=data["password"])
        if user is None or not user.is_active:
            message = "Wrong username or password."
            body = error_body(400, "invalid_credentials", message, {"password": [message]})
            return Response(body, status=status.HTTP_400_BAD_REQUEST)
        token, raw = actions.issue_token(
            user, name=data["name"], expires_in_days=data.get("expires_in_days"), http=request._request
        )
        body = s.NewTokenSerializer(token).data
        body["token"] = raw
        return Response(body, status=status.HTTP_201_CREATED)

    @extend_schema(request=None, responses={204: None})
    def delete(self, request: Request) -> Response:
        if not isinstance(request.auth, ApiToken):
            body = error_body(400, "no_token", "This request was not authenticated with a token.")
            return Response(body, status=status.HTTP_400_BAD_REQUEST)
        actions.revoke_token(request.auth.user, request.auth, http=request._request)
        return Response(status=status.HTTP_204_NO_CONTENT)


class TokenViewSet(SignedInViewSet, mixins.ListModelMixin, mixins.RetrieveModelMixin, mixins.DestroyModelMixin):
    """The requesting user's own tokens; another user's token is a 404. DELETE revokes."""

    serializer_class = s.TokenSerializer
    queryset = ApiToken.objects.none()  # for the schema; requests use get_queryset

    def get_queryset(self) -> QuerySet[ApiToken]:
        return ApiToken.objects.filter(user=self.actor)

    def perform_destroy(self, instance: ApiToken) -> None:
        actions.revoke_token(self.actor, instance, http=self.request._request)


class ServiceAccountViewSet(TenantViewSet, mixins.ListModelMixin, mixins.RetrieveModelMixin, mixins.DestroyModelMixin):
    """Service accounts of the teams the user leads (all of the organization's, for an admin). POST creates one
    and answers its token once; DELETE revokes it, and its token stops working at once."""

    model = ServiceAccount
    serializer_class = s.ServiceAccountSerializer

    def get_queryset(self) -> QuerySet[ServiceAccount]:
        return super().get_queryset().select_related("user", "created_by").order_by("pk")

    @extend_schema(request=s.ServiceAccountCreateSerializer, responses={201: s.NewServiceAccountSerializer})
    def create(self, request: Request) -> Response:
        form = s.ServiceAccountCreateSerializer(data=request.data, context=self.get_serializer_context())
        form.is_valid(raise_exception=True)
        data = form.validated_data
        account, raw = actions.create_service_account(
            self.actor,
            data["team"],
            name=data["name"],
            scope=data["scope"],
            expires_in_days=data.get("expires_in_days"),
            http=request._request,
        )
        body = s.NewServiceAccountSerializer(account, context=self.get_serializer_context()).data
        body["secret"] = raw
        return Response(body, status=status.HTTP_201_CREATED)

    def perform_destroy(self, instance: ServiceAccount) -> None:
        actions.revoke_service_account(self.actor, instance, http=self.request._request)
