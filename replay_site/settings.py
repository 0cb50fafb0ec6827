"""The only settings file: every deploy value comes from the environment (REPLAY_*, DATABASE_URL).

Each variable is read once, through a helper that raises ImproperlyConfigured on a bad value,
so a typo in a deployment stops the process at start-up instead of misbehaving later.
"""

from __future__ import annotations

import importlib.util
import ipaddress
import math
import os
import warnings
from datetime import timedelta
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, unquote, urlsplit

from django.core.exceptions import ImproperlyConfigured
from django.utils.csp import CSP

from replay_site.files import private_file, private_folder

BASE_DIR = Path(__file__).resolve().parent.parent


def env_str(name: str, default: str) -> str:
    return os.environ.get(name, default)


def env_bool(name: str, default: bool) -> bool:
    raw = os.environ.get(name)
    if raw is None or raw == "":
        return default
    lowered = raw.strip().lower()
    if lowered in {"1", "true", "yes", "on"}:
        return True
    if lowered in {"0", "false", "no", "off"}:
        return False
    raise ImproperlyConfigured(f"{name} must be a boolean (1/0, true/false), got {raw!r}")


def env_number(name: str, default: float | None, *, minimum: float = 0, maximum: float | None = None) -> float | None:
    raw = os.environ.get(name)
    if raw is None or raw.strip() == "":
        return default
    try:
        value = float(raw)
    except ValueError:
        raise ImproperlyConfigured(f"{name} must be a number, got {raw!r}") from None
    if not math.isfinite(value):  # "inf", "nan": a traceback later, or a limit of nothing
        raise ImproperlyConfigured(f"{name} must be a finite number, got {raw!r}")
    if value < minimum:
        raise ImproperlyConfigured(f"{name} must be at least {minimum}, got {raw!r}")
    # A time past what the clock can add (1e300 seconds) passed here and stopped a stream or a
    # clean-up later with an OverflowError.
    if maximum is not None and value > maximum:
        said = f"{int(maximum):,}" if maximum == int(maximum) else f"{maximum:g}"
        raise ImproperlyConfigured(f"{name} must be at most {said}, got {raw!r}")
    return value


_DAY = 24 * 3600
_CENTURY_DAYS = 36_500


def env_whole(name: str, default: int | None, *, minimum: int = 0, maximum: int | None = None) -> int | None:
    """A whole number (a count of processes, failures, sessions, bytes, seconds): "2.9" stops
    start-up rather than run with 2."""
    value = env_number(name, default, minimum=minimum, maximum=maximum)
    if value is None:
        return None
    if value != int(value):
        raise ImproperlyConfigured(f"{name} must be a whole number, got {os.environ.get(name)!r}")
    return int(value)


def env_choice(name: str, default: str, choices: tuple[str, ...]) -> str:
    raw = os.environ.get(name)
    if raw is None or raw.strip() == "":
        return default
    value = raw.strip().upper()
    if value not in choices:
        raise ImproperlyConfigured(f"{name} must be one of {', '.join(choices)}, got {raw!r}")
    return value


def env_list(name: str, default: list[str]) -> list[str]:
    raw = os.environ.get(name)
    if raw is None:
        return default
    return [item.strip() for item in raw.split(",") if item.strip()]


def env_networks(name: str, default: list[str]) -> list[str]:
    """A list of IP addresses or networks (`10.0.0.0/8`), each checked: the proxy-header wrapper
    keeps an entry it cannot read as a literal that never matches (every client would then share
    the proxy's address, in the audit log and the sign-in lockouts), and `*` would trust any
    client's own X-Forwarded-For."""
    values = env_list(name, default)
    for value in values:
        try:
            # As the proxy-header wrapper (granian) reads them: a network only as written
            # strictly (10.0.0.0/8, never 10.0.0.1/8), an address otherwise.
            ipaddress.ip_network(value) if "/" in value else ipaddress.ip_address(value)
        except ValueError:
            raise ImproperlyConfigured(
                f"{name}: {value!r} is not an IP address or network (such as 10.0.0.0/8); "
                "list the proxies' own addresses, never *"
            ) from None
    if not values:
        raise ImproperlyConfigured(f"{name} is empty: list the proxies' addresses, or leave it unset")
    return values


