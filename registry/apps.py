from django.apps import AppConfig


class RegistryConfig(AppConfig):
    """The model registry: a team's models and their versions (the artifact, its size and checksum, the training
    job and checkpoint it came from, who published it, its evaluation results), and the artifact store that
    holds their bytes. It reads the scheduler (a version's source job); the scheduler never imports it."""

    name = "registry"
    default_auto_field = "django.db.models.BigAutoField"
