"""A brokered space's AMQP clients use the address names, over AMQPS too: the relay
(`--protocol brokered-amqp`, dataplane/vhost_relay/addresses.py) rewrites bare names to
RabbitMQ's forms and back, the broker's own forms pass, and the users' rights stay per queue.
A real relay process with a TLS listener, real proton clients that verify the chain and the
host name, the test RabbitMQ node, the vhost configured by the storage reconciler (no Django).
"""
import ssl
import struct
import uuid

import pytest
from proton import (
    UNDESCRIBED,
    Array,
    Data,
    Described,
    Message,
    SSLDomain,
    Timeout,
    symbol,
    ubyte,
    ulong,
)
from proton.utils import BlockingConnection, LinkDetached

from dataplane.vhost_relay.addresses import Frames, Needs
from dataplane.vhost_relay.preamble import ProtocolError
from tests import broker
from tests.storage.clients import API_PASSWORD, API_URL, API_USER, SessionEnded
from tests.storage.mqtt_device import Device
from tests.storage.relays import Front, self_signed
from workers.agents.storage.desired import BrokerQueue, BrokerTopic, BrokerUser, VhostState
from workers.agents.storage.rabbitmq import (
    BrokerReconciler,
    RabbitMQApi,
    broker_username,
    hash_password,
)

PASSWORD = "bare-pw"
RULES = {  # user -> (send, recv)
    "app": (("orders", "a/b", "news", "sensors"),
            ("orders", "a/b", "news", "news::audit", "sensors")),
    "writer": (("orders",), ()),
}


# --- The frames alone ---------------------------------------------------------------------

def frame(fields: list, code: int = 0x12, channel: int = 3) -> bytes:
    data = Data()
    data.put_object(Described(ulong(code), fields))
    body = bytes(data.encode())
    return struct.pack(">IBBH", 8 + len(body), 2, 0, channel) + body


def attach(name: str, role: bool, address, source: bool) -> bytes:
    """An attach of `role` (True a receiver) whose source (or target) has `address`."""
    terminus = Described(ulong(0x28 if source else 0x29), [address])
    return frame([name, 0, role, None, None] + ([terminus, None] if source else [None, terminus]))


def address_of(wire: bytes, source: bool) -> object:
    data = Data()
    data.decode(wire[8:])
    data.rewind()
    data.next()
    return data.get_object().value[5 if source else 6].value[0]


def kinds(topics=("news",), unknown=()):
    def kind(name):
        if name in unknown:
            raise Needs(name)
        return "topic" if name in topics else None
    return kind


@pytest.mark.parametrize("name, receiver, expected", [
    ("orders", False, "/exchange/orders"),
    ("orders", True, "/amq/queue/orders"),
    ("a/b", False, "/exchange/a%2Fb"),
    ("a/b", True, "/amq/queue/a%2Fb"),
    ("news", True, "/exchange/news/#"),
    ("news::audit", True, "/amq/queue/news::audit"),
    ("/amq/queue/orders", True, "/amq/queue/orders"),  # the broker's forms pass
    ("/exchange/orders", False, "/exchange/orders"),
])
def test_bare_names_become_rabbitmq_s_forms_and_come_back_in_the_answer(name, receiver,
                                                                         expected):
    links = {}
    to_broker, to_client = Frames(True, links, kinds()), Frames(False, links)
    # A receiver's address is its source, a sender's its target, in the broker's answer too
    # (whose role is the opposite).
    assert address_of(to_broker.feed(attach("l1", receiver, name, receiver)), receiver) == expected
    answer = to_client.feed(attach("l1", not receiver, expected, receiver))
    assert address_of(answer, receiver) == name
    assert links == {}


def test_other_frames_pass_untouched_whatever_the_chunks():
    transfer = frame([0, 0, b"tag"], code=0x14) + b"\x00Sw\xa0\x05hello"
    transfer = struct.pack(">I", len(transfer)) + transfer[4:]
    heartbeat = struct.pack(">IBBH", 8, 2, 0, 0)
    wire = (attach("l1", False, "orders", False) + transfer + heartbeat
            + frame([1], code=0x13) + attach("l2", True, "news", True))
    whole = Frames(True, {}, kinds()).feed(wire)
    for step in (1, 7, 64):
        frames = Frames(True, {}, kinds())
        out = b"".join(frames.feed(wire[i:i + step]) for i in range(0, len(wire), step))
        assert out == whole
    assert transfer + heartbeat in whole and b"/exchange/orders" in whole
    assert b"/exchange/news/#" in whole


def test_a_heartbeat_is_never_taken_for_an_attach_whatever_follows_it():
    # A transfer of 0x00531200 bytes starts with the bytes of an attach's descriptor.
    heartbeat = struct.pack(">IBBH", 8, 2, 0, 0)
    big = struct.pack(">IBBH", 0x00531200, 2, 0, 1) + b"\x00\x53\x14" + b"x" * 100
    assert Frames(True, {}, kinds()).feed(heartbeat + big) == heartbeat + big


