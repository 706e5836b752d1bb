from django.apps import AppConfig


class DemoConfig(AppConfig):
    """``manage.py demo`` and ``seed_demo``: the demo organization, fleet, governance, jobs and billing history."""

    name = "demo"
