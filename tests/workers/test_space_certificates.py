"""Certificates and host names per space: the embedded router's shared AMQPS listener, the MQTT
gateway's MQTTS and a brokered space's relay answer each space's host name (SNI) with that
space's certificate, which a client verifies, chain and host name, against the space's
`status.caCert` alone; another space's CA or host fails; a new bundle is served without a
restart, and a deleted space's certificate is gone. Real processes and clients throughout."""
import base64
import socket
import ssl
import uuid

import pytest
from django.conf import settings
from proton import SSLDomain
from proton.utils import BlockingConnection

from config_service import services
from config_service.models import AddressSpace
from tests import broker
from tests.certs import bundle
from tests.conftest import CTX, wait_for
from tests.mqtt.conftest import GatewayProcess
from tests.router.conftest import RouterProcess
from tests.storage.relays import Front, self_signed
from tests.workers.conftest import AuthService, sync
from tests.workers.connected import PASSWORD, round_trip, standard_space
from workers.agents import runner
from workers.agents.router.agent import close_pooled


@pytest.fixture(scope="module")
def platform_cert(tmp_path_factory):
    return self_signed(tmp_path_factory.mktemp("platform"))


@pytest.fixture(scope="module")
def tls_dir(tmp_path_factory):
    return str(tmp_path_factory.mktemp("space-tls"))


@pytest.fixture(scope="module")
def router(router_kind, platform_cert, tls_dir):
    """The embedded router with AMQPS, looking up spaces' certificates in `tls_dir`."""
    auth = AuthService()
    proc = RouterProcess(auth_port=auth.port, extra_args=[
        "--tls-cert", platform_cert[0], "--tls-key", platform_cert[1], "--space-tls-dir", tls_dir])
    proc.kind, proc.relay = "embedded", None
    proc.start()
    yield proc
    close_pooled()
    proc.stop()
    auth.stop()


@pytest.fixture
def dirs(settings, tls_dir, platform_cert):
    settings.MAAS_SPACE_TLS_DIR = tls_dir
    settings.MAAS_ROUTER_TLS_CERT, settings.MAAS_ROUTER_TLS_KEY = platform_cert
    return tls_dir


def standard(tenant, name: str, endpoint: dict) -> AddressSpace:
    return standard_space(tenant, name, plan="standard-small", spec={"endpoints": [endpoint]})


def ca_of(clients, tenant, space, tmp_path) -> str:
    status = clients["owner"].get(
        f"/api/v1/tenants/{tenant.slug}/addressspaces/{space.name}/").json()["status"]
    path = tmp_path / f"{space.name}-ca.pem"
    path.write_bytes(base64.b64decode(status["caCert"]))
    return str(path)


def handshake(port: int, host: str, ca: str) -> str:
    """A TLS handshake to 127.0.0.1:`port` asking for `host`, verifying the chain against `ca`
    and the host name; the served certificate's subject, or raises ssl.SSLError."""
    context = ssl.create_default_context(cafile=ca)
    with socket.create_connection(("127.0.0.1", port), timeout=5) as raw:
        with context.wrap_socket(raw, server_hostname=host) as tls:
            return dict(x[0] for x in tls.getpeercert()["subject"])["commonName"]


def test_each_space_s_host_gets_its_own_certificate_on_the_shared_amqps_listener(
        router, dirs, tenant, clients, tmp_path):
    tag = uuid.uuid4().hex[:6]
    host_a, host_b = f"a-{tag}.spaces.test", f"b-{tag}.spaces.test"
    tenant_bundle = bundle(host_b)
    a = standard(tenant, f"a{tag}", {"name": "messaging", "expose": {"routeHost": host_a}})
    b = standard(tenant, f"b{tag}", {"name": "messaging", "cert": tenant_bundle.spec(),
                                     "expose": {"routeHost": host_b}})
    try:
        ca_a, ca_b = ca_of(clients, tenant, a, tmp_path), ca_of(clients, tenant, b, tmp_path)
        # The bundle's CA, then the platform's (its MQTT has no endpoint of its own)
        assert open(ca_b).read() == tenant_bundle.ca + open(settings.MAAS_ROUTER_TLS_CERT).read()
        assert handshake(router.amqps_port, host_a, ca_a) == host_a
        assert handshake(router.amqps_port, host_b, ca_b) == host_b
        for host, ca in ((host_b, ca_a), (host_a, ca_b), ("unknown.spaces.test", ca_a)):
            with pytest.raises(ssl.SSLCertVerificationError):
                handshake(router.amqps_port, host, ca)  # another space's, or the platform's

        # A proton client that checks the host name sends and receives over the space's own
        # certificate; its login names the space, its open hostname is the endpoint's host.
        domain = SSLDomain(SSLDomain.MODE_CLIENT)
        domain.set_trusted_ca_db(ca_a)
        domain.set_peer_authentication(SSLDomain.VERIFY_PEER_NAME)
        conn = BlockingConnection(f"amqps://127.0.0.1:{router.amqps_port}",
                                  user=f"app@{a.vhost}", password=PASSWORD, ssl_domain=domain,
                                  virtual_host=host_a, allowed_mechs="PLAIN", timeout=10)
        try:
            round_trip(conn, "over a's certificate")
        finally:
            conn.close()

        # The tenant rotates its bundle: the listener serves the new one, no restart.
        renewed = bundle(host_b)
        services.change_address_space_plan(
            ctx=CTX, space=AddressSpace.objects.get(uid=b.uid), plan="standard-small",
            spec={"endpoints": [{"name": "messaging", "cert": renewed.spec(),
                                 "expose": {"routeHost": host_b}}]})
        sync(b)
        new_ca = tmp_path / "renewed-ca.pem"
        new_ca.write_text(renewed.ca)
        wait_for(lambda: _verifies(router.amqps_port, host_b, str(new_ca)), timeout=15,
                 what="the renewed bundle served")
    finally:
        for space in (a, b):
            services.delete_address_space(ctx=CTX, space=AddressSpace.objects.get(uid=space.uid))
            sync(space)
    # A deleted space's certificate is gone: its host gets the platform's again.
    wait_for(lambda: not _verifies(router.amqps_port, host_a, ca_a), timeout=15,
             what="the deleted space's certificate withdrawn")


