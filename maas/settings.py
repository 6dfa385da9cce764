"""Settings for MaaS, read from environment variables with working one-machine defaults.

One module of 540-odd lines: Django reads its settings from one module, and several settings
are derived from or checked against others (the router's ports and the mesh's, the broker
pool and its cluster); each group says what it is for where it starts."""
import ipaddress
import re
from pathlib import Path

from .env import database_from_url, env, env_bool, env_float, env_int, env_list
from .local_secrets import installation_secret

BASE_DIR = Path(__file__).resolve().parent.parent

DEBUG = env_bool("MAAS_DEBUG", False)
MAAS_PRODUCTION = env_bool("MAAS_PRODUCTION", False)
# Secrets an installation run without them makes once, at random (never a constant).
MAAS_SECRETS_DIR = Path(env("MAAS_SECRETS_DIR", str(BASE_DIR / "var" / "secrets")))
SECRET_KEY = env("MAAS_SECRET_KEY") or ""
if not SECRET_KEY:
    if MAAS_PRODUCTION:
        raise RuntimeError("MAAS_SECRET_KEY must be set in production")
    SECRET_KEY = installation_secret(MAAS_SECRETS_DIR, "secret-key")
ALLOWED_HOSTS = env_list("MAAS_ALLOWED_HOSTS", "127.0.0.1,localhost,testserver")
CSRF_TRUSTED_ORIGINS = env_list("MAAS_CSRF_TRUSTED_ORIGINS", "")

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "rest_framework",
    "drf_spectacular",
    "drf_spectacular_sidecar",
    "maas",
    "tenants",
    "tenants.identity",
    "eventlog",
    "config_service",
    "workers",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "maas.csp.ContentSecurityPolicyMiddleware",  # the portal's pages run this site's scripts only
    "maas.control_characters.ControlCharacterMiddleware",  # NUL in a URL: 400, not a 500
    "whitenoise.middleware.WhiteNoiseMiddleware",  # static files straight from the apps
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "tenants.identity.session.SessionRefreshMiddleware",  # provider sign-ins check back
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "maas.request_id.RequestIdMiddleware",
]

ROOT_URLCONF = "maas.urls"
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
            ]
        },
    }
]
WSGI_APPLICATION = "maas.wsgi.application"

DATABASES = {
    "default": database_from_url(env("DATABASE_URL", "postgres://postgres@127.0.0.1:5432/maas"))
}
# Prepared statements: a statement run a fifth time on a connection is prepared, and PostgreSQL
# then neither parses nor plans it again (psycopg's prepare_threshold, with server-side
# parameters, which it needs). Every connection here lives for minutes (CONN_MAX_AGE) and runs
# the same few dozen statements: a create's PostgreSQL CPU fell by a third (docs/scale.md,
# "Prepared statements"). Off for a connection pooler in transaction mode that does not track
# prepared statements (PgBouncer before 1.21, or without max_prepared_statements).
if env_bool("MAAS_DB_PREPARED_STATEMENTS", True):
    DATABASES["default"]["OPTIONS"] = {"server_side_binding": True, "prepare_threshold": 5}
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True
STATIC_URL = "static/"
STATIC_ROOT = BASE_DIR / "var" / "static"
WHITENOISE_USE_FINDERS = True  # no collectstatic step needed to serve the portal and admin

REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": [
        "tenants.authentication.PersonalAccessTokenAuthentication",
        "tenants.identity.authentication.OidcBearerAuthentication",
        "rest_framework.authentication.SessionAuthentication",
    ],
    "DEFAULT_PERMISSION_CLASSES": ["rest_framework.permissions.IsAuthenticated"],
    "DEFAULT_PARSER_CLASSES": [
        "config_service.api.parsers.JSONParser",
        "config_service.api.parsers.YAMLParser",
        "config_service.api.parsers.XYAMLParser",
        "config_service.api.parsers.TextYAMLParser",
    ],
    "DEFAULT_PAGINATION_CLASS": "core.api.pagination.ListPagination",
    "PAGE_SIZE": 100,
    "DEFAULT_SCHEMA_CLASS": "maas.schema.MaasAutoSchema",
    "EXCEPTION_HANDLER": "core.api.errors.exception_handler",
}
SPECTACULAR_SETTINGS = {
    "TITLE": "MaaS API",
    "DESCRIPTION": "Tenants, address spaces, addresses, messaging users and their config events.",
    "VERSION": "v1",
    "SERVE_INCLUDE_SCHEMA": False,
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    "REDOC_DIST": "SIDECAR",
    # Bodies are typed by config_service/api/schemas.py; update bodies are partial already.
    "COMPONENT_SPLIT_PATCH": False,
    # One name per closed set of values, however many fields use it (else: warnings, and
    # clients with one enum class per field).
    "ENUM_NAME_OVERRIDES": {
        "PhaseEnum": "config_service.status.PHASES",
        "AddressSpaceTypeEnum": "config_service.api.schemas.ADDRESS_SPACE_TYPES",
        "AddressTypeEnum": "config_service.api.schemas.ADDRESS_TYPES",
        "OperationEnum": "config_service.api.schemas.OPERATIONS",
        "RoleEnum": "tenants.api.schemas.ROLES",
        "AuthenticationTypeEnum": "config_service.api.schemas.AUTHENTICATION_TYPES",
    },
}

