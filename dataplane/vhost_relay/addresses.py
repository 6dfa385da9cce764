"""Bare address names for a brokered space's AMQP clients: the attach frames of a relayed
connection rewritten between EnMasse's names (`orders`) and RabbitMQ 3.10's
(`/exchange/orders`, `/amq/queue/orders`), both ways; sans I/O.

A sender's bare target becomes `/exchange/<name>` (a queue's fanout exchange or a topic's
exchange: both are named as the address); a receiver's bare source becomes
`/amq/queue/<name>` for a queue or subscription and `/exchange/<name>/#` for a topic (a queue
of its own, RabbitMQ's server-named one). Which one a receiver's name is, `kinds` tells (the
relay reads it from the broker). An address that starts with `/` (the broker's own forms) or
that is not a string passes unchanged, and so does every frame that is not an attach: they
are streamed through without being decoded. The broker's answer gets the client's name back,
so the client sees the terminus it asked for.
"""
import struct
from collections.abc import Callable

from proton import Data, Described, symbol, ulong

from .preamble import ProtocolError, decode

HEADER = struct.Struct(">IBBH")  # size, data offset (4-byte words), type, channel
ATTACH_CODE = 0x12
OPEN_CODE = b"\x00\x53\x10"  # an AMQP open, small-ulong descriptor (a SASL frame has 0x40-0x44)
ATTACH = (ulong(ATTACH_CODE), symbol("amqp:attach:list"))
SOURCE, TARGET = 5, 6  # the attach's fields (AMQP 1.0 section 2.7.3)
NAME, ROLE = 0, 2  # role: False a sender, True a receiver
MAX_ATTACH = 256 * 1024  # an attach is ~100-500 bytes; bound on what is buffered to rewrite it
MAX_UNANSWERED = 4096  # rewritten attaches awaiting the broker's answer, per connection
ESCAPED_SLASH = "%2F"  # RabbitMQ's AMQP 1.0 addresses decode it to `/` (one path segment)

QUEUE, TOPIC = "queue", "topic"


def segment(name: str) -> str:
    """`name` as one segment of a RabbitMQ address (a `/` in it would split it)."""
    return name.replace("/", ESCAPED_SLASH)


def broker_address(name: str, receiver: bool, kind: str | None) -> str:
    """What RabbitMQ 3.10 calls the address `name` (bare), for a receiver or a sender."""
    if not receiver:
        return f"/exchange/{segment(name)}"
    if kind == TOPIC:
        return f"/exchange/{segment(name)}/#"
    return f"/amq/queue/{segment(name)}"  # unknown too: the broker refuses a missing queue


def bare(address) -> bool:
    return isinstance(address, str) and bool(address) and not address.startswith("/")


class Needs(Exception):
    """The kind of `name` is not known yet: ask the broker, then feed the rest again."""

    def __init__(self, name: str):
        super().__init__(name)
        self.name = name


