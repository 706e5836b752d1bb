"""Quartermaster settings, read once from environment variables.

With no variable set, the embedded defaults need nothing but Python: a SQLite file, a broker of files
(`portal/broker.py`) and a file cache, all under `var/`. Production (`QM_ENV=production`) requires an explicit
`SECRET_KEY` and `ALLOWED_HOSTS` and turns on every protection `manage.py check --deploy` asks for.
See README.md for the variables.
"""

from __future__ import annotations

import hashlib
import os
import re
import tempfile
from datetime import timedelta
from pathlib import Path

import dj_database_url
import django_stubs_ext
from celery.schedules import crontab
from django.core.exceptions import ImproperlyConfigured
from django.core.management.utils import get_random_secret_key

from portal.env import (
    env_bool,
    env_choice,
    env_int,
    env_list,
    env_networks,
    env_ports,
    env_str,
    env_url,
    require_strong_secret,
)

# Lets Django's generic classes (ModelAdmin[Team], QuerySet[Job]) be subscripted at run time, as the types say.
django_stubs_ext.monkeypatch()

BASE_DIR = Path(__file__).resolve().parent.parent
QM_ENV = env_choice("QM_ENV", "development", ("development", "test", "production"))
PRODUCTION = QM_ENV == "production"

# Everything the embedded defaults write (database, broker, cache, secret key) lives here.
VAR_DIR = Path(env_str("QM_VAR_DIR", str(BASE_DIR / "var")) or "").resolve()
VAR_DIR.mkdir(parents=True, exist_ok=True)
if VAR_DIR.stat().st_uid == os.geteuid():  # others on the machine (replicas among them) have nothing to read there
    VAR_DIR.chmod(0o700)


def _embedded_secret_key() -> str:
    """A key generated on first start and kept under var/, so sessions survive restarts."""
    path = VAR_DIR / "secret_key"
    if not path.exists():
        path.touch(mode=0o600)
        path.write_text(get_random_secret_key())
    return path.read_text().strip()


SECRET_KEY = env_str("SECRET_KEY") or ""
if not SECRET_KEY:
    if PRODUCTION:
        raise ImproperlyConfigured("SECRET_KEY must be set when QM_ENV=production")
    SECRET_KEY = _embedded_secret_key()
if PRODUCTION:
    require_strong_secret("SECRET_KEY", SECRET_KEY)
# Encrypts cluster credentials and jobs' secret values at rest (clusters/secrets.py); SECRET_KEY's when unset.
CREDENTIALS_KEY = env_str("CREDENTIALS_KEY") or ""
if PRODUCTION and CREDENTIALS_KEY:
    require_strong_secret("CREDENTIALS_KEY", CREDENTIALS_KEY)
# Where outbound requests to addresses tenants give may go (common/outbound.py). Cluster endpoints on this
# machine's loopback (a Slurm lab, a test server): allowed outside production. Webhooks (set by team leads)
# on private networks or loopback: only where the site's relay lives there.
CLUSTER_ENDPOINTS_ALLOW_LOOPBACK = env_bool("CLUSTER_ENDPOINTS_ALLOW_LOOPBACK", not PRODUCTION)
WEBHOOKS_ALLOW_PRIVATE = env_bool("WEBHOOKS_ALLOW_PRIVATE", False)
# Service replicas' addresses (``common.outbound.for_replicas``): the clusters' private networks, and this
# machine outside production (the simulated backend runs replicas as local processes).
REPLICAS_ALLOW_PRIVATE = env_bool("REPLICAS_ALLOW_PRIVATE", True)
REPLICAS_ALLOW_LOOPBACK = env_bool("REPLICAS_ALLOW_LOOPBACK", not PRODUCTION)
#: Where replicas may be at all, when set: the clusters' node networks (CIDRs); private addresses elsewhere are
#: refused (loopback stays with REPLICAS_ALLOW_LOOPBACK).
REPLICAS_NETWORKS = env_networks("REPLICAS_NETWORKS")
# Node health probes: at most one report per node this often.
PROBE_MIN_INTERVAL_SECONDS = env_int("PROBE_MIN_INTERVAL_SECONDS", 10, minimum=1)
# Days the probes' per-minute GPU samples are kept: billing's idle cost reads them, so at least the last
# full month (62 days) by default.
GPU_SAMPLE_DAYS = env_int("GPU_SAMPLE_DAYS", 62, minimum=1)
#: How long the placement loop's leader lock outlives a leader that died (it is renewed between cycles).
PLACEMENT_LOCK_SECONDS = env_int("PLACEMENT_LOCK_SECONDS", 30, minimum=1)
# Simulated clusters (demos and labs, docs/backends.md): registered and changed by the installation's operators
# (superusers) only; their service replicas run teams' programs on this host, each in namespaces of its own that
# hide QM_VAR_DIR, the other replicas and the portal's processes (clusters/backends/simulated/sandbox.py). Off in
# production unless an operator turns them on.
SIMULATED_CLUSTERS = env_bool("SIMULATED_CLUSTERS", not PRODUCTION)
#: Where their replicas work: a directory of this installation's own, outside QM_VAR_DIR.
SIMULATED_REPLICA_ROOT = Path(
    env_str("SIMULATED_REPLICA_ROOT")
    or Path(tempfile.gettempdir()) / f"qm-replicas-{hashlib.sha256(str(VAR_DIR).encode()).hexdigest()[:12]}"
).resolve()
if SIMULATED_REPLICA_ROOT == VAR_DIR or VAR_DIR in SIMULATED_REPLICA_ROOT.parents:
    raise ImproperlyConfigured("SIMULATED_REPLICA_ROOT must be outside QM_VAR_DIR, which replicas must not see.")
