"""Fixtures for every test: users in each role, a tenant built through the service functions,
and API clients that authenticate with personal access tokens."""
import base64
import email
import os
import signal
import socket
import subprocess
import sys
import time
import uuid

import pytest
from aiosmtpd.controller import Controller
from django.conf import settings
from django.contrib.auth import get_user_model
from rest_framework.test import APIClient

from core.context import Context
from tenants import default_plans
from tenants.models import AddressPlan, AddressSpacePlan, PersonalAccessToken, Role
from tenants.services import add_member, create_tenant
from tests import broker

CTX = Context(actor="test")


@pytest.fixture(scope="session")
def django_db_setup(django_db_setup, django_db_blocker):
    """pytest-django's test database; before it is dropped, the sessions still open on it are
    ended: the agents' pool threads (workers.tasks) keep theirs from one change to the next, as
    a worker does, and DROP DATABASE refuses while any is open."""
    yield
    from django.db import connection

    with django_db_blocker.unblock(), connection.cursor() as cursor:
        cursor.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
                       " WHERE datname = current_database() AND pid <> pg_backend_pid()")


@pytest.fixture(scope="session", autouse=True)
def test_broker():
    """The suite's own RabbitMQ node, started once (and left running for the next run)."""
    broker.start()


@pytest.fixture(autouse=True)
def _fresh_unpermitted_users():
    """Each test's first drift check reads the broker's users without permissions anew: a
    process reuses that list for a minute (workers/agents/storage/rabbitmq_reconciler.py), and a
    test that makes a stale user expects the next drift check to find it."""
    from workers.agents.storage.rabbitmq_reconciler import forget_unpermitted

    forget_unpermitted()


def make_user(username: str, staff: bool = False):
    return get_user_model().objects.create_user(username=username, password="pw-unused-123",
                                                is_staff=staff)


def client_for(user) -> APIClient:
    client = APIClient()
    if user is not None:
        _, token = PersonalAccessToken.issue(user)
        client.credentials(HTTP_AUTHORIZATION=f"Bearer {token}")
    return client


def b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


@pytest.fixture
def owner(db):
    return make_user("olivia")


@pytest.fixture
def admin_member(db):
    return make_user("adam")


@pytest.fixture
def viewer(db):
    return make_user("vera")


@pytest.fixture
def outsider(db):
    return make_user("oscar")


def default_plans_installed() -> None:
    """Transactional tests flush the tables, data migrations included: put the plans back."""
    default_plans.install(AddressPlan, AddressSpacePlan)


@pytest.fixture(scope="session", autouse=True)
def _default_plans_after_every_flush():
    """A transactional test ends with a flush of every table, the plans the migration installed
    included, and Django sends post_migrate after it (as it does to put content types back):
    the plans come back there, so a test never depends on which test ran before it."""
    from django.db.models.signals import post_migrate

    def reinstall(sender, **kwargs):
        if sender.name == "tenants":
            default_plans_installed()

    post_migrate.connect(reinstall, weak=False, dispatch_uid="tests.default_plans")
    yield
    post_migrate.disconnect(dispatch_uid="tests.default_plans")


@pytest.fixture
def tenant(owner, admin_member, viewer, outsider):
    default_plans_installed()
    t = create_tenant(ctx=CTX, slug=f"acme-{uuid.uuid4().hex[:6]}", owner=owner)
    add_member(ctx=CTX, tenant=t, user=admin_member, role=Role.ADMIN)
    add_member(ctx=CTX, tenant=t, user=viewer, role=Role.VIEWER)
    # The outsider owns a tenant of their own, so "not found" is not "has no tenants".
    create_tenant(ctx=CTX, slug=f"other-{uuid.uuid4().hex[:6]}", owner=outsider)
    return t


@pytest.fixture
def api(owner):
    return client_for(owner)


@pytest.fixture
def clients(owner, admin_member, viewer, outsider):
    return {
        "owner": client_for(owner),
        "admin": client_for(admin_member),
        "viewer": client_for(viewer),
        "outsider": client_for(outsider),
        "anonymous": APIClient(),
    }


def space_manifest(name: str, type_: str = "brokered", plan: str | None = None) -> dict:
    plan = plan or ("brokered-single-broker" if type_ == "brokered" else "standard-small")
    return {"apiVersion": "enmasse.io/v1beta1", "kind": "AddressSpace",
            "metadata": {"name": name}, "spec": {"type": type_, "plan": plan}}


def address_manifest(space: str, address: str, type_: str = "queue", plan: str = "brokered-queue",
                     **spec) -> dict:
    return {"apiVersion": "enmasse.io/v1beta1", "kind": "Address",
            "metadata": {"name": f"{space}.{address.lower()}"},
            "spec": {"address": address, "type": type_, "plan": plan, **spec}}


# Mail: a real SMTP server (aiosmtpd) that keeps what it accepts -----------------------------

