"""Retained messages through the gateway: the last one of a topic goes to a later subscriber,
is kept in PostgreSQL (so it survives a gateway restart and every replica sees it), an empty
retained message clears it, and only what the user may send and receive is kept or shown."""
import time

import pytest

from tests.mqtt.conftest import Client, add, user
from tests.workers.conftest import sync
from workers.models import RetainedMessage

pytestmark = pytest.mark.django_db(transaction=True)
BOTH_ROUTERS = True  # tests/mqtt/conftest.py: the embedded router and qdrouterd


@pytest.fixture
def sensors(gateway, space):
    add(space, "sensors", "topic", "standard-small-topic")
    add(space, "secret", "topic", "standard-small-topic")
    user(space)
    sync(space)
    return space


def retained_rows(space):
    return sorted(RetainedMessage.objects.filter(space_uid=space.uid)
                  .values_list("topic", flat=True))


def wait_rows(space, expected, timeout=5.0):
    deadline = time.monotonic() + timeout
    while retained_rows(space) != expected and time.monotonic() < deadline:
        time.sleep(0.05)
    assert retained_rows(space) == expected


def test_the_last_retained_message_reaches_a_late_subscriber_and_survives_a_restart(
        gateway, sensors):
    pub = Client(gateway, sensors)
    pub.publish("sensors/room1/temp", b"20", qos=1, retain=True)
    pub.publish("sensors/room1/temp", b"21", qos=1, retain=True)
    pub.publish("sensors/room2/temp", b"19", qos=0, retain=True)
    pub.publish("sensors/room2/hum", b"40", qos=1)  # not retained
    pub.close()
    wait_rows(sensors, ["sensors/room1/temp", "sensors/room2/temp"])
    late = Client(gateway, sensors)
    assert late.subscribe("sensors/+/temp", qos=1) == [1]
    got = late.received(2)
    assert sorted((m.topic, m.payload, m.retain) for m in got) == [
        ("sensors/room1/temp", b"21", True), ("sensors/room2/temp", b"19", True)]
    assert {m.qos for m in got if m.topic.endswith("room1/temp")} == {1}
    late.close()
    gateway.restart()
    after = Client(gateway, sensors)
    assert after.subscribe("sensors/room1/temp", qos=0) == [0]
    [msg] = after.received(1)
    assert (msg.topic, msg.payload, msg.retain) == ("sensors/room1/temp", b"21", True)
    after.close()


def test_an_empty_retained_message_clears_the_topic(gateway, sensors):
    pub = Client(gateway, sensors)
    pub.publish("sensors/door", b"open", qos=1, retain=True)
    wait_rows(sensors, ["sensors/door"])
    pub.publish("sensors/door", b"", qos=1, retain=True)
    wait_rows(sensors, [])
    pub.close()


def test_retained_messages_follow_the_users_rights(gateway, sensors):
    user(sensors, "reader", rules=[{"addresses": ["sensors"], "operations": ["recv"]}])
    sync(sensors)
    owner = Client(gateway, sensors)
    owner.publish("secret/code", b"1234", qos=1, retain=True)
    owner.publish("sensors/room1", b"ok", qos=1, retain=True)
    owner.close()
    wait_rows(sensors, ["secret/code", "sensors/room1"])
    # a user who may not send to `sensors` leaves nothing behind (and is disconnected)
    reader = Client(gateway, sensors, username="reader")
    assert reader.connected() == 0
    reader.client.publish("sensors/room1", b"forged", qos=1, retain=True)
    assert reader.disconnected.wait(5)
    reader.client.loop_stop()
    # `#` reaches `sensors` only: the retained message of `secret` is not shown
    reader = Client(gateway, sensors, username="reader")
    assert reader.subscribe("#", qos=1) == [1]
    [msg] = reader.received(1)
    assert (msg.topic, msg.payload) == ("sensors/room1", b"ok")
    time.sleep(0.5)
    assert len(reader.messages) == 1
    reader.close()
    assert RetainedMessage.objects.get(space_uid=sensors.uid, topic="sensors/room1").payload == b"ok"