def postgres_options(given: dict[str, str]) -> dict[str, Any]:
    """psycopg's options, the URL's query string (sslmode=...) over Replay's defaults.

    Values bound by the server, and a statement the connection has run 5 times prepared, rather
    than Django's default (every value quoted into the SQL text in Python, every statement parsed
    again): with 20 viewers PostgreSQL served more requests a second in each of seven alternating
    runs, about 14 % more (bench/load_bench.py; docs/benchmarks.md). A prepared statement gets
    PostgreSQL's own choice of plan (plan_cache_mode=auto): one plan for every execution once it
    is no dearer than planning each. Forcing a plan for each execution's values instead also
    re-planned each foreign-key check, a statement of its own for every event written (4.4 s of
    the server's time in bench/otlp_bench.py); OTLP ingest got about a third faster, viewers no
    slower. A look-up by a long list beside another index (an export's 2,000 trace ids of a
    project, a session's events by seqs) is what such a plan can get badly wrong: those are sent
    unprepared (sessions_app/models/planning.py).
    A statement binds at most 65,535 values: a list that can grow past that (an import's
    sessions, an export's traces) is read a chunk at a time, as SQLite's usual bound of 32,766
    already required. Behind a pooler in transaction mode (PgBouncer < 1.21, or without
    max_prepared_statements) `?prepare_threshold=none` turns preparing off;
    `?server_side_binding=false` is Django's default."""
    options: dict[str, Any] = {"server_side_binding": True, "prepare_threshold": 5}
    for name, value in given.items():
        if name == "server_side_binding":
            options[name] = value.strip().lower() in {"1", "true", "yes", "on"}
        elif name == "prepare_threshold":
            if value.strip().lower() in {"", "none", "off"}:
                options[name] = None
            elif value.strip().isdigit():
                options[name] = int(value)
            else:
                raise ImproperlyConfigured(
                    f"DATABASE_URL: prepare_threshold must be a whole number or none, got {value!r}"
                )
        else:
            options[name] = value
    return options


def database_from_url(url: str) -> dict:
    """Turn DATABASE_URL (postgres://user:pw@host:port/name or sqlite:////abs/path) into DATABASES['default']."""
    try:
        parts = urlsplit(url)
        port = parts.port  # parsed here: "host:notaport" or ":99999" raise ValueError
    except ValueError as error:
        raise ImproperlyConfigured(f"DATABASE_URL: {error}") from None
    options: dict[str, Any] = dict(parse_qsl(parts.query))
    if parts.scheme in {"postgres", "postgresql", "pgsql"}:
        options = postgres_options(options)
        return {
            "ENGINE": "django.db.backends.postgresql",
            "NAME": unquote(parts.path.lstrip("/")),
            "USER": unquote(parts.username or ""),
            "PASSWORD": unquote(parts.password or ""),
            "HOST": parts.hostname or "",
            "PORT": str(port or ""),
            "CONN_MAX_AGE": 60,
            "CONN_HEALTH_CHECKS": True,
            "OPTIONS": options,
        }
    if parts.scheme == "sqlite":
        path = unquote(parts.path)
        # sqlite:////abs/path.sqlite3: "sqlite://", then an absolute path. Anything else named no
        # file, or one some read as relative ("sqlite:///rel.db", SQLAlchemy's relative form,
        # was taken as /rel.db; "sqlite://rel.sqlite3" silently as the default file), or had
        # options no SQLite URL takes: start-up stops.
        if parts.netloc or parts.query or not path.startswith("//") or path.strip("/") == "":
            raise ImproperlyConfigured(
                f"DATABASE_URL: a SQLite URL names its file by an absolute path, sqlite:////abs/path.sqlite3; got {url!r}"
            )
        return sqlite_database(Path(path[1:]))
    raise ImproperlyConfigured(f"DATABASE_URL must start with postgres:// or sqlite://, got scheme {parts.scheme!r}")


