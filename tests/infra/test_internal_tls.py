"""The internal links of a Kubernetes space over TLS with the platform's internal CA: the CA's
Secret, the certificates the controller signs and keeps, what the routers, brokers, agent,
drainer and MQTT gateway present and check, a rotation of the CA, the commands that make and
rotate it; and a real qdrouterd on the configuration and certificates the controller applied.

Certificates are checked with `cryptography`'s X.509 path validation (chain, names, usages)
and Python's ssl, never by comparing PEMs alone.
"""
import asyncio
import base64
import dataclasses
import datetime
import json
import ssl
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from cryptography import x509
from cryptography.x509 import verification
from django.core.management import CommandError, call_command

from dataplane import qdrouterd, tls_files
from workers import pki
from workers.clients.qdr import _names_a_host
from workers.infra import internal_ca
from workers.infra import manifests as m
from workers.infra.controller import InfraController, rolled_out
from workers.infra.drain import RabbitMQDrainer

from . import spaces
from .fake_kube import FakeKubernetes

NS = spaces.CFG.namespace
SMALL = m.infra_id(spaces.SMALL_UID)
MEDIUM = m.infra_id(spaces.MEDIUM_UID)


@pytest.fixture
def kube():
    return FakeKubernetes()


@pytest.fixture
def controller(kube):
    return InfraController(kube, None, spaces.CFG, lambda purpose, infra: f"{purpose}-{infra}")


def data(kube, name: str) -> dict[str, str]:
    return {k: base64.b64decode(v).decode()
            for k, v in kube.find("Secret", name)["data"].items()}


def the_ca(kube) -> internal_ca.InternalCa:
    return internal_ca.read(kube, NS)


def verified(cert_pem: str, bundle: str, host: str, client: bool = False) -> bool:
    """Whether a client trusting `bundle` accepts `cert_pem` for `host` (a server's), or a
    server trusting it accepts it as a client's (`client`)."""
    store = verification.Store(x509.load_pem_x509_certificates(bundle.encode()))
    leaf = x509.load_pem_x509_certificate(cert_pem.encode())
    builder = verification.PolicyBuilder().store(store)
    try:
        if client:
            builder.build_client_verifier().verify(leaf, [])
        else:
            builder.build_server_verifier(x509.DNSName(host)).verify(leaf, [])
    except verification.VerificationError:
        return False
    return True


def listeners(config) -> dict[str, dict]:
    return {a["name"]: a for t, a in config if t == "listener"}


def profiles(config) -> dict[str, dict]:
    return {a["name"]: a for t, a in config if t == "sslProfile"}


# What the router listens with ---------------------------------------------------------------

def test_every_internal_listener_of_the_router_requires_tls_but_the_tenants_amqp():
    config = m.router_config(spaces.small(), spaces.CFG)
    found, ssl_profiles = listeners(config), profiles(config)
    plain = {name for name, a in found.items() if not a.get("requireSsl")}
    # amqp: the tenants' clients choose; metrics: HTTP /healthz and /metrics for the kubelet's
    # probes and Prometheus, no login and no tenant's name crosses it
    assert plain == {"amqp", "metrics"}
    assert found["amqp"]["port"] == str(m.ROUTER_AMQP_PORT) == "5672"
    assert found["metrics"]["http"] is True and "saslMechanisms" not in found["metrics"]
    internal = ssl_profiles[found["management"]["sslProfile"]]
    assert internal is ssl_profiles[found["internal"]["sslProfile"]]
    assert internal["certFile"].startswith(m.ROUTER_INTERNAL_DIR)  # not the tenant's
    assert found["internal"]["port"] == str(m.ROUTER_INTERNAL_PORT)
    # the MQTT gateway logs its clients in there as on the tenants' listeners
    for key in ("multiTenant", "saslPlugin", "policyVhost", "authenticatePeer"):
        assert found["internal"][key] == found["amqps"][key]
    mesh = ssl_profiles[found["inter-router"]["sslProfile"]]
    assert found["inter-router"]["saslMechanisms"] == "EXTERNAL"
    assert mesh["caCertFile"] == f"{m.ROUTER_MESH_DIR}/{m.CA_FILE}"  # the bundle, not itself
    # the router's clients: the auth service and the brokers, each checked
    (plugin,) = [a for t, a in config if t == "authServicePlugin"]
    assert ssl_profiles[plugin["sslProfile"]]["caCertFile"] == \
        f"{m.ROUTER_INTERNAL_DIR}/{m.AUTH_CA_FILE}"
    assert ssl_profiles[qdrouterd.BROKER_PROFILE]["caCertFile"] == \
        f"{m.ROUTER_INTERNAL_DIR}/{m.CA_FILE}"


