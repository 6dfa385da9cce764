"""The client's bytes up to its AMQP open: the vhost read from a SASL PLAIN login, and the
open frame re-encoded with hostname `vhost:<vhost>`; sans I/O."""
import struct

from proton import Array, Data, Described, ulong

SASL_HEADER = b"AMQP\x03\x01\x00\x00"
AMQP_HEADER = b"AMQP\x00\x01\x00\x00"
MAX_FRAME = 64 * 1024  # bound on the frames parsed before the open (an open is ~100-500 bytes)
FRAME_HEADER = struct.Struct(">IBBH")  # size, data offset (4-byte words), type, channel
SASL_INIT = (ulong(0x41), "amqp:sasl-init:list")
OPEN = (ulong(0x10), "amqp:open:list")
SEPARATOR = "@"  # workers.naming.USER_SEPARATOR, not imported: the relay imports no app


class ProtocolError(Exception):
    """The client's bytes are not the AMQP preamble the relay expects."""


class Preamble:
    """Parses the client's bytes until its AMQP open and rewrites the open's hostname.

    `feed` returns the bytes to send to the broker now; once `done`, it returns its input as
    it is. A login without `@<vhost>` (or no SASL at all) is never changed."""

    def __init__(self, split: bool = False):
        self.split = split  # keep what follows the open in `rest` instead of returning it
        self.rest = b""
        self.buffer = bytearray()
        self.expect = "header"  # header -> sasl -> header -> open
        self.vhost: str | None = None
        self.user: str | None = None
        self.done = False

    def feed(self, data: bytes) -> bytes:
        if self.done:
            return data
        self.buffer += data
        out = bytearray()
        while not self.done:
            step = self._step()
            if step is None:
                break
            out += step
        if self.done:
            self.rest = bytes(self.buffer)
            self.buffer = bytearray()
            if not self.split:
                out += self.rest
        return bytes(out)

    def _step(self) -> bytes | None:
        if self.expect == "header" or (self.expect == "sasl" and self.buffer[:4] == b"AMQP"):
            return self._header()
        return self._frame()

    def _header(self) -> bytes | None:
        if len(self.buffer) < 8:
            if not SASL_HEADER.startswith(bytes(self.buffer[:4])):
                raise ProtocolError("not an AMQP protocol header")
            return None
        header = bytes(self.buffer[:8])
        del self.buffer[:8]
        if header == SASL_HEADER and self.expect == "header":
            self.expect = "sasl"
        elif header == AMQP_HEADER:
            # Without SASL there is no login to read the vhost from: nothing to change.
            self.expect, self.done = "open", self.expect == "header"
        else:
            raise ProtocolError(f"unexpected protocol header {header!r}")
        return header

    def _frame(self) -> bytes | None:
        if len(self.buffer) < FRAME_HEADER.size:
            return None
        size, doff, ftype, channel = FRAME_HEADER.unpack_from(self.buffer)
        if size > MAX_FRAME or doff < 2 or doff * 4 > size:
            raise ProtocolError(f"bad frame header (size {size}, offset {doff})")
        if len(self.buffer) < size:
            return None
        frame = bytes(self.buffer[:size])
        del self.buffer[:size]
        if ftype != (1 if self.expect == "sasl" else 0):
            raise ProtocolError(f"unexpected frame type {ftype}")
        body = frame[doff * 4:]
        if not body:  # an empty frame (heartbeat) carries nothing to look at
            return frame
        descriptor, fields, rest = decode(body)
        if self.expect == "sasl":
            if descriptor in SASL_INIT:
                self._login(fields)
            return frame
        if descriptor not in OPEN:
            raise ProtocolError("the first AMQP frame is not an open")
        self.done = True
        if self.vhost is None:
            return frame
        fields = list(fields) + [None] * max(0, 2 - len(fields))
        fields[1] = f"vhost:{self.vhost}"
        data = Data()
        data.put_object(Described(ulong(0x10), fields))
        body = data.encode() + rest
        return FRAME_HEADER.pack(doff * 4 + len(body), doff, ftype, channel) + \
            frame[FRAME_HEADER.size:doff * 4] + body

    def _login(self, fields: list) -> None:
        mechanism = fields[0] if fields else None
        response = fields[1] if len(fields) > 1 else None
        if mechanism == "PLAIN" and isinstance(response, bytes):
            parts = response.split(b"\0")
            if len(parts) == 3:  # authzid \0 authcid \0 password
                self.user = parts[1].decode("utf-8", "replace")
                user, sep, vhost = self.user.rpartition(SEPARATOR)
                self.vhost = vhost if sep and user and vhost else None
        if self.vhost is None:
            # No vhost to set: the rest of the stream needs no parsing.
            self.done = True


def decode(body: bytes) -> tuple[object, list, bytes]:
    """(descriptor, fields, bytes after the performative) of a frame body."""
    data = Data()
    try:
        used = data.decode(body)
        data.rewind()
        data.next()
        value = _owned(data.get_object())
    except Exception as exc:  # noqa: BLE001 - proton's decoder raises many kinds on garbage
        raise ProtocolError(f"undecodable performative: {exc}") from exc
    if not isinstance(value, Described) or not isinstance(value.value, list):
        raise ProtocolError("a performative is a described list")
    return value.descriptor, value.value, body[used:]


def _owned(value):
    """`value` with its binaries copied: proton hands them out as views into the Data's own
    buffer, which is freed with the Data."""
    if isinstance(value, memoryview):
        return bytes(value)
    if isinstance(value, list):
        return [_owned(v) for v in value]
    if isinstance(value, dict):
        return {_owned(k): _owned(v) for k, v in value.items()}
    if isinstance(value, Described):
        return Described(_owned(value.descriptor), _owned(value.value))
    if isinstance(value, Array):
        return Array(value.descriptor, value.type, *(_owned(v) for v in value.elements))
    return value