class Inbox:
    """aiosmtpd's handler: keeps every message the server accepted."""

    def __init__(self):
        self.messages = []

    async def handle_DATA(self, server, session, envelope):
        self.messages.append(email.message_from_bytes(envelope.content))
        return "250 OK"


@pytest.fixture(scope="session")
def smtp_server():
    inbox = Inbox()
    controller = Controller(inbox, hostname="127.0.0.1", port=free_tcp_port())
    controller.start()
    yield controller.port, inbox
    controller.stop()


@pytest.fixture
def mailer(settings, smtp_server):
    """MaaS sending through the real SMTP server, as an operator would configure it."""
    port, inbox = smtp_server
    inbox.messages.clear()
    settings.EMAIL_BACKEND = "django.core.mail.backends.smtp.EmailBackend"
    settings.EMAIL_HOST, settings.EMAIL_PORT, settings.EMAIL_USE_TLS = "127.0.0.1", port, False
    settings.MAAS_PUBLIC_URL = "https://maas.example.com"
    return inbox


# Processes: a Redis of the tests' own and a real Celery worker ------------------------------

REDIS_PORT = int(os.environ.get("MAAS_TEST_REDIS_PORT", "6390"))

# The test broker's management statistics (tests/broker.py): a figure read through the HTTP API
# shows a change up to their sum later (docs/storage.md, "Lag").
BROKER_STATS_EMIT = broker.STATS_EMIT
BROKER_STATS_COPY = broker.STATS_COPY
BROKER_STATS_LAG = BROKER_STATS_EMIT + BROKER_STATS_COPY


def free_tcp_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def port_open(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(0.5)
        return s.connect_ex(("127.0.0.1", port)) == 0


def wait_for(predicate, timeout: float = 30.0, interval: float = 0.1, what: str = "condition"):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")


class RedisServer:
    """redis-server on REDIS_PORT, without persistence: a restart loses every queued task."""

    def __init__(self, port: int):
        self.port = port
        self.proc = None

    def start(self):
        if port_open(self.port):
            return  # left running by an earlier session: use it
        self.proc = subprocess.Popen(
            ["redis-server", "--port", str(self.port), "--bind", "127.0.0.1", "--save", "",
             "--appendonly", "no"], stdout=subprocess.DEVNULL)
        wait_for(lambda: port_open(self.port), 10, what="redis-server")

    def stop(self):
        subprocess.run(["redis-cli", "-p", str(self.port), "shutdown", "nosave"],
                       capture_output=True, timeout=10)
        if self.proc:
            self.proc.wait(timeout=10)
            self.proc = None
        wait_for(lambda: not port_open(self.port), 10, what="redis-server to stop")


@pytest.fixture(scope="session")
def redis_server():
    server = RedisServer(REDIS_PORT)
    server.start()
    yield server
    if server.proc is not None:  # only stop what this run started
        server.stop()


@pytest.fixture(scope="session", autouse=True)
def cache_redis(redis_server):
    """The tests' Redis is Django's cache too, which the agents use (the broker's topic
    exchange type, the router watch): up for every test, not only once a test that asked for
    it ran (seven test files failed when run alone)."""
    return redis_server


class Worker:
    """A real Celery worker process using the test database, running every agent."""

    def __init__(self, database_name: str, log_path=None, **env):
        self.env = dict(os.environ, DJANGO_SETTINGS_MODULE="maas.test_settings",
                        DATABASE_URL=f"postgres://postgres@127.0.0.1:5432/{database_name}",
                        MAAS_LOG_LEVEL="WARNING", **env)
        self.log_path = log_path  # the worker's log lines go there (else to the test's stderr)
        self.proc = None

    def start(self):
        log = open(self.log_path, "ab") if self.log_path else None  # noqa: SIM115 - the child's
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "celery", "-A", "maas", "worker", "-Q",
             settings.CELERY_TASK_DEFAULT_QUEUE, "--concurrency", "2", "--loglevel", "WARNING",
             "--without-gossip", "--without-mingle", "--without-heartbeat"],
            env=self.env, cwd=settings.BASE_DIR, start_new_session=True, stderr=log)
        if log:
            log.close()  # the child has its own copy

    def kill(self):
        """SIGKILL the whole process group: no chance to finish or acknowledge anything."""
        if self.proc and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=10)

    def stop(self):
        if self.proc and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.kill()


@pytest.fixture
def live_worker(transactional_db, redis_server):
    worker = Worker(settings.DATABASES["default"]["NAME"])
    worker.start()
    yield worker
    worker.stop()


# The suite's outcome is settled once pytest has unconfigured: leave without the interpreter's
# finalization, where native libraries' threads (proton, Spark's py4j) can crash the process
# after every test has passed and turn a passing suite into `make: *** [test] Segmentation fault`.
_EXIT_STATUS = pytest.StashKey[int]()


def pytest_sessionfinish(session, exitstatus):
    session.config.stash[_EXIT_STATUS] = int(exitstatus)


@pytest.hookimpl(trylast=True)
def pytest_unconfigure(config):
    status = config.stash.get(_EXIT_STATUS, None)
    if status is not None:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(status)

