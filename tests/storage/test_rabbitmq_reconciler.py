"""The RabbitMQ reconciler against the real broker (no mocks, no Django, no database).

Each test works in its own vhost `maas-test-<uuid>` and removes it (and its users) after.
The broker comes from the same environment variables as maas.settings; without a reachable
management API the tests fail: the set-up (deploy/local/services.sh) starts it.
"""
import contextlib
import os
import signal
import socket
import struct
import subprocess
import sys
import textwrap
import time
import uuid

import pytest
from proton import Delivery, Endpoint, Message, Timeout
from proton.utils import BlockingConnection, SendException

from tests import broker
from tests.conftest import wait_for
from tests.storage.clients import queue_policy
from workers.agents.storage.desired import BrokerQueue, BrokerTopic, BrokerUser, VhostState
from workers.agents.storage.rabbitmq import (
    DLX_EXCHANGE,
    OWNER_ARG,
    TEMP_QUEUE_EXPIRY_MS,
    BrokerError,
    BrokerReconciler,
    RabbitMQApi,
    broker_username,
    hash_password,
    pattern_regex,
    policy_definition,
    queue_type,
    user_permissions,
    verify_password,
)

pytestmark = pytest.mark.slow

API_URL = broker.API_URL
API_USER = os.environ.get("RABBITMQ_API_USER", "guest")
API_PASSWORD = os.environ.get("RABBITMQ_API_PASSWORD", "guest")
AMQP_HOST = os.environ.get("RABBITMQ_AMQP_HOST", "127.0.0.1")
AMQP_PORT, MQTT_PORT = broker.AMQP_PORT, broker.MQTT_PORT
PASSWORD = "s3cret-pw"


# --- fixtures and AMQP helpers ----------------------------------------------------------


class CountingApi(RabbitMQApi):
    """The real client, counting calls per HTTP method (to prove steady state is cheap)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.calls: list[str] = []

    def request(self, method, path, body=None, params=None, missing_ok=False, timeout=None):
        self.calls.append(method)
        return super().request(method, path, body, params, missing_ok, timeout)


@pytest.fixture(scope="module")
def api():
    client = CountingApi(API_URL, API_USER, API_PASSWORD, timeout=5)
    client.request("GET", "/overview")  # the set-up starts RabbitMQ: unreachable is a failure
    yield client
    client.close()


@pytest.fixture
def reconciler(api):
    return BrokerReconciler(api)


@pytest.fixture
def vhost(api, reconciler):
    name = "maas-test-" + uuid.uuid4().hex[:10]
    yield name
    reconciler.teardown(name)
    api.delete_vhost(name)
    for user in api.list_users():
        if user["name"].endswith("@" + name):
            api.delete_user(user["name"])


class SessionEnded(Exception):
    """RabbitMQ's AMQP 1.0 plugin reports errors by ending the session."""


class Connection(BlockingConnection):
    def on_session_remote_close(self, event):
        raise SessionEnded(str(event.session.remote_condition))


def connect(vhost: str, user: str, password: str = PASSWORD) -> Connection:
    return Connection(
        f"amqp://{AMQP_HOST}:{AMQP_PORT}", user=user, password=password,
        virtual_host=f"vhost:{vhost}", allowed_mechs="PLAIN", timeout=5,
    )


def send(vhost: str, user: str, address: str, *bodies: str) -> None:
    conn = connect(vhost, user)
    try:
        sender = conn.create_sender(address)
        for body in bodies:
            sender.send(Message(body=body))
    finally:
        conn.close()


def receive_all(vhost: str, user: str, queue: str, wait: float = 0.5) -> list[str]:
    conn = connect(vhost, user)
    bodies = []
    try:
        receiver = conn.create_receiver("/amq/queue/" + queue, credit=50)
        while True:
            try:
                message = receiver.receive(timeout=wait)
            except Exception:  # proton's Timeout: nothing more within `wait`
                break
            bodies.append(message.body)
            receiver.accept()
    finally:
        conn.close()
    return bodies


def receive_when_there(vhost: str, user: str, queue: str, count: int) -> list[str]:
    """What the queue holds once `count` messages have arrived there (dead-lettering after an
    expiry happens in the broker's own time)."""
    bodies: list[str] = []

    def arrived() -> bool:
        bodies.extend(receive_all(vhost, user, queue, wait=0.1))
        return len(bodies) >= count

    wait_for(arrived, timeout=10, interval=0.05, what=f"{count} messages on {queue}")
    return bodies + receive_all(vhost, user, queue)  # and nothing more


def user(vhost: str, name: str, **rights) -> BrokerUser:
    return BrokerUser(broker_username(vhost, name), hash_password(PASSWORD), **rights)


