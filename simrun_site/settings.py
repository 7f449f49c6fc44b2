"""Settings of the simrun service, from the environment only.

Without any variable set, simrun runs embedded: SQLite, the store and a broker that needs no
server under ``SIMRUN_HOME`` (``./var``), and the local backend.
"""

from __future__ import annotations

import os
from datetime import timedelta
from pathlib import Path

import environ
from django.core.exceptions import ImproperlyConfigured

BASE_DIR = Path(__file__).resolve().parent.parent

env = environ.Env()


def _read(name: str, reader, default):  # type: ignore[no-untyped-def]
    """Read one variable; a malformed value is an error that names the variable."""
    try:
        return reader(name, default=default)
    except (ValueError, TypeError, ImproperlyConfigured) as error:
        raise ImproperlyConfigured(f"environment variable {name} is malformed: {error}") from None


def _bool(name: str, default: bool) -> bool:
    """A strict boolean: true/false, yes/no, on/off, 1/0; anything else is an error."""
    raw = env.str(name, default="").strip().lower()
    if not raw:
        return default
    if raw in {"true", "yes", "on", "1"}:
        return True
    if raw in {"false", "no", "off", "0"}:
        return False
    raise ImproperlyConfigured(f"environment variable {name} must be true or false, not {raw!r}")


def _positive(name: str, default: float) -> float:
    value: float = _read(name, env.float, default)
    if value <= 0:
        raise ImproperlyConfigured(f"environment variable {name} must be positive, not {value}")
    return value


DEBUG = _bool("DEBUG", False)
SECRET_KEY = _read("SECRET_KEY", env.str, "")
if not SECRET_KEY:
    if not DEBUG:
        raise ImproperlyConfigured(
            "SECRET_KEY is not set: set SECRET_KEY (or DEBUG=true for a development server)"
        )
    SECRET_KEY = "insecure-development-key-set-SECRET_KEY-in-production"
ALLOWED_HOSTS = _read("ALLOWED_HOSTS", env.list, ["localhost", "127.0.0.1", "[::1]"])
CSRF_TRUSTED_ORIGINS = _read("CSRF_TRUSTED_ORIGINS", env.list, [])
# SIMRUN_HTTPS=true: the service is reached over HTTPS only (behind a proxy that ends TLS and
# sets X-Forwarded-Proto): plain HTTP is redirected, browsers are told to use HTTPS for a year
# (HSTS, subdomains included) and cookies are never sent over plain HTTP. Off by default, as
# the embedded service listens on plain HTTP.
SIMRUN_HTTPS = _bool("SIMRUN_HTTPS", False)
if SIMRUN_HTTPS:
    SECURE_HSTS_SECONDS = 365 * 24 * 3600
    SECURE_HSTS_INCLUDE_SUBDOMAINS = True
    SECURE_SSL_REDIRECT = True
    SESSION_COOKIE_SECURE = True
    CSRF_COOKIE_SECURE = True
    SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
    # A scrape of /metrics comes straight to the service, past the proxy, over plain HTTP.
    SECURE_REDIRECT_EXEMPT = [r"^metrics$"]
    # Preloading binds the domain and its subdomains in browsers for months: its owner's call.
    SILENCED_SYSTEM_CHECKS = ["security.W021"]

SIMRUN_HOME = Path(_read("SIMRUN_HOME", env.str, str(BASE_DIR / "var"))).resolve()
SIMRUN_STORE = Path(_read("SIMRUN_STORE", env.str, str(SIMRUN_HOME / "store"))).resolve()
SIMRUN_BACKEND = _read("SIMRUN_BACKEND", env.str, "local")
if SIMRUN_BACKEND not in {"local", "argo", "slurm", "fake"}:
    raise ImproperlyConfigured(
        f"environment variable SIMRUN_BACKEND must be local, argo or slurm, not {SIMRUN_BACKEND!r}"
    )
