"""Every refusal on a brokered space ends with an error condition within a second: real
event-driven proton clients and MQTT clients against the real RabbitMQ, the vhost configured by
the storage reconciler alone (no Django). docs/storage.md, "What a refused client sees"."""
import time
import uuid

import pytest
from proton import Message
from proton.handlers import MessagingHandler
from proton.reactor import Container

from tests.storage.clients import (
    AMQP_HOST,
    AMQP_PORT,
    API_PASSWORD,
    API_URL,
    API_USER,
    MQTT_PORT,
    Mqtt,
    _packet,
    _string,
)
from workers.agents.storage.desired import BrokerQueue, BrokerTopic, BrokerUser, VhostState
from workers.agents.storage.rabbitmq import (
    BrokerReconciler,
    RabbitMQApi,
    broker_username,
    hash_password,
)

PASSWORD = "refusal-pw"
WITHIN = 1.0  # seconds: the bound for every refusal
RULES = {  # user -> (send, recv)
    "reader": ((), ("orders",)),       # recv only
    "writer": (("orders",), ()),       # send to one queue only
    "mqtt": (("sensors",), ()),        # publish to one topic only
}


@pytest.fixture(scope="module")
def vhost():
    api = RabbitMQApi(API_URL, API_USER, API_PASSWORD, timeout=10)
    name = "maas-test-refuse-" + uuid.uuid4().hex[:8]
    users = [BrokerUser(broker_username(name, u), hash_password(PASSWORD, b"salt"),
                        send=send, recv=recv) for u, (send, recv) in RULES.items()]
    state = VhostState(name, queues=[BrokerQueue("orders", "queue"), BrokerQueue("other", "queue")],
                       topics=[BrokerTopic("sensors"), BrokerTopic("alarms")], users=users)
    result = BrokerReconciler(api).apply(state)
    assert result.ok and result.verified_users == {u.username for u in users}, result
    yield name
    BrokerReconciler(api).teardown(name)
    api.close()


class Attempt(MessagingHandler):
    """Attaches one link (and, for a sender, sends one message), then records the first error
    condition the broker answers with (session end, link detach, connection close or SASL
    failure) and how long after the attach, or the transfer, it came."""

    def __init__(self, vhost, user, address, role, password=PASSWORD):
        super().__init__(auto_accept=False)
        self.vhost, self.user, self.password = vhost, user, password
        self.address, self.role = address, role
        self.condition = None
        self.elapsed: float | None = None
        self.outcome = None  # a sender's delivery outcome, if the broker settled it
        self.started = 0.0
        self.sent = False

    def on_start(self, event):
        self.container = event.container
        self.conn = event.container.connect(
            f"amqp://{AMQP_HOST}:{AMQP_PORT}", user=broker_username(self.vhost, self.user),
            password=self.password, virtual_host=f"vhost:{self.vhost}", allowed_mechs="PLAIN",
            reconnect=False)
        self.started = time.monotonic()
        if self.role == "send":
            event.container.create_sender(self.conn, self.address)
        else:
            event.container.create_receiver(self.conn, self.address)
        self.timer = event.container.schedule(5, self)

    def on_timer_task(self, event):  # no answer at all: the failure the issue reported
        self.finish(None)

    def on_sendable(self, event):
        if not self.sent:
            self.sent = True
            self.started = time.monotonic()  # the refusal of a sender comes with its transfer
            event.sender.send(Message(body="refused?"))

    def on_accepted(self, event):
        self.outcome = "accepted"
        self.finish(None)

    def on_rejected(self, event):
        self.outcome = "rejected"
        self.finish(event.delivery.remote.condition)

    def on_session_error(self, event):
        self.finish(event.session.remote_condition)

    def on_link_error(self, event):
        self.finish(event.link.remote_condition)

    def on_connection_error(self, event):
        self.finish(event.connection.remote_condition)

    def on_transport_error(self, event):
        self.finish(event.transport.condition)

    def finish(self, condition):
        if self.elapsed is not None:
            return
        self.elapsed = time.monotonic() - self.started
        self.condition = condition
        self.timer.cancel()
        self.conn.close()

    def run(self) -> "Attempt":
        Container(self).run()
        return self


