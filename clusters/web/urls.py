"""Cluster pages, included from ``portal/urls.py`` under ``clusters/``."""

from django.urls import path

from clusters.web import elastic, views

urlpatterns = [
    path("", views.cluster_list, name="cluster-list"),
    path("new/", views.cluster_create, name="cluster-create"),
    path("<id:pk>/", views.cluster_detail, name="cluster-detail"),
    path("<id:pk>/edit/", views.cluster_edit, name="cluster-edit"),
    path("<id:pk>/sync/", views.cluster_sync, name="cluster-sync"),
    path("<id:pk>/maintenance/", views.cluster_maintenance, name="cluster-maintenance"),
    path("<id:pk>/probe-tokens/", views.probe_token_create, name="probe-token-create"),
    path("<id:pk>/probe-tokens/<id:token_pk>/revoke/", views.probe_token_revoke, name="probe-token-revoke"),
    path("<id:pk>/elastic-pools/new/", elastic.pool_create, name="elastic-pool-create"),
    path("<id:pk>/elastic-pools/<id:pool_pk>/edit/", elastic.pool_edit, name="elastic-pool-edit"),
    path("<id:pk>/live/", views.cluster_live, name="cluster-live"),
    path("<id:pk>/live/tiles/", views.cluster_live_tiles, name="cluster-live-tiles"),
    path("nodes/<id:pk>/", views.node_detail, name="node-detail"),
    path("nodes/<id:pk>/cordon/", views.node_cordon, name="node-cordon"),
    path("nodes/<id:pk>/drain/", views.node_drain, name="node-drain"),
    path("nodes/<id:pk>/resume/", views.node_resume, name="node-resume"),
]