# The Slurm backend (docs/slurm.md): where its jobs go (empty: the site's defaults), the extra
# sbatch arguments (split as a shell does), how often it asks squeue for all runs at once
# (an HPC controller is shared: at least 30 s by default), how long sbatch may take, and the
# slurm.conf its commands read (SLURM_CONF; empty: Slurm's default).
SIMRUN_SLURM_PARTITION = _read("SIMRUN_SLURM_PARTITION", env.str, "")
SIMRUN_SLURM_ACCOUNT = _read("SIMRUN_SLURM_ACCOUNT", env.str, "")
SIMRUN_SLURM_QOS = _read("SIMRUN_SLURM_QOS", env.str, "")
SIMRUN_SLURM_TIME_LIMIT = _read("SIMRUN_SLURM_TIME_LIMIT", env.str, "")
SIMRUN_SLURM_SBATCH_ARGS = _read("SIMRUN_SLURM_SBATCH_ARGS", env.str, "")
SIMRUN_SLURM_POLL_S = _positive("SIMRUN_SLURM_POLL_S", 30.0)
SIMRUN_SLURM_SUBMIT_TIMEOUT_S = _positive("SIMRUN_SLURM_SUBMIT_TIMEOUT_S", 60.0)
SIMRUN_SLURM_PENDING_TIMEOUT_S = _positive("SIMRUN_SLURM_PENDING_TIMEOUT_S", 600.0)
SIMRUN_SLURM_CONF = _read("SIMRUN_SLURM_CONF", env.str, "")

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "django_htmx",
    "template_partials",
    "rest_framework",
    "knox",
    "drf_spectacular",
    "drf_spectacular_sidecar",
    "axes",
    "runs",
]

MIDDLEWARE = [
    # First: a body past its cap is refused before anything reads it (runs/web/middleware.py).
    "runs.web.middleware.BodyLimitMiddleware",
    "runs.web.middleware.StorageFullMiddleware",
    "django.middleware.security.SecurityMiddleware",
    "simrun_site.static_files.StaticFilesMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "django_htmx.middleware.HtmxMiddleware",
    # Last: turns a locked-out login into runs.common.login_throttle's answer.
    "axes.middleware.AxesMiddleware",
]

ROOT_URLCONF = "simrun_site.urls"
WSGI_APPLICATION = "simrun_site.wsgi.application"

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
            ],
        },
    },
]

SIMRUN_PREPARED_STATEMENTS = _bool("SIMRUN_PREPARED_STATEMENTS", True)
DATABASES = {
    "default": _read("DATABASE_URL", env.db_url, f"sqlite:///{SIMRUN_HOME / 'simrun.sqlite3'}")
}
if DATABASES["default"]["ENGINE"] not in {
    "django.db.backends.sqlite3",
    "django.db.backends.postgresql",
}:
    raise ImproperlyConfigured(
        "environment variable DATABASE_URL must be a postgres:// or sqlite:/// URL, "
        f"not one for {DATABASES['default']['ENGINE']!r}"
    )
if DATABASES["default"]["ENGINE"] == "django.db.backends.postgresql":
    # A connection per request costs ~10 ms; keep them, checked before reuse.
    DATABASES["default"].setdefault("CONN_MAX_AGE", 60)
    DATABASES["default"]["CONN_HEALTH_CHECKS"] = True
    # The runs lists' statements are prepared on a connection at their second run, so
    # PostgreSQL plans them once (runs.common.prepared); off for a pooler that cannot keep them.
    if SIMRUN_PREPARED_STATEMENTS:
        DATABASES["default"].setdefault("OPTIONS", {}).setdefault("prepare_threshold", 1)
if DATABASES["default"]["ENGINE"] == "django.db.backends.sqlite3":
    Path(DATABASES["default"]["NAME"]).parent.mkdir(parents=True, exist_ok=True)
    # Several processes (web, worker, beat) share the file: wait for locks, write-ahead log.
    # A commit waits for no disk flush (synchronous=NORMAL, as the broker's): a killed process
    # loses none; only the machine's crash may take the last ones back, never consistency.
    DATABASES["default"].setdefault("OPTIONS", {}).update(
        {
            "timeout": 30,
            "transaction_mode": "IMMEDIATE",
            "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;",
        }
    )
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
]
LOGIN_URL = "login"
LOGIN_REDIRECT_URL = "runs:run-list"
LOGOUT_REDIRECT_URL = "login"
# Django's database sessions and model backend, their reads written out on PostgreSQL.
SESSION_ENGINE = "runs.common.sessions"
# Axes first: a locked-out username or address is refused before its password is checked.
AUTHENTICATION_BACKENDS = [
    "runs.common.login_throttle.ThrottleBackend",
    "runs.common.user_backend.UserBackend",
]

