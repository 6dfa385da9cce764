"""The certificates of the routers on one machine: a self-signed one for the AMQPS listener
(EnMasse's `selfsigned` provider; its PEM is what address spaces report as `status.caCert`),
and the internal CA with a certificate per party of the internal links: each router of the mesh,
the vhost relays the routers reach RabbitMQ through (deploy/local/services.sh signs RabbitMQ's
own with the same CA). The X.509 work is workers/pki.py's; this module keeps the files."""
import os
from pathlib import Path

from workers import pki


def ensure_self_signed(cert_path: str, key_path: str, host: str = "127.0.0.1") -> bool:
    """Writes a certificate and key if either is missing; True if it made new ones."""
    cert_file, key_file = Path(cert_path), Path(key_path)
    if cert_file.exists() and key_file.exists():
        return False
    _write_pair(cert_file, key_file, *pki.self_signed(["localhost", host],
                                                      common_name="maas-router"))
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
        _write_pair(ca_cert, ca_key, *pki.new_ca("maas-internal-ca"))
    # ca.pem is the trust bundle: the signing CA first, and during a rotation the one before
    # it (rotate_internal_ca), which parties still trust while they are re-signed.
    issuer, issuer_key = pki.certificates(ca_cert.read_text())[0], ca_key.read_text()
    out = {}
    for router_id in router_ids:
        cert_path, key_path = where / f"{router_id}.pem", where / f"{router_id}-key.pem"
        if not (cert_path.exists() and key_path.exists()) or not pki.signed_by(
                cert_path.read_text(), issuer):
            _write_pair(cert_path, key_path, *pki.issue(
                issuer, issuer_key, ["localhost", host], common_name=router_id,
                ip_as_dns=True))
        out[router_id] = (str(ca_cert), str(cert_path), str(key_path))
    return out


class RotationError(Exception):
    """A rotation of the internal CA that cannot be done now (the message says why)."""


def rotate_internal_ca(directory: str) -> None:
    """A new internal CA signs from now on; the current one stays in the trust bundle
    (ca.pem) until `finish_internal_ca_rotation`. Certificates it signed are signed again by
    whoever keeps them: `ensure_internal_certificates` (a platform start), services.sh
    (RabbitMQ's)."""
    where = Path(directory)
    ca_cert, ca_key = where / "ca.pem", where / "ca-key.pem"
    if not (ca_cert.exists() and ca_key.exists()):
        raise RotationError(f"no internal CA in {directory} to rotate")
    bundle = pki.certificates(ca_cert.read_text())
    if len(bundle) > 1:
        raise RotationError("a rotation of the internal CA is under way: finish it first "
                            "(rotate_secrets --internal-ca-finish)")
    cert, key = pki.new_ca("maas-internal-ca")
    _write_pair(ca_cert, ca_key, cert + bundle[0], key)


def finish_internal_ca_rotation(directory: str, served: dict[str, str]) -> None:
    """Drops the previous CA from the trust bundle once nothing it signed is left: the
    certificates in `directory` and those `served` ({who: PEM}, e.g. what RabbitMQ presents)."""
    where = Path(directory)
    ca_cert = where / "ca.pem"
    bundle = pki.certificates(ca_cert.read_text()) if ca_cert.exists() else []
    if len(bundle) < 2:
        raise RotationError("no rotation of the internal CA is under way")
    kept = {p.name: p.read_text() for p in sorted(where.glob("*.pem"))
            if p.name != "ca.pem" and not p.name.endswith("-key.pem")}
    outdated = [who for who, pem in {**kept, **served}.items()
                if not pki.signed_by(pem, bundle[0])]
    if outdated:
        raise RotationError("still signed by the previous CA: " + ", ".join(outdated)
                            + " (restart the platform, run deploy/local/services.sh)")
    ca_cert.write_text(bundle[0])


def _write_pair(cert_file: Path, key_file: Path, cert: str, key: str) -> None:
    """The key first, readable by its owner only, then the certificate: a pair is whole once
    its certificate exists."""
    cert_file.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(key_file, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(key)
    key_file.chmod(0o600)
    cert_file.write_text(cert)
