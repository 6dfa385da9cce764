"""Brokered metering against the real RabbitMQ (no Django): what `broker_counters.read_broker`
reports equals what real clients did, once the statistics settle (docs/storage.md, "Brokered
metering"). Each test works in a vhost of its own, made by the reconciler and removed after.
"""
import os
import subprocess
import time
import uuid

import pytest
from proton import Message, Timeout

from tests.conftest import BROKER_STATS_COPY, BROKER_STATS_EMIT, BROKER_STATS_LAG
from tests.storage.clients import (
    AMQP_PORT,
    API_PASSWORD,
    API_URL,
    API_USER,
    MQTT_PORT,
    CountingProxy,
    Mqtt,
    amqp,
)
from workers.agents.storage.desired import BrokerQueue, BrokerTopic, BrokerUser, VhostState
from workers.agents.storage.rabbitmq import (
    BrokerReconciler,
    RabbitMQApi,
    broker_username,
    hash_password,
)
from workers.usage.broker_counters import EpochMemory, read_broker

pytestmark = pytest.mark.slow

PASSWORD = "meter-pw"
BODY = "x" * 100
# What RabbitMQ stores of Message(body=BODY) from proton: the amqp-value section, i.e. its
# descriptor (3 octets), str8-utf8 code and length (2) and the 100 characters.
STORED_SIZE = 105


@pytest.fixture(scope="module")
def api():
    client = RabbitMQApi(API_URL, API_USER, API_PASSWORD, timeout=10)
    client.request("GET", "/overview")  # the set-up starts RabbitMQ: unreachable is a failure
    yield client
    client.close()


def space(vhost: str) -> VhostState:
    """A queue, a topic with a subscription, and a user who may send and receive anything."""
    app = BrokerUser(broker_username(vhost, "app"), hash_password(PASSWORD),
                     send=("*",), recv=("*",))
    return VhostState(vhost, users=[app], topics=[BrokerTopic("news")], queues=[
        BrokerQueue("orders", "queue"), BrokerQueue("news::s1", "subscription", topic="news")])


@pytest.fixture(autouse=True)
def fresh_listings(monkeypatch):
    """Every reading here lists the vhost's objects: these tests check what RabbitMQ counts,
    not the sampler's reuse of an idle vhost's last listing (IdleVhosts, tested in
    test_broker_counters_parts.py). A vhost that stayed still for SETTLE_SECONDS would
    otherwise give its last listing again, and a queue recreated meanwhile with no message
    moving would keep the old queue's epoch until its relisting."""
    from workers.usage import broker_counters

    monkeypatch.setattr(broker_counters, "idle", broker_counters.IdleVhosts())
    monkeypatch.setattr(broker_counters, "SETTLE_SECONDS", float("inf"))


@pytest.fixture
def vhost(api):
    name = "maas-test-meter-" + uuid.uuid4().hex[:8]
    result = BrokerReconciler(api).apply(space(name))
    assert result.ok, result
    yield name
    BrokerReconciler(api).teardown(name)


def login(vhost: str) -> str:
    return broker_username(vhost, "app")


def counters(api, vhost: str, memory: EpochMemory | None = None):
    return read_broker(api, memory).vhosts[vhost]


def settle(api, vhost: str, done, timeout: float = 3 * BROKER_STATS_LAG):
    """The first reading of the vhost for which `done(reading)` holds, and how long it took.
    Up to BROKER_STATS_LAG; a busy broker was once seen still at 0 for 20 s more
    (docs/storage.md, "Exact")."""
    start = time.monotonic()
    while True:
        reading = counters(api, vhost)
        if done(reading):
            return reading, time.monotonic() - start
        assert time.monotonic() - start < timeout, f"not settled in {timeout} s: {reading}"
        time.sleep(0.2)


