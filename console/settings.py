"""Redrive settings, read from environment variables only.

Every variable is listed in the README. Defaults are the embedded set-up a newcomer
gets from the run command: SQLite, the local Redis for Celery, DEBUG on. Production
sets them all (see docker-compose.yml).
"""

from __future__ import annotations

import base64
import hashlib
import os
from pathlib import Path

import dj_database_url
from django.core.exceptions import ImproperlyConfigured

BASE_DIR = Path(__file__).resolve().parent.parent


def env_str(name: str, default: str = "") -> str:
    return os.environ.get(name, default)


def env_bool(name: str, default: bool = False) -> bool:
    value = os.environ.get(name)
    if value is None:
        return default
    return value.strip().lower() in {"1", "true", "yes", "on"}


def env_int(name: str, default: int) -> int:
    value = os.environ.get(name)
    if value is None or value.strip() == "":
        return default
    try:
        return int(value)
    except ValueError as exc:
        raise ImproperlyConfigured(f"{name} must be an integer, got {value!r}") from exc


def env_list(name: str, default: str = "") -> list[str]:
    return [item.strip() for item in os.environ.get(name, default).split(",") if item.strip()]


# --- Core -----------------------------------------------------------------------
# The embedded set-up is the default; production turns DEBUG off and must then set
# SECRET_KEY, CREDENTIALS_KEY and ALLOWED_HOSTS.
DEBUG = env_bool("DEBUG", default=True)
# A development key is only acceptable with DEBUG on; production must set its own.
SECRET_KEY = env_str("SECRET_KEY") or (
    "redrive-insecure-development-key-do-not-use-in-production" if DEBUG else ""
)
if not SECRET_KEY:
    raise ImproperlyConfigured("SECRET_KEY must be set when DEBUG is off")
ALLOWED_HOSTS = env_list("ALLOWED_HOSTS", "127.0.0.1,localhost" if DEBUG else "")
CSRF_TRUSTED_ORIGINS = env_list("CSRF_TRUSTED_ORIGINS")
VAR_DIR = Path(env_str("REDRIVE_VAR_DIR", str(BASE_DIR / "var")))

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "rest_framework",
    "rest_framework.authtoken",
    "drf_spectacular",
    "drf_spectacular_sidecar",
    "django_celery_beat",
    "django_celery_results",
    "django_htmx",
    "template_partials",
    "console.accounts",
    "console.audit",
    "console.clusters",
    "console.archive",
    "console.api",
    "console.runner",
    "console.replay",
    "console.analytics",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.auth.middleware.LoginRequiredMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "django_htmx.middleware.HtmxMiddleware",
    "console.errors.BrokerErrorMiddleware",
]

ROOT_URLCONF = "console.urls"
WSGI_APPLICATION = "console.wsgi.application"

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
                "console.accounts.context_processors.roles",
            ],
            "builtins": ["template_partials.templatetags.partials"],
        },
    },
]

# --- Database -------------------------------------------------------------------
DATABASES = {
    "default": dj_database_url.parse(
        env_str("DATABASE_URL", f"sqlite:///{VAR_DIR / 'redrive.sqlite3'}"),
        conn_max_age=env_int("DATABASE_CONN_MAX_AGE", 0),
    )
}
if DATABASES["default"]["ENGINE"] == "django.db.backends.sqlite3":
    Path(DATABASES["default"]["NAME"]).parent.mkdir(parents=True, exist_ok=True)
    # The embedded set-up runs the web process, a worker and beat on one file.
    DATABASES["default"].setdefault("OPTIONS", {})
    DATABASES["default"]["OPTIONS"].update({"timeout": 20, "transaction_mode": "IMMEDIATE"})
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

# --- Auth -----------------------------------------------------------------------
LOGIN_URL = "login"
LOGIN_REDIRECT_URL = "clusters:list"
LOGOUT_REDIRECT_URL = "login"
AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
]