#: The user and group (``uid:gid``) a replica runs as where the portal runs as root.
SIMULATED_RUN_AS = env_str("SIMULATED_RUN_AS", "65534:65534") or ""
if not re.fullmatch(r"[1-9][0-9]*(:[1-9][0-9]*)?", SIMULATED_RUN_AS):
    raise ImproperlyConfigured("SIMULATED_RUN_AS is uid:gid in numbers, neither of them 0 (root), e.g. 65534:65534.")
#: Admissions per placement cycle; a larger burst is admitted over back-to-back cycles of this size.
PLACEMENT_MAX_ADMISSIONS = env_int("PLACEMENT_MAX_ADMISSIONS", 2000, minimum=1)
#: Interactive sessions (docs/jobs.md): the longest time limit one may ask for, in hours; the idle time after
#: which one ends by itself when its submitter gives none, and the longest idle time they may give, in minutes.
SESSION_MAX_HOURS = env_int("SESSION_MAX_HOURS", 8, minimum=1)
SESSION_IDLE_MINUTES = env_int("SESSION_IDLE_MINUTES", 60, minimum=1)
SESSION_MAX_IDLE_MINUTES = env_int("SESSION_MAX_IDLE_MINUTES", 240, minimum=1)
#: The model registry's artifact store (registry/artifacts.py): a directory, and the largest artifact it takes.
ARTIFACT_ROOT = Path(env_str("QM_ARTIFACT_ROOT", str(VAR_DIR / "artifacts")) or "").resolve()
ARTIFACT_MAX_BYTES = env_int("ARTIFACT_MAX_BYTES", 20 * 1024**3, minimum=1)
#: Directories whose files a version may be published from (a checkpoint's location there is copied into the
#: store); empty: checkpoints are recorded by location only (registry/actions.py, docs/models.md).
ARTIFACT_IMPORT_ROOTS = [Path(p).resolve() for p in env_list("QM_ARTIFACT_IMPORT_ROOTS", [])]
#: The address jobs reach this server's API at, handed to each attempt as ``QM_API_URL`` for ``qm checkpoint``
#: (docs/jobs.md): one the clusters' nodes can reach, not necessarily the one people browse. Outside production
#: it defaults to the demo's web server (http://127.0.0.1:8000); in production there is no default, and jobs
#: cannot report checkpoints until it is set (https only there).
PUBLIC_URL = (
    env_url("QM_PUBLIC_URL", https_only=PRODUCTION) or ("" if PRODUCTION else "http://127.0.0.1:8000")
).rstrip("/")

DEBUG = env_bool("DEBUG", False)
if PRODUCTION and DEBUG:
    raise ImproperlyConfigured("DEBUG=true is not allowed when QM_ENV=production: it shows settings and code to anyone")
ALLOWED_HOSTS = env_list("ALLOWED_HOSTS", [] if PRODUCTION else ["127.0.0.1", "localhost", "[::1]", "testserver"])
if PRODUCTION and not ALLOWED_HOSTS:
    raise ImproperlyConfigured("ALLOWED_HOSTS must be set when QM_ENV=production")
