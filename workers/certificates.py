"""The certificates a space's endpoints serve (`spec.endpoints[].cert`,
config_service/space_endpoints.py), and their publication to the data plane's TLS listeners.

- `selfsigned`: a CA of the space's own (EC P-256, 10 years), made on first use and kept
  encrypted in InfraCredential (`space-ca:<uid>`) like the data plane's other credentials, and
  a server certificate it signs for the endpoint's host (825 days; made again for a new host
  or 30 days before it expires). `status.caCert` is that CA.
- `certBundle`: the tenant's chain and key, the key sealed in the spec (core.secrets).
  `status.caCert` is the last certificate of the chain.

`publish(space)` writes each endpoint's chain and key where the listeners look them up by SNI
(`MAAS_SPACE_TLS_DIR/<host>/tls.crt`, `tls.key`; dataplane/server_names.py), only when they
changed, and removes the space's hosts it no longer has; `withdraw` removes them all. The router
agent publishes a standard space's, the storage controller a brokered space's, at each
reconcile.
"""
import base64
import datetime
import json
import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from django.conf import settings

from config_service import space_endpoints
from core import secrets
from workers import credentials, pki
from workers.models import InfraCredential

CA_DAYS, SERVER_DAYS, RENEW_DAYS = 3650, 825, 30
INDEX = ".spaces"  # <dir>/.spaces/<uid>: the hosts a space has published, one per line


class CertificateError(Exception):
    """An endpoint's certificate cannot be served (its sealed key no longer opens)."""


@dataclass(frozen=True)
class Served:
    endpoint: str
    host: str
    chain: str  # PEM, server certificate first
    key: str  # PEM
    ca: str  # PEM: what a client trusts


def served(space) -> list[Served]:
    """What each endpoint with a certificate serves (none: the platform's certificate)."""
    out, ca = [], None
    for endpoint in space_endpoints.of(space.spec):
        host, cert = endpoint["expose"]["routeHost"], endpoint["cert"]
        if cert["provider"] == "certBundle":
            key = secrets.unseal(cert["tlsKey"])
            if key is None:
                raise CertificateError(f"endpoint {endpoint['name']}: its key no longer opens "
                                       "(SECRET_KEY changed); give the bundle again")
            chain = base64.b64decode(cert["tlsCert"]).decode()
            last = x509.load_pem_x509_certificates(chain.encode())[-1]
            out.append(Served(endpoint["name"], host, chain, key, _pem(last)))
        else:
            ca = ca or _space_ca(space)  # read once for all the space's endpoints
            ca_cert, ca_key = ca
            chain, key = _server(space, endpoint["name"], host, ca_cert, ca_key)
            out.append(Served(endpoint["name"], host, chain + ca_cert, key, ca_cert))
    return out


def ca_certs(space) -> tuple[list[str], bool]:
    """(the PEMs a client of `space`'s own endpoints trusts, each once; whether they cover
    both its protocols, messaging and mqtt: if not, the other is served with the platform's
    certificate, whose CA the status adds). Reads no key."""
    out, services, own = [], set(), None
    for endpoint in space_endpoints.of(space.spec):
        cert = endpoint["cert"]
        if cert["provider"] == "certBundle":
            chain = base64.b64decode(cert["tlsCert"])
            pem = _pem(x509.load_pem_x509_certificates(chain)[-1])
        else:
            pem = own = own or _space_ca(space)[0]
        services.add(endpoint["service"])
        if pem not in out:
            out.append(pem)
    return out, set(space_endpoints.SERVICES) <= services


def for_host(host: str) -> tuple[str, str] | None:
    """(chain, key) PEM of the endpoint whose host is `host`, or None (the MQTT gateway's
    SNI lookup, maas/bindings.py)."""
    from config_service.models import AddressSpace

    space = AddressSpace.objects.filter(
        terminating=False, spec__endpoints__contains=[{"expose": {"routeHost": host}}]).first()
    if space is None:
        return None
    try:
        endpoints = served(space)
    except CertificateError:
        return None
    return next(((e.chain, e.key) for e in endpoints if e.host == host), None)


def publish(space) -> None:
    """Writes the space's endpoints' files; nothing where no listener reads files
    (MAAS_SPACE_TLS_DIR empty: Kubernetes, whose listeners look hosts up in the database). A
    directory it cannot write is the space's error, not the agent's crash."""
    if not settings.MAAS_SPACE_TLS_DIR:
        return
    try:
        _publish(space)
    except OSError as exc:
        raise CertificateError(f"the endpoints' certificates cannot be written to "
                               f"{settings.MAAS_SPACE_TLS_DIR}: {exc.strerror}") from exc