def sqlite_database(path: Path) -> dict:
    # SQLite cannot create the folder of its file (the default lives under var/), and would
    # create the file with the process's umask (usually readable by everyone).
    if str(path) != ":memory:":
        private_file(path)
    return {
        "ENGINE": "django.db.backends.sqlite3",
        "NAME": path,
        # Each web thread keeps its connection between requests: opening one (with the PRAGMAs
        # below and SQLite reading the schema again) was ~1.5 ms of every request's CPU
        # (docs/benchmarks.md, issue 20). Between requests it holds no transaction.
        "CONN_MAX_AGE": 60,
        "OPTIONS": {
            # WAL lets the web server read while the worker writes an import; the busy
            # timeout makes a writer wait for the other instead of failing at once. 16 KiB
            # pages (taken only by a new, empty database) hold a dozen ~1 KiB event rows each,
            # which makes bulk imports markedly faster than the default 4 KiB.
            "init_command": "PRAGMA page_size=16384; PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;",
            "transaction_mode": "IMMEDIATE",
            "timeout": 30,
        },
    }


DEBUG = env_bool("REPLAY_DEBUG", False)
# Demo mode (`make run` sets it): the development secret key below is allowed to serve.
DEMO = env_bool("REPLAY_DEMO", False)
SECRET_KEY = env_str("REPLAY_SECRET_KEY", "")
DEVELOPMENT_SECRET_KEY = not SECRET_KEY
if DEVELOPMENT_SECRET_KEY:
    # A development key for `make run` and the tests. The server's entry points
    # (replay_site/asgi.py, wsgi.py) refuse to serve with it outside demo mode.
    SECRET_KEY = "django-insecure-replay-development-key-change-me"

ALLOWED_HOSTS = env_list("REPLAY_ALLOWED_HOSTS", ["127.0.0.1", "localhost", "testserver"])
if not ALLOWED_HOSTS:
    # Django would answer every request 400 (DisallowedHost), which looks like a broken server.
    raise ImproperlyConfigured("REPLAY_ALLOWED_HOSTS is empty: name the host names the server answers to")
CSRF_TRUSTED_ORIGINS = env_list("REPLAY_CSRF_TRUSTED_ORIGINS", [])

# The uploaded originals: readable by their owner only (and so is var/, made with it by default).
DATA_DIR = Path(env_str("REPLAY_DATA_DIR", str(BASE_DIR / "var" / "data")))
try:
    private_folder(DATA_DIR)
except OSError as exc:  # /proc/x: a traceback at start-up
    raise ImproperlyConfigured(f"REPLAY_DATA_DIR: cannot make the folder {DATA_DIR}: {exc.strerror}") from None
if not DATA_DIR.is_dir():  # a file: every upload a 500 later
    raise ImproperlyConfigured(f"REPLAY_DATA_DIR: {DATA_DIR} is not a folder")
VAR_DIR = BASE_DIR / "var"
# The Ed25519 key that signs evidence bundles: a file outside the database, made (0600) on first
# use (sessions_app/signing.py, docs/bundles.md).
SIGNING_KEY_FILE = Path(env_str("REPLAY_SIGNING_KEY_FILE", str(DATA_DIR / "signing-key.pem")))
# `manage.py mcp`'s API key, kept off its command line (docs/mcp.md); read here, as every setting.
MCP_KEY = env_str("REPLAY_MCP_KEY", "")

INSTALLED_APPS = [
    "replay_site.admin_site.ReplayAdminConfig",  # django.contrib.admin, for superusers only
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "django_htmx",
    "django_q",
    "axes",
    "sessions_app",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    # Outside every middleware that may answer by itself (a bad Host's 400 from CommonMiddleware,
    # an oversized body's 413), so that those answers carry the frame and content policies too.
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "django.middleware.csp.ContentSecurityPolicyMiddleware",
    # Static files, compressed, from the production server itself (cached a minute: their names
    # carry no content hash, so a longer lifetime would keep an old file after an upgrade).
    "whitenoise.middleware.WhiteNoiseMiddleware",
    # Below whitenoise, so static files keep its caching and everything else is no-store.
    "replay_site.middleware.no_store",
    # Before anything reads a body (the CSRF check reads a page's form): a declared size past
    # the upload limit is a 413 without reading it.
    "replay_site.middleware.refuse_oversized_bodies",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    # A busy database is a 503 with Retry-After, a number beyond 64 bits a 400 (pages; the API
    # answers both in its own handlers).
    "replay_site.middleware.ClientAndBusyErrors",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django_htmx.middleware.HtmxMiddleware",
    # Before any view; below CSP, which then covers the refusal page it answers with.
    "replay_site.middleware.refuse_nul_in_query",
    # Below CSP, which then covers the page it makes: a page's 405 as a page, not an empty body.
    "replay_site.middleware.method_not_allowed_page",
    # Last, as django-axes asks: it turns a refused sign-in into the lockout page.
    "axes.middleware.AxesMiddleware",
]

