"""MQTT 3.1.1 packets: a streaming decoder of what clients send and encoders of what the
gateway answers (OASIS MQTT 3.1.1; protocol level 4, and 3 for MQTT 3.1's `MQIsdp`)."""

import struct
from dataclasses import dataclass, field

CONNECT, CONNACK, PUBLISH, PUBACK, PUBREC, PUBREL, PUBCOMP = 1, 2, 3, 4, 5, 6, 7
SUBSCRIBE, SUBACK, UNSUBSCRIBE, UNSUBACK, PINGREQ, PINGRESP, DISCONNECT = 8, 9, 10, 11, 12, 13, 14

# CONNACK return codes
ACCEPTED, BAD_PROTOCOL, ID_REJECTED, UNAVAILABLE, BAD_LOGIN, NOT_AUTHORIZED = range(6)
SUBACK_FAILURE = 0x80
MAX_PACKET = 1 << 20  # a larger remaining length closes the connection (memory bound)


class ProtocolError(Exception):
    """A malformed packet: the spec says close the network connection."""


@dataclass
class Connect:
    protocol: str
    level: int
    client_id: str
    clean_session: bool
    keep_alive: int
    username: str | None = None
    password: bytes | None = None
    will_topic: str | None = None
    will_payload: bytes = b""
    will_qos: int = 0
    will_retain: bool = False


@dataclass
class Publish:
    topic: str
    payload: bytes
    qos: int = 0
    retain: bool = False
    dup: bool = False
    packet_id: int | None = None


@dataclass
class Subscribe:
    packet_id: int
    filters: list = field(default_factory=list)  # (topic filter, requested QoS)


@dataclass
class Unsubscribe:
    packet_id: int
    filters: list = field(default_factory=list)


def _string(buf, pos: int) -> tuple[str, int]:
    raw, pos = _binary(buf, pos)
    try:
        return raw.decode("utf-8"), pos
    except UnicodeDecodeError as exc:
        raise ProtocolError("string is not UTF-8") from exc


def _binary(buf, pos: int) -> tuple[bytes, int]:
    if pos + 2 > len(buf):
        raise ProtocolError("truncated length")
    (n,) = struct.unpack_from("!H", buf, pos)
    pos += 2
    if pos + n > len(buf):
        raise ProtocolError("truncated field")
    return bytes(buf[pos:pos + n]), pos + n


def _packet_id(buf, pos: int = 0) -> int:
    if len(buf) < pos + 2:
        raise ProtocolError("missing packet identifier")
    return struct.unpack_from("!H", buf, pos)[0]


def _connect(body) -> Connect:
    protocol, pos = _string(body, 0)
    if pos + 4 > len(body):
        raise ProtocolError("truncated CONNECT")
    level, flags = body[pos], body[pos + 1]
    (keep_alive,) = struct.unpack_from("!H", body, pos + 2)
    pos += 4
    if flags & 1:
        raise ProtocolError("reserved CONNECT flag set")
    client_id, pos = _string(body, pos)
    c = Connect(protocol, level, client_id, bool(flags & 2), keep_alive)
    if flags & 4:
        c.will_topic, pos = _string(body, pos)
        c.will_payload, pos = _binary(body, pos)
        c.will_qos, c.will_retain = (flags >> 3) & 3, bool(flags & 32)
        if c.will_qos > 2:
            raise ProtocolError("will QoS 3")
    if flags & 128:
        c.username, pos = _string(body, pos)
    if flags & 64:
        c.password, pos = _binary(body, pos)
    return c


def _publish(flags: int, body) -> Publish:
    qos = (flags >> 1) & 3
    if qos == 3:
        raise ProtocolError("QoS 3")
    topic, pos = _string(body, 0)
    packet_id = None
    if qos:
        packet_id = _packet_id(body, pos)
        pos += 2
    if not topic or "+" in topic or "#" in topic:
        raise ProtocolError("PUBLISH topic empty or with a wildcard")
    return Publish(topic, bytes(body[pos:]), qos, bool(flags & 1), bool(flags & 8), packet_id)


def _subscribe(body, unsubscribe: bool):
    packet_id, pos = _packet_id(body), 2
    out = (Unsubscribe if unsubscribe else Subscribe)(packet_id)
    while pos < len(body):
        topic, pos = _string(body, pos)
        if not topic:
            raise ProtocolError("empty topic filter")
        if unsubscribe:
            out.filters.append(topic)
            continue
        if pos >= len(body) or body[pos] > 2:
            raise ProtocolError("bad requested QoS")
        out.filters.append((topic, body[pos]))
        pos += 1
    if not out.filters:
        raise ProtocolError("no topic filter")
    return out


