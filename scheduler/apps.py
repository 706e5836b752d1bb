from django.apps import AppConfig


class SchedulerConfig(AppConfig):
    """Jobs and their placement: the engine, the loop that feeds it and the dispatch to the clusters."""

    name = "scheduler"

    def ready(self) -> None:
        from scheduler import signals  # noqa: F401 - connects the receivers
