"""A space's client connections with their links, and closing one (config_service/readings.py,
registered by workers/apps.py through workers/readings.py).

A standard space's clients are on its router (qdrouterd or the embedded router, the same
management entities), the protocol gateway's MQTT clients included: the gateway opens one AMQP
connection per MQTT client as its messaging user and names the client in that connection's
properties. A brokered space's clients are on its RabbitMQ vhost. The router's own connections
(to brokers, to management) and other spaces' are never listed. A connection's id says where it
lives (`router-<identity>`, on router k of a mesh `router<k>-<identity>`, `broker-<name,
base64url>`), so a close goes to the right place.
"""
import base64
import binascii
import logging
import re
import time

from config_service.readings import Connection, Link
from core.errors import Unavailable
from core.limits import CONTROL
from workers import endpoints
from workers.clients.qdr import Management, ManagementError, RouterUnreachable, tenant_of
from workers.clients.rabbitmq_api import BrokerError, RabbitMQApi, _q

logger = logging.getLogger(__name__)

CONNECTION = "org.apache.qpid.dispatch.connection"
LINK = "org.apache.qpid.dispatch.router.link"
CONNECTION_ATTRIBUTES = ("identity", "host", "container", "role", "dir", "user", "tenant",
                         "isEncrypted", "sasl", "properties", "uptimeSeconds", "operStatus")
LINK_ATTRIBUTES = ("identity", "linkName", "linkDir", "linkType", "owningAddr", "connectionId",
                   "creditAvailable", "unsettledCount", "deliveryCount", "acceptedCount",
                   "rejectedCount", "releasedCount", "modifiedCount", "presettledCount",
                   "undeliveredCount")
# What a list needs of each link: its connection's senders, receivers and message counts.
# Reading fewer attributes halves the links' decoding (tests/bench/bench_connections.py).
LINK_COUNTS = ("connectionId", "linkType", "linkDir", "deliveryCount")
# (metric name, router.link attribute)
LINK_METRICS = (("deliveries", "deliveryCount"), ("credit", "creditAvailable"),
                ("unsettled", "unsettledCount"), ("accepted", "acceptedCount"),
                ("rejected", "rejectedCount"), ("released", "releasedCount"),
                ("modified", "modifiedCount"), ("presettled", "presettledCount"),
                ("undelivered", "undeliveredCount"))
BROKER_COLUMNS = ("name", "user", "peer_host", "peer_port", "protocol", "ssl", "connected_at",
                  "auth_mechanism", "client_properties", "channels")
CHANNEL_COLUMNS = ("connection_details.name", "message_stats.publish",
                   "message_stats.deliver_get", "consumer_count")
CONSUMER_COLUMNS = ("channel_details.connection_name", "consumer_tag", "queue.name",
                    "prefetch_count")
TIMEOUT_SECONDS = 5
ROUTER, BROKER = "router-", "broker-"
ROUTER_ID = re.compile(r"router(\d*)-(.+)")  # router<k>-<identity>: router k of the mesh
# What the gateway names in its AMQP connection's properties (dataplane/gateway/session.py).
GATEWAY_PROTOCOL, GATEWAY_CLIENT_ID, GATEWAY_CLIENT_HOST = (
    "maas-protocol", "maas-client-id", "maas-client-host")


# What a client names itself (container id, properties) reaches operators' terminals and pages:
# control characters are shown escaped, and each text is bounded.
MAX_TEXT = 256


def _text(value) -> str:
    text = str(value if value is not None else "")[:MAX_TEXT]
    return CONTROL.sub(lambda m: f"\\x{ord(m.group()):02x}", text)


def _properties(props) -> dict:
    if not isinstance(props, dict):
        return {}
    return {_text(k): v if isinstance(v, (bool, int, float)) else _text(v)
            for k, v in list(props.items())[:16]}


