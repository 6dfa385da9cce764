"""An MQTT client's CONNECT with its client id scoped to the vhost of its login: `<vhost>/<id>`
(the vhost percent-encoded, so no vhost's prefix is another's), so RabbitMQ's MQTT plugin, which tracks client
ids across vhosts (3.10), never lets a client of one space disconnect another's; sans I/O."""
from urllib.parse import quote

from .preamble import ProtocolError

CONNECT = 0x10  # packet type 1, flags 0 (MQTT 3.1.1 section 3.1.1)
MAX_CONNECT = 64 * 1024  # bound on the CONNECT parsed (ids, will, login: a few hundred bytes)
DEFAULT_VHOST = "/"  # RabbitMQ's `mqtt.vhost`: where a login without `<vhost>:` lands
LEVELS = (3, 4)  # MQTT 3.1 and 3.1.1; other levels pass unchanged and RabbitMQ refuses them
WILL, PASSWORD, USERNAME = 0x04, 0x40, 0x80


class MqttConnect:
    """Parses the client's first packet, a CONNECT, and rewrites its client id.

    Same interface as `preamble.Preamble`: `feed` returns the bytes to send to the broker now;
    once `done`, its input unchanged. An empty client id (the broker names the session) is
    left empty."""

    def __init__(self):
        self.buffer = bytearray()
        self.vhost: str | None = None
        self.user: str | None = None
        self.done = False

    def feed(self, data: bytes) -> bytes:
        if self.done:
            return data
        self.buffer += data
        packet = self._packet()
        if packet is None:
            return b""
        self.done = True
        rest = bytes(self.buffer)
        self.buffer = bytearray()
        return self._rewrite(packet) + rest

    def _packet(self) -> bytes | None:
        """The whole CONNECT once it is buffered, else None."""
        if not self.buffer:
            return None
        if self.buffer[0] != CONNECT:
            raise ProtocolError(f"the first MQTT packet is not a CONNECT (0x{self.buffer[0]:02x})")
        length, shift, at = 0, 0, 1
        while True:
            if at >= len(self.buffer):
                return None
            byte = self.buffer[at]
            length |= (byte & 0x7F) << shift
            at += 1
            if not byte & 0x80:
                break
            shift += 7
            if at > 4:
                raise ProtocolError("malformed remaining length")
        if length > MAX_CONNECT:
            raise ProtocolError(f"a CONNECT of {length} bytes (at most {MAX_CONNECT})")
        if len(self.buffer) < at + length:
            return None
        packet = bytes(self.buffer[at:at + length])
        del self.buffer[:at + length]
        return packet

    def _rewrite(self, body: bytes) -> bytes:
        reader = _Reader(body)
        protocol = reader.string()
        level = reader.byte()
        flags = reader.byte()
        reader.take(2)  # keep-alive
        if protocol not in (b"MQTT", b"MQIsdp") or level not in LEVELS:
            return _packet(body)  # the broker answers CONNACK 1 (unacceptable protocol)
        variable = body[:reader.at]
        client_id = reader.string()
        payload = body[reader.at:]
        if flags & WILL:
            reader.string()  # will topic
            reader.string()  # will message
        login = reader.string() if flags & USERNAME else b""
        self.user = login.decode("utf-8", "replace")
        # RabbitMQ reads the vhost before the last `:` of the username (rabbit_mqtt_processor).
        vhost, sep, _ = login.rpartition(b":")
        vhost = vhost if sep else DEFAULT_VHOST.encode()
        self.vhost = vhost.decode("utf-8", "replace")
        if not client_id:
            return _packet(body)
        scoped = quote(vhost, safe="").encode() + b"/" + client_id
        if len(scoped) > 0xFFFF:
            raise ProtocolError("the client id is too long")
        return _packet(variable + len(scoped).to_bytes(2, "big") + scoped + payload)


def _packet(body: bytes) -> bytes:
    """A CONNECT packet around `body`: fixed header and remaining length."""
    out, length = bytearray([CONNECT]), len(body)
    while True:
        byte, length = length & 0x7F, length >> 7
        out.append(byte | (0x80 if length else 0))
        if not length:
            return bytes(out) + body


class _Reader:
    """Reads MQTT's fixed fields from a packet body, refusing a body that ends early."""

    def __init__(self, body: bytes):
        self.body, self.at = body, 0

    def take(self, n: int) -> bytes:
        if self.at + n > len(self.body):
            raise ProtocolError("a CONNECT that ends inside a field")
        part = self.body[self.at:self.at + n]
        self.at += n
        return part

    def byte(self) -> int:
        return self.take(1)[0]

    def string(self) -> bytes:
        return self.take(int.from_bytes(self.take(2), "big"))