CACHES = {
    "default": {"BACKEND": "django.core.cache.backends.redis.RedisCache",
                "LOCATION": env("REDIS_URL", "redis://127.0.0.1:6379/0")}
}
LOGIN_URL = "login"
LOGIN_REDIRECT_URL = "portal:home"
LOGOUT_REDIRECT_URL = "login"

# Sign-in: an OpenID Connect provider (a Keycloak realm) when MAAS_OIDC_ISSUER is set, local
# accounts otherwise. Endpoints come from the issuer's discovery document (docs/identity.md).
AUTHENTICATION_BACKENDS = [
    "tenants.identity.backend.OidcBackend",
    "django.contrib.auth.backends.ModelBackend",
]
MAAS_OIDC_ISSUER = env("MAAS_OIDC_ISSUER", "")  # e.g. https://sso.example.com/realms/maas
MAAS_OIDC_CLIENT_ID = env("MAAS_OIDC_CLIENT_ID", "maas")
MAAS_OIDC_CLIENT_SECRET = env("MAAS_OIDC_CLIENT_SECRET", "")
MAAS_OIDC_CLIENT_AUTH = env("MAAS_OIDC_CLIENT_AUTH", "client_secret_post")  # or client_secret_basic
MAAS_OIDC_SCOPES = env("MAAS_OIDC_SCOPES", "openid email profile")  # add e.g. "groups" if needed
# API tokens' aud, azp or client_id; default: the client id
MAAS_OIDC_AUDIENCES = env_list("MAAS_OIDC_AUDIENCES", "")
# Claims to roles (comma-separated lists of claim names, read whole first, then as dotted paths,
# so `https://example.com/groups` works too; docs/identity.md has them per provider).
MAAS_OIDC_GROUPS_CLAIM = env_list("MAAS_OIDC_GROUPS_CLAIM", "groups")
MAAS_OIDC_GROUP_PATTERN = env("MAAS_OIDC_GROUP_PATTERN", "/tenants/{tenant}/{role}")
MAAS_OIDC_ROLES_CLAIMS = env_list("MAAS_OIDC_ROLES_CLAIMS",
                                  "realm_access.roles,resource_access.{client_id}.roles,roles")
MAAS_OIDC_ROLE_PATTERN = env("MAAS_OIDC_ROLE_PATTERN", "tenant:{tenant}:{role}")
MAAS_OIDC_STAFF_CLAIM = env_list("MAAS_OIDC_STAFF_CLAIM", "realm_access.roles,roles")
MAAS_OIDC_STAFF_VALUE = env("MAAS_OIDC_STAFF_VALUE", "maas-operator")
MAAS_OIDC_USERNAME_CLAIMS = env_list("MAAS_OIDC_USERNAME_CLAIMS", "preferred_username,email,sub")
MAAS_OIDC_ALGORITHMS = env_list("MAAS_OIDC_ALGORITHMS", "RS256,RS384,RS512,PS256,ES256,ES384")
MAAS_OIDC_LEEWAY = env_int("MAAS_OIDC_LEEWAY", 30)
MAAS_OIDC_TIMEOUT = env_float("MAAS_OIDC_TIMEOUT", 5.0)
MAAS_OIDC_DISCOVERY_MAX_AGE = env_int("MAAS_OIDC_DISCOVERY_MAX_AGE", 3600)
MAAS_OIDC_DISCOVERY_MIN_REFRESH = env_int("MAAS_OIDC_DISCOVERY_MIN_REFRESH", 30)
MAAS_OIDC_JWKS_MAX_AGE = env_int("MAAS_OIDC_JWKS_MAX_AGE", 3600)
MAAS_OIDC_JWKS_MIN_REFRESH = env_int("MAAS_OIDC_JWKS_MIN_REFRESH", 10)
# RFC 7662 for opaque access tokens: the endpoint when the provider's metadata lists none, and
# how long an answer is reused (never past the token's expiry; 0 asks every time).
MAAS_OIDC_INTROSPECTION_ENDPOINT = env("MAAS_OIDC_INTROSPECTION_ENDPOINT", "")
MAAS_OIDC_INTROSPECTION_CACHE = env_int("MAAS_OIDC_INTROSPECTION_CACHE", 60)
# A hanging introspection endpoint must not take the web workers: seconds per call (a failure is
# a 503 with Retry-After) and how many of a host's workers may wait on it at once (the next get
# 503 at once; keep it below the number of web workers).
MAAS_OIDC_INTROSPECTION_TIMEOUT = env_float("MAAS_OIDC_INTROSPECTION_TIMEOUT", 2.0)
MAAS_OIDC_INTROSPECTION_CONCURRENCY = env_int("MAAS_OIDC_INTROSPECTION_CONCURRENCY", 1)
if MAAS_OIDC_CLIENT_AUTH not in ("client_secret_post", "client_secret_basic"):
    raise RuntimeError("MAAS_OIDC_CLIENT_AUTH must be client_secret_post or client_secret_basic, "
                       f"not {MAAS_OIDC_CLIENT_AUTH!r}")
if MAAS_PRODUCTION and MAAS_OIDC_ISSUER and not MAAS_OIDC_CLIENT_SECRET:
    raise RuntimeError("MAAS_OIDC_CLIENT_SECRET must be set with MAAS_OIDC_ISSUER in production")

