"""The Celery application: configured from Django settings (the `CELERY_` names), tasks found per app."""

import os

from celery import Celery

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "portal.settings")

app = Celery("quartermaster")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()
