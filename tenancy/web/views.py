"""Pages of the portal: sign-in, teams, API tokens, audit log. Thin: scoping by `for_user`, changes by
actions; an invalid form is answered with 400 and the form's errors beside their fields."""

from __future__ import annotations

from http import HTTPStatus
from typing import Any

from django.conf import settings
from django.contrib import messages
from django.contrib.auth import views as auth_views
from django.contrib.auth.decorators import login_not_required
from django.core.exceptions import PermissionDenied, ValidationError
from django.core.paginator import Paginator
from django.db import connection
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse, JsonResponse, StreamingHttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.http import require_GET, require_POST

from common.types import AuthenticatedHttpRequest
from common.web.forms import apply_errors
from tenancy import actions, policy
from tenancy.actions import audit, identity
from tenancy.filters import AuditPageFilter
from tenancy.models import ApiToken, AuditLog, GroupMapping, Membership, Organization, ServiceAccount, Team
from tenancy.policy import request_roles
from tenancy.scoping import Action
from tenancy.web.forms import (
    AddMemberForm,
    GroupMappingForm,
    LoginForm,
    ProjectForm,
    RoleForm,
    ServiceAccountForm,
    TokenForm,
)


class LoginView(auth_views.LoginView):
    form_class = LoginForm
    redirect_authenticated_user = True

    def get_context_data(self, **kwargs: Any) -> dict[str, Any]:
        context = super().get_context_data(**kwargs)
        context["provider_name"] = settings.OIDC_PROVIDER_NAME if settings.OIDC_ENABLED else None
        return context

    def form_invalid(self, form: Any) -> HttpResponse:
        response = super().form_invalid(form)
        response.status_code = HTTPStatus.BAD_REQUEST
        return response


@login_not_required
@require_GET
def healthz(request: HttpRequest) -> JsonResponse:
    """Liveness and readiness: 200 when the database answers."""
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
    except Exception as exc:  # noqa: BLE001 - any database failure means "not ready"
        return JsonResponse({"status": "unavailable", "database": str(exc)[:200]}, status=503)
    return JsonResponse({"status": "ok"})


# --- Teams ----------------------------------------------------------------------------------------------


def team_list(request: AuthenticatedHttpRequest) -> HttpResponse:
    teams = Team.objects.for_user(request.user, Action.VIEW).select_related("organization")
    return render(request, "portal/team_list.html", {"teams": teams})


def _visible_team(request: AuthenticatedHttpRequest, pk: int) -> Team:
    team: Team = get_object_or_404(
        Team.objects.for_user(request.user, Action.VIEW).select_related("organization"), pk=pk
    )
    return team


def _render_team(request: AuthenticatedHttpRequest, team: Team, status: int = 200, **forms: Any) -> HttpResponse:
    members = (
        Membership.objects.for_user(request.user, Action.VIEW)
        .filter(team=team)
        .select_related("user")
        .order_by("role", "user__username")
    )
    context = {
        "team": team,
        "members": members,
        "projects": team.projects.order_by("name"),
        "can_manage": policy.can(request.user, "member.add", team),
        "service_accounts": ServiceAccount.objects.for_user(request.user, Action.VIEW)
        .filter(team=team, revoked_at=None)
        .select_related("user", "created_by")
        .prefetch_related("user__api_tokens"),
        "service_account_form": forms.get("service_account_form") or ServiceAccountForm(),
        "new_service_token": forms.get("new_service_token"),
        "project_form": forms.get("project_form") or ProjectForm(),
        "member_form": forms.get("member_form") or AddMemberForm(),
        "role_form_error": forms.get("role_form_error"),
    }
    return render(request, "portal/team_detail.html", context, status=status)


def team_detail(request: AuthenticatedHttpRequest, pk: int) -> HttpResponse:
    return _render_team(request, _visible_team(request, pk))


@require_POST
def project_create(request: AuthenticatedHttpRequest, pk: int) -> HttpResponse:
    team = _visible_team(request, pk)
    form = ProjectForm(request.POST)
    if form.is_valid():
        try:
            project = actions.create_project(request.user, team, **form.cleaned_data, http=request)
        except ValidationError as exc:
            apply_errors(form, exc)
        else:
            messages.success(request, f"Project {project.name} created.")
            return redirect("team-detail", pk=team.pk)
    return _render_team(request, team, HTTPStatus.BAD_REQUEST, project_form=form)


