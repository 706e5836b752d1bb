"""Quota pages, included from ``portal/urls.py``: a team's (``teams/<pk>/quotas/``, beside the team's page)
and the organization's (``quotas/``)."""

from django.urls import path

from governance.web import budgets as budget_views
from governance.web import quotas as views

urlpatterns = [
    path("teams/<int:pk>/quotas/", views.team_quotas, name="team-quotas"),
    path("teams/<int:pk>/quotas/chart/", views.team_chart, name="team-quota-chart"),
    path("teams/<int:pk>/quotas/history/", views.team_history, name="team-quota-history"),
    path("teams/<int:pk>/quotas/new/", views.team_quota_new, name="team-quota-new"),
    path("teams/<int:pk>/quotas/queues/<int:queue>/quota/", views.quota_cell, name="team-quota-cell"),
    path("teams/<int:pk>/quotas/queues/<int:queue>/policy/", views.queue_policy, name="team-queue-policy"),
    path("teams/<int:pk>/quotas/budgets/", budget_views.team_budgets, name="team-budgets"),
    path("teams/<int:pk>/quotas/members/<int:user>/", budget_views.member_limit, name="team-member-limit"),
    path("quotas/", views.org_quotas, name="org-quotas"),
    path("quotas/cohorts/", views.cohort_new, name="cohort-create"),
    path("quotas/cohorts/quotas/", views.cohort_quota_new, name="cohort-quota-new"),
    path("quotas/cohorts/<int:pk>/quota/", views.cohort_cell, name="cohort-quota-cell"),
]