CSRF_TRUSTED_ORIGINS = env_list("CSRF_TRUSTED_ORIGINS", [])

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "whitenoise.runserver_nostatic",
    "django.contrib.staticfiles",
    "rest_framework",
    "django_filters",
    "drf_spectacular",
    "drf_spectacular_sidecar",
    "axes",
    # The apps, from the base up (docs/architecture.md): tenancy, the fleet, governance of it, jobs and their
    # placement, billing; then the demo and the benchmarks' management commands.
    "tenancy",
    "clusters",
    "governance",
    "scheduler",
    "billing",
    "observability",
    "notifications",
    "registry",
    "serving",
    "edge",
    "demo",
    "benchmarks",
]

MIDDLEWARE = [
    # Prometheus's scrape first: no host check or HTTPS redirect on it (portal/middleware.py says why).
    "portal.middleware.ServeMetrics",
    # Then, so that it times the whole answer (``qm_http_request_duration_seconds``).
    "portal.middleware.MeasureRequests",
    "django.middleware.security.SecurityMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    # Deny by default: every page needs a signed-in user unless its view is marked login_not_required.
    "portal.middleware.LoginRequired",
    # Before any view reads input (its 400 page needs the user): NUL and other refused characters are a 400.
    "portal.middleware.RefuseBadInput",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "csp.middleware.CSPMiddleware",
    # Last: turns a sign-in refused for too many failures into tenancy.signin's answer.
    "axes.middleware.AxesMiddleware",
]

ROOT_URLCONF = "portal.urls"
WSGI_APPLICATION = "portal.wsgi.application"
ASGI_APPLICATION = "portal.asgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
                "portal.context_processors.navigation",
            ],
        },
    },
]

# --- Database -------------------------------------------------------------------------------------------
DATABASE_URL = env_str("DATABASE_URL", f"sqlite:///{VAR_DIR / 'quartermaster.sqlite3'}")
assert DATABASE_URL is not None
try:
    _database = dj_database_url.parse(DATABASE_URL, conn_max_age=env_int("DB_CONN_MAX_AGE", 60, minimum=0))
except ValueError as exc:
    raise ImproperlyConfigured(f"DATABASE_URL is not a database URL this project understands: {exc}") from exc
if _database["ENGINE"] == "django.db.backends.sqlite3":
    # The web server and the workers write to the same file: WAL lets readers go on during a write, and
    # IMMEDIATE transactions wait for the write lock up front instead of failing half-way.
    _database["CONN_MAX_AGE"] = 0
    _database["OPTIONS"] = {
        "transaction_mode": "IMMEDIATE",
        "timeout": 20,
        "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;",
    }
elif _database["ENGINE"] == "django.db.backends.postgresql":
    _database["CONN_HEALTH_CHECKS"] = True
DATABASES = {"default": _database}
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

# --- Redis, cache and broker ----------------------------------------------------------------------------
REDIS_URL = env_str("REDIS_URL")
#: Prefixes every key this deployment writes to Redis (the cache's and the placement loop's leader lock), so
#: two deployments, or two test processes, sharing one Redis never read or hold each other's keys.
REDIS_KEY_PREFIX = env_str("REDIS_KEY_PREFIX") or "quartermaster"
CACHES: dict[str, dict[str, object]]
if REDIS_URL:
    CACHES = {
        "default": {
            "BACKEND": "django.core.cache.backends.redis.RedisCache",
            "LOCATION": REDIS_URL,
            "KEY_PREFIX": REDIS_KEY_PREFIX,
        }
    }
else:
    # Shared across the web server and the workers, unlike the per-process local-memory cache; its counters
    # atomic, as Redis's are (portal/cache.py). Culled only well above what the portal keeps there.
    CACHES = {
        "default": {
            "BACKEND": "portal.cache.FileCache",
            "LOCATION": str(VAR_DIR / "cache"),
            "OPTIONS": {"MAX_ENTRIES": 20000},
        }
    }

BROKER_DIR = VAR_DIR / "broker"
CELERY_BROKER_URL = env_str("CELERY_BROKER_URL") or REDIS_URL or "filesystem://"
if CELERY_BROKER_URL.startswith("filesystem://"):
    # The embedded broker: kombu's filesystem transport with its races closed (portal/broker.py). Every
    # process (web, worker, beat, tests) connects through the Celery app, which takes the transport from here.
    CELERY_BROKER_TRANSPORT = "portal.broker:Transport"
    CELERY_BROKER_TRANSPORT_OPTIONS = {
        "data_folder": str(BROKER_DIR / "queue"),
        "control_folder": str(BROKER_DIR / "control"),
        "polling_interval": 0.05,
    }
