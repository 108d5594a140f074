"""Settings, all read from the environment (django-environ).

``DATABASE_URL`` and ``REDIS_URL`` are required here; the launcher
(``python -m opdweb.launcher``) sets them to embedded servers when they are unset.
PostgreSQL only: there is no SQLite path.
"""
from datetime import timedelta
from pathlib import Path
from urllib.parse import unquote

import environ

from opdweb.dead_peers import dead_peer_options
from opdweb.deployment import channel_prefix

BASE_DIR = Path(__file__).resolve().parent.parent

env = environ.Env()
if (BASE_DIR / ".env").exists():
    environ.Env.read_env(BASE_DIR / ".env", overwrite=False)

DEBUG = env.bool("DEBUG", default=False)
SECRET_KEY = env.str("SECRET_KEY", default="dev-only-insecure-key" if DEBUG else environ.Env.NOTSET)
ALLOWED_HOSTS = env.list("ALLOWED_HOSTS", default=["localhost", "127.0.0.1", "[::1]"])
CSRF_TRUSTED_ORIGINS = env.list("CSRF_TRUSTED_ORIGINS", default=[])
DATA_DIR = Path(env.str("OPDWEB_DATA_DIR", default=str(BASE_DIR / "var")))
# The sandbox of job configs (opdweb/sandbox.py): models and prompt files only from
# these roots; hub ids only where allowed; the BF16 reference cache is the product's.
OPDWEB_MODEL_ROOTS = [Path(p) for p in env.list("OPDWEB_MODEL_ROOTS",
                                                default=[str(DATA_DIR / "models"), str(DATA_DIR / "toy")])]
OPDWEB_DATA_ROOTS = [Path(p) for p in env.list("OPDWEB_DATA_ROOTS", default=[str(DATA_DIR / "data")])]
OPDWEB_ALLOW_HUB = env.bool("OPDWEB_ALLOW_HUB", default=False)
# Checkpoints by URI (workers/science/checkpoints): the s3:// prefixes a config may name
# (nothing outside them: no other bucket, no '..'), and each worker's local cache of what it
# fetched from them, content-addressed and bounded (least recently used evicted first).
OPDWEB_CHECKPOINT_URIS = env.list("OPDWEB_CHECKPOINT_URIS", default=[])
OPDWEB_CHECKPOINT_CACHE = Path(env.str("OPDWEB_CHECKPOINT_CACHE", default=str(DATA_DIR / "cache" / "checkpoints")))
OPDWEB_CHECKPOINT_CACHE_BYTES = env.int("OPDWEB_CHECKPOINT_CACHE_BYTES", default=100 * 2**30)
# Where a run's files go (the MLflow artifact API): a directory, or ``s3://bucket/prefix``
# on the store of S3_ENDPOINT_URL (the launcher points it at its embedded store).  One
# upload larger than OPDWEB_ARTIFACT_MAX_BYTES is refused with a 413.
OPDWEB_ARTIFACT_ROOT = env.str("OPDWEB_ARTIFACT_ROOT", default=str(DATA_DIR / "artifacts"))
OPDWEB_ARTIFACT_MAX_BYTES = env.int("OPDWEB_ARTIFACT_MAX_BYTES", default=2 * 2**30)
REFERENCE_CACHE_DIR = DATA_DIR / "cache" / "bf16-references"
RUNS_DIR = DATA_DIR / "runs"  # one directory per job for what it writes (training checkpoints)

INSTALLED_APPS = [
    "daphne",
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "channels",
    "axes",
    "opdweb.teams",
    "opdweb.jobs",
    "opdweb.traces",
    "opdweb.health",
    "opdweb.budgets",
    "opdweb.rollouts",
    "opdweb.approvals",
    "opdweb.registry",
    "opdweb.tokens",
    "opdweb.runs",
    "opdweb.home",
]

MIDDLEWARE = [
    "opdweb.middleware.RequestSizeLimit",
    "opdweb.middleware.RefuseNulCharacters",
    "django.middleware.security.SecurityMiddleware",
    "opdweb.csp.ContentSecurityPolicy",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    # Last, as django-axes asks: it answers a locked-out login with the lockout page.
    "axes.middleware.AxesMiddleware",
]

ROOT_URLCONF = "opdweb.urls"
ASGI_APPLICATION = "opdweb.asgi.application"

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
                "opdweb.jobs.context_processors.job_kinds",
                "opdweb.pages.refusal",
            ],
        },
    },
]

