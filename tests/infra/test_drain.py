"""The RabbitMQ drainer against this machine's RabbitMQ (make test starts it).

The leaving broker and its target are both the local RabbitMQ (on Kubernetes they are two
brokers' Services), so what is checked is the drainer's part: it counts the messages stored in
the space's vhost, asks the broker for a shovel per non-empty queue (refused where the shovel
plugin is off, as here: the queue is then left to its consumers), and reports 0 once the
queues are empty, or when the vhost is gone or no broker is left to move them to.
"""
import os
import uuid
from urllib.parse import quote

import pytest

from tests import broker
from tests.conftest import BROKER_STATS_LAG, wait_for
from workers.agents.storage.rabbitmq import RabbitMQApi
from workers.infra import manifests as m
from workers.infra.controller import DRAIN_SETTLING
from workers.infra.drain import RabbitMQDrainer

from . import spaces

pytestmark = pytest.mark.slow

API_URL = broker.API_URL
USER = os.environ.get("RABBITMQ_API_USER", "guest")
PASSWORD = os.environ.get("RABBITMQ_API_PASSWORD", "guest")
HOST, _, MANAGEMENT_PORT = API_URL.split("//", 1)[1].split("/", 1)[0].rpartition(":")
# The test node's ports, where the broker pods listen on RabbitMQ's defaults; plain, as the
# test node's API is (the pods' TLS is checked in test_internal_tls.py).
PORTS = {"management_port": int(MANAGEMENT_PORT), "amqp_port": broker.AMQP_PORT, "tls": False}


@pytest.fixture
def space():
    s = m.SpaceInfra(uid=str(uuid.uuid4()), tenant="drain", name=uuid.uuid4().hex[:8],
                     plan="standard-small", router_replicas=1, brokers=())
    api = RabbitMQApi(API_URL, USER, PASSWORD)
    yield s, api
    api.delete_vhost(s.vhost)
    api.close()


def stored(api, vhost, queue):
    info = api.request("GET", f"/queues/{quote(vhost, safe='')}/{quote(queue, safe='')}")
    return info.get("messages") or 0


def test_drain_counts_until_the_queues_are_empty(space):
    s, api = space
    # Settling twice the test broker's statistics lag, as SETTLE_SECONDS is RabbitMQ's.
    drainer = RabbitMQDrainer(spaces.CFG, lambda infra: PASSWORD, user=USER,
                              host_of=lambda sp, cluster: HOST, **PORTS,
                              settle=2 * BROKER_STATS_LAG)
    assert drainer.drain(s, "broker-1", ("broker-0",)) == 0  # no vhost there: nothing stored
    api.put_vhost(s.vhost)
    api.put_permissions(s.vhost, USER, ".*", ".*", ".*")
    api.put_queue(s.vhost, "orders", {})
    vhost = quote(s.vhost, safe="")
    for i in range(3):
        api.request("POST", f"/exchanges/{vhost}/amq.default/publish", body={
            "properties": {"delivery_mode": 2}, "routing_key": "orders",
            "payload": f"m{i}", "payload_encoding": "string"})
    # queue totals are refreshed by the stats interval
    wait_for(lambda: stored(api, s.vhost, "orders") == 3, timeout=2 * BROKER_STATS_LAG, interval=0.2,
             what="the broker to count the 3 messages")

    assert drainer.drain(s, "broker-1", ("broker-0",)) == 3
    assert drainer.drain(s, "broker-1", ()) == 0  # nothing left in the space to keep them for
    api.purge_queue(s.vhost, "orders")  # its consumers drained it
    wait_for(lambda: drainer.drain(s, "broker-1", ("broker-0",)) == 0, timeout=4 * BROKER_STATS_LAG,
             interval=0.2, what="the drainer to see the purged queue empty")