def connections(space, links: bool = False) -> list[Connection]:
    """The space's client connections; with `links`, each with its links (a list without them
    still has their counts)."""
    where = endpoints.of(space)
    if where.routers:
        found, unavailable = [], []
        for k, router in enumerate(where.routers, 1):
            try:
                with _management(router) as mgmt:
                    found += _router_connections(mgmt, space.vhost, links, _tag(k))
            except Unavailable as exc:
                unavailable.append(exc)
        # A router of the mesh that went away has no clients to list; none answering is
        # an error, not an empty space.
        if len(unavailable) == len(where.routers):
            raise unavailable[0]
        return found
    api = _api(where.broker)
    try:
        return _broker_connections(api, where.broker, space.vhost)
    finally:
        api.close()


def close(space, connection_id: str) -> Connection | None:
    """Closes the connection if it is one of the space's clients'; the connection as it was,
    or None. The peer sees amqp:connection:forced (the embedded router), its socket closed
    (qdrouterd 1.19), or what RabbitMQ does (`_close_on_broker`)."""
    where = endpoints.of(space)
    routed = ROUTER_ID.fullmatch(connection_id)
    k = int(routed.group(1) or 1) if routed else 0
    if routed and 1 <= k <= len(where.routers) and routed.group(1) != "1":
        with _management(where.routers[k - 1]) as mgmt:
            found = _find(_router_connections(mgmt, space.vhost, False, _tag(k)), connection_id)
            if found is not None:
                try:
                    mgmt.request("UPDATE", {"adminStatus": "deleted"}, type=CONNECTION,
                                 identity=routed.group(2))
                except ManagementError as exc:
                    if exc.status == 404:  # gone meanwhile: what was asked for
                        return found
                    raise Unavailable(f"The router refused the close: {exc}") from exc
                except Exception as exc:  # proton's Timeout, ConnectionException
                    raise Unavailable(f"The space's router did not answer ({exc})") from exc
            return found
    if connection_id.startswith(BROKER) and not where.routers:
        api = _api(where.broker)
        try:
            found = _find(_broker_connections(api, where.broker, space.vhost), connection_id)
            if found is not None:
                _close_on_broker(api, _broker_name(connection_id))
            return found
        finally:
            api.close()
    return None


def _close_on_broker(api: RabbitMQApi, name: str) -> None:
    """RabbitMQ closes a connection it has statistics of (up to its copy interval after the
    connection opened); one it tracks but has none of yet is refused with a 503 to retry.
    RabbitMQ 3.10 lists an AMQP 1.0 client's vhost connection, not its network connection:
    closing that ends the client's session (amqp:internal-error), not its TCP connection."""
    try:
        api.request("DELETE", f"/connections/{_q(name)}", timeout=TIMEOUT_SECONDS)
    except BrokerError as exc:
        if " 404 " in str(exc):
            raise Unavailable("The broker has no statistics of this connection yet (they "
                              "follow within its copy interval); try again in a few "
                              "seconds") from exc
        raise Unavailable(f"The broker refused the close: {exc}") from exc


def _find(found: list[Connection], connection_id: str) -> Connection | None:
    return next((c for c in found if c.id == connection_id), None)


class _management:
    """The space router's management, or Unavailable: a page must not hang on a busy router."""

    def __init__(self, router: endpoints.RouterEndpoint):
        self.router = router

    def __enter__(self) -> Management:
        try:
            self.mgmt = Management(self.router.management_url, self.router.admin_user,
                                   self.router.admin_password, timeout=TIMEOUT_SECONDS,
                                   ca=self.router.management_ca)
        except RouterUnreachable as exc:
            raise Unavailable("The space's router did not answer; try again") from exc
        return self.mgmt

    def __exit__(self, kind, exc, tb) -> None:
        self.mgmt.close()


def _tag(k: int) -> str:
    """The id head of router k's connections: router 1's keep the single router's."""
    return ROUTER if k == 1 else f"router{k}-"


