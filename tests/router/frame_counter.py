"""A TCP relay between the router and RabbitMQ that counts what the router sends: connections,
and AMQP 1.0 performatives by name (attach, begin, ...), read from the frames as they pass."""
import struct
from collections import Counter

from tests import broker

from .conftest import TcpProxy

PERFORMATIVES = {0x10: "open", 0x11: "begin", 0x12: "attach", 0x13: "flow", 0x14: "transfer",
                 0x15: "disposition", 0x16: "detach", 0x17: "end", 0x18: "close"}


class FrameCounter(TcpProxy):
    """Counts the performatives of the client's AMQP frames (SASL frames and protocol headers
    are skipped); `connections` counts the connections it accepted."""

    def __init__(self, target=("127.0.0.1", broker.AMQP_PORT)):
        self.performatives: Counter = Counter()
        super().__init__(target)

    def count(self, name: str) -> int:
        with self.lock:
            return self.performatives[name]

    def sent(self, data: bytes, stream: dict) -> None:
        data = stream.get("rest", b"") + data
        while True:
            if data[:4] == b"AMQP":  # a protocol header (AMQP or SASL layer)
                if len(data) < 8:
                    break
                data = data[8:]
                continue
            if len(data) < 8:
                break
            size, doff, kind = struct.unpack("!IBB", data[:6])
            if len(data) < size:
                break
            body = data[doff * 4:size]
            # type 0: AMQP; a described list whose descriptor is a smallulong (0x53)
            if kind == 0 and len(body) >= 3 and body[:2] == b"\x00\x53":
                with self.lock:
                    self.performatives[PERFORMATIVES.get(body[2], hex(body[2]))] += 1
            data = data[size:]
        stream["rest"] = data
