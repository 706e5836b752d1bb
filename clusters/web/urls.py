"""Cluster pages, included from ``portal/urls.py`` under ``clusters/``."""

from django.urls import path

from clusters.web import views

urlpatterns = [
    path("", views.cluster_list, name="cluster-list"),
    path("new/", views.cluster_create, name="cluster-create"),
    path("<int:pk>/", views.cluster_detail, name="cluster-detail"),
    path("<int:pk>/edit/", views.cluster_edit, name="cluster-edit"),
    path("<int:pk>/sync/", views.cluster_sync, name="cluster-sync"),
    path("<int:pk>/maintenance/", views.cluster_maintenance, name="cluster-maintenance"),
    path("<int:pk>/probe-tokens/", views.probe_token_create, name="probe-token-create"),
    path("<int:pk>/probe-tokens/<int:token_pk>/revoke/", views.probe_token_revoke, name="probe-token-revoke"),
    path("<int:pk>/live/", views.cluster_live, name="cluster-live"),
    path("<int:pk>/live/tiles/", views.cluster_live_tiles, name="cluster-live-tiles"),
    path("nodes/<int:pk>/", views.node_detail, name="node-detail"),
    path("nodes/<int:pk>/cordon/", views.node_cordon, name="node-cordon"),
    path("nodes/<int:pk>/drain/", views.node_drain, name="node-drain"),
    path("nodes/<int:pk>/resume/", views.node_resume, name="node-resume"),
]
