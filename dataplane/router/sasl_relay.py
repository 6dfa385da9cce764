"""The SASL layer of accepted connections, relayed to the MaaS auth service (dataplane/authservice),
as qdrouterd's authServicePlugin does (remote_sasl.c).

For each accepted connection the router speaks the server side of SASL itself, in Python, before
any byte reaches the connection's proton transport (which runs without a SASL layer): it offers
the client the mechanisms the auth service last offered (PLAIN until it was asked), and only
once the client's sasl-init is there opens a non-blocking connection to the auth service,
passes init, challenges and responses both ways, and on the service's `ok` opens AMQP there to
read the identity (`authenticated-identity`.`sub` of the service's open). Only then does the
client get its outcome: `ok` if the listener admits that identity, `auth` if not; the bytes
after the last SASL frame go to the transport and the connection's user is the identity. The
auth service connection is closed as soon as the identity is read. So a client that opens a
socket and says nothing, or only the SASL header, costs the auth service nothing; the whole
exchange must end within the handshake timeout (5 s by default), or the client is closed.

With a CA (`--auth-service-ca`) the relay speaks TLS to the auth service and goes on only if
the service proves the identity that CA certifies for its host name: an impostor on the
service's port (a process that took it while the service could not start) gets no login.

A source whose logins failed waits before its next login is passed on (`Admission.delay`).
If the auth service cannot be reached, answers too late or breaks the protocol, the client is
answered `sys-temp` (a client may retry); nothing here blocks the loop.
"""

import errno
import logging
import selectors
import socket
import ssl
import time
from collections.abc import Callable

from dataplane.authservice import sasl

logger = logging.getLogger(__name__)

CLIENT_TIMEOUT = 5.0  # the client's whole SASL exchange, by default
SERVICE_TIMEOUT = 5.0  # the auth service's part, from connect to its open
_RESOLVE_EVERY = 30.0
_FALLBACK_MECHANISMS = ["PLAIN"]  # offered when the auth service's list is unknown


class AuthService:
    """Where the auth service listens. A name is resolved at most every 30 s (the lookup
    blocks), an address literal never."""

    def __init__(self, host: str, port: int, ca_file: str | None = None):
        self.host, self.port = host, int(port)
        # TLS to the service, verified against `ca_file` for `host` (None: plain, loopback)
        self.tls: ssl.SSLContext | None = None
        if ca_file:
            self.tls = ssl.create_default_context(cafile=ca_file)
            self.tls.minimum_version = ssl.TLSVersion.TLSv1_2
        self._resolved: tuple[float, tuple] | None = None
        # what the service last offered: offered to clients before it is asked again
        self.mechanisms: list[str] = list(_FALLBACK_MECHANISMS)

    def address(self) -> tuple:
        now = time.monotonic()
        if self._resolved is None or now - self._resolved[0] > _RESOLVE_EVERY:
            info = socket.getaddrinfo(self.host, self.port, type=socket.SOCK_STREAM)
            self._resolved = (now, info[0])
        family, kind, proto, _, address = self._resolved[1]
        return family, kind, proto, address

    def __str__(self) -> str:
        return f"{self.host}:{self.port}{' (TLS)' if self.tls else ''}"


