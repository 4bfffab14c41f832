"""One env-driven settings module (12-factor).

With no environment set this is the embedded default: SQLite, the in-memory channel layer,
in-process runs and the offline demo model. Production sets DATABASE_URL, REDIS_URL, SECRET_KEY,
DEBUG=0 and ALLOWED_HOSTS.
"""

import json
import os
from pathlib import Path

import dj_database_url
from django.core.exceptions import ImproperlyConfigured

BASE_DIR = Path(__file__).resolve().parent.parent


def _env_bool(name: str, default: bool) -> bool:
    raw = os.environ.get(name)
    if raw is None or raw == "":
        return default
    return raw.strip().lower() in {"1", "true", "yes", "on"}


def _env_int(name: str, default: int) -> int:
    raw = os.environ.get(name)
    return int(raw) if raw else default


DEBUG = _env_bool("DEBUG", True)
SECRET_KEY = os.environ.get("SECRET_KEY", "")
if not SECRET_KEY:
    if not DEBUG:
        raise ImproperlyConfigured("SECRET_KEY is required when DEBUG is off.")
    SECRET_KEY = "insecure-dev-key-only-for-the-embedded-default"

ALLOWED_HOSTS = [h.strip() for h in os.environ.get("ALLOWED_HOSTS", "127.0.0.1,localhost").split(",") if h]
CSRF_TRUSTED_ORIGINS = [o.strip() for o in os.environ.get("CSRF_TRUSTED_ORIGINS", "").split(",") if o.strip()]

INSTALLED_APPS = [
    "daphne",
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "whitenoise.runserver_nostatic",
    "django.contrib.staticfiles",
    "rest_framework",
    "knox",
    "drf_spectacular",
    "drf_spectacular_sidecar",
    "channels",
    "opencompany.core",
    "graphs",
    "conversations",
    "memory",
    "chat",
    # Listed after chat: the earlier app's command wins, and chat's `db_worker` also runs the chat watchdog.
    "django_tasks_db",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "opencompany.core.middleware.BodySizeLimitMiddleware",
    "opencompany.core.gate_middleware.InputGateMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "django.middleware.csp.ContentSecurityPolicyMiddleware",
]

ROOT_URLCONF = "opencompany.urls"
WSGI_APPLICATION = "opencompany.wsgi.application"
ASGI_APPLICATION = "opencompany.asgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
                "django.template.context_processors.csp",
            ],
        },
    },
]

# --- database -------------------------------------------------------------------------------
DATABASES = {
    "default": dj_database_url.parse(
        os.environ.get("DATABASE_URL") or f"sqlite:///{BASE_DIR / 'db.sqlite3'}",
        conn_health_checks=_env_bool("DB_CONN_HEALTH_CHECKS", False),
    )
}
_POSTGRES = DATABASES["default"]["ENGINE"].endswith("postgresql")
if _POSTGRES:
    # Django's backend with a pool that checks idle connections and reconnects quickly
    # (opencompany/core/postgresql/base.py).
    DATABASES["default"]["ENGINE"] = "opencompany.core.postgresql"
# On PostgreSQL a process holds its connections in one pool of at most DB_POOL_MAX_SIZE, whatever its
# thread count: each request, websocket call and run step takes one and gives it back (CONN_MAX_AGE 0),
# and a caller that waits DB_POOL_TIMEOUT_S for one is answered 503 (docs/operations.md). The pooled
# sessions keep their prepared hot statements (opencompany/core/db.py) from one checkout to the next.
DB_POOL = _POSTGRES and _env_bool("DB_POOL", True)
if DB_POOL:
    DATABASES["default"]["CONN_MAX_AGE"] = 0
    DATABASES["default"].setdefault("OPTIONS", {})["pool"] = {
        "min_size": _env_int("DB_POOL_MIN_SIZE", 2),
        "max_size": _env_int("DB_POOL_MAX_SIZE", 8),
        "timeout": float(os.environ.get("DB_POOL_TIMEOUT_S") or 5),
        "name": "default",
    }
