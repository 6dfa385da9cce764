"""A self-signed certificate for the router's AMQPS listener on one machine (EnMasse's
`selfsigned` provider); its PEM is what address spaces report as `status.caCert`."""
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
    alt_names = [x509.DNSName("localhost")]
    try:
        import ipaddress

        alt_names.append(x509.IPAddress(ipaddress.ip_address(host)))
    except ValueError:
        alt_names.append(x509.DNSName(host))
    cert = (
        x509.CertificateBuilder()
        .subject_name(name).issuer_name(name).public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=825))
        .add_extension(x509.SubjectAlternativeName(alt_names), critical=False)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    cert_file.parent.mkdir(parents=True, exist_ok=True)
    key_file.write_bytes(key.private_bytes(serialization.Encoding.PEM,
                                           serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption()))
    key_file.chmod(0o600)
    cert_file.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    return True


def ca_cert_pem(cert_path: str) -> str:
    path = Path(cert_path)
    return path.read_text() if path.exists() else ""