def _router_connections(mgmt: Management, vhost: str, with_links: bool,
                        tag: str = ROUTER) -> list[Connection]:
    try:
        # both at once; the embedded router answers only the space's (`vhost`), qdrouterd
        # every space's, picked out below
        rows, link_rows = mgmt.query_many([
            (CONNECTION, CONNECTION_ATTRIBUTES),
            (LINK, LINK_ATTRIBUTES if with_links else LINK_COUNTS)], vhost=vhost)
        # a connection being closed (by a close through here, its peer not answering yet) is
        # no longer listed
        mine = {str(c["identity"]): c for c in rows
                if tenant_of(c) == vhost and c.get("role") == "normal" and c.get("dir") == "in"
                and c.get("operStatus") != "closing"}
        links: dict[str, list[Link]] = {i: [] for i in mine}
        for row in link_rows:
            owner = links.get(str(row.get("connectionId")))
            if owner is not None and row.get("linkType") == "endpoint":
                owner.append(_router_link(row, vhost))
    except Exception as exc:
        # proton raises its own Timeout and ConnectionException types
        raise Unavailable(f"The space's router did not answer; try again ({exc})") from exc
    now = time.time()
    return [_router_connection(row, vhost, tuple(links[i]), now, with_links, tag)
            for i, row in mine.items()]


def _router_connection(row: dict, vhost: str, links: tuple, now: float,
                       with_links: bool, tag: str = ROUTER) -> Connection:
    props = _properties(row.get("properties"))
    encrypted = bool(row.get("isEncrypted"))
    protocol = str(props.get(GATEWAY_PROTOCOL) or "")
    via = "gateway" if protocol else "router"
    uptime = row.get("uptimeSeconds")
    sent = [link for link in links if link.role == "sender"]
    received = [link for link in links if link.role == "receiver"]
    return Connection(
        id=f"{tag}{row['identity']}",
        hostname=_text(props.get(GATEWAY_CLIENT_HOST) or row.get("host")),
        container_id=_text(props.get(GATEWAY_CLIENT_ID) or row.get("container")),
        protocol=protocol or ("amqps" if encrypted else "amqp"),
        encrypted=encrypted or protocol == "mqtts",
        principal=_principal(row.get("user"), vhost),
        sasl_mechanism=_text(row.get("sasl")),
        via=via,
        opened_at=now - int(uptime) if uptime is not None else None,
        properties=props,
        metrics={"messagesIn": sum(link.metrics["deliveries"] for link in sent),
                 "messagesOut": sum(link.metrics["deliveries"] for link in received),
                 "senders": len(sent), "receivers": len(received)},
        links=links if with_links else ())


def _router_link(row: dict, vhost: str) -> Link:
    # linkDir is the router's side: "in" is a link the client sends on
    return Link(name=_text(row.get("linkName")),
                role="sender" if row.get("linkDir") == "in" else "receiver",
                address=_text(_link_address(row.get("owningAddr"), vhost)),
                metrics={name: int(row.get(attr) or 0) for name, attr in LINK_METRICS})


def _link_address(owning, vhost: str) -> str:
    """The tenant's address of a link's `owningAddr`: qdrouterd's hash key (`M0<vhost>/a`,
    `C<vhost>/a` for a link route) without its class, phase and vhost."""
    key = str(owning or "")
    if key[:1] == "M" and key[1:2].isdigit():
        key = key[2:]
    elif key[:1] in ("C", "D", "E", "L") and key[1:].startswith(f"{vhost}/"):
        key = key[1:]
    return key[len(vhost) + 1:] if key.startswith(f"{vhost}/") else key


def _principal(user, vhost: str) -> str:
    """The messaging user: the auth service's identity is `<user>@<vhost>` (the broker's
    usernames too, workers/naming.py)."""
    user = _text(user)
    return user[:-len(vhost) - 1] if user.endswith(f"@{vhost}") else user


def _api(broker) -> RabbitMQApi:
    """A client of the space's broker for one read or close (closed after it)."""
    return RabbitMQApi(broker.api_url, broker.api_user, broker.api_password,
                       timeout=TIMEOUT_SECONDS, ca=broker.broker_ca or None)