def _verifies(port: int, host: str, ca: str) -> bool:
    try:
        handshake(port, host, ca)
        return True
    except ssl.SSLError:
        return False


def test_the_mqtt_gateway_serves_each_space_s_certificate(router, dirs, tenant, clients,
                                                           tmp_path):
    """The gateway looks a host up in the control plane's database (it runs where the
    workers' files are not, on Kubernetes)."""
    tag = uuid.uuid4().hex[:6]
    host = f"mqtt-{tag}.spaces.test"
    space = standard(tenant, f"m{tag}", {"name": "mqtt", "service": "mqtt",
                                         "expose": {"routeHost": host}})
    gateway = GatewayProcess(router.amqp_port, *platform_pair())
    gateway.start()
    try:
        wait_for(lambda: _listening(gateway.tls_port), what="MQTTS")
        ca = ca_of(clients, tenant, space, tmp_path)
        assert handshake(gateway.tls_port, host, ca) == host
        with pytest.raises(ssl.SSLCertVerificationError):
            handshake(gateway.tls_port, "other.spaces.test", ca)
        # Its AMQPS has no endpoint of its own: the status's CA bundle has the platform's too,
        # so one caCert serves a client of either protocol.
        assert handshake(router.amqps_port, "localhost", ca) == "maas-router"
    finally:
        gateway.stop()
        services.delete_address_space(ctx=CTX, space=space)
        sync(space)


def platform_pair() -> tuple[str, str]:
    return settings.MAAS_ROUTER_TLS_CERT, settings.MAAS_ROUTER_TLS_KEY


def _listening(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=1).close()
        return True
    except OSError:
        return False


@pytest.mark.parametrize("source", ["files", "database"])
def test_a_brokered_space_s_relay_serves_its_certificate(dirs, tenant, clients, tmp_path,
                                                         redis_server, source):
    """From the workers' files (make run) or the database (`manage.py run_vhost_relay`, as
    on Kubernetes)."""
    tag = uuid.uuid4().hex[:6]
    host = f"q-{tag}.spaces.test"
    space = services.create_address_space(
        ctx=CTX, tenant=tenant, name=f"q{tag}", type="brokered",
        plan="brokered-single-broker",
        spec={"endpoints": [{"name": "messaging", "expose": {"routeHost": host}}]})
    relay = Front("brokered-amqp", broker.AMQP_PORT, *platform_pair(),
                  *(["--space-tls-dir", dirs] if source == "files" else []),
                  managed=source == "database")
    try:
        runner.run(space.uid, "storage")
        ca = ca_of(clients, tenant, space, tmp_path)
        assert handshake(relay.tls_port, host, ca) == host
        with pytest.raises(ssl.SSLCertVerificationError):
            handshake(relay.tls_port, "other.spaces.test", ca)
    finally:
        relay.stop()
        services.delete_address_space(ctx=CTX, space=space)
        runner.run(space.uid, "storage")


def test_where_no_file_is_read_none_is_written_and_an_unwritable_directory_is_the_space_s_error(
        dirs, tenant, settings, tmp_path):
    from config_service.models import AgentState

    host = f"w-{uuid.uuid4().hex[:6]}.spaces.test"
    settings.MAAS_SPACE_TLS_DIR = ""  # Kubernetes: the listeners look hosts up instead
    space = standard(tenant, f"w{uuid.uuid4().hex[:5]}",
                     {"name": "messaging", "expose": {"routeHost": host}})
    try:
        assert AgentState.objects.get(space_uid=space.uid, kind="router").space_error == ""
        blocked = tmp_path / "blocked"
        blocked.write_text("a file where a directory should be")
        settings.MAAS_SPACE_TLS_DIR = str(blocked)
        runner.run(space.uid, "router")
        error = AgentState.objects.get(space_uid=space.uid, kind="router").space_error
        assert "cannot be written" in error and str(blocked) in error
    finally:
        settings.MAAS_SPACE_TLS_DIR = dirs
        services.delete_address_space(ctx=CTX, space=AddressSpace.objects.get(uid=space.uid))
        sync(space)
