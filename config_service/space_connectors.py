"""An address space's `spec.connectors` (EnMasse's AddressSpaceSpecConnector): remote AMQP
endpoints the space's router connects to, whose addresses its clients reach as
`<connector>/<address>`. Validated and normalised here, the password and the client key sealed
(core.secrets) before they are stored or logged; the router agent configures them
(workers/agents/router/connectors.py).

    connectors:
    - name: remote1                  # letters and digits, unique in the space
      endpointHosts:                 # tried in order
      - host: amqp.example.com
        port: 5671
      tls:                           # each a StringOrSecretSelector: {value: PEM}
        caCert: {value: "-----BEGIN CERTIFICATE-----..."}
        clientCert: {value: ...}
        clientKey: {value: ...}      # write-only
      credentials:
        username: {value: app}
        password: {value: secret}    # write-only
      addresses:                     # what `<connector>/...` reaches
      - name: queues
        pattern: "orders/*"
      idleTimeout: 16                # seconds
      maxFrameSize: 65536            # bytes
"""
import base64
import binascii
import ipaddress
import re
import socket

from cryptography import x509
from cryptography.hazmat.primitives import serialization
from django.conf import settings

from core import secrets
from core.errors import Invalid

NAME = re.compile(r"^[a-zA-Z0-9]{1,63}$")  # EnMasse's rule, bounded
ADDRESS_NAME = re.compile(r"^[a-zA-Z0-9]([a-zA-Z0-9-]{0,61}[a-zA-Z0-9])?$")
HOST = re.compile(r"^[a-zA-Z0-9]([a-zA-Z0-9-]{0,61}[a-zA-Z0-9])?"
                  r"(\.[a-zA-Z0-9]([a-zA-Z0-9-]{0,61}[a-zA-Z0-9])?)*$")
# A link route pattern, as qdrouterd matches it: tokens split by `/` or `.`, `*` one token, `#`
# any number. Printable ASCII without spaces; no `:/`, which qdrouterd reads as a URL scheme.
PATTERN = re.compile(r"^[!-~]{1,200}$")
MAX_CONNECTORS = 10
MAX_HOSTS = 10
MAX_ADDRESSES = 50
MAX_PEM_BYTES = 64 * 1024
MAX_SECRET = 1024
CONNECTOR_KEYS = ("name", "endpointHosts", "tls", "credentials", "addresses", "idleTimeout",
                  "maxFrameSize", "role")
# qdrouterd's bounds: idle timeout in seconds (0: none), frame size from AMQP's minimum.
MAX_IDLE_TIMEOUT = 3600
MIN_FRAME_SIZE, MAX_FRAME_SIZE = 512, 2**31 - 1
WRITE_ONLY = (("credentials", "password"), ("tls", "clientKey"))


def validate(value, *, previous: list | None = None) -> list[dict]:
    """`spec.connectors` normalised, or Invalid naming the field. `previous`: the space's
    stored connectors, whose sealed password and key a connector given again without them
    (a PUT of what GET showed) keeps."""
    if not isinstance(value, list):
        raise Invalid("spec.connectors must be a list of connectors", "spec.connectors")
    if len(value) > MAX_CONNECTORS:
        raise Invalid(f"spec.connectors has at most {MAX_CONNECTORS} connectors",
                      "spec.connectors")
    kept = {c["name"]: c for c in of({"connectors": previous})}
    out, names = [], set()
    for i, connector in enumerate(value):
        field = f"spec.connectors[{i}]"
        normal = _connector(connector, field, kept)
        if normal["name"] in names:
            raise Invalid(f"{field}.name {normal['name']!r} is given twice", f"{field}.name")
        names.add(normal["name"])
        out.append(normal)
    return out


def of(spec: dict) -> list[dict]:
    """The space's connectors as `validate` made them."""
    found = spec.get("connectors") if isinstance(spec, dict) else None
    return [c for c in found or [] if isinstance(c, dict) and isinstance(c.get("name"), str)
            and isinstance(c.get("endpointHosts"), list)]


