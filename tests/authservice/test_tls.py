"""The auth service over TLS (an ssl.SSLContext): a verifying proton client logs in, and a
client that skips TLS is dropped."""
import socket
import ssl
import threading

import pytest
from proton import SSLDomain
from proton.utils import BlockingConnection

from dataplane.authservice.server import AuthServer
from maas import bindings
from workers.agents.router.certificates import ensure_self_signed

from .conftest import identity_of, new_space, new_user


@pytest.fixture
def tls_auth(transactional_db, tmp_path):
    cert, key = str(tmp_path / "cert.pem"), str(tmp_path / "key.pem")
    ensure_self_signed(cert, key, "127.0.0.1")
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(cert, key)
    server = AuthServer(("127.0.0.1", 0), bindings.verify, ssl_context=context, handshake_timeout=3)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server.server_address[1], cert
    server.shutdown()
    server.server_close()
    thread.join(5)


def test_a_user_logs_in_over_tls(tls_auth, tenant):
    port, cert = tls_auth
    space = new_space(tenant)
    new_user(space, "app", "app-password")
    domain = SSLDomain(SSLDomain.MODE_CLIENT)
    domain.set_trusted_ca_db(cert)
    domain.set_peer_authentication(SSLDomain.VERIFY_PEER_NAME, cert)
    # proton checks the peer name against DNS names only: the certificate has "localhost"
    conn = BlockingConnection(f"amqps://127.0.0.1:{port}", user=f"app@{space.vhost}",
                              password="app-password", allowed_mechs="PLAIN",
                              ssl_domain=domain, virtual_host="localhost", timeout=5)
    assert identity_of(conn)[0]["sub"] == f"app@{space.vhost}"
    conn.close()


def test_a_client_without_tls_is_dropped(tls_auth):
    port, _ = tls_auth
    with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
        sock.sendall(b"AMQP\x03\x01\x00\x00")
        try:
            answer = sock.recv(100)
        except ConnectionResetError:
            answer = b""
    assert not answer.startswith(b"AMQP")  # at most a TLS alert: the handshake failed first