def test_an_attach_waits_for_the_kind_of_its_name_and_what_follows_waits_with_it():
    known = set()
    frames = Frames(True, {}, lambda name: "topic" if name in known else (_ for _ in ()).throw(
        Needs(name)))
    first = frame([1], code=0x13)  # a flow before it passes at once
    later = frame([2], code=0x13)
    out = frames.feed(first + attach("l1", True, "news", True) + later)
    assert out == first and frames.needs == "news"
    known.add("news")
    out = frames.feed(b"")
    assert frames.needs is None
    assert address_of(out[:len(out) - len(later)], True) == "/exchange/news/#"
    assert out.endswith(later)


def test_the_broker_direction_tells_when_the_login_was_taken():
    """The relay reads a vhost's topics only after the broker's open (its login succeeded):
    a client cannot make it list vhosts it names but has no password for."""
    def sasl_frame(code: int, fields: list) -> bytes:
        data = Data()
        data.put_object(Described(ulong(code), fields))
        body = bytes(data.encode())
        return struct.pack(">IBBH", 8 + len(body), 2, 1, 0) + body  # type 1: SASL

    broker = Frames(False, {})
    broker.feed(b"AMQP\x03\x01\x00\x00"
                + sasl_frame(0x40, [Array(UNDESCRIBED, Data.SYMBOL, symbol("PLAIN"))])
                + sasl_frame(0x44, [ubyte(0)]) + b"AMQP\x00\x01\x00\x00")
    assert not broker.opened
    broker.feed(frame(["rabbit", "host"], code=0x10, channel=0))
    assert broker.opened


def test_a_connection_cannot_pile_up_attaches_the_broker_never_answers():
    from dataplane.vhost_relay.addresses import MAX_UNANSWERED

    frames = Frames(True, {}, kinds())
    frames.feed(b"".join(attach(f"l{i}", False, "orders", False)
                         for i in range(MAX_UNANSWERED)))
    with pytest.raises(ProtocolError, match="not answered"):
        frames.feed(attach("one-more", False, "orders", False))


def test_an_oversized_attach_and_a_bad_frame_header_are_refused():
    with pytest.raises(ProtocolError):
        Frames(True, {}, kinds()).feed(struct.pack(">IBBH", 1 << 20, 2, 0, 0) + b"\x00S\x12")
    with pytest.raises(ProtocolError):
        Frames(True, {}, kinds()).feed(struct.pack(">IBBH", 4, 2, 0, 0))


# --- Real clients through a real relay ----------------------------------------------------

@pytest.fixture(scope="module")
def vhost():
    api = RabbitMQApi(API_URL, API_USER, API_PASSWORD, timeout=10)
    names = ["maas-test-bare-" + uuid.uuid4().hex[:8] for _ in range(2)]
    for name in names:
        users = [BrokerUser(broker_username(name, u), hash_password(PASSWORD, b"salt"),
                            send=send, recv=recv) for u, (send, recv) in RULES.items()]
        state = VhostState(name, queues=[BrokerQueue("orders", "queue"),
                                         BrokerQueue("a/b", "queue"),
                                         BrokerQueue("other", "queue"),
                                         BrokerQueue("news::audit", "subscription",
                                                     topic="news")],
                           topics=[BrokerTopic("news"), BrokerTopic("sensors")], users=users)
        result = BrokerReconciler(api).apply(state)
        assert result.ok, result
    yield names[0], names[1]
    for name in names:
        BrokerReconciler(api).teardown(name)
    api.close()


@pytest.fixture(scope="module")
def certificate(tmp_path_factory):
    return self_signed(tmp_path_factory.mktemp("front"))


@pytest.fixture(scope="module")
def front(certificate):
    relay = Front("brokered-amqp", broker.AMQP_PORT, *certificate)
    yield relay
    relay.stop()


class Client(BlockingConnection):
    def on_session_remote_close(self, event):
        raise SessionEnded(str(event.session.remote_condition))


def connect(front, vhost: str, user: str = "app", tls: str | None = None, host="localhost"):
    """A proton client of the space through the relay; with `tls` (a CA file) over AMQPS,
    verifying the chain and the host name `host`. The login names the space: no `vhost:`."""
    domain = None
    if tls:
        domain = SSLDomain(SSLDomain.MODE_CLIENT)
        domain.set_trusted_ca_db(tls)
        domain.set_peer_authentication(SSLDomain.VERIFY_PEER_NAME)
    port = front.tls_port if tls else front.port
    return Client(f"{'amqps' if tls else 'amqp'}://127.0.0.1:{port}",
                  user=broker_username(vhost, user), password=PASSWORD, virtual_host=host,
                  ssl_domain=domain, allowed_mechs="PLAIN", allow_insecure_mechs=True,
                  timeout=10)