# Login throttling (runs/common/login_throttle.py): SIMRUN_LOGIN_FAILURES failed logins of a
# username, or from an address, lock it out for SIMRUN_LOGIN_LOCKOUT_MIN minutes from the last
# failure.
AXES_ENABLED = _bool("SIMRUN_LOGIN_THROTTLE", True)
AXES_FAILURE_LIMIT = _read("SIMRUN_LOGIN_FAILURES", env.int, 10)
AXES_COOLOFF_TIME = timedelta(minutes=_positive("SIMRUN_LOGIN_LOCKOUT_MIN", 15.0))
AXES_LOCKOUT_PARAMETERS = ["username", "ip_address"]
AXES_RESET_ON_SUCCESS = True
AXES_DISABLE_ACCESS_LOG = True
AXES_LOCKOUT_CALLABLE = "runs.common.login_throttle.lockout_response"
AXES_CLIENT_IP_CALLABLE = "runs.common.login_throttle.client_ip"
# The proxies in front of the service that append the client's address to X-Forwarded-For.
SIMRUN_PROXY_HOPS = _read("SIMRUN_PROXY_HOPS", env.int, 0)

# The web front (simrun_site/front.py, simrun_site/asgi.py), per web worker process: a request's
# head must come within SIMRUN_WEB_HEADER_TIMEOUT_S and SIMRUN_WEB_HEADER_BYTES, its body within
# SIMRUN_WEB_BODY_TIMEOUT_S; a worker takes SIMRUN_WEB_MAX_CONNECTIONS connections, receives
# SIMRUN_WEB_BODY_BUFFER_MB of bodies at once, and answers in SIMRUN_WEB_THREADS threads (each
# with its database connection).
SIMRUN_WEB_HEADER_TIMEOUT_S = _positive("SIMRUN_WEB_HEADER_TIMEOUT_S", 10.0)
SIMRUN_WEB_HEADER_BYTES = int(_positive("SIMRUN_WEB_HEADER_BYTES", 64 * 1024))
SIMRUN_WEB_BODY_TIMEOUT_S = _positive("SIMRUN_WEB_BODY_TIMEOUT_S", 120.0)
SIMRUN_WEB_MAX_CONNECTIONS = int(_positive("SIMRUN_WEB_MAX_CONNECTIONS", 500))
SIMRUN_WEB_BODY_BUFFER_MB = int(_positive("SIMRUN_WEB_BODY_BUFFER_MB", 512))
SIMRUN_WEB_THREADS = int(_positive("SIMRUN_WEB_THREADS", 4))

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True

STATIC_URL = "static/"
STATIC_ROOT = SIMRUN_HOME / "static"
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {"BACKEND": "whitenoise.storage.CompressedStaticFilesStorage"},
}
WHITENOISE_USE_FINDERS = True

REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": [
        "runs.api.authentication.TokenAuthentication",
        "rest_framework.authentication.SessionAuthentication",
    ],
    "DEFAULT_PERMISSION_CLASSES": ["rest_framework.permissions.IsAuthenticated"],
    "DEFAULT_PAGINATION_CLASS": "rest_framework.pagination.PageNumberPagination",
    "DEFAULT_CONTENT_NEGOTIATION_CLASS": "runs.api.negotiation.ContentNegotiation",
    "PAGE_SIZE": 50,
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
    "UNAUTHENTICATED_USER": "django.contrib.auth.models.AnonymousUser",
    "EXCEPTION_HANDLER": "runs.api.errors.answer",
}
# API tokens are stored hashed (django-rest-knox) and live SIMRUN_TOKEN_DAYS (0: for ever).
SIMRUN_TOKEN_DAYS = _read("SIMRUN_TOKEN_DAYS", env.int, 90)
REST_KNOX = {"AUTO_REFRESH": False}
SPECTACULAR_SETTINGS = {
    "TITLE": "simrun API",
    "DESCRIPTION": "Submit and follow simulation runs: DAGs of sweeps, plugins and commands.",
    "VERSION": "0.1.0",
    "SERVE_INCLUDE_SCHEMA": False,
    "COMPONENT_SPLIT_REQUEST": True,
    # Redoc from the sidecar's static files: the documentation works without internet.
    "REDOC_DIST": "SIDECAR",
    "POSTPROCESSING_HOOKS": [
        "drf_spectacular.hooks.postprocess_schema_enums",
        "runs.web.middleware.document_caps",
    ],
    "ENUM_NAME_OVERRIDES": {
        "RunStateEnum": "runs.models.RunState",
        "TaskStateEnum": "runs.models.TaskState",
    },
}

