"""The Procurement page's URLs, under ``billing/capacity/``."""

from django.urls import URLPattern, URLResolver, path

from billing.web import forecast as forecast_views

urlpatterns: list[URLPattern | URLResolver] = [
    path("", forecast_views.capacity, name="capacity-forecast"),
]
