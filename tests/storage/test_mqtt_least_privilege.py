"""MQTT on a brokered space with least privilege: real paho-mqtt and proton clients against
the real RabbitMQ (its MQTT plugin on RABBITMQ_MQTT_PORT: the test node's), the vhost
configured by the storage reconciler alone (no Django)."""
import queue
import socket
import time
import uuid

import paho.mqtt.client as paho
import pytest
from proton import Message

from tests.storage.clients import API_PASSWORD, API_URL, API_USER, MQTT_PORT, amqp
from workers.agents.storage.desired import BrokerTopic, BrokerUser, VhostState
from workers.agents.storage.rabbitmq import (
    BrokerReconciler,
    RabbitMQApi,
    broker_username,
    hash_password,
)

pytestmark = pytest.mark.slow

PASSWORD = "mqtt-password"
RULES = {  # user -> (send, recv): the only rights each has
    "pub": (("sensors",), ()),
    "sub": ((), ("sensors",)),
    "both": (("sensors",), ("sensors",)),
}


@pytest.fixture
def vhost():
    api = RabbitMQApi(API_URL, API_USER, API_PASSWORD, timeout=10)
    name = "maas-test-mqtt-" + uuid.uuid4().hex[:8]
    users = [BrokerUser(broker_username(name, u), hash_password(PASSWORD, b"salt"),
                        send=send, recv=recv) for u, (send, recv) in RULES.items()]
    state = VhostState(name, topics=[BrokerTopic("sensors"), BrokerTopic("other")], users=users)
    result = BrokerReconciler(api).apply(state)
    assert result.ok and result.verified == {"sensors", "other"}, result
    yield name
    BrokerReconciler(api).teardown(name)
    api.close()


class Client:
    """A paho-mqtt 2 client (MQTT 3.1.1) that records messages and its disconnection."""

    def __init__(self, vhost, user, client_id, will=None, clean=True):
        self.messages: queue.Queue = queue.Queue()
        self.dropped = False
        self.c = paho.Client(paho.CallbackAPIVersion.VERSION2, client_id=client_id,
                             clean_session=clean)
        self.c.username_pw_set(f"{vhost}:{broker_username(vhost, user)}", PASSWORD)
        if will:
            self.c.will_set(*will, qos=1)
        self.c.on_message = lambda c, u, m: self.messages.put((m.topic, m.payload, m.retain))
        self.c.on_disconnect = lambda c, u, f, rc, p: setattr(self, "dropped", True)
        self.c.reconnect_delay_set(60, 60)  # a refused client stays down
        self.c.connect("127.0.0.1", MQTT_PORT, keepalive=30)
        self.c.loop_start()
        deadline = time.monotonic() + 5
        while not self.c.is_connected() and time.monotonic() < deadline:
            time.sleep(0.02)
        assert self.c.is_connected(), f"{user} not connected"

    def subscribe(self, topic, qos=1):
        rc, mid = self.c.subscribe(topic, qos)
        assert rc == 0
        time.sleep(0.5)  # SUBACK, or the drop of a refused subscription
        return not self.dropped

    def publish(self, topic, payload, qos=1, retain=False):
        info = self.c.publish(topic, payload, qos=qos, retain=retain)
        if qos:
            info.wait_for_publish(timeout=3)
            return info.is_published() and not self.dropped
        time.sleep(0.5)
        return not self.dropped

    def get(self, timeout=5):
        return self.messages.get(timeout=timeout)

    def close(self):
        self.c.disconnect()
        self.c.loop_stop()


def test_a_send_recv_only_user_publishes_and_subscribes_at_qos_0_and_1(vhost):
    sub = Client(vhost, "sub", "sub-1")
    assert sub.subscribe("sensors/#", qos=1)
    pub = Client(vhost, "pub", "pub-1")
    assert pub.publish("sensors/room1", b"one", qos=1)
    assert pub.publish("sensors", b"zero", qos=0)
    assert sub.get() == ("sensors/room1", b"one", False)
    assert sub.get() == ("sensors", b"zero", False)
    sub.close()
    pub.close()


def test_rights_outside_the_rules_are_refused(vhost):
    pub = Client(vhost, "pub", "pub-2")
    assert not pub.publish("other/x", b"no")  # another topic: connection closed
    pub.close()
    pub = Client(vhost, "pub", "pub-3")
    assert not pub.subscribe("sensors/#")  # send only: no subscription
    pub.close()
    sub = Client(vhost, "sub", "sub-2")
    assert not sub.publish("sensors/room1", b"no")  # recv only: no publish
    sub.close()
    sub = Client(vhost, "sub", "sub-3")
    assert not sub.subscribe("other/#")
    sub.close()


def test_retained_message_reaches_a_later_subscriber(vhost):
    pub = Client(vhost, "pub", "pub-4")
    assert pub.publish("sensors/room2", b"21.5C", retain=True)
    pub.close()
    sub = Client(vhost, "sub", "sub-4")
    assert sub.subscribe("sensors/room2")
    assert sub.get() == ("sensors/room2", b"21.5C", True)
    sub.close()


def test_last_will_is_published_when_the_socket_is_killed(vhost):
    sub = Client(vhost, "sub", "sub-5")
    assert sub.subscribe("sensors/status")
    dying = Client(vhost, "both", "dying-1", will=("sensors/status", b"gone"))
    dying.c.loop_stop()
    dying.c.socket().shutdown(socket.SHUT_RDWR)  # no DISCONNECT: the broker sends the will
    dying.c.socket().close()
    assert sub.get(timeout=10) == ("sensors/status", b"gone", False)
    sub.close()


