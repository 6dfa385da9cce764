"""The platform's internal CA on Kubernetes, and the control plane's certificate it signs.

The CA is the Secret `maas-internal-ca` in MAAS_INFRA_NAMESPACE: `tls.crt` and `tls.key` (the
CA that signs), `ca.crt` (the trust bundle: that CA, then the previous one while a rotation is
under way) and `previous.crt` (only then). `manage.py internal_ca`, which the migrations Job
runs, makes it before any pod needs it; the infra controller gets or makes it too, so it never
depends on that order. Every maker holds one PostgreSQL advisory lock (`lock`, given by the
caller: this module is Django-free like the controller), so two processes never make two CAs.

It signs every space's internal certificates (controller.py) and the auth service's
(`maas-authservice-tls`, unless the operator put a certificate of their own there: a Secret
without the issuer label is theirs and only read).

Rotation (`rotate_secrets --internal-ca`, `--internal-ca-finish`): `begin_rotation` makes a new
CA that signs from then on and keeps the old one in the bundle; the controller re-signs each
space once all its pods trust the new one; `finish_rotation` drops the old CA once nothing it
signed is left.
"""
import base64
import contextlib
import logging
from dataclasses import dataclass

from workers import pki
from workers.infra import manifests as m

logger = logging.getLogger(__name__)

SECRET = m.INTERNAL_CA_NAME
CERT, KEY, BUNDLE, PREVIOUS = "tls.crt", "tls.key", m.CA_FILE, "previous.crt"
AUTH_SERVICE_SECRET = "maas-authservice-tls"
COMMON_NAME = "maas-internal-ca"


class RotationError(Exception):
    """A rotation step that cannot be taken now; the message says what to do."""


@dataclass(frozen=True)
class InternalCa:
    cert_pem: str
    key_pem: str
    previous_pem: str = ""  # the CA before the last rotation, trusted until it is finished

    @property
    def bundle(self) -> str:
        """What every internal link trusts: this CA, and the previous one during a rotation."""
        return self.cert_pem + self.previous_pem

    def issued(self, cert_pem: str) -> bool:
        """Whether the CA that signs now signed `cert_pem`."""
        return pki.signed_by(cert_pem, self.cert_pem)

    def trusted(self, cert_pem: str) -> bool:
        """Whether a client of the bundle accepts `cert_pem`'s issuer."""
        return self.issued(cert_pem) or bool(
            self.previous_pem and pki.signed_by(cert_pem, self.previous_pem))

    def issue(self, hosts: list[str], usages=(pki.SERVER, pki.CLIENT)) -> m.Certificate:
        return m.Certificate(*pki.issue(self.cert_pem, self.key_pem, hosts, usages=usages))


def _decoded(secret: dict | None) -> dict[str, str]:
    data = (secret or {}).get("data") or {}
    return {k: base64.b64decode(v).decode() for k, v in data.items()}


def read(client, namespace: str) -> InternalCa | None:
    data = _decoded(client.get("v1", "Secret", namespace, SECRET))
    if not (data.get(CERT) and data.get(KEY)):
        return None
    return InternalCa(data[CERT], data[KEY], data.get(PREVIOUS, ""))


def manifest(ca: InternalCa, namespace: str) -> dict:
    data = {CERT: ca.cert_pem, KEY: ca.key_pem, BUNDLE: ca.bundle}
    if ca.previous_pem:
        data[PREVIOUS] = ca.previous_pem
    return {"apiVersion": "v1", "kind": "Secret", "type": "kubernetes.io/tls",
            "metadata": {"name": SECRET, "namespace": namespace,
                         "labels": {m.LABEL_NAME: "maas", m.LABEL_PART_OF: m.PART_OF,
                                    m.LABEL_COMPONENT: "internal-ca"}},
            "data": {k: base64.b64encode(v.encode()).decode() for k, v in data.items()}}


def ensure(client, namespace: str, lock=contextlib.nullcontext) -> InternalCa:
    """The CA, made if there is none yet (under `lock`, read again once held)."""
    ca = read(client, namespace)
    if ca is not None:
        return ca
    with lock():
        return _read_or_make(client, namespace)


def _read_or_make(client, namespace: str) -> InternalCa:
    """The CA, made if missing; the caller holds the lock."""
    ca = read(client, namespace)
    if ca is None:
        ca = InternalCa(*pki.new_ca(COMMON_NAME))
        client.apply(manifest(ca, namespace), m.FIELD_MANAGER)
        logger.info("infra.internal_ca_made", extra={"namespace": namespace})
    return ca


def begin_rotation(client, namespace: str, lock=contextlib.nullcontext) -> InternalCa:
    """A new CA signs from now on; the current one stays in the bundle. Refused while a
    rotation is under way (its old CA would leave the bundle with certificates still on it)."""
    with lock():
        ca = _read_or_make(client, namespace)
        if ca.previous_pem:
            raise RotationError("a rotation of the internal CA is under way: finish it first "
                                "(rotate_secrets --internal-ca-finish)")
        rotated = InternalCa(*pki.new_ca(COMMON_NAME), previous_pem=ca.cert_pem)
        client.apply(manifest(rotated, namespace), m.FIELD_MANAGER)
    logger.info("infra.internal_ca_rotated", extra={"namespace": namespace})
    return rotated