def test_the_brokers_listen_with_tls_only():
    space = spaces.medium()
    for broker in space.brokers:
        conf = m.broker_config(space, spaces.CFG, broker)["rabbitmq.conf"].splitlines()
        assert "listeners.tcp = none" in conf and "mqtt.listeners.tcp = none" in conf
        assert not [line for line in conf if line.startswith(("listeners.tcp.", "management.tcp",
                                                              "mqtt.listeners.tcp."))]
        assert f"listeners.ssl.default = {m.BROKER_AMQPS_PORT}" in conf
        assert f"management.ssl.port = {m.BROKER_MANAGEMENT_PORT}" in conf
        assert "prometheus.tcp.ip = 127.0.0.1" in conf  # no login there: the pod's own only
        files = {line.split(" = ")[1] for line in conf if line.startswith("ssl_options.")
                 and "file" in line}
        assert files == {f"{m.BROKER_TLS_DIR}/{f}" for f in ("tls.crt", "tls.key", m.CA_FILE)}
        docs = m.broker_manifests(space, spaces.CFG, "u", broker, spaces.certificates(space))
        secret = next(d for d in docs if d["kind"] == "Secret")
        assert set(secret["data"]) == {"tls.crt", "tls.key", m.CA_FILE}
        sts = next(d for d in docs if d["kind"] == "StatefulSet")
        (container,) = sts["spec"]["template"]["spec"]["containers"]
        mounts = {v["name"]: v["mountPath"] for v in container["volumeMounts"]}
        volume = next(v for v in sts["spec"]["template"]["spec"]["volumes"]
                      if v["name"] == "tls")
        assert mounts["tls"] == m.BROKER_TLS_DIR
        assert volume["secret"]["secretName"] == secret["metadata"]["name"]
        ports = {p["containerPort"] for p in container["ports"]}
        assert ports == {m.BROKER_AMQPS_PORT, m.BROKER_MANAGEMENT_PORT, *m.BROKER_DIST_PORTS}
        service = next(d for d in docs if d["kind"] == "Service")
        assert {p["port"] for p in service["spec"]["ports"]} == ports


def test_network_policies_open_the_tls_ports_only_to_their_clients():
    router, broker = m.network_policies(spaces.small(), spaces.CFG, "u")
    rules = {tuple(p["port"] for p in r["ports"]): r.get("from") for r in
             router["spec"]["ingress"]}
    assert rules[(m.ROUTER_AMQP_PORT, m.ROUTER_AMQPS_PORT)] is None  # the tenants
    assert rules[(m.ROUTER_INTERNAL_PORT,)] == [
        {"podSelector": {"matchLabels": spaces.CFG.gateway_selector}}]
    assert rules[(m.ROUTER_MANAGEMENT_PORT,)][0]["podSelector"]["matchLabels"][
        m.LABEL_COMPONENT] == "agent"
    ports = {p["port"] for r in broker["spec"]["ingress"] for p in r["ports"]}
    assert ports == {m.BROKER_AMQPS_PORT, m.BROKER_MANAGEMENT_PORT, *m.BROKER_DIST_PORTS}


# The certificates the controller signs ------------------------------------------------------