# Celery: Redis in production; without CELERY_BROKER_URL a broker in one SQLite file under
# SIMRUN_HOME (simrun_site/broker.py), made with its folder by the first process that uses it.
CELERY_BROKER_URL = _read(
    "CELERY_BROKER_URL", env.str, f"sqlite:///{SIMRUN_HOME / 'broker.sqlite3'}"
)
CELERY_BROKER_TRANSPORT: str | None = None
CELERY_BROKER_TRANSPORT_OPTIONS: dict[str, object] = {}
if CELERY_BROKER_URL.startswith("sqlite:///"):
    CELERY_BROKER_TRANSPORT = "simrun_site.broker:Transport"
    # The engine's options: wait for another process's write lock rather than fail.
    CELERY_BROKER_TRANSPORT_OPTIONS = {"connect_args": {"timeout": 30}}
    Path(CELERY_BROKER_URL.removeprefix("sqlite:///")).parent.mkdir(parents=True, exist_ok=True)
elif CELERY_BROKER_URL.startswith("filesystem://"):
    _broker = SIMRUN_HOME / "broker"
    CELERY_BROKER_TRANSPORT_OPTIONS = {
        "data_folder_in": str(_broker / "queue"),
        "data_folder_out": str(_broker / "queue"),
        "processed_folder": str(_broker / "processed"),
        "control_folder": str(_broker / "control"),
        "store_processed": False,
        "polling_interval": 0.1,
    }
CELERY_TASK_IGNORE_RESULT = True
CELERY_TASK_ACKS_LATE = True
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
# In a folder of its own, which ``simrun serve`` keeps to the service (``private_folder``).
CELERY_BEAT_SCHEDULE_FILENAME = str(SIMRUN_HOME / "beat" / "schedule")
# Learning a run's sources runs their code for minutes at worst: a queue of its own, so its
# worker (serve's "learner") never holds the one the control loop runs on.
CELERY_TASK_ROUTES = {"runs.tasks.learn_run": {"queue": "learning"}}

# The control loop.
SIMRUN_POLL_S = _positive("SIMRUN_POLL_S", 5.0)
SIMRUN_SETTLE_S = _positive("SIMRUN_SETTLE_S", 30.0)
# A live run whose record and workflow did not change is skipped by a pass, but polled in full
# at least this often, as informers resync (runs/control/poll_memory.py).
SIMRUN_RESYNC_S = _positive("SIMRUN_RESYNC_S", 60.0)
# A pass slower than the poll must not queue up beat's messages: stale ones expire.
CELERY_BEAT_SCHEDULE = {
    "reconcile": {
        "task": "runs.tasks.reconcile",
        "schedule": SIMRUN_POLL_S,
        "options": {"expires": SIMRUN_POLL_S},
    },
    "settle": {
        "task": "runs.tasks.settle",
        "schedule": SIMRUN_SETTLE_S,
        "options": {"expires": SIMRUN_SETTLE_S},
    },
}
SIMRUN_MERGE_MARKER_GRACE_S = _positive("SIMRUN_MERGE_MARKER_GRACE_S", 120.0)
SIMRUN_REPORT_GRACE_S = _positive("SIMRUN_REPORT_GRACE_S", 60.0)
"""How long an exit 137 waits for its report before it is classed without one (an eviction)."""
SIMRUN_LOCK_URL = _read("SIMRUN_LOCK_URL", env.str, "")
# How the domain hands a run's submission, its settling and a reconcile to a worker (the
# Celery tasks), by their import paths: the control loop is handed them, it does not import them.
SIMRUN_SUBMIT_LATER = "runs.tasks.submit_later"
SIMRUN_SETTLE_LATER = "runs.tasks.settle_later"
SIMRUN_RECONCILE_LATER = "runs.tasks.reconcile_later"
SIMRUN_LEARN_LATER = "runs.tasks.learn_later"

