"""Service pages, included from ``portal/urls.py`` under ``services/``."""

from django.urls import path

from serving.web import views

urlpatterns = [
    path("", views.service_list, name="service-list"),
    path("new/", views.service_new, name="service-new"),
    path("<id:pk>/", views.service_detail, name="service-detail"),
    path("<id:pk>/edit/", views.service_edit, name="service-edit"),
    path("<id:pk>/scale/", views.service_scale, name="service-scale"),
    path("<id:pk>/stop/", views.service_stop, name="service-stop"),
    path("<id:pk>/start/", views.service_start, name="service-start"),
    path("<id:pk>/rollback/", views.service_rollback, name="service-rollback"),
]
