"""An address space's `spec.endpoints` (EnMasse's EndpointSpec): under which host name each
protocol of the space is served, with which certificate, exposed how. Validated and
normalised here, a `certBundle`'s private key sealed (core.secrets) before it is stored or
logged; the workers serve them (workers/certificates.py).

    endpoints:
    - name: messaging            # a DNS label, unique in the space
      service: messaging         # messaging (AMQP/AMQPS) or mqtt (MQTT/MQTTS)
      cert:
        provider: selfsigned     # a CA of the space's own (status.caCert), or certBundle:
        # tlsCert: base64 PEM chain, leaf first; tlsKey: base64 PEM key (write-only)
      expose:
        type: route              # route, loadbalancer or nodeport (Kubernetes)
        routeHost: mq.acme.example   # default <name>.<space>.<tenant>.<MAAS_ENDPOINT_DOMAIN>
"""
import base64
import binascii
import datetime
import re

from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import serialization
from cryptography.x509.oid import NameOID
from django.conf import settings

from core import secrets
from core.errors import Invalid

SERVICES = ("messaging", "mqtt")
PROVIDERS = ("selfsigned", "certBundle")
REFUSED_PROVIDERS = {  # EnMasse's, with why they do not apply here
    "openshift": "there is no OpenShift service-serving CA here: use selfsigned or certBundle",
    "wildcard": "there is no cluster wildcard certificate here: use certBundle with yours",
}
EXPOSE_TYPES = ("route", "loadbalancer", "nodeport")
MAX_ENDPOINTS = len(SERVICES) * 2
MAX_PEM_BYTES = 64 * 1024
MAX_CHAIN = 10
LABEL = re.compile(r"^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$")
HOST = re.compile(r"^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?(\.[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?)+$")


def validate(value, *, space: str, tenant: str, previous: list | None = None) -> list[dict]:
    """`spec.endpoints` normalised, or Invalid naming the field. `previous`: the space's stored
    endpoints, whose sealed key a certBundle given again without `tlsKey` keeps."""
    if not isinstance(value, list):
        raise Invalid("spec.endpoints must be a list of endpoints", "spec.endpoints")
    if len(value) > MAX_ENDPOINTS:
        raise Invalid(f"spec.endpoints has at most {MAX_ENDPOINTS} endpoints", "spec.endpoints")
    # Only endpoints this module made: a space stored before may hold anything under the key.
    kept = {e["name"]: e for e in of({"endpoints": previous if isinstance(previous, list)
                                                    else []})}
    out, names, hosts = [], set(), set()
    for i, endpoint in enumerate(value):
        field = f"spec.endpoints[{i}]"
        normal = _endpoint(endpoint, field, space, tenant, kept)
        if normal["name"] in names:
            raise Invalid(f"{field}.name {normal['name']!r} is given twice", f"{field}.name")
        host = normal["expose"]["routeHost"]
        if host in hosts:
            raise Invalid(f"{field}.expose.routeHost {host!r} is another endpoint's",
                          f"{field}.expose.routeHost")
        names.add(normal["name"])
        hosts.add(host)
        out.append(normal)
    return out


def of(spec: dict) -> list[dict]:
    """The space's endpoints as `validate` made them. A space stored before MaaS took
    `endpoints` may hold EnMasse's as given then: those are kept and shown, never served."""
    return [e for e in spec.get("endpoints") or [] if _normalised(e)]


def _normalised(endpoint) -> bool:
    return (isinstance(endpoint, dict) and endpoint.get("service") in SERVICES
            and isinstance(endpoint.get("cert"), dict)
            and endpoint["cert"].get("provider") in PROVIDERS
            and isinstance(endpoint.get("expose"), dict)
            and isinstance(endpoint["expose"].get("routeHost"), str))


EXPIRY_WARNING = datetime.timedelta(days=30)


def expiry_messages(spec: dict) -> list[str]:
    """Status messages of the tenant's bundles that expire within 30 days or have expired:
    the workers renew a selfsigned certificate, a certBundle is the tenant's to replace."""
    now, out = datetime.datetime.now(datetime.UTC), []
    for endpoint in of(spec):
        cert = endpoint["cert"]
        if cert["provider"] != "certBundle":
            continue
        ends = min(c.not_valid_after_utc for c in x509.load_pem_x509_certificates(
            base64.b64decode(cert["tlsCert"])))
        if ends <= now:
            out.append(f"Endpoint {endpoint['name']}: its certificate expired on "
                       f"{ends:%Y-%m-%d %H:%M} UTC; clients refuse it until a new tlsCert "
                       "and tlsKey are given")
        elif ends - now <= EXPIRY_WARNING:
            out.append(f"Endpoint {endpoint['name']}: its certificate expires on "
                       f"{ends:%Y-%m-%d %H:%M} UTC (in {(ends - now).days} days); give a new "
                       "tlsCert and tlsKey")
    return out


