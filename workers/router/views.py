"""Read-only operational entities computed on demand (qdrouterd's names and attributes)."""

import time

from cproton_ffi import lib as L

from . import entities as E
from .counters import Counters

ROUTER_ADDRESS = E.PREFIX + "router.address"
CONNECTION = E.PREFIX + "connection"
ROUTER = E.PREFIX + "router"
LINK = E.PREFIX + "router.link"
TYPES = (ROUTER_ADDRESS, CONNECTION, ROUTER, LINK)


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
        "countersEpoch": entry.epoch if entry is not None else "",
        "countersSince": entry.since if entry is not None else None,
    }


def connection_rows(engine) -> list[dict]:
    rows = []
    for conn in engine.loop.conns.values():
        rows.append({
            "name": f"connection/{conn.host}", "identity": str(conn.identity),
            "type": CONNECTION, "host": conn.host, "container": conn.container,
            "role": "route-container" if conn.kind == "connector" else "normal",
            "dir": conn.dir, "user": conn.login, "tenant": conn.vhost,
            "isAuthenticated": conn.login is not None, "isEncrypted": conn.encrypted,
            "sasl": conn.sasl_mech, "opened": conn.opened, "operStatus": "up",
            "connector": conn.connector, "sessions": len(conn.sessions),
            "senders": conn.senders, "receivers": conn.receivers,
        })
    return rows


def link_rows(engine) -> list[dict]:
    rows = []
    for ls in engine.links.values():
        rows.append({
            "name": ls.name, "identity": str(ls.identity), "type": LINK,
            "linkType": "endpoint", "linkName": ls.name,
            "linkDir": "out" if ls.sender else "in",
            "owningAddr": ls.node.key if ls.node is not None else ls.address,
            "connectionId": str(ls.conn.identity), "capacity": 250,
            "creditAvailable": L.pn_link_credit(ls.pn), "unsettledCount": len(ls.unsettled),
            "deliveryCount": ls.counts.egress, "acceptedCount": ls.counts.accepted,
            "rejectedCount": ls.counts.rejected, "releasedCount": ls.counts.released,
            "modifiedCount": ls.counts.modified, "presettledCount": ls.counts.presettled,
            "undeliveredCount": 0, "operStatus": "up", "adminStatus": "enabled",
        })
    return rows


def router_rows(engine) -> list[dict]:
    c = engine.counts
    store = engine.store
    return [{
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


_ROWS = {ROUTER_ADDRESS: address_rows, CONNECTION: connection_rows, LINK: link_rows,
         ROUTER: router_rows}


def rows(engine, etype: str) -> list[dict]:
    return _ROWS[etype](engine)


def attribute_names() -> dict[str, list[str]]:
    """GET-ATTRIBUTES of the operational types whose attributes a client must be able to look
    for: router.address, so that an agent can tell this router keeps counters (countersEpoch)."""
    return {ROUTER_ADDRESS: list(_address_row(("", 0), False, Counters(), None, None))}
