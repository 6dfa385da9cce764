"""No credential crosses an internal link in clear text (docs/security.md, "Internal links"): a
capture with tshark on the loopback, while tenants log in and exchange messages as `make run`
lays the links out, holds neither a tenant's password, nor the router's broker password, nor
the router admin's.

- a standard space on the embedded router: an AMQPS client (the router relays its login to the
  auth service over TLS, and its queue reaches RabbitMQ over the router's TLS connector), and an
  MQTTS client through the MQTT gateway (which logs in to the router's AMQPS listener);
- the router agent applying a change over the router's management listener (TLS, `amqps://`);
- a brokered space: an AMQPS client through the brokered-amqp relay and an MQTTS device through
  the MQTT relay, both reaching RabbitMQ's TLS listeners.

A login in clear text on the router's plain port, captured beside them, shows that the capture
sees a password wherever one crosses unencrypted. Real processes: the embedded router, the
gateway, the relays, the test RabbitMQ node with the TLS listeners deploy/local/services.sh
gives it, tshark (installed by services.sh)."""
import os
import secrets
import shutil
import signal
import socket
import ssl
import subprocess
import threading
import uuid
from collections import defaultdict

import paho.mqtt.client as mqtt
import pytest
from proton import ConnectionException, Message, SSLDomain
from proton.utils import BlockingConnection

from config_service import services
from config_service.brokers import internal_ca
from dataplane.authservice.server import AuthServer
from maas import bindings
from tests.conftest import CTX, b64, wait_for
from tests.mqtt.conftest import GatewayProcess
from tests.router.conftest import ADMIN_PASSWORD, RouterProcess, free_port, wait_port
from tests.storage.mqtt_device import Device
from tests.storage.relays import Front, self_signed
from tests.workers.conftest import sync
from workers import credentials
from workers.agents.router.agent import close_pooled
from workers.naming import broker_username

# The auth service reads messaging users on its own database connection: the data is committed.
pytestmark = pytest.mark.django_db(transaction=True)

STANDARD_PASSWORD = secrets.token_hex(12)  # unique bytes the capture is searched for
BROKERED_PASSWORD = secrets.token_hex(12)
CONTROL_PASSWORD = secrets.token_hex(12)  # sent in clear on purpose


class Capture:
    """tshark on the loopback, TCP only, into a file; `payloads()` after `stop()`: the bytes
    each (source port, destination port) carried, in order."""

    def __init__(self, path: str):
        self.path = path
        # a session of its own: stop() signals tshark and its dumpcap together, as Ctrl-C
        # would, so that the file is complete when tshark exits
        self.proc = subprocess.Popen(["tshark", "-i", "lo", "-f", "tcp", "-w", path],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                     text=True, start_new_session=True)
        started = threading.Event()

        def watch():  # tshark says "Capturing on 'Loopback: lo'" once it captures
            for line in self.proc.stderr:
                if "Capturing on" in line:
                    started.set()

        threading.Thread(target=watch, daemon=True).start()
        assert started.wait(30), "tshark did not start capturing"

    def settle(self) -> None:
        """Until what crossed the loopback so far is in the file: a marker sent now is read
        back from it (dumpcap writes what it captured every update interval)."""
        marker = secrets.token_hex(16).encode()
        server = socket.create_server(("127.0.0.1", 0))
        with socket.create_connection(server.getsockname()) as sock:
            sock.sendall(marker)
        server.close()
        wait_for(lambda: marker in b"".join(self.payloads().values()), 30,
                 what="the capture to catch up")

    def stop(self) -> None:
        os.killpg(self.proc.pid, signal.SIGINT)
        self.proc.wait(30)

    def payloads(self) -> dict[tuple[int, int], bytes]:
        out = subprocess.run(["tshark", "-r", self.path, "-Y", "tcp.len > 0", "-T", "fields",
                              "-e", "tcp.srcport", "-e", "tcp.dstport", "-e", "tcp.payload"],
                             capture_output=True, text=True, timeout=120).stdout
        streams: dict = defaultdict(bytearray)  # a file still being written reads to its end
        for line in out.splitlines():
            if line.count("\t") != 2:
                continue  # the last packet of a file still being written, cut short
            src, dst, payload = line.split("\t")
            streams[(int(src), int(dst))] += bytes.fromhex(payload.replace(":", ""))
        return {key: bytes(value) for key, value in streams.items()}