def full_state(vhost: str) -> VhostState:
    return VhostState(
        vhost=vhost,
        queues=[
            BrokerQueue("orders", "queue", deadletter="dlq", ttl_ms=60_000,
                        max_delivery_attempts=3, max_length_bytes=1_000_000),
            BrokerQueue("dlq", "deadletter"),
            BrokerQueue("news::s1", "subscription", topic="news", max_consumers=1),
        ],
        topics=[BrokerTopic("news")],
        users=[user(vhost, "app", send=("orders", "news"), recv=("orders", "news*", "dlq"))],
        max_connections=20,
    )


def by_name(rows):
    return {row["name"]: row for row in rows}


# --- pure functions ---------------------------------------------------------------------


def test_password_hash_matches_rabbitmq_format():
    # Computed by RabbitMQ 3.10 for the password "guest" (rabbit_password_hashing_sha256).
    rabbit_made = "YOxpLGHAZgeKCgu4Bu1d9M9qEwH9kzdVaPyOpym/9Ihd/7AW"
    assert verify_password("guest", rabbit_made)
    assert hash_password("guest", bytes.fromhex("60ec692c")) == rabbit_made
    hashed = hash_password("pw")
    assert hashed != hash_password("pw")  # salted
    assert verify_password("pw", hashed) and not verify_password("pw2", hashed)
    assert not verify_password("pw", "not base64!")


def test_patterns_and_permissions():
    assert pattern_regex("*") == ".*"
    assert pattern_regex("a.b*") == r"a\.b.*"
    assert broker_username("t.space", "bob@x.com") == "bob@x.com@t.space"
    with pytest.raises(ValueError):
        broker_username("t.space", "a:b")
    only_topic = BrokerUser("u@v", "h", send=("news",))
    assert "amq\\.default" not in user_permissions(only_topic, ["orders"], ["news"])["write"]
    nothing = user_permissions(BrokerUser("u@v", "h"), ["orders"], ["news"])
    assert nothing == {"configure": "", "write": "", "read": ""}
    manager = user_permissions(BrokerUser("u@v", "h", manage=True), [], [])
    assert manager["configure"].endswith("(.*)$")


def test_only_the_router_login_may_read_the_topics_fanout_exchanges():
    everything = dict(send=("*",), recv=("*",), manage=True)
    tenant_user = user_permissions(BrokerUser("u@v", "h", **everything), ["q"], ["news"])
    assert all("$maas" not in regex.replace(r"(?!\$maas\.)", "")
               for regex in tenant_user.values())
    router = user_permissions(BrokerUser("r@v", "h", send=("*",), recv=("*",), router=True),
                              ["q"], ["news"])
    assert router["read"].endswith(r"|^(\$maas\.all\..*)$")
    assert "$maas" not in router["write"].replace(r"(?!\$maas\.)", "")
    no_topics = user_permissions(BrokerUser("r@v", "h", recv=("*",), router=True), ["q"], [])
    assert "all" not in no_topics["read"]


def test_policy_definition_maps_plan_settings():
    queue = BrokerQueue("q", "queue", deadletter="d", ttl_ms=0, max_delivery_attempts=1,
                        max_length_bytes=10)
    assert policy_definition(queue) == {
        "message-ttl": 0, "dead-letter-exchange": DLX_EXCHANGE, "delivery-limit": 0,
        "max-length-bytes": 10, "overflow": "reject-publish",
    }
    assert queue_type(queue) == "quorum"
    assert queue_type(BrokerQueue("q", "queue", ttl_ms=5, max_length_bytes=10)) == "classic"
    sub = BrokerQueue("t::s", "subscription", topic="t")
    assert policy_definition(sub, BrokerTopic("t", expiry="e", ttl_ms=5)) == {
        "message-ttl": 5, "dead-letter-exchange": DLX_EXCHANGE,
    }


# --- against the broker -----------------------------------------------------------------


def test_api_errors_say_whether_to_retry(api, vhost):
    api.put_vhost(vhost)
    with pytest.raises(BrokerError) as refused:
        api.put_queue(vhost, "x" * 300, {})
    assert not refused.value.transient and "255" in refused.value.message
    with pytest.raises(BrokerError) as down:
        RabbitMQApi("http://127.0.0.1:1/api", "guest", "guest", timeout=1).list_users()
    assert down.value.transient