# Tasks record their effects in the database; results are kept only where a backend is configured.
CELERY_RESULT_BACKEND = env_str("CELERY_RESULT_BACKEND") or REDIS_URL or None
#: The queue tasks go to unless routed elsewhere (one worker pool per deployment, or per test).
CELERY_TASK_DEFAULT_QUEUE = env_str("CELERY_TASK_DEFAULT_QUEUE", "celery")
CELERY_TASK_IGNORE_RESULT = CELERY_RESULT_BACKEND is None
CELERY_TASK_ALWAYS_EAGER = env_bool("CELERY_TASK_ALWAYS_EAGER", False)
CELERY_TASK_EAGER_PROPAGATES = True
# A task is acknowledged after it ran, so a worker killed mid-task leaves it for another worker.
CELERY_TASK_ACKS_LATE = True
CELERY_TASK_REJECT_ON_WORKER_LOST = True
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True
CELERY_TIMEZONE = "UTC"
CELERY_BEAT_SCHEDULE_FILENAME = str(VAR_DIR / "celerybeat-schedule")
# The periodic loops. Later loops (placement, cluster sync, health checks, metering) join this table.
CELERY_BEAT_SCHEDULE = {
    "worker-heartbeat": {"task": "tenancy.tasks.record_heartbeat", "schedule": 30.0},
    "expire-api-tokens": {"task": "tenancy.tasks.expire_api_tokens", "schedule": crontab(minute=17)},
    "sync-clusters": {"task": "clusters.tasks.sync_due_clusters", "schedule": 30.0},
    "check-cluster-health": {"task": "clusters.tasks.check_all_health", "schedule": 60.0},
    "maintenance-windows": {"task": "clusters.tasks.apply_maintenance_windows", "schedule": 60.0},
    "prune-gpu-samples": {"task": "clusters.tasks.prune_gpu_samples", "schedule": crontab(minute=23)},
    # The placement loop (also woken by each submission) and the clusters' reports on placed jobs.
    "placement-cycle": {"task": "scheduler.tasks.placement_cycle", "schedule": 10.0},
    "follow-clusters": {"task": "scheduler.tasks.follow_clusters", "schedule": 15.0},
    # Stragglers and hangs of running jobs, from their progress reports (``scheduler/watch``).
    "watch-jobs": {"task": "scheduler.tasks.watch_jobs", "schedule": 60.0},
    # Budget alerts at 50/80/100% and on the month's forecast (``governance/actions/budgets.py``).
    "check-budgets": {"task": "scheduler.tasks.check_budgets", "schedule": 300.0},
    # Elastic pools: asks made again, nodes come up, idle ones given back (scheduler/placement/elastic.py).
    "settle-elastic": {"task": "scheduler.tasks.settle_elastic", "schedule": 60.0},
    # Capacity requests: approved windows that ended, and their leads told ahead (governance/actions/capacity.py).
    "settle-capacity-requests": {"task": "scheduler.tasks.settle_capacity_requests", "schedule": 300.0},
    # Notifications of job events, by e-mail and webhook, as each user chose (``notifications/actions/outbox.py``).
    "notify": {"task": "notifications.tasks.notify", "schedule": 30.0},
    # Billing: the meter, its hourly proof against the placements, and what-ifs whose worker died.
    "meter": {"task": "billing.tasks.meter", "schedule": 60.0},
    "reconcile-meter": {"task": "billing.tasks.reconcile", "schedule": crontab(minute=41)},
    "requeue-what-ifs": {"task": "billing.tasks.requeue_what_ifs", "schedule": 60.0},
    # One minute of the time-based SLOs (observability/actions/sampling.py).
    "sample-slos": {"task": "observability.tasks.sample_slos", "schedule": 60.0},
    # Services: measure, probe, scale and roll out every 5 s (serving/actions/control.py); old samples pruned hourly.
    "serve-control": {"task": "serving.tasks.control_tick", "schedule": 5.0},
    "serve-prune-samples": {"task": "serving.tasks.prune_samples", "schedule": crontab(minute=29)},
    # Edge rollouts' time-based steps: a phase held back by devices offline past its grace (edge/actions/rollouts.py).
    "advance-rollouts": {"task": "edge.tasks.advance_rollouts", "schedule": 5.0},
}

