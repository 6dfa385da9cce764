"""Qpid Dispatch Router (qdrouterd 1.19) in place of the embedded router: its static
configuration (listeners, auth service, vhost policy) and the command that starts it.

The platform finds qdrouterd only through the `QDROUTERD` environment variable (the path of
the binary or of a wrapper that sets its PYTHONPATH); nothing of qdrouterd is in this project.
Everything the router agent adds later (vhosts, connectors, addresses, links) goes over AMQP
management, exactly as with the embedded router. The Kubernetes manifests
(workers/infra/manifests.py) put the same configuration, in interior mode, into each standard
space's router ConfigMap.
"""
import json
import os
from dataclasses import dataclass
from pathlib import Path

AUTH_PLUGIN = "maas-auth"
# The policy vhost of the management listener: `$` is not allowed in space names, so no space
# vhost can take it.
MANAGEMENT_VHOST = "$management"
# qdrouterd drops a connection that sent nothing for this long (its default is 16 s). The
# agents keep their management connections between reconciles for less than that
# (workers/agents/router/pool.py, POOL_IDLE_SECONDS): at 100,000 addresses a new one, SASL
# relayed to the auth service and its schema read again, made the first change after a
# quiet spell the slowest of its round. The router still reaps a client that went silent.
MANAGEMENT_IDLE_SECONDS = 300


def binary() -> str | None:
    """The qdrouterd to run, or None: `QDROUTERD`, if it names an executable."""
    path = os.environ.get("QDROUTERD", "")
    return path if path and os.access(path, os.X_OK) else None


@dataclass(frozen=True)
class TlsFiles:
    """The files of one TLS identity of the router: the CA (bundle) it trusts, and its own
    certificate (its host names in the subject alternative names) and key."""

    ca: str
    cert: str
    key: str


MeshTls = TlsFiles  # the router's mutual TLS with its peers

# The sslProfile the router agent's broker connectors name (workers/agents/router/desired.py,
# BROKER_SSL_PROFILE), and the embedded router's client profile of the same name.
BROKER_PROFILE = "broker"
# The internal certificate's (entity names are unique across types: not its listener's name)
INTERNAL_PROFILE = "internal-tls"


@dataclass(frozen=True)
class Listeners:
    """Where qdrouterd listens and whom it asks; the same settings as the embedded router."""

    host: str
    amqp_port: int
    management_host: str
    management_port: int
    admin_user: str
    auth_host: str
    auth_port: int
    amqps_port: int | None = None
    tls_cert: str | None = None
    tls_key: str | None = None
    metrics_host: str | None = None
    metrics_port: int | None = None
    max_connections: int = 10000
    # One machine runs a standalone router; a space's router on Kubernetes is `interior`, with
    # an inter-router listener, so that its replicas can be meshed.
    mode: str = "standalone"
    inter_router_port: int | None = None
    # A router serving one space (Kubernetes): the tenant listeners' policy vhost, so a client
    # gets that space's policy and address prefix whatever AMQP open hostname it sends.
    tenant_vhost: str | None = None
    worker_threads: int | None = None
    handshake_timeout: float = 5.0  # seconds a client has for TLS, SASL and its open
    # The CA that certifies the auth service: TLS to it, verified (None: plain, loopback)
    auth_ca: str | None = None
    # A mesh on one machine: the inter-router listener and connectors over mutual TLS, and
    # the peers ((host, port), ...) whose inter-router listeners this router connects to.
    mesh_tls: MeshTls | None = None
    peers: tuple = ()
    # The management listener requires TLS: with internal_tls's certificate where given, else
    # with tls_cert/tls_key (the agents' `amqps://`)
    management_tls: bool = False
    # The platform's internal certificate (Kubernetes: the internal CA's, not the tenants'):
    # the management listener's, and that of `internal_port`, a tenant listener for the
    # platform's own clients (the MQTT gateway), TLS only.
    internal_tls: TlsFiles | None = None
    internal_port: int | None = None
    # The CA of the brokers' TLS listeners: the profile the agent's connectors name
    broker_ca: str | None = None


