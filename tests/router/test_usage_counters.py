"""Usage counters of the embedded router: an address's `router.address` counters outlive its
links (the usage ledger), keep their epoch while they do, and start again under a new epoch when
the address is deleted and created again. One real router (with a state directory) for the
module, real clients."""

import time

import pytest
from proton import Message

from .conftest import ADDRESS, RouterProcess, add_tenant, pump_until

ROUTER_ADDRESS = "org.apache.qpid.dispatch.router.address"
LINK = "org.apache.qpid.dispatch.router.link"
VHOST = "uc"
USER, PASSWORD = "uc-user", "uc-password"  # unique: USERS is shared
GROUP = {"users": USER, "sources": "*", "targets": "*", "allowDynamicSource": True}


@pytest.fixture(scope="module")
def router(tmp_path_factory):
    proc = RouterProcess(["--state-dir", str(tmp_path_factory.mktemp("router-state"))])
    proc.start()
    yield proc
    proc.stop()


@pytest.fixture(scope="module", autouse=True)
def tenant(mgmt):
    add_tenant(mgmt, VHOST, {USER: PASSWORD}, {"all": GROUP})
    mgmt.create(ADDRESS, "uc-any", prefix=f"{VHOST}/any", distribution="balanced")
    mgmt.create(ADDRESS, "uc-mc", prefix=f"{VHOST}/mc", distribution="multicast")


@pytest.fixture
def connect(router):
    opened = []

    def _connect():
        conn = router.connect(USER, PASSWORD, vhost=VHOST)
        opened.append(conn)
        return conn

    yield _connect
    for conn in opened:
        conn.close()


def address_row(mgmt, address: str, phase: int = 0) -> dict | None:
    rows = [r for r in mgmt.query(ROUTER_ADDRESS)
            if r["address"] == f"{VHOST}/{address}" and r["phase"] == phase]
    assert len(rows) <= 1, rows
    return rows[0] if rows else None


def links_to(mgmt, address: str) -> list[dict]:
    return [r for r in mgmt.query(LINK) if r["owningAddr"] == f"{VHOST}/{address}"]


def wait_detached(mgmt, address: str) -> None:
    deadline = time.monotonic() + 5
    while links_to(mgmt, address):
        assert time.monotonic() < deadline, "links still attached"
        time.sleep(0.05)


def send_and_receive(connect, address: str, count: int, receivers: int = 1):
    """`count` messages through `address` to each of `receivers`, accepted; returns the
    connections and the encoded size of all the messages."""
    r_conns = [connect() for _ in range(receivers)]
    links = [c.create_receiver(address, credit=count) for c in r_conns]
    s_conn = connect()
    sender = s_conn.create_sender(address)
    conns = (s_conn, *r_conns)
    pump_until(lambda: sender.link.credit > 0, *conns)
    size = 0
    deliveries = []
    for i in range(count):
        message = Message(body=f"message {i:06d}", properties={"i": i})
        deliveries.append(sender.link.send(message))
        size += len(message.encode())
        if sender.link.credit == 0:
            pump_until(lambda: sender.link.credit > 0, *conns)
    pump_until(lambda: all(len(r.fetcher.incoming) == count for r in links), *conns)
    for r in links:
        for _ in range(count):
            r.receive(1)
        while r.fetcher.unsettled:  # anycast; multicast copies come pre-settled
            r.accept()
    pump_until(lambda: all(d.settled for d in deliveries), *conns)  # settled by the router
    return conns, size


def test_anycast_counters_outlive_the_links(connect, mgmt):
    conns, size = send_and_receive(connect, "any/outlive", 300)
    before = address_row(mgmt, "any/outlive")
    for conn in conns:
        conn.close()
    wait_detached(mgmt, "any/outlive")
    after = address_row(mgmt, "any/outlive")
    assert after is not None, "the counters went with the node"
    assert (after["deliveriesIngress"], after["deliveriesEgress"]) == (300, 300)
    assert (after["bytesIngress"], after["bytesEgress"]) == (size, size)
    assert after["acceptedDeliveries"] == 300
    assert after["subscriberCount"] == 0 and after["containerCount"] == 0
    assert after["countersEpoch"] == before["countersEpoch"] != ""
    assert after["countersSince"] == before["countersSince"]
    assert abs(after["countersSince"] - time.time()) < 60  # UTC seconds


def test_multicast_counters_outlive_the_links(connect, mgmt):
    conns, size = send_and_receive(connect, "mc/outlive", 200, receivers=2)
    before = address_row(mgmt, "mc/outlive")
    for conn in conns:
        conn.close()
    wait_detached(mgmt, "mc/outlive")
    after = address_row(mgmt, "mc/outlive")
    assert after is not None, "the counters went with the node"
    assert (after["deliveriesIngress"], after["deliveriesEgress"]) == (200, 400)
    assert (after["bytesIngress"], after["bytesEgress"]) == (size, 2 * size)
    assert after["distribution"] == "multicast"
    assert after["countersEpoch"] == before["countersEpoch"] != ""


