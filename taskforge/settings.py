"""TaskForge settings, read from the environment (reference: docs/operations.md, "Configuration").

Every ``TASKFORGE_*`` variable is read here and nowhere else.
"""

from __future__ import annotations

import ipaddress
from pathlib import Path

import dj_database_url
from django.core.exceptions import ImproperlyConfigured

from taskforge.dev import embedded
from taskforge.env import env_bool, env_int, env_list, env_optional, env_str
from taskforge.infra import redis as redis_infra
from taskforge.ops.placeholders import is_placeholder

BASE_DIR = Path(__file__).resolve().parent.parent
TASKFORGE_HOME = Path(env_str("TASKFORGE_HOME", str(BASE_DIR / ".taskforge")))

DEBUG = env_bool("DJANGO_DEBUG", False)
_database_url = env_optional("DATABASE_URL")
_redis_url = env_optional("REDIS_URL")
EMBEDDED_SERVICES = _database_url is None or _redis_url is None


# Keys that appear in docs, example files and Django's startproject template:
# anyone can read them, so a production process must not sign sessions with one.
_is_placeholder = is_placeholder


def _secret_key() -> str:
    from_env = env_optional("DJANGO_SECRET_KEY")
    if from_env:
        if not DEBUG and _is_placeholder(from_env):
            raise ImproperlyConfigured(
                "DJANGO_SECRET_KEY is a well-known placeholder; set a random value, e.g. "
                "python -c 'import secrets; print(secrets.token_urlsafe(50))'"
            )
        return from_env
    if not (DEBUG or EMBEDDED_SERVICES):
        # Production (servers given by URL) must not run on a key that lives on
        # one container's disk or, worse, a well-known default.
        raise ImproperlyConfigured("DJANGO_SECRET_KEY must be set when DJANGO_DEBUG is false")
    # Development: generated once and kept under .taskforge/, owner-only.
    return embedded.dev_secret_key(TASKFORGE_HOME)


SECRET_KEY = _secret_key()
ALLOWED_HOSTS = env_list("DJANGO_ALLOWED_HOSTS", "localhost,127.0.0.1")

INSTALLED_APPS = [
    "dashboard.apps.TaskForgeAdminConfig",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "django.contrib.postgres",  # the GIN index of payload search (tf_task_payload)
    "rest_framework",
    "drf_spectacular",
    "drf_spectacular_sidecar",
    "django_prometheus",
    "channels",
    "queues",
    "workers",
    "dashboard.apps.DashboardConfig",
]

MIDDLEWARE = [
    # First and last: django-prometheus times the whole chain (request metrics on /metrics).
    "taskforge.ops.request_metrics.RequestMetricsBefore",
    "taskforge.http.middleware.RequestIdMiddleware",
    "taskforge.http.middleware.BodyLimitMiddleware",
    "django.middleware.security.SecurityMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "taskforge.ops.request_metrics.RequestMetricsAfter",
]

ROOT_URLCONF = "taskforge.urls"
APPEND_SLASH = False  # the contract answers both forms directly, never by redirect
WSGI_APPLICATION = "taskforge.wsgi.application"
ASGI_APPLICATION = "taskforge.asgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "dashboard" / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ],
        },
    },
]

# --- Postgres -----------------------------------------------------------------

DB_POOL_SIZE = env_int("TASKFORGE_DB_POOL_SIZE", 8, minimum=0, maximum=200)
# Connections each API process keeps for the single enqueues its event loop runs
# itself (taskforge/infra/postgres/aio.py); 0: they go to the thread pool like the rest.
DB_LOOP_POOL_SIZE = env_int("TASKFORGE_DB_LOOP_POOL_SIZE", 4, minimum=0, maximum=200)
# Threads per API process serving Django (see taskforge/asgi.py); a long poll waits
# without one. Each holds at most one pooled connection. Python runs one thread at a
# time per process, so more threads mostly add switching: make bench measured W1 at
# 4 threads 1.1x the rate of 8 (608/644 vs 560/550 tasks/s), with a lower p99.
TASKFORGE_THREADS = env_int("TASKFORGE_THREADS", 4, minimum=1, maximum=200)
_db = dj_database_url.parse(_database_url or embedded.database_url(TASKFORGE_HOME))
_db_options = dict(_db.get("OPTIONS", {}))
_db_options.setdefault("connect_timeout", 5)
# Behind PgBouncer in transaction pool mode (docs/deployment.md#pgbouncer): no
# connection state may outlive a transaction, and PgBouncer refuses the ``options``
# startup parameter, so the timeouts below are then the database role's to set.
TASKFORGE_DB_PGBOUNCER = env_bool("TASKFORGE_DB_PGBOUNCER", False)
if TASKFORGE_DB_PGBOUNCER:
    # A named (server-side) cursor lives across transactions on one server connection.
    _db["DISABLE_SERVER_SIDE_CURSORS"] = True
    # Django already keeps psycopg from preparing statements; stated here so an
    # OPTIONS from elsewhere cannot turn it back on.
    _db_options["prepare_threshold"] = None