def queue_round_trip(conn: BlockingConnection, queue: str, body: str) -> None:
    """A durable message to `queue` and back on `conn`, which is closed then."""
    try:
        receiver = conn.create_receiver(queue)
        conn.create_sender(queue).send(Message(body=body, durable=True))
        assert receiver.receive(10).body == body
        receiver.accept()
    finally:
        conn.close()


def client_domain(ca: str) -> SSLDomain:
    domain = SSLDomain(SSLDomain.MODE_CLIENT)
    domain.set_trusted_ca_db(ca)
    domain.set_peer_authentication(SSLDomain.VERIFY_PEER)
    return domain


@pytest.fixture(scope="module")
def tls_files(tmp_path_factory):
    """The platform's certificate (router's AMQPS, the auth service's, the relays', the
    gateway's MQTTS), self-signed for 127.0.0.1."""
    return self_signed(tmp_path_factory.mktemp("platform-tls"))


@pytest.fixture(scope="module")
def router(tls_files):
    """make run's embedded router: AMQPS, logins relayed to the auth service over TLS (its
    certificate checked), connectors to RabbitMQ's TLS listeners (RouterProcess gives it the
    internal CA)."""
    cert, key = tls_files
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    auth = AuthServer(("127.0.0.1", free_port()), bindings.verify, ssl_context=context)
    thread = threading.Thread(target=auth.serve_forever, daemon=True)
    thread.start()
    proc = RouterProcess(auth_port=auth.server_address[1], extra_args=[
        "--tls-cert", cert, "--tls-key", key, "--auth-service-ca", cert, "--management-tls"])
    proc.kind, proc.relay = "embedded", None
    proc.start()
    wait_port(proc.amqps_port, process=proc.proc)
    yield proc
    proc.stop()
    auth.shutdown()
    auth.server_close()


def make_space(tenant, kind: str, plan: str, addresses: dict, password: str):
    """A space of `kind` with `addresses` ({name: (type, plan)}) and the user `app`, every
    right, `password`; its agents run."""
    space = services.create_address_space(ctx=CTX, tenant=tenant, type=kind, plan=plan,
                                          name=f"{kind[:3]}{uuid.uuid4().hex[:5]}")
    for address, (type_, address_plan) in addresses.items():
        services.create_address(ctx=CTX, space=space, address=address, type=type_,
                                plan=address_plan)
    services.create_messaging_user(
        ctx=CTX, space=space, username="app",
        authentication={"type": "password", "password": b64(password)},
        authorization=[{"addresses": ["*"], "operations": ["send", "recv"]}])
    sync(space)
    return space


def gone(space) -> None:
    services.delete_address_space(ctx=CTX, space=space)
    sync(space)


@pytest.fixture
def standard(tenant, router, settings, redis_server, tls_files):
    # the rest of the router settings: tests/workers/conftest.py's router_settings; the agents
    # manage this router over TLS, checking its certificate (workers/endpoints.py)
    settings.MAAS_ROUTER_MANAGEMENT_URL = f"amqps://127.0.0.1:{router.mgmt_port}"
    settings.MAAS_ROUTER_TLS_CERT = tls_files[0]
    space = make_space(tenant, "standard", "standard-medium", {
        "orders": ("queue", "standard-small-queue"),
        "news": ("topic", "standard-small-topic")}, STANDARD_PASSWORD)
    yield space
    gone(space)


@pytest.fixture
def brokered(tenant, redis_server):
    space = make_space(tenant, "brokered", "brokered-single-broker", {
        "jobs": ("queue", "brokered-queue"), "sensors": ("topic", "brokered-topic")},
        BROKERED_PASSWORD)
    yield space
    gone(space)


