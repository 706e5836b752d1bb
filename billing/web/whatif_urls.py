"""Capacity what-if pages, mounted at ``/billing/what-ifs/`` by ``billing/web/urls.py``."""

from django.urls import path

from billing.web import whatif as views

urlpatterns = [
    path("", views.what_if_list, name="what-if-list"),
    path("<int:pk>/", views.what_if_detail, name="what-if-detail"),
    path("<int:pk>/status/", views.what_if_status, name="what-if-status"),
]