def test_creates_queue_topic_subscription_deadletter(api, reconciler, vhost):
    state = full_state(vhost)
    result = reconciler.apply(state)
    assert result.ok, result
    assert result.verified == {"orders", "dlq", "news::s1", "news"}
    assert result.verified_users == {broker_username(vhost, "app")}

    assert "maas-owned" in api.get_vhost(vhost)["tags"]
    queues = by_name(api.list_queues(vhost))
    # Quorum only where a delivery limit needs it; classic queues otherwise.
    assert {n: q["type"] for n, q in queues.items()} == {
        "orders": "quorum", "dlq": "classic", "news::s1": "classic"}
    assert all(q["durable"] for q in queues.values())
    assert queues["news::s1"]["arguments"]["x-single-active-consumer"] is True
    assert "x-message-ttl" not in queues["orders"]["arguments"]  # changeable: in the policy
    exchanges = by_name(api.list_exchanges(vhost))
    assert exchanges["news"]["type"] == "x-maas-topic"
    assert exchanges["$maas.all.news"]["type"] == "fanout"
    assert exchanges["$maas.all.news"]["internal"] is False
    # Transient but for the dead-letter exchange (rabbitmq_objects: durability).
    assert {n: x["durable"] for n, x in exchanges.items() if not n.startswith("amq.") and n} == {
        "news": False, "$maas.all.news": False, "orders": False, "dlq": False,
        "$maas.dlx": True}
    assert exchanges[DLX_EXCHANGE]["internal"] is True
    policy = queue_policy(api.list_policies(vhost), "orders")
    assert policy["definition"]["message-ttl"] == 60_000
    assert policy["definition"]["delivery-limit"] == 2
    bindings = [(b["source"], b["destination"], b["routing_key"])
                for b in api.list_bindings(vhost)]
    assert ("news", "news::s1", "#") in bindings
    assert ("news", "$maas.all.news", "#") in bindings
    assert api.get_vhost_limits(vhost) == {"max-connections": 20}

    # A message published to the topic under any key reaches the subscription queue.
    app = broker_username(vhost, "app")
    send(vhost, app, "/exchange/news/sport.football", "goal")
    assert receive_all(vhost, app, "news::s1") == ["goal"]


def test_second_apply_changes_nothing_and_is_cheap(api, reconciler, vhost):
    state = full_state(vhost)
    reconciler.apply(state)
    api.calls.clear()
    result = reconciler.apply(state)
    assert not result.changed and result.ok, result
    assert result.verified == {"orders", "dlq", "news::s1", "news"}
    # The vhost, its 7 lists, the users without permissions, and 1 GET per desired user (1).
    assert set(api.calls) == {"GET"} and len(api.calls) <= 10, api.calls


@pytest.mark.parametrize("queue_exchanges", [False, True], ids=["standard", "brokered"])
def test_a_new_queue_is_verified_by_listing_again_only_what_changed(api, reconciler, vhost,
                                                                   queue_exchanges):
    state = full_state(vhost)
    state.queue_exchanges = queue_exchanges
    reconciler.apply(state)
    state.queues.append(BrokerQueue("extra", "queue"))
    api.calls.clear()
    result = reconciler.apply(state)
    assert result.ok and result.verified == {"orders", "dlq", "news::s1", "news", "extra"}
    if not queue_exchanges:  # behind a router: the queue alone
        assert result.created == ["queue:extra"], result
        # 6 GETs to observe (the vhost, its user, its definitions, permissions, limits and
        # topic permissions; the broker's users without permissions, read by the apply
        # before, are reused), 1 PUT, then only the queues listed again (not all 9 kinds).
        assert api.calls.count("PUT") == 1 and api.calls.count("GET") == 6 + 1, api.calls
        return
    # Clients publish themselves: the queue's own exchange and its binding too; the
    # queues, exchanges and bindings read again in one read of the definitions.
    assert result.created == ["exchange:extra", "queue:extra",
                              'binding:extra->extra:{"x-maas-owned": true}'], result
    assert (api.calls.count("PUT"), api.calls.count("POST"), api.calls.count("GET")) == (
        2, 1, 6 + 1), api.calls


def test_policy_change_applies_live(api, reconciler, vhost):
    app = user(vhost, "app", send=("*",), recv=("*",))
    queues = [BrokerQueue("q", "queue", expiry="exp", ttl_ms=60_000), BrokerQueue("exp", "queue")]
    reconciler.apply(VhostState(vhost, queues=queues, users=[app]))
    send(vhost, app.username, "/amq/queue/q", "kept")

    queues[0] = BrokerQueue("q", "queue", expiry="exp", ttl_ms=200)
    result = reconciler.apply(VhostState(vhost, queues=queues, users=[app]))
    # Its settings moved it to the policy of queues set so (a new one here), its queue stays.
    assert not [o for o in result.created + result.deleted if not o.startswith("policy:")]
    assert result.is_active("q")
    assert queue_policy(api.list_policies(vhost), "q")["definition"]["message-ttl"] == 200
    # The same queue lives on (its message is still there) and now expires messages fast.
    assert receive_all(vhost, app.username, "q") == ["kept"]
    send(vhost, app.username, "/amq/queue/q", "short-lived")
    assert receive_when_there(vhost, app.username, "exp", 1) == ["short-lived"]


def test_queue_deleted_behind_our_back_is_recreated(api, reconciler, vhost):
    state = full_state(vhost)
    reconciler.apply(state)
    api.delete_queue(vhost, "orders")
    api.delete_queue(vhost, "news::s1")
    assert reconciler.verify(state).verified == {"dlq", "news"}
    result = reconciler.apply(state)
    assert {"queue:orders", "queue:news::s1"} <= set(result.created)
    assert result.is_active("orders") and result.is_active("news::s1")
    # The subscription's binding went with its queue and is back too.
    assert any(label.startswith("binding:news->news::s1") for label in result.created)