def test_a_capture_of_the_loopback_holds_no_credential_of_an_internal_link(
        router, standard, brokered, tls_files, settings, tmp_path):
    assert shutil.which("tshark"), "tshark is missing: deploy/local/services.sh installs it"
    ca = internal_ca()
    assert ca, "no internal CA: deploy/local/services.sh makes it with RabbitMQ's TLS listeners"
    cert, key = tls_files
    gateway = GatewayProcess(router.amqps_port, cert, key, router_ca=cert)
    gateway.start()
    wait_port(gateway.tls_port, process=gateway.proc)
    # the brokered space's relays as runplatform starts them: TLS both ways
    amqp = Front("brokered-amqp", settings.RABBITMQ_AMQPS_PORT, cert, key, "--broker-ca", ca)
    mqtts = Front("mqtt", settings.RABBITMQ_MQTTS_PORT, cert, key, "--broker-ca", ca)
    capture = Capture(str(tmp_path / "loopback.pcapng"))
    try:
        # standard: AMQPS to the router; the queue's messages go to RabbitMQ and back
        conn = BlockingConnection(f"amqps://127.0.0.1:{router.amqps_port}",
                                  user=f"app@{standard.vhost}", password=STANDARD_PASSWORD,
                                  ssl_domain=client_domain(cert), allowed_mechs="PLAIN",
                                  virtual_host=standard.vhost, timeout=10)
        queue_round_trip(conn, "orders", "via the broker")
        # standard: MQTTS through the gateway, which logs in to the router's AMQPS
        got, subscribed = threading.Event(), threading.Event()
        client = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, client_id="capture",
                             protocol=mqtt.MQTTv311)
        client.username_pw_set(f"app@{standard.vhost}", STANDARD_PASSWORD)
        client.tls_set(ca_certs=cert)
        client.on_subscribe = lambda *_: subscribed.set()
        client.on_message = lambda c, u, m: m.payload == b"over mqtts" and got.set()
        client.connect("127.0.0.1", gateway.tls_port)
        client.loop_start()
        try:
            client.subscribe("news", 1)
            assert subscribed.wait(10), "no SUBACK from the gateway"
            client.publish("news", b"over mqtts", qos=1).wait_for_publish(10)
            assert got.wait(10), "the MQTTS message did not come back"
        finally:
            client.disconnect()
            client.loop_stop()
        # brokered: AMQPS and MQTTS through the relays
        conn = BlockingConnection(f"amqps://127.0.0.1:{amqp.tls_port}",
                                  user=broker_username(brokered.vhost, "app"),
                                  password=BROKERED_PASSWORD, ssl_domain=client_domain(cert),
                                  allowed_mechs="PLAIN", timeout=10)
        queue_round_trip(conn, "jobs", "brokered")
        device = Device(mqtts.tls_port, brokered.vhost, "capture-device", tls_ca=cert,
                        password=BROKERED_PASSWORD)
        try:
            device.round_trip()
        finally:
            device.close()
        # the router agent at work: a change reaches the router over its management listener,
        # on a connection (and a login) of its own: the kept ones are closed first
        close_pooled()
        services.create_address(ctx=CTX, space=standard, address="later", type="anycast",
                                plan="standard-small-anycast")
        sync(standard)
        # the control: a login in clear text on the router's plain port (refused)
        with pytest.raises(ConnectionException):
            BlockingConnection(f"amqp://127.0.0.1:{router.amqp_port}",
                               user=f"app@{standard.vhost}", password=CONTROL_PASSWORD,
                               allowed_mechs="PLAIN", allow_insecure_mechs=True, timeout=5)
        capture.settle()
    finally:
        capture.stop()
        for process in (gateway, amqp, mqtts):
            process.stop()
    streams = capture.payloads()

    def seen(secret: str) -> list:
        return [key for key, data in streams.items() if secret.encode() in data]

    assert seen(CONTROL_PASSWORD), ("the capture does not see a password sent in clear",
                                    router.amqp_port)
    _, router_password = credentials.router_broker(standard.vhost)
    assert seen(STANDARD_PASSWORD) == []
    assert seen(BROKERED_PASSWORD) == []
    assert seen(router_password) == []
    # the router admin's, on this router's management link (every test router has the same
    # admin password, and others may be managed in clear beside this test: make test's -n 2)
    assert [key for key in seen(ADMIN_PASSWORD) if router.mgmt_port in key] == []
    # and the links to RabbitMQ were TLS links that carried the traffic
    for port in (settings.RABBITMQ_AMQPS_PORT, settings.RABBITMQ_MQTTS_PORT):
        assert any(dst == port for _, dst in streams), f"nothing went to RabbitMQ's {port}"
    os.remove(capture.path)


def test_every_rabbitmq_listener_of_this_machine_is_on_loopback():
    """Those that stay plain (AMQP, MQTT, the management API with its basic auth, clustering)
    are reachable from this machine only: deploy/local/services.sh binds them to loopback."""
    listed = subprocess.run(["ss", "-ltnpH"], check=True, capture_output=True, text=True,
                            timeout=10).stdout.splitlines()
    rabbitmq = [line.split()[3] for line in listed if '"beam.smp"' in line]
    assert any(at.endswith(":15672") for at in rabbitmq)  # the default node's management API
    assert [at for at in rabbitmq
            if not at.startswith(("127.0.0.1:", "[::1]:", "[::ffff:127.0.0.1]:"))] == []
