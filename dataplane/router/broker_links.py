"""Connections to brokers (connectors) and the links the router makes over them.

autoLinks attach a router link to a broker address and hang it on an address node (how
waypoint queues reach RabbitMQ); linkRoutes pair a client link with a freshly attached broker
link and pass credit, deliveries and dispositions straight through (topics, subscriptions).
Connectors reconnect with backoff, reset only by a connection that stayed up: RabbitMQ opens
the connection to a vhost that is not running and ends it at once, and resetting on every open
made that a reconnect every 0.4 s per space. A refused autoLink attaches again with backoff
too (a queue that stays missing was a broker connection a second: 70 a second at 1,000
spaces, each with a channel and statistics, docs/scale.md).

Sessions: RabbitMQ reports a link's error by ending its session, and RabbitMQ 3.10 makes an
internal connection (with a channel and their statistics) for every AMQP 1.0 session: a
session per link was 40 such connections per standard space, 32,000 at 100,000 addresses,
which kept both of the broker's cores busy. So a connector's autoLinks share one session, as
qdrouterd's do. When that session ends with an error, the autoLinks the broker had already
answered attach again on a new shared session, and so do those it had not, but for the
one the broker's error names (`no queue 'x' in vhost 'y'`): that one is quarantined, it
attaches on a session of its own from then on, so a queue that stays missing cannot end the
others' session again. A link refused twice in a row before its attach was answered is
quarantined too, whatever the error said (an error that names nothing, or a name we do not
recognise, must not end the shared session every second). A linkRoute's broker link (a
client's, short-lived) keeps a session of its own.
"""

import logging
import re
import time

from cproton import (
    pn_connection_set_hostname,
    pn_connection_set_password,
    pn_connection_set_user,
    pn_receiver,
    pn_sasl_allowed_mechs,
    pn_sender,
    pn_terminus_set_address,
)
from cproton_ffi import lib as L

from . import entities as E
from .forwarder import LinkState, Node
from .patterns import best_match
from .policy import NOT_FOUND

logger = logging.getLogger(__name__)

_BACKOFF_START = 0.2
_BACKOFF_MAX = 5.0
_STABLE_AFTER = 10.0  # a connection up this long resets its connector's backoff
_REATTACH_START = 1.0  # a refused autoLink tries again after this, doubled each time
_REATTACH_MAX = 10.0
# RabbitMQ's description when it refuses a link to an object that is not there
_REFUSED = re.compile(r"no (?:queue|exchange) '([^']*)'")


def refused_object(reason) -> str | None:
    """The queue or exchange a broker's link refusal names, if it names one."""
    found = _REFUSED.search(reason[1] or "") if reason else None
    return found.group(1) if found else None


def names_object(external: str, name: str) -> bool:
    """Whether an external address (`/amq/queue/x`, `/queue/x`, `/exchange/x[/key]`, `x`)
    is about the broker object `name`."""
    parts = external.strip("/").split("/")
    if parts[:2] == ["amq", "queue"] or parts[:1] in (["queue"], ["exchange"]):
        parts = parts[2:] if parts[0] == "amq" else parts[1:]
    return bool(parts) and parts[0] == name


def is_culprit(reason, external: str, strikes: int) -> bool:
    """Whether an autoLink lost unanswered with the shared session is the one the broker
    refused: the error names its object, or it has been lost so `strikes` times in a row
    (a refusal that names nothing we recognise must not end the shared session forever)."""
    culprit = refused_object(reason)
    return strikes > 1 or (culprit is not None and names_object(external, culprit))


