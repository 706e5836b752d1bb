from django.apps import AppConfig


class GovernanceConfig(AppConfig):
    """Who may use how much: cohorts, team queues, quotas, member limits, priority tiers and budgets."""

    name = "governance"

    def ready(self) -> None:
        from governance import signals  # noqa: F401 - connects the receivers
