"""Fixtures of maasctl's tests: maasctl run as a subprocess (the console script of the venv)
with a settings file of the test's own, against the API of the test database served by
pytest-django's live server; for the end-to-end modules, one router and one Celery worker
(every agent) per module, so that phases become Active and messages flow."""
import os
import subprocess
import sys
from pathlib import Path

import pytest
from django.conf import settings

from config_service import services
from config_service.models import AddressSpace
from tenants.models import PersonalAccessToken
from tests.conftest import CTX, Worker
from tests.router.conftest import ADMIN_PASSWORD
from tests.storage.mqtt_device import MqttRelay
from tests.workers.conftest import router, router_kind, sync  # noqa: F401 - fixtures used here

# The venv's console script, or another install (a venv with `pip install ./cli` alone).
MAASCTL = Path(os.environ.get("MAASCTL_BIN") or Path(sys.executable).with_name("maasctl"))
DATA = Path(__file__).resolve().parent.parent / "data" / "enmasse"


class Maasctl:
    """`maasctl ARGS...` in a subprocess, as a script would run it."""

    def __init__(self, config_path: Path, url: str):
        self.url = url
        self.env = {k: v for k, v in os.environ.items() if not k.startswith("MAASCTL_")}
        self.env["MAASCTL_CONFIG"] = str(config_path)

    def __call__(self, *args: str, input: str | None = None,
                 timeout: float = 90) -> subprocess.CompletedProcess:
        return subprocess.run([str(MAASCTL), *args], input=input, capture_output=True,
                              text=True, env=self.env, timeout=timeout)

    def popen(self, *args: str) -> subprocess.Popen:
        return subprocess.Popen([str(MAASCTL), *args], stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True, env=self.env)

    def login(self, user, *extra: str) -> subprocess.CompletedProcess:
        _, token = PersonalAccessToken.issue(user)
        return self("login", "--url", self.url, "--token", token, *extra)


def ok(result: subprocess.CompletedProcess) -> str:
    """The standard output of a run that must have succeeded."""
    assert result.returncode == 0, (result.returncode, result.stdout, result.stderr)
    return result.stdout


@pytest.fixture
def cli(transactional_db, live_server, redis_server, tmp_path, tenant, owner):
    """maasctl logged in as the tenant's owner (a personal access token)."""
    tool = Maasctl(tmp_path / "owner" / "config.json", live_server.url)
    ok(tool.login(owner))
    return tool


@pytest.fixture
def outsider_cli(transactional_db, live_server, tmp_path, tenant, outsider):
    """maasctl logged in as a user of another tenant, pointed at the tenant's objects."""
    tool = Maasctl(tmp_path / "outsider" / "config.json", live_server.url)
    ok(tool.login(outsider))
    tool.env["MAASCTL_TENANT"] = tenant.slug
    return tool


@pytest.fixture(scope="module")
def worker(django_db_setup, redis_server, router):  # noqa: F811 - the imported fixture
    """A real Celery worker running every agent, pointed at the module's router."""
    w = Worker(settings.DATABASES["default"]["NAME"],
               MAAS_ROUTER_MANAGEMENT_URL=f"amqp://127.0.0.1:{router.mgmt_port}",
               MAAS_ROUTER_ADMIN_PASSWORD=ADMIN_PASSWORD,
               MAAS_ROUTER_AMQP_PORT=str(router.amqp_port))
    w.start()
    yield w
    w.stop()


@pytest.fixture(scope="module")
def mqtt_relay():
    """Brokered spaces' MQTT endpoint: the relay in front of the test node's MQTT listener."""
    relay = MqttRelay()
    yield relay
    relay.stop()


@pytest.fixture
def platform(settings, router, worker, cli, tenant, mqtt_relay):  # noqa: F811 - imported
    """The live server's view of the data plane: its endpoints name the module's router and
    MQTT relay. A space a failed test left behind is torn down, so no vhost or router entity
    outlives it."""
    settings.MAAS_MQTT_RELAY_PORT = mqtt_relay.port
    settings.MAAS_ROUTER_MANAGEMENT_URL = f"amqp://127.0.0.1:{router.mgmt_port}"
    settings.MAAS_ROUTER_ADMIN_USER = "admin"
    settings.MAAS_ROUTER_ADMIN_PASSWORD = ADMIN_PASSWORD
    settings.MAAS_ROUTER_AMQP_PORT = router.amqp_port
    yield cli
    for space in AddressSpace.objects.filter(tenant=tenant):
        services.delete_address_space(ctx=CTX, space=space)
        sync(space)