# The local backend.
SIMRUN_LOCAL_CORES = _read("SIMRUN_LOCAL_CORES", env.int, None)
SIMRUN_LOCAL_MEMORY_GB = _read("SIMRUN_LOCAL_MEMORY_GB", env.float, None)
SIMRUN_LOCAL_COMMANDS = _read("SIMRUN_LOCAL_COMMANDS", env.str, "direct")
if SIMRUN_LOCAL_COMMANDS not in {"direct", "docker"}:
    raise ImproperlyConfigured(
        f"environment variable SIMRUN_LOCAL_COMMANDS must be direct or docker, "
        f"not {SIMRUN_LOCAL_COMMANDS!r}"
    )
# The scratch beside the store, <store>/../scratch, whatever SIMRUN_STORE says.
SIMRUN_SCRATCH = Path(
    _read("SIMRUN_SCRATCH", env.str, str(SIMRUN_STORE.parent / "scratch"))
).resolve()
# A service running as root runs the processes of user N's runs as user id BASE + N
# (runs/backends/local/user.py); 0 runs them as the service's own user.
SIMRUN_TASK_UID_BASE = _read("SIMRUN_TASK_UID_BASE", env.int, 200000) or None
# The processes (and threads) one task may have: its pids cgroup, else RLIMIT_NPROC of its user.
SIMRUN_TASK_PIDS_MAX = _read("SIMRUN_TASK_PIDS_MAX", env.int, 4096)
# A run's environment.packages are installed into a venv per content on the local backend
# (runs/backends/local/env.py): within SIMRUN_PACKAGES_TIMEOUT_S, at most
# SIMRUN_ENVIRONMENTS_KEPT such venvs kept per user, a builder's wheel cache at most
# SIMRUN_PACKAGES_CACHE_GB.
SIMRUN_PACKAGES_TIMEOUT_S = _positive("SIMRUN_PACKAGES_TIMEOUT_S", 1800.0)
SIMRUN_ENVIRONMENTS_KEPT = int(_positive("SIMRUN_ENVIRONMENTS_KEPT", 8))
SIMRUN_PACKAGES_CACHE_GB = _positive("SIMRUN_PACKAGES_CACHE_GB", 5.0)
# Every process of a user's code outside a task (a learning, a build of packages or sources)
# runs behind a wall (runs/backends/local/wall.py) with this memory (its /tmp and /dev/shm
# included) and these processes at most, and writes at most these GiB and files in its folders
# on the store's disk (its venv, its wheel cache: runs/backends/local/wall_disk.py).
SIMRUN_BUILD_MEMORY_GB = _positive("SIMRUN_BUILD_MEMORY_GB", 2.0)
SIMRUN_BUILD_PIDS_MAX = int(_positive("SIMRUN_BUILD_PIDS_MAX", 512))
SIMRUN_BUILD_DISK_GB = _positive("SIMRUN_BUILD_DISK_GB", 20.0)
SIMRUN_BUILD_FILES_MAX = int(_positive("SIMRUN_BUILD_FILES_MAX", 200_000))
# The most units (combinations) one command sweep may have (docs/run-spec.md, Sweeps).
SIMRUN_SWEEP_MAX_UNITS = _read("SIMRUN_SWEEP_MAX_UNITS", env.int, 100_000)
# What the copies of one owner's live runs (the cache, resumes) may take together of the work
# they reuse (runs/control/copy_ledger.py): a task whose outputs or units would take more runs
# in full instead (docs/resume.md).
SIMRUN_REUSE_MAX_GB = _positive("SIMRUN_REUSE_MAX_GB", 20.0)
SIMRUN_REUSE_MAX_FILES = int(_positive("SIMRUN_REUSE_MAX_FILES", 500_000))
# A task run as a task user gets a network namespace of its own, its own loopback only, so it
# can neither take the service's port nor reach it, the database or the internet
# (runs/backends/local/launcher.py); "host" gives it the machine's network.
SIMRUN_TASK_NETWORK = _read("SIMRUN_TASK_NETWORK", env.str, "loopback")
if SIMRUN_TASK_NETWORK not in {"loopback", "host"}:
    raise ImproperlyConfigured(
        f"environment variable SIMRUN_TASK_NETWORK must be loopback or host, "
        f"not {SIMRUN_TASK_NETWORK!r}"
    )
