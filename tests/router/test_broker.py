"""Store-and-forward through RabbitMQ: waypoint queues over autoLinks, topics and durable
subscriptions over linkRoutes, and a router restart that must not lose acknowledged messages."""

import pytest
from proton import ConnectionException, Delivery, Message, Timeout
from proton.utils import LinkDetached

from .conftest import ADDRESS, AUTO_LINK, CONNECTOR, LINK_ROUTE, TcpProxy, add_tenant, pump_until

GROUP = {"users": "tom", "sources": "*", "targets": "*"}


def configure(mgmt, rabbit, broker_port: int) -> None:
    """What the router agent would (re)apply for tenant t2: a queue, a topic, a subscription."""
    add_tenant(mgmt, "t2", {"tom": "tom-pw"}, {"all": GROUP})
    mgmt.create(CONNECTOR, "broker", host="127.0.0.1", port=str(broker_port),
                role="route-container",
                saslUsername="guest", saslPassword="guest", virtualHost=f"vhost:{rabbit.vhost}")
    for queue in ("q1", "q2", "full"):
        mgmt.create(ADDRESS, f"t2-{queue}", prefix=f"t2/{queue}", waypoint=True)
        for direction in ("in", "out"):
            mgmt.create(AUTO_LINK, f"t2-{queue}-{direction}", address=f"t2/{queue}",
                        direction=direction, connection="broker",
                        externalAddress=f"/amq/queue/{queue}")
    # topic `news`: senders publish to /exchange/news/<key>, receivers bind with a key
    for direction in ("in", "out"):
        mgmt.create(LINK_ROUTE, f"t2-news-{direction}", prefix="t2/news", direction=direction,
                    connection="broker", delExternalPrefix="t2/", addExternalPrefix="/exchange/")
    # durable subscription `news-sub`: a queue bound to the topic (key `weather`)
    mgmt.create(LINK_ROUTE, "t2-news-sub", prefix="t2/news-sub", direction="out",
                connection="broker", delExternalPrefix="t2/",
                addExternalPrefix="/amq/queue/")


@pytest.fixture(scope="module")
def proxy():
    relay = TcpProxy()
    yield relay
    relay.close()


@pytest.fixture(scope="module", autouse=True)
def setup(router, mgmt, rabbit, proxy):
    for queue in ("q1", "q2", "news-sub"):
        rabbit.queue(queue)
    rabbit.queue("full", **{"x-max-length": 1, "x-overflow": "reject-publish"})
    rabbit.exchange("news")
    rabbit.bind("news", "news-sub", "weather")
    configure(mgmt, rabbit, proxy.port)
    wait_autolinks(mgmt)


def wait_autolinks(mgmt) -> None:
    def active():
        rows = mgmt.query(AUTO_LINK, ["name", "operStatus"])
        return rows and all(r["operStatus"] == "active" for r in rows)

    pump_until(active, mgmt.conn, timeout=10)


def broker_connection_ids(mgmt) -> set[str]:
    rows = mgmt.query("org.apache.qpid.dispatch.connection", ["identity", "role", "opened"])
    return {r["identity"] for r in rows if r["role"] == "route-container" and r["opened"]}


@pytest.fixture
def connect(router):
    opened = []

    def _connect():
        conn = router.connect("tom", "tom-pw", vhost="t2")
        opened.append(conn)
        return conn

    yield _connect
    for conn in opened:
        try:
            conn.close()
        except (Timeout, ConnectionException):
            pass  # opened against a router process that the restart test stopped


def send_all(conn, address: str, bodies) -> list:
    sender = conn.create_sender(address)
    pump_until(lambda: sender.link.credit > 0, conn)
    deliveries = [sender.link.send(Message(body=b, subject="sports")) for b in bodies]
    pump_until(lambda: all(d.settled for d in deliveries), conn, timeout=10)
    return [d.remote_state for d in deliveries]


def receive_n(conn, address: str, count: int, credit: int = 20) -> list:
    receiver = conn.create_receiver(address, credit=credit)
    bodies = []
    for _ in range(count):
        bodies.append(receiver.receive(10).body)
        receiver.accept()
    return bodies


def test_queue_stores_messages_until_a_consumer_comes(connect):
    assert send_all(connect(), "q1", ["a", "b", "c"]) == [Delivery.ACCEPTED] * 3
    assert receive_n(connect(), "q1", 3) == ["a", "b", "c"]


def test_sender_gets_the_broker_outcome_not_an_early_accept(connect):
    # `full` holds one message and rejects more: the router must pass that verdict on
    states = send_all(connect(), "full", ["kept", "refused"])
    assert states[0] == Delivery.ACCEPTED
    assert states[1] in (Delivery.REJECTED, Delivery.RELEASED, Delivery.MODIFIED)


def test_competing_consumers_share_a_queue(connect):
    c1, c2 = connect(), connect()
    r1 = c1.create_receiver("q2", credit=5)
    r2 = c2.create_receiver("q2", credit=5)
    send_all(connect(), "q2", list(range(8)))
    pump_until(lambda: len(r1.fetcher.incoming) + len(r2.fetcher.incoming) == 8, c1, c2,
               timeout=10)
    got1 = [r1.receive(1).body for _ in range(len(r1.fetcher.incoming))]
    got2 = [r2.receive(1).body for _ in range(len(r2.fetcher.incoming))]
    assert got1 and got2
    assert sorted(got1 + got2) == list(range(8))


def test_topic_copies_to_every_subscriber(connect):
    s1, s2 = connect(), connect()
    r1 = s1.create_receiver("news/#", credit=10)
    r2 = s2.create_receiver("news/#", credit=10)
    send_all(connect(), "news/sports", ["goal", "match"])
    assert [r1.receive(10).body for _ in range(2)] == ["goal", "match"]
    assert [r2.receive(10).body for _ in range(2)] == ["goal", "match"]


def test_durable_subscription_keeps_messages_while_away(connect):
    send_all(connect(), "news/weather", ["rain", "sun"])
    assert receive_n(connect(), "news-sub", 2) == ["rain", "sun"]


def test_broker_refusal_of_a_routed_link_reaches_the_client(connect):
    # routed to /amq/queue/news-sub/x, which RabbitMQ does not accept
    with pytest.raises(LinkDetached, match="invalid_destination"):
        connect().create_receiver("news-sub/x", credit=1)


def test_connector_reconnects_after_the_broker_drops_it(connect, mgmt, proxy):
    before = broker_connection_ids(mgmt)
    assert before and proxy.drop() >= 1
    pump_until(lambda: broker_connection_ids(mgmt) - before, mgmt.conn, timeout=20)
    wait_autolinks(mgmt)
    assert send_all(connect(), "q1", ["after"]) == [Delivery.ACCEPTED]
    assert receive_n(connect(), "q1", 1) == ["after"]


@pytest.mark.slow  # several seconds of waiting: not for the inner loop
def test_router_restart_loses_nothing_acknowledged(router, mgmt, rabbit, proxy, connect):
    assert send_all(connect(), "q1", ["x1", "x2"]) == [Delivery.ACCEPTED] * 2
    mgmt.close()
    router.restart()
    fresh = router.management()
    try:
        configure(fresh, rabbit, proxy.port)  # a restarted router is empty until the agent resyncs
        wait_autolinks(fresh)
        assert receive_n(connect(), "q1", 2) == ["x1", "x2"]
    finally:
        fresh.close()
