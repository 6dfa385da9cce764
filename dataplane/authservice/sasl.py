"""AMQP 1.0 framing for the auth service and the embedded router's SASL relay: protocol headers,
SASL frames and the open/close exchange after them, encoded and decoded with proton's codec
(`proton.Data`), read from a blocking socket (`Reader`) or as bytes arrive (`FrameBuffer`).
No Django."""
import socket
import struct
import time
from dataclasses import dataclass

from proton import Array, Data, DataException, Described

SASL_HEADER = b"AMQP\x03\x01\x00\x00"
AMQP_HEADER = b"AMQP\x00\x01\x00\x00"
AMQP_FRAME, SASL_FRAME = 0, 1

MECHANISMS, INIT, CHALLENGE, RESPONSE, OUTCOME = 0x40, 0x41, 0x42, 0x43, 0x44
OPEN, CLOSE = 0x10, 0x18
# Descriptors may also be sent as symbols (AMQP 1.0 part 1, 1.5).
_SYMBOLIC = {"amqp:sasl-mechanisms:list": MECHANISMS, "amqp:sasl-init:list": INIT,
             "amqp:sasl-challenge:list": CHALLENGE, "amqp:sasl-response:list": RESPONSE,
             "amqp:sasl-outcome:list": OUTCOME, "amqp:open:list": OPEN, "amqp:close:list": CLOSE}
ERROR = 0x1D

# sasl-outcome codes
OK, AUTH, SYS, SYS_PERM, SYS_TEMP = 0, 1, 2, 3, 4

MAX_FRAME = 64 * 1024  # a SASL exchange or an open is a few hundred bytes
_FRAME_HEADER = struct.Struct(">IBBH")  # size, data offset (4-byte words), type, channel


class ProtocolError(Exception):
    """The peer broke the protocol, sent too much, was too slow or went away: drop it."""


@dataclass(frozen=True)
class Performative:
    code: int
    fields: list  # positional; trailing fields a peer left out are absent

    def field(self, index: int, default=None):
        value = self.fields[index] if index < len(self.fields) else None
        return default if value is None else value


# Encoding --------------------------------------------------------------------------------

def frame(frame_type: int, body: bytes, channel: int = 0) -> bytes:
    return _FRAME_HEADER.pack(8 + len(body), 2, frame_type, channel) + body


def _performative(code: int, fill) -> bytes:
    data = Data()
    data.put_described()
    data.enter()
    data.put_ulong(code)
    data.put_list()
    data.enter()
    fill(data)
    data.exit()
    data.exit()
    return bytes(data.encode())


def _symbols(data: Data, names) -> None:
    data.put_array(False, Data.SYMBOL)
    data.enter()
    for name in names:
        data.put_symbol(name)
    data.exit()


def mechanisms(names: list[str]) -> bytes:
    return frame(SASL_FRAME, _performative(MECHANISMS, lambda d: _symbols(d, names)))


def challenge(payload: bytes) -> bytes:
    return frame(SASL_FRAME, _performative(CHALLENGE, lambda d: d.put_binary(payload)))


def outcome(code: int) -> bytes:
    return frame(SASL_FRAME, _performative(OUTCOME, lambda d: d.put_ubyte(code)))


def init(mechanism: str, initial_response: bytes | None, hostname: str | None = None) -> bytes:
    def fill(d: Data) -> None:
        d.put_symbol(mechanism)
        if initial_response is None:
            d.put_null()
        else:
            d.put_binary(initial_response)
        if hostname is None:
            d.put_null()
        else:
            d.put_string(hostname)

    return frame(SASL_FRAME, _performative(INIT, fill))


def response(payload: bytes) -> bytes:
    return frame(SASL_FRAME, _performative(RESPONSE, lambda d: d.put_binary(payload)))


def client_open(container_id: str, max_frame: int = MAX_FRAME,
                hostname: str | None = None) -> bytes:
    """The open of a client that only wants the peer's open in return (the router's, to the
    auth service; `hostname` names a router's vhost)."""

    def fill(d: Data) -> None:
        d.put_string(container_id)
        d.put_string(hostname) if hostname is not None else d.put_null()
        d.put_uint(max_frame)

    return frame(AMQP_FRAME, _performative(OPEN, fill))