DATABASES = {"default": env.db_url("DATABASE_URL", engine="django.db.backends.postgresql")}
# A Unix-socket directory is written percent-encoded in the URL's host (the embedded server).
DATABASES["default"]["HOST"] = unquote(DATABASES["default"]["HOST"])
# The ASGI server runs each request's sync code in a thread of its own, so a thread's
# persistent connection would serve one request: there, a pool of connections is shared
# by the threads instead (opdweb.asgi asks for it).  Workers and commands keep one
# persistent connection per process (a pool opened before a fork would be shared by the
# children).
# Health checks: a connection is tested before use (handed out by the pool, or reused),
# so a database restart costs no request.
DATABASES["default"]["CONN_HEALTH_CHECKS"] = True
# A database that does not answer costs a request the connect timeout, then a 503 (with
# Retry-After), not a hang.  Under ASGI the pool waits 2 s longer for a connection: when
# PostgreSQL drops every pooled connection (a restart), refilling the pool took over 3 s in
# 1 of 3 runs of test_database_pool.py, and a 503 after a restart costs more than 2 s of an
# outage's answer.
DB_CONNECT_TIMEOUT_S = env.int("DB_CONNECT_TIMEOUT_S", default=3)
DATABASES["default"].setdefault("OPTIONS", {})["connect_timeout"] = DB_CONNECT_TIMEOUT_S
# A peer gone silent mid-transaction (a host cut off from the network: its socket is never
# closed, as a killed process's is) must not hold its row locks for the kernel's two hours
# of TCP keepalive.  The server drops a client silent this long, which ends its transaction
# and frees its locks for the attempt that takes the job over; a process drops a silent
# server so too, instead of waiting on it forever.  Ignored on a Unix socket.
DB_DEAD_PEER_SECONDS = env.int("DB_DEAD_PEER_SECONDS", default=30)
DATABASES["default"]["OPTIONS"].update(dead_peer_options(DB_DEAD_PEER_SECONDS,
                                                         DATABASES["default"]["OPTIONS"].get("options", "")))
if env.bool("OPDWEB_DB_POOL", default=False):
    DATABASES["default"]["CONN_MAX_AGE"] = 0
    DATABASES["default"].setdefault("OPTIONS", {})["pool"] = {"min_size": 2, "max_size": 16,
                                                                  "timeout": DB_CONNECT_TIMEOUT_S + 2}
else:
    DATABASES["default"]["CONN_MAX_AGE"] = env.int("CONN_MAX_AGE", default=60)
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

REDIS_URL = env.str("REDIS_URL")

# Login throttling (django-axes): 5 failed logins for one account, or from one address,
# lock that account (from anywhere) and that address (for any account) for 15 minutes;
# the login page then answers 429 with the lockout page.  A success does not reset the
# count, so interleaving a known password cannot extend the guessing.
AUTHENTICATION_BACKENDS = [
    "axes.backends.AxesStandaloneBackend",
    "django.contrib.auth.backends.ModelBackend",
]
AXES_FAILURE_LIMIT = env.int("LOGIN_FAILURE_LIMIT", default=5)
AXES_COOLOFF_TIME = timedelta(minutes=env.int("LOGIN_LOCKOUT_MINUTES", default=15))
AXES_LOCKOUT_PARAMETERS = ["username", "ip_address"]
AXES_LOCKOUT_TEMPLATE = "registration/locked_out.html"
AXES_RESET_ON_SUCCESS = False

# Writes one API token may make per minute (opdweb/tokens/rate_limit.py); past it, 429 with Retry-After.
API_TOKEN_WRITES_PER_MINUTE = env.int("API_TOKEN_WRITES_PER_MINUTE", default=1200)

# A failed CSRF check under /api/ is a JSON 403 like every other API refusal.
CSRF_FAILURE_VIEW = "opdweb.api.errors.csrf_failure"

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
]
LOGIN_URL = "login"
LOGIN_REDIRECT_URL = "jobs:list"
LOGOUT_REDIRECT_URL = "login"

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = False
USE_TZ = True

