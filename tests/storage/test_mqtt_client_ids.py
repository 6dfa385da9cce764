"""MQTT client ids scoped to their space on brokered spaces (dataplane/vhost_relay/mqtt.py):
through the relay, a client of another space that takes a device's client id leaves the device
connected, while RabbitMQ alone (3.10) knocks it off; garbage, silent and too many clients are
closed by the relay and nobody else notices. Real paho clients, the relay process, the test
node's MQTT listener; the CONNECT rewrite itself sans I/O."""
import socket
import uuid

import pytest

from dataplane.vhost_relay.mqtt import MqttConnect, _packet
from dataplane.vhost_relay.preamble import ProtocolError
from tests.storage.clients import API_PASSWORD, API_URL, API_USER, MQTT_PORT
from tests.storage.mqtt_device import PASSWORD, Device, MqttRelay
from workers.agents.storage.desired import BrokerTopic, BrokerUser, VhostState
from workers.agents.storage.rabbitmq import (
    BrokerReconciler,
    RabbitMQApi,
    broker_username,
    hash_password,
)


def connect_packet(client_id: bytes, username: bytes = b"", will: bool = False,
                   level: int = 4) -> bytes:
    flags = (0x80 | 0x40 if username else 0) | (0x04 if will else 0) | 0x02
    body = b"\x00\x04MQTT" + bytes([level, flags]) + b"\x00\x3c"
    body += len(client_id).to_bytes(2, "big") + client_id
    if will:
        body += b"\x00\x06t/will\x00\x03bye"
    if username:
        body += len(username).to_bytes(2, "big") + username + b"\x00\x02pw"
    return _packet(body)


def client_id_of(packet: bytes) -> bytes:
    at = 2 if packet[1] < 0x80 else 3  # a remaining length of one or two bytes
    at += 10  # protocol name, level, flags, keep-alive
    size = int.from_bytes(packet[at:at + 2], "big")
    return packet[at + 2:at + 2 + size]


def test_the_client_id_is_prefixed_with_the_login_s_vhost_whatever_the_fragmentation():
    packet = connect_packet(b"device-1", b"maas-a:app@maas-a", will=True)
    after = b"\xc0\x00"  # a PINGREQ sent in the same segment: passed on unchanged
    rewriter = MqttConnect()
    out = b"".join(rewriter.feed(packet[i:i + 1]) for i in range(len(packet)))
    out += rewriter.feed(after)
    assert rewriter.done and rewriter.vhost == "maas-a"
    assert client_id_of(out) == b"maas-a/device-1"
    assert out.endswith(b"\x00\x06t/will\x00\x03bye\x00\x11maas-a:app@maas-a\x00\x02pw" + after)


@pytest.mark.parametrize("username, client_id, expected", [
    (b"", b"dev", b"%2F/dev"),  # no login: RabbitMQ's default vhost, still prefixed
    (b"a/b:x:u@a", b"dev", b"a%2Fb%3Ax/dev"),  # the vhost is before the last colon, encoded
    (b"maas-a:u@maas-a", b"", b""),  # an empty id stays empty: the broker names the session
])
def test_every_login_gets_a_prefix_no_other_vhost_can_produce(username, client_id, expected):
    rewriter = MqttConnect()
    assert client_id_of(rewriter.feed(connect_packet(client_id, username))) == expected


def test_what_is_not_a_connect_is_refused_and_other_protocol_levels_pass_unchanged():
    with pytest.raises(ProtocolError, match="not a CONNECT"):
        MqttConnect().feed(b"\x30\x02\x00\x00")
    with pytest.raises(ProtocolError, match="at most"):
        MqttConnect().feed(b"\x10\x80\x80\x40")  # 1 MiB announced
    with pytest.raises(ProtocolError, match="ends inside"):
        MqttConnect().feed(b"\x10\x03\x00\x04M")
    mqtt5 = connect_packet(b"dev", b"v:u", level=5)
    assert MqttConnect().feed(mqtt5) == mqtt5  # RabbitMQ 3.10 answers CONNACK 1 itself