# A browser session from a provider sign-in checks back with the provider (a refresh-token
# grant) whenever its access token expires; one disabled or signed out there is signed out here.
# An unreachable provider is tolerated for this many seconds (docs/identity.md).
MAAS_OIDC_REFRESH_GRACE = env_int("MAAS_OIDC_REFRESH_GRACE", 300)

# Mail, for invitations: SMTP when MAAS_SMTP_HOST is set, else written to the log (one machine).
MAAS_SMTP_HOST = env("MAAS_SMTP_HOST", "")
EMAIL_BACKEND = ("django.core.mail.backends.smtp.EmailBackend" if MAAS_SMTP_HOST
                 else "django.core.mail.backends.console.EmailBackend")
EMAIL_HOST = MAAS_SMTP_HOST or "localhost"
EMAIL_PORT = env_int("MAAS_SMTP_PORT", 587)
EMAIL_HOST_USER = env("MAAS_SMTP_USER", "")
EMAIL_HOST_PASSWORD = env("MAAS_SMTP_PASSWORD", "")
EMAIL_USE_TLS = env_bool("MAAS_SMTP_STARTTLS", True)
EMAIL_TIMEOUT = env_int("MAAS_SMTP_TIMEOUT", 10)
DEFAULT_FROM_EMAIL = env("MAAS_EMAIL_FROM", "MaaS <maas@localhost>")
MAAS_PUBLIC_URL = env("MAAS_PUBLIC_URL", "")  # for links in mails; else the request's host
MAAS_INVITATION_DAYS = env_int("MAAS_INVITATION_DAYS", 7)

# /metrics names every tenant and address space: with a token set, only a scrape that sends
# `Authorization: Bearer <token>` reads it; without one, only clients on this machine do.
MAAS_METRICS_TOKEN = env("MAAS_METRICS_TOKEN", "") or ""

# Celery: Redis is the broker of the control plane (RabbitMQ belongs to the tenants).
REDIS_URL = env("REDIS_URL", "redis://127.0.0.1:6379/0")
CELERY_BROKER_URL = env("CELERY_BROKER_URL", REDIS_URL)
CELERY_TASK_IGNORE_RESULT = True
CELERY_TASK_ACKS_LATE = True  # a killed worker's task goes back to the queue
CELERY_TASK_REJECT_ON_WORKER_LOST = True
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
CELERY_BROKER_TRANSPORT_OPTIONS = {"visibility_timeout": env_int("MAAS_CELERY_VISIBILITY", 300)}
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True
# Celery's Django fixup closes the database connection before and after every task unless this
# is set, and then only every this many tasks: a new PostgreSQL backend for every task (a
# change, a watch tick), about a third of PostgreSQL's CPU per change. Workers keep their
# connections as the web does instead, CONN_MAX_AGE and health alike (maas/celery.py).
CELERY_DB_REUSE_MAX = 1_000_000
CELERY_TASK_DEFAULT_QUEUE = env("MAAS_CELERY_QUEUE", "maas")  # changes: reconcile_space
# Resync and usage work have queues of their own, so that a change never waits behind them;
# a worker started without -Q consumes all three.
MAAS_RESYNC_QUEUE = f"{CELERY_TASK_DEFAULT_QUEUE}-resync"
MAAS_USAGE_QUEUE = f"{CELERY_TASK_DEFAULT_QUEUE}-usage"
# The router and broker watches and the outbox relay: short ticks that must never wait behind
# a backlog of changes (in the change queue a 100k fill's backlog holds them for minutes, relay
# ticks piling up by the hundred).
MAAS_WATCH_QUEUE = f"{CELERY_TASK_DEFAULT_QUEUE}-watch"
CELERY_TASK_QUEUES = {q: {} for q in (CELERY_TASK_DEFAULT_QUEUE, MAAS_RESYNC_QUEUE,
                                      MAAS_USAGE_QUEUE, MAAS_WATCH_QUEUE)}
CELERY_TASK_ROUTES = {"maas.workers.resync_all": {"queue": MAAS_RESYNC_QUEUE},
                      # Beside the sampling, not behind a full resync's thousand drift checks
                      # (there it expired unrun at 100k addresses); the background worker
                      # serves both queues in turn.
                      "maas.workers.read_router_tables": {"queue": MAAS_USAGE_QUEUE},
                      "maas.workers.watch_router": {"queue": MAAS_WATCH_QUEUE},
                      "maas.workers.watch_broker": {"queue": MAAS_WATCH_QUEUE},
                      "maas.workers.relay_outbox": {"queue": MAAS_WATCH_QUEUE},
                      "maas.workers.sample_usage": {"queue": MAAS_USAGE_QUEUE},
                      "maas.workers.run_usage_job": {"queue": MAAS_USAGE_QUEUE}}