# What one task may spend of what every user shares (docs/team.md, "Budgets"): the entries and
# bytes of its folder in the store and its scratch together (counted by its launcher every
# SIMRUN_TASK_FILES_CHECK_S, a file's size also capped by RLIMIT_FSIZE), how deep its folders
# nest, and the bytes of one attempt's log (its head and its tail are kept).
SIMRUN_TASK_FILES_MAX = _read("SIMRUN_TASK_FILES_MAX", env.int, 100_000)
SIMRUN_TASK_DISK_GB = _positive("SIMRUN_TASK_DISK_GB", 20.0)
SIMRUN_TASK_DEPTH_MAX = _read("SIMRUN_TASK_DEPTH_MAX", env.int, 64)
SIMRUN_TASK_FILES_CHECK_S = _positive("SIMRUN_TASK_FILES_CHECK_S", 2.0)
SIMRUN_TASK_LOG_MB = _positive("SIMRUN_TASK_LOG_MB", 64.0)
# What the running tasks of one user may hold together in their folders and scratches, as their
# launchers count them: a task whose count grew while they hold more fails naming the budget.
SIMRUN_USER_FILES_MAX = _read("SIMRUN_USER_FILES_MAX", env.int, 500_000)
SIMRUN_USER_DISK_GB = _positive("SIMRUN_USER_DISK_GB", 100.0)
# What the service reads of what a task wrote: progress.jsonl per poll (from where the last
# poll stopped), one report, all the reports of one task, and the walks of a task's folders
# for the pages and the API (folders down, entries looked at).
SIMRUN_PROGRESS_READ_MB = _positive("SIMRUN_PROGRESS_READ_MB", 4.0)
SIMRUN_REPORT_MAX_MB = _positive("SIMRUN_REPORT_MAX_MB", 16.0)
SIMRUN_REPORTS_READ_MB = _positive("SIMRUN_REPORTS_READ_MB", 256.0)
SIMRUN_WALK_DEPTH = _read("SIMRUN_WALK_DEPTH", env.int, 64)
SIMRUN_WALK_ENTRIES = _read("SIMRUN_WALK_ENTRIES", env.int, 10_000)
# The runs of one user that have not ended (learning, submitting, running) the service queues;
# a submission past it is refused (429) naming the bound.
SIMRUN_USER_QUEUED_RUNS = _read("SIMRUN_USER_QUEUED_RUNS", env.int, 50)
# A type only a run's sources define is learned by running their code here (as the owner's
# task user on the local backend); on Argo that would be in the service's pod: off by default.
SIMRUN_LEARN_SOURCES = _read("SIMRUN_LEARN_SOURCES", env.bool, SIMRUN_BACKEND != "argo")
# Learning runs in the worker, never in a web request: the install of the sources (pip, their
# build code) and then the description of their types are stopped after these seconds each.
SIMRUN_LEARN_INSTALL_S = _positive("SIMRUN_LEARN_INSTALL_S", 300.0)
SIMRUN_LEARN_DESCRIBE_S = _positive("SIMRUN_LEARN_DESCRIBE_S", 60.0)
# The learnings at once, each of another user's runs (runs/control/learning.py): one user's
# slow sources delay only that user's runs.
SIMRUN_LEARNERS = int(_positive("SIMRUN_LEARNERS", 2))
# The extracted bytes of source snapshots the store keeps: of one user's, and of everyone's
# (each tree once); an upload past either is refused while it is extracted.
SIMRUN_SNAPSHOT_USER_BYTES = _read("SIMRUN_SNAPSHOT_USER_BYTES", env.int, 2 << 30)
SIMRUN_SNAPSHOT_TOTAL_BYTES = _read("SIMRUN_SNAPSHOT_TOTAL_BYTES", env.int, 20 << 30)