class SaslRelay:
    """One accepted connection's SASL exchange. The loop feeds it the client's bytes (`feed`)
    and hears back through `loop.send_plain(conn, data)`, `loop.sasl_done(conn, leftover)`
    and `loop.finish(conn)` (close once the output is flushed)."""

    def __init__(self, loop, conn, service: AuthService, admit: Callable[[str], bool], *,
                 admission=None, timeout: float = CLIENT_TIMEOUT):
        self.loop, self.conn, self.service, self.admit = loop, conn, service, admit
        self.admission = admission  # per source: delays after failed logins (admission.py)
        self.client = sasl.FrameBuffer()
        self.state = "header"  # header, init, exchange, done, failed
        self.mechanism: str | None = None
        self.pending_init: bytes | None = None  # the client's init, until the service asks
        self.unavailable = False  # the auth service failed before the outcome
        # the auth service's side
        self.up: socket.socket | None = None
        # idle, connecting, header, sasl, amqp-header, open, closing, closed
        self.up_state = "idle"
        self.up_in = sasl.FrameBuffer()
        self.up_out = bytearray()
        self.up_mask = 0
        loop.call_later(timeout, self._client_expired)

    # -- the client ---------------------------------------------------------------------------
    def feed(self, data: bytes) -> None:
        if self.state in ("done", "failed"):
            return
        try:
            self.client.feed(data)
        except sasl.ProtocolError as exc:
            self._fail(f"client: {exc}")
            return
        self._client_step()

    def _client_step(self) -> None:
        try:
            self._client_progress()
        except sasl.ProtocolError as exc:
            self._fail(f"client: {exc}")

    def _client_progress(self) -> None:
        if self.state == "header":
            header = self.client.header()
            if header is None:
                return
            self.loop.send_plain(self.conn, sasl.SASL_HEADER)
            if header != sasl.SASL_HEADER:  # AMQP without SASL, or TLS on a plain port
                self._fail("client did not start with SASL")
                return
            self.loop.send_plain(self.conn, sasl.mechanisms(self.service.mechanisms))
            self.state = "init"
        while self.state in ("init", "exchange"):
            frame = self.client.performative(sasl.SASL_FRAME)
            if frame is None:
                return
            if self.state == "init" and frame.code == sasl.INIT:
                self._on_init(frame)
            elif self.state == "exchange" and frame.code == sasl.RESPONSE:
                if self.unavailable:
                    self._refuse_unavailable()
                    return
                self._up_send(sasl.response(frame.field(0, b"")))
            else:
                raise sasl.ProtocolError(f"unexpected SASL frame {frame.code:#x}")

    def _on_init(self, frame) -> None:
        mechanism, payload, hostname = frame.field(0), frame.field(1), frame.field(2)
        if not isinstance(mechanism, str) or not mechanism:
            raise sasl.ProtocolError("sasl-init without a mechanism")
        self.mechanism = str(mechanism)[:40]
        self.conn.sasl_mech = self.mechanism
        self.state = "exchange"
        if self.mechanism not in self.service.mechanisms:  # not worth asking the service
            self._fail(f"mechanism {self.mechanism} is not offered", sasl.AUTH)
            return
        if payload is not None and not isinstance(payload, bytes):
            raise sasl.ProtocolError("sasl-init response is not binary")
        if hostname is not None and not isinstance(hostname, str):
            raise sasl.ProtocolError("sasl-init hostname is not a string")
        self.pending_init = sasl.init(self.mechanism, payload, hostname)
        delay = self.admission.delay(self.conn.source) if self.admission else 0.0
        if delay:
            self.loop.call_later(delay, self._connect)
        else:
            self._connect()

    def _outcome(self, code: int) -> None:
        self.loop.send_plain(self.conn, sasl.outcome(code))

    def _succeed(self, sub: str) -> None:
        self.state = "done"
        self.conn.login = sub
        if self.admission is not None:
            self.admission.succeeded(self.conn.source)
        self._outcome(sasl.OK)
        logger.debug("router.authenticated", extra={"user": sub, "host": self.conn.host})
        self.loop.sasl_done(self.conn, self.client.take())

    def _fail(self, reason: str, code: int | None = None) -> None:
        """Answer `code` (if the client is waiting for an outcome) and close the client."""
        if self.state in ("done", "failed"):
            return
        if code is not None:
            self._outcome(code)
        if code == sasl.AUTH and self.admission is not None:
            self.admission.failed(self.conn.source)
        self.state = "failed"
        logger.info("router.sasl_failed", extra={"host": self.conn.host, "reason": reason,
                                                 "mechanism": self.mechanism})
        self._close_up()
        self.loop.finish(self.conn)

    def _refuse_unavailable(self) -> None:
        self._fail(f"auth service {self.service} unavailable", sasl.SYS_TEMP)

    def _client_expired(self) -> None:
        if self.state not in ("done", "failed"):
            self._fail("SASL exchange timed out",
                       sasl.SYS_TEMP if self.state == "exchange" else None)

    def abort(self) -> None:
        """The client went away."""
        if self.state not in ("done", "failed"):
            self.state = "failed"
        self._close_up()

    # -- the auth service ---------------------------------------------------------------------
    def _connect(self) -> None:
        if self.state != "exchange" or self.up is not None:  # gone while it waited
            return
        try:
            family, kind, proto, address = self.service.address()
            self.up = socket.socket(family, kind, proto)
            self.up.setblocking(False)
            self.up.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            err = self.up.connect_ex(address)
        except OSError as exc:
            self._up_failed(f"connect: {exc}")
            return
        if err not in (0, errno.EINPROGRESS):
            self._up_failed(f"connect: {errno.errorcode.get(err, err)}")
            return
        self.up_state = "connecting"
        self._up_register(selectors.EVENT_WRITE)
        self.up_out += sasl.SASL_HEADER
        self.loop.call_later(SERVICE_TIMEOUT, self._up_expired)

    def _up_register(self, mask: int) -> None:
        if mask == self.up_mask or self.up is None:
            return
        if self.up_mask == 0:
            self.loop.selector.register(self.up, mask, ("relay", self))
        elif mask == 0:
            self.loop.selector.unregister(self.up)
        else:
            self.loop.selector.modify(self.up, mask, ("relay", self))
        self.up_mask = mask

    def _up_send(self, data: bytes) -> None:
        self.up_out += data
        if self.up_state != "connecting":
            self._up_flush()

    def _up_flush(self) -> None:
        if self.up_state == "tls":
            return  # sent once the handshake is over
        try:
            while self.up_out:
                sent = self.up.send(self.up_out)
                del self.up_out[:sent]
        except (BlockingIOError, InterruptedError, ssl.SSLWantReadError, ssl.SSLWantWriteError):
            pass
        except OSError as exc:
            self._up_failed(f"send: {exc}")
            return
        self._up_register(selectors.EVENT_READ | (selectors.EVENT_WRITE if self.up_out else 0))

    def on_ready(self, mask: int) -> None:
        """The selector's word on the auth service's socket."""
        if self.up is None:
            return
        if self.up_state == "connecting":
            err = self.up.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
            if err:
                self._up_failed(f"connect: {errno.errorcode.get(err, err)}")
                return
            if self.service.tls is not None:
                self._start_tls()
                return
            self.up_state = "header"
        if self.up_state == "tls":
            self._handshake()
            return
        if mask & selectors.EVENT_WRITE:
            self._up_flush()
        if self.up is not None and mask & selectors.EVENT_READ:
            self._up_read()

    def _start_tls(self) -> None:
        """The socket as TLS, its handshake driven by the selector like every other step."""
        self._up_register(0)  # the wrapped socket is a new object on the same descriptor
        try:
            self.up = self.service.tls.wrap_socket(self.up, server_hostname=self.service.host,
                                                   do_handshake_on_connect=False)
        except (OSError, ValueError) as exc:
            self._up_failed(f"TLS: {exc}")
            return
        self.up_state = "tls"
        self._handshake()

    def _handshake(self) -> None:
        try:
            self.up.do_handshake()
        except ssl.SSLWantReadError:
            self._up_register(selectors.EVENT_READ)
            return
        except ssl.SSLWantWriteError:
            self._up_register(selectors.EVENT_WRITE)
            return
        except ssl.SSLCertVerificationError as exc:
            logger.error("router.auth_service_untrusted", extra={
                "service": str(self.service), "reason": exc.verify_message})
            self._up_failed(f"TLS: the auth service's certificate: {exc.verify_message}")
            return
        except OSError as exc:  # ssl.SSLError included: not TLS, or a broken handshake
            self._up_failed(f"TLS: {exc}")
            return
        self.up_state = "header"
        self._up_flush()

    def _up_read(self) -> None:
        try:
            data = self.up.recv(1 << 16)
            # TLS may hold decrypted bytes the selector will not report again
            while data and self.service.tls is not None and self.up.pending():
                data += self.up.recv(self.up.pending())
        except (BlockingIOError, InterruptedError, ssl.SSLWantReadError, ssl.SSLWantWriteError):
            return
        except OSError as exc:
            self._up_failed(f"recv: {exc}")
            return
        if not data:
            self._up_failed("closed by the auth service")
            return
        try:
            self.up_in.feed(data)
            self._up_progress()
        except sasl.ProtocolError as exc:
            self._up_failed(str(exc))

    def _up_progress(self) -> None:
        if self.up_state == "header":
            header = self.up_in.header()
            if header is None:
                return
            if header != sasl.SASL_HEADER:
                raise sasl.ProtocolError("the auth service does not speak SASL")
            self.up_state = "sasl"
        while self.up_state == "sasl":
            frame = self.up_in.performative(sasl.SASL_FRAME)
            if frame is None:
                return
            if frame.code == sasl.MECHANISMS and self.pending_init is not None:
                offered = sasl.symbols(frame.field(0, []))
                self.service.mechanisms = offered or list(_FALLBACK_MECHANISMS)
                if self.mechanism not in offered:
                    self._close_up()
                    self._fail(f"mechanism {self.mechanism} is not offered", sasl.AUTH)
                    return
                init, self.pending_init = self.pending_init, None
                self._up_send(init)
            elif frame.code == sasl.CHALLENGE and self.state == "exchange":
                self.loop.send_plain(self.conn, sasl.challenge(frame.field(0, b"")))
            elif frame.code == sasl.OUTCOME and self.state == "exchange":
                code = frame.field(0)
                if code != sasl.OK:
                    self._close_up()
                    self._fail("refused by the auth service",
                               code if code in (sasl.AUTH, sasl.SYS, sasl.SYS_PERM,
                                                sasl.SYS_TEMP) else sasl.SYS)
                    return
                self.up_state = "amqp-header"
                self._up_send(sasl.AMQP_HEADER + sasl.client_open("maas-router"))
            else:
                raise sasl.ProtocolError(f"unexpected SASL frame {frame.code:#x}")
        if self.up_state == "amqp-header":
            header = self.up_in.header()
            if header is None:
                return
            if header != sasl.AMQP_HEADER:
                raise sasl.ProtocolError("expected the AMQP header after SASL")
            self.up_state = "open"
        if self.up_state == "open":
            frame = self.up_in.performative(sasl.AMQP_FRAME)
            if frame is None:
                return
            if frame.code != sasl.OPEN:
                raise sasl.ProtocolError(f"expected open, got {frame.code:#x}")
            self.up_state = "closing"
            self._up_send(sasl.close_frame())
            self._on_identity(sasl.authenticated_sub(frame))
        if self.up_state == "closing":
            try:
                frame = self.up_in.performative(sasl.AMQP_FRAME)
            except sasl.ProtocolError:
                frame = None
                self._close_up()
            if frame is not None:
                self._close_up()

    def _on_identity(self, sub: str | None) -> None:
        if self.state != "exchange":
            return
        if sub is None:
            self._fail("the auth service's open has no identity", sasl.SYS)
        elif not self.admit(sub):
            self._fail(f"identity {sub[:255]} is not admitted on this listener", sasl.AUTH)
        else:
            self._succeed(sub)

    def _up_failed(self, reason: str) -> None:
        """The auth service is gone or broke the protocol: the client gets sys-temp."""
        if self.up_state == "closing":  # the identity is read; this was the goodbye
            self._close_up()
            return
        logger.warning("router.auth_service_failed", extra={"service": str(self.service),
                                                            "reason": reason})
        self._close_up()
        if self.state in ("done", "failed"):
            return
        self.unavailable = True
        if self.state == "exchange":
            self._refuse_unavailable()

    def _up_expired(self) -> None:
        if self.up is not None and self.up_state != "closing":
            self._up_failed("timed out")
        elif self.up is not None:
            self._close_up()

    def _close_up(self) -> None:
        if self.up is None:
            return
        self._up_register(0)
        self.up.close()
        self.up, self.up_state = None, "closed"
