"""Broker epochs and the per-vhost assembly of `broker_counters`, on made-up readings (pure).

RabbitMQ refreshes a node's `uptime` once per copy of its statistics, so (read time - uptime)
saws by up to that interval (docs/storage.md, "Lag"): these tests feed that sawtooth and
restarts to `EpochMemory`.
"""
from datetime import UTC, datetime

import pytest

from tests.conftest import BROKER_STATS_COPY
from workers.agents.storage.rabbitmq import BrokerError
from workers.usage.broker_counters import EpochMemory, broker_epoch, vhost_counters

BROKER = "http://rabbit:15672/api"
START = datetime(2026, 11, 23, 21, 12, 4, tzinfo=UTC).timestamp() * 1000  # Unix ms
COPY_MS = int(BROKER_STATS_COPY * 1000)


def node(uptime_ms: int, pid: str = "2969", name: str = "rabbit@a") -> dict:
    return {"name": name, "os_pid": pid, "uptime": uptime_ms, "running": True}


def reading_at(memory: EpochMemory, elapsed_ms: int, stale_ms: int = 0, **kw):
    """The epoch read `elapsed_ms` after the start, with an uptime `stale_ms` old."""
    return broker_epoch(BROKER, [node(elapsed_ms - stale_ms, **kw)], START + elapsed_ms, memory)


def test_the_uptime_sawtooth_never_changes_the_epoch():
    memory = EpochMemory()
    first = reading_at(memory, 60_000)
    later = {reading_at(memory, 60_000 + i * 1_000, stale_ms=i * 1_000 % COPY_MS)
             for i in range(1, 200)}
    assert later == {first}


def test_a_node_near_an_hour_boundary_keeps_its_epoch():
    # Started 2 s before a full hour: readings land on both sides of it, the epoch does not.
    memory = EpochMemory()
    start_ms = datetime(2026, 11, 23, 21, 59, 58, tzinfo=UTC).timestamp() * 1000
    epochs = {broker_epoch(BROKER, [node(40_000 + i * 1_000 - i * 1_000 % COPY_MS)],
                           start_ms + 40_000 + i * 1_000, memory)[0] for i in range(80)}
    assert len(epochs) == 1


def test_a_restart_is_a_new_epoch_even_with_the_same_pid_within_the_hour():
    memory = EpochMemory()
    before = reading_at(memory, 600_000)
    after = broker_epoch(BROKER, [node(30_000)], START + 900_000, memory)  # uptime went down
    assert after[0] != before[0]
    assert after[1] > before[1]
    assert broker_epoch(BROKER, [node(40_000)], START + 910_000, memory) == after  # and stays


def test_a_new_os_pid_or_a_moved_start_is_a_new_epoch():
    memory = EpochMemory()
    first = reading_at(memory, 600_000)
    assert reading_at(memory, 601_000, pid="3100")[0] != first[0]
    other = EpochMemory()
    base = reading_at(other, 600_000)
    # Sampler down for two hours, the node restarted an hour ago: its uptime is higher.
    restarted = broker_epoch(BROKER, [node(3_600_000)], START + 600_000 + 7_200_000, other)
    assert restarted[0] != base[0]


def test_a_fresh_memory_names_a_running_node_as_before():
    assert reading_at(EpochMemory(), 600_000)[0] == reading_at(EpochMemory(), 900_000,
                                                               stale_ms=3_000)[0]


def test_the_memory_is_shared_through_its_store():
    store = {}

    class Cache:  # Django's cache interface, as a Redis-backed cache would be shared
        def get(self, key):
            return store.get(key)

        def set(self, key, value, timeout=None):
            store[key] = value

    first = reading_at(EpochMemory(Cache()), 600_000)
    assert reading_at(EpochMemory(Cache()), 700_000, stale_ms=4_000) == first


def test_a_broker_without_a_running_node_cannot_be_read():
    with pytest.raises(BrokerError):
        broker_epoch(BROKER, [{"name": "rabbit@a", "running": False}], START, EpochMemory())


def test_vhost_counters_assemble_rows_per_vhost():
    since = datetime(2026, 11, 23, 21, 12, tzinfo=UTC)
    vhosts = [{"name": "t.s", "tags": ["maas-owned", "maas-created-1795470000000"],
               "recv_oct": 120, "send_oct": 80,
               "message_stats": {"publish": 10, "ack": 4, "deliver_no_ack": 1, "get_no_ack": 1,
                                 "deliver_get": 9}},
              {"name": "other"}]
    queues = [
        {"vhost": "t.s", "name": "orders", "consumers": 2, "messages": 4, "message_bytes": 420,
         "arguments": {"x-maas-created": 1795470001000},
         "message_stats": {"publish": 10, "ack": 5, "deliver_get": 8}},
        {"vhost": "t.s", "name": "new-quorum", "messages": 3},  # no bytes emitted yet
        {"vhost": "gone", "name": "x"},
    ]
    exchanges = [{"vhost": "t.s", "name": "", "message_stats": {"publish_in": 10}},
                 {"vhost": "t.s", "name": "news", "arguments": {},
                  "message_stats": {"publish_in": 3, "publish_out": 6}}]
    connections = [{"vhost": "t.s"}, {"vhost": "t.s"}, {"vhost": "other"}]
    out = vhost_counters(vhosts, queues, exchanges, connections, "rabbit@a/1/2026-11-23T21Z",
                         since)
    v = out["t.s"]
    assert (v.messages_in, v.messages_out, v.deliveries) == (10, 6, 9)
    assert (v.bytes_in, v.bytes_out, v.connections, v.consumers) == (120, 80, 2, 2)
    assert v.epoch == "rabbit@a/1/2026-11-23T21Z/1795470000000"
    assert v.since == datetime.fromtimestamp(1795470000, UTC)
    orders = v.queues["orders"]
    assert (orders.messages_in, orders.messages_out, orders.stored_messages,
            orders.stored_bytes) == (10, 5, 4, 420)
    assert orders.epoch == v.epoch + "/1795470001000"
    assert (v.queues["new-quorum"].stored_messages, v.queues["new-quorum"].stored_bytes) == (
        None, None)
    assert set(v.exchanges) == {"news"}  # the default exchange is no address
    assert (v.exchanges["news"].messages_in, v.exchanges["news"].messages_out) == (3, 6)
    assert v.exchanges["news"].epoch == v.epoch  # made before creation times were stamped
    assert out["other"].connections == 1 and out["other"].epoch == "rabbit@a/1/2026-11-23T21Z"
    assert "gone" not in out