def send(vhost: str, address: str, n: int, port: int = AMQP_PORT, keep_open: bool = False):
    """n messages, each settled by the broker; the connection closes at once after, unless
    `keep_open` (then it is returned, for the caller to close)."""
    conn = amqp(vhost, login(vhost), PASSWORD, port)
    sender = conn.create_sender(address)
    for _ in range(n):
        sender.send(Message(body=BODY))
    return kept_or_closed(conn, keep_open)


def kept_or_closed(conn, keep_open: bool):
    """The connection, kept open after its last outcomes went out, or closed (None)."""
    if keep_open:
        try:  # the blocking connection sends the accepts only while it works: let it
            conn.wait(lambda: False, timeout=1)
        except Timeout:
            pass
        return conn
    conn.close()
    return None


def take(vhost: str, queue: str, m: int, prefetch: int, keep_open: bool = False):
    """Accepts m messages through a receiver that keeps `prefetch` credit out (so the broker
    delivers more than m, unacknowledged: still stored, and back in the queue when the
    connection closes). The connection closes at once after, unless `keep_open` (then it is
    returned, its receiver still attached)."""
    conn = amqp(vhost, login(vhost), PASSWORD)
    receiver = conn.create_receiver(f"/amq/queue/{queue}", credit=prefetch)
    for _ in range(m):
        receiver.receive(timeout=10)
        receiver.accept()
    return kept_or_closed(conn, keep_open)


def test_queue_messages_in_and_out_are_exact_once_the_stats_settle(api, vhost):
    n, m = 37, 12
    # Three publishers and a consumer whose connections stay open until the figures settle:
    # RabbitMQ 3.10 at times never shows the figures of a channel that closed within its
    # first statistics interval (seen 3 times in about 10 runs; docs/storage.md "Exact").
    clients = [send(vhost, "/amq/queue/orders", n, keep_open=True) for _ in range(3)]
    clients.append(take(vhost, "orders", m, prefetch=30, keep_open=True))
    seen = []

    def exact(v):
        q = v.queues["orders"]
        seen.append((q.messages_in, q.messages_out))
        # The stored bytes settle apart from the counts (seen once under load: 99 messages
        # with 0 bytes, docs/storage.md "Gauges read together"), and the vhost's totals apart
        # from its queue's (seen in CI: 111 in with 0 out at the vhost, 12 out at the queue):
        # waited for too, never ahead.
        return (q.messages_in, q.messages_out, q.stored_messages, q.stored_bytes) == (
            3 * n, m, 3 * n - m, (3 * n - m) * STORED_SIZE) and (
            v.messages_in >= 3 * n and v.messages_out >= m)

    v, lag = settle(api, vhost, exact)
    print(f"\ncounters settled {lag:.1f} s after the last message")
    for client in clients:
        client.close()
    q = v.queues["orders"]
    assert q.deliveries > m  # the prefetched deliveries, not accepted, are not "out"
    assert (v.messages_in, v.messages_out) == (3 * n, m)  # the vhost's totals agree
    # A reading before the statistics settled is behind, never ahead.
    assert all(i <= 3 * n and o <= m for i, o in seen)


