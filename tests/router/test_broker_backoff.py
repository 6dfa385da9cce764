"""The embedded router tries a refused broker link, and a connection RabbitMQ ends at once,
less and less often (real router, real RabbitMQ, a proxy that counts what the router sends).

At 1,000 spaces RabbitMQ spent its cores on the router's retries: an autoLink to a queue not
made yet attached again every second on a session of its own (an internal connection with a
channel and statistics in RabbitMQ 3.10), and a connector to a vhost not started yet was
ended right after it opened and reconnected every 0.4 s: 70 broker connections a second.
"""
import time

import pytest

from .conftest import (
    ADDRESS,
    AUTO_LINK,
    CONNECTOR,
    add_tenant,
    pump_until,
)
from .frame_counter import FrameCounter

pytestmark = pytest.mark.slow

GROUP = {"users": "bo", "sources": "*", "targets": "*"}


@pytest.fixture
def proxy():
    counter = FrameCounter()
    yield counter
    counter.close()


def connector(mgmt, name: str, port: int, rabbit_vhost: str) -> None:
    mgmt.create(CONNECTOR, name, host="127.0.0.1", port=str(port), role="route-container",
                saslUsername="guest", saslPassword="guest", virtualHost=f"vhost:{rabbit_vhost}")


def autolink(mgmt, tenant: str, queue: str, connection: str) -> None:
    mgmt.create(ADDRESS, f"{tenant}-{queue}", prefix=f"{tenant}/{queue}", waypoint=True)
    mgmt.create(AUTO_LINK, f"{tenant}-{queue}-in", address=f"{tenant}/{queue}",
                direction="in", connection=connection, externalAddress=f"/amq/queue/{queue}")


def status(mgmt, name: str) -> str:
    rows = mgmt.query(AUTO_LINK, ["name", "operStatus"])
    return next(r["operStatus"] for r in rows if r["name"] == name)


def test_a_refused_autolink_tries_again_less_and_less_often(mgmt, rabbit, proxy):
    rabbit.queue("here")
    add_tenant(mgmt, "b1", {"bo": "bo-pw"}, {"all": GROUP})
    connector(mgmt, "b1-broker", proxy.port, rabbit.vhost)
    autolink(mgmt, "b1", "here", "b1-broker")
    pump_until(lambda: status(mgmt, "b1-here-in") == "active", mgmt.conn, timeout=15)
    try:
        before = proxy.count("attach")
        autolink(mgmt, "b1", "missing", "b1-broker")  # RabbitMQ refuses it: no such queue
        time.sleep(14)
        # Its first attach, then tries after 1, 2, 4 and 8 s (one a second was 14), and the
        # healthy link's attach again after the first refusal ended their shared session.
        tries = proxy.count("attach") - before
        assert 3 <= tries <= 7, tries
        assert status(mgmt, "b1-here-in") == "active"
        assert status(mgmt, "b1-missing-in") != "active"

        rabbit.queue("missing")  # made at last: attached at the next try (at most 10 s on)
        pump_until(lambda: status(mgmt, "b1-missing-in") == "active", mgmt.conn, timeout=15)
    finally:
        for queue in ("here", "missing"):
            mgmt.delete(AUTO_LINK, f"b1-{queue}-in")
            mgmt.delete(ADDRESS, f"b1-{queue}")
        mgmt.delete(CONNECTOR, "b1-broker")


def test_a_connector_rabbitmq_ends_at_once_backs_off(mgmt, proxy):
    """RabbitMQ accepts the connection, then ends it when the router begins a session: so it
    does for a vhost not running (stopped, or not started yet), and for one not there."""
    add_tenant(mgmt, "b2", {"bo": "bo-pw"}, {"all": GROUP})
    connector(mgmt, "b2-broker", proxy.port, "maas-test-no-such-vhost")
    autolink(mgmt, "b2", "orders", "b2-broker")  # its session is what RabbitMQ refuses
    try:
        time.sleep(12)
        # Tries after 0.2, 0.4, 0.8, 1.6, 3.2 and 5 s (a backoff reset by each open was a try
        # every 0.4 s, 30 in these 12 s).
        assert 3 <= proxy.connections <= 9, proxy.connections
        assert proxy.count("begin") >= 3  # it opened each, and was ended after its begin
    finally:
        mgmt.delete(AUTO_LINK, "b2-orders-in")
        mgmt.delete(ADDRESS, "b2-orders")
        mgmt.delete(CONNECTOR, "b2-broker")