else:
    # Django turns psycopg's prepared statements off unless asked: the lifecycle
    # prepares its fixed statements on each connection (queues/lifecycle/rows.py).
    # Django's own queries bind on the client and are never prepared either way.
    _db_options.setdefault("prepare_threshold", 5)
    # Bound every statement and lock wait, and never let an idle transaction pin
    # the xmin horizon (it slows every claim as dead rows pile up).
    _db_options["options"] = (
        "-c statement_timeout=30000 -c lock_timeout=10000 -c idle_in_transaction_session_timeout=60000"
    )
if DB_POOL_SIZE:
    _db_options["pool"] = {"min_size": 1, "max_size": DB_POOL_SIZE, "timeout": 10}
    _db["CONN_MAX_AGE"] = 0  # the pool owns connection lifetime
_db["OPTIONS"] = _db_options
# Checked on checkout: after a Postgres restart or pg_terminate_backend a process
# would otherwise hand out its dead pooled connections one failed request (or loop
# tick) at a time. Measured by make test-faults. With the pool, one empty round trip
# unless the connection was handed out within the last second and its socket is
# quiet (taskforge/infra/postgres/checkout.py); the pool sweeps itself once it
# finds a dead one.
_db["CONN_HEALTH_CHECKS"] = True
_db["ENGINE"] = "taskforge.infra.postgres"
DATABASES = {"default": _db}
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

# --- Redis --------------------------------------------------------------------

REDIS_URL = _redis_url or embedded.redis_url(TASKFORGE_HOME)
# redis+sentinel://... or redis+cluster://... (docs/deployment.md): a malformed one stops the process here,
# not at first use.
redis_infra.check_url(REDIS_URL)

# Django's cache, on the same Redis (django-redis).
CACHES = {
    "default": {
        "BACKEND": "django_redis.cache.RedisCache",
        # A list: django-redis splits a string on commas, which a Sentinel URL has.
        "LOCATION": [REDIS_URL],
        # Apart from the dispatch tier's own tf:* keys, so a look at Redis tells them apart.
        "KEY_PREFIX": "tf:cache",
        "OPTIONS": {
            # Understands redis+sentinel:// and redis+cluster:// as well, so the cache follows a failover too.
            "CONNECTION_FACTORY": "taskforge.infra.cache.CacheConnectionFactory",
            # django-redis' client, except that on a Cluster multi-key reads go slot by slot.
            "CLIENT_CLASS": "taskforge.infra.cache.CacheClient",
            "SOCKET_CONNECT_TIMEOUT": 2,
            "SOCKET_TIMEOUT": 2,
            # A cache miss instead of a 500 while Redis is down: sessions (cached_db)
            # then read Postgres, which holds every session anyway.
            "IGNORE_EXCEPTIONS": True,
        },
    }
}
DJANGO_REDIS_LOG_IGNORED_EXCEPTIONS = True  # logged (logger django_redis.cache), never silent
# Admin sessions: written to Postgres and to the cache, read from the cache first.
# Redis is a rebuildable buffer here as everywhere: a flush never logs anyone out.
SESSION_ENGINE = "django.contrib.sessions.backends.cached_db"
# Admin messages live in the (server-side) session, not in a cookie: the
# message that shows a new API key once must not send the raw key to the
# browser in a signed, readable cookie.
MESSAGE_STORAGE = "django.contrib.messages.storage.session.SessionStorage"

# --- TaskForge behaviour ------------------------------------------------------

TASKFORGE_HEARTBEAT_TIMEOUT = env_int("TASKFORGE_HEARTBEAT_TIMEOUT", 30, minimum=1, maximum=86400)
TASKFORGE_WATCHDOG_INTERVAL = env_int("TASKFORGE_WATCHDOG_INTERVAL", 15, minimum=1, maximum=3600)
TASKFORGE_SCHEDULER_TICK = env_int("TASKFORGE_SCHEDULER_TICK", 1, minimum=1, maximum=60)
TASKFORGE_RETRY_BASE_MS = env_int("TASKFORGE_RETRY_BASE_MS", 1000, minimum=1, maximum=3_600_000)
TASKFORGE_RETRY_MAX_DELAY_MS = env_int("TASKFORGE_RETRY_MAX_DELAY_MS", 3_600_000, minimum=1, maximum=30 * 86_400_000)
if TASKFORGE_RETRY_MAX_DELAY_MS < TASKFORGE_RETRY_BASE_MS:
    raise ImproperlyConfigured("TASKFORGE_RETRY_MAX_DELAY_MS must be >= TASKFORGE_RETRY_BASE_MS")
