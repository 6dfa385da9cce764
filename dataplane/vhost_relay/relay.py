"""The relay's sockets (asyncio protocols): each accepted connection gets one to the broker;
client bytes go through a preamble (AMQP: `Preamble` until the open; MQTT: `MqttConnect` for
the CONNECT), then both ways unchanged, except for a brokered space's AMQP clients
(`brokered-amqp`), whose attaches are rewritten both ways (addresses.py)."""
import asyncio
import logging
import ssl

from ..admission import Admission
from .addresses import Frames
from .kinds import Kinds
from .mqtt import MqttConnect
from .preamble import Preamble, ProtocolError

HANDSHAKE_SLACK = 10.0  # seconds, beyond the broker connect timeout, for its SASL and open

PREAMBLES = {"amqp": Preamble, "mqtt": MqttConnect,
             "brokered-amqp": lambda: Preamble(split=True)}

logger = logging.getLogger("dataplane.vhost_relay")


class _Side(asyncio.Protocol):
    """One socket of a relayed pair (`pair.other(self)` is the other)."""

    def __init__(self, pair: "Pair"):
        self.pair = pair
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport):
        self.transport = transport
        transport.set_write_buffer_limits(high=1 << 20)

    # The peer's send buffer is full: stop reading here until it drains.
    def pause_writing(self):
        self.pair.other(self).transport.pause_reading()

    def resume_writing(self):
        other = self.pair.other(self).transport
        if other is not None and not other.is_closing():
            other.resume_reading()

    def eof_received(self):
        return False  # AMQP and MQTT peers close both ways: our transport closes, then the pair

    def connection_lost(self, exc):
        self.pair.close()


class ClientSide(_Side):
    """The client's connection to us (a router's to the AMQP relay, a device's to MQTT)."""

    def __init__(self, relay: "Relay"):
        super().__init__(Pair(relay, self))

    def connection_made(self, transport):
        super().connection_made(transport)
        admission = self.pair.relay.admission
        host = (transport.get_extra_info("peername") or ("?",))[0]
        if admission is not None:
            if not admission.accept(host):
                transport.abort()  # before it costs the broker a connection
                return
            self.pair.admitted = host
        transport.pause_reading()  # until the broker is connected
        self.pair.connect()

    def data_received(self, data):
        self.pair.from_client(data)


class BrokerSide(_Side):
    """Our connection to the broker, made for one `ClientSide`."""

    def connection_made(self, transport):
        super().connection_made(transport)
        if self.pair.closed:  # the client left while we were connecting
            transport.close()

    def data_received(self, data):
        self.pair.from_broker(data)