# --- Services (serving/, docs/services.md) ---------------------------------------------------------------
#: Where the data plane (``manage.py serve_dataplane``) answers services' endpoints, as callers reach it: shown on
#: service pages, in the API and by ``qm``. Outside production the demo's (its web server's port plus one).
SERVE_PUBLIC_URL = (
    env_url("SERVE_PUBLIC_URL", https_only=PRODUCTION) or ("" if PRODUCTION else "http://127.0.0.1:8001")
).rstrip("/")
#: How long the data plane holds a request while a service at zero replicas starts one.
SERVE_COLD_START_SECONDS = env_int("SERVE_COLD_START_SECONDS", 120, minimum=0)
#: How long the data plane waits for a replica's answer to begin (then a 504).
SERVE_TIMEOUT_SECONDS = env_int("SERVE_TIMEOUT_SECONDS", 300, minimum=1)
#: Each service's share of the data plane: requests at its replicas at once; beyond, how many may wait their turn
#: and for how long; requests a second (0: no limit). And how many may wait over all services.
SERVE_MAX_INFLIGHT = env_int("SERVE_MAX_INFLIGHT", 256, minimum=1)
SERVE_QUEUE_PER_SERVICE = env_int("SERVE_QUEUE_PER_SERVICE", 100, minimum=0)
SERVE_QUEUE_SECONDS = env_int("SERVE_QUEUE_SECONDS", 30, minimum=0)
SERVE_MAX_RPS = env_int("SERVE_MAX_RPS", 0, minimum=0)
SERVE_QUEUE_TOTAL = env_int("SERVE_QUEUE_TOTAL", 1000, minimum=0)
#: How long the data plane keeps a token's verdict (a revoked token stops working within this time).
SERVE_AUTH_SECONDS = env_int("SERVE_AUTH_SECONDS", 10, minimum=0)
#: How long a new replica may take to pass its health check before it counts as failed (a rollout rolls back).
SERVE_STARTUP_SECONDS = env_int("SERVE_STARTUP_SECONDS", 600, minimum=1)
#: How long a draining replica may finish its requests before it is stopped.
SERVE_DRAIN_SECONDS = env_int("SERVE_DRAIN_SECONDS", 30, minimum=0)
SERVE_MAX_REPLICAS = env_int("SERVE_MAX_REPLICAS", 20, minimum=1)
#: The ports handed out to service replicas whose service names none (each active replica its own): a replica's
#: program listens on the one it was given, and reports no other (``scheduler/actions/replicas.py``).
SERVE_REPLICA_PORTS = env_ports("SERVE_REPLICA_PORTS", (20000, 29999))
SERVICE_SAMPLE_DAYS = env_int("SERVICE_SAMPLE_DAYS", 14, minimum=1)

# --- Metrics ----------------------------------------------------------------------------------------------
# ``/metrics`` (observability/web/views.py): with a token, only a scrape bearing it (``Authorization: Bearer``)
# is answered; without one, only scrapes from this host. The processes share their metrics through the
# directory PROMETHEUS_MULTIPROC_DIR, which the client reads itself (docs/operations.md#metrics).
METRICS_TOKEN = env_str("METRICS_TOKEN") or ""

# --- Placement ------------------------------------------------------------------------------------------
# The organization's accelerator rates as placement reads them (``scheduler/placement/prices.py``): billing's
# price book. The scheduler never imports billing; this is the one place that joins them.
PLACEMENT_PRICES = "billing.actions.prices.placement_prices"
# What governance's pages and checks read of the work placed under quotas and budgets
# (``governance/placed.py``): the scheduler's answers. Governance never imports the scheduler.
GOVERNANCE_PLACED = "scheduler.governed"
# Each team's and project's full charge this month so far (usage with its shares of idle capacity and overhead: its
# statement's total), for budgets that count it (``scheduler/placement/budgets.py``): billing's attribution.
BUDGET_CHARGES = "billing.attribution.charges_to_date"
# What our placements hold on nodes, for the clusters' node pages and live view (``clusters/occupancy.py``).
CLUSTERS_PLACED = "scheduler.occupancy"