def public(connectors) -> list:
    """The connectors as the API shows them: a password or a key is never given back."""
    shown = []
    for connector in connectors if isinstance(connectors, list) else []:
        if isinstance(connector, dict):
            connector = dict(connector)
            for part, key in WRITE_ONLY:
                if isinstance(connector.get(part), dict) and key in connector[part]:
                    connector[part] = {k: v for k, v in connector[part].items() if k != key}
        shown.append(connector)
    return shown


def secret(selector) -> str | None:
    """The clear value of a stored selector ({value}), unsealed if it was sealed; None if it
    does not open (another SECRET_KEY)."""
    if not isinstance(selector, dict) or not isinstance(selector.get("value"), str):
        return None
    value = selector["value"]
    return secrets.unseal(value) if secrets.is_sealed(value) else value


def _connector(connector, field: str, kept: dict) -> dict:
    if not isinstance(connector, dict):
        raise Invalid(f"{field} must be an object", field)
    unknown = set(connector) - set(CONNECTOR_KEYS)
    if unknown:
        raise Invalid(f"{field} has unknown keys: {', '.join(sorted(map(str, unknown)))} "
                      f"({', '.join(CONNECTOR_KEYS)} are supported)", field)
    name = connector.get("name")
    if not isinstance(name, str) or not NAME.match(name):
        raise Invalid(f"{field}.name must be 1 to 63 letters and digits (clients reach its "
                      "addresses as <name>/<address>)", f"{field}.name")
    role = connector.get("role", "route-container")
    if role != "route-container":
        raise Invalid(f"{field}.role must be route-container (the router links its clients' "
                      "links to the remote endpoint)", f"{field}.role")
    before = kept.get(name, {})
    out = {"name": name, "endpointHosts": _hosts(connector.get("endpointHosts"),
                                                 f"{field}.endpointHosts")}
    if connector.get("tls") is not None:
        out["tls"] = _tls(connector["tls"], f"{field}.tls", before.get("tls") or {})
    if connector.get("credentials") is not None:
        out["credentials"] = _credentials(connector["credentials"], f"{field}.credentials",
                                          before.get("credentials") or {})
    out["addresses"] = _addresses(connector.get("addresses"), f"{field}.addresses")
    if connector.get("idleTimeout") is not None:
        out["idleTimeout"] = _int_in(connector["idleTimeout"], f"{field}.idleTimeout", 0,
                                     MAX_IDLE_TIMEOUT, "seconds")
    if connector.get("maxFrameSize") is not None:
        out["maxFrameSize"] = _int_in(connector["maxFrameSize"], f"{field}.maxFrameSize",
                                      MIN_FRAME_SIZE, MAX_FRAME_SIZE, "bytes")
    return out


def _hosts(hosts, field: str) -> list[dict]:
    if not isinstance(hosts, list) or not hosts:
        raise Invalid(f"{field} is required: a list of {{host, port}}, tried in order", field)
    if len(hosts) > MAX_HOSTS:
        raise Invalid(f"{field} has at most {MAX_HOSTS} hosts", field)
    out = []
    for i, item in enumerate(hosts):
        at = f"{field}[{i}]"
        if not isinstance(item, dict) or set(item) - {"host", "port"}:
            raise Invalid(f"{at} must be an object with host and port", at)
        host = item.get("host")
        if not isinstance(host, str) or not _host(host):
            raise Invalid(f"{at}.host must be a DNS name or an IP address", f"{at}.host")
        refused = _inside(host)
        if refused:
            raise Invalid(f"{at}.host {host!r} is {refused}: a connector reaches endpoints "
                          "outside the platform's own networks only (an operator opens more "
                          "with MAAS_CONNECTOR_ALLOWED_NETWORKS)", f"{at}.host")
        port = _int_in(item.get("port", 5672), f"{at}.port", 1, 65535, "a TCP port")
        out.append({"host": host, "port": port})
    return out


def _host(host: str) -> bool:
    if len(host) > 253:
        return False
    try:
        ipaddress.ip_address(host)
        return True
    except ValueError:
        return bool(HOST.match(host))


