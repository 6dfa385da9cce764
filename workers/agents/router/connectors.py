"""A space's connectors to remote AMQP endpoints (`spec.connectors`) as qdrouterd entities, as
EnMasse's agent made them: `connector`s of role `route-container` (one per endpoint host, with
an `sslProfile` of their own for TLS), and per address pattern a link route pair
`<connector>/<pattern>` whose external address drops the `<vhost>/<connector>/` prefix, routed
to the first host that is connected. Clients of the space attach to `<connector>/<address>`;
the space's vhost policy decides first, as for any address.

The entities' names carry a keyed digest of what the router never returns (the password, the TLS
files' contents): a changed secret is a new name, so the agent replaces the connector rather than
leaving the old login in place. The TLS files are written where qdrouterd reads them
(`MAAS_CONNECTOR_TLS_DIR`, mode 0600), one directory per connector and digest.
"""
import hashlib
import json
import shutil
from pathlib import Path

from django.conf import settings

from config_service import space_connectors
from workers import certificates

SSL_PROFILE = "org.apache.qpid.dispatch.sslProfile"
KIND = "connector:"  # entity names: maas:<vhost>:connector:<name>:<digest>[:<address>:<dir>]
# Where a connector with TLS but no caCert finds the CAs it trusts: the system's.
SYSTEM_CA = "/etc/ssl/certs/ca-certificates.crt"


def digest(connector: dict) -> str:
    """A short keyed digest of the connector's secrets and TLS material (never the secrets)."""
    material = {"password": space_connectors.secret(
                    (connector.get("credentials") or {}).get("password")),
                "tls": {k: space_connectors.secret(v)
                        for k, v in (connector.get("tls") or {}).items()}}
    return hashlib.blake2b(json.dumps(material, sort_keys=True).encode(),
                           key=settings.SECRET_KEY.encode()[:64], digest_size=5).hexdigest()


def entity_name(prefix: str, connector: dict) -> str:
    return f"{prefix}{KIND}{connector['name']}:{digest(connector)}"


def connector_of(name: str) -> str | None:
    """The spec's connector of one of these entities (`maas:<vhost>:connector:<name>:...`), or
    None for any other entity name."""
    own = name.split(":", 2)[-1]
    return own[len(KIND):].split(":", 1)[0] if own.startswith(KIND) else None


def _parts(name: str) -> tuple[str, str]:
    """(connector, digest) of one of these entities' names."""
    connector, digest_, *_ = name.split(":", 2)[-1][len(KIND):].split(":")
    return connector, digest_


def tls_dir(vhost: str) -> Path:
    return Path(settings.MAAS_CONNECTOR_TLS_DIR) / vhost


def host_names(name: str, connector: dict) -> list[str]:
    """The names of its connectors, one per endpoint host in order: `name` for the first,
    `name:host<i>` for each other."""
    return [name if i == 0 else f"{name}:host{i}"
            for i in range(len(connector["endpointHosts"]))]


def desired(vhost: str, prefix: str, spec: dict, link_route: str, connector_type: str) -> dict:
    """{(entity type, name): attributes} of the space's connectors; writes their TLS files.
    Every endpoint host has a connector of its own, each connecting on its own: qdrouterd 1.19
    takes no failover hosts by management, and a connector is never replaced because its host
    does not answer (deleting one whose TLS attempt then fails crashed qdrouterd 1.19,
    docs/deploy.md). The link routes go to the first host's until `route_to_connected` moves
    them."""
    out: dict = {}
    for connector in space_connectors.of(spec):
        name = entity_name(prefix, connector)
        attrs = {"role": "route-container"}
        credentials = connector.get("credentials")
        tls = connector.get("tls")
        if credentials:
            attrs["saslUsername"] = credentials["username"]["value"]
            attrs["saslPassword"] = space_connectors.secret(credentials["password"]) or ""
        # EnMasse's fallback: PLAIN with credentials, EXTERNAL with a client certificate, else
        # ANONYMOUS (a remote that asks for more refuses, which the status says).
        attrs["saslMechanisms"] = ("PLAIN" if credentials
                                   else "EXTERNAL" if tls and tls.get("clientCert")
                                   else "ANONYMOUS")
        if tls is not None:
            # Names are one namespace across qdrouterd's entity types: the profile's is its own.
            out[(SSL_PROFILE, f"{name}:tls")] = _ssl_profile(vhost, connector, name)
            attrs["sslProfile"] = f"{name}:tls"
            attrs["verifyHostname"] = True
        if connector.get("idleTimeout") is not None:
            attrs["idleTimeoutSeconds"] = connector["idleTimeout"]
        if connector.get("maxFrameSize") is not None:
            attrs["maxFrameSize"] = connector["maxFrameSize"]
        for host, host_name in zip(connector["endpointHosts"], host_names(name, connector),
                                   strict=True):
            out[(connector_type, host_name)] = {"host": host["host"], "port": str(host["port"]),
                                                **attrs}
        for address in connector["addresses"]:
            for direction in ("in", "out"):
                out[(link_route, f"{name}:{address['name']}:{direction}")] = {
                    "pattern": f"{vhost}/{connector['name']}/{address['pattern']}",
                    "direction": direction, "connection": name,
                    "delExternalPrefix": f"{vhost}/{connector['name']}/"}
    return out