def test_fanout_exchange_deleted_behind_our_back_is_recreated_with_its_binding(
    api, reconciler, vhost
):
    state = full_state(vhost)
    reconciler.apply(state)
    api.delete_exchange(vhost, "$maas.all.news")  # its binding from the topic goes with it
    assert "news" not in reconciler.verify(state).verified
    result = reconciler.apply(state)
    assert "exchange:$maas.all.news" in result.created
    assert any(label.startswith("binding:news->$maas.all.news") for label in result.created)
    assert result.is_active("news")
    assert [(b["destination"], b["destination_type"])
            for b in api.list_source_bindings(vhost, "news")
            if b["destination_type"] == "exchange"] == [("$maas.all.news", "exchange")]


def test_a_stale_binding_of_ours_is_deleted_though_the_definitions_do_not_name_its_key(
    api, reconciler, vhost
):
    """A full apply reads the vhost's definitions, whose bindings carry no `properties_key`
    (RabbitMQ's name for a binding, with a hash of its arguments): deleting a stale one reads
    that key first. Only the stale binding goes; the desired one with the same ends stays."""
    state = full_state(vhost)
    assert reconciler.apply(state).ok
    api.create_binding(vhost, "news", "news::s1", "stale.#", {OWNER_ARG: True})
    result = reconciler.apply(state)
    assert result.ok, result
    assert [label for label in result.deleted if label.startswith("binding:")] == [
        'binding:news->news::s1:{"x-maas-owned": true}'], result.deleted
    keys = [b["routing_key"] for b in api.list_bindings_between(vhost, "news", "news::s1")]
    assert "stale.#" not in keys and keys, keys


def test_a_fanout_exchange_maas_did_not_make_is_never_adopted(api, reconciler, vhost):
    api.put_vhost(vhost)
    api.put_exchange(vhost, "$maas.all.news", "fanout", {})
    result = reconciler.apply(VhostState(vhost, topics=[BrokerTopic("news")]))
    assert "not owned" in result.errors["news"] and not result.is_active("news")
    assert api.list_source_bindings(vhost, "news") == []  # no binding into it
    reconciler.apply(VhostState(vhost))
    assert "$maas.all.news" in by_name(api.list_exchanges(vhost))


def test_objects_not_owned_are_never_deleted(api, reconciler, vhost):
    reconciler.apply(full_state(vhost))
    api.put_queue(vhost, "foreign", {})
    api.put_queue(vhost, "taken", {})
    api.put_exchange(vhost, "foreign-x", "fanout", {})
    api.put_policy(vhost, "foreign-p", "^foreign$", {"max-length": 5})
    api.create_binding(vhost, "news", "foreign", "k", {})
    stranger = broker_username(vhost, "stranger")
    api.put_user(stranger, hash_password(PASSWORD))  # no maas-owned tag
    api.put_permissions(vhost, stranger, "", "", ".*")

    state = full_state(vhost)
    state.queues.append(BrokerQueue("taken", "queue"))
    result = reconciler.apply(state)
    assert "not owned" in result.errors["taken"] and not result.is_active("taken")
    assert result.is_active("orders")

    reconciler.apply(VhostState(vhost))  # everything MaaS made goes
    assert set(by_name(api.list_queues(vhost))) == {"foreign", "taken"}
    assert "foreign-x" in by_name(api.list_exchanges(vhost))
    assert set(by_name(api.list_policies(vhost))) == {"foreign-p"}
    assert stranger in by_name(api.list_users())
    assert stranger in {p["user"] for p in api.list_permissions(vhost)}


def test_removed_address_is_deleted(api, reconciler, vhost):
    state = full_state(vhost)
    reconciler.apply(state)
    state.queues = [q for q in state.queues if q.name != "orders"]
    result = reconciler.apply(state)
    assert "queue:orders" in result.deleted
    assert queue_policy(api.list_policies(vhost), "orders") is None  # its policy went too
    assert "orders" not in by_name(api.list_queues(vhost))
    assert not [b for b in api.list_bindings(vhost) if b["source"] == DLX_EXCHANGE]
    assert result.verified == {"dlq", "news::s1", "news"}


def test_teardown_removes_owned_vhost_and_users(api, reconciler, vhost):
    reconciler.apply(full_state(vhost))
    result = reconciler.teardown(vhost)
    assert "vhost:" + vhost in result.deleted
    assert api.get_vhost(vhost) is None
    assert broker_username(vhost, "app") not in by_name(api.list_users())
    assert not reconciler.teardown(vhost).deleted  # idempotent


