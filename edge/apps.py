from django.apps import AppConfig


class EdgeConfig(AppConfig):
    """Edge devices (robots and the like): enrolment with a one-time token, their device credential, what each
    reports (hardware, software, connectivity, the model versions it runs), groups, and phased rollouts of a
    model version to a group with a failure threshold and automatic rollback. The device agent that speaks to
    it lives in ``deploy/edge_agent.py`` (no Django)."""

    name = "edge"
    default_auto_field = "django.db.models.BigAutoField"
