"""The router core: accepts connections, authorises and resolves link attaches, moves events.

Events from proton's collector are dispatched through a dict on the event type. Connection
opens pick the vhost and policy group, session and link opens enforce qdrouterd-style limits
and source/target lists, and links are attached to address nodes (see forwarder), link routes
or the management node (see broker_links, management).

One module of 600-odd lines: the handlers share the connection, session and link state they
change event by event, and split apart each half would reach into the other's.
"""

import logging
import ssl
import time

from cproton import (
    pn_condition_get_description,
    pn_condition_get_name,
    pn_condition_set_description,
    pn_condition_set_name,
    pn_connection_remote_container,
    pn_connection_remote_hostname,
    pn_link_name,
    pn_terminus_get_address,
    pn_terminus_set_address,
)
from cproton_ffi import ffi
from cproton_ffi import lib as L
from proton._data import dat2obj

from ..admission import Admission, Limits
from . import entities as E
from .addresses import is_dynamic, message_to
from .broker_links import BrokerLinks
from .counters import Counters
from .forwarder import REJECTED, RELEASED, WINDOW, Forwarder, LinkState
from .loop import Conn, Loop
from .management import Management
from .patterns import best_match
from .policy import NOT_FOUND, RESOURCE_LIMIT, UNAUTHORIZED, Policy
from .sasl_relay import CLIENT_TIMEOUT, AuthService, SaslRelay
from .usage_ledger import FLUSH_INTERVAL, UsageLedger

logger = logging.getLogger(__name__)

# Seconds a connection closed by management has to answer the close before its socket goes.
CLOSE_GRACE = 5.0
# A client's connection properties as the router keeps them for management: bounded, so
# that what a client sends at open cannot grow the router.
MAX_PROPERTIES, MAX_PROPERTY_CHARS = 16, 256

_MGMT_CREDIT = 100
MESSAGE_SIZE_EXCEEDED = "amqp:link:message-size-exceeded"
OVERSIZE = "Message size exceeded"  # qdrouterd's description


# The usage ledger's sweep waits this long after the start (a router without its configuration
# journal starts empty, and the agents configure it again within seconds), lest it drop what
# the usage journal brought back.
SWEEP_AFTER = 300.0