def round_trip(front, vhost: str, send_to: str, receive_from: str, **options) -> None:
    """One message from a sender of `send_to` to a receiver of `receive_from`, on a connection
    of their own (RabbitMQ 3.10 never answers a receiver's detach: the connection ends it)."""
    conn = connect(front, vhost, **options)
    try:
        receiver = conn.create_receiver(receive_from)
        body = uuid.uuid4().hex
        conn.create_sender(send_to).send(Message(body=body))
        assert receiver.receive(10).body == body
        receiver.accept()
    finally:
        conn.close()


def test_queues_are_sent_to_and_received_from_by_their_names_over_amqps(front, vhost,
                                                                       certificate):
    conn = connect(front, vhost[0], tls=certificate[0])
    try:
        receiver = conn.create_receiver("orders")
        assert receiver.link.remote_source.address == "orders"  # its own name comes back
        sender = conn.create_sender("orders")
        assert sender.link.remote_target.address == "orders"
        sender.send(Message(body="first"))
        assert receiver.receive(10).body == "first"
        receiver.accept()
    finally:
        conn.close()
    round_trip(front, vhost[0], "a/b", "a/b", tls=certificate[0])  # a `/` in a queue's name
    round_trip(front, vhost[0], "/exchange/orders", "/amq/queue/orders")  # the broker's forms
    round_trip(front, vhost[0], "orders", "/amq/queue/orders")


def test_a_topic_s_receivers_each_get_every_message_sent_to_its_name(front, vhost):
    conn = connect(front, vhost[0])
    try:
        first = conn.create_receiver("news", name="first")
        second = conn.create_receiver("news", name="second")
        sender = conn.create_sender("news")
        sender.send(Message(body="no subject"))
        sender.send(Message(body="with subject", subject="eu"))
        for receiver in (first, second):
            assert sorted(receiver.receive(10).body for _ in range(2)) == [
                "no subject", "with subject"]
            receiver.accept()
        durable = conn.create_receiver("news::audit")  # the subscription kept both too
        assert durable.receive(10).body == "no subject"
        durable.accept()
    finally:
        conn.close()


def refusal(front, vhost: str, user: str, attempt) -> str:
    """The error condition RabbitMQ answers `attempt(connection)` with ("" if none)."""
    conn = connect(front, vhost, user=user)
    try:
        attempt(conn)
        return ""
    except (SessionEnded, LinkDetached) as exc:
        return str(exc)
    finally:
        try:
            conn.close()
        except SessionEnded:  # proton reports the ended session again on the way out
            pass


def test_rights_stay_per_queue_and_another_space_s_user_reaches_nothing(front, vhost):
    send = lambda address: lambda conn: conn.create_sender(address).send(  # noqa: E731
        Message(body=f"to {address}"))
    assert refusal(front, vhost[0], "writer", send("orders")) == ""
    assert "unauthorized-access" in refusal(front, vhost[0], "writer", send("other"))
    assert "unauthorized-access" in refusal(
        front, vhost[0], "writer", lambda conn: conn.create_receiver("orders").receive(5))
    # An outsider: the same user name in the other space lands in its own vhost, whose queue
    # `orders` is empty; it never reads this space's message.
    conn = connect(front, vhost[1])
    try:
        with pytest.raises(Timeout):
            conn.create_receiver("orders").receive(1)
    finally:
        conn.close()
    conn = connect(front, vhost[0])
    try:
        assert conn.create_receiver("orders").receive(10).body == "to orders"
    finally:
        conn.close()


def test_a_client_that_checks_the_host_name_refuses_a_certificate_for_another(front, vhost,
                                                                             certificate):
    with pytest.raises(Exception, match="(?i)certificate|ssl|tls|verify"):
        connect(front, vhost[0], tls=certificate[0], host="queue.example.com")


def test_mqtts_on_a_brokered_space_verifies_and_carries_messages(vhost, certificate):
    relay = Front("mqtt", broker.MQTT_PORT, *certificate)
    try:
        device = Device(relay.tls_port, vhost[0], "bare-mqtts", tls_ca=certificate[0],
                        password=PASSWORD)
        device.round_trip()
        device.close()
        with pytest.raises(ssl.SSLCertVerificationError):  # a CA that did not sign it
            Device(relay.tls_port, vhost[0], "bare-mqtts-2", tls_ca=certifi_bundle())
    finally:
        relay.stop()


def certifi_bundle() -> str:
    """The public CAs' bundle: none of them signed the relay's certificate."""
    return ssl.get_default_verify_paths().cafile or "/etc/ssl/certs/ca-certificates.crt"
