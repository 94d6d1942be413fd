"""Rota's settings: one module, every deployment knob read from the environment with a safe dev default.

Variables: SECRET_KEY, DEBUG, ALLOWED_HOSTS, DATABASE_URL, REDIS_URL (``filesystem`` selects the
file-based Celery broker used when Redis is absent), ROTA_* scheduling knobs. Bad values fail at start.
"""

from pathlib import Path

import dj_database_url
import plotly
from django.core.exceptions import ImproperlyConfigured

from portal.env import env_bool, env_int, env_list, env_range, env_str, env_url

BASE_DIR = Path(__file__).resolve().parent.parent
VAR_DIR = Path(env_str("ROTA_VAR_DIR", str(BASE_DIR / "var")))

DEBUG = env_bool("DEBUG", True)
_DEV_SECRET = "dev-only-insecure-secret-key-change-me-in-production-0123456789"
SECRET_KEY = env_str("SECRET_KEY", _DEV_SECRET if DEBUG else "")
if not SECRET_KEY:
    raise ImproperlyConfigured("SECRET_KEY must be set when DEBUG is off")
if not DEBUG and SECRET_KEY == _DEV_SECRET:
    raise ImproperlyConfigured("SECRET_KEY is the development default; set a real one when DEBUG is off")
ALLOWED_HOSTS = env_list("ALLOWED_HOSTS", ["localhost", "127.0.0.1", "[::1]", "testserver"])

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
    "portal",
    "scheduler",
    "accounting",
    "notifications",
    "axes",
    "mozilla_django_oidc",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "portal.middleware.RejectNulCharacters",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "axes.middleware.AxesMiddleware",  # last: turns a lockout into a 429 answer
]

# Login throttling (django-axes): after AXES_FAILURE_LIMIT failed logins for one username from one address,
# that pair is locked out for AXES_COOLOFF_MINUTES; a successful login resets the count.
AUTHENTICATION_BACKENDS = ["axes.backends.AxesStandaloneBackend", "django.contrib.auth.backends.ModelBackend",
                           "portal.sso.RotaOIDCBackend"]
AXES_FAILURE_LIMIT = env_int("AXES_FAILURE_LIMIT", 5, minimum=1)
AXES_COOLOFF_TIME = env_int("AXES_COOLOFF_MINUTES", 15, minimum=1) / 60  # hours
AXES_LOCKOUT_PARAMETERS = [["username", "ip_address"]]
AXES_RESET_ON_SUCCESS = True
AXES_VERBOSE = False
AXES_USERNAME_CALLABLE = "portal.throttle.axes_username"

ROOT_URLCONF = "portal.urls"
WSGI_APPLICATION = "portal.wsgi.application"

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
                "portal.context.navigation",
            ],
        },
    },
]

DATABASE_URL = env_str("DATABASE_URL", "postgres://postgres@localhost:5432/rota")
try:
    DATABASES = {"default": dj_database_url.parse(DATABASE_URL, conn_max_age=60)}
except Exception as exc:  # dj_database_url raises several types for a malformed URL
    raise ImproperlyConfigured(f"DATABASE_URL is not a valid database URL: {exc}") from None
DB_VENDOR = "sqlite" if DATABASES["default"]["ENGINE"].endswith("sqlite3") else "postgresql"
if DB_VENDOR == "sqlite":
    # The no-PostgreSQL fallback: several processes write (web, worker, agents' reports through the web),
    # so wait for locks instead of failing, take write locks up front, and let readers run beside a writer.
    DATABASES["default"]["OPTIONS"] = {
        "timeout": 20,
        "transaction_mode": "IMMEDIATE",
        "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;",
    }
