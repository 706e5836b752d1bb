"""Billing's REST API, included under ``api/v1/`` by ``portal/api/urls.py``."""

from django.urls import include, path

urlpatterns = [
    path("", include("billing.finance_api")),
    path("", include("billing.forecast_api")),
    path("", include("billing.whatif_api")),
]
