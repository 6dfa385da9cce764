"""Throttling on brokered spaces, with the real RabbitMQ and real clients: while the tenant is
over quota its users may not publish; their open connections are closed once, when the write
permission changes, and receivers work again after reconnecting (docs/storage.md, "Brokered
throttling"). The storage agent runs by hand, as the wake-up after the throttle's commit does.
"""
import uuid

import pytest
from proton import Message, Timeout

from config_service import services
from tenants import services as tenant_services
from tenants.models import Tenant, TenantQuota
from tests.conftest import CTX, b64
from tests.storage.clients import (
    API_PASSWORD,
    API_URL,
    API_USER,
    Mqtt,
    SessionEnded,
    amqp,
)
from workers.agents import runner
from workers.agents.storage.desired import BrokerQueue, BrokerUser, VhostState
from workers.agents.storage.rabbitmq import (
    BrokerError,
    BrokerReconciler,
    RabbitMQApi,
    broker_username,
    hash_password,
)

PASSWORD = "app-password"
BREACH = [{"limit": "messages_per_day", "used": 1200, "limit_value": 1000}]


def throttle(tenant) -> bool:
    """Throttles over BREACH: the tenant has that limit (throttle checks it is still breached)."""
    TenantQuota.objects.update_or_create(tenant=tenant, defaults={"messages_per_day": 1000})
    return tenant_services.throttle(ctx=CTX, tenant=tenant, limits=BREACH)


def brokered_space(tenant):
    s = services.create_address_space(ctx=CTX, tenant=tenant, name=f"t{uuid.uuid4().hex[:6]}",
                                      type="brokered", plan="brokered-single-broker")
    services.create_address(ctx=CTX, space=s, address="orders", type="queue",
                            plan="brokered-queue")
    services.create_address(ctx=CTX, space=s, address="news", type="topic",
                            plan="brokered-topic")
    services.create_messaging_user(
        ctx=CTX, space=s, username="app",
        authentication={"type": "password", "password": b64(PASSWORD)},
        authorization=[{"addresses": ["*"], "operations": ["send", "recv"]}])
    runner.run(s.uid, "storage")
    return s


@pytest.fixture
def spaces(tenant):
    """The tenant's brokered space and the outsider tenant's."""
    outsider = Tenant.objects.exclude(pk=tenant.pk).get()
    ours, theirs = brokered_space(tenant), brokered_space(outsider)
    yield ours, theirs
    for s in (ours, theirs):
        services.delete_address_space(ctx=CTX, space=s)
        runner.run(s.uid, "storage")


def connect(space):
    return amqp(space.vhost, broker_username(space.vhost, "app"), PASSWORD)


def mqtt(space, client_id):
    return Mqtt(f"{space.vhost}:{broker_username(space.vhost, 'app')}", PASSWORD, client_id)


def reconcile(*spaces):
    for s in spaces:
        runner.run(s.uid, "storage")


def test_a_throttled_tenant_cannot_publish_to_its_brokered_space(spaces, tenant):
    ours, theirs = spaces
    conn = connect(ours)
    sender = conn.create_sender("/amq/queue/orders")
    sender.send(Message(body="before"))
    outsider = connect(theirs)
    outsider_sender = outsider.create_sender("/amq/queue/orders")

    assert throttle(tenant)
    reconcile(ours, theirs)

    # The open sender's connection was closed by the broker (CONNECTION_FORCED, 320).
    with pytest.raises(SessionEnded, match="server_initiated_close,320"):
        sender.send(Message(body="after"))
    # A new sender is refused, to a queue and to a topic, as the client sees it:
    fresh = connect(ours)
    with pytest.raises(SessionEnded) as refused:
        fresh.create_sender("/amq/queue/orders").send(Message(body="refused"))
    assert str(refused.value) == (
        "Condition('amqp:unauthorized-access', \"ACCESS_REFUSED - access to exchange "
        f"'amq.default' in vhost '{ours.vhost}' refused for user "
        f"'{broker_username(ours.vhost, 'app')}'\")")
    with pytest.raises(SessionEnded, match="unauthorized-access.*exchange 'news'"):
        connect(ours).create_sender("/exchange/news/eu").send(Message(body="refused"))
    # Receivers work after they reconnect: the queued message, and a topic's temporary queue.
    reader = connect(ours)
    receiver = reader.create_receiver("/amq/queue/orders", credit=10)
    assert receiver.receive(timeout=10).body == "before"
    receiver.accept()
    reader.create_receiver("/exchange/news/eu", credit=10)
    # The outsider's space is untouched: its open sender goes on.
    outsider_sender.send(Message(body="unaffected"))

    reconcile(ours)  # a resync while throttled closes nothing more
    assert tenant_services.unthrottle(ctx=CTX, tenant=tenant, reason="usage back under quota")
    reconcile(ours)  # nor does lifting the throttle

    again = connect(ours)
    again.create_sender("/amq/queue/orders").send(Message(body="again"))
    assert receiver.receive(timeout=10).body == "again"  # the receiver's connection lived on
    receiver.accept()
    for c in (again, reader, outsider):
        c.close()