def test_the_controller_signs_every_internal_certificate_with_the_internal_ca(kube, controller):
    controller.reconcile(spaces.medium())
    ca = the_ca(kube)
    assert ca is not None and ca.bundle == ca.cert_pem
    assert data(kube, internal_ca.SECRET)[m.CA_FILE] == ca.bundle
    pods = m.router_pod_hosts(spaces.medium(), spaces.CFG)
    assert len(pods) == 2
    mesh = data(kube, m.mesh_secret_name(MEDIUM))
    internal = data(kube, m.internal_secret_name(MEDIUM))
    for pod in pods:
        assert verified(mesh["tls.crt"], ca.bundle, pod)  # as a peer's connector checks it
        assert verified(mesh["tls.crt"], ca.bundle, pod, client=True)  # and its listener
        assert verified(internal["tls.crt"], ca.bundle, pod)  # the agent's management link
    gateway_host = m.service_host(f"{m.router_name(MEDIUM)}-internal", spaces.CFG)
    assert _names_a_host(f"amqps://{pods[0]}:{m.ROUTER_MANAGEMENT_PORT}")  # checked by name
    assert not _names_a_host(f"amqps://127.0.0.1:{m.ROUTER_MANAGEMENT_PORT}")
    assert verified(internal["tls.crt"], ca.bundle, gateway_host)
    assert not verified(internal["tls.crt"], ca.bundle, "router-other-0.maas.svc")
    for broker in spaces.medium().brokers:
        secret = data(kube, m.broker_tls_secret_name(MEDIUM, broker.cluster_id))
        service = m.service_host(m.broker_name(MEDIUM, broker.cluster_id), spaces.CFG)
        assert verified(secret["tls.crt"], ca.bundle, service)  # the routers' connectors
        assert verified(secret["tls.crt"], ca.bundle, f"{m.broker_name(MEDIUM, broker.cluster_id)}"
                                                      f"-1.{service}")  # a node
        assert secret[m.CA_FILE] == ca.bundle
        assert pki.still_good(secret["tls.crt"], [service], issuer=ca.cert_pem)
    for secret in (mesh, internal):
        assert secret[m.CA_FILE] == ca.bundle
    assert internal[m.AUTH_CA_FILE] == ca.bundle  # no operator's certificate: the CA's
    # the tenants' AMQPS certificate is not the internal CA's
    tenant = data(kube, m.tls_secret_name(MEDIUM))["tls.crt"]
    assert not pki.signed_by(tenant, ca.cert_pem)


def test_certificates_are_kept_and_signed_again_near_their_end_or_for_new_names(kube,
                                                                                controller):
    controller.reconcile(spaces.small())
    name = m.broker_tls_secret_name(SMALL, "broker-0")
    first = data(kube, name)
    controller.reconcile(spaces.small())
    assert data(kube, name) == first  # kept
    ca = the_ca(kube)
    soon = datetime.datetime.now(datetime.UTC) - datetime.timedelta(days=pki.LEAF_DAYS - 20)
    hosts = m.broker_hosts(SMALL, "broker-0", spaces.CFG)
    ending = pki.issue(ca.cert_pem, ca.key_pem, hosts, now=soon)
    wrong_names = pki.issue(ca.cert_pem, ca.key_pem, hosts[:1])
    for cert, key in (ending, wrong_names):
        secret = kube.find("Secret", name)
        secret["data"]["tls.crt"] = base64.b64encode(cert.encode()).decode()
        secret["data"]["tls.key"] = base64.b64encode(key.encode()).decode()
        controller.reconcile(spaces.small())
        renewed = data(kube, name)["tls.crt"]
        assert renewed not in (cert, first["tls.crt"])
        assert pki.still_good(renewed, hosts, issuer=ca.cert_pem)


def test_a_self_signed_mesh_certificate_is_replaced_by_the_internal_ca_s(kube, controller):
    """As the Secrets of spaces made before the internal CA hold them."""
    old = pki.self_signed(m.mesh_hosts(SMALL, spaces.CFG))
    owner = kube.apply(m.owner_manifest(spaces.small(), spaces.CFG), m.FIELD_MANAGER)
    certs = dataclasses.replace(spaces.certificates(spaces.small()), mesh=m.Certificate(*old))
    for doc in m.router_manifests(spaces.small(), spaces.CFG, owner["metadata"]["uid"], certs):
        if doc["kind"] == "Secret":
            kube.apply(doc, m.FIELD_MANAGER)
    controller.reconcile(spaces.small())
    mesh = data(kube, m.mesh_secret_name(SMALL))["tls.crt"]
    assert mesh != old[0] and the_ca(kube).issued(mesh)


