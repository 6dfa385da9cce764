"""The vhost relay (dataplane/vhost_relay): a login `<user>@<vhost>` through it lands in that
RabbitMQ vhost; anything else passes unchanged; garbage and a broker that is down close only
the connection concerned. A real relay process, real proton clients, the local RabbitMQ."""

import base64
import json
import os
import socket
import struct
import subprocess
import sys
import threading
import uuid

import pytest
import requests
from proton import (
    UNDESCRIBED,
    Array,
    Connection,
    ConnectionException,
    Data,
    Described,
    Message,
    Transport,
    symbol,
    ubyte,
    ulong,
)
from proton.utils import BlockingConnection

from dataplane import qdrouterd
from dataplane.vhost_relay.preamble import AMQP_HEADER, SASL_HEADER, Preamble, ProtocolError
from tests import broker
from tests.qdrouterd import needs_qdrouterd

from .conftest import RABBIT_API, RABBIT_AUTH, ROOT, free_port, wait_port

PASSWORD = "relay-secret"


class RelayProcess:
    def __init__(self, broker_port: int = broker.AMQP_PORT, log_level: str = "WARNING",
                 stderr=None):
        self.port = free_port()
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "dataplane.vhost_relay", "--listen", f"127.0.0.1:{self.port}",
             "--broker", f"127.0.0.1:{broker_port}", "--connect-timeout", "2",
             "--log-level", log_level],
            cwd=ROOT, env=dict(os.environ, PYTHONPATH=str(ROOT)), stderr=stderr, text=True)
        wait_port(self.port)

    def connect(self, user: str, password: str) -> BlockingConnection:
        return BlockingConnection(f"amqp://127.0.0.1:{self.port}", user=user, password=password,
                                  allowed_mechs="PLAIN", allow_insecure_mechs=True, timeout=5)

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(5)


@pytest.fixture(scope="module")
def relay():
    proc = RelayProcess()
    yield proc
    assert proc.proc.poll() is None, "the relay died during the tests"
    proc.stop()


@pytest.fixture(scope="module")
def space(rabbit):
    """The vhost with a user `u@<vhost>` and a durable queue `orders`."""
    rabbit.user(f"u@{rabbit.vhost}", PASSWORD)
    rabbit.queue("orders")
    return rabbit


def queued(vhost: str, queue: str, count: int = 1) -> list[bytes]:
    """Takes up to `count` messages off a queue through the HTTP API (no stats lag)."""
    vhost = requests.utils.quote(vhost, safe="")
    r = requests.post(f"{RABBIT_API}/queues/{vhost}/{queue}/get", auth=RABBIT_AUTH, timeout=30,
                      json={"count": count, "ackmode": "ack_requeue_false",
                            "encoding": "base64"})
    r.raise_for_status()
    return [base64.b64decode(m["payload"]) for m in r.json()]


def test_a_message_sent_as_user_at_vhost_lands_in_that_vhost_s_queue(relay, space):
    conn = relay.connect(f"u@{space.vhost}", PASSWORD)
    conn.create_sender("/amq/queue/orders").send(Message(body=b"order-1"))
    conn.close()
    [payload] = queued(space.vhost, "orders")
    assert payload.endswith(b"order-1")  # after the AMQP 1.0 section header RabbitMQ keeps


def test_a_receiver_as_user_at_vhost_reads_that_vhost_s_queue(relay, space):
    requests.post(f"{RABBIT_API}/exchanges/{space.vhost}/amq.default/publish", auth=RABBIT_AUTH,
                  timeout=30, json={"properties": {}, "routing_key": "orders",
                                    "payload": "from-http", "payload_encoding": "string"}
                  ).raise_for_status()
    conn = relay.connect(f"u@{space.vhost}", PASSWORD)
    receiver = conn.create_receiver("/amq/queue/orders")
    message = receiver.receive(5)
    receiver.accept()
    conn.close()
    assert bytes(message.body) == b"from-http"