def refused(vhost, user, address, role, password=PASSWORD) -> Attempt:
    attempt = Attempt(vhost, user, address, role, password).run()
    assert attempt.condition is not None, (
        f"{user} {role} {address}: no error (outcome {attempt.outcome})")
    assert attempt.elapsed < WITHIN, f"{address}: refused after {attempt.elapsed:.2f} s"
    return attempt


def test_a_recv_only_user_sending_gets_unauthorized_access_within_a_second(vhost):
    attempt = refused(vhost, "reader", "/exchange/orders", "send")
    assert attempt.condition.name == "amqp:unauthorized-access"
    assert "ACCESS_REFUSED" in attempt.condition.description


def test_a_receive_without_a_recv_right_gets_unauthorized_access_within_a_second(vhost):
    attempt = refused(vhost, "writer", "/amq/queue/orders", "receive")
    assert attempt.condition.name == "amqp:unauthorized-access"
    assert "orders" in attempt.condition.description


@pytest.mark.parametrize("address", ["/amq/queue/other", "/queue/other", "other",
                                     "/exchange/other", "/exchange/amq.direct/other"])
def test_a_send_to_another_queue_by_any_address_form_is_refused_and_stores_nothing(
        vhost, address):
    attempt = refused(vhost, "writer", address, "send")
    assert attempt.condition.name == "amqp:unauthorized-access"
    api = RabbitMQApi(API_URL, API_USER, API_PASSWORD, timeout=10)
    try:  # the broker's own view of the queue: nothing arrived
        got = api.request("POST", f"/queues/{vhost}/other/get",
                          {"count": 10, "ackmode": "ack_requeue_false", "encoding": "auto"})
        assert got == []
    finally:
        api.close()


def test_a_send_within_the_rules_is_accepted(vhost):
    attempt = Attempt(vhost, "writer", "/exchange/orders", "send").run()
    assert attempt.outcome == "accepted" and attempt.condition is None


@pytest.mark.slow  # several seconds of waiting: not for the inner loop
def test_a_wrong_password_fails_the_sasl_exchange_after_rabbitmqs_delay(vhost):
    """Not an attach or a transfer: a login. RabbitMQ holds a failed login for 3 s on purpose
    (its SILENT_CLOSE_DELAY, against password guessing), then fails the SASL exchange."""
    attempt = Attempt(vhost, "writer", "/exchange/orders", "send", password="wrong").run()
    assert attempt.condition.name == "amqp:unauthorized-access"
    assert "Authentication failed" in attempt.condition.description
    assert attempt.elapsed < 3 + WITHIN


def mqtt_closed_after(client: Mqtt, packet: bytes) -> float:
    """Sends a packet and returns how long until the broker closed the connection."""
    client.sock.settimeout(5)
    started = time.monotonic()
    client.sock.sendall(packet)
    try:
        while client.sock.recv(1024):
            pass  # e.g. a PUBACK that precedes the close: the close is what counts
    except (TimeoutError, ConnectionResetError):
        pass
    return time.monotonic() - started


def test_an_mqtt_publish_outside_the_rules_closes_the_connection_within_a_second(vhost):
    user = f"{vhost}:{broker_username(vhost, 'mqtt')}"
    client = Mqtt(user, PASSWORD, "refused-pub")
    elapsed = mqtt_closed_after(client, _packet(0x32, _string("alarms/x") + b"\x00\x01no"))
    assert elapsed < WITHIN


def test_an_mqtt_subscribe_outside_the_rules_closes_the_connection_within_a_second(vhost):
    user = f"{vhost}:{broker_username(vhost, 'mqtt')}"
    client = Mqtt(user, PASSWORD, "refused-sub")
    elapsed = mqtt_closed_after(client, _packet(0x82, b"\x00\x01" + _string("sensors/#") + b"\x01"))
    assert elapsed < WITHIN


def test_an_mqtt_login_with_a_wrong_password_gets_a_connack_refusal(vhost):
    with pytest.raises(ConnectionError, match="CONNACK return code [45]"):
        Mqtt(f"{vhost}:{broker_username(vhost, 'mqtt')}", "wrong", "refused-login",
             port=MQTT_PORT)