if DB_VENDOR == "postgresql":
    DATABASES["default"]["ENGINE"] = "portal.postgres"  # Django's, with a health check without a round trip
    DATABASES["default"]["TEST"] = {"NAME": env_str("ROTA_TEST_DATABASE", "test_rota")}
    _options = DATABASES["default"].setdefault("OPTIONS", {})
    # No JIT for the portal's sessions: its queries are short, and on the accounting reports (correlated
    # subqueries per ledger row) JIT compilation took 9 of 10 seconds. Set in the connection's startup options;
    # ROTA_DB_JIT_OFF=0 leaves them alone (PgBouncer refuses unknown startup options: set jit there instead).
    if env_bool("ROTA_DB_JIT_OFF", True):
        _options["options"] = f"{_options.get('options', '')} -c jit=off".strip()
    # Parameters bound by the server (Django's default splices them into the SQL text on the client), and a
    # statement a connection has run ROTA_DB_PREPARE_THRESHOLD times is prepared there: parsed and planned once,
    # not at each run (PostgreSQL's CPU a heartbeat 0.4-0.5 ms instead of 1.2-1.4: bench/README.md, "Statements
    # bound by PostgreSQL"). 0 prepares none: behind PgBouncer before 1.21, or without its
    # max_prepared_statements, a prepared statement is lost.
    _options["server_side_binding"] = True
    _options["prepare_threshold"] = env_int("ROTA_DB_PREPARE_THRESHOLD", 5, minimum=0) or None
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

# Celery: Redis broker; "filesystem" selects kombu's file transport for machines without Redis.
REDIS_URL = env_str("REDIS_URL", "redis://localhost:6379/0")
if REDIS_URL == "filesystem":
    _broker_dir = VAR_DIR / "broker"
    for sub in ("out", "processed"):
        (_broker_dir / sub).mkdir(parents=True, exist_ok=True)
    CELERY_BROKER_URL = "filesystem://"
    CELERY_BROKER_TRANSPORT_OPTIONS = {
        "data_folder_in": str(_broker_dir / "out"),
        "data_folder_out": str(_broker_dir / "out"),
        "processed_folder": str(_broker_dir / "processed"),
        "control_folder": str(_broker_dir / "control"),  # else kombu makes ./control wherever it runs
        "store_processed": False,
    }
elif REDIS_URL.startswith(("redis://", "rediss://", "unix://")):
    CELERY_BROKER_URL = REDIS_URL
    if REDIS_URL.startswith("redis://"):  # kombu's transport, one client per channel (portal/broker.py)
        CELERY_BROKER_TRANSPORT = "portal.broker:Transport"
else:
    raise ImproperlyConfigured(f"REDIS_URL must be a redis:// URL or 'filesystem'; got {REDIS_URL!r}")