# How often the router watch reads the router's uptime (a restarted router is empty: its spaces
# are restored at once), and how many spaces it restores at a time. The restores are threads of
# one process; since they share one snapshot of the router per thread, most of a space's
# restore is waiting for its connector and autoLinks to reach the broker, so threads overlap
# well (100 spaces of 10 addresses, 2 CPUs: 1 thread 10.1 s, 4 threads 6.5 s, 8 threads 5.7 s).
MAAS_ROUTER_WATCH_INTERVAL = env_float("MAAS_ROUTER_WATCH_INTERVAL", 1.0)
MAAS_ROUTER_RESTORE_CONCURRENCY = env_int("MAAS_ROUTER_RESTORE_CONCURRENCY", 4)
# How often the broker watch (workers/agents/storage/watch.py) looks for its transient marker
# exchange in this vhost of each broker of the pool: gone, the broker restarted and dropped MaaS's
# transient exchanges, which the storage controller then makes again.
MAAS_BROKER_WATCH_INTERVAL = env_float("MAAS_BROKER_WATCH_INTERVAL", 5.0)
MAAS_BROKER_WATCH_VHOST = env("MAAS_BROKER_WATCH_VHOST", "/")
CELERY_BEAT_SCHEDULE = {
    "router-watch": {
        "task": "maas.workers.watch_router",
        "schedule": MAAS_ROUTER_WATCH_INTERVAL,
        "options": {"expires": MAAS_ROUTER_WATCH_INTERVAL},  # stale ticks are dropped
    },
    "broker-watch": {
        "task": "maas.workers.watch_broker",
        "schedule": MAAS_BROKER_WATCH_INTERVAL,
        "options": {"expires": MAAS_BROKER_WATCH_INTERVAL},
    },
    "outbox-relay": {
        "task": "maas.workers.relay_outbox",
        "schedule": env_float("MAAS_RELAY_INTERVAL", 5.0),
        "options": {"expires": env_float("MAAS_RELAY_INTERVAL", 5.0)},
    },
    "sample-usage": {
        "task": "maas.workers.sample_usage",
        "schedule": env_float("MAAS_USAGE_SAMPLE_INTERVAL", 60.0),
    },
    "usage-job-nightly": {  # yesterday, complete
        "task": "maas.workers.run_usage_job",
        "schedule": __import__("celery.schedules").schedules.crontab(minute=15, hour=0),
    },
    "usage-job-today": {  # today so far: quota breaches are enforced within the hour
        "task": "maas.workers.run_usage_job",
        "schedule": env_float("MAAS_USAGE_TODAY_INTERVAL", 3600.0),
        "kwargs": {"day": "today"},
    },
    "read-router-tables": {  # when due: workers/agents/router/tables.py, `refresh`
        "task": "maas.workers.read_router_tables",
        "schedule": env_float("MAAS_RESYNC_INTERVAL", 60.0),
        "options": {"expires": env_float("MAAS_RESYNC_INTERVAL", 60.0)},
    },
    "resync-all": {
        "task": "maas.workers.resync_all",
        "schedule": env_float("MAAS_RESYNC_INTERVAL", 60.0),
        # Behind a backlog of resync work a late tick would only queue what waits already.
        "options": {"expires": env_float("MAAS_RESYNC_INTERVAL", 60.0)},
    },
}

# Agents. "inline": every agent runs inside the Celery worker (one machine);
# "process": one `manage.py run_agent` process per address space (how Kubernetes runs them).
MAAS_AGENT_MODE = env("MAAS_AGENT_MODE", "inline")
MAAS_WEB_WORKERS = env_int("MAAS_WEB_WORKERS", 2)
# Where `make run`'s supervisor keeps its processes' state for /readyz (it sets this for the
# processes it starts); empty elsewhere, where Kubernetes watches the pods.
MAAS_PROCESS_STATE_FILE = env("MAAS_PROCESS_STATE_FILE", "")
MAAS_WORKER_CONCURRENCY = env_int("MAAS_WORKER_CONCURRENCY", 4)
# More processes for `manage.py runplatform`, e.g. the embedded router: {name: argv}.
MAAS_EXTRA_PROCESSES: dict[str, list[str]] = {}
MAAS_RELAY_AFTER_SECONDS = env_float("MAAS_RELAY_AFTER_SECONDS", 10.0)
# The relay's longest wait between two re-sends of a space's unacknowledged events: each wait
# is twice the one before (an agent that fails on a change every time is retried at 10, 20,
# 40 ... s, then every 5 minutes, not every 10 s for ever; workers/tasks.py).
MAAS_RELAY_MAX_BACKOFF_SECONDS = env_float("MAAS_RELAY_MAX_BACKOFF_SECONDS", 300.0)
MAAS_RESYNC_INTERVAL = env_float("MAAS_RESYNC_INTERVAL", 60.0)
# How often a quiet space is checked for drift, in seconds: each resync tick checks that share
# of the spaces (workers/tasks.py). A longer period costs less at rest (at 100k on two cores
# the checks and what they ask of the brokers and the router were about half a core at 300 s,
# docs/scale.md) and leaves drift that no watch notices uncorrected for longer.
MAAS_DRIFT_CHECK_PERIOD = env_float("MAAS_DRIFT_CHECK_PERIOD", 300.0)
if MAAS_DRIFT_CHECK_PERIOD < MAAS_RESYNC_INTERVAL:
    raise RuntimeError("MAAS_DRIFT_CHECK_PERIOD must be at least MAAS_RESYNC_INTERVAL "
                       f"({MAAS_RESYNC_INTERVAL:g} s), not {MAAS_DRIFT_CHECK_PERIOD:g}")