STATIC_URL = "static/"
STATICFILES_DIRS = [BASE_DIR / "static"]
STATIC_ROOT = Path(env.str("STATIC_ROOT", default=str(DATA_DIR / "staticfiles")))
WHITENOISE_USE_FINDERS = True
# Hashed names (cached for a year: a changed file gets a new name) and gzip copies made by
# collectstatic, so the 5 MB plotly bundle goes out as ~1.5 MB.
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {"BACKEND": "whitenoise.storage.CompressedManifestStaticFilesStorage"},
}

# A request body above this is refused with 413 before any view runs.
DATA_UPLOAD_MAX_MEMORY_SIZE = env.int("DATA_UPLOAD_MAX_MEMORY_SIZE", default=256 * 1024)
# Under /mlflow/, MLflow's own limit on a request instead (MAX_BATCH_LOG_REQUEST_SIZE, 1 MB).
MLFLOW_MAX_REQUEST_BYTES = env.int("MLFLOW_MAX_REQUEST_BYTES", default=1_000_000)
# The largest W&B request (GraphQL or file stream): the wandb client sends at most 10 MiB
# of file stream at once.
WANDB_MAX_REQUEST_BYTES = env.int("WANDB_MAX_REQUEST_BYTES", default=12 * 1024 * 1024)
# POST /api/runs/<id>/points (the native client's batches, up to 100,000 points) instead.
RUN_POINTS_MAX_REQUEST_BYTES = env.int("RUN_POINTS_MAX_REQUEST_BYTES", default=8_000_000)
# A job config above this many bytes of JSON is refused (400) even if the body fits.
JOB_CONFIG_MAX_BYTES = env.int("JOB_CONFIG_MAX_BYTES", default=64 * 1024)

# Approval webhooks (opdweb/approvals/webhooks.py): attempts per event, first retry delay (doubling).
WEBHOOK_MAX_ATTEMPTS = env.int("WEBHOOK_MAX_ATTEMPTS", default=6)
WEBHOOK_RETRY_SECONDS = env.float("WEBHOOK_RETRY_SECONDS", default=10.0)
# Webhooks go to public addresses over https (opdweb/approvals/webhook_destinations.py);
# these two let an operator allow plain http, or name host:port receivers that are not public.
WEBHOOK_ALLOW_HTTP = env.bool("WEBHOOK_ALLOW_HTTP", default=False)
WEBHOOK_ALLOWED_HOSTS = env.list("WEBHOOK_ALLOWED_HOSTS", default=[])
WEBHOOK_CA_FILE = env.str("WEBHOOK_CA_FILE", default="")  # CAs for receivers' TLS (default: the system's)

# Channel layer: live increments only; the database is the source of truth, so a
# dropped message costs nothing a reconnect cannot recover.  Redis pub/sub: a job's
# message crosses Redis once per web process, which holds one subscription per job and
# fans it out to its own clients (a list layer would push and pop it once per client).
# Pub/sub ignores Redis's database number: every channel name carries this deployment's
# prefix (default: made from its Redis database number and PostgreSQL database name,
# opdweb/deployment.py), so deployments sharing a Redis server never hear each other's jobs.
CHANNEL_PREFIX = env.str("CHANNEL_PREFIX", default=channel_prefix(DATABASES["default"], REDIS_URL))
CHANNEL_LAYERS = {
    "default": {
        "BACKEND": "channels_redis.pubsub.RedisPubSubChannelLayer",
        "CONFIG": {
            "hosts": [{"address": REDIS_URL, "socket_connect_timeout": 5, "socket_keepalive": True}],
            "prefix": CHANNEL_PREFIX,
        },
    }
}