def test_a_wrong_password_is_refused_by_rabbitmq_through_the_relay(relay, space):
    with pytest.raises(ConnectionException, match="unauthorized-access"):
        relay.connect(f"u@{space.vhost}", "wrong")


def test_a_login_without_at_lands_in_the_default_vhost(relay):
    queue = f"maas-relay-test-{uuid.uuid4().hex[:8]}"
    url = f"{RABBIT_API}/queues/%2F/{queue}"
    requests.put(url, json={"durable": False}, auth=RABBIT_AUTH, timeout=30).raise_for_status()
    try:
        conn = relay.connect("guest", "guest")
        conn.create_sender(f"/amq/queue/{queue}").send(Message(body=b"to-default"))
        conn.close()
        [payload] = queued("/", queue)
        assert payload.endswith(b"to-default")
    finally:
        requests.delete(url, auth=RABBIT_AUTH, timeout=30)


GARBAGE = {
    "http": b"GET / HTTP/1.1\r\nHost: x\r\n\r\n",
    "unknown protocol header": b"AMQP\x07\x01\x00\x00",
    "oversized sasl frame": SASL_HEADER + struct.pack(">IBBH", 1 << 30, 2, 1, 0),
    "undecodable sasl frame": SASL_HEADER + struct.pack(">IBBH", 12, 2, 1, 0) + b"\xff\xff\xff\xff",
}


@pytest.mark.parametrize("garbage", GARBAGE.values(), ids=GARBAGE.keys())
def test_garbage_closes_only_that_connection(relay, space, garbage):
    working = relay.connect(f"u@{space.vhost}", PASSWORD)
    sender = working.create_sender("/amq/queue/orders")
    with socket.create_connection(("127.0.0.1", relay.port), timeout=5) as sock:
        sock.sendall(garbage)
        assert read_until_closed(sock) is True
    sender.send(Message(body=b"still-here"))
    working.close()
    assert queued(space.vhost, "orders")[0].endswith(b"still-here")
    relay.connect(f"u@{space.vhost}", PASSWORD).close()  # new connections too


def read_until_closed(sock: socket.socket) -> bool:
    """True once the peer closes (whatever it sent first); a timeout fails the test."""
    try:
        while sock.recv(65536):
            pass
    except ConnectionResetError:
        pass
    return True


def test_a_broker_that_is_down_closes_the_client_connection():
    down = RelayProcess(broker_port=free_port())  # nothing listens there
    try:
        with pytest.raises(ConnectionException):
            down.connect("u@nowhere", PASSWORD)
        with socket.create_connection(("127.0.0.1", down.port), timeout=5) as sock:
            sock.sendall(SASL_HEADER)
            assert read_until_closed(sock) is True
        assert down.proc.poll() is None
    finally:
        down.stop()


def test_twenty_concurrent_connections_each_reach_the_vhost(relay, space):
    queues = [f"c{i}" for i in range(20)]
    for queue in queues:
        space.queue(queue)
    errors, start = [], threading.Barrier(len(queues))

    def client(queue: str) -> None:
        try:
            start.wait(10)
            conn = relay.connect(f"u@{space.vhost}", PASSWORD)
            sender = conn.create_sender(f"/amq/queue/{queue}")
            for i in range(20):
                sender.send(Message(body=f"{queue}-{i}"))
            receiver = conn.create_receiver(f"/amq/queue/{queue}", credit=20)
            bodies = []
            for _ in range(20):
                bodies.append(receiver.receive(10).body)
                receiver.accept()
            conn.close()
            assert bodies == [f"{queue}-{i}" for i in range(20)]
        except Exception as exc:  # noqa: BLE001 - reported below with its queue
            errors.append(f"{queue}: {exc!r}")

    threads = [threading.Thread(target=client, args=(q,)) for q in queues]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert errors == []