def test_an_amqp_receiver_of_the_whole_topic_gets_mqtt_publishes(vhost):
    conn = amqp(vhost, broker_username(vhost, "sub"), PASSWORD)
    receiver = conn.create_receiver("/exchange/sensors/#")
    pub = Client(vhost, "pub", "pub-6")
    assert pub.publish("sensors/room1", b"from mqtt")
    assert pub.publish("sensors", b"bare")
    got = [receiver.receive(timeout=10) for _ in range(2)]
    receiver.accept()
    # The routing key (AMQP subject) is the MQTT topic with `/` as `.`, first level included.
    assert sorted((m.subject, bytes(m.body)) for m in got) == [
        ("sensors", b"bare"), ("sensors.room1", b"from mqtt")]
    pub.close()
    conn.close()


def test_amqp_publishes_reach_the_mqtt_subscribers_of_their_subtopic(vhost):
    """AMQP to MQTT: a message to the topic `sensors` with the subject `room1` reaches MQTT
    subscribers of `sensors/room1` (x-maas-topic copies it to amq.topic with the key
    `sensors.room1`), its body as the payload; the copy never comes back to AMQP receivers."""
    everything = Client(vhost, "sub", "sub-7")
    assert everything.subscribe("sensors/#")
    room2 = Client(vhost, "sub", "sub-7b")
    assert room2.subscribe("sensors/room2")
    conn = amqp(vhost, broker_username(vhost, "both"), PASSWORD)
    whole = conn.create_receiver("/exchange/sensors/#")
    sender = conn.create_sender("/exchange/sensors")
    sender.send(Message(body="from amqp", subject="room1"))
    sender.send(Message(body=b"\x00\x01raw", subject="room1", inferred=True))  # a data section
    sender.send(Message(body="bare"))  # no subject: the MQTT topic `sensors`
    conn.create_sender("/exchange/sensors/room1").send(Message(body="keyed"))
    assert [everything.get() for _ in range(4)] == [
        ("sensors/room1", b"from amqp", False), ("sensors/room1", b"\x00\x01raw", False),
        ("sensors", b"bare", False), ("sensors/room1", b"keyed", False)]
    # Each once, none copied back. (A binary body is a view of a buffer proton's blocking
    # receiver has reused by now: only its type is compared.)
    got = [whole.receive(timeout=10).body for _ in range(4)]
    whole.accept()
    assert [b if isinstance(b, str) else "binary" for b in got] == [
        "from amqp", "binary", "bare", "keyed"]
    with pytest.raises(Exception):  # noqa: B017 - proton's Timeout: no copy came back
        whole.receive(timeout=1)
    with pytest.raises(queue.Empty):
        room2.get(timeout=0.5)
    everything.close()
    room2.close()
    conn.close()


def test_an_amqp_receiver_of_a_subtopic_gets_the_mqtt_publishes_of_that_subtopic(vhost):
    """`sensors/room1` is one subtopic in both protocols: MaaS's topic exchange type routes
    the MQTT key `sensors.room1` (arriving from amq.topic) as `room1`, the key the AMQP
    receiver of `/exchange/sensors/room1` binds."""
    conn = amqp(vhost, broker_username(vhost, "sub"), PASSWORD)
    room1 = conn.create_receiver("/exchange/sensors/room1")
    rooms = conn.create_receiver("/exchange/sensors/*")
    room2 = conn.create_receiver("/exchange/sensors/room2")
    pub = Client(vhost, "pub", "pub-8")
    assert pub.publish("sensors/room1", b"r1")
    assert pub.publish("sensors/room1/x", b"deeper")  # `*` is one level: room1 only
    assert pub.publish("sensors", b"bare")  # no subtopic: none of these
    assert bytes(room1.receive(timeout=10).body) == b"r1"
    assert bytes(rooms.receive(timeout=10).body) == b"r1"
    for r in (room1, rooms):
        r.accept()
    with pytest.raises(Exception):  # noqa: B017 - proton's Timeout
        room2.receive(timeout=1)
    assert len(room1.fetcher.incoming) == len(rooms.fetcher.incoming) == 0
    pub.close()
    conn.close()


def test_an_amqp_message_without_a_subject_reaches_whole_topic_receivers_and_mqtt(vhost):
    """No subject and no key in the address: routed as the empty key (RabbitMQ's own topic
    type fails the link), and to MQTT subscribers of the bare topic."""
    sub = Client(vhost, "sub", "sub-9")
    assert sub.subscribe("sensors")
    conn = amqp(vhost, broker_username(vhost, "both"), PASSWORD)
    whole = conn.create_receiver("/exchange/sensors/#")
    keyed = conn.create_receiver("/exchange/sensors/room1")
    sender = conn.create_sender("/exchange/sensors")
    sender.send(Message(body="no subject"))  # settled by RabbitMQ: the link lives on
    sender.send(Message(body="keyed", subject="room1"))
    assert [whole.receive(timeout=10).body for _ in range(2)] == ["no subject", "keyed"]
    assert keyed.receive(timeout=10).body == "keyed"
    whole.accept()
    keyed.accept()
    assert sub.get() == ("sensors", b"no subject", False)
    with pytest.raises(queue.Empty):  # `sensors` alone: not its subtopics
        sub.get(timeout=0.5)
    sub.close()
    conn.close()