def symbols(value) -> list[str]:
    """A multiple-symbol field (sasl-server-mechanisms): one symbol or an array of them."""
    if isinstance(value, Array):
        value = list(value.elements)
    elif isinstance(value, str):
        value = [value]
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ProtocolError("expected symbols")
    return [str(v) for v in value]


def authenticated_sub(peer_open: "Performative") -> str | None:
    """`authenticated-identity`.`sub` of an auth service's open (properties, field 9)."""
    properties = peer_open.field(9, {})
    identity = properties.get("authenticated-identity") if isinstance(properties, dict) else None
    sub = identity.get("sub") if isinstance(identity, dict) else None
    return sub if isinstance(sub, str) and sub else None


def open_frame(container_id: str, sub: str, preferred_username: str,
               address_authz: dict[str, list[str]] | None = None,
               max_frame: int = MAX_FRAME) -> bytes:
    """The open qdrouterd's auth service plugin reads (remote_sasl.c): the identity under
    `authenticated-identity`.`sub`, and, only if given, `address-authz` as {string: array of
    string} with the ADDRESS-AUTHZ capability. MaaS gives none (docs/router.md)."""

    def fill(d: Data) -> None:
        d.put_string(container_id)
        d.put_null()  # hostname
        d.put_uint(max_frame)
        for _ in range(4):  # channel-max, idle-time-out, outgoing-locales, incoming-locales
            d.put_null()
        if address_authz is None:
            d.put_null()  # offered-capabilities
        else:
            _symbols(d, ["ADDRESS-AUTHZ"])
        d.put_null()  # desired-capabilities
        d.put_map()
        d.enter()
        d.put_symbol("authenticated-identity")
        d.put_map()
        d.enter()
        for key, value in (("sub", sub), ("preferred_username", preferred_username)):
            d.put_string(key)
            d.put_string(value)
        d.exit()
        if address_authz is None:
            d.exit()
            return
        d.put_symbol("address-authz")
        d.put_map()
        d.enter()
        for pattern, grants in address_authz.items():
            d.put_string(pattern)
            d.put_array(False, Data.STRING)  # the plugin reads nothing but an array of strings
            d.enter()
            for grant in grants:
                d.put_string(grant)
            d.exit()
        d.exit()
        d.exit()

    return frame(AMQP_FRAME, _performative(OPEN, fill))


def close_frame(condition: str | None = None, description: str = "") -> bytes:
    def fill(d: Data) -> None:
        if condition is None:
            return
        d.put_described()
        d.enter()
        d.put_ulong(ERROR)
        d.put_list()
        d.enter()
        d.put_symbol(condition)
        d.put_string(description)
        d.exit()
        d.exit()

    return frame(AMQP_FRAME, _performative(CLOSE, fill))


# Decoding --------------------------------------------------------------------------------

def decode(body: bytes) -> Performative:
    """One frame body: a described list and nothing after it (no frame we accept has a payload)."""
    data = Data()
    try:
        used = data.decode(body)
        data.rewind()
        data.next()
        value = data.get_object()
    except (DataException, TypeError, ValueError, KeyError, RecursionError) as exc:
        raise ProtocolError(f"undecodable frame body: {exc}") from exc
    if used != len(body) or not isinstance(value, Described) or not isinstance(value.value, list):
        raise ProtocolError("a frame body is not one described list")
    code = value.descriptor
    code = _SYMBOLIC.get(code) if isinstance(code, str) else code
    if not isinstance(code, int):
        raise ProtocolError("unknown descriptor")
    return Performative(int(code), [_owned(v) for v in value.value])


def _owned(value):
    """Binary values decode as memoryviews into the codec's buffer: copy them out of it."""
    if isinstance(value, memoryview):
        return value.tobytes()
    if isinstance(value, list):
        return [_owned(v) for v in value]
    if isinstance(value, dict):
        return {_owned(k): _owned(v) for k, v in value.items()}
    return value


