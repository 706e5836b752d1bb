"""Settings for the test suite: the same as production code paths, with fast hashing and eager tasks.

Tests that need a real Celery worker start one and turn eager execution off for their duration.
"""

import tempfile
from pathlib import Path

from portal.settings import *  # noqa: F403

PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
CELERY_TASK_ALWAYS_EAGER = True
EMAIL_BACKEND = "django.core.mail.backends.locmem.EmailBackend"
# Sign-in lockouts stay on, out of reach of the suite's own sign-ins (the counts live in each test's database);
# tests of the lockouts lower the limit.
AXES_FAILURE_LIMIT = 1000

# Each test run gets a broker folder of its own, so a demo running from the same checkout never takes
# (or hands out) the tests' tasks; without Redis, the cache is per process like the eager tasks.
if CELERY_BROKER_URL.startswith("filesystem://"):  # noqa: F405
    _broker = tempfile.mkdtemp(prefix="qm-test-broker-")
    CELERY_BROKER_TRANSPORT_OPTIONS = {
        **CELERY_BROKER_TRANSPORT_OPTIONS,  # noqa: F405
        "data_folder": _broker,
        "control_folder": f"{_broker}/control",
    }
# On SQLite the test database is a file, as the embedded defaults' database is, never Django's in-memory one:
# an in-memory database is shared between threads through one connection (Django hands the live server the
# test's own), so a live server's concurrent requests nested each other's transactions and savepoints
# ("cannot start a transaction within a transaction"), and threads of their own met shared-cache table locks
# that do not wait. With a file each thread has its own connection and SQLite's one writer at a time, as in the
# demo. pytest-django names each xdist worker's copy apart (``_gw0``, ``_gw1``); Django deletes it at the end.
if DATABASES["default"]["ENGINE"] == "django.db.backends.sqlite3":  # noqa: F405
    DATABASES["default"]["TEST"] = {  # noqa: F405
        "NAME": f"{tempfile.mkdtemp(prefix='qm-test-db-')}/quartermaster.sqlite3"
    }
# Each test process's simulated replicas work in a directory of its own, which any user may pass through to
# (the replicas run as nobody).
SIMULATED_REPLICA_ROOT = Path(tempfile.mkdtemp(prefix="qm-test-replicas-"))
SIMULATED_REPLICA_ROOT.chmod(0o755)
if not REDIS_URL:  # noqa: F405
    CACHES = {"default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"}}
else:
    # One Redis for every xdist worker, each with its own database whose ids repeat across workers: keys of
    # one worker (kept attributions, keyed by organization id; the placement loop's leader lock) must not be
    # read or held by another. A process a test starts (a Celery worker) inherits the environment, so it
    # shares its test process's prefix: under xdist, the run's and the worker's ids; without, the first pid.
    import os

    if os.environ.get("PYTEST_XDIST_WORKER"):
        _run = os.environ.get("PYTEST_XDIST_TESTRUNUID", "")[:12]
        REDIS_KEY_PREFIX = f"test-{_run}-{os.environ['PYTEST_XDIST_WORKER']}"
    else:
        REDIS_KEY_PREFIX = os.environ.setdefault("REDIS_KEY_PREFIX", f"test-{os.getpid()}")
    CACHES = {"default": {**CACHES["default"], "KEY_PREFIX": REDIS_KEY_PREFIX}}