# --- Authentication -------------------------------------------------------------------------------------
AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
    {"NAME": "django.contrib.auth.password_validation.NumericPasswordValidator"},
]
# Every way in (sign-in page, admin, API token, identity provider) is refused to a client address or username
# with too many failed sign-ins: django-axes' backend comes first, before any backend that checks a password.
AUTHENTICATION_BACKENDS = [
    "axes.backends.AxesStandaloneBackend",
    # Guesses at one username from many addresses wait their turn (tenancy/signin.py).
    "tenancy.signin.UsernameBackoff",
    "django.contrib.auth.backends.ModelBackend",
    # The identity provider's callback (OpenID Connect, below); off unless configured.
    "tenancy.provider.ProviderBackend",
]
SIGNIN_FAILURE_LIMIT = env_int("SIGNIN_FAILURE_LIMIT", 10, minimum=1)
SIGNIN_COOLOFF_MINUTES = env_int("SIGNIN_COOLOFF_MINUTES", 15, minimum=1)
AXES_FAILURE_LIMIT = SIGNIN_FAILURE_LIMIT
AXES_COOLOFF_TIME = timedelta(minutes=SIGNIN_COOLOFF_MINUTES)
AXES_LOCKOUT_PARAMETERS = "tenancy.signin.lockout_parameters"
AXES_CLIENT_IP_CALLABLE = "common.client.client_address"
AXES_LOCKOUT_CALLABLE = "tenancy.signin.lockout_response"
# Successful sign-ins are in the audit log already; axes' own log of them would grow without end.
AXES_DISABLE_ACCESS_LOG = True
# Lockouts are logged; axes' banner at every process start is not.
AXES_VERBOSE = False
LOGIN_URL = "login"
LOGIN_REDIRECT_URL = "home"
LOGOUT_REDIRECT_URL = "login"
API_TOKEN_DEFAULT_DAYS = env_int("API_TOKEN_DEFAULT_DAYS", 90, minimum=1)
# Days of past jobs the demo seeds for billing's reports and forecasts (``demo/billing.py``).
DEMO_HISTORY_DAYS = env_int("QM_DEMO_HISTORY_DAYS", 182, minimum=0)

# --- Sign-in with the organisation's identity provider (OpenID Connect, `tenancy/provider.py`) -------------
# Off unless OIDC_CLIENT_ID is set; then the provider's endpoints, issuer and client secret are required.
# mozilla-django-oidc reads the OIDC_OP_*/OIDC_RP_* names; they exist (empty) when off, so the backend loads.
OIDC_RP_CLIENT_ID = env_str("OIDC_CLIENT_ID") or ""
OIDC_ENABLED = bool(OIDC_RP_CLIENT_ID)
OIDC_PROVIDER_NAME = env_str("OIDC_PROVIDER_NAME", "your organisation's sign-in")
OIDC_RP_CLIENT_SECRET = env_str("OIDC_CLIENT_SECRET") or ""
OIDC_ISSUER = env_url("OIDC_ISSUER", https_only=PRODUCTION) or ""
OIDC_OP_AUTHORIZATION_ENDPOINT = env_url("OIDC_AUTHORIZATION_ENDPOINT", https_only=PRODUCTION) or ""
OIDC_OP_TOKEN_ENDPOINT = env_url("OIDC_TOKEN_ENDPOINT", https_only=PRODUCTION) or ""
OIDC_OP_USER_ENDPOINT = env_url("OIDC_USERINFO_ENDPOINT", https_only=PRODUCTION) or ""
OIDC_OP_JWKS_ENDPOINT = env_url("OIDC_JWKS_ENDPOINT", https_only=PRODUCTION) or ""
OIDC_RP_SCOPES = " ".join(
    (env_str("OIDC_SCOPES", "openid email profile offline_access") or "").replace(",", " ").split()
)
OIDC_GROUPS_CLAIM = env_str("OIDC_GROUPS_CLAIM", "groups") or ""
OIDC_RP_SIGN_ALGO = env_choice("OIDC_SIGN_ALGORITHM", "RS256", ("RS256", "RS384", "RS512", "ES256", "ES384", "ES512"))
if OIDC_ENABLED:
    _missing = [
        name
        for name, value in (
            ("OIDC_CLIENT_SECRET", OIDC_RP_CLIENT_SECRET),
            ("OIDC_ISSUER", OIDC_ISSUER),
            ("OIDC_AUTHORIZATION_ENDPOINT", OIDC_OP_AUTHORIZATION_ENDPOINT),
            ("OIDC_TOKEN_ENDPOINT", OIDC_OP_TOKEN_ENDPOINT),
            ("OIDC_USERINFO_ENDPOINT", OIDC_OP_USER_ENDPOINT),
            ("OIDC_JWKS_ENDPOINT", OIDC_OP_JWKS_ENDPOINT),
            ("OIDC_GROUPS_CLAIM", OIDC_GROUPS_CLAIM),
        )
        if not value
    ]
    if _missing:
        raise ImproperlyConfigured(f"OIDC_CLIENT_ID is set, so these must be set too: {', '.join(_missing)}")
    if "openid" not in OIDC_RP_SCOPES.split():
        raise ImproperlyConfigured(f"OIDC_SCOPES={OIDC_RP_SCOPES!r} must include openid")