def plain(response: bytes) -> tuple[str, str, str]:
    """authzid, authcid, password of a SASL PLAIN message (RFC 4616)."""
    if not isinstance(response, bytes):
        raise ProtocolError("a PLAIN response is binary")
    try:
        authzid, authcid, password = response.decode("utf-8").split("\0")
    except (UnicodeDecodeError, ValueError) as exc:
        raise ProtocolError("malformed PLAIN response") from exc
    if not authcid or not password:
        raise ProtocolError("PLAIN needs a user and a password")
    return authzid, authcid, password


def _frame_header(header: bytes, max_frame: int) -> tuple[int, int, int]:
    """(size, data offset, type) of a frame header, or ProtocolError if it is out of bounds."""
    size, offset, kind, _channel = _FRAME_HEADER.unpack(header)
    if size < 8 or size > max_frame or offset < 2 or offset * 4 > size:
        raise ProtocolError(f"bad frame (size {size}, data offset {offset})")
    return size, offset, kind


class FrameBuffer:
    """Headers and frames of a non-blocking peer, as its bytes arrive: each call returns None
    until a whole header or frame is there. Holds at most `max_buffer` bytes."""

    def __init__(self, max_frame: int = MAX_FRAME, max_buffer: int = 2 * MAX_FRAME):
        self.max_frame, self.max_buffer = max_frame, max_buffer
        self.buffer = bytearray()

    def feed(self, data: bytes) -> None:
        self.buffer += data
        if len(self.buffer) > self.max_buffer:
            raise ProtocolError("the peer sent too much")

    def header(self) -> bytes | None:
        if len(self.buffer) < 8:
            return None
        out = bytes(self.buffer[:8])
        del self.buffer[:8]
        return out

    def performative(self, frame_type: int) -> Performative | None:
        """The next non-empty frame of `frame_type`; empty frames (heartbeats) are skipped."""
        while len(self.buffer) >= 8:
            size, offset, kind = _frame_header(bytes(self.buffer[:8]), self.max_frame)
            if len(self.buffer) < size:
                return None
            if kind != frame_type:
                raise ProtocolError(f"frame type {kind}, expected {frame_type}")
            body = bytes(self.buffer[offset * 4:size])
            del self.buffer[:size]
            if body:
                return decode(body)
        return None

    def take(self) -> bytes:
        """Whatever is left (the bytes after the last frame read)."""
        out = bytes(self.buffer)
        self.buffer.clear()
        return out


class Reader:
    """Headers and frames from a socket, under one deadline for the whole exchange."""

    def __init__(self, sock: socket.socket, deadline: float, max_frame: int = MAX_FRAME):
        self.sock, self.deadline, self.max_frame = sock, deadline, max_frame
        self.buffer = b""

    def _exactly(self, n: int) -> bytes:
        while len(self.buffer) < n:
            left = self.deadline - time.monotonic()
            if left <= 0:
                raise ProtocolError("handshake timed out")
            self.sock.settimeout(left)
            try:
                chunk = self.sock.recv(max(n - len(self.buffer), 4096))
            except TimeoutError as exc:
                raise ProtocolError("handshake timed out") from exc
            except OSError as exc:
                raise ProtocolError(f"connection lost: {exc}") from exc
            if not chunk:
                raise ProtocolError("peer disconnected")
            self.buffer += chunk
        out, self.buffer = self.buffer[:n], self.buffer[n:]
        return out

    def header(self) -> bytes:
        return self._exactly(8)

    def performative(self, frame_type: int) -> Performative:
        """The next non-empty frame of `frame_type`; empty frames (heartbeats) are skipped."""
        while True:
            size, offset, kind = _frame_header(self._exactly(8), self.max_frame)
            rest = self._exactly(size - 8)
            if kind != frame_type:
                raise ProtocolError(f"frame type {kind}, expected {frame_type}")
            body = rest[offset * 4 - 8:]
            if body:
                return decode(body)
