from django.apps import AppConfig


class ObservabilityConfig(AppConfig):
    """What on-call watches: the ``/metrics`` endpoint, the SLOs and their error budgets, and the Prometheus
    rules and Grafana dashboards generated from them. Its own app because the SLOs read jobs, clusters and the
    meter alike, and the scheduler may not read billing."""

    name = "observability"
    default_auto_field = "django.db.models.BigAutoField"
