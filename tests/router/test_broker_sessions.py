"""The embedded router's autoLinks share one session per connector, against the real RabbitMQ.

RabbitMQ 3.10 makes an internal connection for every AMQP 1.0 session (a session per autoLink
was 40 of them per standard space, 32,000 at 100,000 addresses); it also ends the session of
a link it refuses. So the healthy autoLinks share one session, and one the broker refused
(its queue is missing) attaches alone from then on, without ending the others' session
every time it tries again.
"""
import time

import pytest
import requests
from proton import Message

from .conftest import (
    ADDRESS,
    AUTO_LINK,
    CONNECTOR,
    RABBIT_API,
    RABBIT_AUTH,
    add_tenant,
    pump_until,
)

QUEUES = ("s1", "s2", "s3")
GROUP = {"users": "sam", "sources": "*", "targets": "*"}


def autolinks(mgmt, vhost: str, queue: str) -> None:
    mgmt.create(ADDRESS, f"{vhost}-{queue}", prefix=f"{vhost}/{queue}", waypoint=True)
    for direction in ("in", "out"):
        mgmt.create(AUTO_LINK, f"{vhost}-{queue}-{direction}", address=f"{vhost}/{queue}",
                    direction=direction, connection=f"{vhost}-broker",
                    externalAddress=f"/amq/queue/{queue}")


@pytest.fixture(scope="module", autouse=True)
def setup(router, mgmt, rabbit):
    for queue in QUEUES:
        rabbit.queue(queue)
    add_tenant(mgmt, "t5", {"sam": "sam-pw"}, {"all": GROUP})
    mgmt.create(CONNECTOR, "t5-broker", host="127.0.0.1", port="5672", role="route-container",
                saslUsername="guest", saslPassword="guest", virtualHost=f"vhost:{rabbit.vhost}")
    for queue in QUEUES:
        autolinks(mgmt, "t5", queue)
    pump_until(lambda: statuses(mgmt) and all(s == "active" for s in statuses(mgmt).values()),
               mgmt.conn, timeout=15)


def statuses(mgmt) -> dict[str, str]:
    return {r["name"]: r["operStatus"] for r in mgmt.query(AUTO_LINK, ["name", "operStatus"])}


def broker_sessions(vhost: str) -> int:
    """RabbitMQ's internal connections for the vhost: one per AMQP 1.0 session (the list
    lags by a statistics interval)."""
    r = requests.get(f"{RABBIT_API}/vhosts/{vhost}/connections", auth=RABBIT_AUTH,
                     params={"columns": "name,type"}, timeout=30)
    r.raise_for_status()
    return sum(1 for c in r.json() if c.get("type") == "direct")


def wait_sessions(vhost: str, expected: int, timeout: float = 20.0) -> int:
    deadline = time.monotonic() + timeout
    while (seen := broker_sessions(vhost)) != expected and time.monotonic() < deadline:
        time.sleep(0.5)
    return seen


def test_six_autolinks_to_three_queues_use_one_broker_session(rabbit):
    assert wait_sessions(rabbit.vhost, 1) == 1


def test_a_refused_autolink_attaches_alone_and_the_others_stay_attached(router, mgmt, rabbit):
    autolinks(mgmt, "t5", "missing")  # no such queue: RabbitMQ ends the session it is on
    healthy = [f"t5-{q}-{d}" for q in QUEUES for d in ("in", "out")]
    # That first refusal ends the shared session: the others attach again at once.
    pump_until(lambda: all(statuses(mgmt)[name] == "active" for name in healthy),
               mgmt.conn, timeout=15)
    time.sleep(1.5)  # the refused ones, quarantined, have tried again on sessions of their own
    deadline = time.monotonic() + 4  # and go on trying every second meanwhile
    while time.monotonic() < deadline:
        now = statuses(mgmt)
        assert all(now[name] == "active" for name in healthy), now
        time.sleep(0.1)
    assert statuses(mgmt)["t5-missing-in"] != "active"
    rows = {r["name"]: r for r in mgmt.query(AUTO_LINK, ["name", "lastError"])}
    assert "missing" in (rows["t5-missing-in"]["lastError"] or "")

    conn = router.connect("sam", "sam-pw", vhost="t5")  # and messages still go through
    sender = conn.create_sender("s2")
    sender.send(Message(body="through the shared session"))
    receiver = conn.create_receiver("s2", credit=1)
    assert receiver.receive(10).body == "through the shared session"
    receiver.accept()
    conn.close()

    rabbit.queue("missing")  # made at last: the quarantined links attach on their own sessions
    pump_until(lambda: statuses(mgmt)["t5-missing-in"] == "active", mgmt.conn, timeout=15)
    for direction in ("in", "out"):
        mgmt.delete(AUTO_LINK, f"t5-missing-{direction}")
    mgmt.delete(ADDRESS, "t5-missing")