ROOT_URLCONF = "replay_site.urls"
WSGI_APPLICATION = "replay_site.wsgi.application"
ASGI_APPLICATION = "replay_site.asgi.application"

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
                "django.template.context_processors.csp",
            ],
        },
    },
]

_database_url = os.environ.get("DATABASE_URL", "").strip()
DATABASES = {
    "default": database_from_url(_database_url)
    if _database_url
    else sqlite_database(BASE_DIR / "var" / "replay.sqlite3")
}
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
    {"NAME": "django.contrib.auth.password_validation.NumericPasswordValidator"},
]
# django-axes' backend refuses a sign-in before any password is checked when its username and
# address have failed too often (ours only marks the refused request for the audit log,
# sessions_app/signin.py); the model backend then checks the password.
AUTHENTICATION_BACKENDS = [
    "sessions_app.signin.LockoutBackend",
    "django.contrib.auth.backends.ModelBackend",
]
# Per username *and* address: a stranger failing with someone's name does not lock that person
# out everywhere, and one address trying many names is limited for each of them.
AXES_LOCKOUT_PARAMETERS = [["username", "ip_address"]]
AXES_FAILURE_LIMIT = env_whole("REPLAY_LOGIN_FAILURE_LIMIT", 5, minimum=1)
AXES_COOLOFF_TIME = timedelta(minutes=env_number("REPLAY_LOGIN_COOLOFF_MINUTES", 15, minimum=1,
                                                  maximum=_CENTURY_DAYS * 24 * 60))  # fmt: skip
AXES_RESET_ON_SUCCESS = True
# A refused attempt does not restart the cool-off, so the time the lockout page names holds.
AXES_RESET_COOL_OFF_ON_FAILURE_DURING_LOCKOUT = False
# The address is the one the audit log records (REMOTE_ADDR, set by a trusted proxy).
AXES_CLIENT_IP_CALLABLE = "sessions_app.audit.client_ip"
AXES_LOCKOUT_CALLABLE = "sessions_app.signin.locked_out"
# Sign-ins are in the audit log already (auth.login); axes keeps only the failures it counts.
AXES_DISABLE_ACCESS_LOG = True
LOGIN_URL = "login"
LOGIN_REDIRECT_URL = "sessions:list"
LOGOUT_REDIRECT_URL = "login"

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = False
USE_TZ = True

STATIC_URL = "static/"
STATICFILES_DIRS = [
    BASE_DIR / "static",
    # plotly.min.js (4.8 MB) is served from the pinned plotly package instead of being committed:
    # {% static 'vendor/plotly/plotly.min.js' %}; see static/vendor/README.md.
    ("vendor/plotly", Path(importlib.util.find_spec("plotly").origin).parent / "package_data"),
]
STATIC_ROOT = Path(env_str("REPLAY_STATIC_ROOT", str(BASE_DIR / "var" / "static")))
# `collectstatic` (make run does it) fills STATIC_ROOT with each file and its gzip'd copy, which
# whitenoise serves; without it (tests, a checkout) whitenoise finds them where they are.
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {"BACKEND": "whitenoise.storage.CompressedStaticFilesStorage"},
}
WHITENOISE_USE_FINDERS = not (STATIC_ROOT / "css").is_dir()
if WHITENOISE_USE_FINDERS:  # whitenoise would warn that STATIC_ROOT was never collected
    warnings.filterwarnings("ignore", message="No directory at: ")