def _publish(space) -> None:
    root = Path(settings.MAAS_SPACE_TLS_DIR)
    now = served(space)
    wanted = {s.host for s in now}
    for item in now:
        _write(root / item.host, item.chain, item.key)
    index = root / INDEX / str(space.uid)
    before = set(index.read_text().split()) if index.exists() else set()
    for host in before - wanted:
        shutil.rmtree(root / host, ignore_errors=True)
    if wanted != before:
        if wanted:
            atomic_write(index, "\n".join(sorted(wanted)) + "\n", 0o644)
        else:
            index.unlink(missing_ok=True)


def withdraw(space) -> None:
    """Removes the space's published files and forgets its CA and server certificates."""
    root = Path(settings.MAAS_SPACE_TLS_DIR or ".")
    index = root / INDEX / str(space.uid)
    if settings.MAAS_SPACE_TLS_DIR and index.exists():
        for host in index.read_text().split():
            shutil.rmtree(root / host, ignore_errors=True)
        index.unlink(missing_ok=True)
    InfraCredential.objects.filter(name__in=[f"space-ca:{space.uid}"]).delete()
    InfraCredential.objects.filter(name__startswith=f"space-cert:{space.uid}:").delete()


def _write(where: Path, chain: str, key: str) -> None:
    """The pair, each file replaced atomically and only if it differs (the listeners reread a
    changed file); the key first, so a reader never pairs a new chain with an old key for
    long: it rereads both when either changed."""
    if (where / "tls.crt").exists() and (where / "tls.crt").read_text() == chain \
            and (where / "tls.key").exists() and (where / "tls.key").read_text() == key:
        return
    atomic_write(where / "tls.key", key, 0o600)
    atomic_write(where / "tls.crt", chain, 0o644)


def atomic_write(path: Path, text: str, mode: int) -> None:
    """`text` written whole at `path` (a temporary file renamed) with `mode`."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-")
    try:
        os.fchmod(fd, mode)
        with os.fdopen(fd, "w") as f:
            f.write(text)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _space_ca(space) -> tuple[str, str]:
    """(certificate, key) PEM of the space's CA, made on first use."""
    name = f"space-ca:{space.uid}"
    row = InfraCredential.objects.filter(name=name).first()
    pair = _open(row)
    if pair is None:
        cert, key = pki.new_ca(f"{space.vhost} CA", days=CA_DAYS, organization="MaaS")
        made = {"cert": cert, "key": key}
        row, _ = InfraCredential.objects.get_or_create(
            name=name, defaults={"ciphertext": credentials.encrypt(json.dumps(made))})
        pair = _open(row)  # another process may have made it first: theirs wins
        if pair is None:
            raise CertificateError("the space's CA no longer opens (SECRET_KEY changed)")
    return pair["cert"], pair["key"]


def _server(space, endpoint: str, host: str, ca_pem: str, ca_key_pem: str) -> tuple[str, str]:
    """(certificate, key) PEM for `host`, signed by the space's CA; kept until it needs
    renewing or the host changes."""
    name = f"space-cert:{space.uid}:{endpoint}"
    row = InfraCredential.objects.filter(name=name).first()
    pair = _open(row)
    now = datetime.datetime.now(datetime.UTC)
    if pair is not None and pair.get("host") == host and pair.get("ca") == ca_pem:
        cert = x509.load_pem_x509_certificate(pair["cert"].encode())
        if cert.not_valid_after_utc - now > datetime.timedelta(days=RENEW_DAYS):
            return pair["cert"], pair["key"]
    cert, key = pki.issue(ca_pem, ca_key_pem, [host], days=SERVER_DAYS, usages=(pki.SERVER,))
    made = {"cert": cert, "key": key, "host": host, "ca": ca_pem}
    InfraCredential.objects.update_or_create(
        name=name, defaults={"ciphertext": credentials.encrypt(json.dumps(made))})
    return made["cert"], made["key"]


def _open(row) -> dict | None:
    if row is None:
        return None
    text = credentials.decrypt(row.ciphertext)
    return json.loads(text) if text is not None else None


def _pem(cert: x509.Certificate) -> str:
    return pki.cert_pem(cert)
