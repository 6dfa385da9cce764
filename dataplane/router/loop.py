"""The I/O loop: sockets, proton transports and timers, with no reactor in between.

One selector, one proton collector for every connection and a heap of timers. Bytes read from a
socket are pushed into the connection's transport, the engine consumes the collector's events,
then pending output is written back. Proton's reactor adds a Python handler dispatch per event;
skipping it is what keeps the per-message cost low.

An accepted connection first goes through its SASL relay (sasl_relay.py), which talks to the
auth service on a socket of its own in the same selector; its transport gets the bytes after
SASL and has no SASL layer. TLS, where a listener has it, is Python's `ssl` over memory BIOs,
under the relay and the transport alike; connections without TLS keep the direct path.
"""

import errno
import heapq
import itertools
import logging
import selectors
import socket
import ssl
import time

from cproton import pn_connection_set_container
from cproton_ffi import ffi
from cproton_ffi import lib as L

from . import memory

logger = logging.getLogger(__name__)

_BUF = 1 << 16


class Conn:
    """One AMQP connection (accepted or connector-made) and what the router knows of it."""

    _ids = itertools.count(1)

    def __init__(self, sock, kind: str, direction: str, host: str):
        self.identity = next(self._ids)
        self.started = time.monotonic()  # connection.uptimeSeconds
        self.sock = sock
        self.kind = kind  # "client", "management" or "connector"
        self.dir = direction
        self.host = host
        self.source = ""  # the peer's address, for accepted connections (admission.py)
        self.pending = False  # counted by the admission until its SASL is over
        self.transport = L.pn_transport()
        self.pn = L.pn_connection()
        self.connecting = direction == "out"
        self.want_write = False
        self.closed = False
        self.opened = False
        self.encrypted = False
        self.login: str | None = None  # the auth service's identity (`sub`)
        self.relay = None  # the SASL relay until SASL is over (accepted connections)
        self.tls: ssl.SSLObject | None = None
        self.tls_in = self.tls_out = None
        self.tls_ready = True  # False: a connector's TLS handshake is not over yet
        self.failure: str | None = None  # why TLS ended it (a connector's connectionMsg)
        self.raw_out = bytearray()  # bytes for the socket not from proton (SASL, TLS records)
        self.pending_in = bytearray()  # bytes for proton it has no room for yet
        self.finishing = False  # close once raw_out is sent
        self.vhost: str | None = None
        self.grant = None
        self.sessions: set = set()  # sessions the peer began (counted against maxSessions)
        self.senders = 0
        self.receivers = 0
        self.links: set = set()
        self.connector = None  # connector entity name for outbound connections
        self.container: str | None = None
        self.properties: dict = {}  # the client's connection properties (bounded)
        self.forced = False  # closed by management, waiting for the peer's close
        self.sasl_mech: str | None = None

    def start_tls(self, context: ssl.SSLContext, server_hostname: str | None = None) -> None:
        """TLS under the connection: as the server (accepted), or as the client of
        `server_hostname` (a connector's), whose ClientHello is queued here. A client writes
        none of proton's bytes until its handshake is over: TLS would refuse them."""
        self.tls_in, self.tls_out = ssl.MemoryBIO(), ssl.MemoryBIO()
        client = server_hostname is not None
        self.tls = context.wrap_bio(self.tls_in, self.tls_out, server_side=not client,
                                    server_hostname=server_hostname)
        self.encrypted = True
        if client:
            self.tls_ready = False
            try:
                self.tls.do_handshake()
            except ssl.SSLWantReadError:
                pass
            self.raw_out += self.tls_out.read()


