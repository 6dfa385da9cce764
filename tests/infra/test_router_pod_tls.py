"""A space's router pod for real: qdrouterd 1.19 (`QDROUTERD`) on the configuration and the
certificates the infra controller applied (written where the pod mounts them; listeners moved
to free loopback ports, never this machine's RabbitMQ's), relaying logins to the real auth
service, which serves TLS with the certificate the internal CA gave it.

Its management listener refuses plain AMQP and a client that does not trust the internal CA,
and takes the agent's `amqps://` client with the bundle, logging the router admin in through
the auth service over TLS; the MQTT gateway's listener and the mesh's take TLS only, the
former with a certificate for the name the gateway dials.
"""
import socket
import ssl

import pytest
from proton import ConnectionException
from proton.utils import BlockingConnection

from tests.qdrouterd import needs_qdrouterd
from tests.router.conftest import ADMIN_PASSWORD, ADMIN_USER
from workers import pki
from workers.clients.qdr import Management, RouterUnreachable
from workers.infra import manifests as m
from workers.infra.controller import InfraController

from . import pods, spaces
from .fake_kube import FakeKubernetes

pytestmark = needs_qdrouterd
ROUTER = "org.apache.qpid.dispatch.router"


@pytest.fixture(scope="module")
def pod(tmp_path_factory):
    kube = FakeKubernetes()
    space = spaces.small()
    InfraController(kube, None, spaces.CFG, lambda purpose, infra: "x").reconcile(space)
    try:
        router = pods.RunningRouter(kube, space, tmp_path_factory.mktemp("router-pod"),
                                    spaces.CFG.namespace)
    except RuntimeError as exc:
        pytest.fail(str(exc))
    yield router.pod, router.bundle, space
    router.stop()


def test_the_agent_manages_the_router_over_tls_with_the_internal_ca(pod):
    router, bundle, space = pod
    mgmt = Management(f"amqps://127.0.0.1:{router.ports['management']}", ADMIN_USER,
                      ADMIN_PASSWORD, ca=bundle, timeout=10)
    try:
        (me,) = mgmt.query(ROUTER, ["mode", "id"])
    finally:
        mgmt.close()
    assert me["mode"] == "interior" and me["id"] == f"{m.router_name(space.infra)}-0"


def test_management_refuses_plain_amqp_and_a_client_of_another_ca(pod, tmp_path):
    router, _, _ = pod
    with pytest.raises(ConnectionException):
        BlockingConnection(f"amqp://127.0.0.1:{router.ports['management']}", user=ADMIN_USER,
                           password=ADMIN_PASSWORD, allowed_mechs="PLAIN",
                           allow_insecure_mechs=True, timeout=5)
    other = tmp_path / "other.pem"
    other.write_text(pki.new_ca("another-ca")[0])
    with pytest.raises(RouterUnreachable):
        Management(f"amqps://127.0.0.1:{router.ports['management']}", ADMIN_USER,
                   ADMIN_PASSWORD, ca=str(other), timeout=5)


def handshake(port: int, bundle: str, name: str) -> dict:
    """A TLS handshake as the MQTT gateway makes it: the chain and `name` checked."""
    context = ssl.create_default_context(cafile=bundle)
    with socket.create_connection(("127.0.0.1", port), timeout=5) as raw:
        with context.wrap_socket(raw, server_hostname=name) as tls:
            return tls.getpeercert()


def test_the_gateway_s_listener_is_tls_with_a_certificate_for_the_name_it_dials(pod):
    router, bundle, space = pod
    name = m.service_host(f"{m.router_name(space.infra)}-internal", spaces.CFG)
    assert handshake(router.ports["internal"], bundle, name)
    with pytest.raises(ssl.SSLCertVerificationError):
        handshake(router.ports["internal"], bundle, "router-elsewhere.maas.svc")
    with pytest.raises(ConnectionException):  # a plain login there is refused
        BlockingConnection(f"amqp://127.0.0.1:{router.ports['internal']}", user="u@acme.shop",
                           password="p", allowed_mechs="PLAIN", allow_insecure_mechs=True,
                           timeout=5)


def test_the_mesh_listener_takes_tls_only(pod):
    router, bundle, space = pod
    with pytest.raises(ConnectionException):
        BlockingConnection(f"amqp://127.0.0.1:{router.ports['inter-router']}", timeout=5)
    peer = m.router_pod_hosts(space, spaces.CFG)[0]
    assert handshake(router.ports["inter-router"], bundle, peer)