@require_POST
def member_add(request: AuthenticatedHttpRequest, pk: int) -> HttpResponse:
    team = _visible_team(request, pk)
    form = AddMemberForm(request.POST)
    if form.is_valid():
        try:
            membership = actions.add_member(
                request.user, team.organization, team=team, http=request, **form.cleaned_data
            )
        except ValidationError as exc:
            apply_errors(form, exc)
        else:
            messages.success(request, f"{membership.user} is now a {membership.get_role_display().lower()}.")
            return redirect("team-detail", pk=team.pk)
    return _render_team(request, team, HTTPStatus.BAD_REQUEST, member_form=form)


def _visible_membership(request: AuthenticatedHttpRequest, pk: int) -> Membership:
    scoped = Membership.objects.for_user(request.user, Action.VIEW).select_related("team", "user", "organization")
    membership: Membership = get_object_or_404(scoped, pk=pk)
    return membership


@require_POST
def member_role(request: AuthenticatedHttpRequest, pk: int) -> HttpResponse:
    membership = _visible_membership(request, pk)
    form = RoleForm(request.POST)
    if form.is_valid():
        try:
            actions.change_role(request.user, membership, http=request, **form.cleaned_data)
        except ValidationError as exc:
            apply_errors(form, exc)
        else:
            messages.success(request, f"{membership.user} is now a {membership.get_role_display().lower()}.")
            return redirect("team-detail", pk=membership.team_id)
    if membership.team is None:
        raise PermissionDenied
    return _render_team(request, membership.team, HTTPStatus.BAD_REQUEST, role_form_error=form.errors)


@require_POST
def member_remove(request: AuthenticatedHttpRequest, pk: int) -> HttpResponse:
    membership = _visible_membership(request, pk)
    team_id = membership.team_id
    try:
        actions.remove_member(request.user, membership, http=request)
    except ValidationError as exc:
        # A role that is not removed by hand (a service account's): said beside the members, as a 400.
        if membership.team is None:
            raise PermissionDenied from exc
        return _render_team(request, membership.team, HTTPStatus.BAD_REQUEST, role_form_error=exc.message_dict)
    messages.success(
        request, f"{membership.user} no longer has a role in {membership.team or membership.organization}."
    )
    return redirect("team-detail", pk=team_id) if team_id else redirect("home")


@require_POST
def service_account_create(request: AuthenticatedHttpRequest, pk: int) -> HttpResponse:
    team = _visible_team(request, pk)
    form = ServiceAccountForm(request.POST)
    if form.is_valid():
        try:
            account, raw = actions.create_service_account(request.user, team, http=request, **form.cleaned_data)
        except ValidationError as exc:
            apply_errors(form, exc)
        else:
            # Shown once, on this answer: only the token's hash is kept.
            messages.success(request, f"Service account {account.name} created.")
            return _render_team(request, team, new_service_token=raw)
    return _render_team(request, team, HTTPStatus.BAD_REQUEST, service_account_form=form)


@require_POST
def service_account_revoke(request: AuthenticatedHttpRequest, pk: int) -> HttpResponse:
    account: ServiceAccount = get_object_or_404(
        ServiceAccount.objects.for_user(request.user, Action.VIEW).select_related("team"), pk=pk
    )
    actions.revoke_service_account(request.user, account, http=request)
    messages.success(request, f"Service account {account.name} revoked; its token no longer works.")
    return redirect("team-detail", pk=account.team_id)


# --- Identity provider: group mappings ------------------------------------------------------------------


def _render_identity(
    request: AuthenticatedHttpRequest, status: int = 200, forms: dict[int, GroupMappingForm] | None = None
) -> HttpResponse:
    organizations = list(policy.permitted(request.user, "identity.view", Organization.objects.all()))
    if not organizations:
        raise PermissionDenied("Only organization admins map the identity provider's groups.")
    sections = []
    for organization in organizations:
        teams = Team.objects.filter(organization=organization).order_by("name")
        sections.append(
            {
                "organization": organization,
                "mappings": GroupMapping.objects.for_user(request.user, Action.VIEW)
                .filter(organization=organization)
                .select_related("team"),
                "memberships": identity.provider_view(organization),
                "form": (forms or {}).get(organization.pk) or GroupMappingForm(teams=teams),
            }
        )
    context = {"sections": sections, "provider_name": settings.OIDC_PROVIDER_NAME, "enabled": settings.OIDC_ENABLED}
    return render(request, "portal/identity.html", context, status=status)