def test_the_ca_is_made_once_under_the_lock(kube):
    held = []

    class Lock:
        def __enter__(self):
            held.append("acquired")

        def __exit__(self, *exc):
            held.append("released")

    one = InfraController(kube, None, spaces.CFG, lambda p, i: "x", ca_lock=Lock)
    two = InfraController(kube, None, spaces.CFG, lambda p, i: "x", ca_lock=Lock)
    one.reconcile(spaces.small())
    two.reconcile(spaces.medium())
    assert held == ["acquired", "released"]  # made once; read afterwards, no lock taken
    ca = the_ca(kube)
    assert ca.issued(data(kube, m.mesh_secret_name(MEDIUM))["tls.crt"])
    assert ca.issued(data(kube, m.mesh_secret_name(SMALL))["tls.crt"])


def test_a_rotation_keeps_both_cas_trusted_until_every_certificate_is_signed_again(
        kube, controller):
    space = spaces.small()
    controller.reconcile(space)
    internal_ca.ensure_auth_service_certificate(kube, NS, the_ca(kube))
    kube.settle()
    old = the_ca(kube)
    internal_name = m.internal_secret_name(SMALL)
    before = data(kube, internal_name)["tls.crt"]

    new = internal_ca.begin_rotation(kube, NS)
    assert new.cert_pem != old.cert_pem and new.previous_pem == old.cert_pem
    assert set(pki.certificates(data(kube, internal_ca.SECRET)[m.CA_FILE])) == {
        new.cert_pem, old.cert_pem}
    with pytest.raises(internal_ca.RotationError, match="under way"):
        internal_ca.begin_rotation(kube, NS)

    # First the space's pods get the bundle of both CAs (they roll: the trust annotation)
    # while keeping the old CA's certificates, which every pod still trusts
    controller.reconcile(space)
    assert data(kube, internal_name)["tls.crt"] == before
    assert data(kube, internal_name)[m.CA_FILE] == new.bundle
    router = kube.find("StatefulSet", m.router_name(SMALL))
    assert router["spec"]["template"]["metadata"]["annotations"][m.ANNOTATION_TRUST] == \
        m.trust_hash(new.bundle)
    assert not rolled_out(router)
    with pytest.raises(internal_ca.RotationError, match="not signed by the new CA"):
        internal_ca.finish_rotation(kube, NS)
    controller.reconcile(space)  # still rolling: still the old certificates
    assert data(kube, internal_name)["tls.crt"] == before

    # Once every router and the agent run with it, the next reconcile signs them again
    kube.settle()
    controller.reconcile(space)
    for name in [m.mesh_secret_name(SMALL), internal_name,
                 m.broker_tls_secret_name(SMALL, "broker-0")]:
        secret = data(kube, name)
        assert new.issued(secret["tls.crt"]), name
        assert secret[m.CA_FILE] == new.bundle  # the old CA still trusted meanwhile

    # The auth service's certificate goes last, then the old CA leaves the bundles
    with pytest.raises(internal_ca.RotationError, match="auth service"):
        internal_ca.finish_rotation(kube, NS)
    assert new.issued(data(kube, internal_ca.AUTH_SERVICE_SECRET)["tls.crt"])
    finished = internal_ca.finish_rotation(kube, NS)
    assert finished.bundle == new.cert_pem and not finished.previous_pem
    assert "previous.crt" not in data(kube, internal_ca.SECRET)
    controller.reconcile(space)
    assert data(kube, internal_name)[m.CA_FILE] == new.cert_pem
    assert not verified(before, data(kube, internal_name)[m.CA_FILE],
                        m.router_pod_hosts(space, spaces.CFG)[0])