OIDC_USE_PKCE = True
OIDC_PKCE_CODE_CHALLENGE_METHOD = "S256"
OIDC_USE_NONCE = True
OIDC_TIMEOUT = 10
OIDC_AUTHENTICATION_CALLBACK_URL = "oidc-callback"
OIDC_REDIRECT_REQUIRE_HTTPS = PRODUCTION
# Asks the provider whether it still knows each user who signed in through it (refresh-token grant).
CELERY_BEAT_SCHEDULE["check-provider-accounts"] = {
    "task": "tenancy.tasks.check_provider_accounts",
    "schedule": env_int("OIDC_CHECK_SECONDS", 900, minimum=60),
}

# --- REST API -------------------------------------------------------------------------------------------
REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": [
        # First, so unauthenticated requests get 401 with `WWW-Authenticate: Bearer`, not 403.
        "tenancy.authentication.ApiTokenAuthentication",
        "rest_framework.authentication.SessionAuthentication",
    ],
    # A service account's token is narrowed to its scope (read, submit, admin) here and only here.
    "DEFAULT_PERMISSION_CLASSES": ["rest_framework.permissions.IsAuthenticated", "tenancy.scopes.TokenScope"],
    "DEFAULT_FILTER_BACKENDS": ["django_filters.rest_framework.DjangoFilterBackend"],
    "DEFAULT_PAGINATION_CLASS": "common.api.pagination.Pagination",
    # DRF's parsers with the body checked at the edge: nesting depth, NUL and other refused characters.
    "DEFAULT_PARSER_CLASSES": [
        "common.api.parsers.JSONParser",
        "common.api.parsers.FormParser",
        "common.api.parsers.MultiPartParser",
    ],
    "DEFAULT_SCHEMA_CLASS": "common.api.schema.AutoSchema",
    "EXCEPTION_HANDLER": "common.api.errors.exception_handler",
    "TEST_REQUEST_DEFAULT_FORMAT": "json",
}
SPECTACULAR_SETTINGS = {
    "TITLE": "Quartermaster API",
    "DESCRIPTION": (
        "Submit and follow jobs on a shared accelerator fleet, manage teams, quotas and budgets. "
        "Authenticate with `Authorization: Bearer <token>`; get a token from `POST /api/v1/auth/token/`. "
        "Every 4xx answer has the same shape: `{error: {status, code, message, fields}}`."
    ),
    "VERSION": "1.0.0",
    "SERVE_INCLUDE_SCHEMA": False,
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    "REDOC_DIST": "SIDECAR",
    "COMPONENT_SPLIT_REQUEST": True,
    # Names fixed where two models have a field of the same name (a generated client keeps its types).
    "ENUM_NAME_OVERRIDES": {
        "RoleEnum": "tenancy.models.Role",
        "DeviceStatusEnum": "edge.models.Status",
        "DeviceHealthEnum": "edge.models.Health",
        "DeviceGroupKindEnum": "edge.models.DeviceGroup.Kind",
        "RolloutStateEnum": "edge.models.RolloutState",
        "DeploymentStateEnum": "edge.models.DeploymentState",
        "KindEnum": "governance.models.QuotaChange.Kind",
        "CapacityRequestKindEnum": "governance.models.CapacityRequest.Kind",
        "BudgetAlertKindEnum": "governance.models.BudgetAlert.Kind",
        "StateEnum": "scheduler.states.JobState",  # the jobs' (its name before nodes and drains had states too)
        "NodeStateEnum": "clusters.models.Node.State",
        "DrainStateEnum": "clusters.models.Drain.State",
        "DrainKindEnum": "clusters.models.Drain.Kind",
        "ClusterKindEnum": "clusters.backends.kinds.choices",
        "ClusterStatusEnum": "clusters.models.Cluster.Status",
        "StatusEnum": "billing.models.WhatIf.Status",  # its name before clusters had a status too
        "JobKindEnum": "scheduler.models.Job.Kind",
        "SessionAppEnum": "scheduler.models.Job.SessionApp",
        "WatchActionEnum": "governance.models.WatchAction",
    },
    # ``<id:…>`` in a path (``common.params.IdConverter``): a 64-bit id; anything else is a 404.
    "PATH_CONVERTER_OVERRIDES": {"id": {"type": "integer", "format": "int64", "minimum": 1, "maximum": 2**63 - 1}},
}

