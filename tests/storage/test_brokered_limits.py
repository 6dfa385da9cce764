"""Limits of a brokered space's users on RabbitMQ, set by the storage reconciler alone: the
user limits (connections, channels over all of a user's connections) and the bound on the MQTT
plugin's session queues, which live outside the space's addresses. Real RabbitMQ (the test
node), real proton and paho clients."""
import uuid

import pytest
from proton import ConnectionException

from tests.storage.clients import API_PASSWORD, API_URL, API_USER, MQTT_PORT, amqp
from tests.storage.mqtt_device import PASSWORD, Device
from workers.agents.storage.desired import BrokerTopic, BrokerUser, VhostState
from workers.agents.storage.rabbitmq import (
    BrokerReconciler,
    RabbitMQApi,
    broker_username,
    hash_password,
)

pytestmark = pytest.mark.slow
QUEUE_BYTES = 64 * 1024


def sending(vhost: str, username: str):
    """A connection of the user with a sender on the topic (the session is what is refused)."""
    connection = amqp(vhost, username, PASSWORD)
    try:
        connection.create_sender("/exchange/sensors")
    except Exception:
        connection.close()
        raise
    return connection


@pytest.fixture
def space():
    api = RabbitMQApi(API_URL, API_USER, API_PASSWORD, timeout=10)
    vhost = f"maas-test-limits-{uuid.uuid4().hex[:8]}"
    user = BrokerUser(broker_username(vhost, "app"), hash_password(PASSWORD, b"salt"),
                      send=("sensors",), recv=("sensors",), max_connections=2, max_channels=4)
    state = VhostState(vhost, topics=[BrokerTopic("sensors")], users=[user],
                       mqtt_queue_max_bytes=QUEUE_BYTES)
    result = BrokerReconciler(api).apply(state)
    assert result.ok, result
    yield api, state
    BrokerReconciler(api).teardown(vhost)
    api.close()


def test_a_user_gets_no_more_connections_than_its_limit_until_the_limit_goes(space):
    api, state = space
    (user,) = state.users
    assert api.get_user(user.username)["limits"] == {"max-connections": 2, "max-channels": 4}
    held = [sending(state.vhost, user.username) for _ in range(2)]
    # The AMQP 1.0 plugin opens the connection, then refuses its first session.
    with pytest.raises(ConnectionException, match="refused"):
        sending(state.vhost, user.username)
    with pytest.raises(AssertionError, match="CONNACK 135"):  # paho's name of MQTT's 5
        Device(MQTT_PORT, state.vhost, "third")
    for connection in held:
        connection.close()

    state.users = [BrokerUser(**{**vars(user), "max_connections": None, "max_channels": None})]
    assert BrokerReconciler(api).apply(state).ok
    assert api.get_user(user.username)["limits"] == {}
    held = [sending(state.vhost, user.username) for _ in range(3)]
    for connection in held:
        connection.close()


def test_an_mqtt_session_queue_keeps_the_latest_messages_within_its_bound(space):
    _, state = space
    client_id = f"away-{uuid.uuid4().hex[:6]}"
    away = Device(MQTT_PORT, state.vhost, client_id, clean_session=False)
    away.c.subscribe("sensors/#", 1)
    away.round_trip()  # the subscription is in place
    away.close()
    sender = Device(MQTT_PORT, state.vhost, f"sender-{uuid.uuid4().hex[:6]}")
    chunk = b"x" * 4096
    for i in range(40):  # 160 KiB for a queue of 64
        sender.c.publish("sensors/data", b"%02d" % i + chunk, qos=1).wait_for_publish(10)
    sender.close()

    back = Device(MQTT_PORT, state.vhost, client_id, clean_session=False)
    back.wait(lambda: any(m.startswith(b"39") for m in back.messages), "the newest message")
    got = [int(m[:2]) for m in back.messages]
    assert len(got) <= QUEUE_BYTES // len(chunk) and got[-1] == 39, got
    assert 0 not in got  # the oldest went first
    back.close()