def identity_page(request: AuthenticatedHttpRequest) -> HttpResponse:
    return _render_identity(request)


@require_POST
def group_mapping_create(request: AuthenticatedHttpRequest, pk: int) -> HttpResponse:
    organization: Organization = get_object_or_404(Organization.objects.for_user(request.user, Action.VIEW), pk=pk)
    form = GroupMappingForm(request.POST, teams=Team.objects.filter(organization=organization))
    if form.is_valid():
        try:
            mapping = actions.map_group(request.user, organization, http=request, **form.cleaned_data)
        except ValidationError as exc:
            apply_errors(form, exc)
        else:
            messages.success(request, f"Mapped {mapping}; it applies at each member's next sign-in.")
            return redirect("identity")
    return _render_identity(request, HTTPStatus.BAD_REQUEST, {organization.pk: form})


@require_POST
def group_mapping_remove(request: AuthenticatedHttpRequest, pk: int) -> HttpResponse:
    mapping: GroupMapping = get_object_or_404(GroupMapping.objects.for_user(request.user, Action.VIEW), pk=pk)
    actions.unmap_group(request.user, mapping, http=request)
    messages.success(request, f"Removed {mapping}; the roles it gave go at each member's next sign-in.")
    return redirect("identity")


# --- API tokens -----------------------------------------------------------------------------------------


def token_list(request: AuthenticatedHttpRequest) -> HttpResponse:
    form = TokenForm(request.POST or None)
    new_token = None
    status = 200
    if request.method == "POST":
        if form.is_valid():
            try:
                _, new_token = actions.issue_token(request.user, http=request, **form.cleaned_data)
            except ValidationError as exc:
                apply_errors(form, exc)
                status = HTTPStatus.BAD_REQUEST
            else:
                form = TokenForm()
        else:
            status = HTTPStatus.BAD_REQUEST
    tokens = ApiToken.objects.filter(user=request.user)
    return render(
        request, "portal/tokens.html", {"form": form, "tokens": tokens, "new_token": new_token}, status=status
    )


@require_POST
def token_revoke(request: AuthenticatedHttpRequest, pk: int) -> HttpResponse:
    token = get_object_or_404(ApiToken, pk=pk, user=request.user)
    actions.revoke_token(request.user, token, http=request)
    messages.success(request, f"Token {token.name} revoked.")
    return redirect("token-list")


# --- Audit log ------------------------------------------------------------------------------------------


def _audit_entries(request: AuthenticatedHttpRequest) -> tuple[AuditPageFilter, QuerySet[AuditLog], int]:
    """The entries the audit page and its export show: the user's organizations', through the page's filters
    (a bad filter: none, and 400)."""
    visible = AuditLog.objects.for_user(request.user, Action.VIEW)
    if not policy.anywhere(request.user, "audit.read", request_roles(request)):
        raise PermissionDenied("Only organization admins read the audit log.")
    filterset = AuditPageFilter(request.GET, queryset=visible.select_related("target_type"), request=request)
    if not filterset.is_valid():
        return filterset, visible.none(), HTTPStatus.BAD_REQUEST
    return filterset, filterset.qs, HTTPStatus.OK


def audit_log(request: AuthenticatedHttpRequest) -> HttpResponse:
    filterset, entries, status = _audit_entries(request)
    page = Paginator(entries, 50).get_page(request.GET.get("page"))
    query = request.GET.copy()
    query.pop("page", None)
    rows = [(entry, audit.action_words(entry.action), audit.change_lines(entry.changes)) for entry in page]
    context = {"filter": filterset, "page": page, "rows": rows, "query": query.urlencode()}
    return render(request, "portal/audit_log.html", context, status=status)


@require_GET
def audit_log_csv(request: AuthenticatedHttpRequest) -> HttpResponse | StreamingHttpResponse:
    """The audit log as CSV under the page's filters (every page of them), newest first; a bad filter is a 400
    naming it, as on the page."""
    filterset, entries, status = _audit_entries(request)
    if status != HTTPStatus.OK:
        return JsonResponse({"error": {"status": status, "fields": filterset.errors.get_json_data()}}, status=status)
    response = StreamingHttpResponse(audit.csv_stream(entries.iterator(chunk_size=2000)), content_type="text/csv")
    response["Content-Disposition"] = 'attachment; filename="audit-log.csv"'
    return response