def outdated(client, namespace: str, ca: InternalCa) -> list[str]:
    """The Secrets the platform issued from the internal CA that the current CA did not sign."""
    return sorted(
        s["metadata"]["name"]
        for s in client.list("v1", "Secret", namespace, {m.LABEL_ISSUER: m.INTERNAL_CA_NAME})
        if not ca.issued(_decoded(s).get("tls.crt", "")))


def finish_rotation(client, namespace: str, lock=contextlib.nullcontext) -> InternalCa:
    """Drops the previous CA from the bundle once nothing it signed is left. The auth
    service's certificate is re-signed here (not earlier: every space's routers trust the new
    CA only once re-signed), so a first call re-signs it and asks to be run again once the
    auth service has loaded it."""
    with lock():
        ca = _read_or_make(client, namespace)
        if not ca.previous_pem:
            return ca
        left = outdated(client, namespace, ca)
        spaces = [name for name in left if name != AUTH_SERVICE_SECRET]
        if spaces:
            raise RotationError(
                f"{len(spaces)} certificates are not signed by the new CA yet "
                f"({', '.join(spaces[:5])}{', ...' if len(spaces) > 5 else ''}): the infra "
                "controller re-signs each space once its pods trust the new CA (at its next "
                "reconciles); run this again later")
        if left:
            ensure_auth_service_certificate(client, namespace, ca, renew=True)
            raise RotationError(
                f"the auth service's certificate ({AUTH_SERVICE_SECRET}) was re-signed by the "
                "new CA; the auth service loads it within about two minutes: run this again "
                "after that")
        finished = InternalCa(ca.cert_pem, ca.key_pem)
        client.apply(manifest(finished, namespace), m.FIELD_MANAGER)
    logger.info("infra.internal_ca_rotation_finished", extra={"namespace": namespace})
    return finished


def auth_service_hosts(namespace: str) -> list[str]:
    host = f"{m.AUTH_SERVICE_NAME}.{namespace}.svc"
    return [host, f"{host}.cluster.local", f"{m.AUTH_SERVICE_NAME}.{namespace}",
            m.AUTH_SERVICE_NAME]


def ensure_auth_service_certificate(client, namespace: str, ca: InternalCa,
                                    renew: bool = False) -> str:
    """The auth service's certificate: made if missing, re-signed near its end, when its
    issuer is no longer trusted, or (`renew`) when the current CA did not sign it. An
    operator's own (no issuer label) is left alone. Returns "issued", "kept" or "operator's"
    (a kept certificate's Secret still gets the current bundle as `ca.crt`)."""
    secret = client.get("v1", "Secret", namespace, AUTH_SERVICE_SECRET)
    labels = ((secret or {}).get("metadata") or {}).get("labels") or {}
    if secret is not None and labels.get(m.LABEL_ISSUER) != m.INTERNAL_CA_NAME:
        return "operator's"
    hosts = auth_service_hosts(namespace)
    data = _decoded(secret)
    cert, key = data.get("tls.crt", ""), data.get("tls.key", "")
    good = (bool(key) and pki.still_good(cert, hosts) and ca.trusted(cert)
            and (ca.issued(cert) or not renew))
    if good and data.get(m.CA_FILE) == ca.bundle:
        return "kept"
    if not good:
        issued = ca.issue(hosts, usages=(pki.SERVER,))
        cert, key = issued.cert_pem, issued.key_pem
    client.apply({
        "apiVersion": "v1", "kind": "Secret", "type": "kubernetes.io/tls",
        "metadata": {"name": AUTH_SERVICE_SECRET, "namespace": namespace,
                     "labels": {m.LABEL_NAME: "maas-authservice", m.LABEL_PART_OF: m.PART_OF,
                                m.LABEL_COMPONENT: "authservice",
                                m.LABEL_ISSUER: m.INTERNAL_CA_NAME}},
        "data": {k: base64.b64encode(v.encode()).decode()
                 for k, v in {"tls.crt": cert, "tls.key": key, m.CA_FILE: ca.bundle}.items()},
    }, m.FIELD_MANAGER)
    logger.info("infra.auth_service_certificate", extra={"namespace": namespace,
                                                         "issued": not good})
    return "kept" if good else "issued"


def auth_service_ca(client, namespace: str, ca: InternalCa) -> str:
    """What the routers check the auth service against: an operator's own certificate's CA
    (`ca.crt` of their `maas-authservice-tls`), else the internal CA bundle."""
    secret = client.get("v1", "Secret", namespace, AUTH_SERVICE_SECRET)
    labels = ((secret or {}).get("metadata") or {}).get("labels") or {}
    if secret is not None and labels.get(m.LABEL_ISSUER) != m.INTERNAL_CA_NAME:
        own = _decoded(secret).get(m.CA_FILE, "")
        if own:
            return own
    return ca.bundle