class Frames:
    """Walks one direction of an AMQP connection frame by frame and rewrites attaches.

    `feed(data)` returns the bytes to pass on now. The client's direction (`client=True`)
    starts after its open (the preamble has passed it) and rewrites bare names; the broker's
    starts at its first byte (protocol headers and SASL frames pass) and puts the client's
    names back into the broker's attaches. `kind(name)` answers `queue`, `topic` or None,
    and raises `Needs` when it must ask first: then `needs` names it, nothing from the attach
    on has been passed, and `feed(b"")` after the answer goes on where it stopped."""

    def __init__(self, client: bool, links: dict, kind: Callable[[str], str | None] = None):
        self.client, self.links, self.kind = client, links, kind
        self.buffer = b""
        self.skip = 0  # bytes of the current frame still to pass through untouched
        self.needs: str | None = None  # the name whose kind the last feed waits for
        self.opened = False  # the broker's direction: its open passed (the login succeeded)

    def feed(self, data: bytes) -> bytes:
        out = bytearray()
        if self.skip:  # the rest of a frame that is not an attach: pass it as it comes
            n = min(self.skip, len(data))
            out += data[:n]
            data, self.skip = data[n:], self.skip - n
        buf = self.buffer + data if self.buffer else bytes(data)
        pos = passed = 0  # buf[passed:pos] are whole frames to pass unchanged
        self.needs = None
        while pos < len(buf):
            found = self._frame(buf, pos)
            if found is None:
                break
            end, attach = found
            if end > len(buf):  # streamed: the rest of the frame passes as it comes
                self.skip, pos = end - len(buf), len(buf)
                break
            if attach:
                try:
                    rewritten = self._attach(buf[pos:end])
                except Needs as need:  # the attach and what follows wait for the answer
                    self.needs = need.name
                    break
                out += buf[passed:pos]
                out += rewritten
                passed = end
            pos = end
        out += buf[passed:pos]
        self.buffer = buf[pos:]
        return bytes(out)

    def _frame(self, buf: bytes, pos: int) -> tuple[int, bool] | None:
        """(where the frame or protocol header at `pos` ends, whether it may be an attach);
        None: not known yet. An end past the buffer is a frame to stream; a frame that may be
        an attach is only ever returned whole."""
        head = buf[pos:pos + 8]
        if head[:4] == b"AMQP"[:len(head[:4])]:  # a protocol header (SASL's, then AMQP's)
            return (pos + 8, False) if len(head) == 8 else None
        if len(head) < HEADER.size:
            return None
        size, doff, _, _ = HEADER.unpack(head)
        start = doff * 4
        if doff < 2 or size < start:
            raise ProtocolError(f"bad frame header (size {size}, offset {doff})")
        code = buf[pos + start:pos + start + 3]
        if size > start and len(code) < 3:
            return None
        if not self.client and size > start and code[:3] == OPEN_CODE:
            self.opened = True
        if size == start or code[0] != 0x00 or code[1] not in (0x53, 0x80, 0xa3) \
                or (code[1] == 0x53 and code[2] != ATTACH_CODE):
            return pos + size, False  # a heartbeat, or a performative other than attach
        if size > MAX_ATTACH:
            raise ProtocolError(f"a frame of {size} bytes that may be an attach")
        return (pos + size, True) if len(buf) >= pos + size else None

    def _attach(self, frame: bytes) -> bytes:
        start = frame[4] * 4
        descriptor, fields, rest = decode(frame[start:])
        if descriptor not in ATTACH or len(fields) <= ROLE:
            return frame
        name, role = fields[NAME], bool(fields[ROLE])
        # The client's sender (role False) names a target; its receiver a source. The broker's
        # answer has the opposite role for the same terminus.
        receiver = role if self.client else not role
        index = SOURCE if receiver else TARGET
        terminus = fields[index] if len(fields) > index else None
        if not isinstance(terminus, Described) or not isinstance(terminus.value, list) \
                or not terminus.value:
            return frame
        address = terminus.value[0]
        if self.client:
            if not bare(address):
                return frame
            kind = self.kind(address) if receiver else None  # may raise Needs
            new = broker_address(address, receiver, kind)
            if len(self.links) >= MAX_UNANSWERED and name not in self.links:
                raise ProtocolError(f"more than {MAX_UNANSWERED} attaches the broker has not "
                                    "answered")
            self.links[name] = (new, address)
        else:
            was = self.links.pop(name, None)
            if was is None or address != was[0]:
                return frame
            new = was[1]
        terminus = Described(terminus.descriptor, [new] + list(terminus.value[1:]))
        fields = list(fields)
        fields[index] = terminus
        data = Data()
        data.put_object(Described(descriptor, fields))
        body = data.encode() + rest
        return HEADER.pack(start + len(body), *HEADER.unpack_from(frame)[1:]) + \
            frame[HEADER.size:start] + body
