"""Persistent sessions (clean session 0): the subscriptions and the QoS 1 messages sent while
the device was away survive its absence and a gateway restart, kept in PostgreSQL (the
session) and in durable subscription addresses on the space's broker (the messages)."""
import time

import pytest

from config_service.models import Address
from eventlog.models import ConfigEvent
from tests.mqtt.conftest import Client, add, user
from tests.workers.conftest import sync
from workers.models import MqttSession

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]
BOTH_ROUTERS = True  # tests/mqtt/conftest.py: the embedded router and qdrouterd


def durable(space):
    return list(Address.objects.filter(space=space, type="subscription")
                .values_list("address", "topic"))


def wait(predicate, timeout=10.0, what="condition"):
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"{what} not reached in {timeout} s")
        time.sleep(0.05)


def test_a_persistent_session_gets_what_was_sent_while_away_across_a_gateway_restart(
        gateway, space):
    add(space, "sensors", "topic", "standard-small-topic")
    user(space)
    sync(space)
    device = Client(gateway, space, client_id="dev-1", clean_session=False)
    assert device.connected() == 0 and device.session_present is False
    mid = device.subscribe("sensors/+/temp", qos=1, wait=False)
    wait(lambda: durable(space), what="the durable subscription address")
    [(name, topic)] = durable(space)
    assert topic == "sensors" and name.startswith("mqtt-")
    assert ConfigEvent.objects.filter(type="address.created", actor__startswith="mqtt-gateway:"
                                      ).exists()
    sync(space)  # what the fan-out does after a change: the agents give it a broker queue
    assert device.suback(mid, timeout=30) == [1]
    device.close()
    assert device.disconnected.wait(5)

    pub = Client(gateway, space)
    pub.publish("sensors/room1/temp", b"while away", qos=1)
    pub.publish("sensors/room1/humidity", b"not for it", qos=1)
    pub.close()
    gateway.restart()

    back = Client(gateway, space, client_id="dev-1", clean_session=False)
    assert back.connected() == 0 and back.session_present is True
    [msg] = back.received(1)  # no SUBSCRIBE: the session has it
    assert (msg.topic, msg.payload, msg.qos) == ("sensors/room1/temp", b"while away", 1)
    time.sleep(0.5)
    assert len(back.messages) == 1
    back.close()
    assert MqttSession.objects.get(space_uid=space.uid, client_id="dev-1").subscriptions == {
        "sensors/+/temp": 1}

    # a clean session ends it: the session and its durable subscription go
    clean = Client(gateway, space, client_id="dev-1", clean_session=True)
    assert clean.connected() == 0 and clean.session_present is False
    wait(lambda: not durable(space), what="the durable subscription deleted")
    assert not MqttSession.objects.filter(space_uid=space.uid, client_id="dev-1").exists()
    clean.close()