def test_teardown_keeps_a_vhost_maas_did_not_create(api, reconciler, vhost):
    api.put_vhost(vhost, "someone else's")
    api.put_queue(vhost, "foreign", {})
    reconciler.apply(full_state(vhost))
    reconciler.teardown(vhost)
    assert api.get_vhost(vhost) is not None
    assert api.get_vhost(vhost)["tags"] == []  # never adopted
    assert broker_username(vhost, "app") not in by_name(api.list_users())
    assert set(by_name(api.list_queues(vhost))) == {"foreign"}
    assert not [x for x in api.list_exchanges(vhost) if OWNER_ARG in x["arguments"]]
    assert not api.list_policies(vhost)


def test_users_send_receive_and_are_refused(api, reconciler, vhost):
    alice = user(vhost, "alice", send=("orders",), recv=("orders",))
    bob = user(vhost, "bob", recv=("orders",))
    state = full_state(vhost)
    state.users = [alice, bob]
    assert reconciler.apply(state).verified_users == {alice.username, bob.username}

    send(vhost, alice.username, "/exchange/orders", "hello")  # the queue's own exchange
    assert receive_all(vhost, bob.username, "orders") == ["hello"]

    with pytest.raises(SessionEnded, match="unauthorized-access"):
        send(vhost, bob.username, "/exchange/orders", "not allowed")
    with pytest.raises(SessionEnded, match="unauthorized-access"):
        receive_all(vhost, alice.username, "dlq")  # alice has no recv right on dlq
    with pytest.raises(Exception, match="unauthorized-access"):
        connect(vhost, alice.username, password="wrong")


def test_a_user_stores_only_into_the_queues_of_its_rules_whatever_the_address_form(
        api, reconciler, vhost):
    """The default exchange reaches every queue of the vhost, so only a user that may send
    everywhere (`*`) has it: a right to one queue is write on that queue's exchange alone."""
    alice = user(vhost, "alice", send=("orders",))
    anyone = user(vhost, "anyone", send=("*",), recv=("*",))
    state = full_state(vhost)
    state.users = [alice, anyone]
    assert reconciler.apply(state).verified_users == {alice.username, anyone.username}
    for address in ("/amq/queue/dlq", "/amq/queue/orders", "/queue/dlq", "dlq", "/exchange/dlq",
                    "/exchange/news", "/exchange/amq.direct/dlq", "/exchange/amq.fanout",
                    "/exchange/$maas.dlx", "/exchange/$maas.all.news", "/topic/dlq"):
        with pytest.raises(SessionEnded, match="unauthorized-access"):
            send(vhost, alice.username, address, "not allowed")
    send(vhost, alice.username, "/exchange/orders", "mine")
    send(vhost, anyone.username, "/amq/queue/dlq", "anyone's")  # `*`: the default exchange
    send(vhost, anyone.username, "/exchange/dlq", "also")
    assert receive_all(vhost, anyone.username, "dlq") == ["anyone's", "also"]
    assert receive_all(vhost, anyone.username, "orders") == ["mine"]
    exchanges = {x["name"]: x["type"] for x in api.list_exchanges(vhost)}
    assert exchanges["orders"] == exchanges["dlq"] == "fanout"
    assert "news::s1" not in exchanges  # a subscription is fed by its topic only


def mqtt_connect(username: str, password: str) -> int:
    """A bare MQTT 3.1.1 CONNECT; returns the CONNACK return code (0 = accepted)."""

    def string(value: str) -> bytes:
        raw = value.encode()
        return struct.pack("!H", len(raw)) + raw

    body = string("MQTT") + bytes([4, 0xC2]) + struct.pack("!H", 30)
    body += string("maas-test") + string(username) + string(password)
    with socket.create_connection((AMQP_HOST, MQTT_PORT), timeout=5) as conn:
        conn.sendall(bytes([0x10, len(body)]) + body)
        return conn.recv(4)[3]


def test_mqtt_login_with_broker_username(reconciler, vhost):
    alice = user(vhost, "alice", recv=("*",))
    reconciler.apply(VhostState(vhost, users=[alice]))
    accepted = mqtt_connect(f"{vhost}:{alice.username}", PASSWORD)
    assert accepted == 0
    assert mqtt_connect(f"{vhost}:{alice.username}", "wrong") != 0


def test_dead_letter_routes_by_reason(reconciler, vhost):
    app = user(vhost, "app", send=("*",), recv=("*",))
    queues = [
        BrokerQueue("work", "queue", deadletter="dlq", expiry="expired", ttl_ms=400,
                    max_delivery_attempts=2),
        BrokerQueue("dlq", "deadletter"),
        BrokerQueue("expired", "deadletter"),
    ]
    assert reconciler.apply(VhostState(vhost, queues=queues, users=[app])).ok

    conn = connect(vhost, app.username)
    try:
        receiver = conn.create_receiver("/amq/queue/work", credit=1)
        sender = conn.create_sender("/amq/queue/work")
        sender.send(Message(body="bad"))
        assert receiver.receive(timeout=2).body == "bad"
        receiver.settle(Delivery.REJECTED)
        sender.send(Message(body="flaky"))
        for _ in range(2):  # two attempts allowed, both released
            assert receiver.receive(timeout=2).body == "flaky"
            receiver.settle(Delivery.RELEASED)
    finally:
        conn.close()  # not receiver.close(): the 3.10 plugin leaves a link detach unanswered
    send(vhost, app.username, "/amq/queue/work", "late")  # nobody consumes it: it expires
    assert receive_when_there(vhost, app.username, "expired", 1) == ["late"]
    assert receive_when_there(vhost, app.username, "dlq", 2) == ["bad", "flaky"]
    assert receive_all(vhost, app.username, "work") == []