@pytest.fixture(scope="module")
def relay():
    proc = MqttRelay("--handshake-timeout", "1", "--pending-per-host", "4")
    yield proc
    proc.stop()


@pytest.fixture(scope="module")
def spaces():
    """Two vhosts, each with a user `app` that may send and receive on the topic `sensors`."""
    api = RabbitMQApi(API_URL, API_USER, API_PASSWORD, timeout=10)
    names = [f"maas-test-ids-{uuid.uuid4().hex[:8]}" for _ in range(2)]
    for name in names:
        user = BrokerUser(broker_username(name, "app"), hash_password(PASSWORD, b"salt"),
                          send=("sensors",), recv=("sensors",))
        result = BrokerReconciler(api).apply(
            VhostState(name, topics=[BrokerTopic("sensors")], users=[user]))
        assert result.ok, result
    yield names
    for name in names:
        BrokerReconciler(api).teardown(name)
    api.close()


@pytest.mark.slow
def test_another_space_s_client_with_the_same_id_leaves_the_device_connected(relay, spaces):
    mine, theirs = spaces
    device = Device(relay.port, mine, "device-1")
    device.round_trip()
    intruder = Device(relay.port, theirs, "device-1")
    intruder.round_trip()  # the intruder is registered with the broker by now
    device.round_trip()
    assert not device.dropped.is_set()

    # Within one space the MQTT takeover rule still holds: the newer connection wins.
    successor = Device(relay.port, mine, "device-1")
    assert device.dropped.wait(10), "the same space's same client id did not take over"
    successor.round_trip()
    assert not intruder.dropped.is_set()
    for client in (device, intruder, successor):
        client.close()

    # Why the relay is there: RabbitMQ 3.10's own listener knocks the device off.
    direct = Device(MQTT_PORT, mine, "device-2")
    other = Device(MQTT_PORT, theirs, "device-2")
    assert direct.dropped.wait(10), "RabbitMQ scopes client ids itself now: the relay may go"
    direct.close()
    other.close()


def closed_by_peer(sock: socket.socket, timeout: float = 5.0) -> bool:
    """Whether the peer closes the socket within `timeout` (after what it sends first)."""
    sock.settimeout(timeout)
    try:
        while sock.recv(1024):
            pass
        return True
    except ConnectionResetError:
        return True
    except TimeoutError:
        return False


@pytest.mark.slow
def test_garbage_silent_and_too_many_clients_are_closed_and_the_relay_serves_on(relay, spaces):
    garbage = socket.create_connection(("127.0.0.1", relay.port))
    garbage.sendall(b"\x30\x02\x00\x00")  # a PUBLISH before any CONNECT
    assert closed_by_peer(garbage)
    huge = socket.create_connection(("127.0.0.1", relay.port))
    huge.sendall(b"\x10\xff\xff\xff\x7f")  # a CONNECT of 256 MiB announced
    assert closed_by_peer(huge)

    # One source holds at most 4 connections before their CONNECT; each is closed after 1 s.
    silent = [socket.create_connection(("127.0.0.1", relay.port)) for _ in range(4)]
    extra = socket.create_connection(("127.0.0.1", relay.port))
    assert closed_by_peer(extra, timeout=0.5), "a fifth pending connection was kept"
    other_source = socket.create_connection(("127.0.0.1", relay.port),
                                            source_address=("127.0.0.2", 0))
    other_source.sendall(connect_packet(b"x", b"nobody:nobody"))
    assert closed_by_peer(other_source), "RabbitMQ refuses an unknown login and closes"
    assert all(closed_by_peer(s) for s in silent), "a silent client outlived its deadline"
    for sock in (garbage, huge, extra, other_source, *silent):
        sock.close()

    device = Device(relay.port, spaces[0], f"after-{uuid.uuid4().hex[:6]}")
    device.round_trip()
    device.close()
