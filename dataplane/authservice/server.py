"""The auth service a router delegates SASL to (qdrouterd's authServicePlugin): SASL PLAIN checked
by a verifier, then an AMQP open carrying the user's identity and address permissions. No Django."""
import logging
import socket
import socketserver
import ssl
import threading
import time

from ..control import Identity, Verifier
from . import sasl

logger = logging.getLogger(__name__)


__all__ = ["AuthServer", "Identity", "Verifier", "handshake"]


def handshake(sock: socket.socket, verify: Verifier, *, container_id: str,
              timeout: float) -> Identity | None:
    """One connection from start to close: the identity it authenticated, or None."""
    reader = sasl.Reader(sock, time.monotonic() + timeout)
    if reader.header() != sasl.SASL_HEADER:
        sock.sendall(sasl.SASL_HEADER)  # the header we speak, then close (AMQP 1.0 part 2, 2.2)
        raise sasl.ProtocolError("the peer did not start with SASL")
    sock.sendall(sasl.SASL_HEADER + sasl.mechanisms(["PLAIN"]))
    init = reader.performative(sasl.SASL_FRAME)
    if init.code != sasl.INIT:
        raise sasl.ProtocolError(f"expected sasl-init, got {init.code:#x}")
    if init.field(0) != "PLAIN":
        sock.sendall(sasl.outcome(sasl.AUTH))
        raise sasl.ProtocolError(f"mechanism {str(init.field(0))[:40]!r} is not offered")
    response = init.field(1, b"")
    if not response:  # PLAIN may wait for an empty challenge (RFC 4616, 2)
        sock.sendall(sasl.challenge(b""))
        reply = reader.performative(sasl.SASL_FRAME)
        if reply.code != sasl.RESPONSE:
            raise sasl.ProtocolError(f"expected sasl-response, got {reply.code:#x}")
        response = reply.field(0, b"")
    code, login, identity = _check(response, verify)
    sock.sendall(sasl.outcome(code))
    if identity is None:
        logger.info("authservice.refused", extra={"login": login[:255], "outcome": code})
        return None
    logger.info("authservice.authenticated", extra={"sub": identity.sub})
    _open_and_close(sock, reader, identity, container_id)
    return identity


def _check(response: bytes, verify: Verifier) -> tuple[int, str, Identity | None]:
    """The sasl-outcome code, the login and the identity it verified (None unless OK)."""
    try:
        authzid, login, password = sasl.plain(response)
    except sasl.ProtocolError:
        return sasl.AUTH, "", None
    if authzid and authzid != login:  # acting as someone else is not offered
        return sasl.AUTH, login, None
    try:
        identity = verify(login, password)
    except Exception:  # e.g. the database is down: a transient error, the client may retry
        logger.exception("authservice.verifier_failed", extra={"login": login[:255]})
        return sasl.SYS_TEMP, login, None
    return (sasl.AUTH if identity is None else sasl.OK), login, identity


def _open_and_close(sock, reader: sasl.Reader, identity: Identity, container_id: str) -> None:
    if reader.header() != sasl.AMQP_HEADER:
        raise sasl.ProtocolError("expected the AMQP header after SASL")
    sock.sendall(sasl.AMQP_HEADER)
    peer_open = reader.performative(sasl.AMQP_FRAME)
    if peer_open.code != sasl.OPEN:
        raise sasl.ProtocolError(f"expected open, got {peer_open.code:#x}")
    ours = sasl.open_frame(container_id, identity.sub, identity.preferred_username,
                           identity.address_authz)
    limit = peer_open.field(2, 0)
    if isinstance(limit, int) and limit and len(ours) > limit:
        # An open cannot be split; sending one without address-authz would allow everything.
        raise sasl.ProtocolError(f"our open ({len(ours)} bytes) exceeds the peer's max-frame-size")
    sock.sendall(ours)
    following = reader.performative(sasl.AMQP_FRAME)
    if following.code == sasl.CLOSE:
        sock.sendall(sasl.close_frame())
    else:  # this service has no sessions or links to offer
        sock.sendall(sasl.close_frame("amqp:not-allowed", "authentication service only"))


class _Handler(socketserver.BaseRequestHandler):
    server: "AuthServer"

    def handle(self) -> None:
        server, sock, peer = self.server, self.request, self.client_address
        # Small frames written back to back (the AMQP header, then the open): without this,
        # Nagle holds the second until the router's delayed ACK, 40 ms per login.
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        try:
            if server.ssl_context is not None:
                sock.settimeout(server.handshake_timeout)
                sock = server.ssl_context.wrap_socket(sock, server_side=True)
            handshake(sock, server.verify, container_id=server.container_id,
                      timeout=server.handshake_timeout)
        except (sasl.ProtocolError, OSError) as exc:  # ssl.SSLError is an OSError
            logger.info("authservice.dropped", extra={"peer": peer[0], "reason": str(exc)})
        finally:
            if sock is not self.request:
                sock.close()  # the TLS socket took over the file descriptor


class AuthServer(socketserver.ThreadingTCPServer):
    """A thread per connection, at most `max_connections` at once (more are dropped)."""

    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 128

    def __init__(self, address: tuple[str, int], verify: Verifier, *,
                 ssl_context: ssl.SSLContext | None = None, handshake_timeout: float = 10.0,
                 max_connections: int = 256, container_id: str = "maas-auth-service"):
        self.verify, self.ssl_context = verify, ssl_context
        self.handshake_timeout, self.container_id = handshake_timeout, container_id
        self._slots = threading.BoundedSemaphore(max_connections)
        super().__init__(address, _Handler)

    def process_request(self, request, client_address) -> None:
        if not self._slots.acquire(blocking=False):
            logger.warning("authservice.busy", extra={"peer": client_address[0]})
            self.shutdown_request(request)
            return
        try:
            super().process_request(request, client_address)
        except BaseException:
            self._slots.release()
            raise

    def process_request_thread(self, request, client_address) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self._slots.release()

    def handle_error(self, request, client_address) -> None:
        logger.exception("authservice.error", extra={"peer": client_address[0]})
