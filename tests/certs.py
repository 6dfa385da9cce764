"""Certificates for the tests, as a tenant brings them: a CA of its own and a server
certificate it signs for a host (valid, expired, or for another host), as PEM."""
import base64
import datetime
from dataclasses import dataclass

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID


@dataclass(frozen=True)
class Bundle:
    chain: str  # server certificate, then the CA
    key: str
    ca: str

    def spec(self) -> dict:
        """`cert` of an endpoint with this bundle (base64 PEM, as EnMasse took it)."""
        return {"provider": "certBundle", "tlsCert": b64(self.chain), "tlsKey": b64(self.key)}


def b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


def _pem(cert) -> str:
    return cert.public_bytes(serialization.Encoding.PEM).decode()


def bundle(host: str, *, days: float = 90, ago: float = 1, other_key: bool = False) -> Bundle:
    """A CA and a server certificate for `host` (a wildcard allowed), valid from `ago` days
    before now for `days` days; `other_key`: the key given is not the certificate's."""
    now = datetime.datetime.now(datetime.UTC)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "Tenant Test CA")])
    ca = (x509.CertificateBuilder().subject_name(ca_name).issuer_name(ca_name)
          .public_key(ca_key.public_key()).serial_number(x509.random_serial_number())
          .not_valid_before(now - datetime.timedelta(days=400))
          .not_valid_after(now + datetime.timedelta(days=400))
          .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
          .sign(ca_key, hashes.SHA256()))
    key = ec.generate_private_key(ec.SECP256R1())
    start = now - datetime.timedelta(days=ago)
    cert = (x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, host)]))
            .issuer_name(ca_name).public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(start).not_valid_after(start + datetime.timedelta(days=days))
            .add_extension(x509.SubjectAlternativeName([x509.DNSName(host)]), critical=False)
            .sign(ca_key, hashes.SHA256()))
    given = ec.generate_private_key(ec.SECP256R1()) if other_key else key
    key_pem = given.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                  serialization.NoEncryption()).decode()
    return Bundle(_pem(cert) + _pem(ca), key_pem, _pem(ca))
