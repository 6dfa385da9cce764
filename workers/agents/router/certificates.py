"""The certificates of the routers on one machine: a self-signed one for the AMQPS listener
(EnMasse's `selfsigned` provider; its PEM is what address spaces report as `status.caCert`),
and the internal CA with a certificate per party of the internal links: each router of the mesh,
the vhost relays the routers reach RabbitMQ through (deploy/local/services.sh signs RabbitMQ's
own with the same CA)."""
import datetime
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID


def ensure_self_signed(cert_path: str, key_path: str, host: str = "127.0.0.1") -> bool:
    """Writes a certificate and key if either is missing; True if it made new ones."""
    cert_file, key_file = Path(cert_path), Path(key_path)
    if cert_file.exists() and key_file.exists():
        return False
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "maas-router")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name).issuer_name(name).public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=825))
        .add_extension(x509.SubjectAlternativeName(_alt_names(host)), critical=False)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    _write_pair(cert_file, key_file, cert, key)
    return True


def ca_cert_pem(cert_path: str) -> str:
    path = Path(cert_path)
    return path.read_text() if path.exists() else ""


def ensure_internal_certificates(directory: str, router_ids: list[str],
                                 host: str = "127.0.0.1") -> dict[str, tuple[str, str, str]]:
    """The internal CA (made once, kept in `directory`) and a certificate of it per party
    (a router, a relay), made if missing, for `host` (where it listens); {id: (CA,
    certificate, key) paths}. A router presents its own to each peer and accepts only peers
    whose certificate this CA signed."""
    where = Path(directory)
    ca_cert, ca_key = where / "ca.pem", where / "ca-key.pem"
    if not (ca_cert.exists() and ca_key.exists()):
        key = ec.generate_private_key(ec.SECP256R1())
        name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "maas-internal-ca")])
        now = datetime.datetime.now(datetime.UTC)
        cert = (x509.CertificateBuilder()
                .subject_name(name).issuer_name(name).public_key(key.public_key())
                .serial_number(x509.random_serial_number())
                .not_valid_before(now - datetime.timedelta(minutes=5))
                .not_valid_after(now + datetime.timedelta(days=3650))
                .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
                .add_extension(x509.KeyUsage(
                    digital_signature=True, content_commitment=False, key_encipherment=False,
                    data_encipherment=False, key_agreement=False, key_cert_sign=True,
                    crl_sign=True, encipher_only=False, decipher_only=False), critical=True)
                .sign(key, hashes.SHA256()))
        _write_pair(ca_cert, ca_key, cert, key)
    issuer = x509.load_pem_x509_certificate(ca_cert.read_bytes())
    issuer_key = serialization.load_pem_private_key(ca_key.read_bytes(), password=None)
    out = {}
    for router_id in router_ids:
        cert_path, key_path = where / f"{router_id}.pem", where / f"{router_id}-key.pem"
        if not (cert_path.exists() and key_path.exists()):
            key = ec.generate_private_key(ec.SECP256R1())
            now = datetime.datetime.now(datetime.UTC)
            cert = (x509.CertificateBuilder()
                    .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, router_id)]))
                    .issuer_name(issuer.subject).public_key(key.public_key())
                    .serial_number(x509.random_serial_number())
                    .not_valid_before(now - datetime.timedelta(minutes=5))
                    .not_valid_after(now + datetime.timedelta(days=825))
                    .add_extension(x509.SubjectAlternativeName(_alt_names(host, ip_as_dns=True)),
                                   critical=False)
                    .add_extension(x509.BasicConstraints(ca=False, path_length=None),
                                   critical=True)
                    .sign(issuer_key, hashes.SHA256()))
            _write_pair(cert_path, key_path, cert, key)
        out[router_id] = (str(ca_cert), str(cert_path), str(key_path))
    return out


def _alt_names(host: str, ip_as_dns: bool = False) -> list:
    """localhost and `host`; `ip_as_dns`: an IP address also as a DNS name, which is all
    proton 0.37 compares a peer's name with (qdrouterd's `verifyHostname`)."""
    import ipaddress

    names = [x509.DNSName("localhost")]
    try:
        names.append(x509.IPAddress(ipaddress.ip_address(host)))
        if ip_as_dns:
            names.append(x509.DNSName(host))
    except ValueError:
        names.append(x509.DNSName(host))
    return names


def _write_pair(cert_file: Path, key_file: Path, cert, key) -> None:
    cert_file.parent.mkdir(parents=True, exist_ok=True)
    key_file.write_bytes(key.private_bytes(serialization.Encoding.PEM,
                                           serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption()))
    key_file.chmod(0o600)
    cert_file.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