def test_classic_queue_policies_route_dead_letters_and_refuse_when_full(reconciler, vhost):
    """TTL, the dead-letter exchange, max-length-bytes and reject-publish on classic queues."""
    app = user(vhost, "app", send=("*",), recv=("*",))
    queues = [
        BrokerQueue("work", "queue", deadletter="dlq", expiry="expired", ttl_ms=400),
        BrokerQueue("small", "queue", max_length_bytes=50),
        BrokerQueue("dlq", "deadletter"),
        BrokerQueue("expired", "deadletter"),
    ]
    result = reconciler.apply(VhostState(vhost, queues=queues, users=[app]))
    assert result.ok and result.verified == {"work", "small", "dlq", "expired"}, result
    assert {q["type"] for q in reconciler.api.list_queues(vhost)} == {"classic"}

    conn = connect(vhost, app.username)
    try:
        receiver = conn.create_receiver("/amq/queue/work", credit=1)
        sender = conn.create_sender("/amq/queue/work")
        sender.send(Message(body="bad"))
        assert receiver.receive(timeout=2).body == "bad"
        receiver.settle(Delivery.REJECTED)
    finally:
        conn.close()
    send(vhost, app.username, "/amq/queue/work", "late")  # nobody consumes it: it expires
    send(vhost, app.username, "/amq/queue/small", "fits")
    # overflow reject-publish: the message that would overflow is refused (the 3.10 AMQP 1.0
    # plugin leaves such a delivery unsettled), and the queue keeps what it had.
    conn = connect(vhost, app.username)
    try:
        with pytest.raises((SendException, Timeout)):
            conn.create_sender("/amq/queue/small").send(Message(body="x" * 100), timeout=1)
    finally:
        with contextlib.suppress(Exception):
            conn.close()
    assert receive_when_there(vhost, app.username, "expired", 1) == ["late"]
    assert receive_when_there(vhost, app.username, "dlq", 1) == ["bad"]
    assert receive_all(vhost, app.username, "small") == ["fits"]


def test_queue_type_never_changes_on_a_live_queue(api, reconciler, vhost):
    app = user(vhost, "app", send=("*",), recv=("*",))
    classic = BrokerQueue("q", "queue", ttl_ms=60_000)
    assert reconciler.apply(VhostState(vhost, queues=[classic], users=[app])).is_active("q")
    send(vhost, app.username, "/amq/queue/q", "kept")

    # A plan change now asks for a delivery limit, which needs a quorum queue: the classic
    # queue is kept with its message, and the address reports why it is not in place.
    limited = BrokerQueue("q", "queue", ttl_ms=60_000, max_delivery_attempts=3)
    result = reconciler.apply(VhostState(vhost, queues=[limited], users=[app]))
    assert not result.is_active("q")
    assert "quorum" in result.errors["q"] and "recreate the address" in result.errors["q"]
    assert "queue:q" not in result.deleted and "queue:q" not in result.created
    assert by_name(api.list_queues(vhost))["q"]["type"] == "classic"
    assert "quorum" in reconciler.verify(VhostState(vhost, queues=[limited])).errors["q"]
    assert receive_all(vhost, app.username, "q") == ["kept"]

    # Recreating the address (delete, then create) gives it a quorum queue.
    reconciler.apply(VhostState(vhost, users=[app]))
    assert reconciler.apply(VhostState(vhost, queues=[limited], users=[app])).is_active("q")
    assert by_name(api.list_queues(vhost))["q"]["type"] == "quorum"

    # Dropping the limit later needs no other type: the quorum queue serves on, unchanged.
    result = reconciler.apply(VhostState(vhost, queues=[classic], users=[app]))
    assert result.ok and result.is_active("q") and "queue:q" not in result.deleted
    assert by_name(api.list_queues(vhost))["q"]["type"] == "quorum"
    policy = queue_policy(api.list_policies(vhost), "q")["definition"]
    assert "delivery-limit" not in policy


def test_its_own_vhost_without_the_managers_permissions_is_granted_them_again(
        api, reconciler, vhost):
    """A vhost PUT that timed out on a busy broker can leave the vhost without the creator's
    permissions (every later write: 401); the next apply grants them and converges."""
    state = VhostState(vhost=vhost, queues=[BrokerQueue(name="orders", kind="queue")])
    assert reconciler.apply(state).ok
    api.request("DELETE", f"/permissions/{vhost}/{API_USER}")
    more = VhostState(vhost=vhost, queues=[BrokerQueue(name="orders", kind="queue"),
                                           BrokerQueue(name="invoices", kind="queue")])
    result = reconciler.apply(more)
    assert result.ok, (result.errors, result.vhost_errors)
    assert result.is_active("invoices")
    assert API_USER in {p["user"] for p in api.list_permissions(vhost)}


