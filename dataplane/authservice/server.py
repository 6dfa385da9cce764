"""The auth service a router delegates SASL to (qdrouterd's authServicePlugin): SASL PLAIN checked
by a verifier, then an AMQP open carrying the user's identity and address permissions. No Django.

One event loop serves every peer, so a peer that sends nothing, or a byte a second, costs a
socket and a few hundred bytes, never a thread. Every peer has `handshake_timeout` seconds for
the whole exchange. The verifier (it may read a database) runs on at most `workers` threads;
at most `queue` logins wait for one, and past that a login is answered sys-temp at once (the
client may retry) rather than queued behind a flood. Logins the service accepted before
(`Known`: names only) wait in a queue of their own, served first, and a verifier that keeps
logins it verified answers them on the loop (`cached`): a flood of unknown names,
which a router behind one address (qdrouterd relays every client's SASL) cannot tell apart from
other tenants' logins, neither refuses nor delays them. A login refused is followed by a delay
before its next try is checked, per login name, growing with each refusal (`Refusals`), so that
guessing a password, or hammering a name, costs the guesser time and the service nothing.
"""
import asyncio
import logging
import socket
import ssl
import threading
import time
from collections import OrderedDict, deque
from concurrent.futures import ThreadPoolExecutor

from .. import tls_files
from ..control import Identity, Verifier
from . import sasl

logger = logging.getLogger(__name__)

__all__ = ["AuthServer", "Identity", "Refusals", "Verifier"]


class Refusals:
    """Per login name, how long its next check waits after refusals: `base` seconds after the
    first, doubling each time up to `ceiling`; forgotten `forget_after` seconds after the last
    one. At most `capacity` names are remembered (the oldest go first)."""

    def __init__(self, base: float = 0.2, ceiling: float = 5.0, forget_after: float = 300.0,
                 capacity: int = 100_000, clock=time.monotonic):
        self.base, self.ceiling, self.forget_after = base, ceiling, forget_after
        self.capacity, self.clock = capacity, clock
        self._seen: dict[str, tuple[int, float]] = {}  # name -> (refusals, last at)

    def delay(self, name: str) -> float:
        entry = self._seen.get(name)
        if entry is None:
            return 0.0
        count, at = entry
        if self.clock() - at > self.forget_after:
            del self._seen[name]
            return 0.0
        return min(self.ceiling, self.base * 2 ** (count - 1))

    def refused(self, name: str) -> None:
        count = self._seen.pop(name, (0, 0.0))[0]
        self._seen[name] = (count + 1, self.clock())
        while len(self._seen) > self.capacity:
            del self._seen[next(iter(self._seen))]

    def accepted(self, name: str) -> None:
        self._seen.pop(name, None)


class Known:
    """Login names accepted within `remember` seconds, at most `capacity` (the oldest go first):
    who gets the verifier first. A name is no credential: the password is checked as always."""

    def __init__(self, remember: float = 3600.0, capacity: int = 100_000, clock=time.monotonic):
        self.remember, self.capacity, self.clock = remember, capacity, clock
        self._names: OrderedDict[str, float] = OrderedDict()

    def __contains__(self, name: str) -> bool:
        at = self._names.get(name)
        return at is not None and self.clock() - at <= self.remember

    def accepted(self, name: str) -> None:
        self._names.pop(name, None)
        self._names[name] = self.clock()
        while len(self._names) > self.capacity:
            self._names.popitem(last=False)