# --- Internationalisation, static files -----------------------------------------------------------------
LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True
STATIC_URL = "static/"
STATICFILES_DIRS = [BASE_DIR / "static"]
STATIC_ROOT = VAR_DIR / "static"
STATIC_ROOT.mkdir(exist_ok=True)
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {
        "BACKEND": (
            "whitenoise.storage.CompressedManifestStaticFilesStorage"
            if PRODUCTION
            else "django.contrib.staticfiles.storage.StaticFilesStorage"
        )
    },
}
# Outside production, serve static files straight from the app folders: no collectstatic step needed.
WHITENOISE_USE_FINDERS = not PRODUCTION

# --- Email ----------------------------------------------------------------------------------------------
EMAIL_BACKEND = env_str(
    "EMAIL_BACKEND",
    "django.core.mail.backends.smtp.EmailBackend" if PRODUCTION else "django.core.mail.backends.console.EmailBackend",
)
EMAIL_HOST = env_str("EMAIL_HOST", "localhost")
EMAIL_PORT = env_int("EMAIL_PORT", 25, minimum=1)
EMAIL_HOST_USER = env_str("EMAIL_HOST_USER", "")
EMAIL_HOST_PASSWORD = env_str("EMAIL_HOST_PASSWORD", "")
EMAIL_USE_TLS = env_bool("EMAIL_USE_TLS", False)
DEFAULT_FROM_EMAIL = env_str("DEFAULT_FROM_EMAIL", "quartermaster@localhost")
SERVER_EMAIL = DEFAULT_FROM_EMAIL

# --- Security -------------------------------------------------------------------------------------------
SESSION_COOKIE_HTTPONLY = True
X_FRAME_OPTIONS = "DENY"
SECURE_CONTENT_TYPE_NOSNIFF = True
SECURE_REFERRER_POLICY = "same-origin"
if PRODUCTION:
    SESSION_COOKIE_SECURE = True
    CSRF_COOKIE_SECURE = True
    SECURE_SSL_REDIRECT = env_bool("SECURE_SSL_REDIRECT", True)
    # Probes speak plain HTTP to the pod; everything else is redirected to HTTPS.
    SECURE_REDIRECT_EXEMPT = [r"^healthz/$"]
    SECURE_HSTS_SECONDS = env_int("SECURE_HSTS_SECONDS", 31_536_000, minimum=0)
    SECURE_HSTS_INCLUDE_SUBDOMAINS = env_bool("SECURE_HSTS_INCLUDE_SUBDOMAINS", True)
    SECURE_HSTS_PRELOAD = env_bool("SECURE_HSTS_PRELOAD", True)
    if env_bool("TRUST_X_FORWARDED_PROTO", False):
        SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
# Content-Security-Policy (django-csp): scripts, styles and everything else from this site only. No inline
# script, style or handler is needed: the templates load theirs from static/, htmx evaluates nothing
# (templates/base.html), and the charts' data travel as JSON (json_script), which is not run.
CONTENT_SECURITY_POLICY = {
    "DIRECTIVES": {
        "default-src": ["'self'"],
        "script-src": ["'self'"],
        "style-src": ["'self'"],
        # data: images are Swagger UI's icons (/api/docs/); an image can run nothing.
        "img-src": ["'self'", "data:"],
        "connect-src": ["'self'"],
        "object-src": ["'none'"],
        "base-uri": ["'none'"],
        "form-action": ["'self'"],
        "frame-ancestors": ["'none'"],
    }
}
# The client address (audit log, sign-in lockouts: common/client.py) is taken from X-Forwarded-For only when a
# trusted proxy overwrites that header.
TRUST_X_FORWARDED_FOR = env_bool("TRUST_X_FORWARDED_FOR", False)

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"plain": {"format": "%(asctime)s %(levelname)s %(name)s %(message)s"}},
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": "plain"}},
    "root": {"handlers": ["console"], "level": env_str("LOG_LEVEL", "INFO")},
}