class BrokerLinks:
    def __init__(self, engine):
        self.engine = engine
        self.conns: dict = {}  # connector name -> Conn (current attempt or open)
        self.backoff: dict[str, float] = {}
        self.autolinks: dict[str, LinkState] = {}  # autoLink name -> its link
        self.shared: dict[str, tuple] = {}  # connector name -> (Conn, its autoLinks' session)
        self.quarantined: set[str] = set()  # autoLinks that attach on a session of their own
        self.refusals: dict[str, int] = {}  # autoLink -> times lost unanswered in a row
        self.reattach: dict[str, float] = {}  # autoLink -> its next delay (until it opens)
        self._seq = 0

    # -- connectors --------------------------------------------------------------------------
    def connector_created(self, ent: dict) -> None:
        self._connect(ent["name"])

    def connector_deleted(self, ent: dict) -> None:
        self.shared.pop(ent["name"], None)
        conn = self.conns.pop(ent["name"], None)
        if conn is not None:
            self.engine.loop.close(conn)

    def _connect(self, name: str) -> None:
        try:
            ent = self.engine.store.find(E.CONNECTOR, name)
        except E.EntityError:
            return  # deleted meanwhile
        if name in self.conns:
            return
        profile = ent.get("sslProfile")
        context = None
        if profile:
            context = self.engine.client_tls(profile, ent.get("verifyHostname", True))
            if context is None:  # as qdrouterd: the connector stays, unconnected, and says why
                ent["connectionStatus"] = "FAILED"
                ent["connectionMsg"] = f"no sslProfile {profile!r} on this router"
                logger.error("connector.unknown_ssl_profile",
                             extra={"connector": name, "sslProfile": profile})
                return

        def setup(conn) -> None:
            conn.connector = name
            conn.kind = "connector"
            if context is not None:  # the broker's certificate checked against the profile's CA
                conn.start_tls(context, server_hostname=ent["host"])
            sasl = L.pn_sasl(conn.transport)
            if ent.get("saslUsername"):
                pn_sasl_allowed_mechs(sasl, ent.get("saslMechanisms") or "PLAIN")
                L.pn_sasl_set_allow_insecure_mechs(sasl, True)
                pn_connection_set_user(conn.pn, ent["saslUsername"])
                pn_connection_set_password(conn.pn, ent.get("saslPassword") or "")
            else:
                pn_sasl_allowed_mechs(sasl, "ANONYMOUS")
            # RabbitMQ picks its vhost from the open hostname (`vhost:NAME`)
            pn_connection_set_hostname(conn.pn, ent.get("virtualHost") or ent["host"])
            L.pn_connection_open(conn.pn)

        logger.info("connector.connecting", extra={"connector": name, "host": ent["host"],
                                                   "port": ent["port"]})
        self.conns[name] = self.engine.loop.connect(ent["host"], int(ent["port"]), setup)

    def on_connected(self, conn) -> None:
        name = conn.connector
        conn.connected_at = time.monotonic()
        try:
            ent = self.engine.store.find(E.CONNECTOR, name)
        except E.EntityError:
            return
        ent["connectionStatus"] = "SUCCESS"
        ent["connectionMsg"] = None
        logger.info("connector.connected", extra={"connector": name, "container": conn.container})
        for al in self.engine.store.autolinks_of(name):
            self._attach_autolink(al)

    def on_disconnected(self, conn) -> None:
        name = conn.connector
        if self.conns.get(name) is not conn:
            return
        del self.conns[name]
        try:
            ent = self.engine.store.find(E.CONNECTOR, name)
        except E.EntityError:
            return
        ent["connectionStatus"] = "FAILED"
        if conn.failure:  # an untrusted certificate, say: the status says so, as qdrouterd's
            ent["connectionMsg"] = conn.failure
        up_since = getattr(conn, "connected_at", None)
        if up_since is not None and time.monotonic() - up_since >= _STABLE_AFTER:
            self.backoff.pop(name, None)
        delay = self.backoff.get(name, _BACKOFF_START)
        self.backoff[name] = min(delay * 2, _BACKOFF_MAX)
        logger.info("connector.disconnected", extra={"connector": name, "retry_in": delay})
        self.engine.loop.call_later(delay, self._connect, name)

    def _conn_for(self, ent: dict):
        if ent.get("connection"):
            conn = self.conns.get(ent["connection"])
            return conn if conn is not None and conn.opened and not conn.closed else None
        for conn in self.engine.loop.conns.values():
            if conn.opened and conn.container == ent.get("containerId"):
                return conn
        return None

    def _new_session(self, conn):
        ssn = L.pn_session(conn.pn)
        L.pn_session_open(ssn)
        return ssn

    def _autolink_session(self, conn, name: str):
        """The session for autoLink `name`: its own if quarantined, else the connector's
        shared one (opened on first use, and again once the broker ended it)."""
        if name in self.quarantined:
            return self._new_session(conn)
        have = self.shared.get(conn.connector)
        if have is not None and have[0] is conn and not (
                L.pn_session_state(have[1]) & (L.PN_LOCAL_CLOSED | L.PN_REMOTE_CLOSED)):
            return have[1]
        ssn = self._new_session(conn)
        self.shared[conn.connector] = (conn, ssn)
        return ssn

    def _is_shared(self, ls: LinkState) -> bool:
        have = self.shared.get(getattr(ls.conn, "connector", None))
        return have is not None and have[1] == ls.session

    # -- autoLinks ---------------------------------------------------------------------------
    def autolink_created(self, ent: dict) -> None:
        self._attach_autolink(ent)

    def autolink_deleted(self, ent: dict) -> None:
        ls = self.autolinks.pop(ent["name"], None)
        self.quarantined.discard(ent["name"])
        self.refusals.pop(ent["name"], None)
        self.reattach.pop(ent["name"], None)
        if ls is not None:
            ls.autolink = None
            shared = self._is_shared(ls)
            self.engine.close_link(ls)
            if not shared:
                L.pn_session_close(ls.session)

    def _attach_autolink(self, ent: dict) -> None:
        name = ent["name"]
        if name in self.autolinks:
            return
        conn = self._conn_for(ent)
        if conn is None:
            return
        address = ent["address"]
        cfg = self.engine.match_address(address)
        multicast = bool(cfg and cfg["distribution"] == "multicast")
        waypoint = bool(cfg and cfg["waypoint"])
        external = ent.get("externalAddress") or address
        ssn = self._autolink_session(conn, name)
        self._seq += 1
        link_name = f"autoLink-{name}-{self._seq}"
        fwd = self.engine.fwd
        if ent["direction"] == "out":
            link = pn_sender(ssn, link_name)
            pn_terminus_set_address(L.pn_link_target(link), external)
            pn_terminus_set_address(L.pn_link_source(link), address)
            L.pn_link_set_snd_settle_mode(link, L.PN_SND_UNSETTLED)
            phase = ent["phase"] if ent.get("phase") is not None else 0
        else:
            link = pn_receiver(ssn, link_name)
            pn_terminus_set_address(L.pn_link_source(link), external)
            pn_terminus_set_address(L.pn_link_target(link), address)
            phase = ent["phase"] if ent.get("phase") is not None else (1 if waypoint else 0)
        ls = LinkState(link, conn, ent["direction"] == "out", "autolink", address)
        ls.name = link_name
        ls.session = ssn
        ls.autolink = name
        self.engine.links[link] = ls
        conn.links.add(ls)
        self.autolinks[name] = ls
        L.pn_link_open(link)
        node = fwd.node(address, phase, multicast)
        if ls.sender:
            fwd.add_consumer(node, ls)
        else:
            fwd.add_producer(node, ls)
        logger.info("autolink.attaching", extra={"autolink": name, "external": external})

    def autolink_lost(self, ls: LinkState, reason) -> None:
        name = ls.autolink
        if self.autolinks.get(name) is ls:
            del self.autolinks[name]
        shared = self._is_shared(ls)
        if not shared and not L.pn_session_state(ls.session) & L.PN_LOCAL_CLOSED:
            L.pn_session_close(ls.session)  # its own session (the shared one ends with its conn)
        try:
            ent = self.engine.store.find(E.AUTO_LINK, name)
        except E.EntityError:
            return
        if shared and reason is not None and ent.get("operStatus") != "active":
            # Lost with an error before the broker answered its attach: it is the link whose
            # refusal ended the shared session if the error names its queue, or if this has
            # happened to it before. From now on it attaches alone.
            strikes = self.refusals[name] = self.refusals.get(name, 0) + 1
            if is_culprit(reason, ent.get("externalAddress") or ent["address"], strikes):
                self.quarantined.add(name)
                logger.info("autolink.quarantined", extra={"autolink": name})
        ent["operStatus"] = "inactive"
        ent["lastError"] = reason[1] if reason else None
        logger.info("autolink.lost", extra={"autolink": name, "reason": ent["lastError"]})
        if not ls.conn.closed:
            delay = self.reattach.get(name, _REATTACH_START)
            self.reattach[name] = min(delay * 2, _REATTACH_MAX)
            self.engine.loop.call_later(delay, self._reattach, name)

    def _reattach(self, name: str) -> None:
        try:
            ent = self.engine.store.find(E.AUTO_LINK, name)
        except E.EntityError:
            return
        self._attach_autolink(ent)

    def on_link_opened(self, ls: LinkState) -> None:
        if ls.autolink is not None:
            self.refusals.pop(ls.autolink, None)
            self.reattach.pop(ls.autolink, None)
            try:
                self.engine.store.find(E.AUTO_LINK, ls.autolink)["operStatus"] = "active"
            except E.EntityError:
                pass
        peer = ls.peer
        if peer is not None and not peer.closed:
            self.engine.open_link(peer)
            self.pair_flow(peer)

    # -- linkRoutes --------------------------------------------------------------------------
    def match_link_route(self, qualified: str, direction: str) -> dict | None:
        routes = [e for e in self.engine.store.candidates(E.LINK_ROUTE, qualified)
                  if e["direction"] == direction]
        return best_match(routes, qualified, exact_pattern_first=True)

    def route(self, client: LinkState, route: dict, address: str) -> None:
        conn = self._conn_for(route)
        if conn is None:
            self.engine.refuse(client, NOT_FOUND, f"No route to destination {address}")
            return
        external = address
        strip = route.get("delExternalPrefix")
        if strip and external.startswith(strip) and len(external) > len(strip):  # qdrouterd's
            external = external[len(strip):]
        if route.get("addExternalPrefix"):
            external = route["addExternalPrefix"] + external
        ssn = self._new_session(conn)
        cl = client.pn
        link = pn_receiver(ssn, client.name) if client.sender else pn_sender(ssn, client.name)
        L.pn_terminus_copy(L.pn_link_source(link), L.pn_link_remote_source(cl))
        L.pn_terminus_copy(L.pn_link_target(link), L.pn_link_remote_target(cl))
        term = L.pn_link_source(link) if client.sender else L.pn_link_target(link)
        pn_terminus_set_address(term, external)
        L.pn_link_set_snd_settle_mode(link, L.pn_link_remote_snd_settle_mode(cl))
        L.pn_link_set_rcv_settle_mode(link, L.pn_link_remote_rcv_settle_mode(cl))
        ls = LinkState(link, conn, not client.sender, "route", external)
        ls.name = client.name
        ls.session = ssn
        node = Node(f"{client.conn.vhost}/{address}", 0, False)
        ls.node = client.node = node
        ls.peer, client.peer = client, ls
        client.kind = "route"
        self.engine.links[link] = ls
        conn.links.add(ls)
        L.pn_link_open(link)
        logger.info("linkroute.attaching", extra={"address": address, "external": external})

    def pair_flow(self, ls: LinkState) -> None:
        """Mirror credit across a routed link pair."""
        peer = ls.peer
        if peer is None or peer.closed:
            return
        if ls.sender:
            delta = L.pn_link_credit(ls.pn) - L.pn_link_credit(peer.pn)
            if L.pn_link_get_drain(ls.pn) and not L.pn_link_get_drain(peer.pn):
                L.pn_link_set_drain(peer.pn, True)
            if delta > 0:
                L.pn_link_flow(peer.pn, delta)
        elif L.pn_link_credit(ls.pn) == 0 and L.pn_link_get_drain(ls.pn):
            L.pn_link_set_drain(ls.pn, False)
            L.pn_link_drained(peer.pn)

    def peer_gone(self, ls: LinkState, reason) -> None:
        peer = ls.peer
        if peer is None or peer.closed or peer.pn not in self.engine.links:
            return
        peer.peer = None
        if reason is not None:
            self.engine.close_link(peer, reason)
        else:
            self.engine.close_link(peer)
