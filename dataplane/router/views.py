"""Read-only operational entities computed on demand, with qdrouterd 1.19's names and every
attribute its schema gives them (what `qdstat` and `qdmanage` read): those the embedded router
has no notion of get qdrouterd's neutral value (0, an empty list, None)."""

import resource
import time

from cproton_ffi import lib as L

from . import entities as E
from .counters import Counters

ROUTER_ADDRESS = E.PREFIX + "router.address"
CONNECTION = E.PREFIX + "connection"
ROUTER = E.PREFIX + "router"
LINK = E.PREFIX + "router.link"
LISTENER = E.PREFIX + "listener"
LOG = E.PREFIX + "log"
SSL_PROFILE = E.PREFIX + "sslProfile"
TYPES = (ROUTER_ADDRESS, CONNECTION, ROUTER, LINK, LISTENER, LOG, SSL_PROFILE)

# qdrouterd 1.19's attributes (qdrouter.json) beyond those computed below, with the value they
# have on a router without inter-router links, fallback or priorities in use.
_ADDRESS_MORE = {"deliveriesIngressRouteContainer": 0, "deliveriesEgressRouteContainer": 0,
                 "deliveriesRedirectedToFallback": 0, "remoteHostRouters": [],
                 "transitOutstanding": None, "trackedDeliveries": 0, "priority": -1}
_CONNECTION_MORE = {"adminStatus": "enabled", "protocol": "amqp", "enableProtocolTrace": False,
                    "ssl": False, "sslProto": None, "sslCipher": None, "sslSsf": None,
                    "lastDlvSeconds": None}
_LINK_MORE = {"peer": None, "droppedPresettledCount": 0, "deliveriesDelayed1Sec": 0,
              "deliveriesDelayed10Sec": 0, "deliveriesStuck": 0, "zeroCreditSeconds": 0,
              "settleRate": 0, "ingressHistogram": None, "priority": 4}
_ROUTER_MORE = {"area": "0", "hostName": None, "helloIntervalSeconds": 1,
                "helloMaxAgeSeconds": 3, "raIntervalSeconds": 30, "raIntervalFluxSeconds": 4,
                "remoteLsMaxAgeSeconds": 60, "workerThreads": 1, "debugDumpFile": None,
                "saslConfigDir": None, "saslConfigName": "qdrouterd",
                "allowResumableLinkRoute": True, "timestampsInUTC": True, "timestampFormat": None,
                "allowUnsettledMulticast": False, "defaultDistribution": "balanced",
                "metadata": None, "blockedLinkCount": 0, "deliveriesDelayed1Sec": 0,
                "deliveriesDelayed10Sec": 0, "deliveriesStuck": 0,
                "deliveriesIngressRouteContainer": 0, "deliveriesEgressRouteContainer": 0,
                "deliveriesRedirectedToFallback": 0}



def _outcomes(c) -> dict:
    return {"acceptedDeliveries": c.accepted, "rejectedDeliveries": c.rejected,
            "releasedDeliveries": c.released, "modifiedDeliveries": c.modified,
            "presettledDeliveries": c.presettled,
            "droppedPresettledDeliveries": c.dropped_presettled}


def address_rows(engine) -> list[dict]:
    """One row per address node and per usage ledger entry without a node (its counters
    outlive the node). `countersEpoch` and `countersSince` are MaaS extensions: the identity
    of the counter instance and when it began (UTC seconds); "" and None for a node the
    ledger does not meter (`$temp`)."""
    rows = []
    nodes = engine.fwd.nodes
    entries = engine.ledger.entries
    for k, node in nodes.items():
        rows.append(_address_row(k, node.multicast, node.counts, entries.get(k), node))
    for k, entry in entries.items():
        if k not in nodes:
            rows.append(_address_row(k, entry.multicast, entry.counts, entry, None))
    return rows