def hosts(endpoints) -> list[str]:
    return [e["expose"]["routeHost"] for e in endpoints or [] if _normalised(e)]


def public(endpoints) -> list:
    """The endpoints as the API shows them: a key is never given back."""
    shown = []
    for endpoint in endpoints if isinstance(endpoints, list) else []:
        if isinstance(endpoint, dict) and isinstance(endpoint.get("cert"), dict):
            endpoint = {**endpoint, "cert": {k: v for k, v in endpoint["cert"].items()
                                             if k != "tlsKey"}}
        shown.append(endpoint)
    return shown


def _endpoint(endpoint, field: str, space: str, tenant: str, kept: dict) -> dict:
    if not isinstance(endpoint, dict):
        raise Invalid(f"{field} must be an object", field)
    unknown = set(endpoint) - {"name", "service", "cert", "expose"}
    if unknown:
        raise Invalid(f"{field} has unknown keys: {', '.join(sorted(unknown))} (name, service, "
                      "cert and expose are supported; exports are not)", field)
    name = endpoint.get("name")
    if not isinstance(name, str) or not LABEL.match(name):
        raise Invalid(f"{field}.name must be a DNS label: lower-case letters, digits and '-'",
                      f"{field}.name")
    service = endpoint.get("service", name)
    if service not in SERVICES:
        raise Invalid(f"{field}.service must be one of {', '.join(SERVICES)}", f"{field}.service")
    expose = _expose(endpoint.get("expose", {}), f"{field}.expose", name, space, tenant)
    cert = _cert(endpoint.get("cert", {"provider": "selfsigned"}), f"{field}.cert",
                 expose["routeHost"], kept.get(name))
    return {"name": name, "service": service, "cert": cert, "expose": expose}


def _expose(expose, field: str, name: str, space: str, tenant: str) -> dict:
    if not isinstance(expose, dict):
        raise Invalid(f"{field} must be an object", field)
    unknown = set(expose) - {"type", "routeHost"}
    if unknown:
        raise Invalid(f"{field} has unknown keys: {', '.join(sorted(unknown))} (type and "
                      "routeHost are supported)", field)
    kind = expose.get("type", "route")
    if kind not in EXPOSE_TYPES:
        raise Invalid(f"{field}.type must be one of {', '.join(EXPOSE_TYPES)}", f"{field}.type")
    host = expose.get("routeHost") or f"{name}.{space}.{tenant}.{settings.MAAS_ENDPOINT_DOMAIN}"
    if not isinstance(host, str) or len(host) > 253 or not HOST.match(host.lower()) \
            or host.rsplit(".", 1)[-1].isdigit():
        raise Invalid(f"{field}.routeHost must be a DNS name of two labels or more, at most 253 "
                      "characters (clients send it in TLS's SNI; an IP address cannot be)",
                      f"{field}.routeHost")
    return {"type": kind, "routeHost": host.lower()}


def _cert(cert, field: str, host: str, kept: dict | None) -> dict:
    if not isinstance(cert, dict):
        raise Invalid(f"{field} must be an object", field)
    provider = cert.get("provider", "selfsigned")
    if provider in REFUSED_PROVIDERS:
        raise Invalid(f"{field}.provider {provider}: {REFUSED_PROVIDERS[provider]}",
                      f"{field}.provider")
    if provider not in PROVIDERS:
        raise Invalid(f"{field}.provider must be one of {', '.join(PROVIDERS)}",
                      f"{field}.provider")
    unknown = set(cert) - {"provider", "tlsCert", "tlsKey", "secretName"}
    if unknown:
        raise Invalid(f"{field} has unknown keys: {', '.join(sorted(unknown))}", field)
    if cert.get("secretName"):
        raise Invalid(f"{field}.secretName: give the bundle as tlsCert and tlsKey (a Secret "
                      "of the cluster is not read)", f"{field}.secretName")
    if provider == "selfsigned":
        if cert.get("tlsCert") or cert.get("tlsKey"):
            raise Invalid(f"{field}: tlsCert and tlsKey are for provider certBundle",
                          f"{field}.tlsCert")
        return {"provider": "selfsigned"}
    chain = _chain(cert.get("tlsCert"), f"{field}.tlsCert")
    key_text = cert.get("tlsKey")
    if key_text is None and kept and kept.get("cert", {}).get("provider") == "certBundle":
        sealed = kept["cert"].get("tlsKey")  # write-only: a PUT of what GET showed keeps it
        key_text = secrets.unseal(sealed)
        if key_text is None:
            raise Invalid(f"{field}.tlsKey is required (the stored key no longer opens)",
                          f"{field}.tlsKey")
        key = _key_pem(key_text.encode(), f"{field}.tlsKey")
    else:
        key = _key(key_text, f"{field}.tlsKey")
    leaf = chain[0]
    _matches(leaf, key, field)
    _valid_now(chain, f"{field}.tlsCert")
    _covers(leaf, host, f"{field}.tlsCert")
    pem_key = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                serialization.NoEncryption()).decode()
    pem_chain = "".join(c.public_bytes(serialization.Encoding.PEM).decode() for c in chain)
    sealed = (kept or {}).get("cert", {}).get("tlsKey")
    if not (sealed and secrets.unseal(sealed) == pem_key):  # the same key keeps its seal:
        sealed = secrets.seal(pem_key)                       # an unchanged spec stays equal
    return {"provider": "certBundle",
            "tlsCert": base64.b64encode(pem_chain.encode()).decode(), "tlsKey": sealed}


