"""`status.connectors[]` of an address space: what its routers say now of each connector to a
remote endpoint (spec.connectors), read from their `connector` entities (`connectionStatus`,
`connectionMsg`) with a short timeout, and told in the tenant's words: unreachable,
authentication refused, TLS failure.
"""
import logging

from config_service import space_connectors
from workers import endpoints
from workers.agents.router import connectors
from workers.agents.router import desired as rc
from workers.clients.qdr import Management, RouterUnreachable

logger = logging.getLogger(__name__)

TIMEOUT_SECONDS = 3
# qdrouterd's connectionMsg, by what went wrong (proton's condition names and descriptions).
AUTHENTICATION = ("unauthorized-access", "authentication", "sasl")
TLS = ("ssl", "tls", "certificate")


def status(space) -> list[dict]:
    """[{name, isReady, messages}] in the order of spec.connectors; [] without connectors. A
    connector is ready when the host its links go to (the first connected, endpointHosts in
    order) is connected."""
    wanted = space_connectors.of(space.spec)
    if not wanted:
        return []
    routers = endpoints.of(space).routers
    prefix = rc.owner_prefix(space.vhost)
    messages: dict[str, list[str]] = {c["name"]: [] for c in wanted}
    for router in routers:
        said = f"{router.name}: " if len(routers) > 1 else ""
        rows = _rows(router, prefix + connectors.KIND)
        for connector in wanted:
            told = (["Router did not answer"] if rows is None
                    else _connector(connectors.entity_name(prefix, connector), connector, rows))
            messages[connector["name"]] += [said + m for m in told]
    return [{"name": c["name"], "isReady": not messages[c["name"]],
             "messages": messages[c["name"]]} for c in wanted]


def _connector(name: str, connector: dict, rows: dict) -> list[str]:
    """What is wrong with one connector on one router ([]: its links go to a connected host)."""
    hosts = [rows.get((rc.CONNECTOR, host)) for host in connectors.host_names(name, connector)]
    links = [row for (etype, _), row in rows.items()
             if etype == rc.LINK_ROUTE and row["name"].startswith(name + ":")]
    if any(host is None for host in hosts) or not links:
        return ["Not yet configured on the router"]
    used = next((host for host in hosts if host["name"] == links[0].get("connection")), hosts[0])
    if connectors.connected(used):
        return []
    told = [_told(host) for host in hosts if not connectors.connected(host)]
    connected = [host for host in hosts if connectors.connected(host)]
    if connected:
        told.append(f"Its links still go to {_where(used)}; the router agent's next run moves "
                    f"them to {_where(connected[0])}")
    return told


def _rows(router: endpoints.RouterEndpoint, prefix: str) -> dict | None:
    """{(type, name): row} of the router's remote connectors and their link routes."""
    try:
        mgmt = Management(router.management_url, router.admin_user, router.admin_password,
                          timeout=TIMEOUT_SECONDS, ca=router.management_ca)
    except RouterUnreachable:
        return None
    try:
        rows = {(rc.CONNECTOR, row["name"]): row for row in mgmt.query(
            rc.CONNECTOR, ["name", "host", "port", "connectionStatus", "connectionMsg"],
            name_prefix=prefix)}
        rows.update(((rc.LINK_ROUTE, row["name"]), row) for row in mgmt.query(
            rc.LINK_ROUTE, ["name", "connection"], name_prefix=prefix))
    except Exception:  # a status page must not fail on a busy router
        logger.warning("connector_status.read_failed", exc_info=True)
        return None
    finally:
        mgmt.close()
    return rows


def _where(row: dict) -> str:
    return f"{row.get('host')}:{row.get('port')}"


def _told(row: dict) -> str:
    """The router's word on a connector not connected, with what kind of failure it is."""
    where = _where(row)
    said = str(row.get("connectionMsg") or "").strip()
    lower = said.lower()
    if any(word in lower for word in AUTHENTICATION):
        return f"Authentication refused by {where}: {said}"
    if any(word in lower for word in TLS):
        return f"TLS failure with {where}: {said}"
    if not said:
        return f"Connecting to {where}"
    return f"{where} unreachable: {said}"
