"""The largest message of a vhost policy group (qdrouterd's maxMessageSize), on the embedded
router: a sender's attach says it, a message up to it goes through, a larger one is rejected with
amqp:link:message-size-exceeded and its connection closed, before the router holds it whole."""
import pytest
from proton import Message
from proton.utils import ConnectionClosed, LinkDetached, SendException

from .conftest import ADDRESS, add_tenant, pump_until

LIMIT = 4096


def rss_kib(router) -> int:
    """The router process's resident memory, in KiB."""
    with open(f"/proc/{router.proc.pid}/status") as status:
        return next(int(line.split()[1]) for line in status if line.startswith("VmRSS:"))


@pytest.fixture(scope="module", autouse=True)
def tenant(mgmt):
    add_tenant(mgmt, "sz", {"zoe": "zoe-pw"},
               {"all": {"users": "zoe", "sources": "*", "targets": "*",
                        "maxMessageSize": LIMIT}})
    mgmt.create(ADDRESS, "sz-any", prefix="sz/any", distribution="balanced")


def test_a_message_up_to_the_limit_goes_and_a_larger_one_ends_the_connection(router):
    receiving = router.connect("zoe", "zoe-pw", vhost="sz")
    receiver = receiving.create_receiver("any/box", credit=10)
    sending = router.connect("zoe", "zoe-pw", vhost="sz")
    sender = sending.create_sender("any/box")
    assert sender.link.remote_max_message_size == LIMIT
    pump_until(lambda: sender.link.credit > 0, sending, receiving)
    sender.link.send(Message(body="x" * (LIMIT // 2)))
    pump_until(lambda: len(receiver.fetcher.incoming) == 1, sending, receiving)
    assert receiver.receive(1).body == "x" * (LIMIT // 2)
    receiver.accept()

    with pytest.raises((SendException, LinkDetached, ConnectionClosed)):
        sender.send(Message(body="y" * (LIMIT * 50)))
    assert sender.link.remote_condition.name == "amqp:link:message-size-exceeded"
    assert sending.conn.remote_condition.name == "amqp:connection:forced"
    assert sending.conn.remote_condition.description == "Message size exceeded"
    receiving.close()


@pytest.mark.slow  # 160 MiB sent
def test_a_refused_large_message_leaves_no_lasting_memory(router):
    """The router's RSS after twenty refused 8 MiB messages: not 160 MiB more."""
    receiving = router.connect("zoe", "zoe-pw", vhost="sz")
    receiving.create_receiver("any/sink", credit=100)  # so that senders get credit
    before = rss_kib(router)
    for _ in range(20):
        conn = router.connect("zoe", "zoe-pw", vhost="sz")
        sender = conn.create_sender("any/sink")
        pump_until(lambda s=sender: s.link.credit > 0, conn, receiving)
        with pytest.raises((SendException, LinkDetached, ConnectionClosed)):
            sender.send(Message(body=b"z" * (8 << 20)), timeout=10)
        try:
            conn.close()
        except ConnectionClosed:
            pass
    receiving.close()
    assert rss_kib(router) - before < 32 * 1024  # kB: bounded by one message's frames, given back


@pytest.mark.slow  # 60 MiB carried
def test_connections_that_carried_large_messages_give_their_memory_back(router, mgmt):
    """Twenty senders, each on its own connection, carry a 3 MiB message and close: the router
    keeps at most what the receiver's live connection reuses, not 60 MiB (every closed
    connection's proton objects, with their delivery buffers, were once kept for good)."""
    add_tenant(mgmt, "sz3", {"bulky": "bulky-pw"},  # a name no other router test uses
               {"all": {"users": "bulky", "sources": "*", "targets": "*",
                        "maxMessageSize": 4 << 20}})
    mgmt.create(ADDRESS, "sz3-any", prefix="sz3/any", distribution="balanced")

    receiving = router.connect("bulky", "bulky-pw", vhost="sz3")
    receiver = receiving.create_receiver("any/big", credit=1)
    before = rss_kib(router) / 1024
    body = b"b" * (3 << 20)
    for _ in range(20):
        sending = router.connect("bulky", "bulky-pw", vhost="sz3")
        sender = sending.create_sender("any/big")
        pump_until(lambda s=sender: s.link.credit > 0, sending, receiving)
        sender.link.send(Message(body=body))
        pump_until(lambda: len(receiver.fetcher.incoming) == 1, sending, receiving, timeout=20)
        assert receiver.receive(1).body == body
        receiver.accept()
        sending.close()
    receiving.close()
    assert rss_kib(router) / 1024 - before < 24
