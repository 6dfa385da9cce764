"""A standard space placed on the second broker of the pool: its router's autoLinks reach the
queue there, through either router (qdrouterd through the vhost relay of that broker, on its
port 5690+k, as `runplatform` starts it). The broker is the real node of test_broker_pool."""
import dataclasses
import subprocess
import sys
import uuid
from urllib.parse import quote

import pytest
from django.conf import settings
from proton import Message
from proton.utils import BlockingConnection

from config_service import services
from config_service.models import Address
from tests.conftest import CTX, b64, port_open, wait_for
from tests.workers.broker_pool import api, vhosts_on
from tests.workers.conftest import sync
from workers import endpoints

# Restarts or holds a broker every test shares: run apart from the others (make test).
pytestmark = pytest.mark.serial

BOTH_ROUTERS = True  # tests/workers/conftest.py: the embedded router and qdrouterd
PASSWORD = "app-password"


@pytest.fixture(scope="module")
def relay_to_second(router, second_broker):
    """qdrouterd's way into maas1's vhosts: the relay runplatform starts for it."""
    if router.kind != "qdrouterd":
        yield None
        return
    from django.test import override_settings

    from config_service.brokers import broker_pool
    from maas.management.commands.runplatform import relay_to_broker_args, router_facing_args

    with override_settings(MAAS_RABBITMQ_NODES=2):
        maas1 = broker_pool()[1]
    proc = subprocess.Popen([sys.executable, "-m", "dataplane.vhost_relay",
                             *router_facing_args("127.0.0.1", maas1.relay_port, maas1, tls=False),
                             *relay_to_broker_args(maas1, "amqp")], cwd=settings.BASE_DIR)
    wait_for(lambda: port_open(5691), 10, what="the vhost relay of maas1")
    yield proc
    proc.terminate()
    proc.wait(timeout=10)


def test_a_standard_space_s_router_reaches_the_queue_on_its_broker(tenant, pool, router,
                                                                   relay_to_second,
                                                                   redis_server):
    shared, second = pool
    filler = services.create_address_space(ctx=CTX, tenant=tenant, name="fill", type="brokered",
                                           plan="brokered-single-broker")  # "" has one now
    space = services.create_address_space(ctx=CTX, tenant=tenant, name=f"s{uuid.uuid4().hex[:5]}",
                                          type="standard", plan="standard-medium")
    assert (filler.broker, space.broker) == ("", "maas1")
    services.create_address(ctx=CTX, space=space, address="orders", type="queue",
                            plan="standard-small-queue")
    services.create_messaging_user(
        ctx=CTX, space=space, username="app",
        authentication={"type": "password", "password": b64(PASSWORD)},
        authorization=[{"addresses": ["*"], "operations": ["send", "recv"]}])
    try:
        sync(space)
        assert space.vhost in vhosts_on(second) and space.vhost not in vhosts_on(shared)
        conn = BlockingConnection(f"amqp://127.0.0.1:{router.amqp_port}",
                                  user=f"app@{space.vhost}", password=PASSWORD,
                                  allowed_mechs="PLAIN", allow_insecure_mechs=True, timeout=10,
                                  virtual_host=space.vhost)
        # Through the router into maas1's queue: accepted only once stored there (an autoLink
        # that had not attached would leave the sender without credit).
        conn.create_sender("orders").send(Message(body="through the router"), timeout=30)
        receiver = conn.create_receiver("orders", credit=1)
        assert receiver.receive(timeout=30).body == "through the router"
        receiver.accept()
        conn.close()
        path = f"/queues/{quote(space.vhost, safe='')}/orders"
        assert api(second, path).status_code == 200  # the queue is maas1's
    finally:
        services.delete_address_space(ctx=CTX, space=space)
        sync(space)


WHERE: dict = {}  # space uid -> SpaceEndpoints, read by `own_brokers`


def own_brokers(space):
    return WHERE[space.uid]


def _round_trip(router, space, address: str, bodies: list[str]) -> list[str]:
    conn = BlockingConnection(f"amqp://127.0.0.1:{router.amqp_port}",
                              user=f"app@{space.vhost}", password=PASSWORD,
                              allowed_mechs="PLAIN", allow_insecure_mechs=True, timeout=10,
                              virtual_host=space.vhost)
    try:
        sender = conn.create_sender(address)
        for body in bodies:  # each accepted only once stored on a broker
            sender.send(Message(body=body), timeout=30)
        receiver = conn.create_receiver(address, credit=len(bodies))
        got = []
        for _ in bodies:
            got.append(receiver.receive(timeout=30).body)
            receiver.accept()
        return got
    finally:
        conn.close()


def test_a_space_with_brokers_of_its_own_has_each_address_on_the_brokers_it_is_placed_on(
        tenant, pool, router, relay_to_second, redis_server, settings):
    """As on Kubernetes, where a standard space's placements name brokers of its own: the
    storage controller makes each queue on the broker (or, for a queue's partitions, every
    broker) its placement names, and the router reaches each through that broker's connector."""
    shared, second = pool
    space = services.create_address_space(ctx=CTX, tenant=tenant, name=f"o{uuid.uuid4().hex[:5]}",
                                          type="standard", plan="standard-medium")
    placed = {"orders": ["broker-0"], "invoices": ["broker-1"], "spread": ["broker-0", "broker-1"]}
    for address in placed:
        services.create_address(ctx=CTX, space=space, address=address, type="queue",
                                plan="standard-small-queue")
    services.create_messaging_user(
        ctx=CTX, space=space, username="app",
        authentication={"type": "password", "password": b64(PASSWORD)},
        authorization=[{"addresses": ["*"], "operations": ["send", "recv"]}])
    for address, clusters in placed.items():  # what Kubernetes' scheduling would record
        Address.objects.filter(space=space, address=address).update(
            placement=[{"clusterId": c, "containerId": f"{c}-0", "state": "Active"}
                       for c in clusters])
    WHERE[space.uid] = dataclasses.replace(endpoints.by_backend(space), broker=shared,
                                           placed=(("broker-0", shared), ("broker-1", second)))
    settings.MAAS_SPACE_ENDPOINTS = "tests.workers.test_broker_pool_router.own_brokers"
    try:
        sync(space)
        queues = {}
        for name, broker in (("broker-0", shared), ("broker-1", second)):
            listing = api(broker, f"/queues/{quote(space.vhost, safe='')}").json()
            queues[name] = {q["name"] for q in listing} & set(placed)
        assert queues == {"broker-0": {"orders", "spread"}, "broker-1": {"invoices", "spread"}}
        assert _round_trip(router, space, "orders", ["o1"]) == ["o1"]
        assert _round_trip(router, space, "invoices", ["i1"]) == ["i1"]
        # The partitions: the router balances the sends over both brokers' queues, and the
        # receiver gets every message from either.
        sent = [f"s{i}" for i in range(8)]
        assert sorted(_round_trip(router, space, "spread", sent)) == sorted(sent)
    finally:
        services.delete_address_space(ctx=CTX, space=space)
        sync(space)
    # Torn down on both brokers.
    assert space.vhost not in vhosts_on(shared) and space.vhost not in vhosts_on(second)