# The production server (`manage.py serve`, docs/deployment.md): web processes, threads each
# serves pages with, and job workers. Two threads a process, not four: a page is CPU-bound
# Python, so more threads only share one GIL (bench/load_bench.py, 20 viewers, alternating runs:
# step p95 148 against 172 ms on SQLite, 266/304 against 309/322 ms on PostgreSQL).
# At most what `manage.py serve` takes (its default is this: argparse checks no default).
PROCESSES_MAX = 512
WEB_PROCESSES = env_whole("REPLAY_WEB_PROCESSES", 2, minimum=1, maximum=PROCESSES_MAX)
WEB_THREADS = env_whole("REPLAY_WEB_THREADS", 2, minimum=1)

# Uploads stream to disk, never to memory; the import job reads them from there.
FILE_UPLOAD_MAX_MEMORY_SIZE = 2 * 1024 * 1024
DATA_UPLOAD_MAX_MEMORY_SIZE = 64 * 1024 * 1024  # JSON bodies of the ingest API (5000 events)
MAX_UPLOAD_MB = env_number("REPLAY_MAX_UPLOAD_MB", 1024, minimum=1)
# The longest line (or record of a JSON document) an import reads: a longer one is a problem on
# its line, skipped without being held in memory (sessions_app/formats/__init__.py).
MAX_RECORD_BYTES = env_whole("REPLAY_MAX_RECORD_BYTES", 16 * 1024 * 1024, minimum=1024)
RETENTION_DAYS = env_number("REPLAY_RETENTION_DAYS", None, minimum=1, maximum=_CENTURY_DAYS)
# Originals of failed uploads, and of jobs whose sessions were all deleted, are deleted this many
# days later by the daily clean-up (sessions_app/originals.py); 0: at its next run.
ORIGINALS_GRACE_DAYS = env_number("REPLAY_ORIGINALS_GRACE_DAYS", 7, minimum=0, maximum=_CENTURY_DAYS)
# Each project's quotas unless its admins set its own (sessions_app/ingest/quotas.py): the bytes
# its uploads and live events may take, and its number of sessions; unset: no limit.
_quota_mb = env_number("REPLAY_QUOTA_STORED_MB", None, minimum=1)
QUOTA_STORED_BYTES = int(_quota_mb * 1024 * 1024) if _quota_mb else None
QUOTA_SESSIONS = env_whole("REPLAY_QUOTA_SESSIONS", None, minimum=1)
# The live tail (GET /api/sessions/{id}/tail): how often it polls for new events, and how long
# one stream may hold a server thread before the client reconnects (docs/ingest.md).
TAIL_POLL_SECONDS = env_number("REPLAY_TAIL_POLL_SECONDS", 0.5, minimum=0.05, maximum=3600)
TAIL_MAX_SECONDS = env_number("REPLAY_TAIL_MAX_SECONDS", 300, minimum=1, maximum=_DAY)
# OpenTelemetry ingest (POST /v1/traces, docs/formats.md): a trace's spans become events once
# its root span has arrived and no span came for this many seconds, or, when its root never
# comes (another service's, unsampled), after the second figure.
OTLP_SETTLE_SECONDS = env_number("REPLAY_OTLP_SETTLE_SECONDS", 10, maximum=_CENTURY_DAYS * _DAY)
OTLP_ORPHAN_SECONDS = env_number("REPLAY_OTLP_ORPHAN_SECONDS", 300, maximum=_CENTURY_DAYS * _DAY)
# The largest export request, gzip undone. Parsing holds up to ~30 times its size (a request of
# empty attributes: 15 MiB took 430 MiB), so it is far below the API's body limit; an exporter's
# batch of 512 GenAI spans is usually well under 1 MiB.
OTLP_MAX_BYTES = int(env_number("REPLAY_OTLP_MAX_MB", 8, minimum=1) * 1024 * 1024)

# Warning thresholds of the replay context (see docs/api.md, "Warnings").
WARN_STEP_COST_USD = env_number("REPLAY_WARN_STEP_COST_USD", 0.50)
WARN_LATENCY_MS = env_number("REPLAY_WARN_LATENCY_MS", 30_000)
WARN_REPEATED_FAILURES = env_whole("REPLAY_WARN_REPEATED_FAILURES", 3, minimum=2)