def _decoded(value, field: str, what: str) -> bytes:
    if not isinstance(value, str) or not value:
        raise Invalid(f"{field} is required for provider certBundle: base64 of {what}", field)
    if len(value) > MAX_PEM_BYTES * 4 // 3 + 4:
        raise Invalid(f"{field} is larger than {MAX_PEM_BYTES // 1024} KiB", field)
    try:
        return base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError):
        raise Invalid(f"{field} must be base64 of {what}", field) from None


def _chain(value, field: str) -> list[x509.Certificate]:
    raw = _decoded(value, field, "a PEM certificate chain, the server's certificate first")
    try:
        chain = x509.load_pem_x509_certificates(raw)
    except ValueError:
        raise Invalid(f"{field} must be base64 of a PEM certificate chain (-----BEGIN "
                      "CERTIFICATE-----), the server's certificate first", field) from None
    if len(chain) > MAX_CHAIN:
        raise Invalid(f"{field} has more than {MAX_CHAIN} certificates", field)
    for i, (cert, issuer) in enumerate(zip(chain, chain[1:], strict=False), start=1):
        try:
            cert.verify_directly_issued_by(issuer)
        except (InvalidSignature, ValueError, TypeError):
            raise Invalid(f"{field}: certificate {i} of the chain did not issue the one before "
                          "it (give the chain in order, the server's certificate first)",
                          field) from None
    return chain


def _key(value, field: str):
    return _key_pem(_decoded(value, field, "a PEM private key"), field)


def _key_pem(raw: bytes, field: str):
    try:
        return serialization.load_pem_private_key(raw, password=None)
    except (ValueError, TypeError):
        raise Invalid(f"{field} must be base64 of an unencrypted PEM private key", field) \
            from None


def _matches(leaf: x509.Certificate, key, field: str) -> None:
    spki = serialization.PublicFormat.SubjectPublicKeyInfo
    if leaf.public_key().public_bytes(serialization.Encoding.DER, spki) != \
            key.public_key().public_bytes(serialization.Encoding.DER, spki):
        raise Invalid(f"{field}.tlsKey is not the key of the first certificate in tlsCert",
                      f"{field}.tlsKey")


def _valid_now(chain: list[x509.Certificate], field: str) -> None:
    now = datetime.datetime.now(datetime.UTC)
    for i, cert in enumerate(chain):
        which = "the server's certificate" if i == 0 else f"certificate {i} of the chain"
        if cert.not_valid_after_utc <= now:
            raise Invalid(f"{field}: {which} expired on "
                          f"{cert.not_valid_after_utc:%Y-%m-%d %H:%M} UTC", field)
        if cert.not_valid_before_utc > now:
            raise Invalid(f"{field}: {which} is not valid before "
                          f"{cert.not_valid_before_utc:%Y-%m-%d %H:%M} UTC", field)


def _covers(leaf: x509.Certificate, host: str, field: str) -> None:
    try:
        names = leaf.extensions.get_extension_for_class(
            x509.SubjectAlternativeName).value.get_values_for_type(x509.DNSName)
    except x509.ExtensionNotFound:
        names = [a.value for a in leaf.subject.get_attributes_for_oid(NameOID.COMMON_NAME)]
    if not any(_name_matches(str(n).lower(), host) for n in names):
        raise Invalid(f"{field}: the server's certificate is for {', '.join(map(str, names))}, "
                      f"not {host} (expose.routeHost)", field)


def _name_matches(pattern: str, host: str) -> bool:
    if pattern.startswith("*."):  # one label, as TLS clients match wildcards
        head, _, rest = host.partition(".")
        return bool(head) and rest == pattern[2:]
    return pattern == host