class AuthServer:
    """The service on `address` until `shutdown()`: `serve_forever()` runs its event loop in the
    calling thread. `server_address` is known as soon as it is made (port 0: a free one)."""

    def __init__(self, address: tuple[str, int], verify: Verifier, *,
                 ssl_context: ssl.SSLContext | None = None, handshake_timeout: float = 5.0,
                 max_connections: int = 4096, workers: int = 4, queue: int = 64,
                 verify_timeout: float = 5.0, refusals: Refusals | None = None,
                 known: Known | None = None, container_id: str = "maas-auth-service",
                 certificate: "tls_files.ServerCertificate | None" = None):
        """`certificate`: the TLS context's certificate files, loaded again when they change
        (a re-signed certificate of a Kubernetes Secret)."""
        self.verify, self.ssl_context = verify, ssl_context
        self.certificate = certificate
        self.handshake_timeout, self.verify_timeout = handshake_timeout, verify_timeout
        self.max_connections, self.queue = max_connections, queue
        self.container_id = container_id
        self.refusals = refusals or Refusals()
        self.known = known or Known()
        self.socket = socket.create_server(address, backlog=1024)
        self.server_address = self.socket.getsockname()
        self.workers = workers
        self._pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="verify")
        self._running = 0  # verifier threads busy (or handed to a waiter)
        # logins waiting for a thread: those accepted before, then the others
        self._waiters: dict[bool, deque[asyncio.Future]] = {True: deque(), False: deque()}
        self.connections = 0  # peers connected now
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._stopping = False
        self._stopped = threading.Event()
        self._stopped.set()  # not serving yet

    # -- the socketserver-like interface of the process and the tests -------------------------
    def serve_forever(self) -> None:
        self._stopped.clear()
        try:
            asyncio.run(self._serve())
        finally:
            self._stopped.set()

    def shutdown(self) -> None:
        """Stops serve_forever (from another thread) and waits for it."""
        self._stopping = True
        loop, stop = self._loop, self._stop
        if loop is not None and stop is not None:
            loop.call_soon_threadsafe(stop.set)
        self._stopped.wait(10)

    def server_close(self) -> None:
        self.socket.close()
        self._pool.shutdown(wait=False, cancel_futures=True)

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.server_close()

    async def _serve(self) -> None:
        self._loop, self._stop = asyncio.get_running_loop(), asyncio.Event()
        if self._stopping:  # shut down before it began
            return
        server = await asyncio.start_server(
            self._client, sock=self.socket, ssl=self.ssl_context,
            ssl_handshake_timeout=self.handshake_timeout if self.ssl_context else None)
        reloading = asyncio.create_task(self._reload()) if self.certificate else None
        async with server:
            await self._stop.wait()
        if reloading:
            reloading.cancel()

    async def _reload(self) -> None:
        """In the loop's thread, so no handshake sees the context half changed."""
        while True:
            await asyncio.sleep(tls_files.RECHECK)
            self.certificate.reload_if_changed()

    # -- one peer ------------------------------------------------------------------------------
    async def _client(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        peer = (writer.get_extra_info("peername") or ("?",))[0]
        if self.connections >= self.max_connections:
            logger.warning("authservice.busy", extra={"peer": peer})
            writer.transport.abort()
            return
        self.connections += 1
        sock = writer.get_extra_info("socket")
        if sock is not None:
            # Small frames written back to back (the AMQP header, then the open): without this,
            # Nagle holds the second until the router's delayed ACK, 40 ms per login.
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        try:
            async with asyncio.timeout(self.handshake_timeout):
                await self._handshake(_Peer(reader, writer))
        except (sasl.ProtocolError, OSError, TimeoutError, asyncio.IncompleteReadError) as exc:
            reason = "handshake timed out" if isinstance(exc, TimeoutError) else str(exc)
            logger.info("authservice.dropped", extra={"peer": peer, "reason": reason})
        finally:
            self.connections -= 1
            writer.transport.abort()

    async def _handshake(self, peer: "_Peer") -> None:
        if await peer.header() != sasl.SASL_HEADER:
            peer.write(sasl.SASL_HEADER)  # the header we speak, then close (AMQP 1.0, 2.2)
            await peer.drain()
            raise sasl.ProtocolError("the peer did not start with SASL")
        peer.write(sasl.SASL_HEADER + sasl.mechanisms(["PLAIN"]))
        init = await peer.performative(sasl.SASL_FRAME)
        if init.code != sasl.INIT:
            raise sasl.ProtocolError(f"expected sasl-init, got {init.code:#x}")
        if init.field(0) != "PLAIN":
            peer.write(sasl.outcome(sasl.AUTH))
            await peer.drain()
            raise sasl.ProtocolError(f"mechanism {str(init.field(0))[:40]!r} is not offered")
        response = init.field(1, b"")
        if not response:  # PLAIN may wait for an empty challenge (RFC 4616, 2)
            peer.write(sasl.challenge(b""))
            reply = await peer.performative(sasl.SASL_FRAME)
            if reply.code != sasl.RESPONSE:
                raise sasl.ProtocolError(f"expected sasl-response, got {reply.code:#x}")
            response = reply.field(0, b"")
        code, login, identity = await self._check(response)
        unavailable = getattr(self.verify, "unavailable", None)
        if identity is not None and unavailable is not None and unavailable(identity):
            # Its space is not configured on the router yet: a transient refusal, which
            # clients retry, rather than a login into links the router would refuse.
            code, identity = sasl.SYS_TEMP, None
        peer.write(sasl.outcome(code))
        if identity is None:
            await peer.drain()
            logger.info("authservice.refused", extra={"login": login[:255], "outcome": code})
            return
        logger.info("authservice.authenticated", extra={"sub": identity.sub})
        await self._open_and_close(peer, identity)

    async def _check(self, response: bytes) -> tuple[int, str, Identity | None]:
        """The sasl-outcome code, the login and the identity it verified (None unless OK)."""
        try:
            authzid, login, password = sasl.plain(response)
        except sasl.ProtocolError:
            return sasl.AUTH, "", None
        if authzid and authzid != login:
            return sasl.AUTH, login, None  # acting as someone else is not offered
        delay = self.refusals.delay(login)
        if delay:
            await asyncio.sleep(delay)
        cached = getattr(self.verify, "cached", None)
        identity = cached(login, password) if cached is not None else None
        if identity is not None:  # verified before and unchanged since: no thread, no wait
            self.refusals.accepted(login)
            return sasl.OK, login, identity
        known = login in self.known
        if self._running >= self.workers and len(self._waiters[known]) >= self.queue:
            logger.warning("authservice.overloaded", extra={"login": login[:255],
                                                            "known": known})
            return sasl.SYS_TEMP, login, None
        try:
            identity = await asyncio.wait_for(self._verify(login, password, known),
                                              self.verify_timeout)
        except TimeoutError:
            logger.warning("authservice.verifier_slow", extra={"login": login[:255]})
            return sasl.SYS_TEMP, login, None
        except Exception:  # e.g. the database is down: a transient error, the client may retry
            logger.exception("authservice.verifier_failed", extra={"login": login[:255]})
            return sasl.SYS_TEMP, login, None
        if identity is None:
            self.refusals.refused(login)
            return sasl.AUTH, login, None
        self.refusals.accepted(login)
        self.known.accepted(login)
        return sasl.OK, login, identity

    async def _verify(self, login: str, password: str, known: bool) -> Identity | None:
        """The verifier's answer on one of the `workers` threads, once one is free for this
        login: known logins before the others, each in the order they came."""
        if self._running < self.workers:
            self._running += 1
        else:
            waiter = asyncio.get_running_loop().create_future()
            self._waiters[known].append(waiter)
            try:
                await waiter  # resolved when a finishing login hands its thread over
            except asyncio.CancelledError:
                if waiter.done() and not waiter.cancelled():
                    self._hand_over()  # handed over just as it gave up: pass it on
                else:
                    self._waiters[known].remove(waiter)  # gave up waiting (its deadline)
                raise
        try:
            return await asyncio.get_running_loop().run_in_executor(
                self._pool, self.verify, login, password)
        finally:
            self._hand_over()

    def _hand_over(self) -> None:
        """A thread is free: to the first waiter still waiting, known logins first."""
        for waiters in (self._waiters[True], self._waiters[False]):
            while waiters:
                waiter = waiters.popleft()
                if not waiter.done():
                    waiter.set_result(None)
                    return
        self._running -= 1

    async def _open_and_close(self, peer: "_Peer", identity: Identity) -> None:
        if await peer.header() != sasl.AMQP_HEADER:
            raise sasl.ProtocolError("expected the AMQP header after SASL")
        peer.write(sasl.AMQP_HEADER)
        peer_open = await peer.performative(sasl.AMQP_FRAME)
        if peer_open.code != sasl.OPEN:
            raise sasl.ProtocolError(f"expected open, got {peer_open.code:#x}")
        ours = sasl.open_frame(self.container_id, identity.sub, identity.preferred_username,
                               identity.address_authz)
        limit = peer_open.field(2, 0)
        if isinstance(limit, int) and limit and len(ours) > limit:
            # An open cannot be split; sending one without address-authz would allow everything.
            raise sasl.ProtocolError(f"our open ({len(ours)} bytes) exceeds the peer's "
                                     "max-frame-size")
        peer.write(ours)
        following = await peer.performative(sasl.AMQP_FRAME)
        if following.code == sasl.CLOSE:
            peer.write(sasl.close_frame())
        else:  # this service has no sessions or links to offer
            peer.write(sasl.close_frame("amqp:not-allowed", "authentication service only"))
        await peer.drain()


class _Peer:
    """A peer's frames through asyncio streams (sasl.FrameBuffer's rules and bounds)."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter):
        self.reader, self.writer = reader, writer
        self.frames = sasl.FrameBuffer()

    async def _more(self) -> None:
        data = await self.reader.read(4096)
        if not data:
            raise sasl.ProtocolError("peer disconnected")
        self.frames.feed(data)

    async def header(self) -> bytes:
        while (header := self.frames.header()) is None:
            await self._more()
        return header

    async def performative(self, frame_type: int) -> sasl.Performative:
        while (frame := self.frames.performative(frame_type)) is None:
            await self._more()
        return frame

    def write(self, data: bytes) -> None:
        self.writer.write(data)

    async def drain(self) -> None:
        await self.writer.drain()