def _inside(host: str) -> str | None:
    """Why `host` is inside the platform (loopback, private, link-local and other special
    addresses, itself or what its name resolves to now), or None. The platform's router dials
    the connector: without this a tenant could reach this machine's brokers, the auth service
    or a cloud's metadata endpoint through it. A name that does not resolve now passes (its
    connector shows unreachable); one that resolves elsewhere later is for the routers' egress
    rules to stop (docs/api.md)."""
    try:
        found = {ipaddress.ip_address(host)}
    except ValueError:
        found = _resolved(host)
        if not found:
            return None
    allowed = [ipaddress.ip_network(n, strict=False)
               for n in settings.MAAS_CONNECTOR_ALLOWED_NETWORKS]
    for ip in found:
        ip = getattr(ip, "ipv4_mapped", None) or ip
        if any(ip in network for network in allowed if network.version == ip.version):
            continue
        if not ip.is_global or ip.is_multicast:
            said = "" if str(ip) == host else f"resolves to {ip}, "
            return f"{said}an address of a private, loopback or other special network"
    return None


def _resolved(name: str) -> set | None:
    """The addresses `name` stands for now; None when it does not resolve."""
    if name.lower() == "localhost" or name.lower().endswith(".localhost"):
        return {ipaddress.ip_address("127.0.0.1")}  # RFC 6761: loopback, whatever DNS says
    try:
        return {ipaddress.ip_address(info[4][0].split("%")[0])
                for info in socket.getaddrinfo(name, None, proto=socket.IPPROTO_TCP)}
    except (OSError, UnicodeError, ValueError):
        return None


def _addresses(addresses, field: str) -> list[dict]:
    if not isinstance(addresses, list) or not addresses:
        raise Invalid(f"{field} is required: a list of {{name, pattern}}, the remote addresses "
                      "clients reach as <connector>/<address>", field)
    if len(addresses) > MAX_ADDRESSES:
        raise Invalid(f"{field} has at most {MAX_ADDRESSES} entries", field)
    out, names = [], set()
    for i, item in enumerate(addresses):
        at = f"{field}[{i}]"
        if not isinstance(item, dict) or set(item) - {"name", "pattern"}:
            raise Invalid(f"{at} must be an object with name and pattern", at)
        name = item.get("name")
        if not isinstance(name, str) or not ADDRESS_NAME.match(name):
            raise Invalid(f"{at}.name must be a DNS label: letters, digits and '-'", f"{at}.name")
        if name in names:
            raise Invalid(f"{at}.name {name!r} is given twice", f"{at}.name")
        pattern = item.get("pattern")
        if not isinstance(pattern, str) or not PATTERN.match(pattern) or ":/" in pattern:
            raise Invalid(f"{at}.pattern must be 1 to 200 printable ASCII characters without "
                          "spaces or ':/': tokens separated by '/' or '.', '*' for one token, "
                          "'#' for any number", f"{at}.pattern")
        if any(token not in ("*", "#") and ("*" in token or "#" in token)
               for token in re.split(r"[./]", pattern)):
            # qdrouterd would match `orders-*` as those characters, not as a wildcard.
            raise Invalid(f"{at}.pattern: '*' and '#' stand for whole tokens (between '/' or "
                          "'.'), as in orders/* or orders.#", f"{at}.pattern")
        names.add(name)
        out.append({"name": name, "pattern": pattern})
    return out


def _selector(value, field: str, limit: int = MAX_SECRET) -> str:
    """The text of a StringOrSecretSelector: {value: text} (a bare string is taken too)."""
    if isinstance(value, dict):
        if "valueFromSecret" in value:
            raise Invalid(f"{field}.valueFromSecret: give the value itself (a Secret of the "
                          "cluster is not read)", f"{field}.valueFromSecret")
        if set(value) != {"value"}:
            raise Invalid(f"{field} must be {{value: ...}}", field)
        value = value["value"]
    if not isinstance(value, str) or not value or len(value) > limit:
        raise Invalid(f"{field}.value is required: text of at most {limit} characters", field)
    return value


