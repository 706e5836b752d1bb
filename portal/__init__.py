"""The Django project: settings, URLs, the Celery app, tenancy (organizations, teams, roles), audit."""

from portal.celery import app as celery_app

__all__ = ("celery_app",)