# RabbitMQ: the broker of the tenants' address spaces.
RABBITMQ_API_URL = env("RABBITMQ_API_URL", "http://127.0.0.1:15672/api")
RABBITMQ_API_USER = env("RABBITMQ_API_USER", "guest")
RABBITMQ_API_PASSWORD = env("RABBITMQ_API_PASSWORD", "guest")
RABBITMQ_AMQP_HOST = env("RABBITMQ_AMQP_HOST", "127.0.0.1")
RABBITMQ_AMQP_PORT = env_int("RABBITMQ_AMQP_PORT", 5672)
RABBITMQ_MQTT_PORT = env_int("RABBITMQ_MQTT_PORT", 1884)  # its own MQTT listener: the relay's
# Its TLS listeners (deploy/local/services.sh; node k of the pool: AMQPS 5660+k, MQTTS 8870+k),
# certificate signed by the internal CA below. The embedded router's connectors and the relays
# reach RabbitMQ on these, checking that certificate: a router's login and a tenant's relayed
# one never cross in clear text (qdrouterd reaches them through its vhost relay). 0, or no
# internal CA: plain, on the ports above.
RABBITMQ_AMQPS_PORT = env_int("RABBITMQ_AMQPS_PORT", 5671)
RABBITMQ_MQTTS_PORT = env_int("RABBITMQ_MQTTS_PORT", 8884)
# Brokered spaces' MQTT clients reach RabbitMQ through the vhost relay in MQTT mode, which
# scopes each client id to its space (`make run` starts one per broker; docs/storage.md).
MAAS_MQTT_RELAY_HOST = env("MAAS_MQTT_RELAY_HOST", "127.0.0.1")
MAAS_MQTT_RELAY_PORT = env_int("MAAS_MQTT_RELAY_PORT", 1886)
MAAS_MQTT_RELAY_TLS_PORT = env_int("MAAS_MQTT_RELAY_TLS_PORT", 8886)  # MQTTS (0: none)
# Brokered spaces' AMQP clients likewise, through the relay in `brokered-amqp` mode: their
# login names the space and the address names work bare (docs/storage.md, "Address names").
# RabbitMQ's own AMQP port (RABBITMQ_AMQP_PORT) still serves its own address forms.
MAAS_BROKERED_AMQP_PORT = env_int("MAAS_BROKERED_AMQP_PORT", 5678)
MAAS_BROKERED_AMQPS_PORT = env_int("MAAS_BROKERED_AMQPS_PORT", 5679)  # 0: no AMQPS
# Placement over several brokers (docs/storage.md, "Several local brokers"): the broker above
# and MAAS_RABBITMQ_NODES - 1 more on this host, independent nodes (not a cluster) started by
# deploy/local/rabbitmq-nodes.sh, node k with AMQP on 5680+k, management on 15680+k and MQTT
# on 1890+k (its MQTT relay on 1900+k, MQTTS 1910+k; its brokered-amqp relay on 5700+k, AMQPS
# 5710+k). Each new space goes to the broker holding the fewest spaces, and stays there.
MAAS_RABBITMQ_NODES = env_int("MAAS_RABBITMQ_NODES", 1)
if not 1 <= MAAS_RABBITMQ_NODES <= 9:
    raise RuntimeError("MAAS_RABBITMQ_NODES must be between 1 and 9")
# A broker that survives a node (config_service/brokers.py, docs/storage.md): "A-B" makes the
# local nodes maasA..maasB (deploy/local/rabbitmq-nodes.sh cluster A B) one clustered broker
# of the pool, `cluster`, in place of the independent nodes of MAAS_RABBITMQ_NODES; its spaces'
# queues are quorum queues and every client of it fails over between its nodes. "": none.
MAAS_RABBITMQ_CLUSTER = env("MAAS_RABBITMQ_CLUSTER", "")
if MAAS_RABBITMQ_CLUSTER and not re.fullmatch(r"[1-8]-[1-8]", MAAS_RABBITMQ_CLUSTER):
    raise RuntimeError("MAAS_RABBITMQ_CLUSTER must be A-B, two node numbers 1..8")
# At most this many spaces (each a vhost) per broker of the pool; a new space finding every
# broker full is refused with a 503 (0: no bound). What one RabbitMQ 3.10 node serves well:
# docs/scale.md, "What one broker node serves".
MAAS_BROKER_MAX_SPACES = env_int("MAAS_BROKER_MAX_SPACES", 500)
if MAAS_BROKER_MAX_SPACES < 0:
    raise RuntimeError("MAAS_BROKER_MAX_SPACES must be 0 (no bound) or more")