CELERY_TASK_IGNORE_RESULT = True
CELERY_TASK_ACKS_LATE = True
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
CELERY_TASK_TIME_LIMIT = 120
CELERY_TASK_SOFT_TIME_LIMIT = 100
CELERY_TIMEZONE = "UTC"
ROTA_CYCLE_INTERVAL_S = env_int("ROTA_CYCLE_INTERVAL_S", 5, minimum=1, maximum=3600)
# A woken cycle rests after the last one this share (%) of that cycle's time: wake-ups meanwhile go together.
ROTA_CYCLE_REST_PCT = env_int("ROTA_CYCLE_REST_PCT", 100, minimum=0, maximum=1000)
# Post-commit wake-ups (cycle, node news) go through a per-process sender thread (scheduler/wake_sender.py);
# off, the committing thread sends them itself (the in-process tests, which read Redis right after a commit).
ROTA_WAKE_IN_BACKGROUND = env_bool("ROTA_WAKE_IN_BACKGROUND", True)
ROTA_NODE_HEARTBEAT_INTERVAL_S = env_int("ROTA_NODE_HEARTBEAT_INTERVAL_S", 2, minimum=1, maximum=300)
# Where node agents send their heartbeats, told in every register and heartbeat answer (``heartbeat_url``): the
# root of the node-control server (``ROTA_WEB_ROLE=control``, deploy/gunicorn.conf.py) as the nodes reach it; empty: the
# address each agent registered at (its --portal).
ROTA_NODE_HEARTBEAT_URL = env_url("ROTA_NODE_HEARTBEAT_URL")
# how often the autoscaler of inference services measures their request rate (scheduler.services.autoscale)
ROTA_AUTOSCALE_INTERVAL_S = env_int("ROTA_AUTOSCALE_INTERVAL_S", 15, minimum=1, maximum=3600)
ROTA_NODE_HEARTBEAT_TIMEOUT_S = env_int("ROTA_NODE_HEARTBEAT_TIMEOUT_S", 30, minimum=3, maximum=3600)
# The heartbeats a second the portal budgets for (scheduler/services/node_cadence.py): past
# ROTA_NODE_HEARTBEAT_INTERVAL_S x this many nodes in service, each node is told to heartbeat less often (nodes /
# this, up to ROTA_NODE_HEARTBEAT_INTERVAL_MAX_S) and is given a timeout that grows with it. A heartbeat costs
# 7-15 ms of a web core: 20 a second is a fifth of a core. Decisions still reach nodes at once (the long-poll).
ROTA_NODE_HEARTBEATS_PER_S = env_int("ROTA_NODE_HEARTBEATS_PER_S", 20, minimum=1, maximum=100_000)
# (a cap below ROTA_NODE_HEARTBEAT_INTERVAL_S caps nothing: the interval is never shorter than that)
ROTA_NODE_HEARTBEAT_INTERVAL_MAX_S = env_int("ROTA_NODE_HEARTBEAT_INTERVAL_MAX_S", 60, minimum=1, maximum=3600)
# How many times a job whose node was lost under it is queued again before it ends node-lost (scheduler.retries).
# Notifications (notifications/): e-mail through this SMTP server; webhooks signed, retried with a doubling
# backoff; a webhook may not reach private, loopback or link-local addresses unless allowed (tests, a lab).
EMAIL_BACKEND = env_str("EMAIL_BACKEND", "django.core.mail.backends.smtp.EmailBackend")
EMAIL_HOST = env_str("EMAIL_HOST", "localhost")
EMAIL_PORT = env_int("EMAIL_PORT", 25, minimum=1, maximum=65535)
EMAIL_TIMEOUT = 10
DEFAULT_FROM_EMAIL = env_str("ROTA_FROM_EMAIL", "rota@localhost")
ROTA_PORTAL_URL = env_str("ROTA_PORTAL_URL", "http://127.0.0.1:8000").rstrip("/")  # links in messages
ROTA_NOTIFY_TRIES = env_int("ROTA_NOTIFY_TRIES", 6, minimum=1, maximum=20)
ROTA_NOTIFY_BACKOFF_S = env_int("ROTA_NOTIFY_BACKOFF_S", 30, minimum=0, maximum=3600)
ROTA_WEBHOOK_TIMEOUT_S = env_int("ROTA_WEBHOOK_TIMEOUT_S", 10, minimum=1, maximum=60)
ROTA_WEBHOOK_ALLOW_PRIVATE = env_bool("ROTA_WEBHOOK_ALLOW_PRIVATE", False)
ROTA_PLATFORM_RETRIES = env_int("ROTA_PLATFORM_RETRIES", 3, minimum=0, maximum=100)
# A node's calls (heartbeats, long-polls, job events, logs) a minute (portal.throttle.NodeThrottle): an 8-GPU node
# turning over trivial jobs makes about four per job, so 600/min held a node to ~3 jobs/s; the bound is against a
# node gone wild.
ROTA_NODE_REQUESTS_PER_MIN = env_int("ROTA_NODE_REQUESTS_PER_MIN", 12_000, minimum=60)
# Node long-polls (POST /api/v1/node/wait/) one web process holds at once; past it a node polls at its interval.
# In web threads (gthread, runserver) each held one takes a thread; on the ASGI server's event loop (make serve,
# portal/longpoll.py) a socket to the node and one to Redis.
ROTA_NODE_WAITERS_PER_PROCESS = env_int("ROTA_NODE_WAITERS_PER_PROCESS", 12, minimum=0, maximum=10_000)
ROTA_NODE_ASYNC_WAITERS_PER_PROCESS = env_int("ROTA_NODE_ASYNC_WAITERS_PER_PROCESS", 2000, minimum=0,
                                              maximum=100_000)
