"""The X.509 pieces behind every certificate the platform makes: a CA, a certificate a CA signs,
a self-signed one, and the checks that decide whether a kept certificate still serves.

Pure `cryptography`, no Django and no files: the one-machine router certificates
(workers/agents/router/certificates.py), the spaces' endpoint CAs (workers/certificates.py) and
the Kubernetes internal CA (workers/infra/internal_ca.py) all sign through here. Keys are EC
P-256 in PKCS8 PEM, certificates PEM strings.
"""
import datetime
import ipaddress

from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

CA_DAYS = 3650
LEAF_DAYS = 825  # what browsers and Apple's TLS stack still accept for a server certificate
RENEW_BEFORE = datetime.timedelta(days=30)
_BACKDATE = datetime.timedelta(minutes=5)  # a peer whose clock is a little behind accepts it

SERVER, CLIENT = "server", "client"
_USAGES = {SERVER: ExtendedKeyUsageOID.SERVER_AUTH, CLIENT: ExtendedKeyUsageOID.CLIENT_AUTH}


def _now() -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC)


def cert_pem(cert: x509.Certificate) -> str:
    return cert.public_bytes(serialization.Encoding.PEM).decode()


def key_pem(key) -> str:
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption()).decode()


def _subject(common_name: str, organization: str = "") -> x509.Name:
    parts = [x509.NameAttribute(NameOID.ORGANIZATION_NAME, organization)] if organization else []
    return x509.Name(parts + [x509.NameAttribute(NameOID.COMMON_NAME, common_name[:64])])


def alt_names(hosts, ip_as_dns: bool = False) -> list:
    """Subject alternative names of `hosts`: DNS names, and IP addresses as such (`ip_as_dns`:
    also as a DNS name, which is all proton 0.37 compares a peer's name with: qdrouterd's
    `verifyHostname`)."""
    names: list = []
    for host in hosts:
        try:
            names.append(x509.IPAddress(ipaddress.ip_address(host)))
            if ip_as_dns:
                names.append(x509.DNSName(host))
        except ValueError:
            names.append(x509.DNSName(host))
    return names


def new_ca(common_name: str, days: int = CA_DAYS, organization: str = "",
           now: datetime.datetime | None = None) -> tuple[str, str]:
    """(certificate, key) PEM of a new CA that signs certificates only (path length 0)."""
    now = now or _now()
    key = ec.generate_private_key(ec.SECP256R1())
    name = _subject(common_name, organization)
    cert = (x509.CertificateBuilder()
            .subject_name(name).issuer_name(name).public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - _BACKDATE).not_valid_after(now + datetime.timedelta(days=days))
            .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
            .add_extension(x509.KeyUsage(
                digital_signature=True, content_commitment=False, key_encipherment=False,
                data_encipherment=False, key_agreement=False, key_cert_sign=True, crl_sign=True,
                encipher_only=False, decipher_only=False), critical=True)
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()),
                           critical=False)
            .sign(key, hashes.SHA256()))
    return cert_pem(cert), key_pem(key)


def issue(ca_cert: str, ca_key: str, hosts, days: int = LEAF_DAYS, common_name: str = "",
          usages=(SERVER, CLIENT), ip_as_dns: bool = False,
          now: datetime.datetime | None = None) -> tuple[str, str]:
    """(certificate, key) PEM for `hosts`, signed by the CA. Server and client use by default:
    the routers of a mesh present theirs both ways."""
    now = now or _now()
    issuer = x509.load_pem_x509_certificate(ca_cert.encode())
    issuer_key = serialization.load_pem_private_key(ca_key.encode(), password=None)
    hosts = list(hosts)
    key = ec.generate_private_key(ec.SECP256R1())
    builder = (x509.CertificateBuilder()
               .subject_name(_subject(common_name or hosts[0]))
               .issuer_name(issuer.subject).public_key(key.public_key())
               .serial_number(x509.random_serial_number())
               .not_valid_before(now - _BACKDATE)
               .not_valid_after(min(now + datetime.timedelta(days=days),
                                    issuer.not_valid_after_utc))
               .add_extension(x509.SubjectAlternativeName(alt_names(hosts, ip_as_dns)),
                              critical=False)
               .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
               .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(
                   issuer.public_key()), critical=False))
    if usages:
        builder = builder.add_extension(x509.ExtendedKeyUsage([_USAGES[u] for u in usages]),
                                        critical=False)
    return cert_pem(builder.sign(issuer_key, hashes.SHA256())), key_pem(key)


def self_signed(hosts, days: int = LEAF_DAYS, common_name: str = "",
                now: datetime.datetime | None = None) -> tuple[str, str]:
    """(certificate, key) PEM of a certificate that is its own CA, for `hosts` (EnMasse's
    `selfsigned`): a client trusts exactly it."""
    now = now or _now()
    hosts = list(hosts)
    key = ec.generate_private_key(ec.SECP256R1())
    name = _subject(common_name or hosts[0])
    cert = (x509.CertificateBuilder()
            .subject_name(name).issuer_name(name).public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - _BACKDATE).not_valid_after(now + datetime.timedelta(days=days))
            .add_extension(x509.SubjectAlternativeName(alt_names(hosts)), critical=False)
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .sign(key, hashes.SHA256()))
    return cert_pem(cert), key_pem(key)


def certificates(bundle: str) -> list[str]:
    """Each certificate of a PEM bundle, as PEM."""
    return [cert_pem(c) for c in x509.load_pem_x509_certificates(bundle.encode())] \
        if bundle.strip() else []


def signed_by(cert: str, ca_cert: str) -> bool:
    """Whether `ca_cert` issued `cert` (its name and its signature)."""
    try:
        leaf = x509.load_pem_x509_certificate(cert.encode())
        ca = x509.load_pem_x509_certificate(ca_cert.encode())
        leaf.verify_directly_issued_by(ca)
    except (ValueError, TypeError, InvalidSignature):
        return False
    return True


def names(cert: str) -> set[str]:
    """The DNS names a certificate is for."""
    parsed = x509.load_pem_x509_certificate(cert.encode())
    try:
        alt = parsed.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except x509.ExtensionNotFound:
        return set()
    return set(alt.get_values_for_type(x509.DNSName))


def still_good(cert: str, hosts, issuer: str | None = None,
               renew_before: datetime.timedelta = RENEW_BEFORE,
               now: datetime.datetime | None = None) -> bool:
    """Whether a kept certificate still serves: it names every one of `hosts`, is not within
    `renew_before` of its end and, with `issuer`, that CA signed it."""
    try:
        parsed = x509.load_pem_x509_certificate(cert.encode())
        covered = set(hosts) <= names(cert)
    except ValueError:
        return False
    remaining = parsed.not_valid_after_utc - (now or _now())
    return covered and remaining > renew_before and (issuer is None or signed_by(cert, issuer))
