from django.apps import AppConfig


class TenancyConfig(AppConfig):
    """Organizations, teams, projects, memberships, identities, service accounts, tokens and the audit log.

    The label stays ``portal``, the app's name before the re-layout, so its tables (``portal_team``, …), its
    migration history and every migration that names ``portal.Team`` are unchanged (docs/operations.md).
    """

    name = "tenancy"
    label = "portal"
    verbose_name = "Tenancy"

    def ready(self) -> None:
        from tenancy import signals  # noqa: F401  (connects the sign-in audit receivers)
