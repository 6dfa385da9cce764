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

from dataplane.router.broker_links import is_culprit, names_object, refused_object
from tests import broker
from tests.conftest import BROKER_STATS_COPY, BROKER_STATS_LAG

from .conftest import (
    ADDRESS,
    AUTO_LINK,
    CONNECTOR,
    RABBIT_API,
    RABBIT_AUTH,
    Rabbit,
    add_tenant,
    pump_until,
)

pytestmark = pytest.mark.slow

QUEUES = ("s1", "s2", "s3")
GROUP = {"users": "sam", "sources": "*", "targets": "*"}


def autolinks(mgmt, vhost: str, queue: str) -> None:
    mgmt.create(ADDRESS, f"{vhost}-{queue}", prefix=f"{vhost}/{queue}", waypoint=True)
    for direction in ("in", "out"):
        mgmt.create(AUTO_LINK, f"{vhost}-{queue}-{direction}", address=f"{vhost}/{queue}",
                    direction=direction, connection=f"{vhost}-broker",
                    externalAddress=f"/amq/queue/{queue}")


def connector(mgmt, vhost: str, rabbit_vhost: str) -> None:
    mgmt.create(CONNECTOR, f"{vhost}-broker", host="127.0.0.1", port=str(broker.AMQP_PORT),
                role="route-container", saslUsername="guest", saslPassword="guest",
                virtualHost=f"vhost:{rabbit_vhost}")


@pytest.fixture(scope="module", autouse=True)
def setup(router, mgmt, rabbit):
    for queue in QUEUES:
        rabbit.queue(queue)
    add_tenant(mgmt, "t5", {"sam": "sam-pw"}, {"all": GROUP})
    connector(mgmt, "t5", rabbit.vhost)
    for queue in QUEUES:
        autolinks(mgmt, "t5", queue)
    pump_until(lambda: statuses(mgmt) and all(s == "active" for s in statuses(mgmt).values()),
               mgmt.conn, timeout=15)


def statuses(mgmt) -> dict[str, str]:
    return {r["name"]: r["operStatus"] for r in mgmt.query(AUTO_LINK, ["name", "operStatus"])}


def broker_sessions(vhost: str) -> int:
    """RabbitMQ's internal connections for the vhost: one per AMQP 1.0 session (the list
    lags by up to a statistics lag, BROKER_STATS_LAG)."""
    r = requests.get(f"{RABBIT_API}/vhosts/{vhost}/connections", auth=RABBIT_AUTH,
                     params={"columns": "name,type"}, timeout=30)
    r.raise_for_status()
    return sum(1 for c in r.json() if c.get("type") == "direct")


def wait_sessions(vhost: str, expected: int, timeout: float = 2 * BROKER_STATS_LAG) -> int:
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


def test_a_refusal_during_the_first_attach_quarantines_only_the_link_it_names(mgmt):
    """All autoLinks attach at once when their connector connects; the refused one (first in
    line) ends the shared session while the others still wait for their answer. Only the
    link to the queue RabbitMQ's error names is quarantined: the others attach again on one
    shared session, not on a session each."""
    fresh = Rabbit()
    fresh.setup()
    try:
        for queue in QUEUES:
            fresh.queue(queue)
        add_tenant(mgmt, "t6", {"sue": "sue-pw"}, {"all": GROUP})
        for queue in ("missing", *QUEUES):  # made before the connector: attached together
            autolinks(mgmt, "t6", queue)
        connector(mgmt, "t6", fresh.vhost)
        healthy = [f"t6-{q}-{d}" for q in QUEUES for d in ("in", "out")]
        pump_until(lambda: all(statuses(mgmt)[name] == "active" for name in healthy),
                   mgmt.conn, timeout=15)
        # One shared session, and the refused link's own, short-lived ones (quarantining
        # every link that was waiting for its answer would leave one per healthy link too).
        assert most_sessions(fresh.vhost) <= 3
        assert statuses(mgmt)["t6-missing-in"] != "active"
    finally:
        for queue in ("missing", *QUEUES):
            for direction in ("in", "out"):
                mgmt.delete(AUTO_LINK, f"t6-{queue}-{direction}")
            mgmt.delete(ADDRESS, f"t6-{queue}")
        mgmt.delete(CONNECTOR, "t6-broker")
        fresh.teardown()


def most_sessions(vhost: str) -> int:
    """The most sessions seen over three seconds, once the list shows the vhost's sessions
    (it lags by up to a statistics lag, so one more copy of the statistics is let pass first)."""
    deadline = time.monotonic() + 2 * BROKER_STATS_LAG
    while broker_sessions(vhost) == 0 and time.monotonic() < deadline:
        time.sleep(0.5)
    time.sleep(BROKER_STATS_COPY + 1)
    seen = []
    for _ in range(6):
        seen.append(broker_sessions(vhost))
        time.sleep(0.5)
    return max(seen)


def test_the_refused_object_is_read_from_rabbitmqs_error():
    reason = ("amqp:not-found", "NOT_FOUND - no queue 'q.1' in vhost 'maas-t'")
    assert refused_object(reason) == "q.1"
    assert refused_object(("amqp:not-found", "NOT_FOUND - no exchange 'x' in vhost '/'")) == "x"
    assert refused_object(("amqp:internal-error", "something else")) is None
    assert refused_object(None) is None
    assert names_object("/amq/queue/q.1", "q.1")
    assert names_object("/queue/q.1", "q.1") and names_object("q.1", "q.1")
    assert names_object("/exchange/q.1/key", "q.1")
    assert not names_object("/amq/queue/q.10", "q.1")
    assert not names_object("/amq/queue/q.1", "queue")


def test_a_link_refused_twice_unanswered_is_quarantined_whatever_the_error_said():
    named = ("amqp:not-found", "NOT_FOUND - no queue 'a' in vhost 'v'")
    assert is_culprit(named, "/amq/queue/a", strikes=1)
    assert not is_culprit(named, "/amq/queue/b", strikes=1)  # a neighbour: shares again
    assert is_culprit(named, "/amq/queue/b", strikes=2)
    unnamed = ("amqp:internal-error", "boom")
    assert not is_culprit(unnamed, "/amq/queue/a", strikes=1)
    assert is_culprit(unnamed, "/amq/queue/a", strikes=2)