def test_a_topic_counts_what_was_published_and_the_copies_it_routed(api, vhost):
    conn = amqp(vhost, login(vhost), PASSWORD)
    receiver = conn.create_receiver("/exchange/news/eu.sport", credit=20)  # a temporary queue
    time.sleep(0.2)  # its binding is in place once the attach is answered
    # The publishers stay connected until the figures settle: once (CI) a publisher that
    # closed at once never had its statistics emitted (docs/storage.md, "Exact"); this test
    # is about what a topic counts.
    publishers = [send(vhost, "/exchange/news/eu.sport", 9, keep_open=True),
                  send(vhost, "/exchange/news/us.sport", 4, keep_open=True)]  # `#` only
    for _ in range(9):
        receiver.receive(timeout=10)
        receiver.accept()
    conn.close()

    # The figures settle apart (seen: publish_in 0 with publish_out 22; a queue's count
    # before its stored messages; in CI, the vhost's publish still 0 after both): wait for
    # each, and then see that the vhost counts publishes, not copies.
    v, _ = settle(api, vhost, lambda v: v.exchanges["news"].messages_out == 9 + 13
                  and v.exchanges["news"].messages_in == 13
                  and v.queues["news::s1"].messages_in == 13
                  and v.queues["news::s1"].stored_messages == 13
                  and v.messages_in >= 13)
    news = v.exchanges["news"]
    assert (news.messages_in, news.messages_out) == (13, 22)  # 13 copies to s1, 9 to receiver
    assert news.stored_messages is None and news.stored_bytes is None  # exchanges store nothing
    assert v.queues["news::s1"].stored_messages == 13
    assert v.messages_in == 13  # the vhost counts publishes, not copies
    for publisher in publishers:
        publisher.close()


def test_the_metrics_gc_runs_seldom_against_the_copy_interval():
    """RabbitMQ's core metrics GC deletes a deleted queue's counts the collectors have not
    copied yet: a receiver's temporary queue, gone 5 s after it left, then takes the copies
    routed to it out of its topic's messages_out (reproduced: 13 instead of 22 above, with the
    GC forced just after the queue expired). The chance is about copy interval / GC interval,
    so deploy/local/services.sh runs the GC hourly (advanced.config). Checked on `make run`'s
    node, against the copy interval services.sh gives it."""
    copy = float(os.environ.get("MAAS_RABBITMQ_STATS_SECONDS", "30"))
    gc = subprocess.run(["rabbitmqctl", "-q", "eval", "sys:get_state(rabbit_core_metrics_gc)."],
                        check=True, capture_output=True, text=True, timeout=60).stdout
    interval_ms = int(gc.strip().rstrip("}").rsplit(",", 1)[1])
    assert copy * 1000 / interval_ms < 0.01, gc


def test_stored_gauges_agree_at_rest_and_read_zero_together_after_a_drain(api, vhost):
    send(vhost, "/amq/queue/orders", 300)
    v, _ = settle(api, vhost, lambda v: v.queues["orders"].stored_messages == 300
                  and v.queues["orders"].stored_bytes == 300 * STORED_SIZE)  # settle apart
    assert v.queues["orders"].stored_bytes == 300 * STORED_SIZE
    take(vhost, "orders", 300, prefetch=300)

    v, _ = settle(api, vhost, lambda v: v.queues["orders"].stored_messages == 0
                  and v.queues["orders"].stored_bytes == 0)
    # Once drained, the pair stays (0, 0) in every reading, over one copy of the statistics.
    end = time.monotonic() + BROKER_STATS_COPY + BROKER_STATS_EMIT
    while time.monotonic() < end:
        q = counters(api, vhost).queues["orders"]
        assert (q.stored_messages, q.stored_bytes) == (0, 0)
        time.sleep(0.25)


def mqtt_through(proxy: CountingProxy, vhost: str, client_id: str) -> Mqtt:
    return Mqtt(f"{vhost}:{login(vhost)}", PASSWORD, client_id, port=proxy.port)


def test_mqtt_connection_octets_equal_a_counting_proxy_and_survive_the_close(api, vhost):
    proxy = CountingProxy(("127.0.0.1", MQTT_PORT))
    client = mqtt_through(proxy, vhost, "meter-1")
    for i in range(25):
        client.publish("news/eu", b"m" * 300, qos=1, packet_id=i + 1)  # PUBACKed: it arrived
    v, lag = settle(api, vhost, lambda v: (v.bytes_in, v.bytes_out) == proxy.counted())
    print(f"\noctets equal the proxy's {lag:.1f} s after the last PUBACK: {proxy.counted()}")
    client.close()  # no DISCONNECT: nothing more passes
    time.sleep(BROKER_STATS_LAG + BROKER_STATS_EMIT)
    v = counters(api, vhost)
    assert (v.bytes_in, v.bytes_out) == proxy.counted()  # the closed connection still counts
    assert v.connections == 0