def test_the_manager_gets_no_permissions_on_a_vhost_maas_did_not_create(api, reconciler, vhost):
    api.put_vhost(vhost, "someone else's")
    api.delete_permissions(vhost, API_USER)
    reconciler.apply(full_state(vhost))
    assert API_USER not in {p["user"] for p in api.list_permissions(vhost)}

# --- no broker queue outlives its receiver (issue 19, item 3) ---------------------------
# RabbitMQ 3.10 gives an AMQP 1.0 receiver of a topic (`/exchange/<topic>/<key>`) a
# server-named queue `amq.gen-*`, neither exclusive nor auto-delete; the reconciler's policy
# expires it once it has had no consumer for TEMP_QUEUE_EXPIRY_MS. The queue count goes back
# to zero after a link detach, a connection close and a killed client process, while a
# durable subscription's queue stays.


def temp_queues(api, vhost) -> list[str]:
    return [q["name"] for q in api.list_queues(vhost) if q["name"].startswith("amq.gen-")]


def apply(reconciler, vhost):
    reader = user(vhost, "reader", recv=("news*",))
    state = VhostState(vhost=vhost, topics=[BrokerTopic("news")],
                       queues=[BrokerQueue("news::keep", "subscription", topic="news")],
                       users=[reader])
    result = reconciler.apply(state)
    assert result.verified == {"news", "news::keep"}, result.errors
    return reader.username


def gone_within(api, vhost, seconds: float) -> float:
    started = time.monotonic()
    wait_for(lambda: not temp_queues(api, vhost), seconds, interval=0.25,
             what="the receivers' queues to expire")
    return time.monotonic() - started


def test_a_receivers_queue_goes_after_a_link_detach_and_a_connection_close(api, reconciler,
                                                                           vhost):
    reader = apply(reconciler, vhost)
    conn = connect(vhost, reader)
    first = conn.create_receiver("/exchange/news/a.*", credit=5)
    conn.create_receiver("/exchange/news/b.#", credit=5)
    wait_for(lambda: len(temp_queues(api, vhost)) == 2, 10, what="two receivers' queues")

    # A link detach: its queue goes; the other stays while its link is up.
    first.link.close()
    deadline = time.monotonic() + 5
    while not first.link.state & Endpoint.REMOTE_CLOSED and time.monotonic() < deadline:
        conn.container.process()  # the blocking close() waits on the session and times out
        time.sleep(0.05)
    wait_for(lambda: len(temp_queues(api, vhost)) == 1, TEMP_QUEUE_EXPIRY_MS / 1000 + 15,
             what="the detached receiver's queue to expire")
    conn.close()
    gone_within(api, vhost, TEMP_QUEUE_EXPIRY_MS / 1000 + 15)

    assert temp_queues(api, vhost) == []
    assert "news::keep" in {q["name"] for q in api.list_queues(vhost)}  # durable: stays


def test_a_killed_clients_queue_goes_too(api, reconciler, vhost):
    reader = apply(reconciler, vhost)
    client = textwrap.dedent(f"""
        import time
        from proton.utils import BlockingConnection
        conn = BlockingConnection("amqp://{AMQP_HOST}:{AMQP_PORT}", user={reader!r},
                                  password={PASSWORD!r}, virtual_host="vhost:{vhost}",
                                  allowed_mechs="PLAIN", timeout=5)
        conn.create_receiver("/exchange/news/x.y", credit=5)
        print("attached", flush=True)
        time.sleep(120)
    """)
    proc = subprocess.Popen([sys.executable, "-c", client], stdout=subprocess.PIPE, text=True,
                            env=dict(os.environ))
    try:
        assert proc.stdout.readline().strip() == "attached"
        wait_for(lambda: len(temp_queues(api, vhost)) == 1, 10, what="the receiver's queue")
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)

    gone_within(api, vhost, TEMP_QUEUE_EXPIRY_MS / 1000 + 20)
    assert temp_queues(api, vhost) == []


def test_the_expiry_policy_is_reconciled_with_the_topics(api, reconciler, vhost):
    apply(reconciler, vhost)
    policy = {p["name"]: p for p in api.list_policies(vhost)}["$maas.q.amq.gen"]
    api.delete_policy(vhost, "$maas.q.amq.gen")  # behind MaaS's back

    result = reconciler.apply(VhostState(vhost=vhost, topics=[BrokerTopic("news")]))
    again = {p["name"]: p for p in api.list_policies(vhost)}

    assert policy["definition"] == {"expires": TEMP_QUEUE_EXPIRY_MS}
    assert policy["pattern"] == r"^amq\.gen-.*" and policy["apply-to"] == "queues"
    assert "news" in result.verified
    assert again["$maas.q.amq.gen"]["definition"] == {"expires": TEMP_QUEUE_EXPIRY_MS}
    reconciler.apply(VhostState(vhost=vhost))  # the last topic gone: the policy goes too
    assert "$maas.q.amq.gen" not in {p["name"] for p in api.list_policies(vhost)}


