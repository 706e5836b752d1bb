from django.apps import AppConfig


class NotificationsConfig(AppConfig):
    """Telling people what happened to their jobs, by e-mail and webhook, as each of them chose (docs/jobs.md,
    "Being told"). Its own app because it reads the scheduler's job events and the scheduler never imports it."""

    name = "notifications"
    default_auto_field = "django.db.models.BigAutoField"