# Link routes to a container that never connects: an attach to a router-internal address
# (`_local/$management` ...) finds no route and is refused. qdrouterd checks a link's address
# against the policy as written but routes it after dropping a `scheme:/` head, so a tenant
# allowed `news/*` could otherwise attach to `news/x:/_local/$management` and manage the
# router. The agent and the router watch use `$management` on their own listener, not these.
INTERNAL_PREFIXES = ("_local", "_topo", "_edge")
NOWHERE = "maas-no-route"
# A router that serves one space lets its users reply to the space's dynamic addresses,
# `_topo/0/<router>/temp.<id>` (five tokens; an id has no `.` or `/`). Its incoming `_topo`
# guard covers every other `_topo` address instead of the whole prefix: fewer or more tokens
# (`$management`, `qdhello`, `qdrouter` of any router, and any `:/` trick, which adds tokens),
# and the one other five-token address of a router, `qdrouter.ma`.
TOPO_GUARD_PATTERNS = ("_topo", "_topo/*", "_topo/*/*", "_topo/*/*/*", "_topo/*/*/qdrouter/*",
                       "_topo/*/*/*/*/*/#")


def internal_address_guards(one_space: bool = False) -> list:
    """The guard link routes; `one_space`: the router serves one space (see above)."""
    guards = [["linkRoute", {"name": f"maas-guard{prefix}-{direction}", "prefix": prefix,
                             "direction": direction, "containerId": NOWHERE}]
              for prefix in INTERNAL_PREFIXES for direction in ("in", "out")
              if not (one_space and prefix == "_topo" and direction == "in")]
    if one_space:
        guards += [["linkRoute", {"name": f"maas-guard-topo-in-{i}", "pattern": pattern,
                                  "direction": "in", "containerId": NOWHERE}]
                   for i, pattern in enumerate(TOPO_GUARD_PATTERNS)]
    return guards