else:
    # Without the pool (DB_POOL=0, or SQLite), connections are per thread and kept DB_CONN_MAX_AGE
    # seconds: Channels closes a connection that is not kept after every websocket call.
    DATABASES["default"]["CONN_MAX_AGE"] = _env_int("DB_CONN_MAX_AGE", 60 if _POSTGRES else 0)
if DATABASES["default"]["ENGINE"] == "django.db.backends.sqlite3":
    # IMMEDIATE: writers take the lock at BEGIN, so two writers serialize instead of failing
    # late with "database is locked" on upgrade; WAL lets readers proceed during a write.
    DATABASES["default"]["OPTIONS"] = {
        "transaction_mode": "IMMEDIATE",
        "timeout": 20,
        "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;",
    }
    # One file per test process: parallel runs (and their WAL files) never share a database.
    DATABASES["default"]["TEST"] = {
        "NAME": os.environ.get("OPENCOMPANY_TEST_DB") or str(BASE_DIR / f".test-db-{os.getpid()}.sqlite3")
    }
if os.environ.get("OPENCOMPANY_TEST_DB") and DATABASES["default"]["ENGINE"].endswith("postgresql"):
    DATABASES["default"]["TEST"] = {"NAME": os.environ["OPENCOMPANY_TEST_DB"]}
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

# --- channels -------------------------------------------------------------------------------
REDIS_URL = os.environ.get("REDIS_URL", "")
if REDIS_URL:
    CHANNEL_LAYERS = {
        "default": {
            # channels_redis's pub/sub layer (events are fire-and-forget: no per-channel lists to keep),
            # with batch publishing for the per-process event queues (opencompany/core/events.py).
            "BACKEND": "opencompany.core.layers.BatchPubSubChannelLayer",
            "CONFIG": {"hosts": [REDIS_URL], "prefix": os.environ.get("REDIS_PREFIX", "oc")},
        }
    }
else:
    CHANNEL_LAYERS = {"default": {"BACKEND": "channels.layers.InMemoryChannelLayer"}}

# --- tasks ----------------------------------------------------------------------------------
TASKS = {
    "default": {
        "BACKEND": os.environ.get("OPENCOMPANY_TASKS_BACKEND", "django_tasks_db.DatabaseBackend"),
    }
}

# --- auth, i18n, static ---------------------------------------------------------------------
AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
    # Not a check: its password_changed hook revokes the owner's API tokens and closes their websockets.
    {"NAME": "opencompany.core.tokens.RevokeCredentialsOnPasswordChange"},
]
LOGIN_URL = "/accounts/login/"
LOGIN_REDIRECT_URL = "/"
LOGOUT_REDIRECT_URL = "/accounts/login/"

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True

STATIC_URL = "/static/"
STATIC_ROOT = BASE_DIR / "staticfiles"
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {"BACKEND": "whitenoise.storage.CompressedStaticFilesStorage"},
}
WHITENOISE_USE_FINDERS = True
WHITENOISE_AUTOREFRESH = DEBUG

# --- security headers -----------------------------------------------------------------------
from django.utils.csp import CSP  # noqa: E402

SECURE_CSP = {
    "default-src": [CSP.SELF],
    "script-src": [CSP.SELF],
    "style-src": [CSP.SELF],
    "img-src": [CSP.SELF, "data:"],
    "connect-src": [CSP.SELF],
    "frame-ancestors": [CSP.NONE],
    "base-uri": [CSP.SELF],
    "form-action": [CSP.SELF],
}
SESSION_COOKIE_HTTPONLY = True
CSRF_COOKIE_HTTPONLY = False
X_FRAME_OPTIONS = "DENY"
SECURE_CONTENT_TYPE_NOSNIFF = True
# Production (DEBUG=0) sends cookies over HTTPS only and asks browsers to keep to HTTPS for a year; behind a
# TLS-terminating proxy, SECURE_PROXY_SSL_HEADER ("HTTP_X_FORWARDED_PROTO,https") says how it marks HTTPS.
SECURE_COOKIES = _env_bool("SECURE_COOKIES", not DEBUG)
SESSION_COOKIE_SECURE = SECURE_COOKIES
CSRF_COOKIE_SECURE = SECURE_COOKIES
SECURE_HSTS_SECONDS = _env_int("SECURE_HSTS_SECONDS", 0 if DEBUG else 31_536_000)
SECURE_HSTS_INCLUDE_SUBDOMAINS = _env_bool("SECURE_HSTS_INCLUDE_SUBDOMAINS", False)
SECURE_HSTS_PRELOAD = _env_bool("SECURE_HSTS_PRELOAD", False)
SECURE_SSL_REDIRECT = _env_bool("SECURE_SSL_REDIRECT", False)
_proxy_ssl_header = [p.strip() for p in os.environ.get("SECURE_PROXY_SSL_HEADER", "").split(",") if p.strip()]
if _proxy_ssl_header and len(_proxy_ssl_header) != 2:
    raise ImproperlyConfigured(
        'SECURE_PROXY_SSL_HEADER is "HEADER,value", e.g. "HTTP_X_FORWARDED_PROTO,https".'
    )
