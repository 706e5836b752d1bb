"""Billing pages, under ``billing/``: finance's costs and price book, procurement's forecasts and what-ifs."""

from django.urls import include, path

urlpatterns = [
    path("", include("billing.finance_urls")),
    path("capacity/", include("billing.forecast_urls")),
    path("what-ifs/", include("billing.whatif_urls")),
]