class Engine:
    def __init__(self, auth_service: AuthService, admin_user: str = "admin",
                 sweep_after: float = SWEEP_AFTER, limits: Limits | None = None,
                 handshake_timeout: float = CLIENT_TIMEOUT):
        self.loop = Loop()
        self.loop.engine = self
        # who may connect at all, per source, before TLS or SASL costs anything (admission.py)
        self.admission = Admission(limits)
        self.loop.settled = self.admission.settled
        self.handshake_timeout = handshake_timeout
        # `uptimeSeconds` of the router entity, as qdrouterd has it: a watcher tells a restarted
        # (empty) router from the one it configured by it.
        self.started = time.monotonic()
        self.listeners: list[dict] = []
        self.store = E.EntityStore()
        self.policy = Policy(self.store)
        self.counts = Counters()
        self.ledger = UsageLedger(self.match_address)
        self.sweep_after = sweep_after
        self.fwd = Forwarder(self.counts, self.ledger)
        self.links: dict = {}  # pn_link cdata -> LinkState
        self.auth_service = auth_service
        self.admin_user = admin_user
        self.broker = BrokerLinks(self)
        # Connectors' TLS profiles: name -> CA file (`--broker-ca` makes `broker`); their
        # contexts, by (name, whether the peer's host name is checked), made once.
        self.client_profiles: dict[str, str] = {}
        self._client_contexts: dict[tuple[str, bool], ssl.SSLContext] = {}
        self.management = Management(self)
        self._dispatch = {
            L.PN_CONNECTION_REMOTE_OPEN: self._on_conn_open,
            L.PN_CONNECTION_REMOTE_CLOSE: self._on_conn_close,
            L.PN_SESSION_REMOTE_OPEN: self._on_session_open,
            L.PN_SESSION_REMOTE_CLOSE: self._on_session_close,
            L.PN_LINK_REMOTE_OPEN: self._on_link_open,
            L.PN_LINK_REMOTE_CLOSE: self._on_link_close,
            L.PN_LINK_REMOTE_DETACH: self._on_link_close,
            L.PN_LINK_FLOW: self._on_flow,
            L.PN_DELIVERY: self._on_delivery,
        }
        self._start_usage_timer()

    # -- usage counters ----------------------------------------------------------------------
    def _start_usage_timer(self) -> None:
        """Flush the usage ledger to its journal every FLUSH_INTERVAL, on a fixed beat (a late
        tick does not push the next one back), and sweep it once the router is old enough."""
        due = time.monotonic()

        def tick() -> None:
            nonlocal due
            due += FLUSH_INTERVAL
            now = time.monotonic()
            if due < now:
                due = now + FLUSH_INTERVAL  # the loop was stalled: no burst of catching up
            self.loop.call_later(due - now, tick)
            self.ledger.flush(self.counts)
            if now - self.started >= self.sweep_after:
                self.ledger.sweep_step()

        tick()

    # -- listeners ---------------------------------------------------------------------------
    def client_tls(self, profile: str, verify_hostname: bool = True) -> ssl.SSLContext | None:
        """The TLS context of client profile `profile` (a connector's sslProfile); None if the
        router has no such profile."""
        key = (profile, verify_hostname)
        if key not in self._client_contexts:
            ca = self.client_profiles.get(profile)
            if ca is None:
                return None
            context = ssl.create_default_context(ssl.Purpose.SERVER_AUTH, cafile=ca)
            context.minimum_version = ssl.TLSVersion.TLSv1_2
            context.check_hostname = verify_hostname
            self._client_contexts[key] = context
        return self._client_contexts[key]

    def listen(self, host: str, port: int, kind: str, ssl_context=None):
        """Accept connections of `kind` ("client" or "management"), SASL relayed to the auth
        service; `ssl_context`: TLS first."""
        admit = self._admits_admin if kind == "management" else self._admits_client
        # qdrouterd's listener entity, read-only here (what `qdmanage query --type=listener`
        # shows): listeners come from the command line, not from management.
        self.listeners.append({"host": host, "port": str(port),
                               "role": "normal", "authenticatePeer": True,
                               "saslMechanisms": "PLAIN", "requireSsl": ssl_context is not None,
                               "sslProfile": "maas-tls" if ssl_context is not None else None,
                               "maas-kind": kind})

        # Clients' listeners admit per source; the management listener serves the agents
        # (every one of them from the same few hosts), behind its own network policy.
        admission = self.admission if kind == "client" else None

        def on_accept(conn: Conn) -> None:
            conn.kind = kind
            if ssl_context is not None:
                conn.start_tls(ssl_context)
            conn.relay = SaslRelay(self.loop, conn, self.auth_service, admit,
                                   admission=admission, timeout=self.handshake_timeout)

        return self.loop.listen(host, port, on_accept,
                                admit=admission.accept if admission else None)

    def _admits_admin(self, identity: str) -> bool:
        return identity == self.admin_user

    def _admits_client(self, identity: str) -> bool:
        """Messaging users only: the auth service names them `user@vhost`; the router admin
        (any other identity) belongs to the management listener."""
        user, _, vhost = identity.rpartition("@")
        return identity != self.admin_user and bool(user) and bool(vhost)

    # -- event dispatch ----------------------------------------------------------------------
    def process_events(self) -> None:
        collector = self.loop.collector
        peek = L.pn_collector_peek
        pop = L.pn_collector_pop
        etype = L.pn_event_type
        dispatch = self._dispatch
        null = ffi.NULL
        transport, mark, connection_of = L.PN_TRANSPORT, self.loop.mark, L.pn_event_connection
        while True:
            event = peek(collector)
            if event == null:
                return
            kind = etype(event)
            if kind == transport:  # proton has output for this connection: flush() writes it
                mark(connection_of(event))
            handler = dispatch.get(kind)
            if handler is not None:
                try:
                    handler(event)
                except Exception:
                    logger.exception("router.event_failed", extra={"event": etype(event)})
            pop(collector)

    def _conn_of(self, pn_conn) -> Conn | None:
        return self.loop.conns.get(pn_conn)

    # -- connections -------------------------------------------------------------------------
    def _on_conn_open(self, event) -> None:
        conn = self._conn_of(L.pn_event_connection(event))
        if conn is None:
            return
        conn.container = pn_connection_remote_container(conn.pn)
        if conn.kind == "client":
            conn.properties = _bounded(dat2obj(L.pn_connection_remote_properties(conn.pn)))
        if conn.kind == "connector":
            conn.opened = True
            self.broker.on_connected(conn)
            return
        if conn.kind == "client":
            refusal = self._admit(conn)
            if refusal is not None:
                L.pn_connection_open(conn.pn)
                self._set_condition(L.pn_connection_condition(conn.pn), *refusal)
                L.pn_connection_close(conn.pn)
                logger.info("router.connection_refused",
                            extra={"user": conn.login, "reason": refusal[1]})
                return
        conn.opened = True
        L.pn_connection_open(conn.pn)

    def _admit(self, conn: Conn):
        hostname = pn_connection_remote_hostname(conn.pn)
        login = conn.login or ""
        vhost = self.policy.choose_vhost(login, hostname)
        if vhost is None:
            return UNAUTHORIZED, f"User {login} may not connect to vhost {hostname}"
        grant = self.policy.grant(vhost, login)
        if grant is None:
            return UNAUTHORIZED, f"No policy for user {login} in vhost {vhost}"
        peers = [c for c in self.loop.conns.values() if c.opened and c.vhost == vhost]
        limits = self.policy.connection_limits(vhost)
        host = conn.host.rsplit(":", 1)[0]
        if len(peers) >= limits["maxConnections"]:
            return RESOURCE_LIMIT, f"Connection limit exceeded for vhost {vhost}"
        if sum(1 for c in peers if c.login == conn.login) >= limits["maxConnectionsPerUser"]:
            return RESOURCE_LIMIT, f"Per-user connection limit exceeded for vhost {vhost}"
        if sum(1 for c in peers
               if c.host.rsplit(":", 1)[0] == host) >= limits["maxConnectionsPerHost"]:
            return RESOURCE_LIMIT, f"Per-host connection limit exceeded for vhost {vhost}"
        conn.vhost = vhost
        conn.grant = grant
        return None

    def _on_conn_close(self, event) -> None:
        pn = L.pn_event_connection(event)
        if not L.pn_connection_state(pn) & L.PN_LOCAL_CLOSED:
            L.pn_connection_close(pn)

    def force_close(self, conn: Conn, description: str) -> None:
        """Close a client connection as qdrouterd does for management's `adminStatus: deleted`:
        the peer gets amqp:connection:forced with `description`. A peer that never answers the
        close loses its socket after CLOSE_GRACE seconds."""
        self._set_condition(L.pn_connection_condition(conn.pn), "amqp:connection:forced",
                            description)
        L.pn_connection_close(conn.pn)
        conn.forced = True  # operStatus closing: no longer one of its space's connections
        self.loop.mark(conn.pn)
        self.loop.call_later(CLOSE_GRACE, self.loop.close, conn)
        logger.info("router.connection_closed_by_management",
                    extra={"host": conn.host, "login": conn.login, "vhost": conn.vhost})

    def on_conn_closed(self, conn: Conn) -> None:
        for ls in list(conn.links):
            self.link_gone(ls, ("amqp:connection:forced", "Connection closed"))
        if conn.kind == "connector":
            self.broker.on_disconnected(conn)

    # -- sessions ----------------------------------------------------------------------------
    def _on_session_open(self, event) -> None:
        ssn = L.pn_event_session(event)
        if not L.pn_session_state(ssn) & L.PN_LOCAL_UNINIT:
            return  # one we opened (towards a broker)
        conn = self._conn_of(L.pn_session_connection(ssn))
        if conn is None:
            return
        if conn.grant is not None and len(conn.sessions) >= conn.grant.max_sessions:
            L.pn_session_open(ssn)
            self._set_condition(L.pn_session_condition(ssn), RESOURCE_LIMIT,
                                "Session limit exceeded")
            L.pn_session_close(ssn)
            return
        conn.sessions.add(ssn)
        L.pn_session_open(ssn)

    def _on_session_close(self, event) -> None:
        ssn = L.pn_event_session(event)
        conn = self._conn_of(L.pn_session_connection(ssn))
        cond = L.pn_session_remote_condition(ssn)
        reason = None
        if L.pn_condition_is_set(cond):
            reason = (pn_condition_get_name(cond), pn_condition_get_description(cond) or "")
        if conn is not None:
            for ls in [x for x in conn.links if x.session == ssn]:
                self.link_gone(ls, reason)
            conn.sessions.discard(ssn)
        if not L.pn_session_state(ssn) & L.PN_LOCAL_CLOSED:
            L.pn_session_close(ssn)

    # -- links -------------------------------------------------------------------------------
    def _on_link_open(self, event) -> None:
        link = L.pn_event_link(event)
        ls = self.links.get(link)
        if ls is not None:
            self.broker.on_link_opened(ls)  # a link we attached answered
            return
        ssn = L.pn_link_session(link)
        conn = self._conn_of(L.pn_session_connection(ssn))
        if conn is None:
            return
        sender = bool(L.pn_link_is_sender(link))
        term = L.pn_link_remote_source(link) if sender else L.pn_link_remote_target(link)
        ls = LinkState(link, conn, sender, "client", pn_terminus_get_address(term))
        ls.name = pn_link_name(link)
        ls.session = ssn
        self.links[link] = ls
        conn.links.add(ls)
        dynamic = sender and bool(L.pn_terminus_is_dynamic(term))
        try:
            self._attach(conn, ls, dynamic)
        except Exception:
            logger.exception("router.attach_failed", extra={"address": ls.address})
            self.refuse(ls, "amqp:internal-error", "Attach failed")

    def _attach(self, conn: Conn, ls: LinkState, dynamic: bool) -> None:
        address = ls.address
        if conn.kind == "management":
            if not ls.sender and address == "$management":
                ls.kind = "mgmt"
                self.open_link(ls)
                L.pn_link_flow(ls.pn, _MGMT_CREDIT)
            elif dynamic:
                self._attach_dynamic(conn, ls)
            else:
                self.refuse(ls, NOT_FOUND, "Only $management on the management listener")
            return
        if conn.kind != "client" or conn.grant is None:
            self.refuse(ls, UNAUTHORIZED, "Links are not accepted on this connection")
            return
        # The policy as it is now, not as it was at open: a revoked right or a quota throttle
        # applies to the next link of a connection that is already open.
        grant = self.policy.grant(conn.vhost, conn.login or "")
        if grant is None:
            self.refuse(ls, UNAUTHORIZED, f"User {conn.login} has no access to {conn.vhost}")
            return
        if ls.sender and conn.receivers >= grant.max_receivers:
            self.refuse(ls, RESOURCE_LIMIT, "Receiver limit exceeded")
            return
        if not ls.sender and conn.senders >= grant.max_senders:
            self.refuse(ls, RESOURCE_LIMIT, "Sender limit exceeded")
            return
        if dynamic:
            if not grant.allow_dynamic_source:
                self.refuse(ls, UNAUTHORIZED, "Dynamic sources are not allowed")
            else:
                self._attach_dynamic(conn, ls)
            return
        if not address and not ls.sender:
            if not grant.allow_anonymous_sender:
                self.refuse(ls, UNAUTHORIZED, f"User {conn.login} may not attach an anonymous "
                                              "sender (no target)")
                return
            # Each message names its address (`to`), authorised and routed per message.
            ls.kind = "anonymous"
            self._count(ls, +1)
            self.open_link(ls)
            L.pn_link_flow(ls.pn, WINDOW)
            return
        if not ls.sender and is_dynamic(address):
            self._attach_reply_sender(conn, ls, grant)
            return
        allowed = grant.may_receive(address) if ls.sender else grant.may_send(address)
        if not allowed:
            verb = "receive from" if ls.sender else "send to"
            self.refuse(ls, UNAUTHORIZED, f"User {conn.login} may not {verb} {address}")
            return
        qualified = f"{conn.vhost}/{address}"
        route = self.broker.match_link_route(qualified, "out" if ls.sender else "in")
        if route is not None:
            self._count(ls, +1)
            # qdrouterd derives the external address from the vhost-qualified one
            self.broker.route(ls, route, qualified)
            return
        cfg = self.match_address(qualified)
        if cfg is None:
            self.refuse(ls, NOT_FOUND,
                        f"Address {address} is not configured in vhost {conn.vhost}")
            return
        phase = (1 if ls.sender else 0) if cfg["waypoint"] else 0
        node = self.fwd.node(qualified, phase, cfg["distribution"] == "multicast")
        self._count(ls, +1)
        self.open_link(ls)
        if ls.sender:
            self.fwd.add_consumer(node, ls)
        else:
            self.fwd.add_producer(node, ls)

    def _reply_node(self, conn: Conn, grant, address: str):
        """The node of a dynamic address of this connection's space that `conn` may send to:
        (node, None), or (None, (condition, description))."""
        if not grant.may_send_somewhere:
            return None, (UNAUTHORIZED, f"User {conn.login} may not send (no send rights)")
        node = self.fwd.nodes.get((f"{conn.vhost}/{address}", 0))
        if node is None or not node.consumers:
            # Dynamic addresses are per space: another space's is unknown here by design.
            return None, (NOT_FOUND, f"No dynamic address {address} in vhost {conn.vhost}")
        return node, None

    def _attach_reply_sender(self, conn: Conn, ls: LinkState, grant) -> None:
        """A named sender to a requester's dynamic address (a reply-to), as in qdrouterd."""
        node, refusal = self._reply_node(conn, grant, ls.address)
        if refusal is not None:
            self.refuse(ls, *refusal)
            return
        self._count(ls, +1)
        self.open_link(ls)
        self.fwd.add_producer(node, ls)

    def _forward_anonymous(self, ls: LinkState, d, n: int) -> None:
        """A message on an anonymous link: routed by its `to`, which the user must be allowed
        to send to; otherwise rejected with the reason (the link stays up)."""
        conn = ls.conn
        grant = self.policy.grant(conn.vhost, conn.login or "")
        address = message_to(ffi.buffer(self.fwd._buf, n)[:])
        node, refusal = None, None
        if grant is None:
            refusal = (UNAUTHORIZED, f"User {conn.login} has no access to {conn.vhost}")
        elif not address:
            refusal = (NOT_FOUND, "A message on an anonymous link needs a `to` address")
        elif is_dynamic(address):
            node, refusal = self._reply_node(conn, grant, address)
        elif not grant.may_send(address):
            refusal = (UNAUTHORIZED, f"User {conn.login} may not send to {address}")
        else:
            qualified = f"{conn.vhost}/{address}"
            cfg = self.match_address(qualified)
            if cfg is None:
                refusal = (NOT_FOUND, f"Address {address} is not configured in vhost "
                                      f"{conn.vhost} (or is link-routed: attach a sender to it)")
            else:
                node = self.fwd.node(qualified, 0, cfg["distribution"] == "multicast")
        if refusal is not None:
            logger.info("router.message_refused", extra={"address": address,
                                                         "condition": refusal[0],
                                                         "reason": refusal[1]})
            if not L.pn_delivery_settled(d):
                self._set_condition(L.pn_disposition_condition(L.pn_delivery_local(d)), *refusal)
                L.pn_delivery_update(d, REJECTED)
            L.pn_delivery_settle(d)
        elif not node.multicast and not node.consumers:
            # Nobody to deliver to: released, so the sender may try again later (an attached
            # sender would have had no credit; here the credit is the link's, not the node's).
            if not L.pn_delivery_settled(d):
                L.pn_delivery_update(d, RELEASED)
            L.pn_delivery_settle(d)
            self.fwd.drop_node_if_idle(node)
        else:
            ls.node = node
            try:
                self.fwd.forward(ls, d, n)
            finally:
                ls.node = None
                self.fwd.drop_node_if_idle(node)
        # Credit is the link's own: the destinations' backlogs hold what waits (as qdrouterd,
        # an anonymous sender is not held back by one slow destination).
        credit = L.pn_link_credit(ls.pn)
        if credit < WINDOW // 2:
            L.pn_link_flow(ls.pn, WINDOW - credit)

    def _attach_dynamic(self, conn: Conn, ls: LinkState) -> None:
        address = f"$temp.{ls.identity}"
        key = f"{conn.vhost}/{address}" if conn.vhost else address
        node = self.fwd.node(key, 0, False, metered=False)
        ls.kind = "dynamic"
        ls.address = address
        self._count(ls, +1)
        self.open_link(ls, dynamic_address=address)
        self.fwd.add_consumer(node, ls)

    def _count(self, ls: LinkState, delta: int) -> None:
        if ls.conn.kind != "client":
            return
        if ls.sender:
            ls.conn.receivers += delta
        else:
            ls.conn.senders += delta

    def match_address(self, qualified: str) -> dict | None:
        return best_match(self.store.candidates(E.ADDRESS, qualified), qualified)

    def open_link(self, ls: LinkState, dynamic_address: str | None = None) -> None:
        link = ls.pn
        L.pn_terminus_copy(L.pn_link_source(link), L.pn_link_remote_source(link))
        L.pn_terminus_copy(L.pn_link_target(link), L.pn_link_remote_target(link))
        if dynamic_address is not None:
            pn_terminus_set_address(L.pn_link_source(link), dynamic_address)
        grant = ls.conn.grant
        if not ls.sender and grant is not None and grant.max_message_size:
            # the attach says how large a message may be (AMQP 1.0, 2.7.3: max-message-size)
            L.pn_link_set_max_message_size(link, grant.max_message_size)
        L.pn_link_open(link)

    def refuse(self, ls: LinkState, condition: str, description: str) -> None:
        """Attach with a null terminus then detach with the error, as qdrouterd does."""
        logger.info("router.link_refused", extra={"address": ls.address,
                                                  "condition": condition,
                                                  "reason": description})
        ls.kind = "refused"
        self._set_condition(L.pn_link_condition(ls.pn), condition, description)
        L.pn_link_open(ls.pn)
        L.pn_link_close(ls.pn)

    @staticmethod
    def _set_condition(cond, name: str, description: str) -> None:
        pn_condition_set_name(cond, name)
        pn_condition_set_description(cond, description)

    def _on_link_close(self, event) -> None:
        link = L.pn_event_link(event)
        ls = self.links.get(link)
        if ls is None:
            if not L.pn_link_state(link) & L.PN_LOCAL_CLOSED:
                L.pn_link_close(link)
            return
        cond = L.pn_link_remote_condition(link)
        reason = None
        if L.pn_condition_is_set(cond):
            reason = (pn_condition_get_name(cond), pn_condition_get_description(cond) or "")
        self.link_gone(ls, reason)

    def link_gone(self, ls: LinkState, reason=None) -> None:
        """Forget a link (closed by either side or with its connection) and its fallout."""
        if self.links.pop(ls.pn, None) is None:
            return
        ls.conn.links.discard(ls)
        if ls.kind not in ("refused", "mgmt"):
            self._count(ls, -1)
        self.fwd.remove_link(ls)
        link = ls.pn
        if not L.pn_link_state(link) & L.PN_LOCAL_CLOSED:
            if reason is not None and ls.peer is None:
                self._set_condition(L.pn_link_condition(link), *reason)
            L.pn_link_close(link)
        if ls.peer is not None:
            self.broker.peer_gone(ls, reason)
        if ls.autolink is not None:
            self.broker.autolink_lost(ls, reason)
        if ls.kind == "route" and ls.session is not None and ls.conn.kind == "connector":
            L.pn_session_close(ls.session)
        L.pn_link_free(link)

    def close_link(self, ls: LinkState, reason=None) -> None:
        if reason is not None:
            self._set_condition(L.pn_link_condition(ls.pn), *reason)
        self.link_gone(ls, None)

    # -- flow and deliveries -----------------------------------------------------------------
    def _on_flow(self, event) -> None:
        ls = self.links.get(L.pn_event_link(event))
        if ls is None:
            return
        if ls.peer is not None:
            self.broker.pair_flow(ls)
        elif ls.sender:
            self.fwd.on_consumer_flow(ls)

    def _oversize(self, ls: LinkState, d) -> None:
        """A message over its sender's maxMessageSize, as qdrouterd answers one: rejected with
        amqp:link:message-size-exceeded, its link closed, and its connection closed (forced),
        so that nothing more of it is read or held."""
        cond = L.pn_disposition_condition(L.pn_delivery_local(d))
        self._set_condition(cond, MESSAGE_SIZE_EXCEEDED, OVERSIZE)
        L.pn_delivery_update(d, L.PN_REJECTED)
        L.pn_delivery_settle(d)
        self.counts.rejected += 1
        self.link_gone(ls, (MESSAGE_SIZE_EXCEEDED, OVERSIZE))
        conn = ls.conn
        self._set_condition(L.pn_connection_condition(conn.pn), "amqp:connection:forced",
                            OVERSIZE)
        L.pn_connection_close(conn.pn)
        self.loop.mark(conn.pn)
        logger.info("router.message_too_large", extra={"host": conn.host, "login": conn.login,
                                                       "address": ls.address})
        self.loop.after_large_message()

    def _on_delivery(self, event) -> None:
        d = L.pn_event_delivery(event)
        ls = self.links.get(L.pn_delivery_link(d))
        if ls is None:
            return
        if ls.sender:
            self.fwd.on_outgoing_update(ls, d)
            return
        if not L.pn_delivery_readable(d):
            return
        grant = ls.conn.grant
        if grant is not None and grant.max_message_size and ls.conn.kind == "client" and \
                L.pn_delivery_pending(d) > grant.max_message_size:
            self._oversize(ls, d)  # at its first frame past the limit, not once it is whole
            return
        if L.pn_delivery_partial(d):
            return
        if L.pn_delivery_aborted(d):
            L.pn_link_advance(ls.pn)
            L.pn_delivery_settle(d)
            return
        n = self.fwd.receive(ls, d)
        if ls.peer is not None:
            self.fwd.forward_pair(ls, d, n)
        elif ls.kind == "mgmt":
            self.management.on_request(ls, d, ffi.buffer(self.fwd._buf, n)[:])
        elif ls.kind == "anonymous":
            self._forward_anonymous(ls, d, n)
        else:
            self.fwd.forward(ls, d, n)
        if self.fwd.release_large():
            self.loop.after_large_message()


def _bounded(properties) -> dict:
    """The first MAX_PROPERTIES of a client's connection properties, keys and values as
    strings or numbers of at most MAX_PROPERTY_CHARS characters."""
    if not isinstance(properties, dict):
        return {}
    kept = {}
    for key, value in list(properties.items())[:MAX_PROPERTIES]:
        if not isinstance(value, (bool, int, float)):
            value = str(value)[:MAX_PROPERTY_CHARS]
        kept[str(key)[:MAX_PROPERTY_CHARS]] = value
    return kept