def test_a_message_stored_just_before_the_drain_keeps_the_broker(space):
    """The count is a statistic, up to BROKER_STATS_LAG old here: a queue that reads empty at
    once is not believed until a reading made `settle` after the drain began."""
    s, api = space
    drainer = RabbitMQDrainer(spaces.CFG, lambda infra: PASSWORD, user=USER,
                              host_of=lambda sp, cluster: HOST, **PORTS,
                              settle=BROKER_STATS_LAG + 5)
    api.put_vhost(s.vhost)
    api.put_permissions(s.vhost, USER, ".*", ".*", ".*")
    api.put_queue(s.vhost, "orders", {})
    api.request("POST", f"/exchanges/{quote(s.vhost, safe='')}/amq.default/publish", body={
        "properties": {"delivery_mode": 2}, "routing_key": "orders", "payload": "last",
        "payload_encoding": "string"})
    first = drainer.drain(s, "broker-1", ("broker-0",))
    assert first in (DRAIN_SETTLING, 1)  # 0 here would delete a broker holding the message
    wait_for(lambda: drainer.drain(s, "broker-1", ("broker-0",)) == 1,
             timeout=2 * BROKER_STATS_LAG, interval=0.5, what="the stored message to show")
    api.purge_queue(s.vhost, "orders")
    wait_for(lambda: drainer.drain(s, "broker-1", ("broker-0",)) == 0,
             timeout=2 * BROKER_STATS_LAG, interval=0.5, what="the drainer to confirm it empty")


def test_each_drain_waits_its_own_settle(space):
    """The drainer's clock (given here) starts at a drain's first call; a drain not asked about
    for `stale` seconds (the broker was wanted again, then removed again) starts over."""
    s, api = space
    now = [0.0]
    drainer = RabbitMQDrainer(spaces.CFG, lambda infra: PASSWORD, user=USER,
                              host_of=lambda sp, cluster: HOST, **PORTS, settle=20, stale=900,
                              clock=lambda: now[0])
    api.put_vhost(s.vhost)
    api.put_permissions(s.vhost, USER, ".*", ".*", ".*")
    api.put_queue(s.vhost, "orders", {})  # empty, as the broker counts it

    def at(t: float) -> int:
        now[0] = t
        return drainer.drain(s, "broker-1", ("broker-0",))

    assert [at(0), at(19), at(21)] == [DRAIN_SETTLING, DRAIN_SETTLING, 0]
    assert [at(30), at(51)] == [DRAIN_SETTLING, 0]  # drained before: a new drain, a new wait
    assert at(60) == DRAIN_SETTLING
    assert [at(2000), at(2010), at(2021)] == [DRAIN_SETTLING, DRAIN_SETTLING, 0]  # stale


def test_an_unreachable_broker_is_unknown(space):
    s, _ = space
    drainer = RabbitMQDrainer(spaces.CFG, lambda infra: "x", timeout=2,
                              host_of=lambda sp, cluster: "broker.invalid")
    assert drainer.drain(s, "broker-1", ("broker-0",)) == -1


def test_each_queue_s_messages_go_to_the_broker_its_address_is_placed_on_now(space):
    """A space of several brokers: a queue re-placed on broker-2 is moved there, where the
    storage controller keeps it (on the first remaining broker it would be an unknown queue);
    a queue no address wants any more goes to the first. The shovels are read as the drainer
    asks the broker for them (this broker has no shovel plugin to run them)."""
    s, api = space
    asked = {}

    class Recording(RabbitMQDrainer):
        @staticmethod
        def _shovel(api, space, cluster_id, queue, src, dest):
            asked[queue] = dest

    drainer = Recording(spaces.CFG, lambda infra: PASSWORD, user=USER,
                        host_of=lambda sp, cluster: HOST if cluster == "broker-1"
                        else f"{cluster}.example", **PORTS,
                        placed=lambda sp, queue: ("broker-2",) if queue == "orders" else ())
    api.put_vhost(s.vhost)
    api.put_permissions(s.vhost, USER, ".*", ".*", ".*")
    for queue in ("orders", "gone"):
        api.put_queue(s.vhost, queue, {})
        api.request("POST", f"/exchanges/{quote(s.vhost, safe='')}/amq.default/publish", body={
            "properties": {"delivery_mode": 2}, "routing_key": queue, "payload": "m",
            "payload_encoding": "string"})
    wait_for(lambda: drainer.drain(s, "broker-1", ("broker-0", "broker-2")) == 2,
             timeout=2 * BROKER_STATS_LAG, interval=0.5, what="both stored messages to show")
    assert "@broker-2.example:" in asked["orders"] and "@broker-0.example:" in asked["gone"]