def _address_row(k, multicast: bool, c, entry, node) -> dict:
    key, phase = k
    ident = f"M{phase}{key}"
    consumers = node.consumers if node is not None else ()
    return {
        "name": ident, "identity": ident, "key": ident, "type": ROUTER_ADDRESS,
        "address": key, "phase": phase,
        "distribution": "multicast" if multicast else "balanced",
        "inProcess": 0, "subscriberCount": len(consumers), "remoteCount": 0,
        "containerCount": sum(1 for link in consumers if link.kind == "autolink"),
        "deliveriesIngress": c.ingress, "deliveriesEgress": c.egress,
        "bytesIngress": c.bytes_in, "bytesEgress": c.bytes_out,
        "deliveriesTransit": 0, "deliveriesToContainer": 0, "deliveriesFromContainer": 0,
        "undeliveredCount": len(node.backlog) if node is not None else 0,
        **_outcomes(c),
        **_ADDRESS_MORE,
        "countersEpoch": entry.epoch if entry is not None else "",
        "countersSince": entry.since if entry is not None else None,
    }


def connection_rows(engine, vhost: str | None = None) -> list[dict]:
    """Every connection, or with `vhost` only that vhost's clients'."""
    rows = []
    now = time.monotonic()
    for conn in engine.loop.conns.values():
        if vhost is not None and conn.vhost != vhost:
            continue
        rows.append({
            **_CONNECTION_MORE, "ssl": conn.encrypted,
            "uptimeSeconds": int(now - conn.started),
            "name": f"connection/{conn.host}", "identity": str(conn.identity),
            "type": CONNECTION, "host": conn.host, "container": conn.container,
            "role": "route-container" if conn.kind == "connector" else "normal",
            "dir": conn.dir, "user": conn.login, "tenant": conn.vhost,
            "isAuthenticated": conn.login is not None, "isEncrypted": conn.encrypted,
            "sasl": conn.sasl_mech, "opened": conn.opened,
            "operStatus": "closing" if conn.forced else "up",
            "connector": conn.connector, "sessions": len(conn.sessions),
            "senders": conn.senders, "receivers": conn.receivers,
            "properties": conn.properties,
        })
    return rows


def link_rows(engine, vhost: str | None = None) -> list[dict]:
    """Every link, or with `vhost` only those of that vhost's clients' connections."""
    rows = []
    for ls in engine.links.values():
        if vhost is not None and ls.conn.vhost != vhost:
            continue
        rows.append({
            **_LINK_MORE, "droppedPresettledCount": ls.counts.dropped_presettled,
            "name": ls.name, "identity": str(ls.identity), "type": LINK,
            "linkType": "endpoint", "linkName": ls.name,
            "linkDir": "out" if ls.sender else "in",
            # the node's key with qdrouterd's class and phase ("M0orders"), which qdstat -l
            # splits to show the address
            "owningAddr": (f"M{ls.node.phase}{ls.node.key}" if ls.node is not None
                           else ls.address),
            "connectionId": str(ls.conn.identity), "capacity": 250,
            "creditAvailable": L.pn_link_credit(ls.pn), "unsettledCount": len(ls.unsettled),
            # deliveries on the link either way (qdrouterd counts both directions)
            "deliveryCount": ls.counts.egress if ls.sender else ls.counts.ingress,
            "acceptedCount": ls.counts.accepted,
            "rejectedCount": ls.counts.rejected, "releasedCount": ls.counts.released,
            "modifiedCount": ls.counts.modified, "presettledCount": ls.counts.presettled,
            "undeliveredCount": 0, "operStatus": "up", "adminStatus": "enabled",
        })
    return rows


def router_rows(engine) -> list[dict]:
    c = engine.counts
    store = engine.store
    return [{
        **_ROUTER_MORE,
        # ru_maxrss is in KiB on Linux; qdrouterd reports bytes
        "memoryUsage": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
        "name": "maas-router", "identity": "maas-router", "id": "maas-router",
        "type": ROUTER, "mode": "standalone", "version": "maas-embedded",
        "addrCount": len(engine.fwd.nodes), "linkCount": len(engine.links),
        "nodeCount": 0, "connectionCount": len(engine.loop.conns),
        "autoLinkCount": store.count(E.AUTO_LINK),
        "linkRouteCount": store.count(E.LINK_ROUTE),
        "deliveriesIngress": c.ingress, "deliveriesEgress": c.egress, "deliveriesTransit": 0,
        "uptimeSeconds": int(time.monotonic() - engine.started),
        **_outcomes(c),
    }]


