"""A standard space's limits, as the operator set them (MAAS_ROUTER_POLICY, or a plan's
routerPolicy), configured by the router agent and held by the real router, on both routers: the
largest message (rejected with amqp:link:message-size-exceeded, its connection closed) and the
connections of one messaging user (the next refused with amqp:resource-limit-exceeded)."""
from urllib.parse import quote

import pytest
from django.conf import settings
from proton import ConnectionException, Message
from proton.utils import ConnectionClosed, LinkDetached, SendException

from tests.router.conftest import pump_until
from tests.workers import rabbit
from tests.workers.conftest import sync
from tests.workers.test_standard_space_e2e import (  # noqa: F401
    PASSWORD,
    add,
    connect,
    space,
    user,
)
from workers.naming import broker_username

BOTH_ROUTERS = True  # tests/workers/conftest.py: the embedded router and qdrouterd
LIMIT = 4096


@pytest.fixture
def limited(settings):
    settings.MAAS_ROUTER_POLICY = {**settings.MAAS_ROUTER_POLICY, "maxMessageSize": LIMIT,
                                   "maxConnectionsPerUser": 2}


def test_the_largest_message_and_a_user_s_connections_hold_on_the_router(router, limited,
                                                                         space):  # noqa: F811
    add(space, "box", "anycast", "standard-small-anycast")
    user(space)
    sync(space)
    receiving = connect(router, space)
    receiver = receiving.create_receiver("box", credit=10)
    sending = connect(router, space)
    sender = sending.create_sender("box")
    pump_until(lambda: sender.link.credit > 0, sending, receiving)
    sender.link.send(Message(body="x" * (LIMIT // 2)))
    pump_until(lambda: len(receiver.fetcher.incoming) == 1, sending, receiving)
    assert receiver.receive(1).body == "x" * (LIMIT // 2)
    receiver.accept()

    with pytest.raises((SendException, LinkDetached, ConnectionClosed)):
        sender.send(Message(body="y" * (LIMIT * 4)))
    pump_until(lambda: sending.conn.remote_condition is not None, sending, timeout=5)
    assert sending.conn.remote_condition.name == "amqp:connection:forced"
    try:
        sending.close()  # the router closed it; the client lets it go
    except ConnectionClosed:
        pass

    second = connect(router, space)  # two of this user's connections now, the limit
    with pytest.raises(ConnectionException, match="resource-limit-exceeded"):
        connect(router, space)
    second.close()
    receiving.close()


def test_a_standard_space_s_users_cannot_log_in_to_its_broker(router, space):  # noqa: F811
    """Its clients reach the broker through the router alone, under the space's limits: the
    vhost grants the router's login and no messaging user's, and RabbitMQ refuses theirs."""
    add(space, "orders", "queue", "standard-small-queue")
    user(space)
    sync(space)
    granted = {p["user"] for p in rabbit.api(
        f"/vhosts/{quote(space.vhost, safe='')}/permissions").json()}
    granted.discard(settings.RABBITMQ_API_USER)  # the control plane's own login
    assert granted and all(name.startswith("$router") for name in granted), granted
    with pytest.raises(ConnectionException):
        rabbit.connect(space.vhost, broker_username(space.vhost, "app"), PASSWORD)


def test_a_message_over_the_limit_to_a_queue_never_reaches_the_broker_link(router, limited,
                                                                           space):  # noqa: F811
    # Issue 60: a 10 MiB message released towards RabbitMQ ended the AMQP session of the
    # space's broker link (`function_clause` in basic.nack), and every queue with it. The
    # router refuses it at the limit, so the link and the space's queues stay up.
    add(space, "orders", "queue", "standard-small-queue")
    add(space, "other", "queue", "standard-small-queue")
    user(space)
    sync(space)
    sending = connect(router, space)
    with pytest.raises((SendException, LinkDetached, ConnectionClosed)):
        sending.create_sender("orders").send(Message(body="y" * (LIMIT * 4)))
    try:
        sending.close()
    except ConnectionClosed:
        pass
    conn = connect(router, space)
    for queue in ("orders", "other"):
        conn.create_sender(queue).send(Message(body=f"small to {queue}"))
        receiver = conn.create_receiver(queue, credit=1)
        assert receiver.receive(5).body == f"small to {queue}"
        receiver.accept()
    stored = rabbit.api(f"/queues/{quote(space.vhost, safe='')}/orders").json()
    assert stored.get("message_bytes", 0) < LIMIT  # the large message never got there
    conn.close()
