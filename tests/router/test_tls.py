"""The AMQPS listener: TLS with a certificate given on the command line, then SASL PLAIN."""

import datetime
import ipaddress

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID
from proton import ConnectionException, SSLDomain
from proton.utils import BlockingConnection

from .conftest import ADDRESS, RouterProcess, add_tenant


def self_signed(tmp_path):
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name)
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=1))
            .not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.SubjectAlternativeName(
                [x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), critical=False)
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .sign(key, hashes.SHA256()))
    cert_path, key_path = tmp_path / "cert.pem", tmp_path / "key.pem"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(key.private_bytes(serialization.Encoding.PEM,
                                           serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption()))
    return str(cert_path), str(key_path)


@pytest.fixture(scope="module")
def router(tmp_path_factory):
    cert, key = self_signed(tmp_path_factory.mktemp("tls"))
    proc = RouterProcess(["--tls-cert", cert, "--tls-key", key])
    proc.cert = cert
    proc.start()
    yield proc
    proc.stop()


@pytest.fixture(scope="module", autouse=True)
def tenant(mgmt):
    add_tenant(mgmt, "sec", {"sam": "sam-pw"},
               {"all": {"users": "sam", "sources": "*", "targets": "*"}})
    mgmt.create(ADDRESS, "sec-a", prefix="sec/a")


def client_domain(ca: str) -> SSLDomain:
    domain = SSLDomain(SSLDomain.MODE_CLIENT)
    domain.set_trusted_ca_db(ca)
    domain.set_peer_authentication(SSLDomain.VERIFY_PEER_NAME, ca)
    return domain


def test_tls_client_authenticates_and_attaches(router):
    # the vhost rides in the username: the open hostname is also the TLS peer name
    conn = BlockingConnection(f"amqps://127.0.0.1:{router.amqps_port}", user="sam@sec",
                              password="sam-pw", allowed_mechs="PLAIN",
                              ssl_domain=client_domain(router.cert), timeout=5)
    sender = conn.create_sender("a")
    assert sender.link.remote_target.address == "a"
    conn.close()


def test_tls_wrong_password_is_refused(router):
    with pytest.raises(ConnectionException, match="(?i)auth"):
        BlockingConnection(f"amqps://127.0.0.1:{router.amqps_port}", user="sam@sec",
                           password="nope", allowed_mechs="PLAIN",
                           ssl_domain=client_domain(router.cert), timeout=5)


def test_metrics_endpoint_uses_enmasse_names(router):
    import requests

    text = requests.get(f"http://127.0.0.1:{router.metrics_port}/metrics", timeout=5).text
    assert "enmasse_qdr_connections_total" in text
    assert "enmasse_qdr_accepted_deliveries_total" in text