# --- Security -------------------------------------------------------------------
SECURE_SSL_REDIRECT = env_bool("SECURE_SSL_REDIRECT", default=not DEBUG)
SECURE_PROXY_SSL_HEADER = (
    ("HTTP_X_FORWARDED_PROTO", "https") if env_bool("BEHIND_TLS_PROXY", default=False) else None
)
SESSION_COOKIE_SECURE = not DEBUG
CSRF_COOKIE_SECURE = not DEBUG
SESSION_COOKIE_HTTPONLY = True
SECURE_HSTS_SECONDS = env_int("SECURE_HSTS_SECONDS", 0 if DEBUG else 31536000)
SECURE_HSTS_INCLUDE_SUBDOMAINS = not DEBUG
SECURE_HSTS_PRELOAD = env_bool("SECURE_HSTS_PRELOAD", default=False)
SECURE_CONTENT_TYPE_NOSNIFF = True
X_FRAME_OPTIONS = "DENY"
SILENCED_SYSTEM_CHECKS = [] if SECURE_HSTS_PRELOAD else ["security.W021"]


def _credentials_key() -> bytes:
    """Fernet key for broker credentials at rest.

    CREDENTIALS_KEY is a urlsafe base64 Fernet key. In DEBUG without one, a key is
    derived from SECRET_KEY so the embedded set-up needs no extra step.
    """
    key = env_str("CREDENTIALS_KEY")
    if key:
        return key.encode()
    if not DEBUG:
        raise ImproperlyConfigured(
            "CREDENTIALS_KEY must be set when DEBUG is off "
            '(python -c "from cryptography.fernet import Fernet; print(Fernet.generate_key().decode())")'
        )
    return base64.urlsafe_b64encode(hashlib.sha256(SECRET_KEY.encode()).digest())


CREDENTIALS_KEY = _credentials_key()

# --- Static files ---------------------------------------------------------------
STATIC_URL = "static/"
STATICFILES_DIRS = [BASE_DIR / "static"]
STATIC_ROOT = Path(env_str("STATIC_ROOT", str(BASE_DIR / "staticfiles")))

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True

# --- REST API -------------------------------------------------------------------
REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": [
        "rest_framework.authentication.TokenAuthentication",
        "rest_framework.authentication.SessionAuthentication",
    ],
    "DEFAULT_PERMISSION_CLASSES": ["console.accounts.permissions.RolePermission"],
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
    "DEFAULT_PAGINATION_CLASS": "rest_framework.pagination.PageNumberPagination",
    "PAGE_SIZE": 50,
    "EXCEPTION_HANDLER": "console.errors.api_exception_handler",
    "DEFAULT_PARSER_CLASSES": [
        "console.api.parsers.NestingSafeJSONParser",
        "rest_framework.parsers.FormParser",
        "rest_framework.parsers.MultiPartParser",
    ],
}
SPECTACULAR_SETTINGS = {
    "TITLE": "Redrive API",
    "DESCRIPTION": "Retry and dead-letter operations on Pulsar, RocketMQ-style and RabbitMQ clusters.",
    "VERSION": "1.0.0",
    "SERVE_INCLUDE_SCHEMA": False,
    "SERVE_PERMISSIONS": ["rest_framework.permissions.IsAuthenticated"],
    "COMPONENT_SPLIT_REQUEST": True,
    # Swagger UI's files are served from the sidecar package, never from a CDN.
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    "REDOC_DIST": "SIDECAR",
}

# --- Celery ---------------------------------------------------------------------
CELERY_BROKER_URL = env_str("CELERY_BROKER_URL", "redis://127.0.0.1:6379/0")
CELERY_RESULT_BACKEND = "django-db"
CELERY_TASK_SOFT_TIME_LIMIT = env_int("CELERY_TASK_SOFT_TIME_LIMIT", 3300)
CELERY_TASK_TIME_LIMIT = env_int("CELERY_TASK_TIME_LIMIT", 3600)
CELERY_TASK_ACKS_LATE = True
CELERY_TASK_REJECT_ON_WORKER_LOST = True
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
CELERY_BEAT_SCHEDULER = "django_celery_beat.schedulers:DatabaseScheduler"
CELERY_TIMEZONE = TIME_ZONE
# The broker connection must never block the web process: a down Redis shows as
# unreachable, it does not hang a request.
CELERY_BROKER_CONNECTION_TIMEOUT = 3
CELERY_BROKER_TRANSPORT_OPTIONS = {"max_retries": 1, "socket_connect_timeout": 3}

