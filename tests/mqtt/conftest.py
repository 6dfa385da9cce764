"""Fixtures of the MQTT gateway tests: the gateway process (`manage.py run_mqtt_gateway`)
against a real embedded router (with the database-backed auth service) and RabbitMQ, a standard
space made through the service functions and reconciled by the real agents, and paho clients."""
import os
import subprocess
import sys
import threading
import uuid

import paho.mqtt.client as mqtt
import pytest
from django.conf import settings as django_settings

from config_service import services
from config_service.models import AddressSpace
from tests.conftest import CTX, b64
from tests.router.conftest import ADMIN_PASSWORD, ROOT, free_port, terminate, wait_port
from tests.workers.conftest import router, router_kind, sync  # noqa: F401

# qdrouterd's half runs in make test, not in make test-quick (the inner loop).
ROUTER_KINDS = ["embedded", pytest.param("qdrouterd", marks=pytest.mark.slow)]

PASSWORD = "app-password"
pytestmark = pytest.mark.django_db(transaction=True)


def pytest_generate_tests(metafunc):
    """Modules with BOTH_ROUTERS run against the embedded router and against qdrouterd 1.19
    (where `QDROUTERD` names a build; skipped with the reason elsewhere), as tests/workers."""
    if "router_kind" in metafunc.fixturenames:
        both = getattr(metafunc.module, "BOTH_ROUTERS", False)
        metafunc.parametrize("router_kind", ROUTER_KINDS if both else ["embedded"],
                             scope="module")


class GatewayProcess:
    """The gateway on free ports, pointed at the test router and the test database; it can be
    restarted on the same ports."""

    def __init__(self, router_port: int, tls_cert: str | None = None, tls_key: str | None = None,
                 more_routers: tuple = (), router_ca: str | None = None):
        self.port, self.tls_port, self.metrics_port = free_port(), free_port(), free_port()
        self.router_port = router_port
        self.more_routers = more_routers  # AMQP ports of a mesh's other routers
        self.tls = (tls_cert, tls_key)
        self.router_ca = router_ca  # TLS to the router (router_port: its AMQPS listener)
        self.proc = None

    def start(self) -> None:
        db = django_settings.DATABASES["default"]
        env = dict(os.environ, PYTHONPATH=str(ROOT), MAAS_MQTT_GATEWAY_LOG_LEVEL=os.environ.get("GW_LOG", "WARNING"),
                   DATABASE_URL=f"postgres://{db['USER']}@{db['HOST']}:{db['PORT']}/{db['NAME']}")
        cmd = [sys.executable, "manage.py", "run_mqtt_gateway", "--port", str(self.port),
               "--tls-port", str(self.tls_port), "--router", f"127.0.0.1:{self.router_port}",
               "--metrics-port", str(self.metrics_port)]
        if self.tls[0]:
            cmd += ["--tls-cert", self.tls[0], "--tls-key", self.tls[1]]
        for port in self.more_routers:
            cmd += ["--more-router", f"127.0.0.1:{port}"]
        if self.router_ca:
            cmd += ["--router-ca", self.router_ca]
        self.proc = subprocess.Popen(cmd, cwd=ROOT, env=env)
        wait_port(self.port)

    def stop(self) -> None:
        if self.proc is not None:
            terminate(self.proc)
            self.proc = None

    def restart(self) -> None:
        self.stop()
        self.start()


@pytest.fixture(scope="module")
def gateway(router, django_db_setup, django_db_blocker):  # noqa: F811
    proc = GatewayProcess(router.amqp_port)
    proc.start()
    yield proc
    proc.stop()


@pytest.fixture
def space(tenant, redis_server, router, settings):  # noqa: F811
    # the agents configure the module's router (tests/workers/conftest.py's router_settings)
    settings.MAAS_ROUTER_MANAGEMENT_URL = f"amqp://127.0.0.1:{router.mgmt_port}"
    settings.MAAS_ROUTER_ADMIN_USER = "admin"
    settings.MAAS_ROUTER_ADMIN_PASSWORD = ADMIN_PASSWORD
    settings.MAAS_ROUTER_AMQP_PORT = router.amqp_port
    if router.relay is not None:
        settings.MAAS_VHOST_RELAY_PORT = router.relay.port
    s = services.create_address_space(ctx=CTX, tenant=tenant, name=f"mq{uuid.uuid4().hex[:5]}",
                                      type="standard", plan="standard-medium")
    yield s
    if AddressSpace.objects.filter(uid=s.uid, terminating=False).exists():
        services.delete_address_space(ctx=CTX, space=s)
        sync(s)