def connected(row: dict | None) -> bool:
    """Whether the router reports the connector's connection open. qdrouterd 1.19 says
    `SUCCESS` as soon as a new attempt's socket connects, while its last message is still the
    failure (a refused login or certificate) until the remote's AMQP open arrives."""
    row = row or {}
    return (row.get("connectionStatus") == "SUCCESS"
            and "Connection Opened" in str(row.get("connectionMsg") or ""))


def route_to_connected(desired: dict, actual: dict, link_route: str,
                       connector_type: str) -> None:
    """Points each remote connector's link routes at the first of its hosts whose connector
    the router reports connected (`actual`, as read): endpointHosts tried in order. While none
    is, or before any was read, they stay on the first host's. Changes `desired` in place."""
    hosts: dict[str, list[str]] = {}  # the first host's connector -> every host's, in order
    for etype, name in desired:
        if etype == connector_type and connector_of(name) is not None:
            hosts.setdefault(_split_host(name)[0], []).append(name)
    if not hosts:
        return
    chosen = {first: next((n for n in sorted(names, key=lambda n: _split_host(n)[1])
                           if connected(actual.get((connector_type, n)))), first)
              for first, names in hosts.items()}
    for (etype, name), attrs in desired.items():
        first = name.rsplit(":", 2)[0]  # a link route's `<first host's>:<address>:<direction>`
        if etype == link_route and first in chosen:
            attrs["connection"] = chosen[first]


def _split_host(name: str) -> tuple[str, int]:
    """(the first host's connector, i) of `<first>:host<i>`; (name, 0) for the first's."""
    first, _, last = name.rpartition(":")
    if last.startswith("host") and last[4:].isdigit():
        return first, int(last[4:])
    return name, 0


def _ssl_profile(vhost: str, connector: dict, name: str) -> dict:
    """The sslProfile's attributes, its files written first (once: their path names the
    digest of their contents)."""
    tls = connector["tls"]
    where = tls_dir(vhost).joinpath(*_parts(name))
    files = {"caCertFile": ("ca.pem", tls.get("caCert")),
             "certFile": ("cert.pem", tls.get("clientCert")),
             "privateKeyFile": ("key.pem", tls.get("clientKey"))}
    attrs = {}
    for attribute, (filename, selector) in files.items():
        text = space_connectors.secret(selector) if selector else None
        if text is None:
            continue
        path = where / filename
        if not path.exists():
            _write(path, text)
        attrs[attribute] = str(path)
    attrs.setdefault("caCertFile", SYSTEM_CA)
    return attrs


def _write(path: Path, text: str) -> None:
    """Written whole, readable by its owner only: a key is in it."""
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    certificates.atomic_write(path, text, 0o600)


def forget_files(vhost: str, keep: set | None = None) -> None:
    """Removes the space's TLS files but those of the connector entities named in `keep` (all
    of them at teardown)."""
    root = tls_dir(vhost)
    if not root.is_dir():
        return
    kept = {_parts(name) for name in keep or ()}
    for connector_dir in root.iterdir():
        for digest_dir in connector_dir.iterdir() if connector_dir.is_dir() else ():
            if (connector_dir.name, digest_dir.name) not in kept:
                shutil.rmtree(digest_dir, ignore_errors=True)
        if connector_dir.is_dir() and not any(connector_dir.iterdir()):
            connector_dir.rmdir()
    if not keep and root.is_dir() and not any(root.iterdir()):
        root.rmdir()