# Slurm's elapsed x GPUs and Rota's ledger may differ by this many seconds per GPU before the difference is a
# mismatch (docs/slurm.md): Rota holds the GPUs from its decision to the bridge's report of the end.
ROTA_SLURM_ACCOUNTING_TOLERANCE_S = env_int("ROTA_SLURM_ACCOUNTING_TOLERANCE_S", 30, minimum=0, maximum=86_400)
CELERY_BEAT_SCHEDULE = {
    "scheduling-cycle": {"task": "scheduler.cycle", "schedule": float(ROTA_CYCLE_INTERVAL_S)},
    # Each node has its own deadline, never shorter than ROTA_NODE_HEARTBEAT_TIMEOUT_S: checking at a fifth of
    # that finds a silent node within 1.2 timeouts, whatever the heartbeat interval (node_cadence.py).
    "node-liveness": {"task": "scheduler.node_liveness", "schedule": max(1.0, ROTA_NODE_HEARTBEAT_TIMEOUT_S / 5)},
    "telemetry-rollup": {"task": "scheduler.telemetry_rollup", "schedule": 600.0},
    "usage-rollup": {"task": "accounting.usage_rollup", "schedule": 60.0},
    "quota-loans-end": {"task": "scheduler.loans_end", "schedule": 60.0},
    "notify-periodic": {"task": "notifications.periodic", "schedule": 60.0},
    "services-autoscale": {"task": "scheduler.autoscale", "schedule": float(ROTA_AUTOSCALE_INTERVAL_S)},
    "notebooks-probe": {"task": "scheduler.notebooks_probe", "schedule": 60.0},
}

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
]
LOGIN_URL = "login"
LOGIN_REDIRECT_URL = "home"
LOGOUT_REDIRECT_URL = "login"

# Single sign-on with OpenID Connect (mozilla-django-oidc, ``portal/sso.py``): on when the client and the
# provider's endpoints are set. ID tokens are checked against the provider's JWKS (RS256 by default).
OIDC_RP_CLIENT_ID = env_str("OIDC_RP_CLIENT_ID", "")
OIDC_RP_CLIENT_SECRET = env_str("OIDC_RP_CLIENT_SECRET", "")
OIDC_OP_AUTHORIZATION_ENDPOINT = env_str("OIDC_OP_AUTHORIZATION_ENDPOINT", "")
OIDC_OP_TOKEN_ENDPOINT = env_str("OIDC_OP_TOKEN_ENDPOINT", "")
OIDC_OP_USER_ENDPOINT = env_str("OIDC_OP_USER_ENDPOINT", "")
OIDC_OP_JWKS_ENDPOINT = env_str("OIDC_OP_JWKS_ENDPOINT", "")
OIDC_RP_SIGN_ALGO = env_str("OIDC_RP_SIGN_ALGO", "RS256")
OIDC_RP_SCOPES = env_str("OIDC_RP_SCOPES", "openid email profile groups")
OIDC_TIMEOUT = 10
LOGIN_REDIRECT_URL_FAILURE = "/login/?sso=failed"
ROTA_OIDC_ENABLED = bool(OIDC_RP_CLIENT_ID and OIDC_OP_AUTHORIZATION_ENDPOINT and OIDC_OP_TOKEN_ENDPOINT
                         and OIDC_OP_USER_ENDPOINT)
# Who may sign in with a local password: "all", or "staff" (platform admins only: break-glass, once SSO is on).
ROTA_LOCAL_LOGIN = env_str("ROTA_LOCAL_LOGIN", "all")
if ROTA_LOCAL_LOGIN not in ("all", "staff"):
    raise ImproperlyConfigured(f"ROTA_LOCAL_LOGIN must be all or staff; got {ROTA_LOCAL_LOGIN!r}")

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True

STATIC_URL = "static/"
# Plotly's bundled plotly.min.js is served from the installed package (no CDN, no copy in the repo).
STATICFILES_DIRS = [BASE_DIR / "static", ("vendor/plotly", Path(plotly.__file__).parent / "package_data")]
STATIC_ROOT = BASE_DIR / "staticfiles"
WHITENOISE_USE_FINDERS = True  # serve straight from the finders in development and tests (no collectstatic)
ROTA_METRICS_TOKEN = env_str("ROTA_METRICS_TOKEN", "")
JOB_LOG_MAX_BYTES = env_int("ROTA_JOB_LOG_MAX_BYTES", 4 * 1024 * 1024, minimum=1024)
ROTA_IDLE_COST_POLICY = env_str("ROTA_IDLE_COST_POLICY", "separate")  # hide | separate | share (OpenCost)

