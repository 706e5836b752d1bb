from django.apps import AppConfig


class ServingConfig(AppConfig):
    """Inference services: a program serving HTTP, run as replicas the placement loop places like jobs (kind
    ``service``), scaled from their measured load, updated in rolling fashion, reached at one stable endpoint.
    It reads the scheduler and the registry; neither imports it."""

    name = "serving"
    default_auto_field = "django.db.models.BigAutoField"