SECURE_PROXY_SSL_HEADER = (_proxy_ssl_header[0], _proxy_ssl_header[1]) if _proxy_ssl_header else None

# --- REST framework -------------------------------------------------------------------------
REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": [
        "opencompany.core.tokens.ExpiringTokenAuthentication",
        "rest_framework.authentication.SessionAuthentication",
    ],
    "DEFAULT_PERMISSION_CLASSES": ["rest_framework.permissions.IsAuthenticated"],
    "DEFAULT_RENDERER_CLASSES": ["rest_framework.renderers.JSONRenderer"],
    "DEFAULT_PARSER_CLASSES": ["opencompany.core.api.GatedJSONParser"],
    "EXCEPTION_HANDLER": "opencompany.core.api.exception_handler",
    "DEFAULT_SCHEMA_CLASS": "opencompany.core.openapi.ErrorsAutoSchema",
    "DEFAULT_THROTTLE_RATES": {
        "chat_send": os.environ.get("OPENCOMPANY_THROTTLE_CHAT_SEND", "120/min"),
        "memory_write": os.environ.get("OPENCOMPANY_THROTTLE_MEMORY_WRITE", "600/min"),
        "auth_token": os.environ.get("OPENCOMPANY_THROTTLE_AUTH_TOKEN", "30/min"),
    },
    "UNAUTHENTICATED_USER": "django.contrib.auth.models.AnonymousUser",
    # Throttles key on REMOTE_ADDR unless proxies in front of the app append to X-Forwarded-For.
    "NUM_PROXIES": _env_int("OPENCOMPANY_NUM_PROXIES", 0),
}
REST_KNOX = {"AUTH_HEADER_PREFIX": "Token", "AUTO_REFRESH": False}
SPECTACULAR_SETTINGS = {
    "TITLE": "OpenCompany Context & Memory API",
    "DESCRIPTION": "Workflows, agent Context, Memory and owner chat.",
    "VERSION": "1.0.0",
    "SERVE_INCLUDE_SCHEMA": False,
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    "REDOC_DIST": "SIDECAR",
    "COMPONENT_SPLIT_REQUEST": True,
    # PATCH bodies are validated whole (no view uses `partial=True`): the schema keeps their required fields.
    "COMPONENT_SPLIT_PATCH": False,
}

CACHES = {"default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"}}

# --- logging: ids and counts only, never content --------------------------------------------
# Database errors are logged by class, code and table only (their messages quote the refused data). Django's
# own loggers write through the root handler, so the filter sees them too.
LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "filters": {"database_errors": {"()": "opencompany.core.logs.DatabaseErrorFilter"}},
    "formatters": {"plain": {"format": "%(asctime)s %(levelname)s %(name)s %(message)s"}},
    "handlers": {
        "console": {"class": "logging.StreamHandler", "formatter": "plain", "filters": ["database_errors"]}
    },
    "root": {"handlers": ["console"], "level": os.environ.get("LOG_LEVEL", "INFO")},
    "loggers": {
        "django": {"handlers": [], "level": "INFO", "propagate": True},
        "django.db.backends": {"level": "WARNING"},
        # The pool logs every failed reconnection attempt (several a second during an outage); the
        # outage itself is logged once by whoever waits for it (opencompany/core/retry.py, /healthz).
        "psycopg.pool": {"level": "ERROR"},
    },
}

