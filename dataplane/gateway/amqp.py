"""One AMQP 1.0 client connection to the space's router, driven from asyncio: proton's engine
(Connection, Transport, Collector) with bytes moved by an asyncio Protocol, no reactor thread.

Output is flushed once per loop iteration (`call_soon`), so a burst of publishes read from one
MQTT socket read goes out in one write. Messages the gateway sends are encoded by hand (a data
section, and a properties section when there is a subject): it is the hot path, and proton's
Message costs more than the rest of a publish.
"""

import asyncio
import itertools
import logging
import struct

import proton
from proton import Collector, Connection, Delivery, Endpoint, Event, Message, Transport, symbol

logger = logging.getLogger("dataplane.gateway.amqp")

_DURABLE_HEADER = b"\x00\x53\x70\xc0\x02\x01\x41"  # header: durable = true


def encode(payload: bytes, subject: str | None = None, durable: bool = False) -> bytes:
    """An AMQP message: [header durable] [properties with subject] data(payload)."""
    out = _DURABLE_HEADER if durable else b""
    if subject:
        raw = subject.encode("utf-8")
        # properties list32: message-id, user-id, to (null), subject (str32)
        fields = b"\x40\x40\x40\xb1" + struct.pack("!I", len(raw)) + raw
        out += b"\x00\x53\x73\xd0" + struct.pack("!II", len(fields) + 4, 4) + fields
    return out + b"\x00\x53\x75\xb0" + struct.pack("!I", len(payload)) + payload


class RouterUnavailable(OSError):
    """The router refused the login as a transient failure (sasl sys-temp): try again."""


class LinkRefused(Exception):
    """The router refused or closed a link (condition name and description)."""