# The Argo backend (see runs/backends/argo/ and docs/cluster.md).
SIMRUN_CLUSTER = {
    "namespace": _read("SIMRUN_K8S_NAMESPACE", env.str, "simrun"),
    "queue": _read("SIMRUN_KUEUE_QUEUE", env.str, "simrun"),
    "service_account": _read("SIMRUN_K8S_SERVICE_ACCOUNT", env.str, "simrun-runner"),
    "store_claim": _read("SIMRUN_STORE_CLAIM", env.str, "simrun-store"),
    "store_mount": _read("SIMRUN_STORE_MOUNT", env.str, "/store"),
    "registry": _read("SIMRUN_REGISTRY", env.str, ""),
    "pull_secret": _read("SIMRUN_PULL_SECRET", env.str, ""),
    "harness_image": _read("SIMRUN_HARNESS_IMAGE", env.str, "ghcr.io/simrun/harness:0.1.0"),
    "node_selector": _read("SIMRUN_NODE_SELECTOR", env.dict, {}),
    "ttl_s": _read("SIMRUN_WORKFLOW_TTL_S", env.int, 3600),
    "kubeconfig": _read("KUBECONFIG", env.str, ""),
    "registry_auth_file": _read("SIMRUN_REGISTRY_AUTH_FILE", env.str, ""),
    "builder_image": _read(
        "SIMRUN_BUILDER_IMAGE", env.str, "ghcr.io/osscontainertools/kaniko:v1.27.4"
    ),
    "build_timeout_s": _read("SIMRUN_BUILD_TIMEOUT_S", env.int, 3600),
    "build_namespace": _read("SIMRUN_BUILD_NAMESPACE", env.str, "simrun-build"),
    "scratch_gb": _read("SIMRUN_SCRATCH_GB", env.int, 10),
    "pod_start_timeout_s": _read("SIMRUN_POD_START_TIMEOUT_S", env.int, 600),
    "argo_controller": _read("SIMRUN_ARGO_CONTROLLER", env.str, "argo/workflow-controller"),
    "argo_version": _read("SIMRUN_ARGO_VERSION", env.str, ""),
    "argo_instance_id": _read("SIMRUN_ARGO_INSTANCE_ID", env.str, ""),
}

# /metrics (runs/common/metrics.py): a staff session, the bearer token SIMRUN_METRICS_TOKEN, or with
# SIMRUN_METRICS_LOOPBACK any scrape from this machine. The worker's measurements reach the web
# server through prometheus-client's multiprocess files.
SIMRUN_METRICS_TOKEN = _read("SIMRUN_METRICS_TOKEN", env.str, "")
SIMRUN_METRICS_LOOPBACK = _bool("SIMRUN_METRICS_LOOPBACK", False)
os.environ.setdefault("PROMETHEUS_MULTIPROC_DIR", str(SIMRUN_HOME / "metrics"))
Path(os.environ["PROMETHEUS_MULTIPROC_DIR"]).mkdir(parents=True, exist_ok=True)

# A task's results table (out/results.csv, runs/reads/results.py), which the task wrote: the
# pages and the API read at most SIMRUN_RESULTS_MAX_BYTES of it, keep SIMRUN_RESULTS_MAX_ROWS rows
# of SIMRUN_RESULTS_MAX_COLUMNS columns (sorted and plotted), and the run page shows the first
# SIMRUN_RESULTS_ROWS_SHOWN of them. The downloads are the whole file.
SIMRUN_RESULTS_MAX_BYTES = int(_positive("SIMRUN_RESULTS_MAX_BYTES", 8 * 2**20))
SIMRUN_RESULTS_MAX_ROWS = int(_positive("SIMRUN_RESULTS_MAX_ROWS", 50_000))
SIMRUN_RESULTS_MAX_COLUMNS = int(_positive("SIMRUN_RESULTS_MAX_COLUMNS", 100))
SIMRUN_RESULTS_ROWS_SHOWN = int(_positive("SIMRUN_RESULTS_ROWS_SHOWN", 100))
# Each web process keeps the tables it parsed, up to this many MiB of their files, so a table
# read again (a page, a sort, a plot) is not parsed again while its file is unchanged.
SIMRUN_RESULTS_CACHE_MB = int(_positive("SIMRUN_RESULTS_CACHE_MB", 32))

# A line per change as key=value with the run's id (runs/common/logfmt.py); Celery's processes
# log the same way (simrun_site/celery.py). Celery's lines per task received and done (a reconcile
# every 5 s) say nothing an operator needs: runs.tasks logs a pass that changed something.
LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"plain": {"()": "runs.common.logfmt.KeyValueFormatter"}},
    "filters": {"once": {"()": "runs.common.logfmt.Once"}},
    "handlers": {
        "console": {"class": "logging.StreamHandler", "formatter": "plain", "filters": ["once"]}
    },
    "root": {"handlers": ["console"], "level": _read("LOG_LEVEL", env.str, "INFO")},
    "loggers": {
        "django.db.backends": {"level": "INFO"},
        "celery.app.trace": {"level": "WARNING"},
        "celery.worker.strategy": {"level": "WARNING"},
        "celery.beat": {"level": "WARNING"},
        # A lockout and each failure past the limit are warnings; a line per failure is not.
        "axes": {"level": "WARNING"},
    },
}