# EnMasse's per-address memory cap: broker credit x this many bytes (globalMaxSize).
MAAS_BROKER_GLOBAL_MAX_SIZE = env_int("MAAS_BROKER_GLOBAL_MAX_SIZE", 1 << 30)
# Brokered spaces' messaging users on RabbitMQ (user limits: over all their connections), and
# the bytes an MQTT session queue outside the space's addresses may hold (docs/security.md).
MAAS_BROKER_MAX_CONNECTIONS_PER_USER = env_int("MAAS_BROKER_MAX_CONNECTIONS_PER_USER", 100)
MAAS_BROKER_MAX_CHANNELS_PER_USER = env_int("MAAS_BROKER_MAX_CHANNELS_PER_USER", 500)
MAAS_BROKER_MQTT_QUEUE_MAX_BYTES = env_int("MAAS_BROKER_MQTT_QUEUE_MAX_BYTES", 16 << 20)
# The router of standard address spaces (the embedded one on one machine, qdrouterd elsewhere).
MAAS_ROUTER_ENABLED = env_bool("MAAS_ROUTER_ENABLED", True)
# `runplatform` starts the embedded router; turn off when a qdrouterd is configured instead.
MAAS_RUN_EMBEDDED_ROUTER = env_bool("MAAS_RUN_EMBEDDED_ROUTER", True)
# The embedded router's usage counters and configuration journal, read back at each start
# (runtime state, never in git). A platform on a database of its own (a bench) gives it a
# directory of its own: a journal restores the spaces of the database it was written for.
MAAS_ROUTER_STATE_DIR = env("MAAS_ROUTER_STATE_DIR", str(BASE_DIR / "var" / "router-state"))
# amqps://: over TLS, the router presenting the platform's certificate (MAAS_ROUTER_TLS_CERT),
# which the agents check, so the admin's password never crosses in clear (docs/security.md).
MAAS_ROUTER_MANAGEMENT_URL = env("MAAS_ROUTER_MANAGEMENT_URL", "amqps://127.0.0.1:5675")
MAAS_ROUTER_ADMIN_USER = env("MAAS_ROUTER_ADMIN_USER", "admin")
# Router management: random per installation unless set; internal to the control plane.
MAAS_ROUTER_ADMIN_PASSWORD = env("MAAS_ROUTER_ADMIN_PASSWORD") or ""
if not MAAS_ROUTER_ADMIN_PASSWORD:
    if MAAS_PRODUCTION and MAAS_ROUTER_ENABLED:
        raise RuntimeError("MAAS_ROUTER_ADMIN_PASSWORD must be set in production")
    MAAS_ROUTER_ADMIN_PASSWORD = installation_secret(MAAS_SECRETS_DIR, "router-admin-password")
# The auth service routers delegate messaging clients' SASL to (`manage.py run_authservice`).
MAAS_AUTH_SERVICE_HOST = env("MAAS_AUTH_SERVICE_HOST", "127.0.0.1")
MAAS_AUTH_SERVICE_PORT = env_int("MAAS_AUTH_SERVICE_PORT", 5676)
# Its TLS certificate and key (made self-signed for make run if missing), and the CA the routers
# check it against (that certificate itself unless set): a router relays logins only to the
# service that proves this identity. An empty MAAS_AUTH_SERVICE_TLS_CERT: plain, unchecked.
MAAS_AUTH_SERVICE_TLS_CERT = env("MAAS_AUTH_SERVICE_TLS_CERT",
                                 str(BASE_DIR / "var" / "authservice-tls" / "cert.pem"))
MAAS_AUTH_SERVICE_TLS_KEY = env("MAAS_AUTH_SERVICE_TLS_KEY",
                                str(BASE_DIR / "var" / "authservice-tls" / "key.pem"))
MAAS_AUTH_SERVICE_CA = env("MAAS_AUTH_SERVICE_CA", "") or MAAS_AUTH_SERVICE_TLS_CERT
# "auto": TLS to the auth service when make run starts the embedded router; plain with a
# router started elsewhere, and with qdrouterd, which builds a TLS context for every login it
# relays (under a flood of unknown logins a tenant's own got 1 in 4 through,
# tests/bench/bench_hostile_logins.py). "true" or "false" decide for every router.
MAAS_AUTH_SERVICE_TLS = env("MAAS_AUTH_SERVICE_TLS", "auto")
# Its threads that check logins against the database, one connection each: the most database
# connections logins take, however many arrive at once.
MAAS_AUTH_SERVICE_WORKERS = env_int("MAAS_AUTH_SERVICE_WORKERS", 4)
# Seconds a peer of the auth service (and a client of the embedded router or the MQTT gateway)
# has to finish its handshake (TLS, SASL or CONNECT): a peer that sends nothing is closed then.
MAAS_HANDSHAKE_TIMEOUT = env_float("MAAS_HANDSHAKE_TIMEOUT", 5.0)
# Per source address, on the embedded router's and the MQTT gateway's client listeners
# (dataplane/admission.py): connections still logging in, and new connections a second on
# average and at once; past them a connection is closed at accept.
MAAS_PENDING_PER_HOST = env_int("MAAS_PENDING_PER_HOST", 64)
MAAS_PENDING_TOTAL = env_int("MAAS_PENDING_TOTAL", 4096)
MAAS_CONNECT_RATE_PER_HOST = env_float("MAAS_CONNECT_RATE_PER_HOST", 100.0)
MAAS_CONNECT_BURST_PER_HOST = env_float("MAAS_CONNECT_BURST_PER_HOST", 200.0)
MAAS_ROUTER_HOST = env("MAAS_ROUTER_HOST", "127.0.0.1")
MAAS_ROUTER_AMQP_PORT = env_int("MAAS_ROUTER_AMQP_PORT", 5673)
MAAS_ROUTER_AMQPS_PORT = env_int("MAAS_ROUTER_AMQPS_PORT", 5674)
MAAS_ROUTER_METRICS_PORT = env_int("MAAS_ROUTER_METRICS_PORT", 8091)
MAAS_ROUTER_METRICS_HOST = env("MAAS_ROUTER_METRICS_HOST", "127.0.0.1")  # not MAAS_ROUTER_HOST
# A router network on one machine (config_service/routers.py, docs/router.md "The router
# network"): MAAS_ROUTER_MESH qdrouterd interior routers meshed over mutual TLS, every standard
# space configured on each, clients given each as a failover list. Router 1 has the ports
# above and its inter-router listener on MAAS_ROUTER_MESH_PORT_BASE; router k = 2.. has AMQP,
# AMQPS, management, metrics and inter-router on MAAS_ROUTER_MESH_PORT_BASE + 10 (k-1) + 0..4.
# More than one needs qdrouterd (QDROUTERD): the embedded router is not meshed.
MAAS_ROUTER_MESH = env_int("MAAS_ROUTER_MESH", 1)
if not 1 <= MAAS_ROUTER_MESH <= 9:
    raise RuntimeError("MAAS_ROUTER_MESH must be between 1 and 9")