# --- Brokers --------------------------------------------------------------------
# Redis database of the RocketMQ-style broker: never the one Celery uses.
ROCKETMQ_DEFAULT_URL = env_str("ROCKETMQ_DEFAULT_URL", "redis://127.0.0.1:6379/5")
# Seconds a broker call may take before it counts as unreachable.
BROKER_TIMEOUT_SECONDS = env_int("BROKER_TIMEOUT_SECONDS", 5)

# --- Archive --------------------------------------------------------------------
ARCHIVE_PAGE_SIZE = env_int("ARCHIVE_PAGE_SIZE", 50)
ARCHIVE_COLLECT_BATCH = env_int("ARCHIVE_COLLECT_BATCH", 500)

# --- Replay engine (docs/replay.md) -------------------------------------------
# A running job whose worker has not reported for this long is taken over.
REPLAY_STALE_SECONDS = env_int("REPLAY_STALE_SECONDS", 60)
# A job task works this long, then hands over to a fresh task (under the time limits).
REPLAY_SLICE_SECONDS = env_int("REPLAY_SLICE_SECONDS", 240)
# How long a job waits for an unreachable broker before it ends failed (resumable).
REPLAY_UNREACHABLE_SECONDS = env_int("REPLAY_UNREACHABLE_SECONDS", 300)
# Largest payload an operator may type when editing a dead letter before resending it.
REPLAY_MAX_EDITED_PAYLOAD = env_int("REPLAY_MAX_EDITED_PAYLOAD", 5 * 1024 * 1024)

# --- Analytics (docs/pipeline.md) ----------------------------------------------
# A local folder or any Hadoop-compatible URI (s3a://bucket/redrive, hdfs://nn/redrive).
ANALYTICS_EXPORT_PATH = env_str("ANALYTICS_EXPORT_PATH", str(VAR_DIR / "analytics"))
ANALYTICS_SPARK_MASTER = env_str("ANALYTICS_SPARK_MASTER", "local[*]")
ANALYTICS_SPARK_DRIVER_MEMORY = env_str("ANALYTICS_SPARK_DRIVER_MEMORY", "1g")
ANALYTICS_SPARK_EXECUTOR_MEMORY = env_str("ANALYTICS_SPARK_EXECUTOR_MEMORY", "1g")
# Property holding a business key (order id...) for duplicate detection; empty: none.
ANALYTICS_BUSINESS_KEY = env_str("ANALYTICS_BUSINESS_KEY", "")
# JSON object: the selection the replay-candidates job takes; empty: the default policy.
ANALYTICS_REPLAY_POLICY = env_str("ANALYTICS_REPLAY_POLICY", "")
ANALYTICS_NIGHTLY_AT = env_str("ANALYTICS_NIGHTLY_AT", "02:30")
ANALYTICS_RUN_TIMEOUT_SECONDS = env_int("ANALYTICS_RUN_TIMEOUT_SECONDS", 3000)

# --- Logging --------------------------------------------------------------------
LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"plain": {"format": "%(asctime)s %(levelname)s %(name)s %(message)s"}},
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": "plain"}},
    "root": {"handlers": ["console"], "level": env_str("LOG_LEVEL", "INFO")},
    "loggers": {"pika": {"level": "WARNING"}},
}

# Parallel test sessions (several developers' runs on one PostgreSQL) each name
# their own test database.
if env_str("TEST_DATABASE_NAME"):
    DATABASES["default"]["TEST"] = {"NAME": env_str("TEST_DATABASE_NAME")}