class AmqpConnection(asyncio.Protocol):
    """A client connection. `handler` gets on_message(receiver, delivery, message),
    on_outcome(delivery, state), on_link_closed(link, condition) and on_closed(condition)."""

    _tags = itertools.count()

    def __init__(self, handler, user: str, password: str, hostname: str | None,
                 container_id: str, properties: dict | None = None):
        self.handler = handler
        self.loop = asyncio.get_running_loop()
        self.conn = Connection()
        self.conn.container = container_id
        if properties:  # what the router's connection list shows of the client behind it
            self.conn.properties = {symbol(k): v for k, v in properties.items()}
        if hostname:
            self.conn.hostname = hostname
        self.conn.user, self.conn.password = user, password
        self.transport = Transport()
        sasl = self.transport.sasl()
        sasl.allowed_mechs("PLAIN")
        sasl.allow_insecure_mechs = True  # PLAIN: under TLS where the gateway has it (process.py)
        self.collector = Collector()
        self.conn.collect(self.collector)
        self.transport.bind(self.conn)
        self.sock: asyncio.Transport | None = None
        self.session = None
        self.opened: asyncio.Future = self.loop.create_future()
        self.closed = False
        self._flush_pending = False
        self._link_waiters: dict = {}  # link -> future of its remote open

    # -- asyncio.Protocol ----------------------------------------------------------------------
    def connection_made(self, transport) -> None:
        self.sock = transport
        self.conn.open()
        self.session = self.conn.session()
        self.session.open()
        self.flush()

    def data_received(self, data: bytes) -> None:
        view, n = memoryview(data), len(data)
        pos = 0
        while pos < n:
            capacity = self.transport.capacity()
            if capacity <= 0:
                self._finish(None)
                return
            chunk = view[pos:pos + capacity]
            self.transport.push(bytes(chunk))
            pos += len(chunk)
            self._dispatch()
        self.flush()

    def connection_lost(self, exc) -> None:
        if not self.closed:
            self.transport.close_tail()
            self.transport.close_head()
            self._dispatch()
            self._finish(self.transport.condition or "connection lost")

    # -- output --------------------------------------------------------------------------------
    def flush(self) -> None:
        """Write out what proton has, at the end of this loop iteration."""
        if not self._flush_pending and not self.closed:
            self._flush_pending = True
            self.loop.call_soon(self._write)

    def _write(self) -> None:
        self._flush_pending = False
        if self.closed or self.sock is None:
            return
        self._dispatch()
        while True:
            pending = self.transport.pending()
            if pending < 0:
                self.sock.close()
                self._finish(self.transport.condition)
                return
            if pending == 0:
                return
            data = self.transport.peek(pending)
            self.sock.write(data)
            self.transport.pop(len(data))

    # -- events --------------------------------------------------------------------------------
    def _dispatch(self) -> None:
        collector = self.collector
        while True:
            ev = collector.peek()
            if ev is None:
                return
            try:
                self._on_event(ev)
            except Exception:
                logger.exception("mqtt_gateway.amqp_event_failed")
            collector.pop()

    def _on_event(self, ev) -> None:
        t = ev.type
        if t == Event.DELIVERY:
            dlv = ev.delivery
            link = dlv.link
            if link.is_receiver:
                if dlv.readable and not dlv.partial:
                    msg = Message()
                    msg.decode(link.recv(dlv.pending))
                    link.advance()
                    self.handler.on_message(link, dlv, msg)
            elif dlv.updated:
                self.handler.on_outcome(dlv, dlv.remote_state)
                dlv.settle()
        elif t == Event.LINK_FLOW:
            self.handler.on_flow(ev.link)
        elif t == Event.LINK_REMOTE_OPEN:
            logger.debug("mqtt.link_opened", extra={"source": ev.link.remote_source.address,
                                                    "target": ev.link.remote_target.address,
                                                    "credit": ev.link.credit})
            link = ev.link
            terminus = link.remote_source if link.is_receiver else link.remote_target
            if terminus.address is None:
                return  # a refusal: an attach without terminus, the detach with the error next
            waiter = self._link_waiters.pop(link, None)
            if waiter is not None and not waiter.done():
                waiter.set_result(link)
        elif t == Event.LINK_REMOTE_CLOSE:
            link = ev.link
            cond = link.remote_condition
            waiter = self._link_waiters.pop(link, None)
            if waiter is not None and not waiter.done():
                waiter.set_exception(LinkRefused(_describe(cond)))
            link.close()
            self.handler.on_link_closed(link, _describe(cond))
        elif t == Event.CONNECTION_REMOTE_OPEN:
            # A router refuses a connection with an open and a close at once (AMQP 1.0, 2.4.1):
            # with the close already read, this open is that refusal, which the close reports.
            if not self.opened.done() and not self.conn.state & Endpoint.REMOTE_CLOSED:
                self.opened.set_result(True)
        elif t == Event.CONNECTION_REMOTE_CLOSE:
            self.conn.close()
            self._finish(_describe(self.conn.remote_condition) or "closed by the router")
        elif t == Event.TRANSPORT_CLOSED:
            self._finish(_describe(self.transport.condition) or "transport closed")

    def _finish(self, condition) -> None:
        if not self.opened.done():
            outcome = self.transport.sasl().outcome
            if outcome == proton.SASL.TEMP:  # e.g. the space's router configuration is back soon
                self.opened.set_exception(RouterUnavailable("temporarily unavailable"))
            else:
                self.opened.set_exception(LinkRefused(
                    "authentication failed" if outcome not in (None, proton.SASL.OK)
                    else str(condition)))
        for waiter in self._link_waiters.values():
            if not waiter.done():
                waiter.set_exception(LinkRefused(str(condition)))
        self._link_waiters.clear()
        if self.closed:
            return
        self.closed = True
        if self.sock is not None:
            self.sock.close()
        self.handler.on_closed(condition)

    # -- API -----------------------------------------------------------------------------------
    def sender(self, address: str):
        link = self.session.sender(f"s{next(self._tags)}")
        link.target.address = address
        link.source.address = address
        link.open()
        self._link_waiters[link] = self._future()
        self.flush()
        return link

    def receiver(self, address: str, credit: int, durable_name: str | None = None):
        link = self.session.receiver(durable_name or f"r{next(self._tags)}")
        link.source.address = address
        link.target.address = address
        link.open()
        link.flow(credit)
        self._link_waiters[link] = self._future()
        self.flush()
        return link

    def _future(self) -> asyncio.Future:
        future = self.loop.create_future()
        # a refusal nobody awaits (a sender's) is handled by on_link_closed, not logged here
        future.add_done_callback(lambda f: f.cancelled() or f.exception())
        return future

    def link_open(self, link) -> asyncio.Future:
        """A future of the router's answer to an attach: the link, or LinkRefused."""
        waiter = self._link_waiters.get(link)
        if waiter is None:
            waiter = self._future()
            if link.state & proton.Endpoint.REMOTE_ACTIVE:
                waiter.set_result(link)
            else:
                waiter.set_exception(LinkRefused("link closed"))
        return waiter

    def send(self, link, encoded: bytes, settled: bool) -> Delivery:
        dlv = link.delivery(str(next(self._tags)).encode())
        link.send(encoded)
        link.advance()
        if settled:
            dlv.settle()
        self.flush()
        return dlv

    def close(self) -> None:
        if not self.closed:
            self.conn.close()
            self.flush()


def _describe(cond) -> str | None:
    if cond is None:
        return None
    return f"{cond.name}: {cond.description}" if cond.description else str(cond.name)