# --- OpenCompany limits and switches (read at call time through django.conf.settings) -------
# Sign-in: API token lifetime; the client address (how many proxies append to X-Forwarded-For; 0 trusts
# none); failed sign-ins allowed per address and per username before a lockout that doubles per failure.
OPENCOMPANY_TOKEN_TTL_S = _env_int("OPENCOMPANY_TOKEN_TTL_S", 7 * 24 * 3600)
OPENCOMPANY_NUM_PROXIES = _env_int("OPENCOMPANY_NUM_PROXIES", 0)
OPENCOMPANY_LOGIN_FAILURES_PER_ADDRESS = _env_int("OPENCOMPANY_LOGIN_FAILURES_PER_ADDRESS", 20)
OPENCOMPANY_LOGIN_FAILURES_PER_USERNAME = _env_int("OPENCOMPANY_LOGIN_FAILURES_PER_USERNAME", 5)
OPENCOMPANY_LOGIN_LOCKOUT_S = _env_int("OPENCOMPANY_LOGIN_LOCKOUT_S", 60)
OPENCOMPANY_LOGIN_LOCKOUT_MAX_S = _env_int("OPENCOMPANY_LOGIN_LOCKOUT_MAX_S", 3600)
OPENCOMPANY_LOGIN_WINDOW_S = _env_int("OPENCOMPANY_LOGIN_WINDOW_S", 900)
# Password checks a process runs at once (each costs a core for a while by design), and how long a
# sign-in waits for one before it is answered 503.
OPENCOMPANY_LOGIN_HASH_CONCURRENCY = _env_int("OPENCOMPANY_LOGIN_HASH_CONCURRENCY", 1)
OPENCOMPANY_LOGIN_HASH_WAIT_S = float(os.environ.get("OPENCOMPANY_LOGIN_HASH_WAIT_S") or 5)
OPENCOMPANY_MAX_BODY_BYTES = _env_int("OPENCOMPANY_MAX_BODY_BYTES", 2 * 1024 * 1024)
# The server closes a connection whose request head is not complete this long after it opened (or after
# the previous response), or whose body is not complete this long after its head (opencompany/server.py).
OPENCOMPANY_HTTP_HEAD_TIMEOUT_S = _env_int("OPENCOMPANY_HTTP_HEAD_TIMEOUT_S", 10)
OPENCOMPANY_HTTP_BODY_TIMEOUT_S = _env_int("OPENCOMPANY_HTTP_BODY_TIMEOUT_S", 60)
OPENCOMPANY_MAX_GRAPH_NODES = _env_int("OPENCOMPANY_MAX_GRAPH_NODES", 5_000)
OPENCOMPANY_MAX_GRAPH_EDGES = _env_int("OPENCOMPANY_MAX_GRAPH_EDGES", 20_000)
OPENCOMPANY_CONTEXT_ARCHIVE_DAYS = _env_int("OPENCOMPANY_CONTEXT_ARCHIVE_DAYS", 30)
OPENCOMPANY_OUTBOX_DRAIN_INTERVAL_S = _env_int("OPENCOMPANY_OUTBOX_DRAIN_INTERVAL_S", 30)
OPENCOMPANY_NOTES_MAX_CHARS = _env_int("OPENCOMPANY_NOTES_MAX_CHARS", 4_000)
OPENCOMPANY_NOTES_MAX_ENTRIES = _env_int("OPENCOMPANY_NOTES_MAX_ENTRIES", 50)
OPENCOMPANY_NOTES_ENTRY_MAX_CHARS = _env_int("OPENCOMPANY_NOTES_ENTRY_MAX_CHARS", 500)
OPENCOMPANY_MEMORY_MAX_ITEMS = _env_int("OPENCOMPANY_MEMORY_MAX_ITEMS", 10_000)
OPENCOMPANY_MEMORY_RECEIPT_DAYS = _env_int("OPENCOMPANY_MEMORY_RECEIPT_DAYS", 30)
OPENCOMPANY_EMBEDDER = os.environ.get("OPENCOMPANY_EMBEDDER", "none")
OPENCOMPANY_RUN_EXECUTOR = os.environ.get("OPENCOMPANY_RUN_EXECUTOR", "inprocess")
OPENCOMPANY_RUN_TIMEOUT_S = _env_int("OPENCOMPANY_RUN_TIMEOUT_S", 86_400)
# How long a run's step waits for an unreachable database before the run ends interrupted (its last
# message and its end wait until the database is back: only the database frees the lane).
OPENCOMPANY_RUN_COMMIT_RETRY_S = float(os.environ.get("OPENCOMPANY_RUN_COMMIT_RETRY_S") or 30)
# On SIGTERM a server lets its live answers finish for this long, then ends the rest interrupted.
OPENCOMPANY_SHUTDOWN_GRACE_S = float(os.environ.get("OPENCOMPANY_SHUTDOWN_GRACE_S") or 20)
# Database threads of the in-process run loop (the serving loop has its own), each with its kept
# connection: with one, every run of the process waited behind any run's slow or lock-waiting statement;
# each more lets more runs take CPU from the serving loop (docs/benchmarks.md, chat load).
OPENCOMPANY_RUN_DB_THREADS = _env_int("OPENCOMPANY_RUN_DB_THREADS", 2)
# The run loop's database calls take turns (one at a time), and a call that waited this long for its
# turn runs beside the others; 0: they run side by side (docs/decisions.md, run loop).
OPENCOMPANY_RUN_DB_TURN_WAIT_MS = _env_int("OPENCOMPANY_RUN_DB_TURN_WAIT_MS", 20)
# How much lower the run loop's threads run than the serving loop (a nice increment; 0 keeps them equal).
OPENCOMPANY_RUN_THREAD_NICE = _env_int("OPENCOMPANY_RUN_THREAD_NICE", 10)
# Keep the hand-written hot statements (append, send) prepared per connection; turn off behind a
# pooler that cannot keep prepared statements (opencompany/core/db.py).
OPENCOMPANY_DB_PREPARE = _env_bool("OPENCOMPANY_DB_PREPARE", True)
OPENCOMPANY_OFFLINE_PACING_MS = _env_int("OPENCOMPANY_OFFLINE_PACING_MS", 25)
OPENCOMPANY_DEFAULT_PROVIDER = os.environ.get("OPENCOMPANY_DEFAULT_PROVIDER", "offline")
# The runtimes an agent can answer through, one entry each (opencompany/llm/registry.py): a provider's
# name, configuration settings, context adapter and models are declared in its entry's module.
OPENCOMPANY_PROVIDERS = [
    "opencompany.llm.builtin.OFFLINE",
    "opencompany.llm.builtin.OPENAI",
    "opencompany.llm.builtin.OPENAI_COMPATIBLE",
    "opencompany.llm.builtin.ANTHROPIC",
    "opencompany.llm.builtin.GEMINI",
    "opencompany.llm.builtin.VERTEX",
    "opencompany.llm.builtin.RLM",
    "opencompany.llm.builtin.CLAUDE_CODE",
    "opencompany.llm.builtin.CODEX_CLI",
]
# Configured prices for the usage ledger's cost: model → USD per million input, cached input and output
# tokens, as JSON. A model not listed has no cost (docs/conversations.md).
OPENCOMPANY_MODEL_PRICES = {
    "offline-demo": {"input": "0", "cached_input": "0", "output": "0"},
    **json.loads(os.environ.get("OPENCOMPANY_MODEL_PRICES") or "{}"),
}
OPENAI_API_KEY = os.environ.get("OPENAI_API_KEY", "")
OPENAI_BASE_URL = os.environ.get("OPENAI_BASE_URL", "")
ANTHROPIC_API_KEY = os.environ.get("ANTHROPIC_API_KEY", "")
ANTHROPIC_BASE_URL = os.environ.get("ANTHROPIC_BASE_URL", "")
GEMINI_API_KEY = os.environ.get("GEMINI_API_KEY", "")
GEMINI_BASE_URL = os.environ.get("GEMINI_BASE_URL", "")
# Gemini on Vertex AI: a project, a location and a Google credentials file (docs/providers.md).
VERTEX_PROJECT = os.environ.get("VERTEX_PROJECT", "")
VERTEX_LOCATION = os.environ.get("VERTEX_LOCATION", "")
VERTEX_CREDENTIALS_FILE = os.environ.get("VERTEX_CREDENTIALS_FILE") or os.environ.get(
    "GOOGLE_APPLICATION_CREDENTIALS", ""
)
VERTEX_BASE_URL = os.environ.get("VERTEX_BASE_URL", "")
# The recursive language model runtime's OpenAI-compatible server (docs/providers.md).
RLM_BASE_URL = os.environ.get("RLM_BASE_URL", "")
RLM_API_KEY = os.environ.get("RLM_API_KEY", "")
# An OpenAI-compatible server (Ollama, vLLM, LM Studio): its capabilities are probed once per model
# and the answer kept for OPENCOMPANY_PROVIDER_PROBE_TTL_S (docs/providers.md).
OPENAI_COMPATIBLE_BASE_URL = os.environ.get("OPENAI_COMPATIBLE_BASE_URL", "")
OPENAI_COMPATIBLE_API_KEY = os.environ.get("OPENAI_COMPATIBLE_API_KEY", "")
OPENCOMPANY_PROVIDER_PROBE_TTL_S = _env_int("OPENCOMPANY_PROVIDER_PROBE_TTL_S", 86_400)
# Agent runtimes that are programs (Claude Code, Codex CLI; docs/providers.md): where bin/install-runtimes
# put them, and where each agent's program keeps its own state and working directory (shared by every
# process that runs such agents, so a bound session resumes wherever the next firing runs).
OPENCOMPANY_RUNTIMES_BIN = os.environ.get(
    "OPENCOMPANY_RUNTIMES_BIN", str(BASE_DIR / "runtimes" / "node_modules" / ".bin")
)
OPENCOMPANY_RUNTIME_HOME = os.environ.get("OPENCOMPANY_RUNTIME_HOME", str(BASE_DIR / "var" / "runtimes"))
OPENCOMPANY_RUNTIME_TIMEOUT_S = _env_int("OPENCOMPANY_RUNTIME_TIMEOUT_S", 3600)
DATA_UPLOAD_MAX_MEMORY_SIZE = OPENCOMPANY_MAX_BODY_BYTES
OPENCOMPANY_RUN_HEARTBEAT_TIMEOUT_S = _env_int("OPENCOMPANY_RUN_HEARTBEAT_TIMEOUT_S", 30)
OPENCOMPANY_RUN_HEARTBEAT_S = float(os.environ.get("OPENCOMPANY_RUN_HEARTBEAT_S") or 5)
# Every server and task worker runs the chat watchdog loop (one sweep at a time cluster-wide).
OPENCOMPANY_WATCHDOG_IN_PROCESS = _env_bool("OPENCOMPANY_WATCHDOG_IN_PROCESS", True)
OPENCOMPANY_WATCHDOG_INTERVAL_S = float(os.environ.get("OPENCOMPANY_WATCHDOG_INTERVAL_S") or 10)
# Per-socket websocket rate limit, charged before a frame is parsed (junk frames included): a token bucket
# of frames refilled at FRAMES_PER_S, holding FRAME_BURST, and one of bytes refilled at BYTES_PER_S,
# holding BYTE_BURST.
OPENCOMPANY_WS_FRAMES_PER_S = float(os.environ.get("OPENCOMPANY_WS_FRAMES_PER_S") or 10)
OPENCOMPANY_WS_FRAME_BURST = float(os.environ.get("OPENCOMPANY_WS_FRAME_BURST") or 30)
OPENCOMPANY_WS_BYTES_PER_S = float(os.environ.get("OPENCOMPANY_WS_BYTES_PER_S") or 64 * 1024)
OPENCOMPANY_WS_BYTE_BURST = float(os.environ.get("OPENCOMPANY_WS_BYTE_BURST") or 256 * 1024)