def test_the_auth_service_gets_a_certificate_of_the_ca_unless_the_operator_gave_one(
        kube, controller):
    ca = internal_ca.ensure(kube, NS)
    assert internal_ca.ensure_auth_service_certificate(kube, NS, ca) == "issued"
    assert internal_ca.ensure_auth_service_certificate(kube, NS, ca) == "kept"
    secret = data(kube, internal_ca.AUTH_SERVICE_SECRET)
    assert verified(secret["tls.crt"], ca.bundle, f"{m.AUTH_SERVICE_NAME}.{NS}.svc")
    controller.reconcile(spaces.small())
    assert data(kube, m.internal_secret_name(SMALL))[m.AUTH_CA_FILE] == ca.bundle

    # An operator's own (say cert-manager's, of another CA): left alone, its CA given to the
    # routers
    own_ca, _ = pki.new_ca("operator-ca")
    kube.delete("v1", "Secret", NS, internal_ca.AUTH_SERVICE_SECRET)
    kube.apply({"apiVersion": "v1", "kind": "Secret", "type": "kubernetes.io/tls",
                "metadata": {"name": internal_ca.AUTH_SERVICE_SECRET, "namespace": NS},
                "data": {k: base64.b64encode(v.encode()).decode() for k, v in
                         {"tls.crt": "C", "tls.key": "K", "ca.crt": own_ca}.items()}},
               "kubectl")
    assert internal_ca.ensure_auth_service_certificate(kube, NS, ca) == "operator's"
    assert data(kube, internal_ca.AUTH_SERVICE_SECRET)["tls.crt"] == "C"
    controller.reconcile(spaces.small())
    assert data(kube, m.internal_secret_name(SMALL))[m.AUTH_CA_FILE] == own_ca


# The clients: agent, endpoints, drainer, gateway --------------------------------------------

def test_the_agent_reaches_its_routers_and_brokers_over_tls_checked_against_the_bundle():
    agent = m.agent_manifest(spaces.small(), spaces.CFG, "u", trust=spaces.TRUST)
    pod = agent["spec"]["template"]
    (container,) = pod["spec"]["containers"]
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert env["MAAS_ROUTER_MANAGEMENT_URL"].startswith("amqps://")
    assert env["MAAS_ROUTER_MANAGEMENT_URL"].endswith(f":{m.ROUTER_MANAGEMENT_PORT}")
    assert env["RABBITMQ_API_URL"].startswith("https://")
    assert env["RABBITMQ_AMQPS_PORT"] == str(m.BROKER_AMQPS_PORT)
    mounts = {v["name"]: v["mountPath"] for v in container["volumeMounts"]}
    volume = next(v for v in pod["spec"]["volumes"] if v["name"] == "internal-ca")
    assert mounts["internal-ca"] == env["MAAS_INTERNAL_TLS_DIR"] == m.AGENT_CA_DIR
    # the bundle as ca.pem (config_service.brokers.internal_ca), never a key
    assert volume["secret"]["items"] == [{"key": m.CA_FILE, "path": "ca.pem"}]
    assert pod["metadata"]["annotations"][m.ANNOTATION_TRUST] == m.trust_hash(spaces.TRUST)


@pytest.mark.django_db
def test_a_kubernetes_space_s_endpoints_and_broker_connector_are_tls(settings, tenant,
                                                                     tmp_path):
    from config_service import services
    from core.context import Context
    from workers import endpoints
    from workers.agents.router import desired as rc
    from workers.agents.router.agent import broker_login

    settings.MAAS_INFRA_BACKEND = "kubernetes"
    settings.MAAS_INTERNAL_TLS_DIR = str(tmp_path)
    (tmp_path / "ca.pem").write_text(spaces.TRUST)
    space = services.create_address_space(ctx=Context(actor="test"), tenant=tenant,
                                          name="tls", type="standard", plan="standard-small")
    services.create_address(ctx=Context(actor="test"), space=space, address="q", type="queue",
                            plan="standard-small-queue")
    where = endpoints.of(space)
    for router in where.routers:
        assert router.management_url.startswith("amqps://")
        assert router.management_ca == str(tmp_path / "ca.pem")
    broker = where.broker
    assert broker.api_url.startswith("https://") and f":{m.BROKER_MANAGEMENT_PORT}/" in \
        broker.api_url
    assert broker.broker_ca == str(tmp_path / "ca.pem")
    # qdrouterd (no virtualHost on its connectors) straight to the broker's TLS listener
    login = broker_login(broker, "", "u", "p", rc.RouterFeatures(connector_virtual_host=False))
    assert (login.host, login.port, login.tls) == (broker.amqp_host, m.BROKER_AMQPS_PORT, True)
    entities, _ = rc.desired_entities(space, list(space.addresses.all()), [], login,
                                      features=rc.RouterFeatures(connector_virtual_host=False))
    (connector,) = [a for (t, _), a in entities.items() if t == rc.CONNECTOR]
    assert connector["sslProfile"] == qdrouterd.BROKER_PROFILE == rc.BROKER_SSL_PROFILE


