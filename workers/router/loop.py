"""The I/O loop: sockets, proton transports and timers, with no reactor in between.

One selector, one proton collector for every connection and a heap of timers. Bytes read from a
socket are pushed into the connection's transport, the engine consumes the collector's events,
then pending output is written back. Proton's reactor adds a Python handler dispatch per event;
skipping it is what keeps the per-message cost low.
"""

import errno
import heapq
import itertools
import logging
import selectors
import socket
import time

from cproton import pn_connection_set_container
from cproton_ffi import ffi
from cproton_ffi import lib as L

from . import sasl_plugin

logger = logging.getLogger(__name__)

_BUF = 1 << 16


class Conn:
    """One AMQP connection (accepted or connector-made) and what the router knows of it."""

    _ids = itertools.count(1)

    def __init__(self, sock, kind: str, direction: str, host: str):
        self.identity = next(self._ids)
        self.sock = sock
        self.kind = kind  # "client", "management" or "connector"
        self.dir = direction
        self.host = host
        self.transport = L.pn_transport()
        self.pn = L.pn_connection()
        self.connecting = direction == "out"
        self.want_write = False
        self.closed = False
        self.opened = False
        self.encrypted = False
        self.login: str | None = None
        self.allowed_vhosts: set[str] = set()
        self.vhost: str | None = None
        self.grant = None
        self.sessions: set = set()  # sessions the peer began (counted against maxSessions)
        self.senders = 0
        self.receivers = 0
        self.links: set = set()
        self.connector = None  # connector entity name for outbound connections
        self.container: str | None = None
        self.sasl_mech: str | None = None


class Loop:
    def __init__(self):
        self.selector = selectors.DefaultSelector()
        self.collector = L.pn_collector()
        self.conns: dict = {}  # pn_connection cdata -> Conn
        self._timers: list = []
        self._seq = itertools.count()
        self._rbuf = bytearray(_BUF)
        self._rptr = ffi.from_buffer(self._rbuf)
        self._wbuf = bytearray(_BUF)
        self._wptr = ffi.from_buffer(self._wbuf)
        self._wview = memoryview(self._wbuf)
        self.running = True
        self.engine = None  # set by the engine: process_events(), on_conn_closed(conn)

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
    def listen(self, host: str, port: int, on_accept) -> socket.socket:
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
        sock.listen(128)
        sock.setblocking(False)
        self.selector.register(sock, selectors.EVENT_READ, ("listener", on_accept))
        return sock

    def _accept(self, lsock, on_accept) -> None:
        while True:
            try:
                sock, addr = lsock.accept()
            except BlockingIOError:
                return
            sock.setblocking(False)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            conn = Conn(sock, "client", "in", f"{addr[0]}:{addr[1]}")
            L.pn_transport_set_server(conn.transport)
            on_accept(conn)  # sets up SSL/SASL before any byte is processed
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
        mask = selectors.EVENT_READ | (selectors.EVENT_WRITE if conn.connecting else 0)
        conn.want_write = conn.connecting
        self.selector.register(conn.sock, mask, ("conn", conn))

    # -- I/O ---------------------------------------------------------------------------------
    def _read(self, conn: Conn) -> None:
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

    def _write(self, conn: Conn) -> None:
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

    def close(self, conn: Conn) -> None:
        if conn.closed:
            return
        conn.closed = True
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
        sasl_plugin.forget(conn.transport)
        L.pn_transport_unbind(conn.transport)
        L.pn_connection_release(conn.pn)
        L.pn_decref(conn.transport)

    def _tick(self) -> None:
        now = int(time.monotonic() * 1000)
        for conn in list(self.conns.values()):
            L.pn_transport_tick(conn.transport, now)
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
                conn = obj
                if conn.closed:
                    continue
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

    def flush(self) -> None:
        for conn in list(self.conns.values()):
            if not conn.closed and not conn.connecting:
                self._write(conn)
