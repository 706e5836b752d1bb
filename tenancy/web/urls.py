"""Tenancy's pages, included at the root by ``portal/urls.py``: sign-in and out, teams and their members,
service accounts, the identity provider's group mappings, API tokens and the audit log."""

from django.contrib.auth import views as auth_views
from django.contrib.auth.decorators import login_not_required
from django.urls import path

from tenancy import provider
from tenancy.web import views

urlpatterns = [
    path("login/", views.LoginView.as_view(), name="login"),
    path("logout/", login_not_required(auth_views.LogoutView.as_view()), name="logout"),
    path("oidc/authenticate/", provider.ProviderSignInView.as_view(), name="oidc-authenticate"),
    path("oidc/callback/", provider.ProviderCallbackView.as_view(), name="oidc-callback"),
    path("healthz/", views.healthz, name="healthz"),
    path("teams/", views.team_list, name="team-list"),
    path("teams/<id:pk>/", views.team_detail, name="team-detail"),
    path("teams/<id:pk>/projects/", views.project_create, name="project-create"),
    path("teams/<id:pk>/members/", views.member_add, name="member-add"),
    path("memberships/<id:pk>/role/", views.member_role, name="member-role"),
    path("memberships/<id:pk>/remove/", views.member_remove, name="member-remove"),
    path("teams/<id:pk>/service-accounts/", views.service_account_create, name="service-account-create"),
    path("service-accounts/<id:pk>/revoke/", views.service_account_revoke, name="service-account-revoke"),
    path("identity/", views.identity_page, name="identity"),
    path("identity/<id:pk>/mappings/", views.group_mapping_create, name="group-mapping-create"),
    path("identity/mappings/<id:pk>/remove/", views.group_mapping_remove, name="group-mapping-remove"),
    path("account/tokens/", views.token_list, name="token-list"),
    path("account/tokens/<id:pk>/revoke/", views.token_revoke, name="token-revoke"),
    path("audit/", views.audit_log, name="audit-log"),
    path("audit/export.csv", views.audit_log_csv, name="audit-log-csv"),
]