class _TlsApi:
    """A stand-in of a broker's HTTPS management API with a certificate of `ca`: a vhost with
    one queue of 3 messages; records the shovel it is asked for."""

    def __init__(self, ca: internal_ca.InternalCa, tmp_path):
        cert, key = pki.issue(ca.cert_pem, ca.key_pem, ["localhost"])
        (tmp_path / "api.crt").write_text(cert)
        (tmp_path / "api.key").write_text(key)
        self.shovels: list[dict] = []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def _answer(self, code, body=None):
                raw = json.dumps(body).encode() if body is not None else b""
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(raw)))
                self.end_headers()
                self.wfile.write(raw)

            def do_GET(self):  # noqa: N802
                if self.path.startswith("/api/queues/"):
                    return self._answer(200, [{"name": "orders", "messages": 3}])
                if self.path.startswith("/api/parameters/shovel/"):
                    return self._answer(404, {"error": "Object Not Found"})
                return self._answer(200, {"name": "acme.shop"})

            def do_PUT(self):  # noqa: N802
                length = int(self.headers["Content-Length"])
                outer.shovels.append(json.loads(self.rfile.read(length)))
                return self._answer(201)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        context.load_cert_chain(tmp_path / "api.crt", tmp_path / "api.key")
        self.server.socket = context.wrap_socket(self.server.socket, server_side=True)
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()


def test_the_drainer_reads_the_brokers_over_https_and_shovels_over_amqps(tmp_path):
    ca = internal_ca.InternalCa(*pki.new_ca("test-ca"))
    (tmp_path / "ca.pem").write_text(ca.bundle)
    api = _TlsApi(ca, tmp_path)
    try:
        drainer = RabbitMQDrainer(spaces.CFG, lambda infra: "pw", management_port=api.port,
                                  host_of=lambda space, cluster: "localhost",
                                  ca=lambda: str(tmp_path / "ca.pem"), settle=0)
        assert drainer.drain(spaces.small(), "broker-1", ("broker-0",)) == 3
        (shovel,) = api.shovels
        value = shovel["value"]
        # from the leaving node itself (no listener needed), to the target's TLS listener,
        # whose certificate the leaving broker checks against its mounted bundle, by name
        assert value["src-uri"] == f"amqp:///{spaces.small().vhost}"
        assert value["dest-uri"].startswith(f"amqps://{m.BROKER_ADMIN_USER}:pw@localhost:"
                                            f"{m.BROKER_AMQPS_PORT}/")
        assert f"cacertfile={m.BROKER_TLS_DIR}/{m.CA_FILE}" in value["dest-uri"]
        assert "verify=verify_peer" in value["dest-uri"]
        assert "server_name_indication=localhost" in value["dest-uri"]
        # a broker whose certificate the bundle does not vouch for is not believed
        other = internal_ca.InternalCa(*pki.new_ca("other-ca"))
        (tmp_path / "other.pem").write_text(other.bundle)
        doubting = RabbitMQDrainer(spaces.CFG, lambda infra: "pw", management_port=api.port,
                                   host_of=lambda space, cluster: "localhost",
                                   ca=lambda: str(tmp_path / "other.pem"), timeout=3)
        assert doubting.drain(spaces.small(), "broker-1", ("broker-0",)) == -1
    finally:
        api.server.shutdown()