def _broker_connections(api: RabbitMQApi, broker, vhost: str) -> list[Connection]:
    """The vhost's connections from RabbitMQ's connection tracking, which is live (a new
    connection is there at once), with what its statistics add once they are copied (protocol,
    TLS, client properties, consumers, message counts: up to the broker's copy interval later,
    docs/storage.md "Lag")."""
    vh = _q(vhost)
    try:
        # by name: RabbitMQ 3.10 tracks an AMQP 1.0 client's vhost connection per session
        tracked = list({row["name"]: row for row in api.listing(
            "/connections", params={"columns": "name,vhost,user", "disable_stats": "true"})
            if row.get("vhost") == vhost}.values())
        if not tracked:
            return []
        stats = {row["name"]: row for row in api.listing(
            f"/vhosts/{vh}/connections", missing_ok=True,
            params={"columns": ",".join(BROKER_COLUMNS)})}
        channels = api.listing(f"/vhosts/{vh}/channels", missing_ok=True,
                               params={"columns": ",".join(CHANNEL_COLUMNS)})
        consumers = api.listing(f"/consumers/{vh}", missing_ok=True,
                                params={"columns": ",".join(CONSUMER_COLUMNS)})
    except BrokerError as exc:
        raise Unavailable(f"The space's broker did not answer; try again ({exc})") from exc
    counts: dict[str, dict] = {}
    for ch in channels:
        name = (ch.get("connection_details") or {}).get("name")
        message_stats = ch.get("message_stats") or {}
        c = counts.setdefault(name, {"in": 0, "out": 0})
        c["in"] += int(message_stats.get("publish") or 0)
        c["out"] += int(message_stats.get("deliver_get") or 0)
    links: dict[str, list[Link]] = {}
    for cons in consumers:
        name = (cons.get("channel_details") or {}).get("connection_name")
        links.setdefault(name, []).append(Link(
            name=_text(cons.get("consumer_tag")), role="receiver",
            address=_text((cons.get("queue") or {}).get("name")),
            metrics={"credit": int(cons.get("prefetch_count") or 0)}))
    return [_broker_connection({**row, **stats.get(row["name"], {})}, broker, vhost,
                               counts.get(row["name"], {}), tuple(links.get(row["name"], ())))
            for row in tracked]


def _broker_connection(row: dict, broker, vhost: str, counts: dict, links: tuple) -> Connection:
    client = row.get("client_properties")  # nested tables (capabilities) are left out
    props = _properties({k: v for k, v in client.items() if not isinstance(v, (dict, list))}
                        if isinstance(client, dict) else {})
    encrypted = bool(row.get("ssl"))
    # "<peer> -> <listener>" is the tracked name: the peer's address, and the listener's port
    # says the protocol until the statistics do
    peer, _, listener = str(row["name"]).partition(" -> ")
    kind = _broker_protocol(str(row.get("protocol") or ""), listener, broker)
    connected = row.get("connected_at")
    host = row.get("peer_host")
    return Connection(
        id=BROKER + base64.urlsafe_b64encode(row["name"].encode()).decode().rstrip("="),
        hostname=f"{host}:{row.get('peer_port')}" if host else peer,
        container_id=_text(props.get("container_id") or props.get("client_id")
                           or props.get("connection_name")),
        protocol=f"{kind}s" if encrypted and kind != "amqp-0-9-1" else kind,
        encrypted=encrypted,
        principal=_principal(row.get("user"), vhost),
        sasl_mechanism=_text(row.get("auth_mechanism")),
        via="broker",
        opened_at=connected / 1000 if connected else None,
        properties=props,
        metrics={"messagesIn": counts.get("in", 0), "messagesOut": counts.get("out", 0),
                 "senders": 0, "receivers": len(links)},
        links=links)


def _broker_protocol(protocol: str, listener: str, broker) -> str:
    if protocol.startswith("MQTT"):
        return "mqtt"
    if protocol.startswith("AMQP 0"):
        return "amqp-0-9-1"
    if protocol:
        return "amqp"
    port = listener.rpartition(":")[2]
    mqtt_ports = {str(p) for p in (broker.mqtt_port, broker.broker_mqtt_port) if p}
    return "mqtt" if port in mqtt_ports else "amqp"


def _broker_name(connection_id: str) -> str:
    raw = connection_id[len(BROKER):]
    try:
        return base64.urlsafe_b64decode(raw + "=" * (-len(raw) % 4)).decode()
    except (binascii.Error, UnicodeDecodeError):
        return ""