# Security: payloads are hostile. CSP forbids inline scripts and any origin but our own.
SECURE_CSP = {
    "default-src": [CSP.SELF],
    "script-src": [CSP.SELF],
    # plotly.js sets inline style attributes on the SVG it draws.
    "style-src": [CSP.SELF, CSP.UNSAFE_INLINE],
    "img-src": [CSP.SELF, "data:"],
    "connect-src": [CSP.SELF],
    "font-src": [CSP.SELF],
    "object-src": [CSP.NONE],
    "base-uri": [CSP.SELF],
    "frame-ancestors": [CSP.NONE],
    "form-action": [CSP.SELF],
}
# Django's database store, its per-request lookup read by SQL built once (sessions_app/login_sessions.py).
SESSION_ENGINE = "sessions_app.login_sessions"
SESSION_COOKIE_HTTPONLY = True
# No script reads the cookie (replay.js sends the token from the page's meta tag): out of reach of
# scripts, as the session cookie is.
CSRF_COOKIE_HTTPONLY = True
# The site's refusal (its #refusal keeps a panel and what was typed in it), not Django's page.
CSRF_FAILURE_VIEW = "replay_site.errors.csrf_failure"
# Off by default so `make run` works over plain http on 127.0.0.1; production turns it on
# (docs/deployment.md), which is what `check --deploy` asks for.
SESSION_COOKIE_SECURE = env_bool("REPLAY_SECURE_COOKIES", False)
CSRF_COOKIE_SECURE = SESSION_COOKIE_SECURE
SECURE_CONTENT_TYPE_NOSNIFF = True
X_FRAME_OPTIONS = "DENY"
SECURE_REFERRER_POLICY = "same-origin"
SECURE_SSL_REDIRECT = env_bool("REPLAY_SSL_REDIRECT", False)
SECURE_HSTS_SECONDS = env_whole("REPLAY_HSTS_SECONDS", 0)
SECURE_HSTS_INCLUDE_SUBDOMAINS = SECURE_HSTS_SECONDS > 0
# Preloading is hard to undo, so it is opt-in (docs/deployment.md).
SECURE_HSTS_PRELOAD = env_bool("REPLAY_HSTS_PRELOAD", False)
BEHIND_PROXY = env_bool("REPLAY_BEHIND_PROXY", False)
# The proxies whose X-Forwarded-For gives the client's address (replay_site/asgi.py): addresses or
# networks; the connection's own peer must be one of them, or the header is ignored.
TRUSTED_PROXIES = env_networks("REPLAY_TRUSTED_PROXIES", ["127.0.0.1", "::1"])
if BEHIND_PROXY:
    SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")

# django-q2: the ORM broker by default, so one machine needs nothing else.
JOB_TIMEOUT = env_whole("REPLAY_JOB_TIMEOUT", 3600, minimum=10)
Q_CLUSTER = {
    "name": "replay",
    "orm": "default",
    "workers": env_whole("REPLAY_Q_WORKERS", 1, minimum=1, maximum=PROCESSES_MAX),
    "timeout": JOB_TIMEOUT,
    # Delivered again only after the timeout has surely stopped it (a worker that died).
    "retry": JOB_TIMEOUT + 60,
    "max_attempts": 3,
    "catch_up": False,
    "poll": 0.5,
    # Never synchronous: jobs run in a worker, not inside the web request that queued them (the
    # tests call the job functions themselves).
    "sync": False,
    "label": "Jobs",
}

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "filters": {
        "no_client_error_tracebacks": {"()": "replay_site.log_filters.NoTracebackForClientErrors"},
        "no_share_tokens": {"()": "replay_site.log_filters.NoShareTokens"},
    },
    "handlers": {
        "console": {"class": "logging.StreamHandler", "filters": ["no_client_error_tracebacks", "no_share_tokens"]}
    },
    # On the loggers that write a request's path, so every handler an operator adds gets the
    # masked record (a CSRF refusal of a POST to a link names its path too); on the console's
    # handler as well, for any other logger that might.
    "loggers": {
        name: {"filters": ["no_share_tokens"]} for name in ("django.request", "django.server", "django.security.csrf")
    },
    "root": {
        "handlers": ["console"],
        "level": env_choice("REPLAY_LOG_LEVEL", "WARNING", ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")),
    },
}