def test_each_connection_is_logged_once_with_its_vhost_and_peer(space):
    logged = RelayProcess(log_level="INFO", stderr=subprocess.PIPE)
    try:
        logged.connect(f"u@{space.vhost}", PASSWORD).close()
        with pytest.raises(ConnectionException):
            logged.connect(f"u@{space.vhost}", "wrong")
    finally:
        logged.stop()
    lines = [json.loads(line) for line in logged.proc.stderr.read().splitlines()]
    # (the start-up probe, a bare TCP connect, is logged as closed before its open, no user)
    per_connection = [(x["event"], x["vhost"]) for x in lines if x.get("user")]
    assert per_connection == [("vhost_relay.connection", space.vhost),
                              ("vhost_relay.closed_before_open", space.vhost)]
    assert all(x["peer"].startswith("127.0.0.1:") for x in lines if "peer" in x)
    assert PASSWORD not in "".join(map(str, lines))


@needs_qdrouterd
def test_qdrouterd_reaches_the_vhost_s_queue_through_the_relay(relay, space, tmp_path):
    """What the relay is for: qdrouterd's connector cannot choose RabbitMQ's vhost."""
    space.queue("via-qdr")
    port = free_port()
    autolink = {"address": "via-qdr", "connection": "broker",
                "externalAddress": "/amq/queue/via-qdr"}
    config = [
        ["router", {"mode": "standalone", "id": "relay-test"}],
        ["listener", {"host": "127.0.0.1", "port": port, "authenticatePeer": False,
                      "saslMechanisms": "ANONYMOUS"}],
        ["connector", {"name": "broker", "host": "127.0.0.1", "port": relay.port,
                       "role": "route-container", "saslUsername": f"u@{space.vhost}",
                       "saslPassword": PASSWORD}],
        ["address", {"prefix": "via-qdr", "waypoint": True}],
        ["autoLink", {**autolink, "direction": "out"}],
        ["autoLink", {**autolink, "direction": "in"}],
    ]
    (tmp_path / "qdrouterd.json").write_text(json.dumps(config))
    router = subprocess.Popen(qdrouterd.command(tmp_path / "qdrouterd.json"),
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_port(port)
        conn = BlockingConnection(f"amqp://127.0.0.1:{port}", timeout=10)
        conn.create_sender("via-qdr").send(Message(body="through qdrouterd"))
        receiver = conn.create_receiver("via-qdr")
        message = receiver.receive(10)  # back from the broker through the `in` autoLink
        receiver.accept()
        conn.close()
        assert message.body == "through qdrouterd"
    finally:
        router.terminate()
        router.wait(10)


def test_the_relay_imports_no_django():
    out = subprocess.run([sys.executable, "-c", "import sys, dataplane.vhost_relay.__main__; "
                          "print(sorted(m for m in sys.modules if m.split('.')[0] in "
                          "('django', 'maas', 'config_service', 'tenants')))"],
                         cwd=ROOT, env=dict(os.environ, PYTHONPATH=str(ROOT)),
                         capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


# The preamble parser alone, on the bytes a real proton client writes.

def client_bytes(user: str | None, **connection) -> bytes:
    """What a proton client sends up to and including its open, against a PLAIN server."""
    conn = Connection()
    conn.container = "client-1"
    for name, value in connection.items():
        setattr(conn, name, value)
    transport = Transport()
    if user is not None:
        conn.user, conn.password = user, "pw"
        sasl = transport.sasl()
        sasl.allowed_mechs("PLAIN")
        sasl.allow_insecure_mechs = True
    transport.bind(conn)
    conn.open()
    if user is not None:
        transport.push(SASL_HEADER + frame(performative(0x40, [
            Array(UNDESCRIBED, Data.SYMBOL, symbol("PLAIN"))]), ftype=1))
        sent = take(transport)
        transport.push(frame(performative(0x44, [ubyte(0)]), ftype=1) + AMQP_HEADER)
        return sent + take(transport)
    return take(transport)


def take(transport: Transport) -> bytes:
    out = bytes(transport.peek(1 << 16) or b"")
    transport.pop(len(out))
    return out


def performative(code: int, fields: list, descriptor=None) -> bytes:
    data = Data()
    data.put_object(Described(descriptor or ulong(code), fields))
    return bytes(data.encode())


def frame(body: bytes, ftype: int = 0, channel: int = 0, extended: bytes = b"") -> bytes:
    doff = 2 + len(extended) // 4
    return struct.pack(">IBBH", doff * 4 + len(body), doff, ftype, channel) + extended + body


def open_fields(wire: bytes) -> tuple[list, int, bytes]:
    """(open's fields, channel, extended header) of the last frame in `wire`."""
    start = wire.rindex(AMQP_HEADER) + 8
    size, doff, _, channel = struct.unpack_from(">IBBH", wire, start)
    assert start + size == len(wire)
    data = Data()
    data.decode(wire[start + doff * 4:])
    data.rewind()
    data.next()
    return data.get_object().value, channel, wire[start + 8:start + doff * 4]


def test_the_open_hostname_becomes_the_login_s_vhost():
    wire = client_bytes("router@acme.space-1", hostname="127.0.0.1",
                        properties={symbol("product"): "qdrouterd", symbol("key"): b"\x00\x01"},
                        offered_capabilities=[symbol("ANONYMOUS-RELAY")])
    preamble = Preamble()
    out = preamble.feed(wire)
    assert preamble.done and preamble.vhost == "acme.space-1"
    fields, _, _ = open_fields(out)
    before, _, _ = open_fields(wire)
    assert fields[1] == "vhost:acme.space-1"
    assert fields[:1] + fields[2:] == before[:1] + before[2:]  # binary properties kept too


def test_bytes_fed_one_at_a_time_give_the_same_result():
    wire = client_bytes("router@acme.space-1", hostname="broker")
    whole, split = Preamble(), Preamble()
    assert b"".join(split.feed(wire[i:i + 1]) for i in range(len(wire))) == whole.feed(wire)


def test_the_bytes_after_the_open_pass_unchanged():
    wire = client_bytes("router@acme.space-1")
    after = frame(performative(0x11, [None, 0, 100, 100]))  # a begin
    preamble = Preamble()
    assert preamble.feed(wire + after).endswith(after)
    assert preamble.feed(b"anything") == b"anything"


def test_a_login_without_at_and_a_client_without_sasl_pass_unchanged():
    for wire in (client_bytes("guest", hostname="vhost:x"), client_bytes(None)):
        preamble = Preamble()
        assert preamble.feed(wire) == wire
        assert preamble.vhost is None


def test_the_channel_and_extended_header_of_the_open_are_kept():
    sasl_init = frame(performative(0x41, [symbol("PLAIN"), b"\0r@v\0pw"]), ftype=1)
    opened = frame(performative(0, ["c"], descriptor=symbol("amqp:open:list")), channel=7,
                   extended=b"\xab\xcd\xef\x01")
    out = Preamble().feed(SASL_HEADER + sasl_init + AMQP_HEADER + opened)
    fields, channel, extended = open_fields(out)
    assert (fields[:2], channel, extended) == (["c", "vhost:v"], 7, b"\xab\xcd\xef\x01")


BAD = {
    "a frame over 64 KiB": SASL_HEADER + struct.pack(">IBBH", 65 * 1024, 2, 1, 0),
    "a data offset past the frame": SASL_HEADER + struct.pack(">IBBH", 8, 5, 1, 0),
    "an AMQP frame in SASL": SASL_HEADER + frame(performative(0x41, [symbol("PLAIN")])),
    "a first frame that is not an open": SASL_HEADER + frame(performative(
        0x41, [symbol("PLAIN"), b"\0r@v\0pw"]), ftype=1) + AMQP_HEADER + frame(
        performative(0x11, [None, 0, 1, 1])),
    "not a described list": SASL_HEADER + frame(b"\xa1\x03abc", ftype=1),
}


@pytest.mark.parametrize("wire", BAD.values(), ids=BAD.keys())
def test_malformed_preambles_are_refused(wire):
    with pytest.raises(ProtocolError):
        Preamble().feed(wire)