def test_multicast_counts_out_only_the_copies_a_receiver_had_credit_for(connect, mgmt):
    # A receiver that takes nothing and leaves after 100 were sent: the copies within its
    # credit went out to it; the others waited for credit and leave with it, never delivered,
    # never counted.
    r_conn, s_conn = connect(), connect()
    receiver = r_conn.create_receiver("mc/credit", credit=5)
    sender = s_conn.create_sender("mc/credit")
    for i in range(100):
        sender.send(Message(body=f"copy {i}"))  # the router settles a multicast send itself
    pump_until(lambda: len(receiver.fetcher.incoming) >= 5, r_conn, s_conn)
    r_conn.close()
    s_conn.close()
    wait_detached(mgmt, "mc/credit")
    row = address_row(mgmt, "mc/credit")
    # The client's window tops its credit up to about 10 as copies arrive: what went out is
    # what it had credit for, a few tens at most, never the 100 (nor 1,000 queued copies).
    assert row["deliveriesIngress"] == 100 and 5 <= row["deliveriesEgress"] <= 30


def test_counting_goes_on_under_the_same_epoch_when_links_come_back(connect, mgmt):
    conns, _ = send_and_receive(connect, "any/again", 10)
    first = address_row(mgmt, "any/again")
    for conn in conns:
        conn.close()
    wait_detached(mgmt, "any/again")
    send_and_receive(connect, "any/again", 15)
    again = address_row(mgmt, "any/again")
    assert again["deliveriesIngress"] == 25
    assert again["countersEpoch"] == first["countersEpoch"]


def test_a_deleted_and_created_again_address_counts_from_zero_under_a_new_epoch(connect, mgmt):
    mgmt.create(ADDRESS, "uc-gone", prefix=f"{VHOST}/gone")
    conns, _ = send_and_receive(connect, "gone/x", 20)
    old = address_row(mgmt, "gone/x")
    for conn in conns:
        conn.close()
    wait_detached(mgmt, "gone/x")
    assert mgmt.delete(ADDRESS, "uc-gone")[0] == 204
    assert address_row(mgmt, "gone/x") is None  # dropped with its configuration
    created = time.time()
    mgmt.create(ADDRESS, "uc-gone", prefix=f"{VHOST}/gone")
    r_conn = connect()
    r_conn.create_receiver("gone/x", credit=5)
    fresh = address_row(mgmt, "gone/x")
    assert fresh["countersEpoch"] not in ("", old["countersEpoch"])
    assert fresh["countersSince"] >= created - 1
    assert (fresh["deliveriesIngress"], fresh["deliveriesEgress"]) == (0, 0)
    assert (fresh["bytesIngress"], fresh["bytesEgress"]) == (0, 0)
    r_conn.close()
    send_and_receive(connect, "gone/x", 7)
    assert address_row(mgmt, "gone/x")["deliveriesIngress"] == 7


def test_an_entry_whose_configuration_went_leaves_with_its_last_link(connect, mgmt):
    mgmt.create(ADDRESS, "uc-late", prefix=f"{VHOST}/late")
    r_conn = connect()
    r_conn.create_receiver("late/x", credit=5)
    assert mgmt.delete(ADDRESS, "uc-late")[0] == 204
    assert address_row(mgmt, "late/x") is not None  # its node is still there
    r_conn.close()
    wait_detached(mgmt, "late/x")
    assert address_row(mgmt, "late/x") is None


def test_deleting_one_address_keeps_the_counters_of_its_neighbours(connect, mgmt):
    mgmt.create(ADDRESS, "uc-n1", prefix=f"{VHOST}/n1")
    mgmt.create(ADDRESS, "uc-n1-sub", prefix=f"{VHOST}/n1/sub")
    mgmt.create(ADDRESS, "uc-n10", prefix=f"{VHOST}/n10")
    for address in ("n1/sub/x", "n10", "n1/y"):
        conns, _ = send_and_receive(connect, address, 3)
        for conn in conns:
            conn.close()
        wait_detached(mgmt, address)
    assert mgmt.delete(ADDRESS, "uc-n1")[0] == 204
    assert address_row(mgmt, "n1/y") is None
    # still configured by a longer prefix, or not under the deleted one
    assert address_row(mgmt, "n1/sub/x")["deliveriesIngress"] == 3
    assert address_row(mgmt, "n10")["deliveriesIngress"] == 3


def test_dynamic_addresses_leave_no_counters(connect, mgmt):
    conn = connect()
    receiver = conn.create_receiver(None, dynamic=True)
    temp = receiver.remote_source.address
    assert address_row(mgmt, temp) is not None
    assert address_row(mgmt, temp)["countersEpoch"] == ""
    conn.close()
    wait_detached(mgmt, temp)
    assert address_row(mgmt, temp) is None