class Decoder:
    """Bytes in, (packet type, decoded packet) out; keeps partial packets between reads."""

    def __init__(self):
        self.buf = bytearray()

    def feed(self, data: bytes) -> list:
        buf = self.buf
        buf += data
        packets, pos, end = [], 0, len(buf)
        while end - pos >= 2:
            length, shift, i, complete = 0, 0, pos + 1, False
            while i < end:
                byte = buf[i]
                i += 1
                length |= (byte & 127) << shift
                if not byte & 128:
                    complete = True
                    break
                shift += 7
                if shift > 21:
                    raise ProtocolError("remaining length over 4 bytes")
            if not complete:
                break
            if length > MAX_PACKET:
                raise ProtocolError("packet too large")
            if i + length > end:
                break
            packets.append(decode(buf[pos], bytes(buf[i:i + length])))
            pos = i + length
        del buf[:pos]
        return packets


def decode(first: int, body) -> tuple:
    kind, flags = first >> 4, first & 15
    if kind == PUBLISH:
        return kind, _publish(flags, body)
    if kind in (PUBACK, PUBREC, PUBCOMP, UNSUBACK):
        return kind, _packet_id(body)
    if kind == PUBREL:
        return kind, _packet_id(body)
    if kind == CONNECT:
        return kind, _connect(body)
    if kind in (SUBSCRIBE, UNSUBSCRIBE):
        if flags != 2:
            raise ProtocolError("SUBSCRIBE/UNSUBSCRIBE flags must be 2")
        return kind, _subscribe(body, kind == UNSUBSCRIBE)
    if kind in (PINGREQ, DISCONNECT):
        return kind, None
    raise ProtocolError(f"packet type {kind} is not sent by clients")


# -- encoders ----------------------------------------------------------------------------------
def _remaining(n: int) -> bytes:
    out = bytearray()
    while True:
        byte, n = n & 127, n >> 7
        out.append(byte | 128 if n else byte)
        if not n:
            return bytes(out)


def _str(s: str) -> bytes:
    raw = s.encode("utf-8")
    return struct.pack("!H", len(raw)) + raw


def connack(code: int, session_present: bool = False) -> bytes:
    return bytes((CONNACK << 4, 2, 1 if session_present and code == ACCEPTED else 0, code))


def publish(topic: str, payload: bytes, qos: int = 0, packet_id: int | None = None,
            retain: bool = False, dup: bool = False) -> bytes:
    head = _str(topic)
    if qos:
        head += struct.pack("!H", packet_id)
    first = PUBLISH << 4 | qos << 1 | (8 if dup else 0) | (1 if retain else 0)
    return bytes((first,)) + _remaining(len(head) + len(payload)) + head + payload


def ack(kind: int, packet_id: int) -> bytes:
    """PUBACK, PUBREC, PUBREL (flags 2), PUBCOMP or UNSUBACK."""
    return struct.pack("!BBH", kind << 4 | (2 if kind == PUBREL else 0), 2, packet_id)


def suback(packet_id: int, codes: list[int]) -> bytes:
    body = struct.pack("!H", packet_id) + bytes(codes)
    return bytes((SUBACK << 4,)) + _remaining(len(body)) + body


PINGRESP_PACKET = bytes((PINGRESP << 4, 0))


# -- encoders of what clients send (the tests' and the benchmark's raw clients) ----------------
def connect(client_id: str, username: str | None = None, password: bytes | None = None,
            clean_session: bool = True, keep_alive: int = 60, will: Publish | None = None,
            level: int = 4) -> bytes:
    flags = (2 if clean_session else 0) | (128 if username is not None else 0) \
        | (64 if password is not None else 0)
    payload = _str(client_id)
    if will is not None:
        flags |= 4 | will.qos << 3 | (32 if will.retain else 0)
        payload += _str(will.topic) + struct.pack("!H", len(will.payload)) + will.payload
    if username is not None:
        payload += _str(username)
    if password is not None:
        payload += struct.pack("!H", len(password)) + password
    body = _str("MQTT") + bytes((level, flags)) + struct.pack("!H", keep_alive) + payload
    return bytes((CONNECT << 4,)) + _remaining(len(body)) + body


def subscribe(packet_id: int, filters: list[tuple[str, int]]) -> bytes:
    body = struct.pack("!H", packet_id) + b"".join(_str(t) + bytes((q,)) for t, q in filters)
    return bytes((SUBSCRIBE << 4 | 2,)) + _remaining(len(body)) + body
