"""Billing pages, under ``billing/``: finance's costs and price book, procurement's forecasts and what-ifs."""

from django.urls import include, path

urlpatterns = [
    path("", include("billing.web.finance_urls")),
    path("capacity/", include("billing.web.forecast_urls")),
    path("what-ifs/", include("billing.web.whatif_urls")),
]
