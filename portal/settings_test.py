"""Settings for the test suite: the same as production code paths, with fast hashing and eager tasks.

Tests that need a real Celery worker start one and turn eager execution off for their duration.
"""

from portal.settings import *  # noqa: F403
from portal.settings import REST_FRAMEWORK

PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
CELERY_TASK_ALWAYS_EAGER = True
EMAIL_BACKEND = "django.core.mail.backends.locmem.EmailBackend"
REST_FRAMEWORK = {**REST_FRAMEWORK, "DEFAULT_THROTTLE_RATES": {"auth": "1000/minute"}}
