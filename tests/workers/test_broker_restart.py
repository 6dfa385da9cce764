"""A RabbitMQ that restarts: MaaS's transient exchanges are gone, the broker watch notices, the
API stops calling the space's addresses Active, the storage controller makes them again, and no
acknowledged message is lost. Real RabbitMQ, (the test node) restarted with `rabbitmqctl stop_app/start_app`."""
import time
import uuid
from datetime import timedelta

import pytest
from django.test import override_settings
from django.utils import timezone
from proton import Message

from config_service import services
from config_service.models import AddressSpace, AgentState, RouterIncarnation
from config_service.status import address_status, agent_states
from tests import broker
from tests.conftest import CTX, b64, wait_for
from tests.workers import rabbit
from workers import dispatch
from workers.agents import runner
from workers.agents.storage import rabbitmq
from workers.agents.storage import watch as broker_watch
from workers.tasks import resync_candidates

# Restarts or holds a broker every test shares: run apart from the others (make test).
pytestmark = pytest.mark.serial

PASSWORD = "app-password"


@pytest.fixture
def space(transactional_db, redis_server, tenant):
    s = services.create_address_space(ctx=CTX, tenant=tenant, name=f"br{uuid.uuid4().hex[:5]}",
                                      type="brokered", plan="brokered-single-broker")
    for name, kind in (("orders", "queue"), ("news", "topic")):
        services.create_address(ctx=CTX, space=s, address=name, type=kind,
                                plan=f"brokered-{kind}")
    services.create_messaging_user(
        ctx=CTX, space=s, username="app",
        authentication={"type": "password", "password": b64(PASSWORD)},
        authorization=[{"addresses": ["*"], "operations": ["send", "recv"]}])
    runner.run(s.uid, "storage")
    yield s
    services.delete_address_space(ctx=CTX, space=s)
    apply(s)


def apply(space, **kw):
    """The storage controller's reconcile, retried while the broker starts the vhost again."""
    deadline = time.monotonic() + 60
    while True:
        try:
            return runner.run(space.uid, "storage", **kw)
        except runner.TransientError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.5)


def play_queued_reconcile(space):
    """What a reconcile the watch queued does when a worker takes it (no worker reads the resync
    queue here): it claims its pending mark, so the next restart queues one again, and applies
    the agents behind."""
    dispatch.claim(space.uid, resync=True)
    return apply(space, only_if_behind=True)


def phases(space) -> dict:
    space = AddressSpace.objects.get(uid=space.uid)
    states = agent_states([space.uid]).get(space.uid, {})
    return {a.name.split(".", 1)[1]: (address_status(space, a, states).phase,
                                      address_status(space, a, states).messages)
            for a in space.addresses.all()}


def exchanges(vhost: str) -> dict:
    from urllib.parse import quote

    return {x["name"]: x for x in rabbit.api(f"/exchanges/{quote(vhost, safe='')}").json()}


def send_durable(vhost: str, login: str, body: str) -> None:
    """A durable message to `orders` (a broker keeps only those over a restart), sent once the
    broker accepted it."""
    conn = rabbit.connect(vhost, login, PASSWORD)
    try:
        conn.create_sender("/exchange/orders").send(Message(body=body, durable=True))
    finally:
        conn.close()


def restart_rabbitmq() -> None:
    for command in ("stop_app", "start_app"):
        broker.rabbitmqctl(command)
    wait_for(lambda: rabbit.api("/overview").status_code == 200, 60, what="the management API")


def test_a_restart_is_repaired_without_losing_an_acknowledged_message(space):
    login = rabbitmq.broker_username(space.vhost, "app")
    broker_watch.tick()  # the marker is there from now on
    play_queued_reconcile(space)
    assert broker_watch.tick().restarted is False  # nothing happened: nothing to repair
    assert {n: x["durable"] for n, x in exchanges(space.vhost).items()
            if n in ("orders", "news")} == {"orders": False, "news": False}
    send_durable(space.vhost, login, "before")  # acknowledged: the broker stored it

    restart_rabbitmq()
    assert "orders" not in exchanges(space.vhost)  # the restart dropped the transient ones
    assert "orders" in rabbit.queue_names(space.vhost)  # and kept the durable queue

    ticks = []  # beat ticks every 5 s; a broker just started may not answer the first
    wait_for(lambda: ticks.append(broker_watch.tick()) or ticks[-1].reachable, 30, interval=1,
             what="the watch to read the broker")
    seen = ticks[-1]
    assert seen.restarted
    assert seen.invalidated >= 1 and seen.queued >= 1
    assert phases(space)["orders"] == ("Configuring", [broker_watch.RESTORING])
    assert broker_watch.tick().restarted is False  # the marker is back

    # What the queued reconcile does (only the agents behind: an invalidated one is).
    assert play_queued_reconcile(space) == AddressSpace.objects.get(uid=space.uid).last_sequence
    assert {k: v[0] for k, v in phases(space).items()} == {"orders": "Active", "news": "Active"}
    assert {"orders", "news"} <= set(exchanges(space.vhost))
    rabbit.send(space.vhost, login, PASSWORD, "orders", "after")
    assert rabbit.receive(space.vhost, login, PASSWORD, "orders") == "before"
    assert rabbit.receive(space.vhost, login, PASSWORD, "orders") == "after"


def test_a_broker_without_the_watch_vhost_invalidates_nothing(space):
    apply(space)
    with override_settings(MAAS_BROKER_WATCH_VHOST=f"maas-missing-{uuid.uuid4().hex[:6]}"):
        seen = broker_watch.tick()
    assert (seen.reachable, seen.invalidated) == (False, 0)
    assert not AgentState.objects.get(space_uid=space.uid, kind="storage").invalidated


def test_the_resync_queues_an_invalidated_storage_state_while_a_router_watch_runs(space):
    apply(space)
    now = timezone.now()
    RouterIncarnation.objects.create(management_url="amqp://watched:1", token="t",
                                     started_at=now - timedelta(hours=1), uptime_seconds=3600,
                                     checked_at=now)
    assert space.uid not in resync_candidates(now)[0]
    AgentState.objects.filter(space_uid=space.uid, kind="storage").update(
        invalidated=broker_watch.RESTORING, invalidated_at=now)
    assert space.uid in resync_candidates(now)[0]
