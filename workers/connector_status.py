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
    """[{name, isReady, messages}] in the order of spec.connectors; [] without connectors."""
    wanted = space_connectors.of(space.spec)
    if not wanted:
        return []
    routers = endpoints.of(space).routers
    prefix = rc.owner_prefix(space.vhost) + connectors.KIND
    messages: dict[str, list[str]] = {c["name"]: [] for c in wanted}
    for router in routers:
        said = f"{router.name}: " if len(routers) > 1 else ""
        rows = _rows(router, prefix)
        for connector in wanted:
            name = connectors.entity_name(rc.owner_prefix(space.vhost), connector)
            if rows is None:
                messages[connector["name"]].append(f"{said}Router did not answer")
            elif name not in rows:
                messages[connector["name"]].append(f"{said}Not yet configured on the router")
            elif rows[name].get("connectionStatus") != "SUCCESS":
                messages[connector["name"]].append(said + _told(rows[name]))
    return [{"name": c["name"], "isReady": not messages[c["name"]],
             "messages": messages[c["name"]]} for c in wanted]


def _rows(router: endpoints.RouterEndpoint, prefix: str) -> dict | None:
    try:
        mgmt = Management(router.management_url, router.admin_user, router.admin_password,
                          timeout=TIMEOUT_SECONDS, ca=router.management_ca)
    except RouterUnreachable:
        return None
    try:
        rows = mgmt.query(rc.CONNECTOR, ["name", "host", "port", "connectionStatus",
                                         "connectionMsg"], name_prefix=prefix)
    except Exception:  # a status page must not fail on a busy router
        logger.warning("connector_status.read_failed", exc_info=True)
        return None
    finally:
        mgmt.close()
    return {row["name"]: row for row in rows}


def _told(row: dict) -> str:
    """The router's word on a connector not connected, with what kind of failure it is."""
    where = f"{row.get('host')}:{row.get('port')}"
    said = str(row.get("connectionMsg") or "").strip()
    lower = said.lower()
    if any(word in lower for word in AUTHENTICATION):
        return f"Authentication refused by {where}: {said}"
    if any(word in lower for word in TLS):
        return f"TLS failure with {where}: {said}"
    if not said:
        return f"Connecting to {where}"
    return f"{where} unreachable: {said}"