# Celery: one job per GPU worker at a time, acknowledged only when done, redelivered if
# the worker dies.  Results live in PostgreSQL (Job.result), not in a result backend.
CELERY_BROKER_URL = REDIS_URL
CELERY_TASK_ACKS_LATE = True
CELERY_TASK_REJECT_ON_WORKER_LOST = True
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
CELERY_TASK_IGNORE_RESULT = True
CELERY_TASK_DEFAULT_QUEUE = "cpu"
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True
CELERY_BROKER_TRANSPORT_OPTIONS = {
    "visibility_timeout": env.int("CELERY_VISIBILITY_TIMEOUT", default=6 * 3600),
    "socket_connect_timeout": 3,
    # Ten priority steps, 0 taken first across every queue a worker serves: interactive
    # jobs 0-4, batch jobs 5-9 (jobs/scheduling.py).
    "priority_steps": list(range(10)),
}
# A submit while the broker is down answers 503 within about a second, not after minutes.
CELERY_TASK_PUBLISH_RETRY_POLICY = {"max_retries": 2, "interval_start": 0.2, "interval_step": 0.3, "interval_max": 0.5}
CELERY_WORKER_HIJACK_ROOT_LOGGER = False
WATCH_SILENCE_CHECK_SECONDS = env.float("WATCH_SILENCE_CHECK_SECONDS", default=30.0)
CELERY_BEAT_SCHEDULE = {
    # On the control queue, whose worker runs no jobs: nothing long can delay the reaper.
    "reap-stale-jobs": {"task": "opdweb.reap_stale_jobs", "schedule": 15.0, "options": {"queue": "control"}},
    "send-pending-webhooks": {"task": "opdweb.send_pending_webhooks", "schedule": 15.0,
                              "options": {"queue": "control"}},
    # Linked runs gone silent (opdweb/runs/silence.py); their rules say after how long.
    "check-silent-runs": {"task": "opdweb.check_silent_runs", "schedule": WATCH_SILENCE_CHECK_SECONDS,
                          "options": {"queue": "control"}},
}

# Jobs: a worker beats every JOB_HEARTBEAT_SECONDS; a running job whose last beat is
# older than JOB_STALE_SECONDS is reaped.
JOB_HEARTBEAT_SECONDS = env.float("JOB_HEARTBEAT_SECONDS", default=5.0)
JOB_STALE_SECONDS = env.float("JOB_STALE_SECONDS", default=60.0)
# A job's log lines are written and sent to its live page this often.
JOB_LOG_FLUSH_SECONDS = env.float("JOB_LOG_FLUSH_SECONDS", default=0.5)
# A job queued this long whose message is not in the broker (a Redis crash) is sent again.
JOB_RESEND_SECONDS = env.float("JOB_RESEND_SECONDS", default=60.0)
# A job whose checkpoint's store is out of reach is queued again (attempt n waits n - 1 times
# this long), up to JOB_FETCH_ATTEMPTS attempts in all, then fails saying so.
JOB_FETCH_RETRY_SECONDS = env.float("JOB_FETCH_RETRY_SECONDS", default=15.0)
JOB_FETCH_ATTEMPTS = env.int("JOB_FETCH_ATTEMPTS", default=6)
# A parent waiting for its children is woken when one ends, and by the reaper at least this
# often (a wake lost with a worker killed at the wrong moment costs no more than this).
JOB_PARENT_RECHECK_SECONDS = env.float("JOB_PARENT_RECHECK_SECONDS", default=120.0)
# An interactive job that waited this long for a worker makes one running training run stop
# at its next step (checkpoint saved) and queue again behind it (jobs/scheduling.py); a
# negative value never makes way.
JOB_PREEMPT_AFTER_SECONDS = env.float("JOB_PREEMPT_AFTER_SECONDS", default=0.5)
# Each kind has a time limit (workers/science/entrypoints.py); an operator may cap them all.
# A job is asked to stop at its limit and killed with its worker GRACE seconds later.
JOB_TIME_LIMIT_MAX_S = env.float("JOB_TIME_LIMIT_MAX_S", default=None)
JOB_TIME_LIMIT_GRACE_S = env.float("JOB_TIME_LIMIT_GRACE_S", default=60.0)
# The live channel (opdweb/jobs/consumers.py): points a client may have unacknowledged,
# how long it may stay behind before it is closed, how often its access is checked again.
LIVE_WINDOW_POINTS = env.int("LIVE_WINDOW_POINTS", default=20_000)
LIVE_BEHIND_SECONDS = env.float("LIVE_BEHIND_SECONDS", default=30.0)
LIVE_ACCESS_RECHECK_SECONDS = env.float("LIVE_ACCESS_RECHECK_SECONDS", default=5.0)
# A worker counts as alive on the status page if seen within this many seconds.
WORKER_SEEN_SECONDS = env.float("WORKER_SEEN_SECONDS", default=60.0)

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"plain": {"format": "%(asctime)s %(levelname)s %(name)s: %(message)s"}},
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": "plain"}},
    "root": {"handlers": ["console"], "level": env.str("LOG_LEVEL", default="INFO")},
    "loggers": {"django.channels.server": {"level": "WARNING"}},
}