class Pair:
    """A client connection and its broker connection."""

    def __init__(self, relay: "Relay", client: ClientSide):
        self.relay, self.client = relay, client
        self.broker = BrokerSide(self)
        self.preamble = PREAMBLES[relay.protocol]()
        self.frames: tuple[Frames, Frames] | None = None  # (client's, broker's): brokered-amqp
        if relay.protocol == "brokered-amqp":
            links: dict = {}
            self.frames = (Frames(True, links, self._kind), Frames(False, links))
        self.waiting = False  # for the kinds of a vhost's names: the client's bytes wait too
        self.held = b""
        self.broker_opened: asyncio.Event | None = None  # set once the broker's open passed
        self.peer = ""
        self.connecting: asyncio.Task | None = None
        self.deadline: asyncio.TimerHandle | None = None
        self.admitted: str | None = None  # the source counted as pending by the admission
        self.closed = self.logged = False

    def other(self, side: _Side) -> _Side:
        return self.broker if side is self.client else self.client

    def connect(self) -> None:
        peer = self.client.transport.get_extra_info("peername") or ("?", 0)
        self.peer = f"{peer[0]}:{peer[1]}"
        self.relay.pairs.add(self)
        loop = asyncio.get_running_loop()
        self.connecting = loop.create_task(self._connect())
        if self.relay.handshake_timeout:
            self.deadline = loop.call_later(self.relay.handshake_timeout, self._too_slow)

    def _too_slow(self) -> None:
        if not self.preamble.done:
            self.logged = True
            logger.warning("vhost_relay.handshake_timeout", extra={"peer": self.peer})
            self.close(abort=True)

    def _settle(self) -> None:
        """The client is past its preamble or gone: it no longer counts as pending."""
        if self.deadline is not None:
            self.deadline.cancel()
        if self.admitted is not None:
            self.relay.admission.settled(self.admitted)
            self.admitted = None

    async def _connect(self) -> None:
        loop = asyncio.get_running_loop()
        brokers = self.relay.brokers()
        for i, (host, port) in enumerate(brokers):
            try:
                tls = self.relay.broker_tls
                await asyncio.wait_for(loop.create_connection(
                    lambda: self.broker, host, port, ssl=tls,
                    server_hostname=host if tls is not None else None),
                    self.relay.connect_timeout)
                self.relay.answered(i)
                break
            except (TimeoutError, OSError) as exc:  # ssl.SSLError is an OSError
                if i < len(brokers) - 1:  # a node of a cluster gone: the next one serves
                    logger.info("vhost_relay.broker_failover", extra={
                        "peer": self.peer, "broker": f"{host}:{port}",
                        "error": str(exc) or type(exc).__name__})
                    continue
                self.logged = True
                logger.warning("vhost_relay.broker_unreachable",
                               extra={"peer": self.peer, "error": str(exc) or type(exc).__name__})
                self.close()
                return
        if not self.closed:
            self.client.transport.resume_reading()
        elif self.broker.transport is not None:
            self.broker.transport.close()

    def from_client(self, data: bytes) -> None:
        if self.preamble.done and self.frames is None:
            self.broker.transport.write(data)
            return
        try:
            if not self.preamble.done:
                out = self.preamble.feed(data)
                if out:
                    self.broker.transport.write(out)
                if not self.preamble.done:
                    return
                self._settle()
                self._log("vhost_relay.connection")
                if self.frames is None:  # the preamble passed what followed it
                    return
                data = self.preamble.rest
            self._frames_from_client(data)
        except ProtocolError as exc:
            self._refuse(exc)

    def _frames_from_client(self, data: bytes) -> None:
        if self.waiting:  # reading resumed (the broker drained) while a kind is being read
            self.held += data
            return
        frames = self.frames[0]
        out = frames.feed(data)
        if out:
            self.broker.transport.write(out)
        if frames.needs is not None:
            self.waiting = True
            self.client.transport.pause_reading()
            asyncio.get_running_loop().create_task(self._read_kinds())

    async def _read_kinds(self) -> None:
        # Only for a login the broker took (its open came back): a client cannot make the
        # relay list vhosts it names but has no password for.
        if not self.frames[1].opened:
            self.broker_opened = asyncio.Event()
            try:
                await asyncio.wait_for(self.broker_opened.wait(),
                                       self.relay.connect_timeout + HANDSHAKE_SLACK)
            except TimeoutError:
                self.close(abort=True)
                return
        if self.closed:
            return
        await self.relay.kinds.read(self.preamble.vhost)
        if self.closed:
            return
        self.waiting = False
        held, self.held = self.held, b""
        try:
            self._frames_from_client(held)
        except ProtocolError as exc:
            self._refuse(exc)
            return
        if not self.waiting:
            self.client.transport.resume_reading()

    def _kind(self, name: str) -> str | None:
        return self.relay.kinds.kind(self.preamble.vhost, name)

    def from_broker(self, data: bytes) -> None:
        if self.frames is not None:
            try:
                data = self.frames[1].feed(data)
            except ProtocolError as exc:
                self._refuse(exc)
                return
            if self.broker_opened is not None and self.frames[1].opened:
                self.broker_opened.set()
        self.client.transport.write(data)

    def _refuse(self, exc: ProtocolError) -> None:
        self.logged = True
        logger.warning("vhost_relay.refused", extra={"peer": self.peer, "error": str(exc)})
        self.close(abort=True)

    def _log(self, event: str) -> None:
        """The connection's one info line: relayed, or closed before its open."""
        self.logged = True
        logger.info(event, extra={"peer": self.peer, "vhost": self.preamble.vhost,
                                  "user": self.preamble.user})

    def close(self, abort: bool = False) -> None:
        """Closes both sides (after sending what is buffered, unless `abort`)."""
        if self.closed:
            return
        self.closed = True
        self.relay.pairs.discard(self)
        self._settle()
        if not self.logged:
            self._log("vhost_relay.closed_before_open")
        if self.connecting is not None and not self.connecting.done():
            self.connecting.cancel()
        for side in (self.client, self.broker):
            if side.transport is not None:
                side.transport.abort() if abort else side.transport.close()


class Relay:
    """The listener; `pairs` are the connections being relayed.

    Facing tenants (MQTT), `admission` caps the connections of each source address still
    before their CONNECT and their rate, and `handshake_timeout` closes a client that has not
    sent its preamble by then; facing routers (AMQP) neither is needed."""

    def __init__(self, broker_host: str, broker_port: int, connect_timeout: float = 10.0,
                 protocol: str = "amqp", admission: Admission | None = None,
                 handshake_timeout: float = 0.0, kinds: Kinds | None = None,
                 more_brokers: tuple = (), broker_tls: ssl.SSLContext | None = None):
        self.broker_host, self.broker_port = broker_host, broker_port
        # TLS to the broker (its certificate checked against the platform's internal CA):
        # what crosses this link is a login, the router's or a tenant's.
        self.broker_tls = broker_tls
        # The other nodes of a RabbitMQ cluster ((host, port), ...): a connection goes to the
        # node that answered last, then to the others in turn.
        self._brokers = [(broker_host, broker_port), *more_brokers]
        self._first = 0
        self.protocol, self.admission, self.kinds = protocol, admission, kinds
        self.handshake_timeout = handshake_timeout
        self.connect_timeout = connect_timeout
        self.pairs: set[Pair] = set()
        self.servers: list[asyncio.Server] = []

    def brokers(self) -> list[tuple[str, int]]:
        """The broker's nodes to try, the one that answered last first."""
        return self._brokers[self._first:] + self._brokers[:self._first]

    def answered(self, tried: int) -> None:
        """The `tried`-th node of `brokers()` took a connection: next ones go there first."""
        self._first = (self._first + tried) % len(self._brokers)

    async def start(self, host: str, port: int, tls: ssl.SSLContext | None = None) -> None:
        """Listens on `host:port`, with TLS if `tls` (a relay may listen on both)."""
        loop = asyncio.get_running_loop()
        timeout = {"ssl_handshake_timeout": self.handshake_timeout or None} if tls else {}
        self.servers.append(await loop.create_server(
            lambda: ClientSide(self), host, port, reuse_address=True, backlog=512, ssl=tls,
            **timeout))

    def stop(self) -> None:
        for server in self.servers:
            server.close()
        for pair in list(self.pairs):
            pair.close()