def test_tls_contexts_follow_their_files_when_a_secret_changes(tmp_path):
    """What the MQTT gateway and the auth service do when the kubelet swaps a mounted Secret:
    a client context trusts the new bundle only (a dropped CA is no longer trusted), a server
    serves the new certificate."""
    first, second = (internal_ca.InternalCa(*pki.new_ca(n)) for n in ("first", "second"))
    bundle = tmp_path / "ca.pem"
    bundle.write_text(first.bundle)
    now = [0.0]
    client = tls_files.ClientContext(str(bundle), check_hostname=True, clock=lambda: now[0])
    subjects = lambda c: {x["subject"] for x in c.get_ca_certs()}  # noqa: E731
    before = subjects(client.get())
    bundle.write_text(second.bundle)
    assert subjects(client.get()) == before  # looked at most every RECHECK seconds
    now[0] += tls_files.RECHECK
    assert subjects(client.get()) != before and client.get().check_hostname
    cert, key = tmp_path / "tls.crt", tmp_path / "tls.key"
    for path, text in zip((cert, key), pki.issue(first.cert_pem, first.key_pem, ["a"]),
                          strict=True):
        path.write_text(text)
    server = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    server.load_cert_chain(cert, key)
    reloading = tls_files.ServerCertificate(server, str(cert), str(key))
    assert reloading.reload_if_changed() is False
    for path, text in zip((cert, key), pki.issue(second.cert_pem, second.key_pem, ["a"]),
                          strict=True):
        path.write_text(text)
    assert reloading.reload_if_changed() is True


def test_the_gateway_reaches_a_space_s_own_router_over_tls_by_its_name(tmp_path):
    from dataplane.gateway.server import Gateway

    bundle = tmp_path / "ca.pem"
    bundle.write_text(internal_ca.InternalCa(*pki.new_ca("ca")).bundle)

    class Control:
        def router_of(self, vhost, default):
            return ("router-x-internal.maas.svc", m.ROUTER_INTERNAL_PORT)

    async def ask():
        gateway = Gateway("127.0.0.1", 5673, Control(),
                          space_router_tls=tls_files.ClientContext(str(bundle),
                                                                   check_hostname=True))
        return await gateway.routers_for("acme.shop")

    routers, context = asyncio.run(ask())
    assert routers == [("router-x-internal.maas.svc", m.ROUTER_INTERNAL_PORT)]
    assert context is not None and context.check_hostname
    assert context.verify_mode == ssl.CERT_REQUIRED


# The commands ---------------------------------------------------------------------------------

@pytest.fixture
def on_kubernetes(settings, kube, monkeypatch):
    from workers.infra import kube as kube_module

    settings.MAAS_INFRA_BACKEND = "kubernetes"
    settings.MAAS_INFRA_NAMESPACE = NS
    monkeypatch.setattr(kube_module, "KubernetesClient", lambda: kube)
    return kube


@pytest.mark.django_db
def test_the_migrations_job_s_command_makes_the_ca_and_the_auth_service_s_certificate(
        on_kubernetes, capsys):
    call_command("internal_ca")
    ca = the_ca(on_kubernetes)
    assert ca is not None
    assert ca.issued(data(on_kubernetes, internal_ca.AUTH_SERVICE_SECRET)["tls.crt"])
    call_command("internal_ca")  # again: nothing new
    assert the_ca(on_kubernetes) == ca
    assert "kept" in capsys.readouterr().out


@pytest.mark.django_db
def test_rotate_secrets_rotates_the_internal_ca_and_wakes_the_standard_spaces(
        on_kubernetes, tenant, monkeypatch):
    from config_service import services
    from core.context import Context
    from maas.management.commands import rotate_secrets

    woken = []
    monkeypatch.setattr(rotate_secrets, "notify_space", woken.append)
    space = services.create_address_space(ctx=Context(actor="test"), tenant=tenant, name="r",
                                          type="standard", plan="standard-small")
    call_command("internal_ca")
    old = the_ca(on_kubernetes)
    call_command("rotate_secrets", "--internal-ca")
    assert the_ca(on_kubernetes).previous_pem == old.cert_pem
    assert woken == [space.uid]
    with pytest.raises(CommandError, match="under way"):
        call_command("rotate_secrets", "--internal-ca")
    with pytest.raises(CommandError, match="auth service"):  # no space has certificates yet
        call_command("rotate_secrets", "--internal-ca-finish")
    call_command("rotate_secrets", "--internal-ca-finish")
    assert not the_ca(on_kubernetes).previous_pem