MAAS_ROUTER_MESH_PORT_BASE = env_int("MAAS_ROUTER_MESH_PORT_BASE", 5720)
# The internal links' CA (ca.pem, ca-key.pem; deploy/local/services.sh makes it, or the first
# process that needs it) and the certificates it signed: each router's of the mesh, the vhost
# relays' facing the routers, RabbitMQ's TLS listeners' (docs/security.md, "Internal links").
# On Kubernetes only the bundle, ca.pem, mounted from the Secret maas-internal-ca (the CA's key
# is read through the API: workers/infra/internal_ca.py).
MAAS_INTERNAL_TLS_DIR = env("MAAS_INTERNAL_TLS_DIR", str(BASE_DIR / "var" / "internal-tls"))
# The MQTT gateway of standard spaces (dataplane/gateway, docs/mqtt.md): 1883 is Mosquitto's
# and 1884 RabbitMQ's MQTT; it reaches the router's AMQP listener as each client's user.
MAAS_MQTT_GATEWAY_ENABLED = env_bool("MAAS_MQTT_GATEWAY_ENABLED", True)
MAAS_MQTT_GATEWAY_HOST = env("MAAS_MQTT_GATEWAY_HOST", "127.0.0.1")
MAAS_MQTT_GATEWAY_PORT = env_int("MAAS_MQTT_GATEWAY_PORT", 1885)
MAAS_MQTT_GATEWAY_TLS_PORT = env_int("MAAS_MQTT_GATEWAY_TLS_PORT", 8885)
# Its Prometheus figures (deploy/monitoring scrapes them); loopback by default, 0 = none.
MAAS_MQTT_GATEWAY_METRICS_HOST = env("MAAS_MQTT_GATEWAY_METRICS_HOST", "127.0.0.1")
MAAS_MQTT_GATEWAY_METRICS_PORT = env_int("MAAS_MQTT_GATEWAY_METRICS_PORT", 8092)
MAAS_MQTT_GATEWAY_ROUTER_HOST = env("MAAS_MQTT_GATEWAY_ROUTER_HOST", "127.0.0.1")
# It logs in to the router as each client's user, with the client's password: over the router's
# AMQPS listener, checking the platform's certificate (MAAS_ROUTER_TLS_CERT), unless false.
MAAS_MQTT_GATEWAY_ROUTER_TLS = env_bool("MAAS_MQTT_GATEWAY_ROUTER_TLS", True)
# The address plan of the subscription addresses that keep persistent sessions' QoS 1 messages.
MAAS_MQTT_SESSION_PLAN = env("MAAS_MQTT_SESSION_PLAN", "standard-small-subscription")
# Where the router agent writes the TLS files of spaces' connectors to remote endpoints
# (spec.connectors: CA, client certificate and key, mode 0600), for qdrouterd to read.
MAAS_CONNECTOR_TLS_DIR = env("MAAS_CONNECTOR_TLS_DIR", str(BASE_DIR / "var" / "connector-tls"))
# Networks that spaces' connectors may reach beyond the internet's public addresses (CIDRs,
# comma-separated; default none): a connector to a loopback, private or link-local address is
# refused, since the platform's own router would dial it (config_service/space_connectors.py).
MAAS_CONNECTOR_ALLOWED_NETWORKS = [  # a bad network stops the start, naming it
    str(ipaddress.ip_network(n.strip(), strict=False))
    for n in env("MAAS_CONNECTOR_ALLOWED_NETWORKS", "").split(",") if n.strip()]