def test_mqtt_publishers_of_a_throttled_tenant_are_refused(spaces, tenant):
    ours, _ = spaces
    before = mqtt(ours, "pub-before")
    before.publish("news/eu", b"ok", qos=1)

    throttle(tenant)
    reconcile(ours)

    with pytest.raises((ConnectionError, OSError)):  # closed with the user's other connections
        before.ping()
    at_least_once = mqtt(ours, "pub-qos1")  # the CONNECT is accepted ...
    # ... the PUBLISH is refused: the topic permission (write on no routing key) makes the
    # broker close the connection (without one, RabbitMQ 3.10 left it open, with no PUBACK)
    with pytest.raises(ConnectionError):
        at_least_once.publish("news/eu", b"refused", qos=1)
    at_most_once = mqtt(ours, "pub-qos0")
    at_most_once.publish("news/eu", b"refused", qos=0)
    with pytest.raises((ConnectionError, OSError)):  # the broker closes the connection
        at_most_once.ping()

    tenant_services.unthrottle(ctx=CTX, tenant=tenant, reason="usage back under quota")
    reconcile(ours)
    after = mqtt(ours, "pub-after")
    after.publish("news/eu", b"ok", qos=1)
    for client in (at_least_once, after):
        client.close()


# --- the reconciler alone (no Django) ---------------------------------------------------


class FailingClose(RabbitMQApi):
    """The real client, except that closing connections fails as a busy broker would."""

    def close_user_connections(self, user):
        raise BrokerError("DELETE /connections/username: 503", transient=True)


@pytest.fixture
def vhost():
    api = RabbitMQApi(API_URL, API_USER, API_PASSWORD, timeout=10)
    name = "maas-test-throttle-" + uuid.uuid4().hex[:8]
    yield name
    BrokerReconciler(api).teardown(name)
    api.close()


def state(vhost, throttled):
    app = BrokerUser(broker_username(vhost, "app"), hash_password(PASSWORD, b"salt"),
                     send=("*",), recv=("*",))
    router = BrokerUser(broker_username(vhost, "$router-1"), hash_password(PASSWORD, b"salt"),
                        send=("*",), recv=("*",), router=True)
    return VhostState(vhost, queues=[BrokerQueue("orders", "queue")], users=[app, router],
                      throttled=throttled)


def test_connections_are_closed_only_when_the_throttle_changes_the_write_permission(vhost):
    api = RabbitMQApi(API_URL, API_USER, API_PASSWORD, timeout=10)
    reconciler = BrokerReconciler(api)
    app = broker_username(vhost, "app")
    assert reconciler.apply(state(vhost, False)).closed == []  # a new user: nothing to close
    throttled = reconciler.apply(state(vhost, True))
    assert throttled.closed == [f"connections:{app}"]  # not the router's login
    perms = {p["user"]: p for p in api.list_permissions(vhost)}
    assert perms[app]["write"] == ""
    assert perms[broker_username(vhost, "$router-1")]["write"] != ""
    assert reconciler.apply(state(vhost, True)).closed == []  # steady: nobody is kicked
    assert reconciler.apply(state(vhost, False)).closed == []  # lifting needs no reconnect
    assert {p["user"]: p for p in api.list_permissions(vhost)}[app]["write"] != ""


def test_a_failed_close_puts_the_permission_back_so_the_next_apply_retries(vhost):
    api = RabbitMQApi(API_URL, API_USER, API_PASSWORD, timeout=10)
    app = broker_username(vhost, "app")
    BrokerReconciler(api).apply(state(vhost, False))
    write_before = {p["user"]: p for p in api.list_permissions(vhost)}[app]["write"]
    failed = BrokerReconciler(FailingClose(API_URL, API_USER, API_PASSWORD)).apply(
        state(vhost, True))
    assert failed.transient and app in failed.user_errors and failed.closed == []
    assert {p["user"]: p for p in api.list_permissions(vhost)}[app]["write"] == write_before
    assert BrokerReconciler(api).apply(state(vhost, True)).closed == [f"connections:{app}"]


def test_a_receiver_connected_while_throttled_is_not_closed_by_resyncs(vhost):
    api = RabbitMQApi(API_URL, API_USER, API_PASSWORD, timeout=10)
    reconciler = BrokerReconciler(api)
    reconciler.apply(state(vhost, True))
    conn = amqp(vhost, broker_username(vhost, "app"), PASSWORD)
    receiver = conn.create_receiver("/amq/queue/orders", credit=5)
    for _ in range(3):
        reconciler.apply(state(vhost, True))
    with pytest.raises(Timeout):  # still attached: nothing to receive, but no session end
        receiver.receive(timeout=1)
    conn.close()