def listener_rows(engine) -> list[dict]:
    """The listeners of the command line, as qdrouterd's listener entities (read-only)."""
    return [{"name": f"{entry['maas-kind']}-{entry['port']}",
             "identity": f"{entry['maas-kind']}-{entry['port']}", "type": LISTENER,
             **{k: v for k, v in entry.items() if k != "maas-kind"}}
            for entry in engine.listeners]


def log_rows(engine) -> list[dict]:
    """One log module, as qdrouterd lists its modules: this router logs through Python's
    logging (JSON lines), configured on the command line."""
    return [{"name": "log/DEFAULT", "identity": "log/DEFAULT", "type": LOG, "module": "DEFAULT",
             "enable": "info+", "includeTimestamp": True, "includeSource": False,
             "outputFile": "stderr"}]


def ssl_profile_rows(engine) -> list[dict]:
    """The TLS listener's profile and the connectors' (their files come from the command line
    and are not shown)."""
    rows = [{"name": name, "identity": name, "type": SSL_PROFILE, "certFile": None,
             "privateKeyFile": None, "caCertFile": None} for name in engine.client_profiles]
    if not any(e["sslProfile"] for e in engine.listeners):
        return rows
    return [{"name": "maas-tls", "identity": "maas-tls", "type": SSL_PROFILE,
             "certFile": None, "privateKeyFile": None, "caCertFile": None}, *rows]


_ROWS = {ROUTER_ADDRESS: address_rows, CONNECTION: connection_rows, LINK: link_rows,
         ROUTER: router_rows, LISTENER: listener_rows, LOG: log_rows,
         SSL_PROFILE: ssl_profile_rows}


# The types whose QUERY takes the MaaS extension `vhost` (management.py): one space's rows,
# so a space's connection list costs its own connections, not the router's.
BY_VHOST = (CONNECTION, LINK)


def rows(engine, etype: str, vhost: str | None = None) -> list[dict]:
    if vhost is not None and etype in BY_VHOST:
        return _ROWS[etype](engine, vhost)
    return _ROWS[etype](engine)


def attribute_names(engine) -> dict[str, list[str]]:
    """GET-ATTRIBUTES of the operational types (an agent tells from router.address's
    countersEpoch that this router keeps counters)."""
    names = {ROUTER_ADDRESS: list(_address_row(("", 0), False, Counters(), None, None)),
             ROUTER: list(router_rows(engine)[0]),
             CONNECTION: ["name", "identity", "type", "host", "container", "role", "dir",
                          "user", "tenant", "isAuthenticated", "isEncrypted", "sasl", "opened",
                          "operStatus", "connector", "sessions", "senders", "receivers",
                          "uptimeSeconds", "properties", *_CONNECTION_MORE],
             LINK: ["name", "identity", "type", "linkType", "linkName", "linkDir", "owningAddr",
                    "connectionId", "capacity", "creditAvailable", "unsettledCount",
                    "deliveryCount", "acceptedCount", "rejectedCount", "releasedCount",
                    "modifiedCount", "presettledCount", "undeliveredCount", "operStatus",
                    "adminStatus", *_LINK_MORE],
             LISTENER: ["name", "identity", "type", "host", "port", "role", "authenticatePeer",
                        "saslMechanisms", "requireSsl", "sslProfile"],
             LOG: list(log_rows(engine)[0]),
             SSL_PROFILE: ["name", "identity", "type", "certFile", "privateKeyFile",
                           "caCertFile"]}
    return {t: list(dict.fromkeys(n)) for t, n in names.items()}
