"""Cluster pages, included from ``portal/urls.py`` under ``clusters/``."""

from django.urls import path

from clusters import views

urlpatterns = [
    path("", views.cluster_list, name="cluster-list"),
    path("<int:pk>/", views.cluster_detail, name="cluster-detail"),
    path("<int:pk>/live/", views.cluster_live, name="cluster-live"),
    path("<int:pk>/live/tiles/", views.cluster_live_tiles, name="cluster-live-tiles"),
    path("nodes/<int:pk>/", views.node_detail, name="node-detail"),
    path("nodes/<int:pk>/drain/", views.node_drain, name="node-drain"),
    path("nodes/<int:pk>/resume/", views.node_resume, name="node-resume"),
]