def _credentials(credentials, field: str, before: dict) -> dict:
    if not isinstance(credentials, dict) or set(credentials) - {"username", "password"}:
        raise Invalid(f"{field} must be an object with username and password", field)
    username = _selector(credentials.get("username"), f"{field}.username")
    if credentials.get("password") is None and before.get("password"):
        sealed = before["password"]  # write-only: a PUT of what GET showed keeps it
        if secret(sealed) is None:
            raise Invalid(f"{field}.password is required (the stored one no longer opens)",
                          f"{field}.password")
        return {"username": {"value": username}, "password": sealed}
    password = _selector(credentials.get("password"), f"{field}.password")
    return {"username": {"value": username}, "password": _sealed(password, before.get("password"))}


def _sealed(value: str, before) -> dict:
    """{value: sealed}; the same value keeps its seal, so an unchanged spec stays equal."""
    if secret(before) == value:
        return before
    return {"value": secrets.seal(value)}


def _tls(tls, field: str, before: dict) -> dict:
    if not isinstance(tls, dict) or set(tls) - {"caCert", "clientCert", "clientKey"}:
        raise Invalid(f"{field} must be an object with caCert, clientCert and clientKey", field)
    out = {}
    if tls.get("caCert") is not None:
        out["caCert"] = {"value": _pem_certs(tls["caCert"], f"{field}.caCert")}
    if tls.get("clientCert") is not None:
        out["clientCert"] = {"value": _pem_certs(tls["clientCert"], f"{field}.clientCert")}
    key = None
    if tls.get("clientKey") is not None:
        key = _pem_key(tls["clientKey"], f"{field}.clientKey")
    elif "clientCert" in out and before.get("clientKey"):
        key = secret(before["clientKey"])  # write-only: kept when left out
        if key is None:
            raise Invalid(f"{field}.clientKey is required (the stored one no longer opens)",
                          f"{field}.clientKey")
    if ("clientCert" in out) != (key is not None):
        raise Invalid(f"{field}: clientCert and clientKey go together",
                      f"{field}.clientKey" if "clientCert" in out else f"{field}.clientCert")
    if key is not None:
        _matches(out["clientCert"]["value"], key, field)
        out["clientKey"] = _sealed(key, before.get("clientKey"))
    return out


def _pem(value, field: str) -> bytes:
    text = _selector(value, field, MAX_PEM_BYTES * 2)
    if "-----BEGIN" not in text:  # base64 of the PEM, as spec.endpoints takes it
        try:
            text = base64.b64decode(text, validate=True).decode()
        except (binascii.Error, ValueError, UnicodeError):
            raise Invalid(f"{field}.value must be PEM (-----BEGIN ...) or base64 of PEM",
                          field) from None
    return text.encode()


def _pem_certs(value, field: str) -> str:
    raw = _pem(value, field)
    try:
        certs = x509.load_pem_x509_certificates(raw)
    except ValueError:
        raise Invalid(f"{field}.value must be PEM certificates (-----BEGIN CERTIFICATE-----)",
                      field) from None
    return "".join(c.public_bytes(serialization.Encoding.PEM).decode() for c in certs)


def _pem_key(value, field: str) -> str:
    raw = _pem(value, field)
    try:
        key = serialization.load_pem_private_key(raw, password=None)
    except (ValueError, TypeError):
        raise Invalid(f"{field}.value must be an unencrypted PEM private key", field) from None
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption()).decode()


def _matches(cert_pem: str, key_pem: str, field: str) -> None:
    spki = serialization.PublicFormat.SubjectPublicKeyInfo
    leaf = x509.load_pem_x509_certificates(cert_pem.encode())[0]
    key = serialization.load_pem_private_key(key_pem.encode(), password=None)
    if leaf.public_key().public_bytes(serialization.Encoding.DER, spki) != \
            key.public_key().public_bytes(serialization.Encoding.DER, spki):
        raise Invalid(f"{field}.clientKey is not the key of the first certificate in clientCert",
                      f"{field}.clientKey")


def _int_in(value, field: str, low: int, high: int, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise Invalid(f"{field} must be an integer from {low} to {high} ({what})", field)
    return value