def broker_connected(on, space) -> bool:
    """Whether the connector of `space` on router `on` is connected to its broker. An address
    that is link-routed there (a topic) reports Active before that (its status waits for autoLinks
    only): a subscription made at once may be refused while the connector still connects."""
    from workers.clients.qdr import Management

    mgmt = Management(f"amqp://127.0.0.1:{on.mgmt_port}", "admin", ADMIN_PASSWORD)
    try:
        rows = mgmt.query("org.apache.qpid.dispatch.connector", ["name", "connectionStatus"])
    finally:
        mgmt.close()
    return any(row["name"] == f"maas:{space.vhost}:broker"
               and row["connectionStatus"] == "SUCCESS" for row in rows)


def add(space, address, type_, plan):
    return services.create_address(ctx=CTX, space=space, address=address, type=type_, plan=plan)


def user(space, username="app", rules=None):
    rules = rules or [{"addresses": ["*"], "operations": ["send", "recv"]}]
    return services.create_messaging_user(
        ctx=CTX, space=space, username=username,
        authentication={"type": "password", "password": b64(PASSWORD)}, authorization=rules)


class Client:
    """A paho MQTT 3.1.1 client that records what it gets, and waits for it."""

    def __init__(self, gateway, space, username="app", password=PASSWORD, client_id=None,
                 clean_session=True, will=None, keepalive=60):
        self.client = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2,
                                  client_id=client_id or f"c-{uuid.uuid4().hex[:8]}",
                                  protocol=mqtt.MQTTv311, clean_session=clean_session)
        self.client.username_pw_set(f"{username}@{space.vhost}", password)
        if will is not None:
            self.client.will_set(*will)
        self.messages: list = []
        self.cond = threading.Condition()
        self.connack = None
        self.session_present = None
        self.subacks: dict = {}
        self.client.on_message = self._on_message
        self.client.on_connect = self._on_connect
        self.client.on_subscribe = self._on_subscribe
        self.client.on_disconnect = self._on_disconnect
        self.disconnected = threading.Event()
        self.client.connect("127.0.0.1", gateway.port, keepalive=keepalive)
        self.client.loop_start()

    def _on_connect(self, client, userdata, flags, reason, properties):
        if reason.is_failure:
            client.disconnect()  # else paho's loop logs in again and again, counted each time
        with self.cond:
            self.session_present = flags.session_present
            self.connack = reason
            self.cond.notify_all()

    def _on_disconnect(self, client, userdata, flags, reason, properties):
        self.disconnected.set()

    def _on_subscribe(self, client, userdata, mid, reasons, properties):
        with self.cond:
            self.subacks[mid] = [r.value for r in reasons]
            self.cond.notify_all()

    def _on_message(self, client, userdata, msg):
        with self.cond:
            self.messages.append(msg)
            self.cond.notify_all()

    def wait(self, predicate, timeout=10.0, what="condition"):
        with self.cond:
            if not self.cond.wait_for(predicate, timeout):
                raise AssertionError(f"{what} not reached in {timeout} s")

    def connected(self) -> int:
        self.wait(lambda: self.connack is not None, what="CONNACK")
        return self.connack.value

    def subscribe(self, topic_filter: str, qos: int = 0, wait: bool = True):
        _, mid = self.client.subscribe(topic_filter, qos)
        if not wait:
            return mid
        return self.suback(mid)

    def suback(self, mid: int, timeout: float = 10.0) -> list:
        self.wait(lambda: mid in self.subacks, timeout, what="SUBACK")
        return self.subacks[mid]

    def publish(self, topic: str, payload, qos: int = 0, retain: bool = False):
        info = self.client.publish(topic, payload, qos, retain)
        if qos:
            info.wait_for_publish(10)
            assert info.is_published()
        return info

    def received(self, n: int, timeout=10.0) -> list:
        self.wait(lambda: len(self.messages) >= n, timeout, what=f"{n} messages")
        return self.messages[:n]

    def close(self):
        self.client.disconnect()
        self.client.loop_stop()
