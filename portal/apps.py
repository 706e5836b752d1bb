from django.apps import AppConfig


class PortalConfig(AppConfig):
    name = "portal"
    verbose_name = "Portal and tenancy"

    def ready(self) -> None:
        from portal import signals  # noqa: F401  (connects the sign-in audit receivers)
