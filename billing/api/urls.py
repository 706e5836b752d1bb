"""Billing's REST API, included under ``api/v1/`` by ``portal/api/urls.py``."""

from django.urls import include, path

urlpatterns = [
    path("", include("billing.api.costs")),
    path("", include("billing.api.forecast")),
    path("", include("billing.api.whatif")),
]