# Where a router without the connector virtualHost extension (qdrouterd) reaches the local
# RabbitMQ: the vhost relay (dataplane/vhost_relay/) picks the vhost from the login.
MAAS_VHOST_RELAY_HOST = env("MAAS_VHOST_RELAY_HOST", "127.0.0.1")
MAAS_VHOST_RELAY_PORT = env_int("MAAS_VHOST_RELAY_PORT", 5677)
# Per address space (vhost policy): the operator's defaults. An address space plan's
# router_policy (admin) overrides each value for its spaces; a tenant cannot set them.
MAAS_ROUTER_POLICY = {
    "maxConnections": env_int("MAAS_ROUTER_MAX_CONNECTIONS", 1000),
    "maxConnectionsPerUser": env_int("MAAS_ROUTER_MAX_CONNECTIONS_PER_USER", 100),
    # none by default (0): the MQTT gateway's connections all come from its one address
    "maxConnectionsPerHost": env_int("MAAS_ROUTER_MAX_CONNECTIONS_PER_HOST", 0),
    "maxSessions": env_int("MAAS_ROUTER_MAX_SESSIONS", 100),
    "maxSenders": env_int("MAAS_ROUTER_MAX_SENDERS", 500),
    "maxReceivers": env_int("MAAS_ROUTER_MAX_RECEIVERS", 500),
    # bytes of one message (EnMasse's maxMessageSize): a larger one is rejected, its link and
    # connection closed (amqp:link:message-size-exceeded), before the router holds it whole
    "maxMessageSize": env_int("MAAS_ROUTER_MAX_MESSAGE_SIZE", 1 << 20),
}
# The platform's TLS certificate (PEM) of the router's AMQPS, the MQTT gateway's MQTTS and the
# brokered spaces' AMQPS and MQTTS; `runplatform` makes a self-signed one here if missing.
MAAS_ROUTER_TLS_CERT = env("MAAS_ROUTER_TLS_CERT", str(BASE_DIR / "var" / "router-tls" / "cert.pem"))
MAAS_ROUTER_TLS_KEY = env("MAAS_ROUTER_TLS_KEY", str(BASE_DIR / "var" / "router-tls" / "key.pem"))
# Certificates per space endpoint (spec.endpoints, workers/certificates.py): the workers write
# each endpoint host's chain and key under this directory, where the TLS listeners of the
# embedded router, the MQTT gateway and the brokered spaces' relays look them up by SNI.
MAAS_SPACE_TLS_DIR = env("MAAS_SPACE_TLS_DIR", str(BASE_DIR / "var" / "space-tls"))
# An endpoint without expose.routeHost gets <endpoint>.<space>.<tenant>.<this domain>.
MAAS_ENDPOINT_DOMAIN = env("MAAS_ENDPOINT_DOMAIN", "localhost")
# Usage metering: where samples go (a directory, or any Hadoop FS URL Spark can read), how often.
MAAS_USAGE_STORE = env("MAAS_USAGE_STORE", str(BASE_DIR / "var" / "usage"))
MAAS_USAGE_SAMPLE_INTERVAL = env_float("MAAS_USAGE_SAMPLE_INTERVAL", 60.0)
# Where the routers and brokers of standard spaces run: "local" (processes on this machine,
# `make run`) or "kubernetes" (the infra controller, workers/infra, docs/deploy.md).
MAAS_INFRA_BACKEND = env("MAAS_INFRA_BACKEND", "local")
MAAS_INFRA_NAMESPACE = env("MAAS_INFRA_NAMESPACE", "maas")
# Qpid Dispatch Router (not skupper-router: no link routes, no vhost policies; docs/deploy.md).
MAAS_ROUTER_IMAGE = env("MAAS_ROUTER_IMAGE", "quay.io/interconnectedcloud/qdrouterd:1.17.1")
MAAS_BROKER_IMAGE = env("MAAS_BROKER_IMAGE", "ghcr.io/maas-project/maas-rabbitmq:0.1.0")  # deploy/rabbitmq/Dockerfile
MAAS_CONTROL_PLANE_IMAGE = env("MAAS_CONTROL_PLANE_IMAGE", "ghcr.io/maas-project/maas:0.1.0")
# Nodes of each Kubernetes broker of a standard space (a plan's infra config may say more):
# from 2 on a RabbitMQ cluster with quorum queues, which loses no acknowledged message with a
# node (docs/deploy.md); 1 for a cluster where a broker's restart may pause its queues.
MAAS_BROKER_REPLICAS = env_int("MAAS_BROKER_REPLICAS", 3)
if not 1 <= MAAS_BROKER_REPLICAS <= 16:
    raise RuntimeError("MAAS_BROKER_REPLICAS must be between 1 and 16")
MAAS_BROKER_STORAGE = env("MAAS_BROKER_STORAGE", "2Gi")
MAAS_BROKER_STORAGE_CLASS = env("MAAS_BROKER_STORAGE_CLASS", "")
# The infra configs plans name in infraConfigRef, as JSON beyond the built-in `default` and
# `default-minimal` (config_service/infra_configs.py): router and broker sizes per space.
MAAS_INFRA_CONFIGS = env("MAAS_INFRA_CONFIGS", "")
MAAS_ROUTER_SERVICE_TYPE = env("MAAS_ROUTER_SERVICE_TYPE", "ClusterIP")
MAAS_INFRA_CONFIG_MAP = env("MAAS_INFRA_CONFIG_MAP", "maas-config")
MAAS_INFRA_SECRET = env("MAAS_INFRA_SECRET", "maas-secrets")
# Where the spaces' routers relay SASL: the auth service's Service (deploy/base/authservice.yaml)
# in MAAS_INFRA_NAMESPACE unless a host is set.
MAAS_INFRA_AUTH_SERVICE_HOST = env("MAAS_INFRA_AUTH_SERVICE_HOST", "")
MAAS_INFRA_AUTH_SERVICE_PORT = env_int("MAAS_INFRA_AUTH_SERVICE_PORT", 5676)
# The CA (PEM file) that certifies an auth service elsewhere (MAAS_INFRA_AUTH_SERVICE_HOST):
# the spaces' routers check it against this. Unset or not there: the internal CA bundle, or the
# ca.crt of an operator's own maas-authservice-tls Secret. The link is TLS either way.
MAAS_INFRA_AUTH_SERVICE_CA = env("MAAS_INFRA_AUTH_SERVICE_CA", "")
# The host clients are told to connect to (endpoints in address space status).
MAAS_PUBLIC_HOST = env("MAAS_PUBLIC_HOST", "127.0.0.1")

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"json": {"()": "maas.logs.JsonFormatter"}},
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": "json"}},
    "root": {"handlers": ["console"], "level": env("MAAS_LOG_LEVEL", "INFO")},
    "loggers": {"django.db.backends": {"level": "WARNING"}, "proton": {"level": "WARNING"}},
}