def test_octets_moved_just_before_a_close_are_not_counted(api, vhost):
    proxy = CountingProxy(("127.0.0.1", MQTT_PORT))
    client = mqtt_through(proxy, vhost, "meter-2")
    settle(api, vhost, lambda v: (v.bytes_in, v.bytes_out) == proxy.counted())
    for i in range(20):
        client.publish("news/eu", b"m" * 1000, qos=1, packet_id=i + 1)
    client.close()  # within the stats interval of those publishes
    time.sleep(BROKER_STATS_LAG + BROKER_STATS_EMIT)
    v = counters(api, vhost)
    up, _ = proxy.counted()
    print(f"\nproxy counted {up} octets in, RabbitMQ {v.bytes_in}: {up - v.bytes_in} not counted")
    assert v.bytes_in <= up  # never more than moved; what moved last is lost (documented)


def test_amqp_1_0_connections_report_no_octets_on_rabbitmq_3_10(api, vhost):
    proxy = CountingProxy(("127.0.0.1", AMQP_PORT))
    conn = send(vhost, "/amq/queue/orders", 20, port=proxy.port, keep_open=True)
    v, _ = settle(api, vhost, lambda v: v.queues["orders"].messages_in == 20)
    conn.close()
    time.sleep(BROKER_STATS_LAG + BROKER_STATS_EMIT)
    v = counters(api, vhost)
    assert proxy.counted()[0] > 20 * STORED_SIZE
    # If this fails, RabbitMQ now reports AMQP 1.0 octets: update docs/storage.md.
    assert (v.bytes_in, v.bytes_out) == (0, 0)


def test_connections_and_consumers_are_gauges_of_the_vhost(api, vhost):
    conn = amqp(vhost, login(vhost), PASSWORD)
    conn.create_receiver("/amq/queue/orders", credit=5)
    conn.create_receiver("/amq/queue/news::s1", credit=5)
    client = Mqtt(f"{vhost}:{login(vhost)}", PASSWORD, "meter-3")
    v, _ = settle(api, vhost, lambda v: v.connections == 2 and v.consumers == 2)
    assert v.queues["orders"].consumers == 1
    conn.close()
    client.close()
    settle(api, vhost, lambda v: v.connections == 0 and v.consumers == 0)


def test_the_epoch_is_stable_across_readings_and_new_for_a_recreated_queue(api, vhost):
    memory = EpochMemory()
    first = read_broker(api, memory)
    node = api.request("GET", "/nodes", params={"columns": "name,uptime"})[0]
    started = time.time() - node["uptime"] / 1000
    # the node's start: its uptime is refreshed once per copy of the statistics
    assert abs(first.since.timestamp() - started) <= BROKER_STATS_COPY + 2
    assert first.epoch.startswith(node["name"] + "/")
    space_row = first.vhosts[vhost]  # the vhost's counters began when MaaS created it
    assert space_row.epoch.startswith(first.epoch + "/") and space_row.since > first.since
    seen = set()
    for _ in range(int(BROKER_STATS_COPY) + 5):  # over a copy: the uptime sawtooth does not show
        reading = read_broker(api, memory)
        seen.add((reading.epoch, reading.since, reading.vhosts[vhost].epoch))
        time.sleep(1)
    assert seen == {(first.epoch, first.since, space_row.epoch)}

    before = counters(api, vhost, memory).queues["orders"]
    assert before.epoch.startswith(space_row.epoch + "/") and before.since >= space_row.since
    api.delete_queue(vhost, "orders")
    BrokerReconciler(api).apply(space(vhost))  # the resync puts it back: counters from 0
    after = counters(api, vhost, memory).queues["orders"]
    assert after.epoch != before.epoch and after.since > before.since
