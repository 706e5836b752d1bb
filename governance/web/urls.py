"""Quota pages, included from ``portal/urls.py``: a team's (``teams/<pk>/quotas/``, beside the team's page)
and the organization's (``quotas/``)."""

from django.urls import path

from governance.web import budgets as budget_views
from governance.web import capacity as capacity_views
from governance.web import quotas as views

urlpatterns = [
    path("teams/<id:pk>/quotas/", views.team_quotas, name="team-quotas"),
    path("teams/<id:pk>/quotas/chart/", views.team_chart, name="team-quota-chart"),
    path("teams/<id:pk>/quotas/history/", views.team_history, name="team-quota-history"),
    path("teams/<id:pk>/quotas/new/", views.team_quota_new, name="team-quota-new"),
    path("teams/<id:pk>/quotas/queues/<id:queue>/quota/", views.quota_cell, name="team-quota-cell"),
    path("teams/<id:pk>/quotas/queues/<id:queue>/policy/", views.queue_policy, name="team-queue-policy"),
    path("teams/<id:pk>/quotas/budgets/", budget_views.team_budgets, name="team-budgets"),
    path("teams/<id:pk>/quotas/members/<id:user>/", budget_views.member_limit, name="team-member-limit"),
    path("teams/<id:pk>/quotas/capacity/", capacity_views.ask, name="team-capacity-ask"),
    path(
        "teams/<id:pk>/quotas/capacity/<id:request_id>/withdraw/",
        capacity_views.withdraw,
        name="team-capacity-withdraw",
    ),
    path("quotas/", views.org_quotas, name="org-quotas"),
    path("quotas/capacity/<id:request_id>/decide/", capacity_views.decide, name="capacity-decide"),
    path("quotas/cohorts/", views.cohort_new, name="cohort-create"),
    path("quotas/fair-share/", views.fair_share, name="fair-share"),
    path("quotas/cohorts/quotas/", views.cohort_quota_new, name="cohort-quota-new"),
    path("quotas/cohorts/<id:pk>/quota/", views.cohort_cell, name="cohort-quota-cell"),
]
