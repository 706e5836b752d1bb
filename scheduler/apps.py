from django.apps import AppConfig


class SchedulerConfig(AppConfig):
    name = "scheduler"

    def ready(self) -> None:
        from scheduler import signals  # noqa: F401 - connects the receivers