TASKFORGE_MAX_PAYLOAD_BYTES = env_int("TASKFORGE_MAX_PAYLOAD_BYTES", 1_048_576, minimum=1024)
# A request body must arrive whole within this many seconds (a 400 otherwise): a
# client trickling its body holds no thread, but it must not hold memory forever.
TASKFORGE_BODY_TIMEOUT_SECONDS = env_int("TASKFORGE_BODY_TIMEOUT_SECONDS", 30, minimum=1, maximum=3600)
# Long polls (claims and task reads with wait_seconds) one API key may have waiting in one process.
TASKFORGE_MAX_LONG_POLLS_PER_KEY = env_int("TASKFORGE_MAX_LONG_POLLS_PER_KEY", 1000, minimum=1, maximum=1_000_000)
# At least a day: 0 would prune every finished task (and its history) the moment it finishes.
TASKFORGE_RETENTION_DAYS = env_int("TASKFORGE_RETENTION_DAYS", 7, minimum=1, maximum=3650)
# Per-queue, per-minute history (GET /queues/{name}/history, the overview's charts): one row per queue per minute.
TASKFORGE_HISTORY_DAYS = env_int("TASKFORGE_HISTORY_DAYS", 14, minimum=1, maximum=366)
# Heartbeats, acks and nacks must name their lease (the contract makes it optional).
TASKFORGE_REQUIRE_LEASE_TOKEN = env_bool("TASKFORGE_REQUIRE_LEASE_TOKEN", False)
TASKFORGE_METRICS_TOKEN = env_optional("TASKFORGE_METRICS_TOKEN")
# Push queues: how long a rotated-out secret still signs deliveries (both signatures are sent).
TASKFORGE_PUSH_SECRET_GRACE_SECONDS = env_int(
    "TASKFORGE_PUSH_SECRET_GRACE_SECONDS", 3600, minimum=0, maximum=30 * 86400
)
# Development and tests only: let push targets resolve to loopback, private or link-local addresses.
TASKFORGE_PUSH_ALLOW_PRIVATE = env_bool("TASKFORGE_PUSH_ALLOW_PRIVATE", False)
# Deliveries one pusher process keeps in flight at most (its HTTP connection pool's size).
TASKFORGE_PUSHER_CONCURRENCY = env_int("TASKFORGE_PUSHER_CONCURRENCY", 100, minimum=1, maximum=10_000)
# Opt-in: also count tasks by kind on /metrics. Kinds are producers' strings, so
# the number of series grows with the number of kinds they use.
TASKFORGE_METRICS_KIND_LABEL = env_bool("TASKFORGE_METRICS_KIND_LABEL", False)


# Reverse proxies whose X-Forwarded-For names the client (addresses or CIDR
# networks); the admin login throttle keys on the client address it gives.
def _trusted_proxies() -> list[str]:
    entries = env_list("TASKFORGE_TRUSTED_PROXIES", "")
    for entry in entries:
        try:
            ipaddress.ip_network(entry, strict=False)
        except ValueError:
            raise ImproperlyConfigured(
                f"TASKFORGE_TRUSTED_PROXIES: {entry!r} is not an IP address or network (e.g. 10.0.0.0/8)"
            ) from None
    return entries


TASKFORGE_TRUSTED_PROXIES = _trusted_proxies()
TASKFORGE_FAILPOINTS = env_str("TASKFORGE_FAILPOINTS", "")
if TASKFORGE_FAILPOINTS:  # fault tests only; a typo must not silently disable a fault
    from taskforge.ops.failpoints import parse as _parse_failpoints

    _parse_failpoints(TASKFORGE_FAILPOINTS)

# Django's own request-body guard runs after ours; keep it out of the way.
DATA_UPLOAD_MAX_MEMORY_SIZE = TASKFORGE_MAX_PAYLOAD_BYTES + 1024
# Every body (browser forms included) is capped at the edge, so an upload never
# needs a temporary file: nothing a client sends is written to disk.
FILE_UPLOAD_MAX_MEMORY_SIZE = DATA_UPLOAD_MAX_MEMORY_SIZE
FILE_UPLOAD_HANDLERS = ["django.core.files.uploadhandler.MemoryFileUploadHandler"]

# --- REST framework -----------------------------------------------------------

REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": ["queues.apikeys.ApiKeyAuthentication"],
    "DEFAULT_PERMISSION_CLASSES": ["queues.apikeys.HasRole"],
    "DEFAULT_PARSER_CLASSES": ["taskforge.http.parsers.StrictJSONParser"],
    "DEFAULT_RENDERER_CLASSES": ["taskforge.http.renderers.FastJSONRenderer"],
    "DEFAULT_CONTENT_NEGOTIATION_CLASS": "taskforge.http.renderers.JSONNegotiation",
    "EXCEPTION_HANDLER": "taskforge.http.errors.exception_handler",
    "UNAUTHENTICATED_USER": None,
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
}

SPECTACULAR_SETTINGS = {
    "TITLE": "TaskForge API",
    "DESCRIPTION": "Self-hosted distributed task queue. The guide to this API is docs/api.md.",
    "VERSION": "1.0.0",
    "SERVE_INCLUDE_SCHEMA": False,
    # The schema and its docs hold no data: served to anyone, whatever key is sent.
    "SERVE_AUTHENTICATION": [],
    "SERVE_PERMISSIONS": ["rest_framework.permissions.AllowAny"],
    # Swagger UI from our own static files (drf-spectacular-sidecar), never a CDN.
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    "REDOC_DIST": "SIDECAR",
    "COMPONENT_SPLIT_REQUEST": True,
    "ENUM_GENERATE_CHOICE_DESCRIPTION": False,
    "ENUM_NAME_OVERRIDES": {
        "TaskStatusEnum": "queues.models.Status",
        "ErrorCodeEnum": "queues.api.openapi_components.ERROR_CODES",
    },
    "POSTPROCESSING_HOOKS": [
        "drf_spectacular.hooks.postprocess_schema_enums",
        "taskforge.http.openapi_hooks.postprocess",
    ],
}

# --- Security -----------------------------------------------------------------

SESSION_COOKIE_SECURE = env_bool("DJANGO_SECURE_COOKIES", not DEBUG and not EMBEDDED_SERVICES)
CSRF_COOKIE_SECURE = SESSION_COOKIE_SECURE
SECURE_HSTS_SECONDS = env_int("DJANGO_HSTS_SECONDS", 0, minimum=0)
SECURE_HSTS_INCLUDE_SUBDOMAINS = env_bool("DJANGO_HSTS_INCLUDE_SUBDOMAINS", False)
SECURE_HSTS_PRELOAD = env_bool("DJANGO_HSTS_PRELOAD", False)
# Off by default: workers and probes usually speak plain HTTP inside the
# network while a proxy terminates TLS; turn it on where clients reach us directly.
SECURE_SSL_REDIRECT = env_bool("DJANGO_SECURE_SSL_REDIRECT", False)
# Health probes and scrapers call these over plain HTTP from inside the network.
SECURE_REDIRECT_EXEMPT = [r"^(healthz|readyz|metrics)/?$"]
if env_bool("DJANGO_TRUST_X_FORWARDED_PROTO", False):
    # Only behind a proxy that sets the header itself: otherwise clients could forge "https".
    SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
SECURE_CONTENT_TYPE_NOSNIFF = True
X_FRAME_OPTIONS = "DENY"
CSRF_TRUSTED_ORIGINS = env_list("DJANGO_CSRF_TRUSTED_ORIGINS", "")
# Admin logins: Django's ModelBackend behind a Redis-backed failed-login throttle.
AUTHENTICATION_BACKENDS = ["taskforge.ops.login_throttle.ThrottledModelBackend"]

# --- Static files, i18n -------------------------------------------------------

STATIC_URL = "static/"
STATIC_ROOT = BASE_DIR / "staticfiles"
LANGUAGE_CODE = "en-us"
# Admin dates to the second, 24-hour (taskforge/formats/en/formats.py).
FORMAT_MODULE_PATH = "taskforge.formats"
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True

# --- Logging --------------------------------------------------------------------

LOG_FORMAT = env_str("DJANGO_LOG_FORMAT", "json")
LOG_LEVEL = env_str("DJANGO_LOG_LEVEL", "INFO").upper()
LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "filters": {"request_id": {"()": "taskforge.http.middleware.RequestIdFilter"}},
    "formatters": {
        "json": {
            "()": "taskforge.ops.logs.JsonFormatter",
            "fmt": "%(asctime)s %(levelname)s %(name)s %(message)s",
            "rename_fields": {"asctime": "ts", "levelname": "level", "name": "logger"},
        },
        "text": {"()": "taskforge.ops.logs.TextFormatter"},
    },
    "handlers": {
        "stdout": {
            "class": "logging.StreamHandler",
            "stream": "ext://sys.stdout",
            "formatter": "text" if LOG_FORMAT == "text" else "json",
            "filters": ["request_id"],
        }
    },
    "root": {"handlers": ["stdout"], "level": LOG_LEVEL},
    "loggers": {
        "django.server": {"level": "WARNING"},
        "django.request": {"level": "ERROR"},
    },
}