def test_a_topic_made_with_rabbitmqs_topic_type_is_retyped_with_its_bindings(
        api, reconciler, vhost):
    """A broker that gets MaaS's topic type later (an upgrade): the next apply remakes each
    topic's exchange as x-maas-topic and puts back every binding, a live receiver's too."""
    from workers.agents.storage import rabbitmq_reconciler as rr
    reader, writer = user(vhost, "reader", recv=("news*",)), user(vhost, "writer", send=("news",))
    state = VhostState(vhost=vhost, topics=[BrokerTopic("news")],
                       queues=[BrokerQueue("news::keep", "subscription", topic="news")],
                       users=[reader, writer])
    rr._topic_types[api.base_url] = (time.monotonic() + 60, rr.FALLBACK_TOPIC_TYPE)
    try:  # as if the broker had no plugin
        assert reconciler.apply(state).verified == {"news", "news::keep"}
    finally:
        rr._topic_types.pop(api.base_url)
    assert {x["name"]: x["type"] for x in api.list_exchanges(vhost)}["news"] == "topic"
    conn = connect(vhost, reader.username)
    live = conn.create_receiver("/exchange/news/a.*", credit=5)
    wait_for(lambda: len(temp_queues(api, vhost)) == 1, 10, what="the receiver's queue")

    result = reconciler.apply(state)
    assert "exchange:news" in result.deleted and "exchange:news" in result.updated
    assert result.verified == {"news", "news::keep"}, result.errors
    assert {x["name"]: x["type"] for x in api.list_exchanges(vhost)}["news"] == "x-maas-topic"
    assert not reconciler.apply(state).changed  # settled

    send(vhost, writer.username, "/exchange/news", "no subject")  # needs x-maas-topic
    send(vhost, writer.username, "/exchange/news/a.b", "keyed")
    assert live.receive(timeout=5).body == "keyed"  # the receiver's binding was put back
    live.accept()
    conn.close()
    assert receive_all(vhost, reader.username, "news::keep") == ["no subject", "keyed"]


def test_a_durable_exchange_of_an_earlier_release_is_made_transient_with_its_bindings(
        api, reconciler, vhost):
    """Before MaaS's exchanges were transient (rabbitmq_objects: durability), a topic's and a
    queue's send exchange were durable: the next apply makes each again, transient, with every
    binding put back, and leaves the queue's messages and the dead-letter exchange alone."""
    reader = user(vhost, "reader", recv=("news*", "orders"))
    writer = user(vhost, "writer", send=("news", "orders"))
    state = VhostState(vhost=vhost, topics=[BrokerTopic("news")],
                       queues=[BrokerQueue("news::keep", "subscription", topic="news"),
                               BrokerQueue("orders", "queue")],
                       users=[reader, writer], queue_exchanges=True)
    assert reconciler.apply(state).verified == {"news", "news::keep", "orders"}
    send(vhost, writer.username, "/exchange/orders", "kept")
    # As the earlier release left them: the same exchanges and bindings, durable.
    for name, kind in (("news", "x-maas-topic"), ("$maas.all.news", "fanout"),
                       ("orders", "fanout")):
        bound = [b for b in api.list_bindings(vhost) if b["source"] == name or (
            b["destination"] == name and b["destination_type"] == "exchange")]
        api.delete_exchange(vhost, name)
        api.put_exchange(vhost, name, kind, {OWNER_ARG: True}, True, False)
        for b in bound:
            api.create_binding(vhost, b["source"], b["destination"], b["routing_key"],
                               b["arguments"], b["destination_type"])
    durable = {x["name"] for x in api.list_exchanges(vhost) if x["durable"]}
    assert {"news", "$maas.all.news", "orders"} <= durable

    result = reconciler.apply(state)
    assert {"exchange:news", "exchange:$maas.all.news", "exchange:orders"} <= set(result.updated)
    assert result.verified == {"news", "news::keep", "orders"}, result.errors
    exchanges = by_name(api.list_exchanges(vhost))
    assert [exchanges[n]["durable"] for n in ("news", "$maas.all.news", "orders", DLX_EXCHANGE)
            ] == [False, False, False, True]
    assert not reconciler.apply(state).changed  # settled

    send(vhost, writer.username, "/exchange/news/a.b", "to the subscription")
    send(vhost, writer.username, "/exchange/orders", "after")
    assert receive_all(vhost, reader.username, "news::keep") == ["to the subscription"]
    assert receive_all(vhost, reader.username, "orders") == ["kept", "after"]
