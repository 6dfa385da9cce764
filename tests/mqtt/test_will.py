"""Last will through the gateway: published as the client's user when the client disappears
without DISCONNECT (socket closed, keep-alive expired), not after a clean DISCONNECT."""
import socket
import time

import pytest

from dataplane.gateway import codec
from tests.conftest import wait_for
from tests.mqtt.conftest import PASSWORD, Client, add, broker_connected, user
from tests.router.conftest import ADMIN_PASSWORD
from tests.workers.conftest import sync
from tests.workers.test_standard_space_e2e import wait_for_bindings

pytestmark = pytest.mark.django_db(transaction=True)
BOTH_ROUTERS = True  # tests/mqtt/conftest.py: the embedded router and qdrouterd


def raw_client(gateway, space, will, keep_alive=60) -> socket.socket:
    """An MQTT client that does nothing after CONNACK (no PINGREQ, no DISCONNECT)."""
    sock = socket.create_connection(("127.0.0.1", gateway.port), timeout=10)
    sock.sendall(codec.connect(f"dev-{time.monotonic_ns()}", f"app@{space.vhost}",
                               PASSWORD.encode(), keep_alive=keep_alive, will=will))
    assert sock.recv(4) == codec.connack(codec.ACCEPTED)
    return sock


@pytest.fixture
def watcher(gateway, space, router):
    add(space, "status", "topic", "standard-small-topic")
    user(space)
    sync(space)
    wait_for(lambda: broker_connected(router, space), 15, what="the space's broker connector")
    c = Client(gateway, space)
    assert c.subscribe("status/#", qos=1) == [1]
    wait_for_bindings(space, "status", 1)  # the receiver of `status/#` (the fanout)
    yield c
    c.close()


def test_the_will_is_published_when_the_socket_closes_without_disconnect(gateway, space,
                                                                          watcher):
    sock = raw_client(gateway, space, codec.Publish("status/dev1", b"offline", qos=1))
    sock.close()
    [msg] = watcher.received(1)
    assert (msg.topic, msg.payload) == ("status/dev1", b"offline")


def test_the_will_is_published_when_the_keep_alive_expires(gateway, space, watcher):
    sock = raw_client(gateway, space, codec.Publish("status/dev2", b"timed out"), keep_alive=1)
    started = time.monotonic()
    [msg] = watcher.received(1, timeout=10)
    assert (msg.topic, msg.payload) == ("status/dev2", b"timed out")
    assert time.monotonic() - started >= 1.0  # not before one and a half keep-alive periods
    assert sock.recv(1) == b""  # the gateway closed the connection
    sock.close()


def test_no_will_after_a_clean_disconnect(gateway, space, watcher):
    leaving = Client(gateway, space, will=("status/dev3", b"should not appear", 1))
    assert leaving.connected() == 0
    leaving.close()  # DISCONNECT
    assert leaving.disconnected.wait(5)
    sock = raw_client(gateway, space, codec.Publish("status/dev4", b"after"))
    sock.close()
    # the later client's will arrives, the earlier one's never did
    assert [(m.topic, m.payload) for m in watcher.received(1)] == [("status/dev4", b"after")]
    time.sleep(0.5)
    assert len(watcher.messages) == 1


def test_a_will_to_a_topic_the_user_may_not_send_to_is_not_published(gateway, space, watcher):
    user(space, "reader", rules=[{"addresses": ["status"], "operations": ["recv"]}])
    sync(space)
    sock = socket.create_connection(("127.0.0.1", gateway.port), timeout=10)
    sock.sendall(codec.connect("reader-1", f"reader@{space.vhost}", PASSWORD.encode(),
                               will=codec.Publish("status/forged", b"forged")))
    assert sock.recv(4) == codec.connack(codec.ACCEPTED)
    sock.close()
    sock = raw_client(gateway, space, codec.Publish("status/dev5", b"allowed"))
    sock.close()
    assert [(m.topic, m.payload) for m in watcher.received(1)] == [("status/dev5", b"allowed")]
    time.sleep(0.5)
    assert len(watcher.messages) == 1


def test_a_client_gone_before_its_connack_leaves_no_router_connection(router, gateway, space):
    from workers.clients.qdr import Management

    user(space)
    sync(space)

    def connections():
        mgmt = Management(f"amqp://127.0.0.1:{router.mgmt_port}", "admin", ADMIN_PASSWORD)
        try:
            return [c for c in mgmt.query("org.apache.qpid.dispatch.connection")
                    if str(c.get("user", "")).endswith(space.vhost)]
        finally:
            mgmt.close()

    live = Client(gateway, space)
    assert live.connected() == 0
    assert len(connections()) == 1  # the query sees a client's router connection
    live.close()
    for _ in range(5):
        sock = socket.create_connection(("127.0.0.1", gateway.port), timeout=10)
        sock.sendall(codec.connect(f"gone-{time.monotonic_ns()}", f"app@{space.vhost}",
                                   PASSWORD.encode()))
        sock.close()  # before the CONNACK
    # Each gone client's router connection opens, then closes once the gateway sees its client
    # gone; the first may not be open yet when the first look finds none: wait until none has
    # been seen for two seconds.
    deadline, quiet_since = time.monotonic() + 15, None
    while time.monotonic() < deadline:
        if connections():
            quiet_since = None
        elif quiet_since is None:
            quiet_since = time.monotonic()
        elif time.monotonic() - quiet_since >= 2:
            break
        time.sleep(0.2)
    assert connections() == []