# Jobs as isolated workloads (README "Images and isolation"). The image a job runs in when neither the job nor
# its kind names one (a platform admin sets the kinds' defaults under Govern -> Images):
ROTA_DEFAULT_IMAGE = env_str("ROTA_DEFAULT_IMAGE", "localhost/rota/python:3.11")
ROTA_NOTEBOOK_IMAGE = env_str("ROTA_NOTEBOOK_IMAGE", "localhost/rota/notebook:1")  # JupyterLab (make images)
# The images a new pool allows (a platform admin edits each pool's list under Govern -> Images).
ROTA_DEFAULT_ALLOWED_IMAGES = env_list("ROTA_DEFAULT_ALLOWED_IMAGES", ["localhost/rota/*"])
ROTA_JOB_PIDS_LIMIT = env_int("ROTA_JOB_PIDS_LIMIT", 4096, minimum=16, maximum=4_194_304)
# Each team runs as its own unprivileged uid (and gid of the same number) taken from this range on the nodes.
ROTA_TEAM_UID_RANGE = env_range("ROTA_TEAM_UID_RANGE", (20000, 29999), minimum=1000, maximum=2**31 - 2)
# The ports a node's notebooks and inference replicas listen on (ROTA_PORT), handed out per node from this range.
ROTA_SERVICE_PORTS = env_range("ROTA_SERVICE_PORTS", (30000, 30999), minimum=1024, maximum=65535)
# True: a node whose executor does not isolate tenants (the process executor) may not register.
ROTA_REQUIRE_ISOLATION = env_bool("ROTA_REQUIRE_ISOLATION", False)

REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": [
        "portal.api.TokenAuthentication",
        "rest_framework.authentication.SessionAuthentication",
    ],
    "DEFAULT_PERMISSION_CLASSES": ["rest_framework.permissions.IsAuthenticated"],
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
    # DRF's parsers, with a JSON parser that answers a too deeply nested document with a 400, not a 500.
    "DEFAULT_PARSER_CLASSES": [
        "portal.api.JSONParser",
        "rest_framework.parsers.FormParser",
        "rest_framework.parsers.MultiPartParser",
    ],
    "DEFAULT_PAGINATION_CLASS": "portal.api.Pagination",
    "PAGE_SIZE": 50,
    "EXCEPTION_HANDLER": "portal.api.exception_handler",
    # A node's calls are bounded by portal.throttle.NodeThrottle (ROTA_NODE_REQUESTS_PER_MIN), not a rate here.
    "DEFAULT_THROTTLE_RATES": {"quote": "60/min"},
}
SPECTACULAR_SETTINGS = {
    "TITLE": "Rota API",
    "DESCRIPTION": "Submit and inspect GPU work, nodes, quotas and usage.",
    "VERSION": "1",
    "SERVE_INCLUDE_SCHEMA": False,
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    "REDOC_DIST": "SIDECAR",
    "ENUM_NAME_OVERRIDES": {
        "JobStateEnum": "scheduler.models.jobs.JobState.choices",
        "NodeStateEnum": "scheduler.models.cluster.Node.STATES",
        "ReplicaHealthEnum": "scheduler.services.replica_health.HEALTH_STATES",
        "StartedHealthEnum": "scheduler.services.replica_health.STARTED_HEALTH",
    },
}

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "handlers": {"console": {"class": "logging.StreamHandler"}},
    "root": {"handlers": ["console"], "level": env_str("LOG_LEVEL", "INFO")},
    "loggers": {"django.db.backends": {"level": "WARNING"}, "axes": {"level": "WARNING"}},
}

if not DEBUG:
    SESSION_COOKIE_SECURE = True
    CSRF_COOKIE_SECURE = True
    SECURE_SSL_REDIRECT = env_bool("SECURE_SSL_REDIRECT", True)
    SECURE_HSTS_SECONDS = env_int("SECURE_HSTS_SECONDS", 3600, minimum=0)