def router_config(router_id: str, where: Listeners) -> list:
    """qdrouterd's JSON configuration: a list of [entity type, attributes].

    Tenants' listeners are `multiTenant` (a client's addresses are prefixed with its vhost,
    the AMQP open hostname) and checked by the vhost policy the agent writes per space; SASL
    is relayed to the MaaS auth service, which checks the messaging user's hash and returns
    `user@vhost` as the identity the policy groups name. The management listener has its own
    policy vhost that admits only the router admin (also checked by the auth service).

    With `tenant_vhost` the tenant listeners name it as their `policyVhost`: qdrouterd then
    takes the policy and the `multiTenant` prefix from that vhost, not from the open hostname.
    `interior` mode adds the inter-router listener (no SASL: only the space's own routers may
    reach it, by NetworkPolicy)."""
    if where.mode not in ("standalone", "interior"):
        raise ValueError(f"mode must be standalone or interior, not {where.mode!r}")
    if where.inter_router_port and where.mode != "interior":
        raise ValueError("an inter-router listener needs mode interior")
    sasl = {"authenticatePeer": True, "saslMechanisms": "PLAIN", "saslPlugin": AUTH_PLUGIN}
    # A client that has not finished TLS, SASL and its open by then is closed: one that sends
    # nothing must not hold a connection (and the auth service's) for long.
    tenant = {"multiTenant": True, **sasl,
              "initialHandshakeTimeoutSeconds": round(where.handshake_timeout)}
    if where.tenant_vhost:
        tenant["policyVhost"] = where.tenant_vhost
    router = {"mode": where.mode, "id": router_id}
    if where.worker_threads:
        router["workerThreads"] = where.worker_threads
    plugin = {"name": AUTH_PLUGIN, "host": where.auth_host, "port": str(where.auth_port)}
    config: list = [["router", router]]
    if where.auth_ca:
        # qdrouterd verifies the auth service's certificate chain against this CA (not its
        # host name): a process on that port without the service's key gets no login.
        config.append(["sslProfile", {"name": "auth-service", "caCertFile": where.auth_ca,
                                      "protocols": "TLSv1.2 TLSv1.3"}])
        plugin["sslProfile"] = "auth-service"
    config += [
        ["authServicePlugin", plugin],
        ["policy", {"enableVhostPolicy": True, "maxConnections": where.max_connections}],
        ["vhost", {"hostname": MANAGEMENT_VHOST, "allowUnknownUser": False,
                   "groups": {"admin": {
                       "users": where.admin_user, "remoteHosts": "*",
                       "sources": "*", "targets": "*", "allowDynamicSource": True,
                       "allowAnonymousSender": True, "maxSessions": 10}}}],
        ["listener", {"name": "amqp", "host": where.host, "port": str(where.amqp_port),
                      "role": "normal", **tenant}],
        ["listener", {"name": "management", "host": where.management_host,
                      "port": str(where.management_port), "role": "normal",
                      "policyVhost": MANAGEMENT_VHOST,
                      "idleTimeoutSeconds": MANAGEMENT_IDLE_SECONDS, **sasl,
                      **({"sslProfile": INTERNAL_PROFILE if where.internal_tls else "tls",
                          "requireSsl": True} if where.management_tls else {})}],
        *internal_address_guards(one_space=bool(where.tenant_vhost)),
    ]
    if where.management_tls and not where.internal_tls and not (
            where.amqps_port and where.tls_cert and where.tls_key):
        raise ValueError("a TLS management listener needs the AMQPS listener's certificate")
    if where.internal_port and not where.internal_tls:
        raise ValueError("the internal listener needs the internal certificate")
    if where.internal_tls:
        config.append(["sslProfile", {"name": INTERNAL_PROFILE,
                                      "caCertFile": where.internal_tls.ca,
                                      "certFile": where.internal_tls.cert,
                                      "privateKeyFile": where.internal_tls.key,
                                      "protocols": "TLSv1.2 TLSv1.3"}])
    if where.internal_port:
        config.append(["listener", {"name": "internal", "host": where.host,
                                    "port": str(where.internal_port), "role": "normal",
                                    "sslProfile": INTERNAL_PROFILE, "requireSsl": True,
                                    **tenant}])
    if where.broker_ca:
        # Checked against the brokers' CA and their host names (a connector's verifyHostname
        # is on by default): only the space's brokers get the router's broker login.
        config.append(["sslProfile", {"name": BROKER_PROFILE, "caCertFile": where.broker_ca,
                                      "protocols": "TLSv1.2 TLSv1.3"}])
    if where.amqps_port and where.tls_cert and where.tls_key:
        config += [
            # TLS 1.2 or newer only, as EnMasse's external listeners. Entity names are unique
            # across types: the profile cannot be called "amqps" like its listener.
            ["sslProfile", {"name": "tls", "certFile": where.tls_cert,
                            "privateKeyFile": where.tls_key, "protocols": "TLSv1.2 TLSv1.3"}],
            ["listener", {"name": "amqps", "host": where.host, "port": str(where.amqps_port),
                          "role": "normal", "sslProfile": "tls", "requireSsl": True,
                          **tenant}],
        ]
    if where.peers and where.mode != "interior":
        raise ValueError("connectors to peers need mode interior")
    if where.mesh_tls:
        config.append(["sslProfile", {"name": "mesh", "caCertFile": where.mesh_tls.ca,
                                      "certFile": where.mesh_tls.cert,
                                      "privateKeyFile": where.mesh_tls.key,
                                      "protocols": "TLSv1.2 TLSv1.3"}])
        # TLS both ways: qdrouterd asks the peer for a certificate of the mesh's CA only
        # when the listener offers SASL EXTERNAL, and takes the identity from it.
        mutual = {"sslProfile": "mesh", "saslMechanisms": "EXTERNAL"}
    if where.inter_router_port:
        listener = {"name": "inter-router", "host": where.host,
                    "port": str(where.inter_router_port), "role": "inter-router"}
        if where.mesh_tls:
            listener.update(mutual, authenticatePeer=True, requireSsl=True)
        else:  # Kubernetes: only the space's own routers may reach it, by NetworkPolicy
            listener["authenticatePeer"] = False
        config.append(["listener", listener])
    for host, port in where.peers:
        connector = {"name": f"mesh-{host}-{port}", "host": host, "port": str(port),
                     "role": "inter-router"}
        if where.mesh_tls:  # the peer's certificate checked against the CA and its host name
            connector.update(mutual, verifyHostname=True)
        config.append(["connector", connector])
    if where.metrics_port:
        # qdrouterd's HTTP listener serves /metrics and /healthz without authentication:
        # loopback by default, as the embedded router's (on Kubernetes, the probes' port,
        # which the router's NetworkPolicy opens to its namespace only).
        config.append(["listener", {"name": "metrics", "host": where.metrics_host or "127.0.0.1",
                                    "port": str(where.metrics_port), "http": True,
                                    "metrics": True, "healthz": True, "websockets": False,
                                    "authenticatePeer": False}])
    return config


def write_config(path: Path, router_id: str, where: Listeners) -> Path:
    """Writes the configuration where only its owner can read it; returns the path."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as out:
        json.dump(router_config(router_id, where), out, indent=2)
    return path


def command(config_path: Path) -> list[str]:
    """The command line that runs qdrouterd on a configuration file."""
    exe = binary()
    if exe is None:
        raise RuntimeError("QDROUTERD does not name an executable qdrouterd")
    return [exe, "-c", str(config_path)]
