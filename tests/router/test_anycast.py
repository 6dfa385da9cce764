"""Direct (brokerless) addresses: anycast credit, balancing and outcomes; multicast copies."""

import pytest
from proton import Delivery, Message

from .conftest import ADDRESS, add_tenant, pump_until

GROUP = {"users": "ann", "sources": "*", "targets": "*"}


@pytest.fixture(scope="module", autouse=True)
def tenant(mgmt):
    add_tenant(mgmt, "t1", {"ann": "ann-pw"}, {"all": GROUP})
    mgmt.create(ADDRESS, "t1-any", prefix="t1/any", distribution="balanced")
    mgmt.create(ADDRESS, "t1-mc", prefix="t1/mc", distribution="multicast")


@pytest.fixture
def connect(router):
    opened = []

    def _connect():
        conn = router.connect("ann", "ann-pw", vhost="t1")
        opened.append(conn)
        return conn

    yield _connect
    for conn in opened:
        conn.close()


def test_sender_gets_no_credit_without_a_consumer(connect):
    s_conn = connect()
    sender = s_conn.create_sender("any/nobody")
    # The router grants a producer credit while handling its attach. Another attach on the
    # same connection is answered after that one was handled, and frames arrive in order:
    # once it is back, any credit for the first link would be here too.
    s_conn.create_sender("any/nobody-either")
    assert sender.link.credit == 0
    r_conn = connect()
    r_conn.create_receiver("any/nobody", credit=5)
    pump_until(lambda: sender.link.credit > 0, s_conn, r_conn)


def test_two_consumers_share_the_messages(connect):
    s_conn, r1_conn, r2_conn = connect(), connect(), connect()
    r1 = r1_conn.create_receiver("any/shared", credit=20)
    r2 = r2_conn.create_receiver("any/shared", credit=20)
    sender = s_conn.create_sender("any/shared")
    pump_until(lambda: sender.link.credit > 0, s_conn, r1_conn, r2_conn)
    deliveries = [sender.link.send(Message(body=i)) for i in range(10)]
    pump_until(lambda: len(r1.fetcher.incoming) + len(r2.fetcher.incoming) == 10,
               s_conn, r1_conn, r2_conn)
    got1 = [r1.receive(1).body for _ in range(len(r1.fetcher.incoming))]
    got2 = [r2.receive(1).body for _ in range(len(r2.fetcher.incoming))]
    assert got1 and got2
    assert sorted(got1 + got2) == list(range(10))
    assert not any(d.settled for d in deliveries)  # nobody has accepted yet


def test_sender_sees_the_consumer_outcome(connect):
    s_conn, r_conn = connect(), connect()
    receiver = r_conn.create_receiver("any/outcomes", credit=10)
    sender = s_conn.create_sender("any/outcomes")
    pump_until(lambda: sender.link.credit > 0, s_conn, r_conn)
    deliveries = [sender.link.send(Message(body=i)) for i in range(4)]
    pump_until(lambda: len(receiver.fetcher.incoming) == 4, s_conn, r_conn)
    receiver.receive(1)
    receiver.accept()
    receiver.receive(1)
    receiver.reject()
    receiver.receive(1)
    receiver.release(delivered=False)
    receiver.receive(1)
    receiver.fetcher.unsettled[0].local.undeliverable = True
    receiver.release(delivered=True)
    pump_until(lambda: all(d.settled for d in deliveries), s_conn, r_conn)
    assert [d.remote_state for d in deliveries] == [
        Delivery.ACCEPTED, Delivery.REJECTED, Delivery.RELEASED, Delivery.MODIFIED]
    assert deliveries[3].remote.undeliverable


def test_presettled_messages_are_forwarded_presettled(connect):
    s_conn, r_conn = connect(), connect()
    receiver = r_conn.create_receiver("any/fast", credit=10)
    sender = s_conn.create_sender("any/fast", options=None)
    sender.link.snd_settle_mode = 1  # settled
    pump_until(lambda: sender.link.credit > 0, s_conn, r_conn)
    for i in range(3):
        d = sender.link.send(Message(body=i))
        d.settle()
    pump_until(lambda: len(receiver.fetcher.incoming) == 3, s_conn, r_conn)
    assert [receiver.receive(1).body for _ in range(3)] == [0, 1, 2]


def test_multicast_copies_to_every_consumer(connect, mgmt):
    s_conn, r1_conn, r2_conn = connect(), connect(), connect()
    r1 = r1_conn.create_receiver("mc/news", credit=50)
    r2 = r2_conn.create_receiver("mc/news", credit=50)
    sender = s_conn.create_sender("mc/news")
    pump_until(lambda: sender.link.credit > 0, s_conn, r1_conn, r2_conn)
    deliveries = [sender.link.send(Message(body=i)) for i in range(5)]
    pump_until(lambda: len(r1.fetcher.incoming) == 5 and len(r2.fetcher.incoming) == 5,
               s_conn, r1_conn, r2_conn)
    assert [r1.receive(1).body for _ in range(5)] == list(range(5))
    assert [r2.receive(1).body for _ in range(5)] == list(range(5))
    pump_until(lambda: all(d.settled for d in deliveries), s_conn)
    assert {d.remote_state for d in deliveries} == {Delivery.ACCEPTED}


def test_address_counters_are_exposed(connect, mgmt):
    s_conn, r_conn = connect(), connect()
    receiver = r_conn.create_receiver("any/counted", credit=10)
    sender = s_conn.create_sender("any/counted")
    pump_until(lambda: sender.link.credit > 0, s_conn, r_conn)
    deliveries = [sender.link.send(Message(body=i)) for i in range(2)]
    pump_until(lambda: len(receiver.fetcher.incoming) == 2, s_conn, r_conn)
    receiver.receive(1)
    receiver.accept()
    receiver.receive(1)
    receiver.reject()
    pump_until(lambda: all(d.settled for d in deliveries), s_conn, r_conn)
    rows = mgmt.query("org.apache.qpid.dispatch.router.address")
    row = next(r for r in rows if r["address"] == "t1/any/counted")
    assert row["deliveriesIngress"] == 2 and row["deliveriesEgress"] == 2
    assert row["acceptedDeliveries"] == 1 and row["rejectedDeliveries"] == 1
    assert row["subscriberCount"] == 1