class Loop:
    def __init__(self):
        self.selector = selectors.DefaultSelector()
        self.collector = L.pn_collector()
        self.conns: dict = {}  # pn_connection cdata -> Conn
        # Connections that may have output to write or input proton had no room for: what
        # flush() looks at. Looking at every connection on every turn, 800 idle connectors
        # (the 100k fleet's standard spaces) cost a tenth of a core more at rest (docs/scale.md).
        self.dirty: set = set()
        self._timers: list = []
        self._seq = itertools.count()
        self._rbuf = bytearray(_BUF)
        self._rptr = ffi.from_buffer(self._rbuf)
        self._wbuf = bytearray(_BUF)
        self._wptr = ffi.from_buffer(self._wbuf)
        self._wview = memoryview(self._wbuf)
        self.running = True
        self.engine = None  # set by the engine: process_events(), on_conn_closed(conn)
        self.settled = None  # set by the engine: settled(source) once a pending conn is not
        self._trim_due = False

    # -- timers ------------------------------------------------------------------------------
    def call_later(self, delay: float, fn, *args) -> None:
        heapq.heappush(self._timers, (time.monotonic() + delay, next(self._seq), fn, args))

    def _run_timers(self) -> float | None:
        now = time.monotonic()
        while self._timers and self._timers[0][0] <= now:
            _, _, fn, args = heapq.heappop(self._timers)
            try:
                fn(*args)
            except Exception:
                logger.exception("loop.timer_failed")
        return self._timers[0][0] - now if self._timers else None

    # -- listeners ---------------------------------------------------------------------------
    def listen(self, host: str, port: int, on_accept, admit=None) -> socket.socket:
        """Accepts connections on host:port; `admit(source address)`, if given, says whether
        one may go on (a refused one is closed at once, before any byte is read)."""
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
        sock.listen(1024)
        sock.setblocking(False)
        self.selector.register(sock, selectors.EVENT_READ, ("listener", (on_accept, admit)))
        return sock

    def _accept(self, lsock, callbacks) -> None:
        on_accept, admit = callbacks
        while True:
            try:
                sock, addr = lsock.accept()
            except BlockingIOError:
                return
            except OSError as exc:  # out of file descriptors: the backlog waits a second
                logger.warning("loop.accept_failed", extra={"error": str(exc)})
                self.selector.unregister(lsock)
                self.call_later(1.0, self.selector.register, lsock, selectors.EVENT_READ,
                                ("listener", callbacks))
                return
            if admit is not None and not admit(addr[0]):
                sock.close()
                continue
            sock.setblocking(False)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            conn = Conn(sock, "client", "in", f"{addr[0]}:{addr[1]}")
            conn.source, conn.pending = addr[0], admit is not None
            L.pn_transport_set_server(conn.transport)
            on_accept(conn)  # sets up TLS and the SASL relay before any byte is processed
            self._bind(conn)

    def connect(self, host: str, port: int, setup) -> Conn:
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setblocking(False)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        conn = Conn(sock, "connector", "out", f"{host}:{port}")
        setup(conn)
        self._bind(conn)
        err = sock.connect_ex((host, int(port)))
        if err not in (0, errno.EINPROGRESS):
            logger.info("connector.connect_failed", extra={"host": conn.host, "errno": err})
            self.close(conn)
        return conn

    def _bind(self, conn: Conn) -> None:
        pn_connection_set_container(conn.pn, "maas-router")
        L.pn_connection_collect(conn.pn, self.collector)
        L.pn_transport_bind(conn.transport, conn.pn)
        self.conns[conn.pn] = conn
        self.dirty.add(conn)
        mask = selectors.EVENT_READ | (selectors.EVENT_WRITE if conn.connecting else 0)
        conn.want_write = conn.connecting
        self.selector.register(conn.sock, mask, ("conn", conn))

    # -- I/O ---------------------------------------------------------------------------------
    def _read(self, conn: Conn) -> None:
        if conn.tls is not None or conn.relay is not None or conn.pending_in:
            self._read_layered(conn)
            return
        t = conn.transport
        cap = L.pn_transport_capacity(t)
        if cap < 0:
            return
        if cap == 0:
            return  # proton is full; the engine will consume and we read again
        try:
            n = conn.sock.recv_into(self._rbuf, min(cap, _BUF))
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            n = 0
        if n == 0:
            L.pn_transport_close_tail(t)
        else:
            L.pn_transport_push(t, self._rptr, n)

    def _read_layered(self, conn: Conn) -> None:
        if conn.pending_in:
            self._push_pending(conn)
            if conn.pending_in:
                return  # proton is full; the engine will consume and we read again
        try:
            data = conn.sock.recv(_BUF)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            data = b""
        if data and conn.tls is not None:
            conn.tls_in.write(data)
            data = self._tls_read(conn)
            if data is None:
                return
        elif not data:
            self._eof(conn)
            return
        if conn.relay is not None:
            conn.relay.feed(data)
        elif data:
            conn.pending_in += data
            self._push_pending(conn)

    def _tls_read(self, conn: Conn) -> bytes | None:
        """The plain text TLS gives for what came in; None if the connection is over."""
        out = bytearray()
        try:
            if not conn.tls_ready:  # a connector's handshake: the server's answer
                conn.tls.do_handshake()
                conn.tls_ready = True  # proton's output goes out at the next flush
            while chunk := conn.tls.read(_BUF):
                out += chunk
        except ssl.SSLWantReadError:
            pass
        except ssl.SSLZeroReturnError:
            self._eof(conn)
        except ssl.SSLError as exc:
            logger.info("router.tls_failed", extra={"host": conn.host, "reason": str(exc)})
            conn.failure = f"TLS failed: {exc}"
            self.close(conn)
            return None
        conn.raw_out += conn.tls_out.read()  # handshake records
        return None if conn.closed else bytes(out)

    def _eof(self, conn: Conn) -> None:
        if conn.relay is not None:  # gone during SASL
            self.close(conn)
        else:
            L.pn_transport_close_tail(conn.transport)

    def _push_pending(self, conn: Conn) -> None:
        t = conn.transport
        while conn.pending_in:
            cap = L.pn_transport_capacity(t)
            if cap < 0:
                conn.pending_in.clear()
            if cap <= 0:
                return
            n = min(cap, len(conn.pending_in))
            L.pn_transport_push(t, bytes(conn.pending_in[:n]), n)
            del conn.pending_in[:n]

    # Called by the SASL relay.
    def send_plain(self, conn: Conn, data: bytes) -> None:
        """Queue bytes for the client ahead of anything proton writes (through TLS if any)."""
        if conn.closed:
            return
        self.dirty.add(conn)
        if conn.tls is not None:
            try:
                conn.tls.write(data)
            except ssl.SSLError:  # TLS already over: nothing more reaches this client
                conn.finishing = True
                return
            data = conn.tls_out.read()
        conn.raw_out += data

    def sasl_done(self, conn: Conn, leftover: bytes) -> None:
        """SASL is over: the transport gets the rest of the stream."""
        conn.relay = None
        self._settle(conn)
        self.dirty.add(conn)
        if leftover:
            conn.pending_in += leftover
            self._push_pending(conn)

    def finish(self, conn: Conn) -> None:
        """Close once what is queued for the client is sent."""
        conn.finishing = True
        self.dirty.add(conn)

    def _write(self, conn: Conn) -> None:
        if conn.kind == "management":  # what a reply confirms is on disk before it leaves
            self.engine.management.sync()
        if conn.tls is not None or conn.raw_out or conn.finishing:
            self._write_layered(conn)
            return
        t = conn.transport
        while True:
            pending = L.pn_transport_pending(t)
            if pending <= 0:
                break
            n = min(pending, _BUF)
            L.pn_transport_peek(t, self._wptr, n)
            try:
                sent = conn.sock.send(self._wview[:n])
            except (BlockingIOError, InterruptedError):
                sent = 0
            except OSError:
                L.pn_transport_close_head(t)
                L.pn_transport_close_tail(t)
                break
            if sent:
                L.pn_transport_pop(t, sent)
            if sent < n:
                break
        want = L.pn_transport_pending(t) > 0
        if want != conn.want_write and not conn.closed:
            conn.want_write = want
            mask = selectors.EVENT_READ | (selectors.EVENT_WRITE if want else 0)
            self.selector.modify(conn.sock, mask, ("conn", conn))
        if L.pn_transport_closed(t):
            self.close(conn)

    def _write_layered(self, conn: Conn) -> None:
        t = conn.transport
        if conn.tls is not None and conn.relay is None and conn.tls_ready:
            try:
                while len(conn.raw_out) < _BUF and (pending := L.pn_transport_pending(t)) > 0:
                    n = min(pending, _BUF)
                    L.pn_transport_peek(t, self._wptr, n)
                    conn.tls.write(self._wview[:n])
                    L.pn_transport_pop(t, n)
                    conn.raw_out += conn.tls_out.read()
            except ssl.SSLError as exc:
                logger.info("router.tls_failed", extra={"host": conn.host, "reason": str(exc)})
                self.close(conn)
                return
        if conn.raw_out:
            try:
                sent = conn.sock.send(conn.raw_out)
                del conn.raw_out[:sent]
            except (BlockingIOError, InterruptedError):
                pass
            except OSError:
                self.close(conn)
                return
        if conn.raw_out:
            want = True
        elif conn.finishing:
            self.close(conn)
            return
        elif conn.tls is None and conn.relay is None:
            self._write(conn)  # the SASL bytes are out: proton's output goes direct again
            return
        else:
            want = conn.relay is None and conn.tls_ready and L.pn_transport_pending(t) > 0
        if want != conn.want_write and not conn.closed:
            conn.want_write = want
            mask = selectors.EVENT_READ | (selectors.EVENT_WRITE if want else 0)
            self.selector.modify(conn.sock, mask, ("conn", conn))
        if not conn.raw_out and conn.relay is None and L.pn_transport_closed(t):
            self.close(conn)

    def _settle(self, conn: Conn) -> None:
        if conn.pending:
            conn.pending = False
            if self.settled is not None:
                self.settled(conn.source)

    def close(self, conn: Conn) -> None:
        if conn.closed:
            return
        conn.closed = True
        self._settle(conn)
        if conn.relay is not None:
            conn.relay.abort()
        try:
            self.selector.unregister(conn.sock)
        except (KeyError, ValueError):
            pass
        conn.sock.close()
        L.pn_transport_close_tail(conn.transport)
        L.pn_transport_close_head(conn.transport)
        if self.engine is not None:
            self.engine.on_conn_closed(conn)
        self.conns.pop(conn.pn, None)
        L.pn_transport_unbind(conn.transport)
        # Both were made here (Conn) and hold the reference that made them: release ends the
        # connection's endpoints, and only the decrefs let proton free the objects, with every
        # delivery buffer they pool (a connection that carried a 50 MiB message kept 50 MiB).
        L.pn_connection_release(conn.pn)
        L.pn_decref(conn.pn)
        L.pn_decref(conn.transport)

    def _tick(self) -> None:
        now = int(time.monotonic() * 1000)
        for conn in list(self.conns.values()):
            L.pn_transport_tick(conn.transport, now)
        # A tick writes heartbeats and ends idle connections without an event: all are looked
        # at once a second (and a missed mark costs at most that second).
        self.dirty.update(self.conns.values())
        self.call_later(1.0, self._tick)

    def run(self) -> None:
        self.call_later(1.0, self._tick)
        while self.running:
            timeout = self._run_timers()
            self.engine.process_events()
            self.flush()
            for key, mask in self.selector.select(timeout if timeout is not None else 1.0):
                what, obj = key.data
                if what == "listener":
                    self._accept(key.fileobj, obj)
                    continue
                if what == "relay":
                    obj.on_ready(mask)
                    continue
                conn = obj
                if conn.closed:
                    continue
                self.dirty.add(conn)
                if conn.connecting and mask & selectors.EVENT_WRITE:
                    err = conn.sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
                    conn.connecting = False
                    if err:
                        logger.info("connector.connect_failed",
                                    extra={"host": conn.host, "errno": err})
                        self.close(conn)
                        continue
                if mask & selectors.EVENT_READ:
                    self._read(conn)
                    # consume events now: a full transport stops accepting input
                    self.engine.process_events()
                if mask & selectors.EVENT_WRITE:
                    self._write(conn)

    def after_large_message(self) -> None:
        """A large message was carried or refused: give the heap back a second later (once,
        however many came meanwhile)."""
        if not self._trim_due:
            self._trim_due = True
            self.call_later(1.0, self._trim)

    def _trim(self) -> None:
        self._trim_due = False
        memory.trim()

    def mark(self, pn_conn) -> None:
        """The engine made output on this proton connection (a PN_TRANSPORT event)."""
        conn = self.conns.get(pn_conn)
        if conn is not None:
            self.dirty.add(conn)

    def flush(self) -> None:
        """Pushes held input and writes pending output of the connections marked since the last
        flush: those read from, given events or output by the engine, or ticked."""
        waiting = [c for c in self.dirty if c.pending_in and not c.closed]
        for conn in waiting:
            self._push_pending(conn)
        if waiting:
            self.engine.process_events()
        dirty, self.dirty = self.dirty, set()
        for conn in dirty:
            if not conn.closed and not conn.connecting:
                self._write(conn)
            if conn.pending_in and not conn.closed:
                self.dirty.add(conn)  # proton still full: tried again next turn, as before
