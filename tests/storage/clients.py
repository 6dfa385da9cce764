"""Real clients of RabbitMQ for the metering and throttling tests (no Django): AMQP 1.0 over
python-qpid-proton, bare MQTT 3.1.1 over a socket, and a TCP proxy that counts octets."""
import os
import re
import socket
import struct
import threading

from proton.utils import BlockingConnection

from tests import broker
from workers.agents.storage.rabbitmq_objects import POLICY_PREFIX, TEMP_QUEUE_POLICY

AMQP_HOST = os.environ.get("RABBITMQ_AMQP_HOST", "127.0.0.1")
AMQP_PORT, MQTT_PORT, API_URL = broker.AMQP_PORT, broker.MQTT_PORT, broker.API_URL
API_USER = os.environ.get("RABBITMQ_API_USER", "guest")
API_PASSWORD = os.environ.get("RABBITMQ_API_PASSWORD", "guest")


class SessionEnded(Exception):
    """RabbitMQ's AMQP 1.0 plugin reports errors by ending the session (an `end` frame)."""


class Connection(BlockingConnection):
    def on_session_remote_close(self, event):
        raise SessionEnded(str(event.session.remote_condition))


def amqp(vhost: str, user: str, password: str, port: int = AMQP_PORT) -> Connection:
    return Connection(f"amqp://{AMQP_HOST}:{port}", user=user, password=password,
                      virtual_host=f"vhost:{vhost}", allowed_mechs="PLAIN", timeout=10)


# --- MQTT 3.1.1, by hand: the few packets the tests need ---------------------------------


def _string(value: str | bytes) -> bytes:
    raw = value.encode() if isinstance(value, str) else value
    return struct.pack("!H", len(raw)) + raw


def _packet(first: int, body: bytes) -> bytes:
    length, encoded = len(body), b""
    while True:
        digit, length = length % 128, length // 128
        encoded += bytes([digit | (0x80 if length else 0)])
        if not length:
            return bytes([first]) + encoded + body


class Mqtt:
    """One MQTT connection (clean session, no will)."""

    def __init__(self, username: str, password: str, client_id: str, port: int = MQTT_PORT):
        self.sock = socket.create_connection((AMQP_HOST, port), timeout=5)
        body = (_string("MQTT") + bytes([4, 0xC2]) + struct.pack("!H", 600) + _string(client_id)
                + _string(username) + _string(password))
        self.sock.sendall(_packet(0x10, body))
        connack = self._read(4)
        if connack[3] != 0:
            raise ConnectionError(f"CONNACK return code {connack[3]}")

    def publish(self, topic: str, payload: bytes, qos: int = 0, packet_id: int = 1) -> None:
        """QoS 1 waits for the PUBACK (socket.timeout if none comes)."""
        body = _string(topic) + (struct.pack("!H", packet_id) if qos else b"") + payload
        self.sock.sendall(_packet(0x30 | (qos << 1), body))
        if qos:
            puback = self._read(4)
            assert puback[0] == 0x40 and struct.unpack("!H", puback[2:])[0] == packet_id

    def ping(self) -> None:
        self.sock.sendall(b"\xc0\x00")
        assert self._read(2) == b"\xd0\x00"

    def _read(self, n: int) -> bytes:
        data = b""
        while len(data) < n:
            chunk = self.sock.recv(n - len(data))
            if not chunk:
                raise ConnectionError("closed by the broker")
            data += chunk
        return data

    def close(self) -> None:
        """Drops the TCP connection (no DISCONNECT: no octets after the last publish)."""
        self.sock.close()


# --- a TCP proxy that counts what passes ------------------------------------------------


class CountingProxy:
    """Relays every accepted connection to `target`; counts the octets each way."""

    def __init__(self, target: tuple[str, int]):
        self.target = target
        self.up = self.down = 0  # client -> broker, broker -> client
        self._lock = threading.Lock()
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = self._listener.getsockname()[1]
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            server = socket.create_connection(self.target)
            threading.Thread(target=self._pipe, args=(client, server, "up"), daemon=True).start()
            threading.Thread(target=self._pipe, args=(server, client, "down"), daemon=True).start()

    def _pipe(self, source: socket.socket, sink: socket.socket, direction: str) -> None:
        try:
            while data := source.recv(65536):
                with self._lock:
                    setattr(self, direction, getattr(self, direction) + len(data))
                sink.sendall(data)
        except OSError:
            pass
        finally:
            for s, how in ((sink, socket.SHUT_WR), (source, socket.SHUT_RD)):
                try:
                    s.shutdown(how)
                except OSError:
                    pass

    def counted(self) -> tuple[int, int]:
        with self._lock:
            return self.up, self.down

    def close(self) -> None:
        self._listener.close()


def queue_policy(policies: list[dict], queue: str) -> dict | None:
    """Of a vhost's policies (`GET /api/policies/<vhost>`), MaaS's that applies to the queue:
    its queues share one policy per setting, whose pattern names them."""
    ours = [p for p in policies if p["name"].startswith(POLICY_PREFIX)
            and p["name"] != TEMP_QUEUE_POLICY and re.search(p["pattern"], queue)]
    assert len(ours) <= 1, f"{queue} matches several MaaS policies: {ours}"
    return ours[0] if ours else None
